#!/usr/bin/python3
"""Regenerates golden.inc: .npy files written by numpy itself, embedded as C
byte arrays for tests/unit/test_npy.c (so the test needs no data path).

Run from anywhere:  /usr/bin/python3 tests/data/npy/make.py
Generated with numpy 1.24; the header bytes depend on numpy's formatting
(>= 1.24 adds growth-axis spaces), so commit the output, do not regenerate
in CI.
"""
import io
import os

import numpy as np
import numpy.lib.format as fmt

# numpy type -> enum sf_dtype name (lib/format/dtype.h).
DTYPES = [
    ("b1", np.bool_, "SF_DTYPE_BOOL"),
    ("u1", np.uint8, "SF_DTYPE_UINT8"),
    ("i1", np.int8, "SF_DTYPE_INT8"),
    ("u2", np.uint16, "SF_DTYPE_UINT16"),
    ("i2", np.int16, "SF_DTYPE_INT16"),
    ("u4", np.uint32, "SF_DTYPE_UINT32"),
    ("i4", np.int32, "SF_DTYPE_INT32"),
    ("u8", np.uint64, "SF_DTYPE_UINT64"),
    ("i8", np.int64, "SF_DTYPE_INT64"),
    ("f2", np.float16, "SF_DTYPE_FLOAT16"),
    ("f4", np.float32, "SF_DTYPE_FLOAT32"),
    ("f8", np.float64, "SF_DTYPE_FLOAT64"),
    ("c8", np.complex64, "SF_DTYPE_COMPLEX64"),
    ("c16", np.complex128, "SF_DTYPE_COMPLEX128"),
]


def values(t, shape):
    """Distinct, byte-order-asymmetric values in C order for type t."""
    n = int(np.prod(shape))
    i = np.arange(n)
    if t is np.bool_:
        v = i % 3 == 0
    elif np.issubdtype(t, np.complexfloating):
        v = (i * 1.25 - 7.5) + 1j * (i * -0.5 + 3.0)
    elif np.issubdtype(t, np.floating):
        v = i * 1.5 - 7.25
    elif np.issubdtype(t, np.signedinteger):
        v = i * (0x0103 if np.dtype(t).itemsize > 1 else 7) - 40
    else:
        v = i * 0x01030507 + 0x11
    return np.asarray(v).astype(t).reshape(shape)


def save_bytes(arr, version=None, allow_pickle=False):
    f = io.BytesIO()
    if version is None:
        np.save(f, arr, allow_pickle=allow_pickle)
    else:
        fmt.write_array(f, arr, version=version, allow_pickle=allow_pickle)
    return f.getvalue()


def header_bytes(descr, shape):
    """What np.save writes for a C-order array, without needing the data."""
    f = io.BytesIO()
    fmt._write_array_header(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue()


def c_bytes(name, data):
    out = ["static const unsigned char %s[%d] = {" % (name, max(len(data), 1))]
    for k in range(0, len(data), 16):
        out.append("    " + " ".join("0x%02x," % b for b in data[k:k + 16]))
    if not data:
        out.append("    0x00,")
    out.append("};")
    return "\n".join(out)


goldens = []  # (name, sf_dtype, big, fortran, version, shape, file, cdata)


def add(name, sf, arr, version=None):
    data = save_bytes(arr, version)
    major = data[6]
    fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)
    big = arr.dtype.byteorder == ">"
    cdata = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
    goldens.append((name, sf, big, fortran, major, arr.shape, data, cdata))


for code, t, sf in DTYPES:
    le = values(t, (2, 3))
    add("le_" + code, sf, le)
    if le.dtype.itemsize > 1:
        add("be_" + code, sf, le.astype(le.dtype.newbyteorder(">")))
    add("f2d_" + code, sf, np.asfortranarray(le))

# 3-d and 4-d Fortran order, also combined with big-endian data.
for code, t, sf in DTYPES:
    if code in ("u1", "i4", "c16", "f2"):
        a = values(t, (2, 3, 4))
        add("f3d_" + code, sf, np.asfortranarray(a))
        add("f3d_be_" + code, sf, np.asfortranarray(a.astype(a.dtype.newbyteorder(">"))))
add("f4d_u2", "SF_DTYPE_UINT16", np.asfortranarray(values(np.uint16, (3, 1, 2, 5))))

# 0-d arrays (scalars), empty arrays and the other format versions.
add("scalar_f8", "SF_DTYPE_FLOAT64", np.array(3.5))
add("scalar_b1", "SF_DTYPE_BOOL", np.array(True))
add("empty_f4", "SF_DTYPE_FLOAT32", np.zeros((0, 3), np.float32))
add("v2_f4", "SF_DTYPE_FLOAT32", values(np.float32, (2, 2)), version=(2, 0))
add("v3_f4", "SF_DTYPE_FLOAT32", values(np.float32, (2, 2)), version=(3, 0))
add("v3_be_i2", "SF_DTYPE_INT16", values(np.int16, (3,)).astype(">i2"), version=(3, 0))
add("v2_fortran_c8", "SF_DTYPE_COMPLEX64", np.asfortranarray(values(np.complex64, (2, 3))), version=(2, 0))

# Files shardfeed must refuse, as numpy really writes them.
refused = [
    ("object", save_bytes(np.array([1, "a", None], dtype=object), allow_pickle=True)),
    ("structured", save_bytes(np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))),
    ("unicode", save_bytes(np.array(["ab", "c"]))),
    ("bytes", save_bytes(np.array([b"ab", b"c"]))),
    ("void", save_bytes(np.zeros(2, dtype="V4"))),
    ("datetime", save_bytes(np.array(["2020-01-01"], dtype="datetime64[D]"))),
    ("timedelta", save_bytes(np.array([5], dtype="timedelta64[s]"))),
    ("longdouble", save_bytes(np.zeros(2, dtype=np.longdouble))),
    ("clongdouble", save_bytes(np.zeros(2, dtype=np.clongdouble))),
]

# Headers input_npy_write_header must reproduce byte for byte.
headers = [
    ("SF_DTYPE_FLOAT32", (3, 224, 224)),
    ("SF_DTYPE_FLOAT64", ()),
    ("SF_DTYPE_UINT8", (5,)),
    ("SF_DTYPE_BOOL", (2, 3)),
    ("SF_DTYPE_INT8", (0,)),
    ("SF_DTYPE_COMPLEX128", (1, 2, 3, 4, 5, 6, 7, 8)),
    ("SF_DTYPE_INT64", (2 ** 40,)),
    # The growth spaces push this one from 128 to 192 bytes.
    ("SF_DTYPE_UINT16", (1, 10 ** 12, 10 ** 12, 10 ** 12)),
    ("SF_DTYPE_COMPLEX64", (2 ** 64 - 1,) * 8),
]
SF_TO_DESCR = {sf: np.dtype(t).str for _, t, sf in DTYPES}

out = ["/* Generated by tests/data/npy/make.py with numpy %s. Do not edit. */" % np.__version__, ""]
# The expected C-order little-endian data is only stored where it differs
# from the file's own data (NULL: the file's data is already C-order LE).
def stored_cdata(g):
    return g[7] != g[6][len(g[6]) - len(g[7]):]


for g in goldens:
    out.append(c_bytes("gf_" + g[0], g[6]))
    if stored_cdata(g):
        out.append(c_bytes("gc_" + g[0], g[7]))
out.append("")
out.append("static const struct npy_golden npy_goldens[] = {")
for g in goldens:
    name, sf, big, fortran, major, shape, data, cdata = g
    dims = ", ".join("%dULL" % d for d in shape) if shape else "0"
    cname = "gc_" + name if stored_cdata(g) else "NULL"
    out.append('    {"%s", %s, %d, %d, %d, %d, {%s}, gf_%s, %d, %s, %d},'
               % (name, sf, big, fortran, major, len(shape), dims, name, len(data), cname, len(cdata)))
out.append("};")
out.append("")
for name, data in refused:
    out.append(c_bytes("gr_" + name, data))
out.append("static const struct npy_refused npy_refused_files[] = {")
for name, data in refused:
    out.append('    {"%s", gr_%s, %d},' % (name, name, len(data)))
out.append("};")
out.append("")
for k, (sf, shape) in enumerate(headers):
    out.append(c_bytes("gh_%d" % k, header_bytes(SF_TO_DESCR[sf], shape)))
out.append("static const struct npy_header_golden npy_header_goldens[] = {")
for k, (sf, shape) in enumerate(headers):
    dims = ", ".join("%dULL" % d for d in shape) if shape else "0"
    out.append("    {%s, %d, {%s}, gh_%d, sizeof gh_%d}," % (sf, len(shape), dims, k, k))
out.append("};")

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "golden.inc"), "w") as f:
    f.write("\n".join(out) + "\n")
