/* The schedule of batches into slots and their delivery: which batch each
 * slot holds (schedule_locked, reposition_locked), the I/O threads' claims
 * of its samples, the batch-ready point when its last sample is done, and
 * the consumer's side (sf_reader_next, release, set_epoch, restore).
 * reader_internal.h draws the slot life cycle that these follow. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error_internal.h"
#include "reader_internal.h"

/* Stamps a stage of the slot's batch in the trace, if it has a record. */
static inline void stamp(reader_slot *s, int stage)
{
    if (s->trec)
        reader_trace_stamp(s->trec, stage, reader_now_ns());
}

/* The one place a slot's state changes (reader_internal.h, "Slot life
 * cycle"): from the state the slot is in to one the table allows, under
 * r->lock. Keeps r->held, the slots that are the caller's. */
static void slot_set_state(sf_reader *r, reader_slot *s, int from, int to)
{
    /* Every caller holds r->lock (trylock only sees that someone does). */
    assert(pthread_mutex_trylock(&r->lock) == EBUSY);
    assert(from >= 0 && from < SLOT_STATES && to >= 0 && to < SLOT_STATES);
    assert(s->state == from && "the slot is not in the state this transition starts from");
    assert((reader_slot_next[from] & SLOT_TO(to)) && "not a transition of the slot life cycle");
    if (to == SLOT_HELD)
        r->held++;
    else if (from == SLOT_RELEASING)
        r->held--;
    assert(r->held <= r->opts.prefetch);
    s->state = to;
}

/* ---- the next epoch's order, built ahead by the I/O threads ----
 *
 * A shuffled epoch's order is an O(n) Fisher-Yates shuffle (sampler.c): for
 * 10 million samples about a tenth of a second. Built by schedule_locked when
 * the schedule crossed into the next epoch, it held r->lock that long, and
 * every I/O thread and the consumer waited at each epoch boundary. So the
 * next order is built into the sampler's spare array while the current epoch
 * runs, a slice of the build's steps (reader_sampler_prepare_step) granted
 * per batch scheduled, sized so that the build is done when three quarters of
 * the epoch's batches are scheduled; the crossing takes the order in O(1).
 * Should the build fall behind, the crossing finishes it itself.
 *
 * The slices are run by the I/O thread that claims a batch's tasks
 * (reader_claim), outside r->lock, one thread at a time (order_busy). They
 * were run by an order thread of their own, which the consumer woke with a
 * condition variable; on 2 cores that thread, waking after a quarter epoch
 * asleep, took the consumer's core at the crossing, and the consumer then
 * waited a scheduler slice (0.6-1 ms) for a core with its next batch ready.
 * Over 10 M tiny records (batch 1024, 6 epochs, six alternating rounds of
 * each; README "Epoch boundaries"): 18 of 30 boundaries over 2x the median
 * gap with the order thread, 3 of 30 with the I/O threads building; the
 * median gap the same. The build's CPU is the same either way; it is the
 * extra thread's wakes that cost. */

/* Steps granted per batch at least (a few tens of microseconds of work), so
 * that epochs of many small batches do not take the slice for nothing. */
#define ORDER_MIN_SLICE 4096u
/* Slices one claim runs at most (order_take_locked). */
#define ORDER_MAX_TAKE 4u

/* Under r->lock: asks for the order after `epoch` to be built ahead. */
static void order_ahead_locked(sf_reader *r, uint64_t epoch)
{
    if (!r->order_ahead)
        return;
    r->order_want = epoch + 1;
    r->order_pending = 1;
}

/* Under r->lock: a batch was scheduled; the build may take its slice. */
static void order_grant_locked(sf_reader *r)
{
    if (!r->order_building && !r->order_pending)
        return;
    r->order_credit += r->order_slice;
}

/* Under r->lock, by a claiming I/O thread: takes the steps granted so far
 * for this thread to run (order_build_slice, after the unlock), unless
 * another thread is running a slice. Returns the steps (0: none to run) and
 * the epoch they build in *epoch. */
static uint64_t order_take_locked(sf_reader *r, uint64_t *epoch)
{
    if (!r->order_ahead || atomic_load_explicit(&r->order_busy, memory_order_acquire))
        return 0;
    if (r->order_pending) { /* a new epoch to build: the old build is dropped */
        r->order_epoch = r->order_want;
        r->order_pending = 0;
        r->order_building = 1;
    }
    if (!r->order_building || !r->order_credit)
        return 0;
    /* Credit piles up while a slice runs or no thread claims; taken a few
     * slices at a time, it delays the batch of the thread that runs it by
     * a few hundred microseconds at most. */
    uint64_t budget = r->order_credit < ORDER_MAX_TAKE * r->order_slice
                          ? r->order_credit : ORDER_MAX_TAKE * r->order_slice;
    r->order_credit -= budget;
    *epoch = r->order_epoch;
    /* Set under r->lock, which every taker holds: one slice at a time. */
    atomic_store_explicit(&r->order_busy, 1, memory_order_relaxed);
    return budget;
}

/* Outside r->lock: runs a slice order_take_locked took. */
static void order_build_slice(sf_reader *r, uint64_t epoch, uint64_t budget)
{
    if (reader_sampler_prepare_step(r->sampler, epoch, budget) != 0) {
        /* Built (or taken by the crossing already): no more grants for it,
         * unless another epoch was asked for meanwhile. Once an epoch. */
        pthread_mutex_lock(&r->lock);
        if (!r->order_pending && r->order_epoch == epoch)
            r->order_building = 0;
        pthread_mutex_unlock(&r->lock);
    }
    atomic_store_explicit(&r->order_busy, 0, memory_order_release);
}

void reader_order_start(sf_reader *r)
{
    if (r->opts.shuffle == SF_READER_SHUFFLE_NONE)
        return;
    uint64_t batches = reader_sampler_num_batches(r->sampler) * 3 / 4;
    uint64_t slice = reader_sampler_build_cost(r->sampler) / (batches ? batches : 1) + 1;
    r->order_slice = slice > ORDER_MIN_SLICE ? slice : ORDER_MIN_SLICE;
    r->order_ahead = 1;
    order_ahead_locked(r, reader_sampler_epoch(r->sampler)); /* no other thread yet */
}

/* Under r->lock: the sampler moves to `epoch` (its order built ahead when the
 * order thread had it ready), and the order thread starts on the next. */
static void enter_epoch_locked(sf_reader *r, uint64_t epoch)
{
    reader_sampler_set_epoch(r->sampler, epoch);
    order_ahead_locked(r, epoch);
}

/* Under r->lock: gives free slot `s` the batch (epoch, index) of the
 * sampler's current epoch. */
static void prepare_slot(sf_reader *r, reader_slot *s, uint64_t epoch, uint64_t index)
{
    uint32_t count = reader_sampler_batch(r->sampler, index, s->ids);
    slot_set_state(r, s, SLOT_FREE, SLOT_LOADING);
    s->gen = r->gen;
    s->claimed = 0;
    s->batch.epoch = epoch;
    s->batch.index = index;
    s->batch.size = count;
    s->batch.substituted = 0;
    memcpy(s->source_ids, s->ids, count * sizeof *s->ids);
    reader_remote_plan_locked(r, epoch, index, s->ids, count);
    reader_readahead_plan_locked(r, epoch, index);
    assert(count <= r->batch_cap); /* what the slot was sized for */
    for (uint32_t v = 0; v < r->schema->n_var; v++)
        s->var_off[(size_t)v * (r->batch_cap + 1)] = 0;
    /* Fixed-size records are placed by the I/O thread that claims them
     * (reader_claim), outside the lock: placing every sample here kept
     * the consumer, which schedules on release, busy under r->lock for the
     * whole batch while the I/O threads waited. Variable-length fields pack
     * each value after the previous one, so those are placed here, in order. */
    if (r->schema->n_var)
        for (uint32_t pos = 0; pos < count; pos++)
            reader_place_sample(r, s, pos, s->ids[pos], 0);
    reader_set_field_bytes(r, s);
    atomic_store(&s->err, 0);
    atomic_store(&s->corrupt, 0);
    s->errmsg[0] = '\0';
    s->trec = NULL;
    reader_trace *tr = reader_trace_on(r);
    if (tr && tr->nb < tr->cap_b) {
        reader_trace_batch *b = &tr->b[tr->nb++];
        b->epoch = epoch;
        b->index = index;
        b->slot = s->index;
        b->size = count;
        s->trec = b;
        stamp(s, SF_TS_SUBMITTED);
    } else if (tr) {
        tr->dropped_b++;
    }
    atomic_store(&s->reads_left, count);
    atomic_store(&s->remaining, count);
}

/* Under r->lock: fills every free slot with the next batches. Read-ahead
 * runs on into the next epoch, so epochs follow each other without a gap. */
static void schedule_locked(sf_reader *r)
{
    if (!r->started || r->stop || r->num_batches == 0 || r->retry_waits)
        return;
    int any = 0, refill = 0;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (s->state != SLOT_FREE)
            continue;
        if (s->device_busy) {
            /* Its last copy may still read the host slot (its batch was
             * released, or dropped by a reposition, with the copy queued
             * behind the consumer's work on the device), and preparing it
             * writes into it. An idle I/O thread waits for the copy first
             * (reader_claim): neither the consumer, whose release lands
             * here, nor anyone holding this lock may block on the device. */
            refill += s != r->refilling;
            continue;
        }
        if (r->sched_index >= r->num_batches) {
            r->sched_epoch++;
            r->sched_index = 0;
            enter_epoch_locked(r, r->sched_epoch);
        }
        prepare_slot(r, s, r->sched_epoch, r->sched_index++);
        order_grant_locked(r);
        any++;
    }
    /* A thread per new batch and per slot to wait for: one that leaves
     * part of a batch unclaimed wakes the next (reader_claim). */
    uint32_t want = (uint32_t)(any + refill);
    r->wake_io += want < r->io_waiting ? want : r->io_waiting;
}

/* Gives the wakes owed (r->wake_io, r->wake_consumer) now, under the lock:
 * before this thread waits on a condition itself. */
static void wake_locked(sf_reader *r)
{
    for (; r->wake_io; r->wake_io--)
        pthread_cond_signal(&r->work_cv);
    if (r->wake_consumer)
        pthread_cond_broadcast(&r->ready_cv);
    r->wake_consumer = 0;
}

/* Lets r->lock go, then gives the wakes owed. Waking after the unlock is
 * safe: every waiter checks its condition again under the lock, and one
 * that began to wait after the unlock is woken for nothing at worst. On
 * this 2-core VM a wake under the lock sent a third of the woken threads
 * straight back to sleep on the lock (small records, batch 256). */
static void unlock_and_wake(sf_reader *r)
{
    uint32_t io = r->wake_io;
    int consumer = r->wake_consumer;
    r->wake_io = 0;
    r->wake_consumer = 0;
    pthread_mutex_unlock(&r->lock);
    for (uint32_t k = 0; k < io; k++)
        pthread_cond_signal(&r->work_cv);
    if (consumer)
        pthread_cond_broadcast(&r->ready_cv);
}

/* Under r->lock: moves the delivery position, dropping read-ahead that does
 * not belong to it, and schedules nothing (the next sf_reader_next does).
 * Loading slots give back their unclaimed tasks and are freed once their
 * reads in flight finish (batch_ready sees the old gen). */
static void drop_read_ahead_locked(sf_reader *r, uint64_t epoch, uint64_t index)
{
    r->gen++;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (s->state == SLOT_READY) {
            slot_set_state(r, s, SLOT_READY, SLOT_FREE);
        } else if (s->state == SLOT_LOADING) {
            unsigned unclaimed = s->batch.size - s->claimed;
            s->claimed = s->batch.size;
            if (unclaimed && atomic_fetch_sub(&s->remaining, unclaimed) == unclaimed)
                slot_set_state(r, s, SLOT_LOADING, SLOT_FREE);
        }
    }
    r->del_epoch = r->sched_epoch = epoch;
    r->del_index = r->sched_index = index;
    if (epoch != reader_sampler_epoch(r->sampler))
        enter_epoch_locked(r, epoch);
}

/* drop_read_ahead_locked, then reading from the new position at once. */
static void reposition_locked(sf_reader *r, uint64_t epoch, uint64_t index, int force)
{
    if (!force && epoch == r->del_epoch && index == r->del_index)
        return;
    drop_read_ahead_locked(r, epoch, index);
    r->retry_waits = 0;
    schedule_locked(r);
}

/* Under r->lock: whether a live slot has tasks nobody claimed yet. */
static int unclaimed_locked(const sf_reader *r)
{
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        const reader_slot *s = &r->slots[i];
        if (s->state == SLOT_LOADING && s->gen == r->gen && s->claimed < s->batch.size)
            return 1;
    }
    return 0;
}

/* Under r->lock: a FREE slot whose last copy to wait for, the one whose
 * batch came first (its copy was queued first), or NULL. One thread waits
 * at a time: the copies complete in the order the GPU reaches them, so a
 * second waiter would gain nothing, and it would not read meanwhile. */
static reader_slot *refill_candidate_locked(sf_reader *r)
{
    if (!r->started || r->stop || r->refilling)
        return NULL;
    reader_slot *best = NULL;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        reader_slot *s = &r->slots[i];
        if (s->state != SLOT_FREE || !s->device_busy)
            continue;
        if (!best || s->batch.epoch < best->batch.epoch ||
            (s->batch.epoch == best->batch.epoch && s->batch.index < best->batch.index))
            best = s;
    }
    return best;
}

/* Called with r->lock held, returns with it held (let go meanwhile): an I/O
 * thread with nothing to read waits for slot s's last copy to finish
 * reading the host slot, then schedules into it. The copy runs after the
 * consumer's work fenced by its release (sf_reader_release_after), so this
 * wait is how a consumer whose GPU runs behind sets the pace: here, on a
 * thread of the reader, not in the consumer's release. A failed wait (the
 * device fell back to waiting for the slot's stream, or for the whole
 * device, so the slot is safe to refill) fails the next sf_reader_next. */
static void refill_wait_locked(sf_reader *r, reader_slot *s)
{
    r->refilling = s;
    unlock_and_wake(r);
    reader_trace *tr = reader_trace_on(r);
    if (tr)
        reader_trace_io_idle(tr); /* ends this thread's run: it blocks */
    uint64_t t0 = reader_now_ns();
    int rc = r->device_ops->reuse(r->device, s->index);
    uint64_t t1 = reader_now_ns();
    atomic_fetch_add_explicit(&r->st_slotwait_ns, t1 - t0, memory_order_relaxed);
    char msg[sizeof r->refill_msg];
    if (rc)
        snprintf(msg, sizeof msg, "%s", sf_last_error());
    /* s->trec is still the previous batch's (NULL: scheduled before the
     * trace began): the slot is prepared below. */
    if (s->trec && !rc && !atomic_load_explicit(&s->trec->t[SF_TS_DEV_DONE], memory_order_relaxed))
        reader_trace_stamp(s->trec, SF_TS_DEV_DONE, t1);
    if (tr)
        reader_trace_span_add(tr, SF_SPAN_SLOT_WAIT, t0, t1, s->trec);
    pthread_mutex_lock(&r->lock);
    s->device_busy = 0;
    r->refilling = NULL;
    if (rc && !r->refill_err) {
        r->refill_err = rc;
        memcpy(r->refill_msg, msg, sizeof msg);
    }
    schedule_locked(r);
}

/* Blocks a claiming thread hints at once (readahead.c). */
#define READAHEAD_TAKE 8u

unsigned reader_claim(sf_reader *r, reader_task **out, unsigned max, int block)
{
    unsigned n = 0, hints = 0;
    uint64_t hint[READAHEAD_TAKE];
    pthread_mutex_lock(&r->lock);
    for (;;) {
        if (r->stop)
            break;
        while (n < max) {
            reader_slot *best = NULL;
            for (uint32_t i = 0; i < r->opts.prefetch; i++) {
                reader_slot *s = &r->slots[i];
                if (s->state != SLOT_LOADING || s->gen != r->gen || s->claimed >= s->batch.size)
                    continue;
                if (!best || s->batch.epoch < best->batch.epoch ||
                    (s->batch.epoch == best->batch.epoch && s->batch.index < best->batch.index))
                    best = s;
            }
            if (!best)
                break;
            if (best->claimed == 0)
                stamp(best, SF_TS_CLAIMED);
            while (n < max && best->claimed < best->batch.size)
                out[n++] = &best->tasks[best->claimed++];
        }
        if (n || !block)
            break;
        reader_slot *busy = refill_candidate_locked(r);
        if (busy) {
            refill_wait_locked(r, busy);
            continue;
        }
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_io_idle(tr); /* ends this thread's run */
        r->io_waiting++;
        pthread_cond_wait(&r->work_cv, &r->lock);
        r->io_waiting--;
    }
    if (n && r->io_waiting && unclaimed_locked(r))
        r->wake_io++; /* the rest for the next thread */
    uint64_t order_steps = 0, order_epoch = 0;
    if (n) {
        hints = reader_readahead_take_locked(r, hint, READAHEAD_TAKE);
        order_steps = order_take_locked(r, &order_epoch);
    }
    unlock_and_wake(r);
    /* Hints first: the kernel starts on later blocks while this thread
     * reads its tasks. */
    if (hints) {
        uint64_t t0 = reader_now_ns();
        reader_readahead_issue(r, hint, hints);
        reader_account_time(r, reader_now_ns() - t0, 0);
    }
    if (order_steps)
        order_build_slice(r, order_epoch, order_steps);
    /* The claimed tasks are this thread's until reader_task_done, and
     * their slots stay LOADING until then, so placing them unlocked is safe.
     * Placing looks records up in the index: I/O time in the stats. */
    if (r->schema->n_var == 0 && n) {
        uint64_t t0 = reader_now_ns();
        reader_place_claimed(r, out, n);
        reader_account_time(r, reader_now_ns() - t0, 0);
    }
    if (n) {
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_io_claimed(tr);
    }
    return n;
}

/* The batch-ready point, on the I/O thread that finished the slot's last
 * task (its scratch `st` is free again): substitutes corrupt samples,
 * enqueues the device copy, and hands the slot to delivery (or frees it
 * when a reposition made it stale). */
static void batch_ready(sf_reader *r, reader_slot *s, reader_scratch *st)
{
    /* Whether the batch is still wanted matters only to the work below; with
     * none to do, the lock is taken once (each take of it is a chance to
     * sleep on it, which for small records costs more than the batch). */
    int live = 1;
    if (r->device || atomic_load(&s->corrupt)) {
        pthread_mutex_lock(&r->lock);
        live = s->gen == r->gen && !r->stop;
        pthread_mutex_unlock(&r->lock);
    }
    if (live && !atomic_load(&s->err) && atomic_load(&s->corrupt))
        reader_substitute_corrupt(r, s, st);
    stamp(s, SF_TS_CHECKSUMMED);
    if (live && !atomic_load(&s->err) && r->device) {
        s->device_busy = 1;
        uint64_t t0 = reader_now_ns();
        int rc = reader_device_copy(r, s);
        uint64_t t1 = reader_now_ns();
        atomic_fetch_add_explicit(&r->st_devenq_ns, t1 - t0, memory_order_relaxed);
        if (s->trec)
            reader_trace_stamp(s->trec, SF_TS_DEV_ENQUEUED, t1);
        int expected = 0;
        if (rc && atomic_compare_exchange_strong(&s->err, &expected, rc))
            /* this thread's detail (the CUDA call and its error): sf_strerror
             * said only "not supported" */
            snprintf(s->errmsg, sizeof s->errmsg, "batch %llu of epoch %llu: device copy failed: %s",
                     (unsigned long long)s->batch.index, (unsigned long long)s->batch.epoch,
                     sf_last_error());
    }
    pthread_mutex_lock(&r->lock);
    if (s->gen != r->gen) {
        slot_set_state(r, s, SLOT_LOADING, SLOT_FREE);
        schedule_locked(r);
    } else {
        slot_set_state(r, s, SLOT_LOADING, SLOT_READY);
        /* Only the batch the consumer waits for wakes it: woken for a later
         * one, it took a core from the thread still reading its own (for
         * small records a batch takes tens of microseconds, and a wake on
         * this 2-core VM several). */
        if (r->consumers_waiting && s->batch.epoch == r->del_epoch && s->batch.index == r->del_index)
            r->wake_consumer = 1;
    }
    unlock_and_wake(r);
}

/* Tasks of one slot, finished together on I/O thread `io`: one update of
 * the slot's counters (the shared atomics cost more than a small record's
 * copy). */
static void slot_tasks_done(reader_io_thread *io, reader_task *const *tasks, unsigned n)
{
    sf_reader *r = io->r;
    reader_slot *s = tasks[0]->slot;
    if (s->trec && atomic_fetch_sub(&s->reads_left, n) == n)
        stamp(s, SF_TS_READ);
    reader_verify_tasks(r, io->scratch.xxh, tasks, n);
    reader_trace *tr = reader_trace_on(r);
    for (unsigned i = 0; tr && i < n; i++)
        reader_trace_io_task(tr, s->trec);
    if (atomic_fetch_sub(&s->remaining, n) == n)
        batch_ready(r, s, &io->scratch);
}

void reader_tasks_done(reader_io_thread *io, reader_task *const *tasks, unsigned n)
{
    sf_reader *r = io->r;
    uint64_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        for (uint32_t k = 0; k < tasks[i]->nreads; k++)
            bytes += tasks[i]->reads[k].done;
    if (bytes)
        atomic_fetch_add_explicit(&r->st_bytes, bytes, memory_order_relaxed);
    /* Claims hand out tasks in batch order, so a slot's tasks are mostly
     * adjacent; where they are not, its count simply drops in several steps. */
    unsigned first = 0;
    for (unsigned i = 1; i <= n; i++)
        if (i == n || tasks[i]->slot != tasks[first]->slot) {
            slot_tasks_done(io, tasks + first, i - first);
            first = i;
        }
}

void reader_task_done(reader_io_thread *io, reader_task *t)
{
    reader_tasks_done(io, &t, 1);
}

/* SF_E_INVALID for an epoch past SF_MAX_EPOCH: the schedule counts on from
 * it (read-ahead into epoch + 1, the next epoch at the end of one), and
 * near 2^64 that count would wrap to epoch 0 unseen. */
static int epoch_check(const char *fn, uint64_t epoch)
{
    if (epoch <= SF_MAX_EPOCH)
        return 0;
    return sf_fail(SF_E_INVALID, "%s: epoch %llu is above the limit, SF_MAX_EPOCH = 2^63 - 1 = %llu",
                   fn, (unsigned long long)epoch, (unsigned long long)SF_MAX_EPOCH);
}

int sf_reader_set_epoch(sf_reader *r, uint64_t epoch)
{
    if (!r)
        return sf_fail(SF_E_INVALID, "sf_reader_set_epoch: NULL reader");
    int rc = epoch_check("sf_reader_set_epoch", epoch);
    if (rc)
        return rc;
    pthread_mutex_lock(&r->lock);
    /* The documented loop calls set_epoch at the top of every epoch, also
     * the first one after a restore: that call must not throw the restored
     * position away and replay the epoch. */
    if (!(r->restored && epoch == r->del_epoch))
        reposition_locked(r, epoch, 0, 0);
    r->restored = 0;
    unlock_and_wake(r);
    return 0;
}

int sf_reader_state(sf_resume_state *out, const sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_state: NULL argument");
    sf_reader *rw = (sf_reader *)r; /* the lock is not part of the value */
    pthread_mutex_lock(&rw->lock);
    out->epoch = r->del_epoch;
    out->next_batch = r->del_index;
    out->order_id = r->order_id;
    pthread_mutex_unlock(&rw->lock);
    return 0;
}

int sf_reader_restore(sf_reader *r, const sf_resume_state *state)
{
    if (!r || !state)
        return sf_fail(SF_E_INVALID, "sf_reader_restore: %s is NULL", !r ? "r" : "state");
    int rc = epoch_check("sf_reader_restore", state->epoch);
    if (rc)
        return rc;
    if (state->order_id && state->order_id != r->order_id)
        return sf_fail(SF_E_INVALID, "sf_reader_restore: the state was saved by a reader of another dataset or "
                       "other order options (its order_id %016llx, this reader's %016llx): the dataset, "
                       "batch_size, world_size, shuffle, seed, block_size, window, drop_last and uneven "
                       "must be those it was saved with",
                       (unsigned long long)state->order_id, (unsigned long long)r->order_id);
    if (state->next_batch > r->num_batches)
        return sf_fail(SF_E_INVALID, "resume state: batch %llu, but an epoch has %llu batches (were the options the same?)",
                       (unsigned long long)state->next_batch, (unsigned long long)r->num_batches);
    pthread_mutex_lock(&r->lock);
    reposition_locked(r, state->epoch, state->next_batch, 0);
    r->restored = 1;
    unlock_and_wake(r);
    return 0;
}

/* Under r->lock: "batches still held (epoch, index): (0, 3) (0, 4) ..." in
 * order, the first HELD_LISTED of them, for the error of a caller who holds
 * every slot: each names a batch a stray reference keeps. */
#define HELD_LISTED 8u
static const char *describe_held_locked(const sf_reader *r, char *buf, size_t cap)
{
    const sf_batch *list[HELD_LISTED];
    uint32_t n = 0, more = 0;
    for (uint32_t i = 0; i < r->opts.prefetch; i++) {
        const sf_batch *b = &r->slots[i].batch;
        if (r->slots[i].state != SLOT_HELD && r->slots[i].state != SLOT_RELEASING)
            continue;
        /* Insertion into the sorted list, dropping the latest past its end. */
        uint32_t j = n < HELD_LISTED ? n++ : HELD_LISTED;
        more += j == HELD_LISTED;
        for (; j > 0 && (list[j - 1]->epoch > b->epoch ||
                         (list[j - 1]->epoch == b->epoch && list[j - 1]->index > b->index));
             j--)
            if (j < HELD_LISTED)
                list[j] = list[j - 1];
        if (j < HELD_LISTED)
            list[j] = b;
    }
    size_t len = (size_t)snprintf(buf, cap, "batches still held (epoch, index):");
    for (uint32_t j = 0; j < n && len < cap; j++)
        len += (size_t)snprintf(buf + len, cap - len, " (%llu, %llu)",
                                (unsigned long long)list[j]->epoch, (unsigned long long)list[j]->index);
    if (more && len < cap)
        snprintf(buf + len, cap - len, " and %u later ones", more);
    return buf;
}

int sf_reader_next(const sf_batch **out, sf_reader *r)
{
    if (!out || !r)
        return sf_fail(SF_E_INVALID, "sf_reader_next: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&r->lock);
    if (!r->st_first_ns)
        r->st_first_ns = reader_now_ns();
    r->retry_waits = 0; /* a failed batch is read again from here on */
    if (!r->started) {
        r->started = 1;
        schedule_locked(r);
    }
    int rc = 0;
    r->restored = 0; /* the restored position is being consumed */
    if (r->refill_err) {
        /* An I/O thread's wait for a slot's copy failed (refill_wait_locked):
         * the device's error, once; the batches are unharmed and the next
         * call goes on. */
        rc = sf_fail(r->refill_err, "waiting for a batch copy before reading into its slot "
                                    "again failed: %s", r->refill_msg);
        r->refill_err = 0;
        unlock_and_wake(r);
        return rc;
    }
    for (;;) {
        if (r->del_index >= r->num_batches) {
            /* End of the epoch: say so once, then continue with the next.
             * SF_MAX_EPOCH's end is the last: counted on, the state (2^63,
             * 0) would be one sf_reader_restore refuses; it stays (SF_MAX_EPOCH,
             * num_batches), and every later call says the end again. */
            if (r->del_epoch < SF_MAX_EPOCH) {
                r->del_epoch++;
                r->del_index = 0;
            }
            break;
        }
        if (r->held >= r->opts.prefetch) {
            char held[256];
            rc = sf_fail(SF_E_STATE,
                         "the caller holds all %u batch slots (prefetch = %u): %s; release a batch "
                         "before asking for the next",
                         r->held, r->opts.prefetch, describe_held_locked(r, held, sizeof held));
            break;
        }
        reader_slot *s = NULL;
        for (uint32_t i = 0; i < r->opts.prefetch; i++) {
            reader_slot *c = &r->slots[i];
            if ((c->state == SLOT_READY || c->state == SLOT_LOADING) && c->gen == r->gen &&
                c->batch.epoch == r->del_epoch && c->batch.index == r->del_index) {
                s = c;
                break;
            }
        }
        if (s && s->state == SLOT_READY) {
            int err = atomic_load(&s->err);
            if (err) {
                /* Drop it and everything read ahead; the next call retries,
                 * reading then, not now: a cause the caller mends between
                 * the calls (a shard put back, a store recovered) is seen.
                 * Until then nothing schedules (read-ahead still landing
                 * and releases would read the failed batch at once). */
                rc = sf_fail(err, "%s", s->errmsg);
                slot_set_state(r, s, SLOT_READY, SLOT_FREE);
                drop_read_ahead_locked(r, r->del_epoch, r->del_index);
                r->retry_waits = 1;
                break;
            }
            slot_set_state(r, s, SLOT_READY, SLOT_HELD);
            r->del_index++;
            r->st_batches++;
            r->st_samples += s->batch.size;
            r->st_subst += s->batch.substituted;
            stamp(s, SF_TS_HANDED);
            *out = &s->batch;
            break;
        }
        if (!s)
            schedule_locked(r);
        uint64_t t0 = reader_now_ns();
        wake_locked(r);
        r->consumers_waiting++;
        pthread_cond_wait(&r->ready_cv, &r->lock);
        r->consumers_waiting--;
        uint64_t t1 = reader_now_ns();
        r->st_wait_ns += t1 - t0;
        reader_trace *tr = reader_trace_on(r);
        if (tr)
            reader_trace_span_add(tr, SF_SPAN_WAIT, t0, t1, s ? s->trec : NULL);
    }
    r->st_last_ns = reader_now_ns();
    unlock_and_wake(r);
    return rc;
}

int sf_reader_release_after(sf_reader *r, const sf_batch *batch, void *stream)
{
    if (!r || !batch)
        return sf_fail(SF_E_INVALID, "sf_reader_release: NULL argument");
    reader_slot *s = NULL;
    for (uint32_t i = 0; i < r->opts.prefetch; i++)
        if (&r->slots[i].batch == batch)
            s = &r->slots[i];
    /* The first lock marks the slot RELEASING: a second release of the same
     * batch, from another thread at the same time, finds it not HELD. */
    pthread_mutex_lock(&r->lock);
    int held = s && s->state == SLOT_HELD;
    if (held && !(r->device && s->device_busy)) {
        /* No device work to fence: freed under this one lock. */
        slot_set_state(r, s, SLOT_HELD, SLOT_RELEASING);
        stamp(s, SF_TS_RELEASED);
        slot_set_state(r, s, SLOT_RELEASING, SLOT_FREE);
        schedule_locked(r);
        unlock_and_wake(r);
        return 0;
    }
    if (held)
        slot_set_state(r, s, SLOT_HELD, SLOT_RELEASING);
    pthread_mutex_unlock(&r->lock);
    if (!held)
        return sf_fail(SF_E_INVALID, "sf_reader_release: not a batch the caller holds (released "
                                     "already, or being released by another call)");
    /* RELEASING: nothing else touches the slot, so the device records the
     * fence outside the lock. The next copy into the device buffer waits for
     * the work on `stream`, on the device. The host slot stays device_busy:
     * its copy may still be queued (behind the consumer's earlier steps, when
     * its GPU runs behind), and the consumer does not wait for it here; the
     * I/O thread that refills the slot does (refill_wait_locked). */
    uint64_t t0 = reader_now_ns();
    int rc = r->device_ops->release(r->device, s->index, stream);
    atomic_fetch_add_explicit(&r->st_devwait_ns, reader_now_ns() - t0, memory_order_relaxed);
    pthread_mutex_lock(&r->lock);
    stamp(s, SF_TS_RELEASED);
    slot_set_state(r, s, SLOT_RELEASING, SLOT_FREE);
    schedule_locked(r);
    unlock_and_wake(r);
    return rc;
}

int sf_reader_release(sf_reader *r, const sf_batch *batch)
{
    return sf_reader_release_after(r, batch, NULL);
}
