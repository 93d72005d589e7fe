/* The plain libjpeg-turbo baseline of tools/bench/run's image rows: every
 * JPEG named on stdin (one path a line) decoded whole to RGB at full size,
 * from memory (the files are read first: warm cache, no I/O timed), by
 * THREADS threads taking files in turn, EPOCHS times. Prints one JSON line:
 * samples, seconds, bytes (decoded RGB bytes). With a third argument
 * "huffman", each image is only entropy-decoded (jpeg_skip_scanlines over
 * it all: no IDCT, upsampling or colour conversion), which measures the part
 * of a decode that a crop cannot skip above its last row (bytes: 0).
 *
 *   cc -O2 -o jpeg_full_decode tools/bench/jpeg_full_decode.c -ljpeg -lpthread
 *   find TREE -name '*.jpg' | ./jpeg_full_decode THREADS EPOCHS [huffman]
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jpeglib.h>

typedef struct file {
    unsigned char *data;
    size_t len;
} file;

static file *files;
static size_t nfiles;
static atomic_size_t next_job;
static size_t jobs;
static atomic_ullong decoded_bytes;
static atomic_size_t failed; /* files that did not decode (named in the JSON, never hidden) */
static int huffman_only;

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} err_mgr;

static void on_error(j_common_ptr c)
{
    longjmp(((err_mgr *)c->err)->jb, 1);
}

static void *worker(void *arg)
{
    (void)arg;
    unsigned char *row = NULL;
    size_t row_cap = 0;
    unsigned long long bytes = 0;
    for (;;) {
        size_t j = atomic_fetch_add(&next_job, 1);
        if (j >= jobs)
            break;
        const file *f = &files[j % nfiles];
        struct jpeg_decompress_struct ci;
        err_mgr e;
        ci.err = jpeg_std_error(&e.pub);
        e.pub.error_exit = on_error;
        jpeg_create_decompress(&ci);
        if (setjmp(e.jb)) {
            jpeg_destroy_decompress(&ci);
            atomic_fetch_add(&failed, 1);
            continue;
        }
        jpeg_mem_src(&ci, f->data, (unsigned long)f->len);
        jpeg_read_header(&ci, TRUE);
        /* CMYK (and YCCK) JPEGs decode to CMYK: libjpeg has no CMYK to RGB
         * conversion, and a failed decode must not count as a fast one. */
        ci.out_color_space = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK ? JCS_CMYK : JCS_RGB;
        jpeg_start_decompress(&ci);
        /* Skipping to the very end decodes nothing in libjpeg-turbo: all
         * rows but the last are entropy-decoded and dropped, the last read. */
        if (huffman_only && ci.output_height > 1)
            jpeg_skip_scanlines(&ci, ci.output_height - 1);
        size_t need = (size_t)ci.output_width * ci.output_components * ci.output_height;
        if (need > row_cap) {
            free(row);
            row = malloc(need);
            row_cap = need;
        }
        while (ci.output_scanline < ci.output_height) {
            JSAMPROW rp = row + (size_t)ci.output_scanline * ci.output_width * ci.output_components;
            jpeg_read_scanlines(&ci, &rp, 1);
        }
        jpeg_finish_decompress(&ci);
        bytes += huffman_only ? 0 : need;
        jpeg_destroy_decompress(&ci);
    }
    free(row);
    atomic_fetch_add(&decoded_bytes, bytes);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "huffman") == 0)) {
        fprintf(stderr, "usage: jpeg_full_decode THREADS EPOCHS [huffman] < list of .jpg paths\n");
        return 2;
    }
    huffman_only = argc == 4;
    int threads = atoi(argv[1]), epochs = atoi(argv[2]);
    char path[4096];
    size_t cap = 0;
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        FILE *fp = fopen(path, "rb");
        if (!fp)
            continue;
        fseek(fp, 0, SEEK_END);
        long len = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        if (nfiles == cap)
            files = realloc(files, (cap = cap ? 2 * cap : 1024) * sizeof *files);
        files[nfiles].data = malloc((size_t)len);
        files[nfiles].len = fread(files[nfiles].data, 1, (size_t)len, fp);
        nfiles++;
        fclose(fp);
    }
    if (!nfiles || threads < 1 || epochs < 1)
        return 2;
    pthread_t tid[64];
    if (threads > 64)
        threads = 64;
    /* a warm-up epoch, then the timed ones */
    for (int timed = 0; timed < 2; timed++) {
        jobs = timed ? nfiles * (size_t)epochs : nfiles;
        atomic_store(&next_job, 0);
        atomic_store(&decoded_bytes, 0);
        atomic_store(&failed, 0);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < threads; i++)
            pthread_create(&tid[i], NULL, worker, NULL);
        for (int i = 0; i < threads; i++)
            pthread_join(tid[i], NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (timed)
            printf("{\"samples\": %zu, \"seconds\": %.6f, \"bytes\": %llu, \"failed\": %zu}\n", jobs,
                   (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
                   (unsigned long long)atomic_load(&decoded_bytes), atomic_load(&failed));
    }
    return 0;
}
