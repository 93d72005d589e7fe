/* shardfeed's CPython extension (_shardfeed): shared declarations.
 *
 * Objects and who keeps what alive:
 *
 *   Reader  owns an sf_reader. close() only marks it closing; the sf_reader
 *           is freed when no Batch of it is alive and no call of another
 *           thread runs on it any more (an sf_py_owner, below).
 *   Batch   one sf_batch held by the caller; holds a strong reference to its
 *           Reader. Its dealloc calls sf_reader_release (thread-safe).
 *   Array   a view of memory owned by `owner` (a Batch, or the bytearray
 *           holding a copied random-access value); holds a strong reference
 *           to the owner. Exports
 *           the buffer protocol and, for batch memory, DLPack: every
 *           DLManagedTensor holds a reference to the Array, dropped by its
 *           deleter (which takes the GIL: consumers may call it from any
 *           thread).
 *   Dataset owns an sf_dataset. get() copies each value into memory the
 *           returned Array owns, so no Array refers to the dataset; the
 *           sf_dataset is freed at close() once no get() of another thread
 *           runs on it (an sf_py_owner).
 *
 * Only the public headers of the library are used. */
#ifndef SF_PY_INTERNAL_H
#define SF_PY_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <sys/types.h>

#include <shardfeed/shardfeed.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *sf_py_newref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#define Py_NewRef(o) sf_py_newref((PyObject *)(o))
#endif
#ifndef Py_IS_TYPE
#define Py_IS_TYPE(o, t) (Py_TYPE(o) == (t))
#endif
#if PY_VERSION_HEX < 0x03090000
#define PyObject_CallOneArg(f, a) PyObject_CallFunctionObjArgs((f), (a), NULL)
#endif

/* Fixed fields have up to 8 dimensions; a batch adds one in front. */
#define SF_PY_MAX_DIMS 9

/* PyMethodDef wants a PyCFunction; going through void(*)(void) keeps
 * -Wcast-function-type quiet for METH_VARARGS | METH_KEYWORDS methods. */
#define SF_PY_KW(fn) ((PyCFunction)(void (*)(void))(fn))

extern PyObject *sf_py_error;
extern PyTypeObject sf_py_array_type;
extern PyTypeObject sf_py_reader_type;
extern PyTypeObject sf_py_batch_type;
extern PyTypeObject sf_py_dataset_type;
extern PyTypeObject sf_py_host_stream_type;

/* Raises shardfeed.Error for a failed library call: the message is
 * sf_strerror(rc) plus sf_last_error(); .code is rc, .errno is -rc for an
 * errno code (None otherwise). Returns NULL. */
PyObject *sf_py_raise(int rc);

/* ---- Owner: when a wrapped library handle is freed ----
 *
 * A Reader or Dataset owns a library handle that outlives close() while
 * something still uses it: a batch of the Reader still alive, or a call of
 * another thread running with the GIL released. Each such use is a hold.
 *
 *   OPEN    --sf_py_owner_close, holds > 0-->   CLOSING
 *   OPEN    --sf_py_owner_close, holds == 0-->  FREED
 *   CLOSING --sf_py_owner_release of the last hold--> FREED
 *
 * FREED: free_handle(handle, ctx) has run, once, and handle is NULL.
 * Holds are taken (sf_py_owner_acquire) only while OPEN (check with
 * sf_py_owner_usable first) and always given back (sf_py_owner_release). */
typedef void (*sf_py_free_fn)(void *handle, void *ctx);

typedef struct sf_py_owner {
    void *handle; /* the library object; NULL once freed */
    sf_py_free_fn free_handle;
    void *ctx;        /* passed to free_handle */
    int closing;      /* close was asked for */
    Py_ssize_t holds; /* batches alive + calls running with the GIL released */
} sf_py_owner;

void sf_py_owner_init(sf_py_owner *o, void *handle, sf_py_free_fn free_handle, void *ctx);
/* 1 when OPEN; else 0 with ValueError "shardfeed: the WHAT is closed". */
int sf_py_owner_usable(const sf_py_owner *o, const char *what);
/* 1 when CLOSING or FREED. */
int sf_py_owner_closed(const sf_py_owner *o);
void sf_py_owner_acquire(sf_py_owner *o);
/* Gives a hold back; frees the handle when it was the last one of a CLOSING owner. */
void sf_py_owner_release(sf_py_owner *o);
/* close(): frees the handle now when nothing holds it, else at the last release. */
void sf_py_owner_close(sf_py_owner *o);
/* The wrapping object dies: no hold can be left (each one references it). */
void sf_py_owner_dealloc(sf_py_owner *o);

/* ---- Array ---- */
typedef struct sf_py_array {
    PyObject_HEAD
    PyObject *owner; /* keeps `data` valid */
    void *data;
    int dtype;       /* SPEC.md dtype code (0 = bytes, exported as uint8) */
    int readonly;    /* buffer protocol read-only; no DLPack export */
    int device;      /* enum sf_reader_device of `data`: SF_DEVICE_CPU, or a device batch's
                        device memory (then `owner` is that sf_py_batch) */
    int ndim;
    Py_ssize_t itemsize;
    Py_ssize_t nbytes;
    Py_ssize_t shape[SF_PY_MAX_DIMS];
    Py_ssize_t strides[SF_PY_MAX_DIMS]; /* bytes, C order */
} sf_py_array;

/* A C-contiguous view of `data`. `shape` has `ndim` entries. NULL with an
 * exception set on failure. */
PyObject *sf_py_array_new(PyObject *owner, void *data, int dtype, int ndim, const uint64_t *shape,
                          int readonly);

/* Whether `dtype` is an sf_dtype code (shardfeed/types.h). */
int sf_py_dtype_known(int dtype);

/* ---- Reader / Batch ---- */
typedef struct sf_py_reader {
    PyObject_HEAD
    sf_py_owner owner; /* the sf_reader; a hold per Batch alive and per running call */
    pid_t pid;         /* process that opened it: a forked child must not touch it */
    int busy;          /* a call runs with the GIL released (one thread at a time) */
    int device;        /* enum sf_reader_device batches are delivered to */
    int device_index;  /* cuda:N */
} sf_py_reader;

/* A device batch's stream handshake (DLPack's, see py_array.c): the first
 * __dlpack__(stream=S) of any of its arrays makes S wait for the batch's
 * copy and binds the batch to S; the batch is released after the work queued
 * on S (sf_reader_release_after) when its last array or tensor dies. */
typedef struct sf_py_batch {
    PyObject_HEAD
    sf_py_reader *reader;
    const sf_batch *b;
    void *stream;   /* the consumer's stream the batch is bound to (NULL: none) */
    int bound;      /* stream was set by an import */
} sf_py_batch;

/* Makes the consumer's `stream` (a cudaStream_t or sf_host_stream; NULL: the
 * host itself, which then waits for the copy) wait for the batch's copy, and
 * binds the batch to it. -1 with an exception set when the batch is bound to
 * another stream already, or the library fails. */
int sf_py_batch_import(sf_py_batch *b, void *stream);

/* ---- Dataset ---- */
typedef struct sf_py_dataset {
    PyObject_HEAD
    sf_py_owner owner; /* the sf_dataset; a hold per get() running with the GIL released */
    /* a dataset at a URL: the process that opened it. Its prefetch and
     * publish threads, its connections and cache pins are that process's:
     * a forked child refuses it (py_dataset.c, dataset_usable). */
    int remote;
    pid_t pid;
} sf_py_dataset;

/* This process's id (getpid, kept and updated in the child of every fork):
 * tells a handle inherited through a fork. Under the GIL. */
pid_t sf_py_current_pid(void);

#endif
