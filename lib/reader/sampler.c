/* Sampler: per-epoch order of the dataset and its split into rank batches.
 * See sampler.h for the contract. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "hash.h"
#include "sampler.h"

/* The PRNG (below) and an order being built, kept between build steps. */
typedef struct rng {
    uint64_t s[4];
} rng;

/* An order's build is a sequence of loops (the phases), each with its cursor
 * kept here, so that it can stop after any step and go on later with the
 * same random draws in the same sequence: built in one go or in a thousand
 * pieces, an epoch's order is the same (test_sampler.c pins the orders). */
enum build_phase {
    BUILD_FILL,           /* GLOBAL: perm[i] = i */
    BUILD_SHUFFLE,        /* GLOBAL: Fisher-Yates over perm */
    BUILD_BLOCKS_FILL,    /* BLOCK: order[k] = k, in the tail of perm */
    BUILD_BLOCKS_SHUFFLE, /* BLOCK: Fisher-Yates over the block order */
    BUILD_EXPAND,         /* BLOCK: the blocks' ids, front to front */
    BUILD_WINDOWS,        /* BLOCK: Fisher-Yates within each window */
    BUILD_DONE
};

typedef struct order_build {
    rng r;
    int phase;       /* enum build_phase */
    uint64_t i;      /* FILL: next to write; SHUFFLE, WINDOWS: Fisher-Yates cursor */
    uint64_t k;      /* EXPAND: position in the block order */
    uint64_t id, end; /* EXPAND: the ids of block order[k] still to write */
    uint64_t pos;    /* EXPAND: next position to write */
    uint64_t start;  /* WINDOWS: first position of the current window */
} order_build;

struct reader_sampler {
    reader_sampler_config cfg; /* defaults resolved (block_size, window) */
    uint64_t epoch;        /* written under spare_lock (prepare reads it) */
    uint32_t *perm;        /* S, n entries; NULL in NONE mode */
    uint64_t global_batch; /* G = batch_size * world_size */
    uint64_t full;         /* full global batches per epoch: n / G */
    uint64_t last;         /* ids per rank in the last (partial) batch; 0 if none */
    uint64_t nblocks;      /* BLOCK mode: ceil(n / block_size) */
    int built;             /* epoch's order has been built */

    /* The order of one more epoch, built ahead a step at a time by
     * reader_sampler_prepare_step. Everything below is under spare_lock,
     * which a step holds while it runs: set_epoch waits at most one step. */
    pthread_mutex_t spare_lock;
    uint32_t *spare;       /* n entries; NULL in NONE mode */
    uint64_t spare_epoch;
    int spare_state;       /* enum spare_state */
    order_build build;     /* SPARE_BUILDING: where the spare's build stands */
    uint64_t set_epoch_builds; /* set_epoch calls that built or finished an order */
};

enum spare_state {
    SPARE_EMPTY = 0,
    SPARE_BUILDING, /* part of spare_epoch's order: `build` says how far */
    SPARE_READY     /* holds spare_epoch's order */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 ----------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* The stream depends only on (seed, epoch). The four state words are
 * consecutive splitmix64 outputs, which are never all zero. */
static void rng_seed(rng *r, uint64_t seed, uint64_t epoch)
{
    uint64_t x = seed;
    uint64_t y = splitmix64(&x) ^ epoch;
    uint64_t k = splitmix64(&y);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&k);
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* 64x64 → 128-bit product: returns the high half, *lo the low half. */
static inline uint64_t mul64(uint64_t a, uint64_t b, uint64_t *lo)
{
#ifdef __SIZEOF_INT128__
    unsigned __int128 m = (unsigned __int128)a * b;
    *lo = (uint64_t)m;
    return (uint64_t)(m >> 64);
#else
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
    uint64_t mid = (p0 >> 32) + (uint32_t)p1 + (uint32_t)p2;
    *lo = (mid << 32) | (uint32_t)p0;
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
#endif
}

/* Uniform integer in [0, range), range > 0, without bias (Lemire 2019,
 * "Fast Random Integer Generation in an Interval"). */
static uint64_t rng_bounded(rng *r, uint64_t range)
{
    uint64_t lo;
    uint64_t hi = mul64(rng_next(r), range, &lo);
    if (lo < range) {
        uint64_t threshold = (0 - range) % range;
        while (lo < threshold)
            hi = mul64(rng_next(r), range, &lo);
    }
    return hi;
}

/* Swaps drawn ahead of the one being made, for prefetching (shuffle_steps),
 * and the array length from which that pays: below it the array stays in
 * the caches and the second generator would only add its draws. */
#define SHUFFLE_AHEAD 32u
#define SHUFFLE_PREFETCH_FROM (1u << 18)

/* At most `budget` steps of the Fisher–Yates shuffle of a[0..len) whose
 * cursor is *cursor (len when it starts, finished at 1 or below): the swaps
 * of the whole shuffle, in its order, however it is cut. Returns the steps
 * taken. */
static uint64_t shuffle_steps(rng *r, uint32_t *a, uint64_t *cursor, uint64_t budget)
{
    uint64_t i = *cursor, stop = i > budget ? i - budget : 0;
    if (stop < 1)
        stop = 1;
    if (i > SHUFFLE_PREFETCH_FROM) {
        /* Each swap's a[j] is a cache miss (and a TLB miss) once the array
         * outgrows the caches, and the loop waits for each in turn. The
         * draws do not depend on the array, so a copy of the generator runs
         * SHUFFLE_AHEAD swaps ahead and prefetches their a[j]: several misses
         * in flight at once, the same swaps in the same order. */
        rng lead = *r;
        uint64_t li = i;
        for (unsigned k = 0; k < SHUFFLE_AHEAD && li > stop; k++, li--)
            __builtin_prefetch(&a[rng_bounded(&lead, li)], 1);
        for (; i > stop; i--) {
            if (li > stop) {
                __builtin_prefetch(&a[rng_bounded(&lead, li)], 1);
                li--;
            }
            uint64_t j = rng_bounded(r, i);
            uint32_t t = a[i - 1];
            a[i - 1] = a[j];
            a[j] = t;
        }
    }
    for (; i > stop; i--) {
        uint64_t j = rng_bounded(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
    uint64_t taken = *cursor > i ? *cursor - i : 0;
    *cursor = i;
    return taken;
}

/* ---- epoch order --------------------------------------------------------- *
 *
 * GLOBAL: the identity, shuffled.
 *
 * BLOCK: shuffles the order of the blocks (runs of block_size consecutive
 * ids, the last possibly shorter), concatenates them, then shuffles within
 * each aligned window of `window` positions (the last possibly shorter).
 *
 * No scratch memory: the shuffled block indices are kept in the tail
 * perm[n-nb .. n) and expanded front to front. Expanding block k (the k-th in
 * the shuffled order) writes perm[pos, pos+len) where pos+len is the total
 * length of the first k+1 blocks; the nb-k-1 blocks after it hold at least
 * one id each, so pos+len <= n-(nb-k-1) = n-nb+k+1, the slot of the next
 * unread block index. Index k itself is read before its block is written
 * (and kept in the build's id/end while it is, should the build stop). */

static void build_begin(const reader_sampler *s, order_build *b, uint64_t epoch)
{
    memset(b, 0, sizeof *b);
    rng_seed(&b->r, s->cfg.seed, epoch);
    b->phase = s->cfg.shuffle == SF_SHUFFLE_GLOBAL ? BUILD_FILL : BUILD_BLOCKS_FILL;
}

/* Writes a[i] = i from the cursor on, at most `budget` of them; returns how
 * many. */
static uint64_t fill_steps(uint32_t *a, uint64_t len, uint64_t *cursor, uint64_t budget)
{
    uint64_t i = *cursor, end = len - i > budget ? i + budget : len;
    for (; i < end; i++)
        a[i] = (uint32_t)i;
    uint64_t taken = end - *cursor;
    *cursor = end;
    return taken;
}

/* Writes the next blocks' ids (EXPAND), at most `budget` of them. */
static uint64_t expand_steps(const reader_sampler *s, order_build *b, uint32_t *perm,
                             uint64_t budget)
{
    uint64_t n = s->cfg.n, bs = s->cfg.block_size, nb = s->nblocks, taken = 0;
    const uint32_t *order = perm + (n - nb);
    while (taken < budget && b->k < nb) {
        if (b->id == b->end) { /* block order[k] starts: read before it is written */
            b->id = (uint64_t)order[b->k] * bs;
            b->end = b->id + bs < n ? b->id + bs : n;
        }
        for (; b->id < b->end && taken < budget; taken++)
            perm[b->pos++] = (uint32_t)b->id++;
        if (b->id == b->end)
            b->k++;
    }
    return taken;
}

/* Shuffles within the next windows (WINDOWS), at most `budget` steps; a
 * window counts one step more than its swaps, so that windows of one
 * position (no swap) still use the budget up. */
static uint64_t window_steps(const reader_sampler *s, order_build *b, uint32_t *perm,
                             uint64_t budget)
{
    uint64_t n = s->cfg.n, w = s->cfg.window, taken = 0;
    while (taken < budget && b->start < n) {
        if (b->i == 0) { /* the window at start begins */
            b->i = n - b->start < w ? n - b->start : w;
            taken++;
        }
        uint64_t left = taken < budget ? budget - taken : 0;
        taken += shuffle_steps(&b->r, perm + b->start, &b->i, left);
        if (b->i <= 1) {
            b->start += w;
            b->i = 0;
        }
    }
    return taken;
}

/* Runs at most about `budget` steps of build b of an order into perm
 * (n entries); 1 when the order is complete. */
static int build_steps(const reader_sampler *s, order_build *b, uint32_t *perm, uint64_t budget)
{
    uint64_t n = s->cfg.n, nb = s->nblocks;
    while (b->phase != BUILD_DONE && budget > 0) {
        uint64_t taken = 0;
        switch (b->phase) {
        case BUILD_FILL:
            taken = fill_steps(perm, n, &b->i, budget);
            if (b->i == n) {
                b->phase = BUILD_SHUFFLE;
                b->i = n;
            }
            break;
        case BUILD_SHUFFLE:
            taken = shuffle_steps(&b->r, perm, &b->i, budget);
            if (b->i <= 1)
                b->phase = BUILD_DONE;
            break;
        case BUILD_BLOCKS_FILL:
            taken = fill_steps(perm + (n - nb), nb, &b->i, budget);
            if (b->i == nb) {
                b->phase = BUILD_BLOCKS_SHUFFLE;
                b->i = nb;
            }
            break;
        case BUILD_BLOCKS_SHUFFLE:
            taken = shuffle_steps(&b->r, perm + (n - nb), &b->i, budget);
            if (b->i <= 1)
                b->phase = BUILD_EXPAND; /* k, id, end and pos are 0 */
            break;
        case BUILD_EXPAND:
            taken = expand_steps(s, b, perm, budget);
            if (b->k == nb) {
                assert(b->pos == n);
                b->phase = BUILD_WINDOWS;
                b->i = 0;
                b->start = 0;
            }
            break;
        case BUILD_WINDOWS:
            taken = window_steps(s, b, perm, budget);
            if (b->start >= n)
                b->phase = BUILD_DONE;
            break;
        default:
            assert(0 && "unknown build phase");
            return 1;
        }
        budget = taken < budget ? budget - taken : 0;
    }
    return b->phase == BUILD_DONE;
}

/* Writes epoch's order S into perm (n entries), in one go. */
static void build_order(const reader_sampler *s, uint32_t *perm, uint64_t epoch)
{
    order_build b;
    build_begin(s, &b, epoch);
    int done = build_steps(s, &b, perm, UINT64_MAX);
    assert(done);
    (void)done;
}

/* Under spare_lock: takes epoch's order from the spare when it holds it or
 * part of it (finishing that build here): 1 when taken, 0 when not there. */
static int take_spare_locked(reader_sampler *s, uint64_t epoch)
{
    if (s->spare_state == SPARE_BUILDING && s->spare_epoch == epoch &&
        build_steps(s, &s->build, s->spare, UINT64_MAX))
        s->spare_state = SPARE_READY;
    if (s->spare_state != SPARE_READY || s->spare_epoch != epoch)
        return 0;
    uint32_t *t = s->perm;
    s->perm = s->spare;
    s->spare = t;
    s->spare_state = SPARE_EMPTY;
    return 1;
}

int reader_sampler_set_epoch(reader_sampler *s, uint64_t epoch)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sampler: NULL sampler");
    if (s->built && s->epoch == epoch)
        return 0; /* the order derives only from (seed, epoch) */
    pthread_mutex_lock(&s->spare_lock);
    s->epoch = epoch;
    s->built = 1;
    int finishing = s->spare_state == SPARE_BUILDING && s->spare_epoch == epoch;
    int taken = s->perm && take_spare_locked(s, epoch);
    if (s->perm && (finishing || !taken))
        s->set_epoch_builds++;
    pthread_mutex_unlock(&s->spare_lock);
    /* Steps only write the spare, so perm is built outside the lock. */
    if (s->perm && !taken)
        build_order(s, s->perm, epoch);
    return 0;
}

int reader_sampler_prepare_step(reader_sampler *s, uint64_t epoch, uint64_t budget)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sampler: NULL sampler");
    if (s->cfg.shuffle == SF_SHUFFLE_NONE)
        return 1; /* no table */
    pthread_mutex_lock(&s->spare_lock);
    int done = 1;
    if (!(s->built && s->epoch == epoch)) { /* else: set_epoch took it already */
        if (s->spare_state == SPARE_EMPTY || s->spare_epoch != epoch) {
            build_begin(s, &s->build, epoch);
            s->spare_state = SPARE_BUILDING;
            s->spare_epoch = epoch;
        }
        if (s->spare_state == SPARE_BUILDING && build_steps(s, &s->build, s->spare, budget))
            s->spare_state = SPARE_READY;
        done = s->spare_state == SPARE_READY;
    }
    pthread_mutex_unlock(&s->spare_lock);
    return done;
}

/* Steps per prepare_step in reader_sampler_prepare: set_epoch waits at most
 * this long for the spare (tens of microseconds). */
#define PREPARE_CHUNK 4096u

int reader_sampler_prepare(reader_sampler *s, uint64_t epoch)
{
    int rc;
    while ((rc = reader_sampler_prepare_step(s, epoch, PREPARE_CHUNK)) == 0)
        ;
    return rc < 0 ? rc : 0;
}

uint64_t reader_sampler_set_epoch_builds(reader_sampler *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->spare_lock);
    uint64_t builds = s->set_epoch_builds;
    pthread_mutex_unlock(&s->spare_lock);
    return builds;
}

uint64_t reader_sampler_build_cost(const reader_sampler *s)
{
    if (!s || s->cfg.shuffle == SF_SHUFFLE_NONE)
        return 0;
    uint64_t n = s->cfg.n;
    if (s->cfg.shuffle == SF_SHUFFLE_GLOBAL)
        return 2 * n; /* fill and shuffle */
    /* fill and shuffle the blocks, expand, a step per window and its shuffle */
    return 2 * s->nblocks + 2 * n + (n - 1) / s->cfg.window + 1;
}

/* ---- lifetime ------------------------------------------------------------ */

int reader_sampler_create(reader_sampler **out, const reader_sampler_config *cfg)
{
    if (!out)
        return sf_fail(SF_E_INVALID, "sampler: NULL out");
    *out = NULL;
    if (!cfg)
        return sf_fail(SF_E_INVALID, "sampler: NULL config");
    if (cfg->n == 0)
        return sf_fail(SF_E_INVALID, "sampler: n must be > 0");
    if (cfg->batch_size == 0)
        return sf_fail(SF_E_INVALID, "sampler: batch_size must be > 0");
    if (cfg->world_size == 0)
        return sf_fail(SF_E_INVALID, "sampler: world_size must be > 0");
    if (cfg->rank >= cfg->world_size)
        return sf_fail(SF_E_INVALID, "sampler: rank %u must be < world_size %u",
                       (unsigned)cfg->rank, (unsigned)cfg->world_size);
    if (cfg->shuffle != SF_SHUFFLE_NONE && cfg->shuffle != SF_SHUFFLE_GLOBAL &&
        cfg->shuffle != SF_SHUFFLE_BLOCK)
        return sf_fail(SF_E_INVALID, "sampler: unknown shuffle mode %d", cfg->shuffle);
    if (cfg->uneven != SF_UNEVEN_PAD && cfg->uneven != SF_UNEVEN_DROP)
        return sf_fail(SF_E_INVALID, "sampler: unknown uneven mode %d", cfg->uneven);
    if (cfg->shuffle != SF_SHUFFLE_NONE && cfg->n > UINT32_MAX)
        return sf_fail(SF_E_LIMIT,
                       "sampler: n %llu exceeds %llu for a shuffled order (4-byte ids)",
                       (unsigned long long)cfg->n, (unsigned long long)UINT32_MAX);

    reader_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return sf_fail(-ENOMEM, "sampler: out of memory");
    pthread_mutex_init(&s->spare_lock, NULL);
    s->cfg = *cfg;
    s->cfg.drop_last = cfg->drop_last != 0;
    if (s->cfg.shuffle == SF_SHUFFLE_BLOCK) {
        if (s->cfg.block_size == 0)
            s->cfg.block_size = SF_SAMPLER_DEFAULT_BLOCK;
        if (s->cfg.window == 0) {
            uint64_t w = (uint64_t)SF_SAMPLER_DEFAULT_WINDOW_MULT * s->cfg.block_size;
            s->cfg.window = w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
        }
        s->nblocks = (s->cfg.n - 1) / s->cfg.block_size + 1;
    }

    uint64_t n = s->cfg.n, W = s->cfg.world_size;
    s->global_batch = (uint64_t)s->cfg.batch_size * W;
    s->full = n / s->global_batch;
    uint64_t rem = n % s->global_batch;
    if (rem == 0 || s->cfg.drop_last)
        s->last = 0;
    else if (s->cfg.uneven == SF_UNEVEN_PAD)
        s->last = (rem + W - 1) / W; /* <= batch_size since rem < G */
    else
        s->last = rem / W;

    if (s->cfg.shuffle != SF_SHUFFLE_NONE) {
        /* The memory bound: 4 bytes per sample for the epoch's order and 4
         * for the next one's, once, reused every epoch. */
        s->perm = malloc((size_t)n * sizeof *s->perm);
        s->spare = malloc((size_t)n * sizeof *s->spare);
        if (!s->perm || !s->spare) {
            reader_sampler_free(s);
            return sf_fail(-ENOMEM, "sampler: cannot allocate the order of %llu samples",
                           (unsigned long long)n);
        }
    }
    int rc = reader_sampler_set_epoch(s, 0);
    if (rc < 0) {
        reader_sampler_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void reader_sampler_free(reader_sampler *s)
{
    if (!s)
        return;
    free(s->perm);
    free(s->spare);
    pthread_mutex_destroy(&s->spare_lock);
    free(s);
}

/* ---- queries ------------------------------------------------------------- */

uint64_t reader_sampler_epoch(const reader_sampler *s)
{
    return s ? s->epoch : 0;
}

uint64_t reader_sampler_num_batches(const reader_sampler *s)
{
    if (!s)
        return 0;
    return s->full + (s->last > 0);
}

uint64_t reader_sampler_order_id(const reader_sampler *s, uint64_t dataset_id)
{
    const reader_sampler_config *c = &s->cfg;
    /* Each value widened to 64 bits: no padding bytes are hashed. A tag
     * first, so that a later change of what is hashed changes every id. */
    const uint64_t v[] = {0x73666f7264657231ull /* "sforder1" */,
                          dataset_id,
                          c->n,
                          c->seed,
                          (uint64_t)c->shuffle,
                          c->block_size,
                          c->window,
                          c->batch_size,
                          c->world_size,
                          (uint64_t)(c->drop_last != 0),
                          (uint64_t)c->uneven};
    uint64_t id = XXH3_64bits(v, sizeof v);
    return id ? id : 1; /* 0 means "not recorded" in sf_resume_state */
}

uint64_t reader_sampler_samples_per_epoch(const reader_sampler *s)
{
    if (!s)
        return 0;
    return s->full * s->cfg.batch_size + s->last;
}

void reader_sampler_window(const reader_sampler *s, uint64_t *block_size, uint64_t *window)
{
    *block_size = *window = 0;
    if (s && s->cfg.shuffle == SF_SHUFFLE_BLOCK) {
        *block_size = s->cfg.block_size;
        *window = s->cfg.window < s->cfg.n ? s->cfg.window : s->cfg.n;
    } else if (s && s->cfg.shuffle == SF_SHUFFLE_GLOBAL) {
        *block_size = 1;
        *window = s->cfg.n;
    }
}

uint64_t reader_sampler_at(const reader_sampler *s, uint64_t pos)
{
    if (!s || pos >= s->cfg.n)
        return UINT64_MAX;
    return s->perm ? s->perm[pos] : pos;
}

uint32_t reader_sampler_batch(const reader_sampler *s, uint64_t b, uint64_t *ids)
{
    if (!s || !ids)
        return 0;
    uint64_t n = s->cfg.n, B = s->cfg.batch_size, r = s->cfg.rank;
    if (b < s->full) {
        uint64_t base = b * s->global_batch + r * B;
        for (uint64_t i = 0; i < B; i++)
            ids[i] = reader_sampler_at(s, base + i);
        return (uint32_t)B;
    }
    if (b > s->full || s->last == 0)
        return 0;
    /* The last global batch: positions past n wrap around to S[0], S[1], ...
     * (modulo n, for the case where the padding exceeds n). */
    uint64_t c = s->last;
    uint64_t base = s->full * s->global_batch;
    uint64_t rem = n - base;
    for (uint64_t i = 0; i < c; i++) {
        uint64_t t = r * c + i; /* offset in the tail; < W*c < rem + W */
        ids[i] = reader_sampler_at(s, t < rem ? base + t : (t - rem) % n);
    }
    return (uint32_t)c;
}
