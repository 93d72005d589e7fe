/* The limit of reading a compressed field: zstd's own decompression rate on
 * the dataset's frames, with T threads, each with its own ZSTD_DCtx, each
 * decompressing every T-th frame into a buffer of its own, E passes.
 *
 *   zstd_loop FRAMES LENGTHS THREADS PASSES
 *
 * FRAMES is every frame back to back, LENGTHS their sizes (little-endian
 * uint64 each), as tools/bench/run extracts them from the shard files.
 * Prints one JSON line: frames, seconds, bytes (decompressed). tools/bench/run
 * compiles it (cc -O2 ... -lzstd -lpthread) for its "zstd decompress" row. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zstd.h>

typedef struct job {
    const uint8_t *blob;
    const uint64_t *off, *len;
    uint64_t n, first, step, passes, out_bytes;
    int failed;
} job;

static void *run(void *arg)
{
    job *j = arg;
    ZSTD_DCtx *d = ZSTD_createDCtx();
    size_t cap = 1 << 20;
    uint8_t *out = malloc(cap);
    for (uint64_t p = 0; p < j->passes && d && out; p++)
        for (uint64_t i = j->first; i < j->n; i += j->step) {
            size_t r = ZSTD_decompressDCtx(d, out, cap, j->blob + j->off[i], j->len[i]);
            if (ZSTD_isError(r)) {
                j->failed = 1;
                break;
            }
            j->out_bytes += r;
        }
    j->failed |= !d || !out;
    free(out);
    ZSTD_freeDCtx(d);
    return NULL;
}

static uint8_t *slurp(const char *path, uint64_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = n > 0 ? (uint64_t)n : 0;
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: zstd_loop FRAMES LENGTHS THREADS PASSES\n");
        return 2;
    }
    uint64_t blob_size, lsize;
    uint8_t *blob = slurp(argv[1], &blob_size);
    uint64_t *len = (uint64_t *)slurp(argv[2], &lsize);
    unsigned threads = (unsigned)atoi(argv[3]);
    uint64_t passes = strtoull(argv[4], NULL, 10), n = lsize / 8;
    if (!blob || !len || !threads || threads > 256) {
        fprintf(stderr, "zstd_loop: cannot read the frames\n");
        return 1;
    }
    uint64_t *off = malloc((n ? n : 1) * sizeof *off), at = 0;
    for (uint64_t i = 0; i < n; i++) {
        off[i] = at;
        at += len[i];
    }
    if (at > blob_size) {
        fprintf(stderr, "zstd_loop: the lengths exceed the frames\n");
        return 1;
    }
    job jobs[256];
    pthread_t tid[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned t = 0; t < threads; t++) {
        jobs[t] = (job){blob, off, len, n, t, threads, passes, 0, 0};
        pthread_create(&tid[t], NULL, run, &jobs[t]);
    }
    uint64_t bytes = 0;
    int failed = 0;
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        bytes += jobs[t].out_bytes;
        failed |= jobs[t].failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (failed) {
        fprintf(stderr, "zstd_loop: a frame did not decompress\n");
        return 1;
    }
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"frames\": %llu, \"seconds\": %.6f, \"bytes\": %llu}\n",
           (unsigned long long)(n * passes), s, (unsigned long long)bytes);
    free(off);
    free(len);
    free(blob);
    return 0;
}
