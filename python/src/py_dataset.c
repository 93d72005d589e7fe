/* _shardfeed.Dataset: an sf_dataset for inspection and random access. Values
 * are copies the caller owns (see dataset_get), so nothing outside a call
 * refers to the dataset's memory. */
#include "py_internal.h"

static sf_dataset *dataset_handle(const sf_py_dataset *d)
{
    return d->owner.handle;
}

/* The owner's free_handle, without the GIL: closing a dataset at a URL
 * waits for its prefetcher's downloads and publishes, which may need other
 * Python threads (a server in the same process, or anything the caller runs
 * meanwhile). */
static void dataset_free_handle(void *handle, void *ctx)
{
    const sf_py_dataset *self = ctx;
    /* A dataset at a URL inherited through a fork is leaked: closing it
     * joined threads that do not exist in the child (a segfault), and
     * would unpin cache files whose locks the parent shares, or end its
     * connections. */
    if (self->remote && self->pid != sf_py_current_pid())
        return;
    Py_BEGIN_ALLOW_THREADS
    sf_dataset_close(handle);
    Py_END_ALLOW_THREADS
}

static int dataset_usable(sf_py_dataset *d)
{
    if (!sf_py_owner_usable(&d->owner, "dataset"))
        return 0;
    if (d->remote && d->pid != sf_py_current_pid()) {
        /* Its prefetcher and the cache's publisher are the parent's threads:
         * a download in the child was never published, and other readers
         * of the cache waited for it 120 s. */
        PyErr_SetString(PyExc_RuntimeError,
                        "shardfeed: this dataset at a URL was opened in another process (before "
                        "a fork); open it again in this process (a DataLoader worker: in "
                        "worker_init_fn, or on first use in __getitem__)");
        return 0;
    }
    return 1;
}

static PyObject *dataset_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "remote_mode", "cache_dir", "cache_limit", NULL};
    PyObject *path = NULL;
    sf_remote_opts remote = SF_REMOTE_OPTS_INIT;
    unsigned long long cache_limit = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|izK:Dataset", kwlist, PyUnicode_FSConverter,
                                     &path, &remote.mode, &remote.cache_dir, &cache_limit))
        return NULL;
    remote.cache_limit = cache_limit;
    sf_py_dataset *self = (sf_py_dataset *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(path);
        return NULL;
    }
    sf_dataset *ds = NULL;
    int rc;
    const char *p = PyBytes_AS_STRING(path);
    int at_url = sf_is_url(p);
    Py_BEGIN_ALLOW_THREADS
    rc = sf_dataset_open_ex(&ds, p, &remote);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc < 0) {
        Py_DECREF(self);
        return sf_py_raise(rc);
    }
    self->remote = at_url;
    self->pid = sf_py_current_pid();
    sf_py_owner_init(&self->owner, ds, dataset_free_handle, self);
    return (PyObject *)self;
}

static void dataset_dealloc(sf_py_dataset *self)
{
    sf_py_owner_dealloc(&self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *dataset_num_samples(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    return PyLong_FromUnsignedLongLong(sf_dataset_num_samples(dataset_handle(self)));
}

static PyObject *dataset_align(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    return PyLong_FromUnsignedLong(sf_dataset_align(dataset_handle(self)));
}

static PyObject *dataset_dataset_id(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    return PyLong_FromUnsignedLongLong(sf_dataset_id(dataset_handle(self)));
}

/* fields() -> list of (name, dtype code, dtype name, npy descr, shape,
 * storage name, item_size, codec name) */
static PyObject *dataset_fields(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    uint32_t n = sf_dataset_num_fields(dataset_handle(self));
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (uint32_t k = 0; k < n; k++) {
        sf_field_info fi;
        int rc = sf_dataset_field(&fi, dataset_handle(self), k);
        if (rc < 0) {
            Py_DECREF(out);
            return sf_py_raise(rc);
        }
        PyObject *shape = PyTuple_New(fi.ndim);
        if (!shape) {
            Py_DECREF(out);
            return NULL;
        }
        for (uint32_t i = 0; i < fi.ndim; i++)
            PyTuple_SET_ITEM(shape, i, PyLong_FromUnsignedLongLong(fi.shape[i]));
        PyObject *item = Py_BuildValue("(sissNsKs)", fi.name, fi.dtype, fi.dtype_name,
                                       fi.npy_descr, shape, sf_storage_name(fi.storage),
                                       (unsigned long long)fi.item_size, sf_codec_name(fi.codec));
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, item);
    }
    return out;
}

/* shards() -> list of (name, first_sample, num_samples, file_size) */
static PyObject *dataset_shards(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    uint64_t n = sf_dataset_num_shards(dataset_handle(self));
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out)
        return NULL;
    for (uint64_t k = 0; k < n; k++) {
        sf_shard_info si;
        int rc = sf_dataset_shard(&si, dataset_handle(self), k);
        if (rc < 0) {
            Py_DECREF(out);
            return sf_py_raise(rc);
        }
        PyObject *item = Py_BuildValue("(sKKK)", si.name, (unsigned long long)si.first_sample,
                                       (unsigned long long)si.num_samples,
                                       (unsigned long long)si.file_size);
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)k, item);
    }
    return out;
}

/* The sample an index names (negative: from the end). A bool is refused:
 * ds[True] is not sample 1. The conversion may run Python code (__index__)
 * that closes the dataset: usability is checked after it. */
static int sample_arg(sf_py_dataset *self, PyObject *arg, uint64_t *out)
{
    if (PyBool_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "shardfeed: a sample index is an integer, not a bool");
        return -1;
    }
    long long given = PyLong_AsLongLong(arg);
    if (given == -1 && PyErr_Occurred())
        return -1;
    if (!dataset_usable(self))
        return -1;
    uint64_t n = sf_dataset_num_samples(dataset_handle(self));
    long long i = given < 0 && (unsigned long long)-(given + 1) < n ? given + (long long)n : given;
    if (i < 0 || (uint64_t)i >= n) {
        PyErr_Format(PyExc_IndexError, "shardfeed: sample %lld out of range (the dataset has %llu)",
                     given, (unsigned long long)n);
        return -1;
    }
    *out = (uint64_t)i;
    return 0;
}

static PyObject *dataset_key(sf_py_dataset *self, PyObject *arg)
{
    if (!dataset_usable(self))
        return NULL;
    uint64_t i;
    if (sample_arg(self, arg, &i) < 0)
        return NULL;
    const char *key;
    size_t len;
    int rc = sf_dataset_key(&key, &len, dataset_handle(self), i);
    if (rc < 0)
        return sf_py_raise(rc);
    return PyUnicode_DecodeUTF8(key, (Py_ssize_t)len, "strict");
}

static PyObject *dataset_keys(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    uint64_t n = sf_dataset_num_samples(dataset_handle(self));
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        const char *key;
        size_t len;
        int rc = sf_dataset_key(&key, &len, dataset_handle(self), i);
        PyObject *s = rc < 0 ? sf_py_raise(rc) : PyUnicode_DecodeUTF8(key, (Py_ssize_t)len, "strict");
        if (!s) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, s);
    }
    return out;
}

/* The value of `field` of sample i, copied (and decompressed) into a new
 * buffer object: bytes when as_bytes, else a bytearray, which the Array made
 * over it owns, so the value is writable and independent of the shard files
 * (a write never reaches a read-only mapping; a shard truncated later cannot
 * fault it). */
static PyObject *read_value(sf_py_dataset *self, uint64_t i, unsigned field, int check, int as_bytes)
{
    uint64_t size = 0, got = 0;
    sf_dataset *ds = dataset_handle(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sf_dataset_value_size(&size, ds, i, field); /* compressed: checked, at most 2^30 */
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return sf_py_raise(rc);
    if (size > (uint64_t)PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *buf = as_bytes ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size)
                             : PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!buf)
        return NULL;
    char *dst = as_bytes ? PyBytes_AS_STRING(buf) : PyByteArray_AS_STRING(buf);
    Py_BEGIN_ALLOW_THREADS /* may fault pages in and hash the record */
    rc = sf_dataset_read_value(dst, size, &got, ds, i, field, check);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(buf);
        return sf_py_raise(rc);
    }
    return buf;
}

/* get(sample, field, check) -> a writable Array [shape...] (fixed, inline),
 * a 1-D Array (variable length, numeric), or bytes (variable length, dtype
 * bytes). Always a copy the caller owns: torch.from_numpy(ds[i]["img"]).add_(1)
 * must work, and must not change the dataset. */
static PyObject *dataset_get(sf_py_dataset *self, PyObject *args)
{
    PyObject *sample;
    unsigned int field;
    int check = 1;
    if (!PyArg_ParseTuple(args, "OI|p:get", &sample, &field, &check))
        return NULL;
    if (!dataset_usable(self))
        return NULL;
    uint64_t i;
    if (sample_arg(self, sample, &i) < 0)
        return NULL;
    sf_field_info fi;
    int rc = sf_dataset_field(&fi, dataset_handle(self), field);
    if (rc < 0)
        return sf_py_raise(rc);
    int as_bytes = fi.storage == SF_STORAGE_VARIABLE && fi.dtype == SF_DTYPE_BYTES;
    sf_py_owner_acquire(&self->owner); /* a close() from another thread meanwhile waits for this call */
    PyObject *buf = read_value(self, i, field, check, as_bytes);
    PyObject *ret = NULL;
    if (buf && as_bytes) {
        ret = Py_NewRef(buf);
    } else if (buf) {
        void *data = PyByteArray_AS_STRING(buf);
        uint64_t n = (uint64_t)PyByteArray_GET_SIZE(buf) / (fi.elem_size ? fi.elem_size : 1);
        ret = fi.storage == SF_STORAGE_VARIABLE ? sf_py_array_new(buf, data, fi.dtype, 1, &n, 0)
                                         : sf_py_array_new(buf, data, fi.dtype, (int)fi.ndim, fi.shape, 0);
    }
    Py_XDECREF(buf);
    sf_py_owner_release(&self->owner);
    return ret;
}

static PyObject *dataset_close(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    sf_py_owner_close(&self->owner);
    Py_RETURN_NONE;
}

static PyObject *dataset_get_closed(sf_py_dataset *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(sf_py_owner_closed(&self->owner));
}

static PyObject *dataset_class_names(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    uint32_t n = sf_dataset_num_classes(dataset_handle(self));
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (uint32_t i = 0; out && i < n; i++) {
        const char *name;
        size_t len;
        int rc = sf_dataset_class_name(&name, &len, dataset_handle(self), i);
        PyObject *s = rc < 0 ? sf_py_raise(rc) : PyUnicode_DecodeUTF8(name, (Py_ssize_t)len, "strict");
        if (!s) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, s);
    }
    return out;
}

static PyObject *dataset_source(sf_py_dataset *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_usable(self))
        return NULL;
    return PyUnicode_FromString(sf_dataset_source(dataset_handle(self)));
}

static PyMethodDef dataset_methods[] = {
    {"class_names", (PyCFunction)dataset_class_names, METH_NOARGS,
     "class_names() -> [str]: label i is class_names()[i]; [] when the dataset has none"},
    {"source", (PyCFunction)dataset_source, METH_NOARGS,
     "source() -> str: the input format it was packed from (\"npy\", \"imagefolder\", ...)"},
    {"num_samples", (PyCFunction)dataset_num_samples, METH_NOARGS, "samples in the dataset"},
    {"align", (PyCFunction)dataset_align, METH_NOARGS, "record alignment in bytes"},
    {"dataset_id", (PyCFunction)dataset_dataset_id, METH_NOARGS,
     "dataset_id() -> int: the manifest's dataset_id (sf_dataset_id)"},
    {"fields", (PyCFunction)dataset_fields, METH_NOARGS,
     "fields() -> [(name, dtype code, dtype name, npy descr, shape, storage, item_size, codec)]"},
    {"shards", (PyCFunction)dataset_shards, METH_NOARGS,
     "shards() -> [(name, first_sample, num_samples, file_size)]"},
    {"key", (PyCFunction)dataset_key, METH_O, "key(sample) -> str"},
    {"keys", (PyCFunction)dataset_keys, METH_NOARGS, "keys() -> [str], in sample order"},
    {"get", (PyCFunction)dataset_get, METH_VARARGS,
     "get(sample, field, check=True) -> read-only Array (or bytes for a bytes field)"},
    {"close", (PyCFunction)dataset_close, METH_NOARGS,
     "close(): the dataset is freed once no get() of another thread runs on it"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef dataset_getset[] = {
    {"closed", (getter)dataset_get_closed, NULL, "close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject sf_py_dataset_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardfeed._shardfeed.Dataset",
    .tp_basicsize = sizeof(sf_py_dataset),
    .tp_dealloc = (destructor)dataset_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Dataset(path): an opened dataset (sf_dataset). Use shardfeed.open().",
    .tp_methods = dataset_methods,
    .tp_getset = dataset_getset,
    .tp_new = dataset_new,
};
