/* What the pools of worker threads of pack (shard writers, the image
 * pre-pass) share: the first failure, and waiting for the pool while
 * reporting progress (pack_internal.h). */
#include "error_internal.h"
#include "pack_internal.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

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

void pack_wait_workers(pthread_mutex_t *lock, pthread_cond_t *finished, const int *running,
                       void (*tick)(void *), void *arg)
{
    pthread_mutex_lock(lock);
    while (*running > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        if (pthread_cond_timedwait(finished, lock, &until) == ETIMEDOUT && tick && *running > 0) {
            pthread_mutex_unlock(lock);
            tick(arg);
            pthread_mutex_lock(lock);
        }
    }
    pthread_mutex_unlock(lock);
}
