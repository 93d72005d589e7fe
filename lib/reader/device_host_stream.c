/* sf_host_stream: the host-copy device's stand-in for a consumer's CUDA
 * stream (shardfeed/reader.h). Items run in order on a thread of the
 * stream's own: waits on events, event recordings, and reads of device
 * memory (a consumer's kernels). A read checks what a GPU cannot: that the
 * copy of the memory it reads has landed. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device_host.h"
#include "error_internal.h"
#include "shardfeed/reader.h"

typedef struct host_item {
    struct host_item *next;
    int kind; /* enum host_item_kind */
    host_event *event;
    uint64_t gen;
    void *dst;
    const void *src;
    size_t len;
} host_item;

struct sf_host_stream {
    struct sf_host_stream *next_live; /* the list of live streams (handles are checked) */
    pthread_t thread;
    host_item *head, *tail;
    uint64_t blocked_since; /* the head item (a WAIT) found its event pending at this time */
    int hold;    /* test hook: the stream starts nothing */
    int stop;
};

static sf_host_stream *live_streams;

static sf_host_stream *find_live(void *handle)
{
    for (sf_host_stream *s = live_streams; s; s = s->next_live)
        if (s == handle)
            return s;
    return NULL;
}

/* Runs the head item with host_lock held; 0 when it must wait for an event. */
static int run_item_locked(host_item *it)
{
    switch (it->kind) {
    case HOST_ITEM_WAIT:
        return it->event->done >= it->gen;
    case HOST_ITEM_RECORD:
        if (it->event->done < it->gen)
            it->event->done = it->gen;
        return 1;
    default: {
        host_slot_ref ref = host_slot_find(it->src, it->len);
        if (ref.d) {
            /* A read of device memory whose copy (the slot's latest when the
             * read was queued) has not landed: the consumer's stream did not
             * wait for it (sf_batch_wait_on). */
            if (!host_slot_copy_landed(ref, it->gen))
                host_hazard("a consumer reads device memory before its copy has landed", it->src,
                            it->len);
            host_slot_add_read(ref, it->gen, -1);
        }
        memcpy(it->dst, it->src, it->len);
        return 1;
    }
    }
}

static void *stream_thread(void *arg)
{
    sf_host_stream *s = arg;
    pthread_setname_np(pthread_self(), "sf-stream");
    pthread_mutex_lock(&host_lock);
    for (;;) {
        host_item *it = s->head;
        if (!it) {
            if (s->stop)
                break;
            pthread_cond_wait(&host_changed, &host_lock);
            continue;
        }
        if (s->hold || !run_item_locked(it)) {
            if (!s->hold && !s->blocked_since)
                s->blocked_since = host_now_ns();
            pthread_cond_wait(&host_changed, &host_lock);
            continue;
        }
        if (s->blocked_since) { /* a consumer's wait for a copy, as CUDA streams stall */
            it->event->waited_ns += host_now_ns() - s->blocked_since;
            s->blocked_since = 0;
        }
        s->head = it->next;
        if (!s->head)
            s->tail = NULL;
        host_event_unref(it->event);
        free(it);
        pthread_cond_broadcast(&host_changed);
    }
    pthread_mutex_unlock(&host_lock);
    return NULL;
}

int host_stream_enqueue_locked(void *stream, int kind, host_event *event, uint64_t gen, void *dst,
                               const void *src, size_t len)
{
    sf_host_stream *s = find_live(stream);
    if (!s)
        return sf_fail(SF_E_INVALID, "host-copy device: %p is not a live sf_host_stream", stream);
    host_item *it = calloc(1, sizeof *it);
    if (!it)
        return sf_fail(-ENOMEM, "out of memory");
    *it = (host_item){NULL, kind, event, gen, dst, src, len};
    if (event)
        event->refs++;
    if (kind == HOST_ITEM_READ) {
        host_slot_ref ref = host_slot_find(src, len);
        if (ref.d) {
            it->gen = host_slot_copies(ref); /* the copy whose bytes it must read */
            host_slot_add_read(ref, it->gen, 1);
        }
    }
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    pthread_cond_broadcast(&host_changed);
    return 0;
}

int sf_host_stream_create(sf_host_stream **out)
{
    if (!out)
        return sf_fail(SF_E_INVALID, "sf_host_stream_create: NULL argument");
    *out = NULL;
    sf_host_stream *s = calloc(1, sizeof *s);
    if (!s)
        return sf_fail(-ENOMEM, "out of memory");
    if (pthread_create(&s->thread, NULL, stream_thread, s) != 0) {
        free(s);
        return sf_fail(-EAGAIN, "sf_host_stream_create: cannot start the stream's thread");
    }
    pthread_mutex_lock(&host_lock);
    s->next_live = live_streams;
    live_streams = s;
    pthread_mutex_unlock(&host_lock);
    *out = s;
    return 0;
}

int sf_host_stream_read(sf_host_stream *s, void *dst, const void *src, size_t len)
{
    if (!s || (len && (!dst || !src)))
        return sf_fail(SF_E_INVALID, "sf_host_stream_read: NULL argument");
    pthread_mutex_lock(&host_lock);
    int rc = host_stream_enqueue_locked(s, HOST_ITEM_READ, NULL, 0, dst, src, len);
    pthread_mutex_unlock(&host_lock);
    return rc;
}

int sf_host_stream_hold(sf_host_stream *s, int on)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sf_host_stream_hold: NULL argument");
    pthread_mutex_lock(&host_lock);
    s->hold = on;
    pthread_cond_broadcast(&host_changed);
    pthread_mutex_unlock(&host_lock);
    return 0;
}

int sf_host_stream_synchronize(sf_host_stream *s)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sf_host_stream_synchronize: NULL argument");
    pthread_mutex_lock(&host_lock);
    int rc = 0;
    if (s->hold)
        rc = sf_fail(SF_E_STATE, "sf_host_stream_synchronize: the stream is held");
    while (!rc && s->head)
        pthread_cond_wait(&host_changed, &host_lock);
    pthread_mutex_unlock(&host_lock);
    return rc;
}

void sf_host_stream_destroy(sf_host_stream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&host_lock);
    for (sf_host_stream **p = &live_streams; *p; p = &(*p)->next_live)
        if (*p == s) {
            *p = s->next_live;
            break;
        }
    /* Its queued work runs first, as cudaStreamDestroy lets it. */
    s->hold = 0;
    s->stop = 1;
    pthread_cond_broadcast(&host_changed);
    pthread_mutex_unlock(&host_lock);
    pthread_join(s->thread, NULL);
    free(s);
}
