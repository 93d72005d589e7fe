/* The batch slab: one page-aligned anonymous mapping holding every slot, and
 * the layout of the fields inside a slot. Allocated once at open, pre-faulted
 * so its pages never move; this is what io_uring registers and what a
 * device stage would pin (sf_reader_stage.on_slab). */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/error_internal.h"
#include "format/le.h"
#include "loader_internal.h"

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

int sf_slab_layout(sf_slot_layout *out, const sf_dataset *ds, uint32_t batch_size,
                   const uint64_t *dec_max)
{
    const sf_schema *s = &ds->manifest.schema;
    memset(out, 0, sizeof *out);
    out->var_unaligned = -1;
    /* Longest value of each variable-length field: the slot must hold a
     * whole batch of the longest ones. */
    if (s->n_var) {
        sf_index_entry e;
        for (uint64_t sh = 0; sh < ds->manifest.shard_count; sh++) {
            uint64_t count = ds->shards[sh].meta.header.record_count;
            for (uint64_t i = 0; i < count; i++) {
                sf_dataset_entry(&e, ds, sh, i);
                for (uint32_t f = 0; f < s->field_count; f++) {
                    int v = s->var_slot[f];
                    /* Compressed fields' slots hold stored lengths: their
                     * slot sizes come from dec_max. */
                    if (v < 0 || s->fields[f].codec != SF_CODEC_NONE)
                        continue;
                    if (e.var_len[v] > out->var_max[f])
                        out->var_max[f] = e.var_len[v];
                    if (e.var_len[v] % SF_DIRECT_ALIGN && out->var_unaligned < 0)
                        out->var_unaligned = (int)f;
                }
            }
        }
    }
    uint64_t page = page_size(), pos = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        const sf_field *fd = &s->fields[f];
        if (fd->storage == SF_STORE_VAR && fd->codec != SF_CODEC_NONE)
            out->var_max[f] = dec_max ? dec_max[f] : 0;
        uint64_t per = fd->storage == SF_STORE_VAR ? out->var_max[f] : fd->item_size;
        uint64_t cap = mul_sat(per, batch_size);
        if (cap > (1ull << 46) || pos > (1ull << 46))
            return sf_fail(SF_E_LIMIT, "field '%s': a batch of %u needs more than 64 TiB", fd->name,
                           batch_size);
        out->field_off[f] = pos;
        out->field_cap[f] = cap;
        pos = sf_align_up(pos + cap, page);
    }
    out->slot_bytes = pos ? pos : page;
    return 0;
}

int sf_slab_alloc(uint8_t **out, uint64_t bytes)
{
    *out = NULL;
    if (bytes > SIZE_MAX)
        return sf_fail(-ENOMEM, "batch slab of %llu bytes does not fit the address space",
                       (unsigned long long)bytes);
    /* MAP_POPULATE: fault every page now, so the slab's memory is taken once,
     * at open, and RSS does not grow while reading. */
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        return sf_fail(-errno, "cannot map a batch slab of %llu MiB: %s",
                       (unsigned long long)(bytes >> 20), strerror(errno));
    *out = p;
    return 0;
}

void sf_slab_free(uint8_t *slab, uint64_t bytes)
{
    if (slab)
        munmap(slab, (size_t)bytes);
}

void *sf_reader_slab(const sf_reader *r, uint64_t *bytes, uint64_t *slot_bytes)
{
    if (bytes)
        *bytes = r->slab_bytes;
    if (slot_bytes)
        *slot_bytes = r->layout.slot_bytes;
    return r->slab;
}
