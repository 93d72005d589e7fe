"""A minimal writer of shardfeed datasets, from SPEC.md alone: a second writer next to
`shardfeed pack`, for tests that need datasets pack cannot make from its inputs — variable-
length fields of numeric dtypes (pack's list, tar and ImageFolder inputs give `bytes` fields, its
.npy input fixed shapes), any mix of storage kinds and codecs per field, schemas chosen value by
value. No fsync, no resume: test data only. XXH3-64 and zstd come from libxxhash and libzstd
through ctypes."""
import ctypes
import ctypes.util
import os
import struct

import numpy as np

_lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
_lib.XXH3_64bits.restype = ctypes.c_uint64
_lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

_zstd = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
_zstd.ZSTD_compressBound.restype = ctypes.c_size_t
_zstd.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
_zstd.ZSTD_compress.restype = ctypes.c_size_t
_zstd.ZSTD_compress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.c_int]
_zstd.ZSTD_isError.restype = ctypes.c_uint
_zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]

FIXED, VAR, INLINE = 0, 1, 2
CODECS = {None: 0, "none": 0, "zstd": 1}
DTYPES = {"bytes": (0, 1), "bool": (1, 1), "uint8": (2, 1), "int8": (3, 1), "uint16": (4, 2),
          "int16": (5, 2), "uint32": (6, 4), "int32": (7, 4), "uint64": (8, 8), "int64": (9, 8),
          "float16": (10, 2), "float32": (11, 4), "float64": (12, 8), "complex64": (13, 8),
          "complex128": (14, 16)}


def xxh3(b):
    b = bytes(b)
    return _lib.XXH3_64bits(b, len(b))


def zstd_compress(raw, level=3):
    """One zstd frame with its content size in the header (SPEC.md "Compression")."""
    cap = _zstd.ZSTD_compressBound(len(raw))
    out = ctypes.create_string_buffer(cap)
    n = _zstd.ZSTD_compress(out, cap, bytes(raw), len(raw), level)
    assert not _zstd.ZSTD_isError(n)
    return out.raw[:n]


def align_up(v, a):
    return (v + a - 1) // a * a


def write_dataset(out, fields, samples, align=64, per_shard=None, dataset_id=0x5F5EED, keys=None,
                  metadata=None):
    """fields: [(name, dtype name, storage, shape[, codec])] (shape () for scalars, ignored for
    VAR; codec "zstd" compresses each value of a fixed or variable field);
    samples: [{name: value}] with values numpy arrays (fixed, inline, numeric VAR) or bytes
    (VAR of dtype bytes). Keys are the sample numbers unless `keys` gives them (str or bytes,
    written as they are, valid or not); `metadata`: {key: bytes} entries, e.g. {"source": b"list"}."""
    os.makedirs(out)
    table = b""
    desc = []
    for name, dt, storage, shape, *rest in fields:
        codec = CODECS[rest[0] if rest else None]
        code, esz = DTYPES[dt]
        if storage == VAR:
            shape, item = (0,), 0
        else:
            item = int(np.prod(shape, dtype=np.int64)) * esz
        table += (name.encode().ljust(64, b"\0") + struct.pack("<BBBB4x", code, len(shape), storage, codec)
                  + struct.pack("<8Q", *(list(shape) + [0] * (8 - len(shape)))) + struct.pack("<Q", item))
        desc.append((name, code, esz, storage, codec))
    schema_hash = xxh3(table)
    n_var = sum(1 for d in desc if d[3] == VAR or d[4])  # a length slot each
    n_inline = sum(1 for d in desc if d[3] == INLINE)
    entry_size = 32 + 8 * (n_var + n_inline)
    per_shard = per_shard or len(samples)
    shard_table = b""
    for si, first in enumerate(range(0, len(samples), per_shard)):
        chunk = samples[first:first + per_shard]
        data_offset = align_up(128, align)
        body = bytearray(data_offset - 128)
        pos = data_offset
        entries, key_area = b"", b""
        for k, s in enumerate(chunk):
            key = str(first + k) if keys is None else keys[first + k]
            key = key.encode() if isinstance(key, str) else bytes(key)
            rec_off = pos
            end = pos
            payload, var_lens, inline = b"", [], b""
            for name, code, esz, storage, codec in desc:
                v = s[name]
                raw = bytes(v) if isinstance(v, (bytes, bytearray)) else np.ascontiguousarray(v).astype(
                    np.dtype(v.dtype).newbyteorder("<")).tobytes()
                if storage == INLINE:
                    inline += raw.ljust(8, b"\0")
                    continue
                if codec:
                    raw = zstd_compress(raw)  # stored bytes: laid out and hashed as such
                start = align_up(end, align)  # rec_off is aligned: the first field starts there
                body += bytes(start - pos) + raw
                pos = end = start + len(raw)
                payload += raw
                if storage == VAR or codec:
                    var_lens.append(len(raw))
            size = end - rec_off
            entries += struct.pack("<QQQIHH", rec_off, size, xxh3(payload), len(key_area), len(key), 0)
            entries += struct.pack(f"<{len(var_lens)}Q", *var_lens) + inline
            key_area += key
            nxt = align_up(pos, align)
            body += bytes(nxt - pos)
            pos = nxt
        index = entries + key_area
        assert len(entries) == entry_size * len(chunk)
        index_offset = pos
        head = struct.pack("<8sHHIIIQQQQQQIIQQ24x", b"\x89SFSHRD\n", 1, 0, 0, 0, align, si, len(chunk),
                           first, data_offset, index_offset, len(index), entry_size, len(desc),
                           schema_hash, dataset_id)
        hsum = xxh3(head)
        isum = xxh3(index)
        foot = struct.pack("<QQQQQ8x", index_offset, len(index), len(chunk), isum, hsum)
        foot += struct.pack("<Q", xxh3(foot)) + b"\x89SFSEND\n"
        blob = head + struct.pack("<Q", hsum) + bytes(body) + index + foot
        with open(os.path.join(out, "shard-%06d.sfs" % si), "wb") as f:
            f.write(blob)
        shard_table += struct.pack("<QQQQQ8x", len(chunk), first, len(blob), hsum, isum)
    nshards = len(shard_table) // 48
    meta = b"".join(struct.pack("<II", len(k.encode()), len(v)) + k.encode() + v
                    for k, v in (metadata or {}).items())
    man = struct.pack("<8sHHIIIQQIIQ8x", b"\x89SFMANI\n", 1, 0, 0, 0, len(desc), nshards, len(samples),
                      align, len(meta), dataset_id)
    man += table + shard_table + meta
    man += struct.pack("<Q", xxh3(man))
    with open(os.path.join(out, "manifest.sfm"), "wb") as f:
        f.write(man)
    return out




def _tiny_field_table(item):
    code, _ = DTYPES["uint8"]
    return (b"x".ljust(64, b"\0") + struct.pack("<BBBB4x", code, 1, FIXED, 0)
            + struct.pack("<8Q", item, 0, 0, 0, 0, 0, 0, 0) + struct.pack("<Q", item))


def _tiny_shard(path, si, first, count, schema_hash, sums, item, align, dataset_id):
    """Writes shard si (records first .. first+count) and returns its manifest row."""
    ids = np.arange(first, first + count, dtype=np.int64)
    data_offset = align_up(128, align)
    body = np.zeros((count, align), np.uint8)  # each record padded to the alignment
    body[:, :item] = (ids % 251).astype(np.uint8)[:, None]
    keys = [str(i).encode() for i in range(first, first + count)]
    klen = np.fromiter((len(k) for k in keys), np.uint16, count)
    koff = np.zeros(count, np.uint32)
    np.cumsum(klen[:-1], out=koff[1:])
    ent = np.zeros(count, np.dtype([("off", "<u8"), ("size", "<u8"), ("sum", "<u8"), ("koff", "<u4"),
                                    ("klen", "<u2"), ("z", "<u2")]))
    ent["off"] = data_offset + np.arange(count, dtype=np.uint64) * align
    ent["size"] = item
    ent["sum"] = sums[ids % 251]
    ent["koff"] = koff
    ent["klen"] = klen
    index = ent.tobytes() + b"".join(keys)
    index_offset = data_offset + count * align
    head = struct.pack("<8sHHIIIQQQQQQIIQQ24x", b"\x89SFSHRD\n", 1, 0, 0, 0, align, si, count, first,
                       data_offset, index_offset, len(index), 32, 1, schema_hash, dataset_id)
    hsum, isum = xxh3(head), xxh3(index)
    foot = struct.pack("<QQQQQ8x", index_offset, len(index), count, isum, hsum)
    foot += struct.pack("<Q", xxh3(foot)) + b"\x89SFSEND\n"
    with open(path, "wb") as f:
        f.write(head + struct.pack("<Q", hsum))
        f.write(body.tobytes())
        f.write(index)
        f.write(foot)
        size = f.tell()
    return struct.pack("<QQQQQ8x", count, first, size, hsum, isum)


def write_tiny_dataset(out, n, per_shard=1_000_000, item=8, align=64, dataset_id=0x7115):
    """A dataset of n records of one field `x`, uint8[item], every byte of sample i being
    i % 251, keys "0", "1", ..., written a shard at a time with numpy (no loop per record): 10
    million records in seconds, 20,000 one-record shards in a few. `shardfeed verify` accepts it."""
    assert 0 < item <= align, "a record is padded to one alignment unit"
    os.makedirs(out)
    table = _tiny_field_table(item)
    schema_hash = xxh3(table)
    sums = np.array([xxh3(bytes([v]) * item) for v in range(251)], np.uint64)
    rows = []
    for si, first in enumerate(range(0, n, per_shard)):
        count = min(per_shard, n - first)
        rows.append(_tiny_shard(os.path.join(out, "shard-%06d.sfs" % si), si, first, count,
                                schema_hash, sums, item, align, dataset_id))
    man = struct.pack("<8sHHIIIQQIIQ8x", b"\x89SFMANI\n", 1, 0, 0, 0, 1, len(rows), n, align, 0,
                      dataset_id)
    man += table + b"".join(rows)
    man += struct.pack("<Q", xxh3(man))
    with open(os.path.join(out, "manifest.sfm"), "wb") as f:
        f.write(man)
    return out
