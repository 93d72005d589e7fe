/* Sampler: decides, per epoch, which global sample ids each rank reads in
 * each of its batches.
 *
 * The epoch's order S (a permutation of 0..n-1) derives only from
 * (seed, epoch) and the mode parameters (n, shuffle, block_size, window):
 * never from rank, world_size or batch_size. Batches are cut from S with a
 * fixed *global* batch G = batch_size * world_size:
 *
 *   - full global batches j = 0 .. n/G - 1 take S[j*G .. (j+1)*G); rank r's
 *     batch j is S[j*G + r*batch_size .. j*G + (r+1)*batch_size);
 *   - the remainder R = n % G (if R > 0) forms one last global batch:
 *       drop_last            → dropped entirely;
 *       SF_UNEVEN_PAD (def.) → padded up to W*c, c = ceil(R/W), by wrapping
 *                              around to S[0], S[1], ... (positions taken
 *                              modulo n); rank r gets c ids starting at
 *                              n/G*G + r*c;
 *       SF_UNEVEN_DROP       → cut to W*c, c = floor(R/W) (no last batch if
 *                              c == 0).
 *
 * So every rank gets the same number of batches and samples every epoch, the
 * concatenation of rank batches in (batch, rank) order is S (plus the padded
 * or minus the dropped tail) whatever the world size, and with world_size 1
 * nothing is padded or dropped except by drop_last.
 *
 * Resume state is O(1): (epoch, next batch index). After set_epoch, any batch
 * is produced in O(batch_size) (reader_sampler_batch is random access).
 *
 * Memory: GLOBAL and BLOCK modes materialize S as a uint32_t array, 4 bytes
 * per sample, plus a second one for the order of an epoch built ahead
 * (reader_sampler_prepare), both allocated once by reader_sampler_create and
 * reused every epoch (so n is limited to UINT32_MAX in those modes:
 * SF_E_LIMIT above). NONE mode allocates no per-sample memory and takes any n.
 *
 * Thread safety: set_epoch mutates; the const functions may be called
 * concurrently with each other (not with set_epoch). reader_sampler_prepare
 * and prepare_step may run on one other thread concurrently with all of
 * them.
 */
#ifndef SF_READER_SAMPLER_H
#define SF_READER_SAMPLER_H

#include <stdint.h>

enum reader_shuffle { SF_SHUFFLE_NONE = 0, SF_SHUFFLE_GLOBAL = 1, SF_SHUFFLE_BLOCK = 2 };
enum reader_uneven { SF_UNEVEN_PAD = 0, SF_UNEVEN_DROP = 1 };

#define SF_SAMPLER_DEFAULT_BLOCK 64u      /* block_size when 0 */
#define SF_SAMPLER_DEFAULT_WINDOW_MULT 16u /* window = this * block_size when 0 */

typedef struct reader_sampler_config {
    uint64_t n;            /* samples in the dataset, > 0 */
    uint64_t seed;
    int shuffle;           /* enum reader_shuffle */
    uint32_t block_size;   /* BLOCK mode: consecutive ids per run (0 → default 64) */
    uint32_t window;       /* BLOCK mode: positions shuffled together (0 → default 16*block_size) */
    uint32_t batch_size;   /* > 0 */
    uint32_t rank, world_size; /* world_size > 0, rank < world_size */
    int drop_last;         /* nonzero: drop the last partial global batch */
    int uneven;            /* enum reader_uneven */
} reader_sampler_config;

typedef struct reader_sampler reader_sampler;

/* Validates cfg and creates a sampler with epoch 0's order already built.
 * SF_E_INVALID (message names the bad field) for bad arguments, SF_E_LIMIT
 * for n > UINT32_MAX in GLOBAL/BLOCK mode, -ENOMEM. *out is NULL on failure. */
int reader_sampler_create(reader_sampler **out, const reader_sampler_config *cfg);

/* NULL ok. */
void reader_sampler_free(reader_sampler *s);

/* Builds that epoch's order (O(n) for GLOBAL/BLOCK, O(1) for NONE; a no-op if
 * it is already the current epoch). Returns 0, SF_E_INVALID for s == NULL,
 * or -ENOMEM (not currently possible: all memory is taken at create). */
int reader_sampler_set_epoch(reader_sampler *s, uint64_t epoch);

/* Builds part of epoch's order ahead, into the spare array: at most about
 * `budget` steps (reader_sampler_build_cost says how many a whole order
 * takes; a step is a few nanoseconds to tens of them), so that a later
 * set_epoch(epoch) takes it in O(1) instead of building it. The reader's
 * I/O threads call it a slice per batch scheduled, spreading the O(n)
 * build over the epoch before: built in one go, 10 million samples took a
 * tenth of a second of one core, which on a small machine an I/O thread gave
 * up at every epoch boundary. Each call holds the sampler's spare lock while
 * it runs; a set_epoch of that epoch while it is part built finishes the
 * build itself; of any other epoch it builds that one in place as before. A
 * call for another epoch than the one being built starts over with that one.
 * Returns 1 when the spare holds epoch's order (or set_epoch took it
 * already, or NONE mode: nothing to build), 0 when steps remain,
 * SF_E_INVALID for s == NULL. */
int reader_sampler_prepare_step(reader_sampler *s, uint64_t epoch, uint64_t budget);

/* All of prepare_step's steps for epoch, a few thousand at a time. Returns 0
 * or SF_E_INVALID. */
int reader_sampler_prepare(reader_sampler *s, uint64_t epoch);

/* How many set_epoch calls (create's included) built an order or finished
 * one part built, rather than taking it from the spare in O(1): what a
 * reader's epoch crossings cost when its orders were not built ahead. */
uint64_t reader_sampler_set_epoch_builds(reader_sampler *s);

/* The steps of one whole order's build (about 2n; 0 in NONE mode). */
uint64_t reader_sampler_build_cost(const reader_sampler *s);

/* The current epoch (0 after create). */
uint64_t reader_sampler_epoch(const reader_sampler *s);

/* Batches per epoch for this rank (same every epoch, same for every rank). */
uint64_t reader_sampler_num_batches(const reader_sampler *s);

/* Samples per epoch for this rank (same every epoch, same for every rank). */
uint64_t reader_sampler_samples_per_epoch(const reader_sampler *s);

/* A digest (never 0) of what decides which samples batch k of an epoch holds,
 * on any rank: `dataset_id`, n, seed, shuffle, block_size and window as
 * resolved, batch_size, world_size, drop_last and uneven. Not the rank: a
 * position is the same on every rank. */
uint64_t reader_sampler_order_id(const reader_sampler *s, uint64_t dataset_id);

/* Writes the global ids of this rank's batch `b` of the current epoch into
 * ids[] (capacity batch_size) and returns the count (batch_size, or fewer for
 * a short last batch); returns 0 when b >= num_batches. O(batch_size). */
uint32_t reader_sampler_batch(const reader_sampler *s, uint64_t b, uint64_t *ids);

/* The runs of consecutive ids the order keeps and how many positions it
 * shuffles together, defaults resolved: BLOCK mode its block_size and
 * window; GLOBAL mode runs of 1 over all n; NONE mode 0 and 0 (no
 * shuffle). */
void reader_sampler_window(const reader_sampler *s, uint64_t *block_size, uint64_t *window);

/* The id at position `pos` of the epoch's permuted sequence S
 * (0 <= pos < n); UINT64_MAX when pos >= n. */
uint64_t reader_sampler_at(const reader_sampler *s, uint64_t pos);

#endif
