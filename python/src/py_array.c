/* _shardfeed.Array: a typed, C-contiguous view of memory owned by another
 * object, exported through the buffer protocol and (batch memory only)
 * DLPack: __dlpack__ / __dlpack_device__, as torch.from_dlpack and
 * numpy.from_dlpack consume them. */
#include "py_internal.h"

#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>

/* What Python needs of each dtype beyond its size and NumPy descr
 * (sf_dtype_size, sf_dtype_npy_descr): its DLPack type code and its
 * struct-module format for the buffer protocol. */
typedef struct dtype_py {
    uint8_t dl_code; /* DLDataTypeCode */
    const char *format;
} dtype_py;

/* Buffer-protocol formats: native codes on a little-endian host (so that
 * memoryview can index them), explicit little-endian ones otherwise. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LE(f) f
#else
#define LE(f) "<" f
#endif

/* DLPack 0.6 has no bool: bool and bytes go out as uint8 (the Python layer
 * views bool back as bool). */
static const dtype_py DTYPES[SF_DTYPE_COUNT] = {
    [SF_DTYPE_BYTES] = {kDLUInt, "B"},
    [SF_DTYPE_BOOL] = {kDLUInt, "?"},
    [SF_DTYPE_UINT8] = {kDLUInt, "B"},
    [SF_DTYPE_INT8] = {kDLInt, "b"},
    [SF_DTYPE_UINT16] = {kDLUInt, LE("H")},
    [SF_DTYPE_INT16] = {kDLInt, LE("h")},
    [SF_DTYPE_UINT32] = {kDLUInt, LE("I")},
    [SF_DTYPE_INT32] = {kDLInt, LE("i")},
    [SF_DTYPE_UINT64] = {kDLUInt, LE("Q")},
    [SF_DTYPE_INT64] = {kDLInt, LE("q")},
    [SF_DTYPE_FLOAT16] = {kDLFloat, LE("e")},
    [SF_DTYPE_FLOAT32] = {kDLFloat, LE("f")},
    [SF_DTYPE_FLOAT64] = {kDLFloat, LE("d")},
    [SF_DTYPE_COMPLEX64] = {kDLComplex, LE("Zf")},
    [SF_DTYPE_COMPLEX128] = {kDLComplex, LE("Zd")},
};

int sf_py_dtype_known(int dtype)
{
    return sf_dtype_name(dtype) != NULL;
}

PyObject *sf_py_array_new(PyObject *owner, void *data, int dtype, int ndim, const uint64_t *shape,
                          int readonly)
{
    if (!sf_py_dtype_known(dtype))
        return PyErr_Format(PyExc_TypeError, "shardfeed: unknown dtype code %d", dtype);
    if (ndim < 0 || ndim > SF_PY_MAX_DIMS)
        return PyErr_Format(PyExc_ValueError, "shardfeed: %d dimensions", ndim);
    sf_py_array *a = PyObject_New(sf_py_array, &sf_py_array_type);
    if (!a)
        return NULL;
    a->owner = Py_NewRef(owner);
    a->data = data;
    a->dtype = dtype;
    a->readonly = readonly;
    a->ndim = ndim;
    a->itemsize = (Py_ssize_t)sf_dtype_size(dtype);
    Py_ssize_t n = a->itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] > (uint64_t)PY_SSIZE_T_MAX / (uint64_t)(n ? n : 1)) {
            Py_DECREF(a);
            return PyErr_Format(PyExc_OverflowError, "shardfeed: array too large");
        }
        a->shape[i] = (Py_ssize_t)shape[i];
        a->strides[i] = n;
        n *= (Py_ssize_t)shape[i];
    }
    a->nbytes = n;
    return (PyObject *)a;
}

static void array_dealloc(sf_py_array *a)
{
    PyObject *owner = a->owner;
    PyObject_Free(a);
    Py_XDECREF(owner);
}

/* ---- buffer protocol ---- */

static int array_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    sf_py_array *a = (sf_py_array *)self;
    if ((flags & PyBUF_WRITABLE) && a->readonly) {
        PyErr_SetString(PyExc_BufferError, "shardfeed: this view is read-only (a memory map)");
        view->obj = NULL;
        return -1;
    }
    view->buf = a->data;
    view->obj = Py_NewRef(self);
    view->len = a->nbytes;
    view->readonly = a->readonly;
    view->itemsize = a->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)DTYPES[a->dtype].format : NULL;
    view->ndim = a->ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? a->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? a->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs array_as_buffer = {array_getbuffer, NULL};

/* ---- DLPack ---- */

typedef struct dl_holder {
    DLManagedTensor mt; /* first: the deleter gets this pointer */
    int64_t shape[SF_PY_MAX_DIMS];
    int64_t strides[SF_PY_MAX_DIMS]; /* elements */
} dl_holder;

/* Called by the consumer (torch, numpy) when its tensor dies, from whatever
 * thread that happens on, with or without the GIL. */
static void dl_deleter(DLManagedTensor *mt)
{
    PyObject *arr = mt->manager_ctx;
    /* During interpreter shutdown the object may not be touched: leak it. */
    if (arr && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(arr);
        PyGILState_Release(g);
    }
    free(mt);
}

static const char DLTENSOR[] = "dltensor";

/* A capsule nobody consumed still owns its tensor. */
static void dl_capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, DLTENSOR)) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, DLTENSOR);
        if (mt && mt->deleter)
            mt->deleter(mt);
    }
}

static PyObject *array_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:__dlpack__", kwlist, &stream))
        return NULL;
    sf_py_array *a = (sf_py_array *)self;
    if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
        if (PyErr_Occurred())
            return NULL;
        return PyErr_Format(PyExc_ValueError, "shardfeed: a CPU array takes no stream");
    }
    if (a->readonly)
        return PyErr_Format(PyExc_BufferError,
                            "shardfeed: read-only memory (a memory map) is not exported through "
                            "DLPack; use numpy.asarray()");
    dl_holder *h = calloc(1, sizeof *h);
    if (!h)
        return PyErr_NoMemory();
    for (int i = 0; i < a->ndim; i++) {
        h->shape[i] = a->shape[i];
        h->strides[i] = a->strides[i] / a->itemsize;
    }
    DLTensor *t = &h->mt.dl_tensor;
    t->data = a->data;
    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    t->ndim = a->ndim;
    t->dtype.code = DTYPES[a->dtype].dl_code;
    t->dtype.bits = (uint8_t)(a->itemsize * 8);
    t->dtype.lanes = 1;
    t->shape = h->shape;
    t->strides = h->strides;
    t->byte_offset = 0;
    h->mt.manager_ctx = Py_NewRef(self);
    h->mt.deleter = dl_deleter;
    PyObject *cap = PyCapsule_New(&h->mt, DLTENSOR, dl_capsule_destructor);
    if (!cap) {
        Py_DECREF(self);
        free(h);
        return NULL;
    }
    return cap;
}

static PyObject *array_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

static PyObject *array_get_shape(sf_py_array *a, void *unused)
{
    (void)unused;
    PyObject *t = PyTuple_New(a->ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < a->ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(a->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *array_get_dtype(sf_py_array *a, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(sf_dtype_npy_descr(a->dtype));
}

static PyObject *array_get_nbytes(sf_py_array *a, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(a->nbytes);
}

static PyObject *array_get_itemsize(sf_py_array *a, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(a->itemsize);
}

static PyObject *array_get_readonly(sf_py_array *a, void *unused)
{
    (void)unused;
    return PyBool_FromLong(a->readonly);
}

static PyObject *array_repr(sf_py_array *a)
{
    PyObject *shape = array_get_shape(a, NULL);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<shardfeed array %s %R>", sf_dtype_npy_descr(a->dtype), shape);
    Py_DECREF(shape);
    return r;
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", SF_PY_KW(array_dlpack), METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None) -> a 'dltensor' capsule sharing this memory"},
    {"__dlpack_device__", array_dlpack_device, METH_NOARGS, "(kDLCPU, 0)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef array_getset[] = {
    {"shape", (getter)array_get_shape, NULL, "shape (tuple)", NULL},
    {"dtype", (getter)array_get_dtype, NULL, "NumPy descr of the element type", NULL},
    {"nbytes", (getter)array_get_nbytes, NULL, "bytes viewed", NULL},
    {"itemsize", (getter)array_get_itemsize, NULL, "bytes per element", NULL},
    {"readonly", (getter)array_get_readonly, NULL, "whether the view is read-only", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject sf_py_array_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardfeed._shardfeed.Array",
    .tp_basicsize = sizeof(sf_py_array),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_as_buffer = &array_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A view of batch or dataset memory (buffer protocol; DLPack for batch memory). "
              "It keeps the memory valid while it, or any tensor made from it, is alive.",
    .tp_methods = array_methods,
    .tp_getset = array_getset,
};
