/* sf_pack: lock the output directory, discover inputs, plan shards (and
 * take one part of the plan for --part), prepare the output directory,
 * write (or prove) shards on worker threads, write the manifest last. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error_internal.h"
#include "shard_file.h"
#include "hash.h"
#include "le.h"
#include "pack_internal.h"
#include "shardfeed/pack.h"
#include "shardfeed/params.h"

typedef struct pool {
    pack_writer_ctx ctx;
    const uint8_t *reuse;  /* [shard]: a shard of this dataset_id is there */
    int prove_only;        /* the folder holds this dataset_id complete: change nothing */
    pack_shard_result *results;
    _Atomic uint64_t next_shard;
    atomic_int abort;
    int running;           /* workers not finished, under lock */
    pthread_cond_t finished;
    _Atomic uint64_t samples_done, bytes_done;
    pthread_mutex_t lock;
    pack_failure failed;   /* the first failure, under lock */
} pool;

static void fail(pool *p, int rc)
{
    pack_note_failure(&p->failed, &p->lock, &p->abort, rc);
}

static void *worker(void *arg)
{
    pool *p = arg;
    const input_set *in = p->ctx.in;
    void *cursor = NULL;
    int rc = in->ops->cursor_open(in, &cursor);
    if (rc)
        fail(p, rc);
    while (!rc) {
        uint64_t i = atomic_fetch_add(&p->next_shard, 1);
        if (i >= p->ctx.plan->shard_count || atomic_load(&p->abort))
            break;
        pack_shard_mode mode = p->prove_only ? PACK_SHARD_PROVE
                               : p->reuse[i]  ? PACK_SHARD_KEEP_PROVEN
                                              : PACK_SHARD_WRITE;
        rc = pack_write_shard(&p->ctx, cursor, i, mode, &p->results[i]);
        if (rc && rc != SF_E_STATE)
            fail(p, rc);
    }
    if (cursor)
        in->ops->cursor_close(cursor);
    pthread_mutex_lock(&p->lock);
    p->running--;
    pthread_cond_signal(&p->finished);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The manifest of the dataset, encoded into *out (*size bytes, malloc'd). */
static int encode_manifest(uint8_t **out, uint64_t *size, const input_set *in, const pack_plan *plan,
                           const pack_shard_result *results, const sf_part_info *part,
                           const pack_images *images)
{
    const pack_shard_plan *last = &plan->shards[plan->shard_count - 1];
    sf_manifest m = {
        .version_major = SF_FORMAT_MAJOR,
        .version_minor = SF_FORMAT_MINOR,
        .align = plan->align,
        .record_count = last->first + last->count - plan->record_base,
        .dataset_id = plan->dataset_id,
        .schema = in->schema,
        .shard_count = plan->shard_count,
    };
    int rc = pack_metadata_encode(&m.metadata, &m.metadata_size, in, part, images);
    if (rc)
        return rc;
    m.shards = calloc(plan->shard_count, sizeof *m.shards);
    if (!m.shards) {
        free(m.metadata);
        return sf_fail(-ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < plan->shard_count; i++) {
        const pack_shard_plan *sp = &plan->shards[i];
        m.shards[i] = (sf_shard_desc){sp->count, sp->first - plan->record_base, results[i].file_size,
                                      results[i].header_checksum, results[i].index_checksum};
    }
    *size = sf_manifest_encoded_size(&m);
    *out = malloc(*size);
    if (!*out)
        rc = sf_fail(-ENOMEM, "out of memory");
    else
        sf_manifest_encode(*out, &m);
    free(m.shards);
    free(m.metadata);
    return rc;
}

/* What finish_manifest does with the manifest this run makes. */
typedef enum manifest_step {
    MANIFEST_WRITE, /* write it (atomically) */
    MANIFEST_TEMP,  /* write it under its temporary name only (PACK_OUT_REPLACE) */
    MANIFEST_PROVE  /* the folder holds this dataset complete: compare, write nothing */
} manifest_step;

/* Writes the manifest; or, when the folder already holds this dataset_id
 * complete and every shard was proven, checks that the manifest there is
 * byte for byte the one this run writes, writing nothing. */
static int finish_manifest(const char *out, const input_set *in, const pack_plan *plan,
                           const pack_shard_result *results, const sf_part_info *part,
                           const pack_images *images, manifest_step step, uint64_t *bytes)
{
    uint8_t *buf = NULL;
    uint64_t size = 0;
    int rc = encode_manifest(&buf, &size, in, plan, results, part, images);
    if (!rc && step == MANIFEST_WRITE) {
        rc = pack_write_atomic(out, SF_MANIFEST_NAME, plan->dataset_id, buf, size);
    } else if (!rc && step == MANIFEST_TEMP) {
        rc = pack_write_temp(out, SF_MANIFEST_NAME, plan->dataset_id, buf, size);
    } else if (!rc) {
        char path[SF_PATH_CAP];
        pack_out_path(path, sizeof path, out, SF_MANIFEST_NAME);
        uint8_t *old = malloc(size + 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        struct stat st;
        int same = old && fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size &&
                   sf_pread_full(fd, old, size, 0) == 0 && memcmp(old, buf, size) == 0;
        if (fd >= 0)
            close(fd);
        free(old);
        if (!old)
            rc = sf_fail(-ENOMEM, "out of memory");
        else if (!same)
            rc = sf_fail(SF_E_EXISTS, "%s: holds a different shardfeed dataset of the same names and sizes "
                                      "(its manifest differs from this input's; the force option replaces it)",
                         out);
    }
    *bytes = size;
    free(buf);
    return rc;
}

typedef struct progress_tick {
    pool *p;
    const sf_pack_opts *opts;
    uint64_t total;
} progress_tick;

static void report_progress(void *arg)
{
    const progress_tick *t = arg;
    t->opts->progress(t->opts->progress_ctx, atomic_load(&t->p->samples_done), t->total,
                      atomic_load(&t->p->bytes_done));
}

static int run_workers(pool *p, unsigned jobs, const sf_pack_opts *opts, uint64_t total)
{
    pthread_t *threads = calloc(jobs, sizeof *threads);
    if (!threads)
        return sf_fail(-ENOMEM, "out of memory");
    unsigned started = 0;
    int rc = 0;
    p->running = (int)jobs;
    for (; started < jobs; started++) {
        if (pthread_create(&threads[started], NULL, worker, p) != 0) {
            atomic_store(&p->abort, 1);
            pthread_mutex_lock(&p->lock);
            p->running -= (int)(jobs - started);
            pthread_mutex_unlock(&p->lock);
            rc = sf_fail(-EAGAIN, "cannot start worker threads");
            break;
        }
    }
    /* The calling thread reports progress while the workers write, and
     * returns the moment the last one finishes. */
    progress_tick tick = {p, opts, total};
    pack_wait_workers(&p->lock, &p->finished, &p->running, opts->progress ? report_progress : NULL, &tick);
    for (unsigned t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    free(threads);
    int failed = pack_failure_raise(&p->failed);
    return failed ? failed : rc;
}

/* Keeps part K of N of the plan: shards [K*S/N, (K+1)*S/N), so the parts
 * merged are the very shards a single pack writes. */
static int take_part(pack_plan *plan, sf_part_info *part, const input_set *in, const pack_images *images,
                     uint32_t k, uint32_t n)
{
    uint64_t shards = plan->shard_count;
    if (k >= n)
        return sf_fail(SF_E_INVALID, "part %u of %u: the part must be below the number of parts (parts are numbered from 0)", k, n);
    uint64_t first = shards * k / n, end = shards * (k + 1) / n;
    /* Every part gets a shard, or none runs: an empty part is no dataset. */
    if (shards < n)
        return sf_fail(SF_E_INVALID,
                       "part %u of %u: the whole dataset has only %llu shard(s), too few for %u parts; "
                       "use fewer parts or a smaller shard_size",
                       k, n, (unsigned long long)shards, n);
    const pack_shard_plan *last = &plan->shards[shards - 1];
    *part = (sf_part_info){
        .index = k,
        .count = n,
        .whole_dataset_id = plan->dataset_id,
        .whole_records = last->first + last->count,
        .whole_shards = shards,
        .first_record = plan->shards[first].first,
        .first_shard = first,
        .has_input = 1,
        .has_files = 1,
        .has_list = in->has_list,
        .list_size = in->list_size,
        .list_hash = in->list_hash,
    };
    input_files_hashes(in, &part->files_hash, &part->sizes_hash, &part->names_hash);
    memcpy(part->list_name, in->list_name, sizeof part->list_name);
    int rc = pack_plan_values_hash(&part->values_hash, plan, in, images);
    if (rc)
        return rc;
    /* Little-endian like every stored number: the same id on every machine. */
    uint8_t buf[24];
    sf_put_le64(buf, plan->dataset_id);
    sf_put_le32(buf + 8, k);
    sf_put_le32(buf + 12, n);
    memcpy(buf + 16, "part\0\0\0\0", 8);
    uint64_t id = sf_hash(buf, sizeof buf);
    return pack_plan_slice(plan, first, end - first, id ? id : 1);
}

/* The image options: both within their bounds, the quality only with a
 * side (alone it would do nothing). */
static int check_image_opts(const sf_pack_opts *o)
{
    if (o->image_max_side > SF_PACK_MAX_IMAGE_SIDE)
        return sf_fail(SF_E_INVALID, "image_max_side %u is not in 1..%u", o->image_max_side, SF_PACK_MAX_IMAGE_SIDE);
    if (o->image_quality > 100)
        return sf_fail(SF_E_INVALID, "image_quality %u is not in 1..100", o->image_quality);
    if (o->image_quality && !o->image_max_side)
        return sf_fail(SF_E_INVALID, "image_quality without image_max_side: images are re-encoded only when "
                                     "larger than image_max_side");
    return 0;
}

/* 2 when folder `out` is the input folder `in`, 1 when it is inside it
 * (device and inode compared up the output's real path), else 0. */
static int output_in_input(const char *in, const char *out)
{
    struct stat si, so;
    if (stat(in, &si) != 0 || !S_ISDIR(si.st_mode))
        return 0;
    char *real = realpath(out, NULL);
    if (!real)
        return 0;
    int found = 0;
    for (int depth = 0; !found; depth++) {
        if (stat(real, &so) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino)
            found = depth ? 1 : 2;
        char *slash = strrchr(real, '/');
        if (!slash || !real[1])
            break; /* "/" looked at */
        slash[slash == real] = '\0'; /* "/a" -> "/", "/a/b" -> "/a" */
    }
    free(real);
    return found;
}

/* An input that failed to open because the output folder, made by then,
 * is the input folder or inside it: the input's error read as is ("DIR/
 * .shardfeed.lock: not a .npy file", "DIR/out: class folder has no image
 * files") blames a file pack made. Said first, the input's error after. */
static int explain_output_in_input(int rc, const char *in, const char *out)
{
    int where = output_in_input(in, out);
    if (!where)
        return rc;
    char why[1024];
    snprintf(why, sizeof why, "%s", sf_last_error());
    return sf_fail(rc, "%s: the output folder is %s the input folder %s, so pack read it as input "
                   "(%s); write the output elsewhere",
                   out, where == 2 ? "the same as" : "inside", in, why);
}

int sf_pack(sf_pack_result *result, const char *input, const char *output_dir, const sf_pack_opts *given)
{
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    const sf_pack_opts *opts = &o;
    if (!input || !output_dir)
        return sf_fail(SF_E_INVALID, "sf_pack: no input or no output folder");
    int vrc = given ? sf_check_opts_version("sf_pack_opts", given->version, SF_PACK_OPTS_VERSION) : 0;
    if (vrc)
        return vrc;
    /* An older struct ends before the later options: read only what it has
     * (version 1: before the image options; 2: before image_progress). */
    if (given)
        memcpy(&o, given,
               given->version >= 3   ? sizeof o
               : given->version == 2 ? offsetof(sf_pack_opts, image_progress)
                                     : offsetof(sf_pack_opts, image_max_side));
    vrc = check_image_opts(opts);
    if (!vrc && opts->jobs)
        vrc = sf_check_param(SF_PARAM_PACK_JOBS, opts->jobs);
    if (!vrc && opts->shard_size)
        vrc = sf_check_param(SF_PARAM_PACK_SHARD_SIZE, (int64_t)(opts->shard_size > INT64_MAX ? INT64_MAX : opts->shard_size));
    if (!vrc && opts->align)
        vrc = sf_check_param(SF_PARAM_PACK_ALIGN, opts->align); /* and a power of two: the plan says */
    if (!vrc && opts->part_count)
        vrc = sf_check_param(SF_PARAM_PACK_PARTS, opts->part_count);
    if (!vrc && opts->part_index && !opts->part_count) /* a part of no split: ignored before */
        vrc = sf_fail(SF_E_INVALID, "sf_pack: part_index %u without part_count", opts->part_index);
    if (vrc)
        return vrc;
    double t0 = now_s();
    unsigned jobs = opts->jobs;
    if (jobs == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = n > 0 ? (unsigned)n : 1;
    }
    uint64_t shard_size = opts->shard_size ? opts->shard_size : SF_PACK_DEFAULT_SHARD_SIZE;
    uint32_t align = opts->align ? opts->align : SF_PACK_DEFAULT_ALIGN;

    input_set in;
    memset(&in, 0, sizeof in);
    pack_plan plan;
    sf_part_info part = {0};
    memset(&plan, 0, sizeof plan);
    int levels[SF_MAX_FIELDS] = {0};
    uint8_t *reuse = NULL;
    pack_shard_result *results = NULL;
    pack_outdir_state state = PACK_OUT_WRITE;
    pack_images images;
    memset(&images, 0, sizeof images);
    images.spool_fd = -1;
    /* For the whole run, taken before anything in the folder is looked at:
     * two runs writing one folder would remove each other's files. First,
     * so that a second run stops at once rather than after discovery. */
    pack_lock lock;
    int rc = pack_outdir_lock(&lock, output_dir, "pack");
    if (!rc && (rc = input_open(&in, input, opts->input_format)))
        rc = explain_output_in_input(rc, input, output_dir);
    if (!rc)
        rc = pack_compress_parse(&in.schema, levels, opts->compress);
    if (!rc && in.sample_count == 0)
        rc = sf_fail(SF_E_INPUT, "%s: no samples", input);
    if (!rc)
        rc = pack_images_prepare(&images, &in, opts->image_max_side,
                                 opts->image_quality ? opts->image_quality : SF_PACK_DEFAULT_IMAGE_QUALITY, jobs,
                                 output_dir, opts->image_progress, opts->progress_ctx);
    if (!rc)
        rc = pack_make_plan(&plan, &in, align, shard_size, levels, &images);
    if (!rc && opts->part_count)
        rc = take_part(&plan, &part, &in, &images, opts->part_index, opts->part_count);
    if (!rc) {
        reuse = calloc(plan.shard_count, 1);
        results = calloc(plan.shard_count, sizeof *results);
        if (!reuse || !results)
            rc = sf_fail(-ENOMEM, "out of memory");
    }
    if (!rc)
        rc = pack_outdir_prepare(output_dir, &plan, opts->force, reuse, &state);

    const pack_shard_plan *last = rc ? NULL : &plan.shards[plan.shard_count - 1];
    uint64_t samples = rc ? 0 : last->first + last->count - plan.record_base;
    pool *p = NULL;
    if (!rc) {
        p = calloc(1, sizeof *p);
        if (!p)
            rc = sf_fail(-ENOMEM, "out of memory");
    }
    if (!rc) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->finished, NULL);
        p->ctx = (pack_writer_ctx){&in,           &plan,           output_dir,
                                   &images,       &p->abort,       &p->samples_done,
                                   &p->bytes_done, state == PACK_OUT_REPLACE};
        p->reuse = reuse;
        p->prove_only = state == PACK_OUT_COMPLETE;
        p->results = results;
        if (jobs > plan.shard_count)
            jobs = (unsigned)plan.shard_count;
        rc = run_workers(p, jobs, opts, samples);
        pthread_cond_destroy(&p->finished);
        pthread_mutex_destroy(&p->lock);
    }
    uint64_t manifest_bytes = 0;
    if (rc == SF_E_EXISTS && state == PACK_OUT_COMPLETE) {
        char why[1024];
        snprintf(why, sizeof why, "%s", sf_last_error());
        rc = sf_fail(SF_E_EXISTS, "%s: holds a different shardfeed dataset of the same names and sizes (%s; "
                                  "the force option replaces it)",
                     output_dir, why);
    }
    if (state == PACK_OUT_REPLACE) {
        /* The old dataset stays whole until everything new is written, the
         * manifest included: then only renames and removals remain. */
        if (!rc)
            rc = finish_manifest(output_dir, &in, &plan, results, &part, &images, MANIFEST_TEMP,
                                 &manifest_bytes);
        rc = rc ? pack_outdir_abandon(rc, output_dir, &plan, state) : pack_outdir_install(output_dir, &plan, 1);
    } else if (!rc) {
        rc = finish_manifest(output_dir, &in, &plan, results, &part, &images,
                             state == PACK_OUT_COMPLETE ? MANIFEST_PROVE : MANIFEST_WRITE, &manifest_bytes);
    }
    if (!rc && opts->progress)
        opts->progress(opts->progress_ctx, samples, samples, atomic_load(&p->bytes_done));
    if (!rc && result) {
        memset(result, 0, sizeof *result);
        result->samples = samples;
        result->shards = plan.shard_count;
        result->bytes_in = atomic_load(&p->bytes_done);
        result->bytes_out = manifest_bytes;
        for (uint64_t i = 0; i < plan.shard_count; i++) {
            result->bytes_out += results[i].file_size;
            result->shards_reused += (uint64_t)results[i].reused;
        }
        result->inputs_skipped = in.skipped;
        snprintf(result->skipped_example, sizeof result->skipped_example, "%s", in.skipped_example);
        result->part_index = part.index;
        result->part_count = part.count;
        result->already_complete = state == PACK_OUT_COMPLETE;
        result->seconds = now_s() - t0;
    }
    pack_outdir_unlock(&lock);
    rc = pack_explain_fd_limit(rc);
    free(p);
    free(reuse);
    free(results);
    pack_plan_free(&plan);
    pack_images_free(&images);
    input_free(&in);
    return rc;
}

int sf_pack_npy_dir(sf_pack_result *result, const char *input_dir, const char *output_dir,
                    const sf_pack_opts *opts)
{
    sf_pack_opts o = SF_PACK_OPTS_INIT;
    if (opts)
        o = *opts;
    o.input_format = "npy";
    return sf_pack(result, input_dir, output_dir, &o);
}

int pack_explain_fd_limit(int rc)
{
    if (!rc)
        return rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sf_last_error());
    if (strstr(msg, "ulimit -n") || strstr(msg, "fs.file-max"))
        return rc; /* said where it happened */
    /* strerror(EMFILE) is a prefix of strerror(ENFILE): test ENFILE first. */
    if (rc == -ENFILE || strstr(msg, strerror(ENFILE)))
        return sf_fail(rc, "%s%s", msg, sf_errno_hint(ENFILE));
    if (rc == -EMFILE || strstr(msg, strerror(EMFILE)))
        return sf_fail(rc, "%s%s", msg, sf_errno_hint(EMFILE));
    return rc;
}
