/* The reader's device pipeline without a GPU: device = host-copy runs the
 * same slot protocol as CUDA (copy when a batch is ready, consumer waits on
 * it, release fences the slot, no host slot reused while its copy may still
 * read it), with a copy thread slowed down to expose ordering bugs. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "npy.h"
#include "device.h"
#include "shardfeed/shardfeed.h"

#include "unit_helpers.h"

#define SAMPLES 97
#define IMG_BYTES 12288 /* 3 x 32 x 32 float32 */

static char g_root[256];

/* A packed dataset of unit_write_image_samples. */
static void setup(void)
{
    snprintf(g_root, sizeof g_root, "devpipe-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root));
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/in", g_root);
    snprintf(out, sizeof out, "%s/ds", g_root);
    unit_write_image_samples(in, SAMPLES);
    sf_pack_opts po = SF_PACK_OPTS_INIT;
    po.shard_size = 256 << 10;
    cr_assert_eq(sf_pack_npy_dir(NULL, in, out, &po), 0, "%s", sf_last_error());
}

static void teardown(void)
{
    reader_device_host_set_delay_us(0);
    if (g_root[0])
        unit_rm_tree(g_root);
}

TestSuite(device_pipeline, .init = setup, .fini = teardown, .timeout = 120);

static const char *ds_dir(void)
{
    static char d[512];
    snprintf(d, sizeof d, "%s/ds", g_root);
    return d;
}

/* Checks that a batch's device copy holds exactly the batch's samples. */
static void check_device_batch(sf_reader *r, const sf_batch *b)
{
    cr_assert_eq(b->device, SF_DEVICE_HOST_COPY);
    cr_assert_eq(sf_batch_wait(r, b), 0);
    const sf_batch_field *img = sf_batch_field_find(b, "img");
    const sf_batch_field *lab = sf_batch_field_find(b, "label");
    cr_assert_not_null(img->device_data);
    cr_assert_not_null(lab->device_data);
    cr_assert_neq(img->device_data, img->data, "device memory is not the host slab");
    const float *dimg = img->device_data;
    const int64_t *dlab = lab->device_data;
    for (uint32_t k = 0; k < b->size; k++) {
        uint64_t id = b->source_ids[k];
        cr_assert_eq(dlab[k], (int64_t)id * 5, "label of sample %llu on the device",
                     (unsigned long long)id);
        const float *s = dimg + (uint64_t)k * (IMG_BYTES / 4);
        cr_assert(s[0] == (float)(id * 1000) && s[IMG_BYTES / 4 - 1] == (float)(id * 1000 + IMG_BYTES / 4 - 1),
                  "image of sample %llu on the device holds another sample", (unsigned long long)id);
    }
    cr_assert_eq(memcmp(img->device_data, img->data, img->bytes), 0);
    cr_assert_eq(memcmp(lab->device_data, lab->data, lab->bytes), 0);
    cr_assert_eq(reader_device_host_violations(), 0);
}

Test(device_pipeline, slow_copies_never_see_a_reused_slot_and_bytes_match)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 2; /* few slots: reads would overtake copies if nothing waited */
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    reader_device_host_set_delay_us(3000);
    sf_reader_statistics st;
    sf_reader_stats(&st, r);
    cr_assert_str_eq(st.device, "host-copy");
    uint64_t device_bytes = st.device_bytes;
    cr_assert_eq(device_bytes, st.slab_bytes, "one device buffer per slot");
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        uint64_t seen = 0;
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b) {
            check_device_batch(r, b);
            seen += b->size;
            cr_assert_eq(sf_reader_release(r, b), 0);
        }
        cr_assert_eq(seen, SAMPLES);
    }
    sf_reader_stats(&st, r);
    cr_assert_eq(st.device_bytes, device_bytes, "device memory changed after open");
    sf_reader_close(r);
}

Test(device_pipeline, release_without_waiting_never_lets_reads_overtake_a_pending_copy)
{
    /* A GPU consumer enqueues its work behind the copy event and releases at
     * once, without waiting on the host. The reader must not read new
     * samples into the slot before the pending copy has taken the old ones. */
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 2;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    reader_device_host_set_delay_us(3000);
    unsigned long before = reader_device_host_violations();
    for (int epoch = 0; epoch < 2; epoch++) {
        const sf_batch *b;
        while (sf_reader_next(&b, r) == 0 && b)
            cr_assert_eq(sf_reader_release_after(r, b, NULL), 0);
    }
    sf_reader_close(r);
    cr_assert_eq(reader_device_host_violations(), before,
                 "%lu copies found their host slot overwritten before they ran",
                 reader_device_host_violations() - before);
}

Test(device_pipeline, consumer_may_hold_batches_while_later_ones_copy)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 16;
    o.prefetch = 4;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    reader_device_host_set_delay_us(2000);
    const sf_batch *held[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sf_reader_next(&held[i], r), 0);
        cr_assert_not_null(held[i]);
    }
    for (int i = 0; i < 3; i++)
        check_device_batch(r, held[i]);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sf_reader_release_after(r, held[i], NULL), 0);
    cr_assert_eq(sf_reader_release(r, held[0]), SF_E_INVALID, "double release must fail");
    sf_reader_close(r);
}

Test(device_pipeline, reposition_while_copies_are_in_flight)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 3;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    reader_device_host_set_delay_us(4000);
    for (uint64_t e = 0; e < 6; e++) {
        const sf_batch *b;
        cr_assert_eq(sf_reader_next(&b, r), 0);
        check_device_batch(r, b);
        sf_reader_release(r, b);
        /* Read-ahead slots with copies in flight are dropped here. */
        cr_assert_eq(sf_reader_set_epoch(r, e + 1), 0);
    }
    const sf_batch *b;
    uint64_t seen = 0;
    while (sf_reader_next(&b, r) == 0 && b) {
        check_device_batch(r, b);
        seen += b->size;
        sf_reader_release(r, b);
    }
    cr_assert_eq(seen, SAMPLES);
    sf_reader_close(r);
}

Test(device_pipeline, cuda_request_fails_cleanly_without_cuda_or_a_gpu)
{
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.device = SF_DEVICE_CUDA;
    o.device_index = 0;
    sf_reader *r = NULL;
    int rc = sf_reader_open(&r, ds_dir(), &o);
    if (rc == 0) {
        sf_reader_close(r);
        cr_skip_test("a CUDA device is present: tools/gpu-check.sh covers it");
    }
    cr_assert_eq(rc, SF_E_UNSUPPORTED, "%s", sf_last_error());
    cr_assert_null(r);
    if (sf_has_feature("cuda"))
        cr_assert(strstr(sf_last_error(), "CUDA") || strstr(sf_last_error(), "cuda"), "%s",
                  sf_last_error());
    else
        cr_assert(strstr(sf_last_error(), "without CUDA"), "%s", sf_last_error());
}

Test(device_pipeline, cpu_batches_have_no_device_data)
{
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), NULL), 0, "%s", sf_last_error());
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0);
    cr_assert_eq(b->device, SF_DEVICE_CPU);
    cr_assert_null(b->fields[0].device_data);
    cr_assert_null(b->device_event);
    cr_assert_eq(sf_batch_wait(r, b), 0);
    sf_reader_release(r, b);
    sf_reader_close(r);
}

/* The first float of each sample in a copy of a batch's img field read back
 * from the device: the sample's id * 1000 (unit_write_image_samples). */
static void check_read_back(const float *img, const uint64_t *ids, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++)
        cr_assert(img[(uint64_t)k * (IMG_BYTES / 4)] == (float)(ids[k] * 1000),
                  "sample %u read back on the stream holds another sample", k);
}

enum { MAX_BATCHES = 16 };

Test(device_pipeline, a_consumer_stream_waits_for_copies_and_fences_its_releases)
{
    /* A consumer that never blocks: each batch's reads are queued on its
     * stream behind sf_batch_wait_on, and the batch is released at once
     * after them. Slow copies; only the stream orders anything. */
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 2;
    o.shuffle = SF_READER_SHUFFLE_GLOBAL;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    sf_host_stream *s;
    cr_assert_eq(sf_host_stream_create(&s), 0);
    reader_device_host_set_delay_us(3000);
    uint64_t hazards = sf_host_stream_hazards();
    static float out[MAX_BATCHES][8 * IMG_BYTES / 4];
    static uint64_t ids[MAX_BATCHES][8];
    uint32_t sizes[MAX_BATCHES];
    for (int epoch = 0; epoch < 2; epoch++) {
        const sf_batch *b;
        uint32_t n = 0;
        while (sf_reader_next(&b, r) == 0 && b) {
            cr_assert_lt(n, MAX_BATCHES);
            const sf_batch_field *img = sf_batch_field_find(b, "img");
            cr_assert_eq(sf_batch_wait_on(r, b, s), 0, "%s", sf_last_error());
            cr_assert_eq(sf_host_stream_read(s, out[n], img->device_data, img->bytes), 0);
            memcpy(ids[n], b->source_ids, b->size * sizeof ids[n][0]);
            sizes[n++] = b->size;
            cr_assert_eq(sf_reader_release_after(r, b, s), 0);
        }
        cr_assert_eq(sf_host_stream_synchronize(s), 0);
        for (uint32_t i = 0; i < n; i++)
            check_read_back(out[i], ids[i], sizes[i]);
    }
    cr_assert_eq(sf_host_stream_hazards(), hazards, "the consumer's reads met a hazard");
    sf_reader_statistics st;
    cr_assert_eq(sf_reader_stats(&st, r), 0);
    cr_assert_gt(st.device_copy_bytes, 0);
    cr_assert_gt(st.device_stream_wait_seconds, 0, "the stream never waited for a slow copy");
    sf_reader_close(r);
    sf_host_stream_destroy(s);
    cr_assert_eq(sf_batch_wait_on(NULL, NULL, NULL), SF_E_INVALID);
}

Test(device_pipeline, a_released_batch_is_not_waited_for)
{
    /* Its pointer still names its slot: a wait accepted it and waited for
     * whatever batch the slot held next. */
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 2;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    sf_host_stream *s;
    cr_assert_eq(sf_host_stream_create(&s), 0);
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait(r, b), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait_on(r, b, s), 0, "%s", sf_last_error());
    cr_assert_eq(sf_reader_release(r, b), 0, "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait(r, b), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "not a batch the caller holds"), "%s", sf_last_error());
    cr_assert_eq(sf_batch_wait_on(r, b, s), SF_E_INVALID);
    cr_assert(strstr(sf_last_error(), "not a batch the caller holds"), "%s", sf_last_error());
    cr_assert_eq(sf_host_stream_synchronize(s), 0);
    sf_reader_close(r);
    sf_host_stream_destroy(s);
}

Test(device_pipeline, the_host_streams_see_a_missing_wait_and_a_missing_fence)
{
    /* The model's own check: the hazards the Python tests rely on are seen. */
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 8;
    o.prefetch = 2;
    o.device = SF_DEVICE_HOST_COPY;
    sf_reader *r;
    cr_assert_eq(sf_reader_open(&r, ds_dir(), &o), 0, "%s", sf_last_error());
    sf_host_stream *s;
    cr_assert_eq(sf_host_stream_create(&s), 0);
    static float out[8 * IMG_BYTES / 4];
    /* No wait: the read runs while the slow copy has not landed. */
    reader_device_host_set_delay_us(200000);
    uint64_t before = sf_host_stream_hazards();
    const sf_batch *b;
    cr_assert_eq(sf_reader_next(&b, r), 0);
    const sf_batch_field *img = sf_batch_field_find(b, "img");
    cr_assert_eq(sf_host_stream_read(s, out, img->device_data, img->bytes), 0);
    cr_assert_eq(sf_host_stream_synchronize(s), 0);
    cr_assert_gt(sf_host_stream_hazards(), before, "a read before its copy went unseen");
    reader_device_host_set_delay_us(0);
    cr_assert_eq(sf_batch_wait(r, b), 0);
    /* No fence: the slot's next copy overwrites what a held read still has to read. */
    before = sf_host_stream_hazards();
    cr_assert_eq(sf_host_stream_hold(s, 1), 0);
    cr_assert_eq(sf_host_stream_read(s, out, img->device_data, img->bytes), 0);
    cr_assert_eq(sf_reader_release_after(r, b, NULL), 0);
    for (int i = 0; i < 2; i++) { /* the second batch reuses the first's slot */
        cr_assert_eq(sf_reader_next(&b, r), 0);
        cr_assert_eq(sf_batch_wait(r, b), 0);
        if (i == 0)
            cr_assert_eq(sf_reader_release(r, b), 0);
    }
    cr_assert_gt(sf_host_stream_hazards(), before, "a copy over a queued read went unseen");
    cr_assert_eq(sf_host_stream_hold(s, 0), 0);
    cr_assert_eq(sf_host_stream_synchronize(s), 0);
    cr_assert_eq(sf_reader_release(r, b), 0);
    sf_reader_close(r);
    sf_host_stream_destroy(s);
}
