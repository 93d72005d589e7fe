/* The batch slab: one page-aligned anonymous mapping holding every slot, and
 * the layout of the fields inside a slot. Allocated once at open and never
 * moved; this is what io_uring registers and what the CUDA device pins
 * (device.h, open). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error_internal.h"
#include "le.h"
#include "reader_internal.h"

static uint64_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : 4096;
}

/* a * b, or UINT64_MAX on overflow. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* The k largest of a stream of values, for the sum a batch of k distinct
 * samples can hold at most. Keeps a min-heap of the k largest seen so far
 * (k <= n / 2), or for k > n / 2 a max-heap of the n - k smallest, whose sum
 * is subtracted from the total: so at most n / 2 values are kept. */
typedef struct top_sum {
    uint64_t *heap;
    uint64_t cap, len; /* heap capacity (the values kept), entries */
    int keep_small;    /* the heap holds the smallest n - k (a max-heap) */
    uint64_t total;    /* sum of every value added */
} top_sum;

/* Whether heap entry a belongs above b (nearer the root). */
static int heap_above(const top_sum *t, uint64_t a, uint64_t b)
{
    return t->keep_small ? a > b : a < b;
}

static void heap_sift_down(top_sum *t, uint64_t i)
{
    for (;;) {
        uint64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->len && heap_above(t, t->heap[l], t->heap[m]))
            m = l;
        if (r < t->len && heap_above(t, t->heap[r], t->heap[m]))
            m = r;
        if (m == i)
            return;
        uint64_t tmp = t->heap[i];
        t->heap[i] = t->heap[m];
        t->heap[m] = tmp;
        i = m;
    }
}

static int top_sum_init(top_sum *t, uint64_t k, uint64_t n)
{
    memset(t, 0, sizeof *t);
    t->keep_small = k > n / 2;
    t->cap = t->keep_small ? n - k : k;
    if (t->cap && !(t->heap = malloc(t->cap * sizeof *t->heap)))
        return sf_fail(-ENOMEM, "out of memory sizing the batch slab");
    return 0;
}

static void top_sum_add(top_sum *t, uint64_t v)
{
    t->total += v;
    if (!t->cap)
        return;
    if (t->len < t->cap) {
        uint64_t i = t->len++;
        t->heap[i] = v;
        while (i && heap_above(t, t->heap[i], t->heap[(i - 1) / 2])) {
            uint64_t p = (i - 1) / 2, tmp = t->heap[i];
            t->heap[i] = t->heap[p];
            t->heap[p] = tmp;
            i = p;
        }
    } else if (heap_above(t, t->heap[0], v)) {
        t->heap[0] = v; /* v belongs among the kept values more than the root does */
        heap_sift_down(t, 0);
    }
}

/* Sum of the k largest values added. */
static uint64_t top_sum_done(top_sum *t)
{
    uint64_t kept = 0;
    for (uint64_t i = 0; i < t->len; i++)
        kept += t->heap[i];
    free(t->heap);
    t->heap = NULL;
    if (t->keep_small)
        return t->total - kept;
    return t->cap ? kept : 0;
}

/* The largest sum of `k` values of each variable-length field (k <= n),
 * into bytes[f]: from the index for stored values, from the decompressed
 * lengths read at open (r->zlen) for compressed ones. Also finds a field
 * with a value whose length is not a multiple of SF_DIRECT_ALIGN. */
static int var_bounds(reader_slot_layout *out, const sf_reader *r, uint64_t k, uint64_t bytes[])
{
    const sf_dataset *ds = r->ds;
    const sf_schema *s = &ds->manifest.schema;
    top_sum sums[SF_MAX_FIELDS];
    memset(sums, 0, sizeof sums);
    int rc = 0;
    for (uint32_t f = 0; f < s->field_count && !rc; f++)
        if (s->fields[f].storage == SF_STORAGE_VARIABLE)
            rc = top_sum_init(&sums[f], k, r->n);
    sf_index_entry e;
    uint64_t id = 0;
    for (uint64_t sh = 0; sh < ds->manifest.shard_count && !rc; sh++) {
        uint64_t count = ds->shards[sh].meta.header.record_count;
        for (uint64_t i = 0; i < count; i++, id++) {
            sf_dataset_entry(&e, ds, sh, i);
            for (uint32_t f = 0; f < s->field_count; f++) {
                if (s->fields[f].storage != SF_STORAGE_VARIABLE)
                    continue;
                int v = s->var_slot[f];
                /* Compressed values take their decompressed length in the slot. */
                uint64_t len = s->fields[f].codec == SF_CODEC_NONE
                                   ? e.var_len[v]
                                   : r->zlen[id * r->n_zvar + (uint32_t)r->zvar_slot[f]];
                top_sum_add(&sums[f], len);
                if (s->fields[f].codec == SF_CODEC_NONE && len % SF_DIRECT_ALIGN &&
                    out->var_unaligned < 0)
                    out->var_unaligned = (int)f;
            }
        }
    }
    for (uint32_t f = 0; f < s->field_count; f++)
        bytes[f] = top_sum_done(&sums[f]); /* frees the heap, also after a failure */
    return rc;
}

int reader_slab_layout(reader_slot_layout *out, const sf_reader *r, uint32_t samples)
{
    const sf_schema *s = r->schema;
    memset(out, 0, sizeof *out);
    out->var_unaligned = -1;
    /* A batch holds at most `samples` samples, all distinct (reader_sampler_batch
     * pads a short last batch by wrapping around only up to the samples
     * there are), so a variable-length field needs room for its `samples`
     * longest values, not `samples` times its longest: one 12 MB image among
     * small ones costs 12 MB per slot, not 12 MB per batch position.
     * Substituting a corrupt sample may repeat one; substitute() skips a
     * candidate that would not fit. */
    uint64_t var_bytes[SF_MAX_FIELDS] = {0};
    int has_var = 0;
    for (uint32_t f = 0; f < s->field_count; f++)
        /* an image field is fixed-size in the slot: every batch writes all of it */
        has_var |= s->fields[f].storage == SF_STORAGE_VARIABLE && !reader_image_field(r, f);
    if (s->n_var) {
        int rc = var_bounds(out, r, samples < r->n ? samples : r->n, var_bytes);
        if (rc)
            return rc;
    }
    uint64_t page = page_size(), pos = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        uint64_t cap = reader_image_field(r, f) ? mul_sat(reader_image_item_size(r, f), samples)
                       : fd->storage == SF_STORAGE_VARIABLE ? var_bytes[f]
                                                            : mul_sat(fd->item_size, samples);
        if (cap > (1ull << 46) || pos > (1ull << 46))
            return sf_fail(SF_E_LIMIT, "field '%s': a batch of %u needs more than 64 TiB", fd->name,
                           samples);
        out->field_off[f] = pos;
        out->field_cap[f] = cap;
        pos = sf_align_up(pos + cap, page);
    }
    out->slot_bytes = pos ? pos : page;
    out->exact = !has_var;
    return 0;
}

/* Faults every page of the slab in now (MAP_POPULATE's job, which would
 * fault it before the huge-page advice). */
static void slab_populate(uint8_t *p, uint64_t bytes)
{
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, (size_t)bytes, MADV_POPULATE_WRITE) == 0)
        return;
#endif
    /* Kernels before 5.14: a write to each page. */
    long page = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < bytes; off += (uint64_t)(page > 0 ? page : 4096))
        p[off] = 0;
}

int reader_slab_alloc(uint8_t **out, uint64_t bytes, int populate)
{
    *out = NULL;
    if (bytes > SIZE_MAX)
        return sf_fail(-ENOMEM, "batch slab of %llu bytes does not fit the address space",
                       (unsigned long long)bytes);
    /* Pre-faulted only when asked: room sized for the largest batch, which a
     * rank may never meet, costs nothing until a batch fills it. io_uring's
     * buffer registration and the CUDA device's cudaHostRegister pin what
     * they register: the slab is kept small instead (reader_slab_layout). */
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return sf_fail(-errno, "cannot map a batch slab of %llu MiB: %s",
                       (unsigned long long)(bytes >> 20), strerror(errno));
    /* In 4 KiB pages, reading a record back right after the kernel copied
     * it into the slab (a pread, an io_uring read: the kernel writes through
     * its own mapping) costs a TLB miss per page, which on the development VM
     * (shadow paging) made hashing it 4-5x slower than in huge pages: 1.3-1.9
     * against 5.3-9.7 GB/s, io_uring, 602 KB records, five alternating rounds.
     * A hint: without huge pages to give, the kernel maps 4 KiB ones. Advised
     * before any page is touched, so populate after. */
    (void)madvise(p, (size_t)bytes, MADV_HUGEPAGE);
    if (populate)
        slab_populate(p, bytes);
    *out = p;
    return 0;
}

void reader_slab_free(uint8_t *slab, uint64_t bytes)
{
    if (slab)
        munmap(slab, (size_t)bytes);
}
