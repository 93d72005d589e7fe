#!/usr/bin/python3
"""Regenerates the seed corpora under tests/fuzz/corpus/<target>/.

  /usr/bin/python3 tests/fuzz/make_corpus.py path/to/shardfeed

Seeds are small (the whole corpus stays well under 200 KB) and deterministic
(fixed inputs, so packing gives the same bytes). The input layouts are the
ones documented at the top of each tests/fuzz/fuzz_*.c. Commit the output;
libFuzzer's own discoveries go to a scratch directory (tests/fuzz/run.sh),
not here.
"""
import bz2
import gzip
import io
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def out(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy_bytes(arr, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, arr)
    else:
        np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def raw_npy(header, data, major=1):
    """A hand-written v1.0/2.0 file around `header` (a dict literal)."""
    h = header.encode()
    prefix = 10 if major == 1 else 12
    pad = 64 - (prefix + len(h) + 1) % 64
    n = len(h) + pad + 1
    size = struct.pack("<H", n) if major == 1 else struct.pack("<I", n)
    return b"\x93NUMPY" + bytes([major, 0]) + size + h + b" " * pad + b"\n" + data


def npy_seeds():
    t = "fuzz_npy"
    out(t, "f32_3x2", npy_bytes(np.arange(6, dtype="<f4").reshape(3, 2)))
    out(t, "u8_scalar", npy_bytes(np.uint8(7)))
    out(t, "i64_scalar", npy_bytes(np.int64(-3)))
    out(t, "be_i32_2x3_fortran", npy_bytes(np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3))))
    out(t, "be_c16_2", npy_bytes(np.array([1 + 2j, -3.5 + 0.25j], dtype=">c16")))
    out(t, "f16_2x2x2_fortran", npy_bytes(np.asfortranarray(np.arange(8, dtype="<f2").reshape(2, 2, 2))))
    out(t, "bool_4", npy_bytes(np.array([True, False, True, True])))
    out(t, "empty_0x3", npy_bytes(np.zeros((0, 3), dtype="<u2")))
    out(t, "v2_u4_5", npy_bytes(np.arange(5, dtype="<u4"), version=(2, 0)))
    out(t, "v3_i8_2", npy_bytes(np.array([1, -1], dtype="i1"), version=(3, 0)))
    out(t, "c8_8dims", npy_bytes(np.zeros((1, 2, 1, 2, 1, 1, 2, 1), dtype="<c8")))
    # Refused ones: the parser's error paths.
    out(t, "bad_object", raw_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", bytes(16)))
    out(t, "bad_extra_key", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }", bytes(8)))
    out(t, "bad_structured", raw_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", bytes(4)))
    out(t, "long_python2_dims", raw_npy("{'descr': '<u2', 'fortran_order': False, 'shape': (2L, 1L), }", bytes(4)))
    out(t, "truncated", npy_bytes(np.arange(16, dtype="<f8"))[:-5])


def list_seeds():
    """fuzz_list: [name selector: 0 .csv, 1 .tsv, 2 .txt] + the list's bytes."""
    t = "fuzz_list"
    csv, tsv, txt = b"\x00", b"\x01", b"\x02"
    out(t, "csv_header_types", csv + b'path,label,score,n,name\nimg/a.png,0,0.5,7,cat\n'
        b'img/b.png,1,1e-05,-12,"dog, big"\nimg/c.png,2,2500.0,0,""\n')
    out(t, "csv_no_header", csv + b"a.bin,3,7\nb.bin,-1,12\n")
    out(t, "tsv_quotes", tsv + b'a\t0\tx y\nb\t1\t"q""t"\n"c\td"\t2\t"tab\tin"\n')
    out(t, "txt_tab_floats", txt + b"p\tlabel\tv\nq/1\t2\t-0.0\nq/2\t3\tnan\nq/3\t4\t-inf\n")
    out(t, "txt_comma", txt + b"x,1\ny,9223372036854775807\n")
    out(t, "bom_crlf_empty_lines", csv + b"\xef\xbb\xbfpath,label\r\nf1,1\r\n\r\n\nf2,-2\r\n")
    out(t, "quoted_newlines", csv + b'path,label,note\na,1,"multi\nline"\nc,2,"x"""\n"d",3,"\r\n"\n')
    out(t, "paths_dot_slash", csv + b"./a,0\n/b,1\n.//c,2\n\xc3\xa9t\xc3\xa9/x y.png,3\n")
    out(t, "float_column", csv + b"path,label,f\na,0,1.0\nb,1,2500.0\nc,2,1.5e+16\nd,3,inf\ne,4,0.0001\n")
    out(t, "text_column_of_numbers", csv + b"path,label,x\na,0,007\nb,1,7\nc,2,0x1A\nd,3, 7\n")
    out(t, "int_limits", csv + b"path,label,n\na,0,9223372036854775807\nb,-9223372036854775808,-1\n")
    out(t, "no_final_newline", csv + b"path,label\na,1")
    # Refused ones: the parser's and the typing's error paths.
    out(t, "bad_label_leading_zero", csv + b"a,007\n")
    out(t, "bad_label_text_row", csv + b"path,label\na,x\n")
    out(t, "header_only", csv + b"path,label\n")
    out(t, "repeated_key", csv + b"a,0\n./a,1\n")
    out(t, "bad_key_dotdot", csv + b"../x,0\n")
    out(t, "cell_count", csv + b"a,0,1\nb,1\n")
    out(t, "unclosed_quote", csv + b'a,"0\n')
    out(t, "text_after_quote", csv + b'"a"x,0\n')
    out(t, "nul_byte", csv + b"a,0\x00\nb,1\n")
    out(t, "one_column", csv + b"abc\ndef\n")
    out(t, "bad_header_name", csv + b"path,label,.bad\na,0,1\n")
    out(t, "taken_header_name", csv + b"path,label,label\na,0,1\n")
    out(t, "empty", csv)


def s3list_seeds():
    """fuzz_s3list: [prefix selector: 0 "", 1 "ds/", 2 "a&b/"] + a ListObjectsV2 answer."""
    t = "fuzz_s3list"
    head = b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    tail = b"</ListBucketResult>"

    def obj(key, size):
        return b"<Contents><Key>" + key + b"</Key><ETag>&quot;e&quot;</ETag><Size>" + size + b"</Size></Contents>"

    out(t, "ds_page", b"\x01" + head + b"<Name>bkt</Name><Prefix>ds/</Prefix><KeyCount>3</KeyCount>"
        b"<IsTruncated>false</IsTruncated>" + obj(b"ds/manifest.sfm", b"812") + obj(b"ds/shard-000000.sfs", b"16384")
        + obj(b"ds/shard-000007.sfs", b"5") + b"<CommonPrefixes><Prefix>ds/sub/</Prefix></CommonPrefixes>" + tail)
    out(t, "root_truncated", b"\x00" + head + b"<IsTruncated>true</IsTruncated>" + obj(b"shard-000001.sfs", b"1")
        + b"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>" + tail)
    out(t, "entities", b"\x02" + head + obj(b"a&amp;b/x&lt;y&gt;&#10;", b"0") + obj(b"a&amp;b/", b"0") + tail)
    out(t, "refused_size", b"\x01" + head + obj(b"ds/a", b"99999999999999999999") + tail)
    out(t, "refused_outside", b"\x01" + head + obj(b"../ds/a", b"1") + tail)
    out(t, "refused_cut", b"\x01" + head + obj(b"ds/a", b"1") + b"<Contents><Key>ds/b</Key><Si")
    out(t, "error_body", b"\x01<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>")


def tar_bytes(members, fmt=tarfile.USTAR_FORMAT):
    """A tar of (name, bytes) files and (name, None, TYPE[, link target])
    other members, with fixed times and owners so that the bytes never
    change, ending with its two zero blocks (without tarfile's padding to
    10 KiB)."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as tf:
        for m in members:
            ti = tarfile.TarInfo(m[0])
            ti.mtime = 0
            ti.uname = ti.gname = ""
            if m[1] is not None:
                ti.size = len(m[1])
                tf.addfile(ti, io.BytesIO(m[1]))
                continue
            ti.type = m[2]
            if len(m) > 3:
                ti.linkname = m[3]
            tf.addfile(ti)
        end = tf.offset + 1024
    return b.getvalue()[:end]


def tar_seeds():
    """fuzz_tar: the bytes of one tar, plain or compressed."""
    t = "fuzz_tar"
    two = [("000000.jpg", b"\xff\xd8jpeg0"), ("000000.cls", b"3"),
           ("000001.jpg", b"\xff\xd8jpeg-one"), ("000001.cls", b"11")]
    plain = tar_bytes(two)
    out(t, "ustar_two_samples", plain)
    out(t, "gz", gzip.compress(plain, mtime=0))
    out(t, "bz2", bz2.compress(plain))
    out(t, "xz", lzma.compress(plain, format=lzma.FORMAT_XZ))
    zst = shutil.which("zstd")
    if zst:
        out(t, "zst", subprocess.run([zst, "-q", "-c", "-3"], input=plain, check=True,
                                     stdout=subprocess.PIPE).stdout)
    out(t, "gnu_dirs_dot_slash", tar_bytes(
        [("./d", None, tarfile.DIRTYPE), ("./d/a.seg.png", b"PNGa"), ("./d/a.txt", b"a"),
         ("./d/b.seg.png", b""), ("./d/b.txt", b"bee")], tarfile.GNU_FORMAT))
    long_key = "x" * 90 + "/" + "\u00e9" * 40 + "/s"
    out(t, "pax_long_utf8", tar_bytes([(long_key + ".bin", b"long"), (long_key + ".json", b"{}"),
                                       ("k2.bin", bytes(range(256))), ("k2.json", b"[]")],
                                      tarfile.PAX_FORMAT))
    # libarchive reads a size field with a NUL among its digits inside a tar
    # but starts no tar with it: the cursor entering at sample b's header
    # must fall back to reading from the start (test_pack_inputs.c).
    lenient = bytearray(tar_bytes([("a.x", b"abc"), ("b.x", b"")]))
    h = lenient[1024:1536]
    h[124:136] = b"0000\x000000002"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\x00 " % sum(h)
    lenient[1024:1536] = h
    out(t, "lenient_size_field", bytes(lenient))
    out(t, "three_samples_big", tar_bytes([(f"{i:03d}.{f}", bytes([i]) * (700 * i + 1))
                                           for i in range(3) for f in ("a", "b")]))
    # Refused ones.
    out(t, "symlink", tar_bytes([("a.x", b"1"), ("b.x", None, tarfile.SYMTYPE, "a.x")]))
    out(t, "hardlink", tar_bytes([("a.x", b"1"), ("b.x", None, tarfile.LNKTYPE, "a.x")]))
    out(t, "fifo", tar_bytes([("a.x", None, tarfile.FIFOTYPE)]))
    out(t, "key_again_later", tar_bytes([("a.x", b"1"), ("b.x", b"2"), ("a.y", b"3")]))
    out(t, "missing_field", tar_bytes([("a.x", b"1"), ("a.y", b"2"), ("b.x", b"3")]))
    out(t, "extra_field", tar_bytes([("a.x", b"1"), ("b.x", b"2"), ("b.y", b"3")]))
    out(t, "field_twice", tar_bytes([("a.x", b"1"), ("a.x", b"2")]))
    out(t, "no_dot", tar_bytes([("readme", b"hi")]))
    out(t, "dotdot_key", tar_bytes([("../a.x", b"1")]))
    out(t, "truncated", plain[:512 + 300])
    out(t, "no_members", tar_bytes([("d", None, tarfile.DIRTYPE)]))


def image_seeds():
    """fuzz_image: [selector] + a small encoded image (a gradient with an
    edge: every layout the decoders convert)."""
    from PIL import Image
    t = "fuzz_image"
    y, x = np.mgrid[0:24, 0:32]
    rgb = np.stack([x * 8, y * 10, (x + y) * 4], axis=-1).astype(np.uint8)
    rgb[8:16, 10:20] = 255 - rgb[8:16, 10:20]
    img = Image.fromarray(rgb)

    def enc(im, **kw):
        b = io.BytesIO()
        im.save(b, **kw)
        return b.getvalue()

    seeds = {
        "rgb.jpg": enc(img, format="JPEG", quality=90),
        "prog.jpg": enc(img, format="JPEG", quality=70, progressive=True),
        "gray.jpg": enc(img.convert("L"), format="JPEG"),
        "cmyk.jpg": enc(img.convert("CMYK"), format="JPEG"),
        "rgb.png": enc(img, format="PNG"),
        "pal.png": enc(img.quantize(16), format="PNG"),
        "la.png": enc(img.convert("LA"), format="PNG"),
        "bw.png": enc(img.convert("1"), format="PNG"),
        "lossless.webp": enc(img, format="WEBP", lossless=True),
        "lossy.webp": enc(img, format="WEBP", quality=50),
    }
    for i, (name, data) in enumerate(sorted(seeds.items())):
        out(t, name, bytes([(i * 37) & 0xff]) + data)  # selectors spread over the modes


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def pack(sf, arrays, tmp, name, align=64, shard_size="1MiB"):
    """arrays: {key: {field: ndarray}} -> dataset dir."""
    src = os.path.join(tmp, name + "-in")
    dst = os.path.join(tmp, name)
    os.makedirs(src)
    for key, fields in arrays.items():
        for field, a in fields.items():
            np.save(os.path.join(src, f"{field}_{key}.npy"), a)
    run(sf, "pack", src, "-o", dst, "-q", "-j", "1", "--align", str(align), "--shard-size", shard_size)
    return dst


def read(path):
    with open(path, "rb") as f:
        return f.read()


def dataset_seed(ds):
    man = read(os.path.join(ds, "manifest.sfm"))
    shard = read(os.path.join(ds, "shard-000000.sfs"))
    return man, shard


def shard_seed(sel, flags, shard):
    return bytes([sel, flags]) + shard[:128] + shard[-64:] + index_bytes(shard)


def index_bytes(shard):
    io_, isz = struct.unpack_from("<QQ", shard, 56)
    return shard[io_:io_ + isz]


def synthetic_shard(align, entries, keys, entry_size, data_end):
    """Header (checksum left to the fuzz target's fix-up flags), footer
    (zeros), index from (offset, size, checksum, var lens, inline) tuples."""
    index = b""
    kpos = 0
    for (off, size, extra), key in zip(entries, keys):
        e = struct.pack("<QQQIHH", off, size, 0, kpos, len(key), 0) + extra
        assert len(e) == entry_size
        index += e
        kpos += len(key)
    index += b"".join(keys)
    data_off = (128 + align - 1) // align * align
    h = bytearray(128)
    h[0:8] = b"\x89SFSHRD\n"
    struct.pack_into("<HHIII", h, 8, 1, 0, 0, 0, align)
    struct.pack_into("<QQQQQQ", h, 24, 0, len(entries), 0, data_off, data_end, len(index))
    struct.pack_into("<II", h, 72, entry_size, 0)
    return bytes(h) + bytes(64) + index


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sf = os.path.abspath(sys.argv[1])
    # Hand-made seeds are rewritten; inputs libFuzzer found (named found-*,
    # picked for the edges they add, see tests/fuzz/run.sh) are kept.
    for t in ("fuzz_npy", "fuzz_manifest", "fuzz_shard", "fuzz_dataset", "fuzz_roundtrip", "fuzz_list",
              "fuzz_tar", "fuzz_image", "fuzz_s3list"):
        d = os.path.join(CORPUS, t)
        for name in os.listdir(d) if os.path.isdir(d) else []:
            if not name.startswith("found-"):
                os.unlink(os.path.join(d, name))
    npy_seeds()
    list_seeds()
    s3list_seeds()
    tar_seeds()
    image_seeds()

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        # img f32 (3,8,8) + label i64 (inline): schema 0 of fuzz_schemas.h.
        imgs = {str(i): {"img": rng.standard_normal((3, 8, 8), dtype=np.float32),
                         "label": np.int64(i)} for i in range(3)}
        a64 = pack(sf, imgs, tmp, "img64")
        a4096 = pack(sf, {k: imgs[k] for k in ("0", "1")}, tmp, "img4096", align=4096)
        # two shards: the manifest seed has two descriptors
        two = pack(sf, imgs, tmp, "img2", shard_size="2000")
        # inline only (schema 3): records without payload
        y = pack(sf, {f"k{i}": {"y": np.uint8(i * 7)} for i in range(4)}, tmp, "y", align=1)
        # uint8 images with padding between fields and records
        mixed = pack(sf, {f"s.{i}": {"aux": np.arange(13, dtype=np.uint8) + i,
                                     "img": rng.integers(0, 255, (5, 5)).astype(np.uint8),
                                     "lbl": np.uint16(i)} for i in range(2)}, tmp, "mixed", align=16)

        for name, ds in (("img64", a64), ("img4096", a4096), ("img2", two), ("y", y), ("mixed", mixed)):
            man = read(os.path.join(ds, "manifest.sfm"))
            out("fuzz_manifest", name, b"\x00" + man)
            if name in ("img64", "y"):
                # trailer zeroed: only reachable with the re-checksum flag
                out("fuzz_manifest", name + "-reseal", b"\x01" + man[:-8] + bytes(8))
            if name == "img2":
                continue
            man, shard = dataset_seed(ds)
            out("fuzz_dataset", name, b"\x00" + struct.pack("<I", len(man)) + man + shard)
            if name in ("img64", "y"):
                out("fuzz_dataset", name + "-reseal", b"\x07" + struct.pack("<I", len(man)) + man + shard)

        # zstd on a fixed and a variable-length field (SPEC.md "Compression"), written
        # from the spec by tests/python/sfwrite.py: `pack` does not compress yet.
        sys.path.insert(0, os.path.join(HERE, "..", "python"))
        import sfwrite
        z = sfwrite.write_dataset(
            os.path.join(tmp, "zstd"),
            [("x", "float32", sfwrite.FIXED, (2, 4), "zstd"), ("t", "bytes", sfwrite.VAR, None, "zstd"),
             ("l", "int64", sfwrite.INLINE, ())],
            [{"x": np.arange(8, dtype=np.float32) + i, "t": bytes(range(i * 3)), "l": np.int64(i)}
             for i in range(3)], align=16)
        man, shard = dataset_seed(z)
        out("fuzz_dataset", "zstd", b"\x00" + struct.pack("<I", len(man)) + man + shard)
        out("fuzz_dataset", "zstd-reseal", b"\x07" + struct.pack("<I", len(man)) + man + shard)

        man, shard = dataset_seed(a64)
        out("fuzz_shard", "img64", shard_seed(0, 0, shard))
        out("fuzz_shard", "img64-file", shard_seed(0, 0x0f, shard))
        out("fuzz_shard", "img64-filled", shard_seed(0, 0x1f, shard))  # data area not zero
        man, shard = dataset_seed(y)
        out("fuzz_shard", "y-file", shard_seed(3, 0x0f, shard))
        # Variable-length schemas (the packer writes none): built here, the
        # header checksum left to the fix-up flags (0x0f).
        # schema 1: one var bytes field "data", entry 40 = 32 + 8 (var len)
        ents = [(128, 5, struct.pack("<Q", 5)), (192, 0, struct.pack("<Q", 0)), (192, 64, struct.pack("<Q", 64))]
        out("fuzz_shard", "var1", bytes([1, 0x0f]) + synthetic_shard(64, ents, [b"a", b"b.1", b"c-2"], 40, 256))
        # schema 2: aux u8(13) fixed, v i32 var, label u16 inline, w f64 var;
        # entry 56 = 32 + 2 var lens + 1 inline; align 8
        def e2(off, v, w, lab):
            size = 13
            size = (size + 7) // 8 * 8 + 4 * v
            size = (size + 7) // 8 * 8 + 8 * w
            return (off, size, struct.pack("<QQQ", 4 * v, 8 * w, lab))
        r0 = e2(128, 1, 2, 7)
        r1 = e2((128 + r0[1] + 7) // 8 * 8, 0, 1, 65535)
        end = (r1[0] + r1[1] + 7) // 8 * 8
        out("fuzz_shard", "mixed2", bytes([2, 0x0f]) + synthetic_shard(8, [r0, r1], [b"x", b"yy"], 56, end))
        out("fuzz_shard", "mixed2-filled", bytes([2, 0x1f]) + synthetic_shard(8, [r0, r1], [b"x", b"yy"], 56, end))

    # Round trip: [n][dtype|be][ndim|fortran|zero][d0][d1][d2][b][align][shard size][flags] data...
    rt = "fuzz_roundtrip"
    out(rt, "f32_3x2x2_j2", bytes([3, 10, 3, 2, 1, 1, 0, 3, 1, 0x01]) + bytes(range(64)))
    out(rt, "be_fortran_i16_keys", bytes([5, 0x80 | 4, 0x10 | 2, 3, 2, 0, 0x05, 2, 2, 0x0e]) + b"9a.x-Z1" + bytes(range(200, 256)))
    out(rt, "c128_scalar_inline_b", bytes([2, 13, 0, 0, 0, 0, 0x01 | (8 << 1), 4, 4, 0x06]) + bytes(range(48)))
    out(rt, "inline_only_u8", bytes([8, 1, 0, 0, 0, 0, 0x01, 0, 0, 0x02]) + b"\x05\x06")
    out(rt, "zero_dim_refused", bytes([2, 10, 0x20 | 2, 7, 1, 0, 0, 1, 1, 0]) + b"\x01")
    out(rt, "bool_fortran_3d_align4096", bytes([4, 0, 0x10 | 3, 1, 2, 3, 0x01 | (1 << 5), 4, 1, 0x0b]) + bytes([1, 0, 1]))

    total = 0
    for root, _, files in os.walk(CORPUS):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"corpus: {total} bytes")


if __name__ == "__main__":
    main()
