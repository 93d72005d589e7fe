/* _shardfeed.Reader (an sf_reader) and _shardfeed.Batch (one batch the
 * caller holds). The GIL is released while sf_reader_next waits. */
#include "py_internal.h"

#include <pthread.h>
#include <unistd.h>

#define SF_MAX_IMAGE_FIELDS 8 /* image transforms one Reader takes (shardfeed.image) */

static sf_reader *reader_handle(const sf_py_reader *self)
{
    return self->owner.handle;
}

/* The owner's free_handle: closes the sf_reader (joining its threads, so
 * without the GIL). In a forked child the reader's threads do not exist:
 * it is leaked. */
static void reader_free_handle(void *handle, void *ctx)
{
    const sf_py_reader *self = ctx;
    if (self->pid == sf_py_current_pid()) {
        Py_BEGIN_ALLOW_THREADS
        sf_reader_close(handle);
        Py_END_ALLOW_THREADS
    }
}

static int reader_usable(sf_py_reader *self)
{
    if (!sf_py_owner_usable(&self->owner, "reader"))
        return 0;
    if (self->pid != sf_py_current_pid()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "shardfeed: this reader was opened in another process (before a fork); "
                        "open a new Loader in this process");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "shardfeed: the reader is in use by another thread (one thread iterates "
                        "a Loader at a time)");
        return 0;
    }
    return 1;
}

/* A call about to release the GIL: one at a time, and the sf_reader stays
 * while it runs, whatever close() another thread calls meanwhile. */
static void reader_call_begin(sf_py_reader *self)
{
    self->busy = 1;
    sf_py_owner_acquire(&self->owner);
}

static void reader_call_end(sf_py_reader *self)
{
    self->busy = 0;
    sf_py_owner_release(&self->owner);
}

/* images=: a sequence of (field, mode, height, width, resize, scale_min,
 * scale_max, ratio_min, ratio_max, flip, layout, channels, max_pixels,
 * exact) tuples (shardfeed.image builds them) into out[0..*n). The field
 * names point into `items` (kept alive by the caller until the reader is
 * open, which copies what it needs). */
static int parse_images(sf_image_opts *out, uint32_t *n, PyObject *images, PyObject **items)
{
    *n = 0;
    *items = NULL;
    if (!images || images == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(images, "Reader: images must be a sequence of tuples");
    if (!seq)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > SF_MAX_IMAGE_FIELDS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Reader: at most %d image fields", SF_MAX_IMAGE_FIELDS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        sf_image_opts *im = &out[i];
        *im = (sf_image_opts)SF_IMAGE_OPTS_INIT;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "siIIIdddddiIKp:images",
                              &im->field, &im->mode, &im->height, &im->width, &im->resize,
                              &im->scale_min, &im->scale_max, &im->ratio_min, &im->ratio_max,
                              &im->flip, &im->layout, &im->channels, &im->max_pixels, &im->exact)) {
            Py_DECREF(seq);
            return -1;
        }
    }
    *n = (uint32_t)count;
    *items = seq; /* owns the tuples, so the field names stay valid */
    return 0;
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path",     "batch_size", "shuffle",     "seed",       "rank",
                             "world_size", "drop_last", "uneven",     "prefetch",   "engine",
                             "direct",   "verify",     "on_corrupt",  "block_size", "window",
                             "io_threads", "queue_depth", "device", "device_index", "images",
                             "remote_mode", "cache_dir", "cache_limit", NULL};
    PyObject *path = NULL;
    sf_reader_opts o = SF_READER_OPTS_INIT;
    unsigned int batch_size = 0, rank = 0, world_size = 0, prefetch = 0, block_size = 0,
                 window = 0, io_threads = 0, queue_depth = 0;
    unsigned long long seed = 0;
    int shuffle = 0, drop_last = 0, uneven = 0, engine = 0, direct = 0, verify = 1, on_corrupt = 0,
        device = SF_DEVICE_CPU, device_index = 0;
    PyObject *images = NULL, *image_items = NULL;
    sf_image_opts image_opts[SF_MAX_IMAGE_FIELDS];
    sf_remote_opts remote = SF_REMOTE_OPTS_INIT;
    unsigned long long cache_limit = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|IiKIIpiIiipiIIIIiiOizK:Reader", kwlist,
                                     PyUnicode_FSConverter, &path, &batch_size, &shuffle, &seed,
                                     &rank, &world_size, &drop_last, &uneven, &prefetch, &engine,
                                     &direct, &verify, &on_corrupt, &block_size, &window,
                                     &io_threads, &queue_depth, &device, &device_index, &images,
                                     &remote.mode, &remote.cache_dir, &cache_limit))
        return NULL;
    remote.cache_limit = cache_limit;
    o.remote = &remote;
    if (parse_images(image_opts, &o.num_images, images, &image_items)) {
        Py_DECREF(path);
        return NULL;
    }
    o.images = o.num_images ? image_opts : NULL;
    o.batch_size = batch_size;
    o.shuffle = shuffle;
    o.seed = seed;
    o.rank = rank;
    o.world_size = world_size;
    o.drop_last = drop_last;
    o.uneven = uneven;
    o.prefetch = prefetch;
    o.engine = engine;
    o.direct = direct;
    o.verify = verify ? SF_VERIFY_ON : SF_VERIFY_OFF;
    o.on_corrupt = on_corrupt;
    o.block_size = block_size;
    o.window = window;
    o.io_threads = io_threads;
    o.queue_depth = queue_depth;
    o.device = device;
    o.device_index = device_index;

    sf_py_reader *self = (sf_py_reader *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(path);
        Py_XDECREF(image_items);
        return NULL;
    }
    self->pid = sf_py_current_pid();
    self->device = device;
    self->device_index = device_index;
    sf_reader *r = NULL;
    int rc;
    const char *p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    rc = sf_reader_open(&r, p, &o);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    Py_XDECREF(image_items);
    if (rc < 0) {
        Py_DECREF(self);
        return sf_py_raise(rc);
    }
    sf_py_owner_init(&self->owner, r, reader_free_handle, self);
    return (PyObject *)self;
}

static void reader_dealloc(sf_py_reader *self)
{
    sf_py_owner_dealloc(&self->owner); /* batches hold references: none is alive here */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *reader_next(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_usable(self))
        return NULL;
    sf_py_batch *batch = PyObject_New(sf_py_batch, &sf_py_batch_type);
    if (!batch)
        return NULL;
    batch->reader = NULL;
    batch->b = NULL;
    batch->stream = NULL;
    batch->bound = 0;
    const sf_batch *b = NULL;
    sf_reader *r = reader_handle(self);
    int rc;
    reader_call_begin(self);
    Py_BEGIN_ALLOW_THREADS
    rc = sf_reader_next(&b, r);
    Py_END_ALLOW_THREADS
    if (rc < 0 || !b) {
        Py_DECREF(batch);
        PyObject *ret = rc < 0 ? sf_py_raise(rc) : Py_NewRef(Py_None);
        reader_call_end(self); /* after sf_py_raise, as in trace_write; frees the reader
                                  after a close() from another thread meanwhile */
        return ret;
    }
    /* The batch's hold first: the call's may be the last one of a reader
     * another thread closed meanwhile. */
    sf_py_owner_acquire(&self->owner);
    batch->reader = (sf_py_reader *)Py_NewRef((PyObject *)self);
    batch->b = b;
    reader_call_end(self);
    return (PyObject *)batch;
}

static PyObject *reader_set_epoch(sf_py_reader *self, PyObject *arg)
{
    unsigned long long e = PyLong_AsUnsignedLongLong(arg);
    if (e == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (!reader_usable(self))
        return NULL;
    int rc = sf_reader_set_epoch(reader_handle(self), e);
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *reader_restore(sf_py_reader *self, PyObject *args)
{
    unsigned long long e, b;
    if (!PyArg_ParseTuple(args, "KK:restore", &e, &b))
        return NULL;
    if (!reader_usable(self))
        return NULL;
    sf_resume_state s = {.epoch = e, .next_batch = b}; /* order_id 0: the Loader checks its state itself */
    int rc = sf_reader_restore(reader_handle(self), &s);
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *reader_state(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_usable(self))
        return NULL;
    sf_resume_state s;
    int rc = sf_reader_state(&s, reader_handle(self));
    if (rc < 0)
        return sf_py_raise(rc);
    return Py_BuildValue("(KK)", (unsigned long long)s.epoch, (unsigned long long)s.next_batch);
}

static PyObject *reader_num_batches(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_handle(self))
        return PyErr_Format(PyExc_ValueError, "shardfeed: the reader is closed");
    return PyLong_FromUnsignedLongLong(sf_reader_num_batches(reader_handle(self)));
}

static PyObject *reader_samples_per_epoch(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_handle(self))
        return PyErr_Format(PyExc_ValueError, "shardfeed: the reader is closed");
    return PyLong_FromUnsignedLongLong(sf_reader_samples_per_epoch(reader_handle(self)));
}

static PyObject *reader_dataset_identity(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_handle(self))
        return PyErr_Format(PyExc_ValueError, "shardfeed: the reader is closed");
    const sf_dataset *ds = sf_reader_dataset(reader_handle(self));
    return Py_BuildValue("(KK)", (unsigned long long)sf_dataset_num_samples(ds),
                         (unsigned long long)sf_dataset_id(ds));
}

static PyObject *reader_stats(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    if (!reader_handle(self))
        return PyErr_Format(PyExc_ValueError, "shardfeed: the reader is closed");
    /* sf_reader_stats takes the reader's mutex, which an I/O thread of the
     * parent may have held at the fork: in a child it waited for ever. */
    if (self->pid != sf_py_current_pid())
        return PyErr_Format(PyExc_RuntimeError, "shardfeed: this reader was opened in another "
                                                "process (before a fork); open a new Loader in "
                                                "this process");
    sf_reader_statistics s;
    int rc = sf_reader_stats(&s, reader_handle(self));
    if (rc < 0)
        return sf_py_raise(rc);
    sf_reader_bottleneck v;
    sf_reader_verdict(&v, &s);
    PyObject *fractions = Py_BuildValue(
        "{sdsdsdsdsdsdsd}", "consumer_wait", v.consumer_wait, "device_wait", v.device_wait, "io_busy",
        v.io_busy, "io_share", v.io_share, "checksum_share", v.checksum_share, "copy_share",
        v.copy_share, "decode_share", v.decode_share);
    if (!fractions)
        return NULL;
    PyObject *d = Py_BuildValue(
        "{sKsKsKsKsdsdsdsssNsKsIsIsIsK}", "bytes_read", (unsigned long long)s.bytes_read,
        "samples", (unsigned long long)s.samples, "batches", (unsigned long long)s.batches,
        "corrupt_substitutions", (unsigned long long)s.corrupt_substitutions, "wait_seconds",
        s.wait_seconds, "io_seconds", s.io_seconds, "checksum_seconds", s.checksum_seconds,
        "engine", s.engine ? s.engine : "", "direct", PyBool_FromLong(s.direct),
        "registered_bytes", (unsigned long long)s.registered_bytes, "io_threads",
        (unsigned int)s.io_threads, "queue_depth", (unsigned int)s.queue_depth, "prefetch",
        (unsigned int)s.prefetch, "slab_bytes", (unsigned long long)s.slab_bytes);
    PyObject *more = d ? Py_BuildValue(
        "{sssKsdsdsdsKsKsssNsKsdsdsdsssd}", "device", s.device ? s.device : "", "device_bytes",
        (unsigned long long)s.device_bytes, "elapsed_seconds", s.elapsed_seconds,
        "device_enqueue_seconds", s.device_enqueue_seconds, "device_wait_seconds",
        s.device_wait_seconds, "trace_events", (unsigned long long)s.trace_events, "trace_dropped",
        (unsigned long long)s.trace_dropped, "verdict", v.verdict, "fractions", fractions,
        "device_copy_bytes", (unsigned long long)s.device_copy_bytes, "device_copy_seconds",
        s.device_copy_seconds, "device_stream_wait_seconds", s.device_stream_wait_seconds,
        "decode_seconds", s.decode_seconds, "direct_reason", s.direct_reason ? s.direct_reason : "",
        "device_slot_wait_seconds", s.device_slot_wait_seconds)
                       : NULL;
    if (!d)
        Py_DECREF(fractions);
    if (!more || PyDict_Update(d, more) < 0) {
        Py_XDECREF(more);
        Py_XDECREF(d);
        return NULL;
    }
    Py_DECREF(more);
    return d;
}

static PyObject *reader_trace_start(sf_py_reader *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max_batches", NULL};
    unsigned long long max_batches = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:trace_start", kwlist, &max_batches))
        return NULL;
    if (!reader_usable(self))
        return NULL;
    int rc = sf_reader_trace_start(reader_handle(self), max_batches);
    if (rc < 0)
        return sf_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *reader_trace_write(sf_py_reader *self, PyObject *arg)
{
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    if (!reader_usable(self)) {
        Py_DECREF(path);
        return NULL;
    }
    int rc;
    const char *p = PyBytes_AS_STRING(path);
    sf_reader *r = reader_handle(self);
    reader_call_begin(self);
    Py_BEGIN_ALLOW_THREADS
    rc = sf_reader_trace_write(r, p);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    PyObject *ret = rc < 0 ? sf_py_raise(rc) : Py_NewRef(Py_None);
    reader_call_end(self); /* after sf_py_raise: freeing the reader may overwrite sf_last_error() */
    return ret;
}

static PyObject *reader_close(sf_py_reader *self, PyObject *unused)
{
    (void)unused;
    sf_py_owner_close(&self->owner);
    Py_RETURN_NONE;
}

static PyObject *reader_get_live(sf_py_reader *self, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(self->owner.holds - self->busy); /* a running call holds one too */
}

static PyObject *reader_get_closed(sf_py_reader *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(sf_py_owner_closed(&self->owner));
}

static PyObject *reader_get_freed(sf_py_reader *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(!reader_handle(self));
}

static PyMethodDef reader_methods[] = {
    {"next", (PyCFunction)reader_next, METH_NOARGS,
     "next() -> Batch, or None once at the end of an epoch (then the next epoch starts)"},
    {"set_epoch", (PyCFunction)reader_set_epoch, METH_O, "set_epoch(epoch)"},
    {"restore", (PyCFunction)reader_restore, METH_VARARGS, "restore(epoch, next_batch)"},
    {"state", (PyCFunction)reader_state, METH_NOARGS, "state() -> (epoch, next_batch)"},
    {"num_batches", (PyCFunction)reader_num_batches, METH_NOARGS, "batches per epoch (this rank)"},
    {"samples_per_epoch", (PyCFunction)reader_samples_per_epoch, METH_NOARGS,
     "samples per epoch (this rank)"},
    {"dataset_identity", (PyCFunction)reader_dataset_identity, METH_NOARGS,
     "dataset_identity() -> (num_samples, dataset_id) of the dataset the reader opened"},
    {"stats", (PyCFunction)reader_stats, METH_NOARGS,
     "stats() -> dict (sf_reader_stats, with sf_reader_verdict's verdict and fractions)"},
    {"trace_start", (PyCFunction)(void (*)(void))reader_trace_start, METH_VARARGS | METH_KEYWORDS,
     "trace_start(max_batches=0): record the stages of the next max_batches batches "
     "(0: up to the cap) (sf_reader_trace_start)"},
    {"trace_write", (PyCFunction)reader_trace_write, METH_O,
     "trace_write(path): stop recording and write the trace as Chrome trace-event JSON "
     "(sf_reader_trace_write)"},
    {"close", (PyCFunction)reader_close, METH_NOARGS,
     "close(): no more batches; the reader is freed when no batch is alive"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef reader_getset[] = {
    {"live", (getter)reader_get_live, NULL, "batches alive", NULL},
    {"closed", (getter)reader_get_closed, NULL, "close() was called", NULL},
    {"freed", (getter)reader_get_freed, NULL, "the sf_reader was freed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject sf_py_reader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardfeed._shardfeed.Reader",
    .tp_basicsize = sizeof(sf_py_reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(path, batch_size=0, shuffle=0, seed=0, rank=0, world_size=0, drop_last=False, "
              "uneven=0, prefetch=0, engine=0, direct=0, verify=True, on_corrupt=0, block_size=0, "
              "window=0, io_threads=0, queue_depth=0, device=0, device_index=0): the C streaming reader "
              "(sf_reader_opts; device: 0 cpu, 1 cuda, 2 host-copy; "
              "0 means the default). Use shardfeed.Loader.",
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_new = reader_new,
};

/* ---- Batch ---- */

static void batch_dealloc(sf_py_batch *self)
{
    sf_py_reader *reader = self->reader;
    const sf_batch *b = self->b;
    void *stream = self->stream;
    PyObject_Free(self);
    if (!reader)
        return;
    /* Thread-safe; cannot fail for a held batch. A device batch goes back
     * after the work queued on the stream it was imported on: the next copy
     * into its device buffer waits for that work (on the device). */
    if (reader->pid == sf_py_current_pid() && b->device == SF_DEVICE_CPU) {
        sf_reader_release_after(reader_handle(reader), b, stream);
    } else if (reader->pid == sf_py_current_pid()) {
        /* A device batch's release may wait on the host for its slot's copy
         * (the slot's host bytes are refilled next): without the GIL, which
         * it held for the whole copy (100 ms copies stalled every other
         * Python thread 100 ms). The owner reference held here keeps the
         * sf_reader until sf_py_owner_release below. */
        Py_BEGIN_ALLOW_THREADS
        sf_reader_release_after(reader_handle(reader), b, stream);
        Py_END_ALLOW_THREADS
    }
    sf_py_owner_release(&reader->owner);
    Py_DECREF(reader);
}

int sf_py_batch_import(sf_py_batch *self, void *stream)
{
    if (stream && self->bound && self->stream != stream) {
        PyErr_Format(PyExc_BufferError,
                     "shardfeed: batch %llu of epoch %llu was imported on stream %p already and "
                     "is released after that stream's work; import every array of a batch on "
                     "one stream (make other streams wait on it, and it on them before the "
                     "tensors die: see README, GPU delivery)",
                     (unsigned long long)self->b->index, (unsigned long long)self->b->epoch,
                     self->stream);
        return -1;
    }
    if (stream && self->bound)
        return 0; /* the stream waits already */
    sf_reader *r = reader_handle(self->reader);
    int rc;
    if (stream) {
        rc = sf_batch_wait_on(r, self->b, stream);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = sf_batch_wait(r, self->b);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        sf_py_raise(rc);
        return -1;
    }
    /* The host's own waits need no fence: its work is done when it returns. */
    if (stream) {
        self->stream = stream;
        self->bound = 1;
    }
    return 0;
}

static PyObject *ids_copy(const uint64_t *ids, uint32_t n)
{
    /* A copy (a bytearray of little-endian int64): ids kept for logging do
     * not pin the batch's slot. */
    return PyByteArray_FromStringAndSize((const char *)ids, (Py_ssize_t)n * 8);
}

static PyObject *batch_ids(sf_py_batch *self, PyObject *unused)
{
    (void)unused;
    return ids_copy(self->b->ids, self->b->size);
}

static PyObject *batch_source_ids(sf_py_batch *self, PyObject *unused)
{
    (void)unused;
    return ids_copy(self->b->source_ids, self->b->size);
}

/* A field's data as an Array: its host bytes, or for a device batch the
 * same bytes in device memory. */
static PyObject *device_array(PyObject *batch, int device, const sf_batch_field *f, int ndim,
                              const uint64_t *shape)
{
    void *data = device == SF_DEVICE_CPU ? f->data : f->device_data;
    PyObject *a = sf_py_array_new(batch, data, f->dtype, ndim, shape, 0);
    if (a)
        ((sf_py_array *)a)->device = device;
    return a;
}

/* fields() -> tuple of (name, storage, dtype, value): value is an Array
 * [size, shape...] for fixed and inline fields, (data, offsets) for
 * variable-length ones: data a 1-D Array of the packed values (uint8 for
 * dtype bytes), offsets an int64 Array of size + 1 byte offsets. */
static PyObject *batch_fields(sf_py_batch *self, PyObject *unused)
{
    (void)unused;
    const sf_batch *b = self->b;
    int dev = b->device; /* the arrays view device memory, offsets stay on the host */
    PyObject *out = PyTuple_New(b->num_fields);
    if (!out)
        return NULL;
    for (uint32_t k = 0; k < b->num_fields; k++) {
        const sf_batch_field *f = &b->fields[k];
        PyObject *value;
        if (f->storage == SF_STORAGE_VARIABLE) {
            uint64_t esz = f->elem_size ? f->elem_size : 1;
            uint64_t n = f->bytes / esz;
            uint64_t noff = (uint64_t)b->size + 1;
            PyObject *data = device_array((PyObject *)self, dev, f, 1, &n);
            PyObject *offs = data ? sf_py_array_new((PyObject *)self, (void *)f->offsets, 9 /* int64 */,
                                                    1, &noff, 0)
                                  : NULL;
            value = offs ? PyTuple_Pack(2, data, offs) : NULL;
            Py_XDECREF(data);
            Py_XDECREF(offs);
        } else {
            uint64_t shape[SF_PY_MAX_DIMS];
            uint32_t nd = f->ndim < SF_PY_MAX_DIMS - 1 ? f->ndim : SF_PY_MAX_DIMS - 1;
            shape[0] = b->size;
            for (uint32_t i = 0; i < nd; i++)
                shape[i + 1] = f->shape[i];
            value = device_array((PyObject *)self, dev, f, (int)nd + 1, shape);
        }
        PyObject *item = value ? Py_BuildValue("(siiN)", f->name, f->storage, f->dtype, value) : NULL;
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, item);
    }
    return out;
}

/* unpack() -> (epoch, index, substituted, fields(), ids(), source_ids() or
 * None when no sample was substituted): all the converter needs, in one
 * call. */
static PyObject *batch_unpack(sf_py_batch *self, PyObject *unused)
{
    const sf_batch *b = self->b;
    PyObject *fields = batch_fields(self, unused);
    PyObject *ids = fields ? ids_copy(b->ids, b->size) : NULL;
    PyObject *source = !ids               ? NULL
                       : b->substituted ? ids_copy(b->source_ids, b->size)
                                        : Py_NewRef(Py_None);
    if (!source) {
        Py_XDECREF(fields);
        Py_XDECREF(ids);
        return NULL;
    }
    return Py_BuildValue("(KKkNNN)", (unsigned long long)b->epoch, (unsigned long long)b->index,
                         (unsigned long)b->substituted, fields, ids, source);
}

static PyObject *batch_get_epoch(sf_py_batch *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(self->b->epoch);
}

static PyObject *batch_get_index(sf_py_batch *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(self->b->index);
}

static PyObject *batch_get_size(sf_py_batch *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(self->b->size);
}

static PyObject *batch_get_substituted(sf_py_batch *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(self->b->substituted);
}

static PyObject *batch_get_device(sf_py_batch *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(self->b->device);
}

static PyObject *batch_get_stream(sf_py_batch *self, void *unused)
{
    (void)unused;
    if (!self->bound)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(self->stream);
}

static PyMethodDef batch_methods[] = {
    {"fields", (PyCFunction)batch_fields, METH_NOARGS,
     "fields() -> tuple of (name, storage, dtype, Array or (data, offsets))"},
    {"ids", (PyCFunction)batch_ids, METH_NOARGS, "ids() -> bytearray of int64 sample ids (a copy)"},
    {"source_ids", (PyCFunction)batch_source_ids, METH_NOARGS,
     "source_ids() -> bytearray of int64: the ids whose data the batch holds"},
    {"unpack", (PyCFunction)batch_unpack, METH_NOARGS,
     "unpack() -> (epoch, index, substituted, fields(), ids(), source_ids() or None when "
     "substituted is 0)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef batch_getset[] = {
    {"epoch", (getter)batch_get_epoch, NULL, "epoch", NULL},
    {"index", (getter)batch_get_index, NULL, "batch number within the epoch (this rank)", NULL},
    {"size", (getter)batch_get_size, NULL, "samples in the batch", NULL},
    {"substituted", (getter)batch_get_substituted, NULL, "corrupt samples substituted", NULL},
    {"device", (getter)batch_get_device, NULL, "enum sf_reader_device the batch was delivered to",
     NULL},
    {"stream", (getter)batch_get_stream, NULL,
     "the consumer's stream the batch was imported on and is released after, or None",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject sf_py_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardfeed._shardfeed.Batch",
    .tp_basicsize = sizeof(sf_py_batch),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch held from a Reader; its slot is released when this object and every "
              "Array/tensor made from it are gone.",
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};
