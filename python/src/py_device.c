/* _shardfeed.HostStream: the host-copy device's stand-in for a consumer's
 * CUDA stream (sf_host_stream, shardfeed/reader.h), for tests of the device
 * path without a GPU: its .handle goes where a stream handle goes
 * (__dlpack__(stream=...)), read() queues a consumer "kernel". */
#include "py_internal.h"

typedef struct sf_py_host_stream {
    PyObject_HEAD
    sf_host_stream *s;
} sf_py_host_stream;

static PyObject *host_stream_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ":HostStream") || (kw && PyDict_Size(kw)))
        return kw && PyDict_Size(kw) ? PyErr_Format(PyExc_TypeError, "HostStream() takes no arguments")
                                     : NULL;
    sf_py_host_stream *self = (sf_py_host_stream *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    int rc = sf_host_stream_create(&self->s);
    if (rc < 0) {
        Py_DECREF(self);
        return sf_py_raise(rc);
    }
    return (PyObject *)self;
}

static void host_stream_destroy(sf_py_host_stream *self)
{
    sf_host_stream *s = self->s;
    self->s = NULL;
    if (s) {
        Py_BEGIN_ALLOW_THREADS
        sf_host_stream_destroy(s); /* runs its queue first: it may wait for copies */
        Py_END_ALLOW_THREADS
    }
}

static void host_stream_dealloc(sf_py_host_stream *self)
{
    host_stream_destroy(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int host_stream_usable(sf_py_host_stream *self)
{
    if (self->s)
        return 1;
    PyErr_SetString(PyExc_ValueError, "shardfeed: the HostStream is closed");
    return 0;
}

static PyObject *host_stream_read(sf_py_host_stream *self, PyObject *args)
{
    PyObject *dst_obj, *src_obj;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "OOn:read", &dst_obj, &src_obj, &len) || !host_stream_usable(self))
        return NULL;
    void *dst = PyLong_AsVoidPtr(dst_obj);
    void *src = dst || !PyErr_Occurred() ? PyLong_AsVoidPtr(src_obj) : NULL;
    if (PyErr_Occurred())
        return NULL;
    if (len < 0)
        return PyErr_Format(PyExc_ValueError, "shardfeed: read of %zd bytes", len);
    int rc = sf_host_stream_read(self->s, dst, src, (size_t)len);
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *host_stream_hold(sf_py_host_stream *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0 || !host_stream_usable(self))
        return NULL;
    int rc = sf_host_stream_hold(self->s, on);
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *host_stream_synchronize(sf_py_host_stream *self, PyObject *unused)
{
    (void)unused;
    if (!host_stream_usable(self))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sf_host_stream_synchronize(self->s);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *host_stream_close(sf_py_host_stream *self, PyObject *unused)
{
    (void)unused;
    host_stream_destroy(self);
    Py_RETURN_NONE;
}

static PyObject *host_stream_get_handle(sf_py_host_stream *self, void *unused)
{
    (void)unused;
    if (!host_stream_usable(self))
        return NULL;
    return PyLong_FromVoidPtr(self->s);
}

static PyObject *host_stream_hazards(PyObject *cls, PyObject *unused)
{
    (void)cls, (void)unused;
    return PyLong_FromUnsignedLongLong(sf_host_stream_hazards());
}

static PyObject *host_stream_set_copy_delay(PyObject *cls, PyObject *arg)
{
    (void)cls;
    unsigned long us = PyLong_AsUnsignedLong(arg);
    if (us == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    sf_host_copy_set_delay_us((unsigned)us);
    Py_RETURN_NONE;
}

static PyMethodDef host_stream_methods[] = {
    {"read", (PyCFunction)host_stream_read, METH_VARARGS,
     "read(dst_ptr, src_ptr, nbytes): queue a consumer kernel copying device memory at src_ptr "
     "to dst_ptr (both ints; dst must stay valid until synchronize())"},
    {"hold", (PyCFunction)host_stream_hold, METH_O, "hold(on): while on, the stream starts nothing"},
    {"synchronize", (PyCFunction)host_stream_synchronize, METH_NOARGS,
     "synchronize(): wait until everything queued has run (Error while held)"},
    {"close", (PyCFunction)host_stream_close, METH_NOARGS, "close(): run the queue, then destroy"},
    {"hazards", (PyCFunction)host_stream_hazards, METH_NOARGS | METH_STATIC,
     "hazards() -> hazards the host-copy device has seen in this process (sf_host_stream_hazards)"},
    {"set_copy_delay_us", (PyCFunction)host_stream_set_copy_delay, METH_O | METH_STATIC,
     "set_copy_delay_us(us): every host-copy copy first sleeps us microseconds"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef host_stream_getset[] = {
    {"handle", (getter)host_stream_get_handle, NULL,
     "the sf_host_stream as an int, for __dlpack__(stream=...)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject sf_py_host_stream_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardfeed._shardfeed.HostStream",
    .tp_basicsize = sizeof(sf_py_host_stream),
    .tp_dealloc = (destructor)host_stream_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HostStream(): a stand-in for a CUDA stream on the host-copy device (tests): "
              "work queued on it runs in order on a thread of its own.",
    .tp_methods = host_stream_methods,
    .tp_getset = host_stream_getset,
    .tp_new = host_stream_new,
};
