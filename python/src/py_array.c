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
    a->device = SF_DEVICE_CPU;
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
    if (a->device == SF_DEVICE_CUDA) {
        PyErr_SetString(PyExc_BufferError,
                        "shardfeed: this array is in CUDA device memory: import it with "
                        "torch.from_dlpack (or any DLPack consumer), not the buffer protocol");
        view->obj = NULL;
        return -1;
    }
    /* Host-copy "device" memory: the host waits for the copy, as a consumer
     * without a stream must. */
    if (a->device != SF_DEVICE_CPU && sf_py_batch_import((sf_py_batch *)a->owner, NULL) < 0) {
        view->obj = NULL;
        return -1;
    }
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

/* Where the array's memory is: CUDA device memory of the reader's device,
 * or host memory (the host-copy device's included). */
static void dl_device(DLDevice *out, const sf_py_array *a)
{
    out->device_type = kDLCPU;
    out->device_id = 0;
    if (a->device == SF_DEVICE_CUDA) {
        out->device_type = kDLCUDA;
        out->device_id = ((sf_py_batch *)a->owner)->reader->device_index;
    }
}

/* A capsule nobody consumed still owns its tensor. */
static void dl_capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, DLTENSOR)) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, DLTENSOR);
        if (mt && mt->deleter)
            mt->deleter(mt);
    }
}

/* DLPack's stream argument for a device array: the consumer's stream that
 * must wait for the copy. CUDA (DLPack): None is the legacy default stream,
 * 1 the legacy default stream, 2 the per-thread one, larger values stream
 * handles (cudaStreamLegacy and cudaStreamPerThread are the handles 1 and 2,
 * so every value passes through); 0 is disallowed; -1 (the consumer
 * synchronises itself) cannot be honoured: the slot's release needs the
 * stream. Host-copy: an sf_host_stream handle, or None for the host. */
static int dlpack_stream(void **out, const sf_py_array *a, PyObject *stream)
{
    *out = NULL;
    if (stream == Py_None) {
        *out = a->device == SF_DEVICE_CUDA ? (void *)1 : NULL;
        return 0;
    }
    if (!PyLong_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "shardfeed: __dlpack__ stream must be an int or None");
        return -1;
    }
    long long v = PyLong_AsLongLong(stream);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v == 0 || v == -1) {
        PyErr_Format(PyExc_BufferError,
                     "shardfeed: __dlpack__(stream=%lld): a device batch needs the consumer's "
                     "stream (None, 1, 2 or a stream handle) to order its copy and its release",
                     v);
        return -1;
    }
    if (v < 0) {
        PyErr_Format(PyExc_ValueError, "shardfeed: __dlpack__(stream=%lld): not a stream", v);
        return -1;
    }
    *out = (void *)(uintptr_t)v;
    return 0;
}

static PyObject *array_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:__dlpack__", kwlist, &stream))
        return NULL;
    sf_py_array *a = (sf_py_array *)self;
    if (a->device != SF_DEVICE_CPU) {
        void *s;
        if (dlpack_stream(&s, a, stream) < 0 || sf_py_batch_import((sf_py_batch *)a->owner, s) < 0)
            return NULL;
    } else if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
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
    dl_device(&t->device, a);
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
    (void)unused;
    DLDevice d;
    dl_device(&d, (sf_py_array *)self);
    return Py_BuildValue("(ii)", (int)d.device_type, (int)d.device_id);
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
     "__dlpack__(*, stream=None) -> a 'dltensor' capsule sharing this memory. For a device "
     "batch, `stream` (DLPack's: None or 1 the legacy default stream, 2 per-thread, else a "
     "cudaStream_t; an sf_host_stream handle on the host-copy device) waits for the batch's copy "
     "and is the stream the batch is released after; every import of a batch must name the same "
     "stream"},
    {"__dlpack_device__", array_dlpack_device, METH_NOARGS,
     "(device_type, device_id): (kDLCPU, 0), or (kDLCUDA, N) for a batch on cuda:N"},
    {NULL, NULL, 0, NULL}};

static PyObject *array_get_data_ptr(sf_py_array *a, void *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(a->data);
}

static PyGetSetDef array_getset[] = {
    {"data_ptr", (getter)array_get_data_ptr, NULL,
     "address of the first element (device memory for a device batch)", NULL},
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
