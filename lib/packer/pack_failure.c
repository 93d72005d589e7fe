/* The first failure of a pool of worker threads (pack_internal.h). */
#include "error_internal.h"
#include "pack_internal.h"

#include <stdio.h>

void pack_note_failure(pack_failure *f, pthread_mutex_t *lock, atomic_int *abort, int rc)
{
    pthread_mutex_lock(lock);
    if (!f->error) {
        f->error = rc;
        snprintf(f->message, sizeof f->message, "%s", sf_last_error());
    }
    pthread_mutex_unlock(lock);
    atomic_store(abort, 1);
}

int pack_failure_raise(const pack_failure *f)
{
    return f->error ? sf_fail(f->error, "%s", f->message) : 0;
}
