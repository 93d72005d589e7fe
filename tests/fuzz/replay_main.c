/* Standalone driver for the fuzz targets: linked instead of libFuzzer, it
 * feeds every file of the given corpus directories (or the given files) to
 * LLVMFuzzerTestOneInput, so each corpus runs as an ordinary test in every
 * build, with any compiler.
 *
 *   fuzz_X_replay [-m N] [-s SEED] CORPUS_DIR_OR_FILE...
 *
 * -m N additionally runs N deterministic mutations of each input (byte
 * flips, insertions, deletions, splices with another input; seeded by -s),
 * a cheap stand-in for fuzzing where libFuzzer is not available.
 * Exit status: 0 when every input ran (a finding aborts), 1 on usage error
 * or when no input was found (a wrong corpus path must not pass silently). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct input {
    char *path;
    uint8_t *data;
    size_t size;
} input;

static input *inputs;
static size_t n_inputs, cap_inputs;

static int load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)) {
        fprintf(stderr, "%s: read failed\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    if (n_inputs == cap_inputs) {
        cap_inputs = cap_inputs ? 2 * cap_inputs : 64;
        inputs = realloc(inputs, cap_inputs * sizeof *inputs);
        if (!inputs)
            abort();
    }
    inputs[n_inputs++] = (input){strdup(path), buf, (size_t)len};
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return load(path);
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names)
                abort();
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_name); /* same order on every machine */
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && load(p) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

static uint64_t rng_state;

/* The input being run, saved by the crash handler so a failing mutation can
 * be replayed and minimised: ./crash-replay-<pid> in the working directory
 * (or $SF_REPLAY_ARTIFACTS). */
static const uint8_t *volatile cur_data;
static volatile size_t cur_size;

static void on_crash(int sig)
{
    char path[4200];
    const char *dir = getenv("SF_REPLAY_ARTIFACTS");
    snprintf(path, sizeof path, "%s/crash-replay-%d", dir && *dir ? dir : ".", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, (const void *)cur_data, cur_size);
        (void)w;
        close(fd);
        static const char msg[] = "replay: the failing input was saved as ";
        w = write(2, msg, sizeof msg - 1);
        w = write(2, path, strlen(path));
        w = write(2, "\n", 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
    LLVMFuzzerTestOneInput(data, size);
}

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One random mutation of `in` into buf (capacity cap); returns the length. */
static size_t mutate(uint8_t *buf, size_t cap, const input *in)
{
    size_t len = in->size < cap ? in->size : cap;
    memcpy(buf, in->data, len);
    int rounds = 1 + (int)(rnd() % 4);
    for (int r = 0; r < rounds; r++) {
        switch (rnd() % 6) {
        case 0: /* flip a bit */
        case 1:
            if (len)
                buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 2: /* set a byte to an interesting value */
            if (len) {
                static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', ',', ')', '(', ' ', '\''};
                buf[rnd() % len] = v[rnd() % sizeof v];
            }
            break;
        case 3: /* delete a range */
            if (len) {
                size_t at = rnd() % len, n = 1 + rnd() % (len - at < 16 ? len - at : 16);
                memmove(buf + at, buf + at + n, len - at - n);
                len -= n;
            }
            break;
        case 4: /* insert random bytes */
            if (len < cap) {
                size_t at = len ? rnd() % (len + 1) : 0, n = 1 + rnd() % 8;
                if (n > cap - len)
                    n = cap - len;
                memmove(buf + at + n, buf + at, len - at);
                for (size_t i = 0; i < n; i++)
                    buf[at + i] = (uint8_t)rnd();
                len += n;
            }
            break;
        default: /* overwrite a range with bytes of another input */
            if (len && n_inputs) {
                const input *o = &inputs[rnd() % n_inputs];
                if (o->size) {
                    size_t src = rnd() % o->size, dst = rnd() % len;
                    size_t n = 1 + rnd() % 32;
                    if (n > o->size - src)
                        n = o->size - src;
                    if (n > len - dst)
                        n = len - dst;
                    memcpy(buf + dst, o->data + src, n);
                }
            }
            break;
        }
    }
    return len;
}

int main(int argc, char **argv)
{
    long mutations = 0;
    unsigned long long seed = 1;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc)
            mutations = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [-m MUTATIONS] [-s SEED] CORPUS_DIR_OR_FILE...\n", argv[0]);
            return 1;
        }
    }
    if (i == argc) {
        fprintf(stderr, "usage: %s [-m MUTATIONS] [-s SEED] CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 1;
    }
    for (; i < argc; i++)
        if (add_path(argv[i]) != 0)
            return 1;
    if (n_inputs == 0) {
        fprintf(stderr, "no corpus inputs found\n");
        return 1;
    }
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    clock_t t0 = clock();
    for (size_t k = 0; k < n_inputs; k++) {
        fprintf(stderr, "replay %s (%zu bytes)\n", inputs[k].path, inputs[k].size);
        run_one(inputs[k].data, inputs[k].size);
    }
    uint64_t runs = n_inputs;
    if (mutations > 0) {
        rng_state = seed;
        size_t cap = 0;
        for (size_t k = 0; k < n_inputs; k++)
            if (inputs[k].size > cap)
                cap = inputs[k].size;
        cap += 64;
        uint8_t *buf = malloc(cap);
        if (!buf)
            abort();
        for (size_t k = 0; k < n_inputs; k++) {
            for (long m = 0; m < mutations; m++) {
                uint64_t st = rng_state;
                size_t len = mutate(buf, cap, &inputs[k]);
                /* Copy to an exact-size block so ASan sees overreads. */
                uint8_t *exact = malloc(len ? len : 1);
                memcpy(exact, buf, len);
                if (getenv("SF_REPLAY_VERBOSE"))
                    fprintf(stderr, "mutation %ld of %s (rng %llu)\n", m, inputs[k].path,
                            (unsigned long long)st);
                run_one(exact, len);
                free(exact);
                runs++;
            }
        }
        free(buf);
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    fprintf(stderr, "%s: %zu corpus inputs, %llu runs in total (%ld mutations each, seed %llu), %.2f s CPU\n",
            argv[0], n_inputs, (unsigned long long)runs, mutations, seed, secs);
    for (size_t k = 0; k < n_inputs; k++) {
        free(inputs[k].path);
        free(inputs[k].data);
    }
    free(inputs);
    return 0;
}
