/* pack --image-max-side N --image-quality Q: images stored at most N
 * pixels on their longer side.
 *
 * The shard plan needs every value's size before anything is written, and
 * a re-encoded image's size is known only once it is encoded. So a
 * pre-pass, on the pack's worker threads, decodes every image of the
 * input's image fields: one within N is kept (its bytes stored as they
 * are), one larger is resized (aspect kept, lib/image's antialiased
 * resampler) and encoded as an RGB JPEG of quality Q into a spool file, an
 * unlinked file in the output folder. The plan then uses the spooled sizes,
 * and the shard writer reads a re-encoded value from the spool instead of
 * the input (pack_read_value). A value is encoded once; its bytes depend
 * only on the input image, N, Q and libjpeg-turbo, never on which thread
 * or in which order, so the output is the same for any -j.
 *
 * Memory: 8 bytes per (sample, field) for the spool offsets, and per thread
 * the largest image's decoded pixels plus its re-encoded bytes. Disk: the
 * re-encoded images, until the pack ends (the spool is never linked into
 * the folder: a crash leaves nothing behind). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error_internal.h"
#include "image.h"
#include "pack_internal.h"
#include "shardfeed/params.h"

/* Samples a pre-pass thread takes at a time (in order, so a streaming
 * input reads forward). */
#define PREPASS_CHUNK 16u

/* The input's image fields: variable-length bytes fields that hold whole
 * image files by the input format's convention. */
static int is_image_field(const input_set *in, uint32_t f)
{
    const sf_field *fd = &in->schema.fields[f];
    if (fd->storage != SF_STORAGE_VARIABLE || (fd->dtype != SF_DTYPE_BYTES && fd->dtype != SF_DTYPE_UINT8))
        return 0;
    const char *fmt = in->ops->name, *n = fd->name;
    if (strcmp(fmt, "imagefolder") == 0)
        return strcmp(n, "image") == 0;
    if (strcmp(fmt, "list") == 0)
        return strcmp(n, "data") == 0;
    if (strcmp(fmt, "tar") == 0)
        return strcmp(n, "jpg") == 0 || strcmp(n, "jpeg") == 0 || strcmp(n, "png") == 0 ||
               strcmp(n, "webp") == 0;
    return 0;
}

/* An unlinked file in `dir`, the locked output folder (same file system as
 * the shards). */
static int open_spool(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    /* File systems without O_TMPFILE: a named file, unlinked at once. */
    char path[SF_PATH_CAP];
    pack_out_path(path, sizeof path, dir, ".image-spool.XXXXXX");
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return sf_fail(-errno, "%s: cannot create the image spool: %s", dir, sf_errno_text(errno));
    unlink(path);
    return fd;
}

typedef struct prepass {
    const input_set *in;
    pack_images *im;
    uint64_t *new_size; /* [sample * nf + field]: the spooled value's size */
    _Atomic uint64_t next_sample;
    _Atomic uint64_t spool_end;
    _Atomic uint64_t reencoded;
    _Atomic uint64_t samples_done, bytes_read; /* for progress */
    atomic_int abort;
    pthread_mutex_t lock;
    pthread_cond_t finished; /* a worker ended (under lock) */
    int running;             /* workers still running, under lock */
    pack_failure failed;     /* the first failure, under lock */
} prepass;

static void prepass_fail(prepass *p, int rc)
{
    pack_note_failure(&p->failed, &p->lock, &p->abort, rc);
}

/* A pre-pass thread's buffers, grown on demand. */
typedef struct prepass_buffers {
    uint8_t *value;
    size_t value_cap;
    uint8_t *pix;
    size_t pix_cap;
    image_scratch scratch;
} prepass_buffers;

/* Decodes value (sample s, field f) of len bytes; when larger than the
 * limit, re-encodes it into the spool and records where. */
static int check_image(prepass *p, prepass_buffers *b, uint64_t s, uint32_t f, uint64_t len)
{
    const input_set *in = p->in;
    uint64_t at = s * in->schema.field_count + f;
    image_header hd;
    int rc = image_probe(&hd, b->value, len);
    uint32_t w = 0, h = 0;
    /* Refused before anything is allocated: an image within a large N
     * would otherwise be decoded at its header's size. */
    if (!rc && (uint64_t)hd.width * hd.height > IMAGE_DEFAULT_MAX_PIXELS)
        rc = sf_fail(SF_E_LIMIT, "image of %ux%u pixels: more than the limit of %llu", hd.width, hd.height,
                     (unsigned long long)IMAGE_DEFAULT_MAX_PIXELS);
    if (!rc)
        image_fit_size(&w, &h, hd.width, hd.height, p->im->max_side);
    int resize = !rc && (w != hd.width || h != hd.height);
    image_spec spec = {.mode = resize ? IMAGE_MODE_RESIZE : IMAGE_MODE_DECODE,
                       .out_h = h,
                       .out_w = w,
                       .channels = 3,
                       .max_pixels = IMAGE_DEFAULT_MAX_PIXELS};
    if (!rc && image_grow((void **)&b->pix, &b->pix_cap, (size_t)w * h * 3))
        rc = sf_fail(-ENOMEM, "out of memory for a %ux%u image", w, h);
    /* Every image is decoded whole, the ones stored unchanged too: a
     * damaged one fails the pack here rather than every epoch later. */
    if (!rc)
        rc = image_transform(b->pix, &spec, 0, b->value, len, &b->scratch);
    if (rc) {
        char src[4400], why[1024];
        snprintf(why, sizeof why, "%s", sf_last_error()); /* sf_fail writes where it points */
        input_value_source(src, sizeof src, in, s, f);
        return sf_fail(rc == -ENOMEM ? rc : SF_E_INPUT, "%s: not an image pack can use (--image-max-side): %s",
                       src, why);
    }
    if (!resize)
        return 0;
    uint8_t *jpeg = NULL;
    size_t jlen = 0;
    if ((rc = image_jpeg_encode(&jpeg, &jlen, b->pix, w, h, (int)p->im->quality))) {
        char src[4400];
        input_value_source(src, sizeof src, in, s, f);
        return sf_fail_prefix(rc, src);
    }
    uint64_t off = atomic_fetch_add(&p->spool_end, jlen);
    ssize_t n = pwrite(p->im->spool_fd, jpeg, jlen, (off_t)off);
    free(jpeg);
    if (n != (ssize_t)jlen)
        return sf_fail(n < 0 ? -errno : -EIO, "writing the image spool in the output folder: %s",
                       n < 0 ? sf_errno_text(errno) : "short write (disk full?)");
    p->im->spooled[at] = off + 1;
    p->new_size[at] = jlen;
    atomic_fetch_add(&p->reencoded, 1);
    return 0;
}

static void *prepass_worker(void *arg)
{
    prepass *p = arg;
    const input_set *in = p->in;
    uint32_t nf = in->schema.field_count;
    prepass_buffers b = {0};
    void *cursor = NULL;
    int rc = in->ops->cursor_open(in, &cursor);
    while (!rc && !atomic_load(&p->abort)) {
        uint64_t first = atomic_fetch_add(&p->next_sample, PREPASS_CHUNK);
        if (first >= in->sample_count)
            break;
        uint64_t end = first + PREPASS_CHUNK < in->sample_count ? first + PREPASS_CHUNK : in->sample_count;
        for (uint64_t s = first; s < end && !rc; s++) {
            for (uint32_t f = 0; f < nf && !rc; f++) {
                if (!p->im->is_image[f])
                    continue;
                uint64_t len = in->sizes[s * nf + f];
                if (image_grow((void **)&b.value, &b.value_cap, len ? len : 1))
                    rc = sf_fail(-ENOMEM, "out of memory for a %llu-byte value", (unsigned long long)len);
                else if (!(rc = in->ops->read(cursor, in, s, f, b.value)))
                    rc = check_image(p, &b, s, f, len);
                if (!rc)
                    atomic_fetch_add(&p->bytes_read, len);
            }
            if (!rc)
                atomic_fetch_add(&p->samples_done, 1);
        }
    }
    if (rc)
        prepass_fail(p, rc);
    if (cursor)
        in->ops->cursor_close(cursor);
    free(b.value);
    free(b.pix);
    image_scratch_free(&b.scratch);
    pthread_mutex_lock(&p->lock);
    p->running--;
    pthread_cond_signal(&p->finished);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

typedef struct progress_tick {
    prepass *p;
    sf_pack_progress_fn progress;
    void *ctx;
} progress_tick;

static void report_progress(void *arg)
{
    const progress_tick *t = arg;
    t->progress(t->ctx, atomic_load(&t->p->samples_done), t->p->in->sample_count,
                atomic_load(&t->p->bytes_read));
}

static int run_prepass(prepass *p, unsigned jobs, sf_pack_progress_fn progress, void *ctx)
{
    pthread_t *threads = calloc(jobs, sizeof *threads);
    if (!threads)
        return sf_fail(-ENOMEM, "out of memory");
    unsigned started = 0;
    int rc = 0;
    p->running = (int)jobs;
    for (; started < jobs; started++) {
        if (pthread_create(&threads[started], NULL, prepass_worker, p) != 0) {
            atomic_store(&p->abort, 1);
            pthread_mutex_lock(&p->lock);
            p->running -= (int)(jobs - started);
            pthread_mutex_unlock(&p->lock);
            rc = sf_fail(-EAGAIN, "cannot start worker threads");
            break;
        }
    }
    /* The pre-pass of a large tree takes minutes (a full decode of every
     * image): progress is reported as for the writing. */
    progress_tick tick = {p, progress, ctx};
    pack_wait_workers(&p->lock, &p->finished, &p->running, progress ? report_progress : NULL, &tick);
    for (unsigned t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    free(threads);
    int failed = pack_failure_raise(&p->failed);
    if (!rc && !failed && progress)
        progress(ctx, p->in->sample_count, p->in->sample_count, atomic_load(&p->bytes_read));
    return failed ? failed : rc;
}

int pack_images_prepare(pack_images *im, input_set *in, uint32_t max_side, uint32_t quality, unsigned jobs,
                        const char *spool_dir, sf_pack_progress_fn progress, void *progress_ctx)
{
    memset(im, 0, sizeof *im);
    im->spool_fd = -1;
    if (!max_side)
        return 0;
    im->max_side = max_side;
    im->quality = quality;
    uint32_t nf = in->schema.field_count, images = 0;
    for (uint32_t f = 0; f < nf; f++)
        images += (uint32_t)(im->is_image[f] = (uint8_t)is_image_field(in, f));
    if (!images)
        return sf_fail(SF_E_INVALID,
                       "%s: --image-max-side: this %s input has no image field (an ImageFolder's 'image', a "
                       "list's 'data', a tar's 'jpg', 'jpeg', 'png' or 'webp')",
                       in->path, in->ops->name);
    uint64_t n = in->sample_count * nf;
    prepass p = {.in = in, .im = im};
    im->spooled = calloc(n, sizeof *im->spooled);
    p.new_size = calloc(n, sizeof *p.new_size);
    int rc = im->spooled && p.new_size ? 0 : sf_fail(-ENOMEM, "out of memory for %llu samples' image sizes",
                                                      (unsigned long long)in->sample_count);
    if (!rc && (im->spool_fd = open_spool(spool_dir)) < 0) {
        rc = im->spool_fd;
        im->spool_fd = -1;
    }
    if (!rc) {
        pthread_mutex_init(&p.lock, NULL);
        pthread_cond_init(&p.finished, NULL);
        if (jobs > in->sample_count)
            jobs = (unsigned)in->sample_count;
        rc = run_prepass(&p, jobs ? jobs : 1, progress, progress_ctx);
        pthread_cond_destroy(&p.finished);
        pthread_mutex_destroy(&p.lock);
    }
    /* From here on the plan and the writer see the stored sizes. */
    for (uint64_t i = 0; !rc && i < n; i++)
        if (im->spooled[i])
            in->sizes[i] = p.new_size[i];
    im->reencoded = atomic_load(&p.reencoded);
    free(p.new_size);
    return rc;
}

int pack_read_value(const pack_images *im, void *cursor, const input_set *in, uint64_t sample, uint32_t field,
                    uint8_t *dst)
{
    uint64_t at = sample * in->schema.field_count + field;
    if (!im || !im->spooled || !im->spooled[at])
        return in->ops->read(cursor, in, sample, field, dst);
    int rc = sf_pread_full(im->spool_fd, dst, in->sizes[at], im->spooled[at] - 1);
    if (rc)
        return sf_fail(rc, "%s: reading its re-encoded image from the spool: %s", in->keys[sample],
                       sf_strerror(rc));
    return 0;
}

void pack_images_free(pack_images *im)
{
    if (im->spool_fd >= 0)
        close(im->spool_fd);
    free(im->spooled);
    memset(im, 0, sizeof *im);
    im->spool_fd = -1;
}
