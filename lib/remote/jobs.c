/* Numbered jobs on several threads, the lowest failure kept (jobs.h). */
#include <assert.h>
#include <stdio.h>

#include "error_internal.h"
#include "jobs.h"

void remote_jobs_run(unsigned threads, void *(*worker)(void *), void *arg)
{
    assert(threads >= 1 && threads <= REMOTE_JOBS_THREADS_MAX);
    pthread_t tid[REMOTE_JOBS_THREADS_MAX];
    unsigned started = 0;
    while (started + 1 < threads && pthread_create(&tid[started], NULL, worker, arg) == 0)
        started++;
    worker(arg); /* this thread too (alone, should no thread start) */
    for (unsigned t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

void remote_jobs_init(remote_jobs *j)
{
    j->rc = 0;
    j->failed = 0;
    j->detail = 0;
    j->msg[0] = '\0';
    pthread_mutex_init(&j->lock, NULL);
}

int remote_jobs_failed_before(remote_jobs *j, uint64_t job)
{
    pthread_mutex_lock(&j->lock);
    int before = j->rc && j->failed < job;
    pthread_mutex_unlock(&j->lock);
    return before;
}

void remote_jobs_note_failure(remote_jobs *j, uint64_t job, int rc, uint64_t detail)
{
    assert(rc != 0);
    pthread_mutex_lock(&j->lock);
    if (!j->rc || job < j->failed) {
        j->rc = rc;
        j->failed = job;
        j->detail = detail;
        snprintf(j->msg, sizeof j->msg, "%s", sf_last_error());
    }
    pthread_mutex_unlock(&j->lock);
}

int remote_jobs_finish(remote_jobs *j)
{
    pthread_mutex_destroy(&j->lock);
    return j->rc ? sf_fail(j->rc, "%s", j->msg) : 0;
}
