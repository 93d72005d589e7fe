/* Numbered jobs run by several threads, the failure of the lowest-numbered
 * failing job kept to report (open's shard metadata, a download's parts):
 * the same error whatever order the threads failed in. */
#ifndef SF_REMOTE_JOBS_H
#define SF_REMOTE_JOBS_H

#include <pthread.h>
#include <stdint.h>

#define REMOTE_JOBS_THREADS_MAX 16u

typedef struct remote_jobs {
    pthread_mutex_t lock;
    int rc;          /* the failure of job `failed`, the lowest that failed; 0: none */
    uint64_t failed;
    uint64_t detail; /* the caller's value noted with it */
    char msg[1024];  /* its sf_last_error(), which is the failing thread's own */
} remote_jobs;

/* Runs worker(arg) on `threads` threads (at most REMOTE_JOBS_THREADS_MAX,
 * this one among them; fewer when a thread cannot start) and returns when
 * all have. The workers take job numbers themselves. */
void remote_jobs_run(unsigned threads, void *(*worker)(void *), void *arg);
void remote_jobs_init(remote_jobs *j);
/* Whether a job numbered below `job` failed already: `job` need not run. */
int remote_jobs_failed_before(remote_jobs *j, uint64_t job);
/* Notes that `job` failed with rc (sf_last_error has the detail) and the
 * caller's `detail`, if it is the lowest failing job yet. */
void remote_jobs_note_failure(remote_jobs *j, uint64_t job, int rc, uint64_t detail);
/* Frees j: 0, or the noted failure raised again in this thread. */
int remote_jobs_finish(remote_jobs *j);

#endif
