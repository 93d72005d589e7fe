/* Sampler: per-epoch order of the dataset and its split into rank batches.
 * See sampler.h for the contract. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "error_internal.h"
#include "sampler.h"

struct reader_sampler {
    reader_sampler_config cfg; /* defaults resolved (block_size, window) */
    uint64_t epoch;
    uint32_t *perm;        /* S, n entries; NULL in NONE mode */
    uint64_t global_batch; /* G = batch_size * world_size */
    uint64_t full;         /* full global batches per epoch: n / G */
    uint64_t last;         /* ids per rank in the last (partial) batch; 0 if none */
    uint64_t nblocks;      /* BLOCK mode: ceil(n / block_size) */
    int built;             /* epoch's order has been built */

    /* The order of one more epoch, built ahead by reader_sampler_prepare. */
    pthread_mutex_t spare_lock;
    pthread_cond_t spare_cv;
    uint32_t *spare;       /* n entries; NULL in NONE mode */
    uint64_t spare_epoch;
    int spare_state;       /* enum spare_state, under spare_lock */
};

enum spare_state {
    SPARE_EMPTY = 0,
    SPARE_BUILDING, /* prepare is writing it, outside spare_lock */
    SPARE_READY     /* holds spare_epoch's order */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 ----------------------- */

typedef struct rng {
    uint64_t s[4];
} rng;

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

/* Fisher–Yates shuffle of a[0..len). */
static void shuffle_u32(rng *r, uint32_t *a, uint64_t len)
{
    for (uint64_t i = len; i > 1; i--) {
        uint64_t j = rng_bounded(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ---- epoch order --------------------------------------------------------- */

static void build_global(const reader_sampler *s, uint32_t *perm, rng *r)
{
    uint64_t n = s->cfg.n;
    for (uint64_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    shuffle_u32(r, perm, n);
}

/* Shuffles the order of the blocks (runs of block_size consecutive ids, the
 * last possibly shorter), concatenates them, then shuffles within each
 * aligned window of `window` positions (the last possibly shorter).
 *
 * No scratch memory: the shuffled block indices are kept in the tail
 * perm[n-nb .. n) and expanded front to front. Expanding block k (the k-th in
 * the shuffled order) writes perm[pos, pos+len) where pos+len is the total
 * length of the first k+1 blocks; the nb-k-1 blocks after it hold at least
 * one id each, so pos+len <= n-(nb-k-1) = n-nb+k+1, the slot of the next
 * unread block index. Index k itself is read before its block is written. */
static void build_block(const reader_sampler *s, uint32_t *perm, rng *r)
{
    uint64_t n = s->cfg.n, bs = s->cfg.block_size, nb = s->nblocks;
    uint32_t *order = perm + (n - nb);
    for (uint64_t k = 0; k < nb; k++)
        order[k] = (uint32_t)k;
    shuffle_u32(r, order, nb);

    uint64_t pos = 0;
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t first = (uint64_t)order[k] * bs;
        uint64_t end = first + bs < n ? first + bs : n;
        for (uint64_t id = first; id < end; id++)
            perm[pos++] = (uint32_t)id;
    }

    uint64_t w = s->cfg.window;
    for (uint64_t start = 0; start < n; start += w)
        shuffle_u32(r, perm + start, n - start < w ? n - start : w);
}

/* Writes epoch's order S into perm (n entries). */
static void build_order(const reader_sampler *s, uint32_t *perm, uint64_t epoch)
{
    rng r;
    rng_seed(&r, s->cfg.seed, epoch);
    if (s->cfg.shuffle == SF_SHUFFLE_GLOBAL)
        build_global(s, perm, &r);
    else
        build_block(s, perm, &r);
}

/* Takes epoch's order from the spare when it holds it or is building it
 * (waiting for the build): 1 when taken, 0 when not there. */
static int take_spare(reader_sampler *s, uint64_t epoch)
{
    pthread_mutex_lock(&s->spare_lock);
    while (s->spare_state == SPARE_BUILDING && s->spare_epoch == epoch)
        pthread_cond_wait(&s->spare_cv, &s->spare_lock);
    int taken = s->spare_state == SPARE_READY && s->spare_epoch == epoch;
    if (taken) {
        uint32_t *t = s->perm;
        s->perm = s->spare;
        s->spare = t;
        s->spare_state = SPARE_EMPTY;
    }
    pthread_mutex_unlock(&s->spare_lock);
    return taken;
}

int reader_sampler_set_epoch(reader_sampler *s, uint64_t epoch)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sampler: NULL sampler");
    if (s->built && s->epoch == epoch)
        return 0; /* the order derives only from (seed, epoch) */
    s->epoch = epoch;
    s->built = 1;
    if (s->perm && !take_spare(s, epoch))
        build_order(s, s->perm, epoch); /* the spare is not touched: a build may be running */
    return 0;
}

int reader_sampler_prepare(reader_sampler *s, uint64_t epoch)
{
    if (!s)
        return sf_fail(SF_E_INVALID, "sampler: NULL sampler");
    if (s->cfg.shuffle == SF_SHUFFLE_NONE)
        return 0; /* no table: (not s->spare, which set_epoch swaps under the lock) */
    pthread_mutex_lock(&s->spare_lock);
    int start = s->spare_state != SPARE_BUILDING &&
                !(s->spare_state == SPARE_READY && s->spare_epoch == epoch);
    if (start) {
        s->spare_state = SPARE_BUILDING;
        s->spare_epoch = epoch;
    }
    pthread_mutex_unlock(&s->spare_lock);
    if (!start)
        return 0;
    /* BUILDING: set_epoch neither swaps nor writes the spare meanwhile. */
    build_order(s, s->spare, epoch);
    pthread_mutex_lock(&s->spare_lock);
    s->spare_state = SPARE_READY;
    pthread_cond_broadcast(&s->spare_cv);
    pthread_mutex_unlock(&s->spare_lock);
    return 0;
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
    pthread_cond_init(&s->spare_cv, NULL);
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
    pthread_cond_destroy(&s->spare_cv);
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
