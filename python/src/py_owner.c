/* sf_py_owner: when the library handle a Python object wraps is freed
 * (py_internal.h has the state diagram). Every function runs with the GIL
 * held, which is what makes the counts safe without atomics. */
#include "py_internal.h"

#include <assert.h>
#include <pthread.h>
#include <unistd.h>

void sf_py_owner_init(sf_py_owner *o, void *handle, sf_py_free_fn free_handle, void *ctx)
{
    assert(handle && free_handle);
    o->handle = handle;
    o->free_handle = free_handle;
    o->ctx = ctx;
    o->closing = 0;
    o->holds = 0;
}

/* CLOSING -> FREED once nothing holds the handle. The handle is taken out
 * before free_handle runs: free_handle may release the GIL, and another
 * thread must then see the handle gone. */
static void owner_free_if_unused(sf_py_owner *o)
{
    if (o->handle && o->closing && o->holds == 0) {
        void *handle = o->handle;
        o->handle = NULL;
        o->free_handle(handle, o->ctx);
    }
}

int sf_py_owner_usable(const sf_py_owner *o, const char *what)
{
    if (!o->handle || o->closing) {
        PyErr_Format(PyExc_ValueError, "shardfeed: the %s is closed", what);
        return 0;
    }
    return 1;
}

int sf_py_owner_closed(const sf_py_owner *o)
{
    return o->closing || !o->handle;
}

void sf_py_owner_acquire(sf_py_owner *o)
{
    assert(o->handle);
    o->holds++;
}

void sf_py_owner_release(sf_py_owner *o)
{
    assert(o->holds > 0);
    o->holds--;
    owner_free_if_unused(o);
}

void sf_py_owner_close(sf_py_owner *o)
{
    o->closing = 1;
    owner_free_if_unused(o);
}

void sf_py_owner_dealloc(sf_py_owner *o)
{
    /* A hold belongs to something that references the Python object (a
     * batch, or a call running on it), so none is left when it dies. */
    assert(o->holds == 0);
    sf_py_owner_close(o);
}

/* This process's id, for telling a reader (or batch) inherited through a
 * fork from one of this process. getpid() is a system call (1.3 us on the
 * development VM, a paravirtualised guest), and every batch checked it
 * twice (next and release): kept here instead, set by the first caller
 * and again in the child of every fork. Read and written under the GIL
 * (the child handler runs before any other thread exists). */
static pid_t g_pid;

static void pid_after_fork(void)
{
    g_pid = getpid();
}

pid_t sf_py_current_pid(void)
{
    if (!g_pid) {
        g_pid = getpid();
        pthread_atfork(NULL, NULL, pid_after_fork);
    }
    return g_pid;
}
