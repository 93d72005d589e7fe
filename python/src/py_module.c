/* _shardfeed: the C part of the shardfeed Python package. The Python layer
 * (shardfeed/_loader.py, shardfeed/_dataset.py) builds Loader and Dataset on
 * these types. */
#include "py_internal.h"

#include <errno.h>

PyObject *sf_py_error;

PyObject *sf_py_raise(int rc)
{
    const char *reason = sf_strerror(rc);
    const char *detail = sf_last_error();
    PyObject *msg = detail && *detail ? PyUnicode_FromFormat("%s: %s", reason, detail)
                                      : PyUnicode_FromString(reason);
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(sf_py_error, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *rs = PyUnicode_FromString(reason);
    PyObject *eno = rc < 0 && rc > -4096 ? PyLong_FromLong(-rc) : Py_NewRef(Py_None);
    if (!code || !rs || !eno || PyObject_SetAttrString(exc, "code", code) < 0 ||
        PyObject_SetAttrString(exc, "reason", rs) < 0 ||
        PyObject_SetAttrString(exc, "errno", eno) < 0) {
        Py_XDECREF(code);
        Py_XDECREF(rs);
        Py_XDECREF(eno);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    Py_DECREF(rs);
    Py_DECREF(eno);
    PyErr_SetObject(sf_py_error, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(sf_strerror((int)rc));
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyUnicode_FromString(sf_version());
}

/* param_bounds() -> {name: (min, max)} for every sf_param (shardfeed/params.h):
 * the limits the Python layer checks arguments against, from the library's
 * one table instead of retyped numbers. */
static PyObject *mod_param_bounds(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    static const struct {
        const char *key; /* the reader's and pack's options share names: prefix them */
        sf_param p;
    } P[] = {{"reader.batch_size", SF_PARAM_READER_BATCH_SIZE},
             {"reader.prefetch", SF_PARAM_READER_PREFETCH},
             {"reader.io_threads", SF_PARAM_READER_IO_THREADS},
             {"reader.queue_depth", SF_PARAM_READER_QUEUE_DEPTH},
             {"reader.world_size", SF_PARAM_READER_WORLD_SIZE},
             {"pack.jobs", SF_PARAM_PACK_JOBS},
             {"pack.align", SF_PARAM_PACK_ALIGN},
             {"pack.shard_size", SF_PARAM_PACK_SHARD_SIZE},
             {"pack.part_count", SF_PARAM_PACK_PARTS},
             {"pack.zstd_level", SF_PARAM_PACK_ZSTD_LEVEL},
             {"verify.jobs", SF_PARAM_VERIFY_JOBS}};
    _Static_assert(sizeof P / sizeof P[0] == SF_PARAM_COUNT, "every sf_param has a key here");
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        sf_bounds b;
        if (sf_param_bounds(&b, P[i].p) < 0) {
            Py_DECREF(out);
            return sf_py_raise(SF_E_INVALID);
        }
        PyObject *v = Py_BuildValue("(LL)", (long long)b.min, (long long)b.max);
        if (!v || PyDict_SetItemString(out, P[i].key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

static PyObject *mod_has_feature(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    return PyBool_FromLong(sf_has_feature(name));
}

static PyMethodDef module_methods[] = {
    {"has_feature", mod_has_feature, METH_O,
     "has_feature(name) -> sf_has_feature(name): \"cuda\" when CUDA delivery was built in"},
    {"param_bounds", mod_param_bounds, METH_NOARGS,
     "param_bounds() -> {\"reader.batch_size\": (min, max), ...}: the library's option bounds"},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> sf_strerror(code)"},
    {"version", mod_version, METH_NOARGS, "version() -> the C library's version"},
    {NULL, NULL, 0, NULL}};

static int add_constants(PyObject *m)
{
    static const struct {
        const char *name;
        long value;
    } K[] = {
        {"SHUFFLE_NONE", SF_READER_SHUFFLE_NONE},
        {"SHUFFLE_GLOBAL", SF_READER_SHUFFLE_GLOBAL},
        {"SHUFFLE_BLOCK", SF_READER_SHUFFLE_BLOCK},
        {"UNEVEN_PAD", SF_READER_UNEVEN_PAD},
        {"UNEVEN_DROP", SF_READER_UNEVEN_DROP},
        {"ENGINE_AUTO", SF_ENGINE_AUTO},
        {"ENGINE_URING", SF_ENGINE_URING},
        {"ENGINE_PREAD", SF_ENGINE_PREAD},
        {"ENGINE_MMAP", SF_ENGINE_MMAP},
        {"DIRECT_AUTO", SF_DIRECT_AUTO},
        {"DIRECT_ON", SF_DIRECT_ON},
        {"DIRECT_OFF", SF_DIRECT_OFF},
        {"ON_CORRUPT_ERROR", SF_ON_CORRUPT_ERROR},
        {"ON_CORRUPT_SKIP", SF_ON_CORRUPT_SKIP},
        /* The format's vocabulary (shardfeed/types.h): the Python side
         * takes the codes from here, never retypes them. */
        {"DT_BYTES", SF_DTYPE_BYTES},
        {"DT_BOOL", SF_DTYPE_BOOL},
        {"DT_UINT8", SF_DTYPE_UINT8},
        {"DT_INT8", SF_DTYPE_INT8},
        {"DT_UINT16", SF_DTYPE_UINT16},
        {"DT_INT16", SF_DTYPE_INT16},
        {"DT_UINT32", SF_DTYPE_UINT32},
        {"DT_INT32", SF_DTYPE_INT32},
        {"DT_UINT64", SF_DTYPE_UINT64},
        {"DT_INT64", SF_DTYPE_INT64},
        {"DT_FLOAT16", SF_DTYPE_FLOAT16},
        {"DT_FLOAT32", SF_DTYPE_FLOAT32},
        {"DT_FLOAT64", SF_DTYPE_FLOAT64},
        {"DT_COMPLEX64", SF_DTYPE_COMPLEX64},
        {"DT_COMPLEX128", SF_DTYPE_COMPLEX128},
        {"STORAGE_FIXED", SF_STORAGE_FIXED},
        {"STORAGE_VARIABLE", SF_STORAGE_VARIABLE},
        {"STORAGE_INLINE", SF_STORAGE_INLINE},
        {"CODEC_NONE", SF_CODEC_NONE},
        {"CODEC_ZSTD", SF_CODEC_ZSTD},
        {"E_BAD_MAGIC", SF_E_BAD_MAGIC},
        {"E_VERSION", SF_E_VERSION},
        {"E_CHECKSUM", SF_E_CHECKSUM},
        {"E_TRUNCATED", SF_E_TRUNCATED},
        {"E_CORRUPT", SF_E_CORRUPT},
        {"E_LIMIT", SF_E_LIMIT},
        {"E_RESERVED", SF_E_RESERVED},
        {"E_NPY", SF_E_NPY},
        {"E_UNSUPPORTED", SF_E_UNSUPPORTED},
        {"E_SCHEMA", SF_E_SCHEMA},
        {"E_INPUT", SF_E_INPUT},
        {"E_EXISTS", SF_E_EXISTS},
        {"E_INVALID", SF_E_INVALID},
        {"E_STATE", SF_E_STATE},
        {"E_REMOTE", SF_E_REMOTE},
        {"E_DEVICE", SF_E_DEVICE},
        {"DEFAULT_PREFETCH", SF_READER_DEFAULT_PREFETCH},
        {"DEVICE_CPU", SF_DEVICE_CPU},
        {"DEVICE_CUDA", SF_DEVICE_CUDA},
        {"DEVICE_HOST_COPY", SF_DEVICE_HOST_COPY},
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
        if (PyModule_AddIntConstant(m, K[i].name, K[i].value) < 0)
            return -1;
    return 0;
}

static int add_type(PyObject *m, const char *name, PyTypeObject *t)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "shardfeed._shardfeed",
    "C part of shardfeed: Reader, Batch, Array (DLPack / buffer protocol), Dataset. "
    "Use the shardfeed package.",
    -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__shardfeed(void);

PyMODINIT_FUNC PyInit__shardfeed(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (!sf_py_error) {
        sf_py_error = PyErr_NewExceptionWithDoc(
            "shardfeed.Error",
            "A failure reported by the shardfeed C library. str() is sf_strerror(code) plus "
            "the detail (file, shard, record, offset); .code is the library's code (negative: "
            "an SF_E_* value or -errno), .reason its sf_strerror, .errno the errno or None.",
            PyExc_RuntimeError, NULL);
        if (!sf_py_error)
            goto fail;
    }
    Py_INCREF(sf_py_error);
    if (PyModule_AddObject(m, "Error", sf_py_error) < 0) {
        Py_DECREF(sf_py_error);
        goto fail;
    }
    if (add_type(m, "Array", &sf_py_array_type) < 0 || add_type(m, "Reader", &sf_py_reader_type) < 0 ||
        add_type(m, "Batch", &sf_py_batch_type) < 0 ||
        add_type(m, "Dataset", &sf_py_dataset_type) < 0 ||
        add_type(m, "HostStream", &sf_py_host_stream_type) < 0 || add_constants(m) < 0 ||
        PyModule_AddStringConstant(m, "__version__", sf_version()) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
