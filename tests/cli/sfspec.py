"""A second, independent reader of the shardfeed format, written from SPEC.md
alone (no C code shared). Tests use it to check that files the C library
writes are what the spec says, byte for byte. It checks structure, not
checksums (Python's standard library has no XXH3). zstd values (codec 1) are
decompressed with libzstd through ctypes."""
import ctypes
import ctypes.util
import os
import struct

import numpy as np

SHARD_MAGIC = b"\x89SFSHRD\n"
FOOTER_MAGIC = b"\x89SFSEND\n"
MANIFEST_MAGIC = b"\x89SFMANI\n"
DTYPES = {0: "|u1", 1: "|b1", 2: "|u1", 3: "|i1", 4: "<u2", 5: "<i2", 6: "<u4", 7: "<i4", 8: "<u8",
          9: "<i8", 10: "<f2", 11: "<f4", 12: "<f8", 13: "<c8", 14: "<c16"}


def align_up(v, a):
    return (v + a - 1) // a * a


_zstd = None


def zstd_decompress(stored):
    """SPEC.md "Compression": one frame, content size in its header, exactly used."""
    global _zstd
    if _zstd is None:
        _zstd = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
        _zstd.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
        _zstd.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _zstd.ZSTD_findFrameCompressedSize.restype = ctypes.c_size_t
        _zstd.ZSTD_findFrameCompressedSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _zstd.ZSTD_decompress.restype = ctypes.c_size_t
        _zstd.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                          ctypes.c_size_t]
    assert stored[:4] == b"\x28\xb5\x2f\xfd", "not a zstd frame"
    size = _zstd.ZSTD_getFrameContentSize(stored, len(stored))
    assert size <= 1 << 30, "no content size, or too large"
    assert _zstd.ZSTD_findFrameCompressedSize(stored, len(stored)) == len(stored)
    out = ctypes.create_string_buffer(max(size, 1))
    assert _zstd.ZSTD_decompress(out, size, stored, len(stored)) == size
    return out.raw[:size]


def read_manifest(dataset_dir):
    with open(os.path.join(dataset_dir, "manifest.sfm"), "rb") as f:
        b = f.read()
    assert b[:8] == MANIFEST_MAGIC
    major, minor, req, opt, nfields, nshards, nrec, align, meta_size, dataset_id, reserved = \
        struct.unpack_from("<HHIIIQQIIQQ", b, 8)
    assert (major, req, reserved) == (1, 0, 0)
    fields = []
    p = 64
    for _ in range(nfields):
        name = b[p:p + 64].rstrip(b"\0").decode()
        dtype, ndim, storage, codec = b[p + 64:p + 68]
        shape = struct.unpack_from("<8Q", b, p + 72)[:ndim]
        item_size, = struct.unpack_from("<Q", b, p + 136)
        fields.append(dict(name=name, dtype=dtype, ndim=ndim, storage=storage, codec=codec,
                           shape=tuple(shape), item_size=item_size))
        p += 144
    shards = []
    for _ in range(nshards):
        count, first, size, hsum, isum, res = struct.unpack_from("<6Q", b, p)
        shards.append(dict(count=count, first=first, file_size=size))
        p += 48
    metadata = {}
    end = p + meta_size
    while p < end:
        klen, vlen = struct.unpack_from("<II", b, p)
        key = b[p + 8:p + 8 + klen].decode()
        metadata[key] = b[p + 8 + klen:p + 8 + klen + vlen]
        p += 8 + klen + vlen
    assert p == end and p + 8 == len(b)
    return dict(align=align, records=nrec, fields=fields, shards=shards, dataset_id=dataset_id,
                metadata=metadata, version=(major, minor))


def class_names(manifest):
    """The "class_names" metadata entry: u32 length + UTF-8 name, per label."""
    v = manifest["metadata"].get("class_names", b"")
    names, p = [], 0
    while p < len(v):
        n, = struct.unpack_from("<I", v, p)
        names.append(v[p + 4:p + 4 + n].decode())
        p += 4 + n
    return names


def read_records(dataset_dir):
    """Yields (key, {field: numpy array}) for every record, in dataset order."""
    m = read_manifest(dataset_dir)
    fields = m["fields"]
    for f in fields:
        assert f["codec"] in (0, 1) and not (f["codec"] and f["storage"] == 2)
    # A length slot per variable-length or compressed field, in schema order.
    n_var = sum(1 for f in fields if f["storage"] == 1 or f["codec"])
    inline = [f for f in fields if f["storage"] == 2]
    entry_size = 32 + 8 * (n_var + len(inline))
    for i, sd in enumerate(m["shards"]):
        with open(os.path.join(dataset_dir, "shard-%06d.sfs" % i), "rb") as f:
            b = f.read()
        assert len(b) == sd["file_size"]
        assert b[:8] == SHARD_MAGIC and b[-8:] == FOOTER_MAGIC
        (major, minor, req, opt, align, shard_index, count, first, data_off, index_off,
         index_size, entry_sz, nfields) = struct.unpack_from("<HHIIIQQQQQQII", b, 8)
        assert (shard_index, count, first, align) == (i, sd["count"], sd["first"], m["align"])
        assert data_off == align_up(128, align) and entry_sz == entry_size
        assert b[128:data_off] == b"\0" * (data_off - 128)
        keys_at = index_off + count * entry_size
        for r in range(count):
            e = index_off + r * entry_size
            off, size, _checksum, key_off, key_len = struct.unpack_from("<QQQIH", b, e)
            key = b[keys_at + key_off:keys_at + key_off + key_len].decode()
            out = {}
            pos, k, inl, slot = off, 0, 0, 0
            for f in fields:
                dt = np.dtype(DTYPES[f["dtype"]])
                if f["storage"] == 2:
                    raw = b[e + 32 + 8 * (n_var + inl):][:f["item_size"]]
                    out[f["name"]] = np.frombuffer(raw, dtype=dt).reshape(f["shape"])
                    inl += 1
                    continue
                stored = f["item_size"]
                if f["storage"] == 1 or f["codec"]:
                    stored, = struct.unpack_from("<Q", b, e + 32 + 8 * slot)
                    slot += 1
                start = off if k == 0 else align_up(pos, align)
                raw = b[start:start + stored]
                if f["codec"] == 1:
                    assert stored > 0
                    raw = zstd_decompress(raw)
                shape = (len(raw) // dt.itemsize,) if f["storage"] == 1 else f["shape"]
                assert f["storage"] == 1 or len(raw) == f["item_size"]
                if f["storage"] == 1 and f["dtype"] == 0:
                    out[f["name"]] = bytes(raw)  # opaque bytes stay bytes
                else:
                    out[f["name"]] = np.frombuffer(raw, dtype=dt).reshape(shape)
                pos = start + stored
                k += 1
            assert pos - off == size
            yield key, out
