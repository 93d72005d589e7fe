/* Every command's help, in one table: 'shardfeed help CMD', 'shardfeed CMD
 * --help', the overview ('shardfeed help') and the man page (generated from
 * 'shardfeed help --man' at build time: docs/man.cmake) all print these
 * texts, so they cannot disagree. */
#include <getopt.h>
#include <stdarg.h>
#include <string.h>

#include "cli.h"

typedef struct cli_command_help {
    const char *name;
    const char *synopsis; /* the usage line(s), without "usage: " */
    const char *summary;  /* one line for the overview */
    const char *text;     /* what it does and every option */
} cli_command_help;

static const cli_command_help HELP[] = {
    {"pack", "shardfeed pack INPUT -o OUT_DIR|URL [options]",
     "pack .npy files, an ImageFolder tree, a list or tar files into checksummed shards",
     "INPUT is one of (picked from what it is; --input-format overrides):\n"
     "  npy          a directory of {field}_{key}.npy files (img_0.npy, label_0.npy, ...):\n"
     "               files with the same key form one sample, in natural key order\n"
     "  imagefolder  ROOT/<class>/<image>: each file's bytes as field 'image', 'label' the\n"
     "               class index among the sorted class names (torchvision's ImageFolder)\n"
     "  list         a .csv/.tsv/.txt list: path, label[, more columns]\n"
     "  tar          a WebDataset .tar (or .tar.gz, ...), or a directory of them\n"
     "\n"
     "  -o, --output DIR           output dataset folder (created if missing); required.\n"
     "                             A URL (s3://BUCKET/PREFIX, or http(s):// of a server\n"
     "                             taking PUT): packs into a temporary folder, uploads it\n"
     "                             as 'shardfeed push' does (the manifest last; --force:\n"
     "                             replace a dataset there), then removes the folder, also\n"
     "                             after a failure or SIGINT/SIGTERM/SIGHUP/SIGQUIT\n"
     "      --tmp-dir DIR          -o URL: where that temporary folder goes (default\n"
     "                             $TMPDIR, else /tmp); it needs room for the whole packed\n"
     "                             dataset\n"
     "      --retries N            -o URL: attempts after the first, per request (default 8)\n"
     "  -j, --jobs N               worker threads (default: one per CPU)\n"
     "      --input-format F       auto (default), npy, imagefolder, list or tar; auto\n"
     "                             refuses a folder holding the inputs of more than one\n"
     "                             (tar files beside class folders with images)\n"
     "      --compress F=zstd[:L]  store field F as zstd frames (level L, default 3);\n"
     "                             repeat or separate with commas for more fields\n"
     "      --shard-size SIZE      target shard size, e.g. 256MiB, 1GiB (default 256MiB)\n"
     "      --align N              record alignment, power of two <= 1MiB (default 4096)\n"
     "      --image-max-side N     store images at most N pixels on their longer side: a\n"
     "                             larger one is resized (aspect kept) and re-encoded as an\n"
     "                             RGB JPEG; smaller ones are stored unchanged. Every image\n"
     "                             is decoded (a damaged one stops the pack, naming it).\n"
     "                             Image fields: imagefolder 'image', list 'data', tar\n"
     "                             'jpg', 'jpeg', 'png', 'webp'. Default: off\n"
     "      --image-quality Q      JPEG quality 1..100 of re-encoded images (default 90)\n"
     "      --part K/N             write only part K (0..N-1) of N, as a dataset of its own;\n"
     "                             join the parts with 'shardfeed merge'. Under a launcher,\n"
     "                             K/N come from SLURM_PROCID/SLURM_NTASKS,\n"
     "                             OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/PMI_SIZE; '%k' in\n"
     "                             OUT_DIR is replaced by K\n"
     "      --force                replace a shardfeed dataset already in OUT_DIR (or URL)\n"
     "  -q, --quiet                no progress bar and no summary\n"
     "  -h, --help                 this help\n"
     "\n"
     "Re-running the same command after an interruption keeps every finished shard\n"
     "that is proven to hold this input's records (all of it is read again); on a\n"
     "complete dataset of this input it writes nothing and says 'already complete'.\n"},
    {"merge", "shardfeed merge PART_DIR... -o DATASET_DIR [--force] [--ignore-mtimes] [-q]",
     "join the parts of a 'pack --part K/N' run into one dataset",
     "Joins the parts written by 'shardfeed pack --part K/N' (all N of them, in any\n"
     "order) into one dataset. Sample data is copied, not re-encoded: only each shard's\n"
     "header and footer change, and the result is byte for byte what one 'pack' of the\n"
     "whole input writes. Parts packed from different inputs are refused: each\n"
     "part records its input's file names, sizes and modification times, a list\n"
     "input's list file (its bytes hold the labels), and a hash of the first value\n"
     "of every shard.\n"
     "\n"
     "  -o, --output DIR      the merged dataset (created if missing); required\n"
     "      --force           replace a shardfeed dataset already in DIR\n"
     "      --ignore-mtimes   merge parts whose input files differ only in modification\n"
     "                        times (an input copied to each machine without keeping\n"
     "                        times); other differences are refused all the same\n"
     "  -q, --quiet           no summary\n"
     "  -h, --help            this help\n"},
    {"verify", "shardfeed verify DATASET_DIR|URL [-j N] [--decompress] [--json]",
     "check every byte; exit 0 intact, 2 corrupt, 1 usage or environment error",
     "Checks the manifest, every shard header, index, footer, record checksum and\n"
     "padding byte, and prints each problem with its file, record and byte offset.\n"
     "A shard file the manifest does not list is a problem too: in a folder, and\n"
     "under an s3:// prefix (its objects listed; a listing refused is exit 1). A web\n"
     "server has no listing: over http(s):// stray files are not checked (said once).\n"
     "A URL's shards are downloaded from the store, never read from the cache.\n"
     "\n"
     "  -j, --jobs N        shards checked at once (default: one per CPU)\n"
     "      --decompress    also decompress every zstd value and check it (its size,\n"
     "                      one whole frame); record checksums cover the stored\n"
     "                      (compressed) bytes, so without it values stay compressed\n"
     "      --json          one JSON object on stdout instead of text: problems (a\n"
     "                      list), ok, shards, records, bytes, seconds, strays_checked\n"
     "                      (and error when something stopped the check)\n"
     "      --cache-dir DIR     DATASET_DIR a URL (s3://, http(s)://): the cache folder\n"
     "                          its shards are downloaded to, each removed once checked\n"
     "                          (README \"Remote datasets\")\n"
     "      --cache-limit SIZE  the most bytes that folder holds (default 16GiB)\n"
     "      --remote-mode MODE  cache or direct (verify reads shards whole: cache)\n"
     "  -h, --help          this help\n"
     "\n"
     "Exit 0: intact; 2: corrupt; 1: usage or environment error (a missing folder,\n"
     "a folder that is not a dataset, I/O).\n"},
    {"inspect", "shardfeed inspect DATASET_DIR|URL [--json]",
     "show the schema, counts, shards and sizes",
     "Prints the format version and record alignment, the number of samples and\n"
     "shards, the input format it was packed from, the class names of an\n"
     "ImageFolder dataset, the schema (each field's name, dtype, shape and size),\n"
     "and every shard with its sample range and size. It does not check the\n"
     "records: 'shardfeed verify' does.\n"
     "\n"
     "      --json          the same as one JSON object on stdout\n"
     "      --cache-dir DIR     DATASET_DIR a URL (s3://, http(s)://): its cache folder\n"
     "      --cache-limit SIZE  the most bytes that folder holds (default 16GiB)\n"
     "      --remote-mode MODE  cache (default) or direct\n"
     "  -h, --help          this help\n"},
    {"export", "shardfeed export DATASET_DIR|URL -o DIR [--npy]",
     "write every sample back in the layout it was packed from (or as .npy)",
     "Writes every sample back in the layout the dataset was packed from:\n"
     "  imagefolder  DIR/<class>/<file>, byte for byte\n"
     "  tar          DIR/<key>.<field>: the members of the tar files\n"
     "  list         DIR/<path> and DIR/list.csv (path and the other columns)\n"
     "  npy          DIR/{field}_{key}.npy\n"
     "Record checksums are checked. DIR must be new or empty; two samples that\n"
     "would write the same name stop the export before anything is written.\n"
     "A file gets its name only once complete: an export that fails or is killed\n"
     "leaves no file cut short under its name (exit 0 says it finished).\n"
     "\n"
     "  -o, --output DIR   output folder (created if missing, else empty); required\n"
     "      --npy          write {field}_{key}.npy files whatever the layout\n"
     "      --cache-dir DIR     DATASET_DIR a URL (s3://, http(s)://): the cache folder\n"
     "                          its shards are read through\n"
     "      --cache-limit SIZE  the most bytes that folder holds (default 16GiB)\n"
     "      --remote-mode MODE  cache (default) or direct\n"
     "  -h, --help         this help\n"},
    {"push", "shardfeed push DATASET_DIR s3://BUCKET[/PREFIX] | http(s)://HOST/PATH [options]",
     "upload a dataset to an S3 or S3-compatible store (or a WebDAV server), the manifest last",
     "Checks the dataset (its manifest, and every shard's header, footer and index\n"
     "against it), then uploads every shard and the manifest last, so a reader never\n"
     "finds a manifest whose shards are not all there. Objects are PREFIX/manifest.sfm,\n"
     "PREFIX/shard-000000.sfs, ...: the folder's file names. Each request is retried\n"
     "with backoff on a 5xx or 429 answer and on a reset, timeout or short answer;\n"
     "then the error names the object's URL, the HTTP status and the store's message,\n"
     "and no manifest is left at the destination. Credentials: AWS_ACCESS_KEY_ID and\n"
     "AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN), else ~/.aws/credentials (AWS_PROFILE);\n"
     "region: AWS_REGION, else ~/.aws/config, else us-east-1; AWS_ENDPOINT_URL names\n"
     "an S3-compatible store (objects addressed path-style). An http(s):// URL is a web\n"
     "server taking PUT and DELETE (WebDAV, e.g. nginx's dav_methods): every file in\n"
     "one PUT. With credentials each upload is signed with its body's SHA-256, which\n"
     "the store checks; without (a web server, an anonymous bucket) every object is\n"
     "read back and compared, and uploaded again when it differs. README \"Remote\n"
     "datasets\".\n"
     "\n"
     "      --part-size SIZE            multipart part size (default 16MiB; raised to stay\n"
     "                                  within 10,000 parts; under 5MiB refused on AWS,\n"
     "                                  taken by S3-compatible stores from 64KiB)\n"
     "      --multipart-threshold SIZE  shards larger than this go up in parts\n"
     "                                  (default 64MiB)\n"
     "      --retries N                 attempts after the first, per request (default 8)\n"
     "      --overwrite                 the destination already holds a dataset: delete\n"
     "                                  its manifest first, then upload (default: refuse)\n"
     "  -q, --quiet                     no line per uploaded file and no summary\n"
     "  -h, --help                      this help\n"
     "\n"
     "Exit 0: uploaded; 2: the local dataset breaks the format; 1: anything else (a\n"
     "usage error, the store refused or failed, a dataset already there).\n"},
    {"bench",
     "shardfeed bench DATASET_DIR|URL [--batch-size N] [--epochs N]\n"
     "           [--shuffle none|global|block] [--seed S] [--engine auto|uring|pread|mmap]\n"
     "           [--direct] [--no-verify] [--prefetch K] [--threads N] [--queue-depth N]\n"
     "           [--skip-corrupt] [--device cpu|cuda[:N]|host-copy] [--json]\n"
     "           [--consumer-sleep-us N] [--trace FILE]\n"
     "           [--image FIELD=rrc:SIZE[:flip]|center:SIZE[:RESIZE]|decode]\n"
     "           [--remote-mode cache|direct] [--cache-dir DIR] [--cache-limit SIZE]",
     "stream through the dataset with the reader; report samples/s, GB/s, CPU, RSS",
     "Reads every batch of every epoch through the reader (checksums on unless\n"
     "--no-verify) and reports samples/s, GB/s, CPU seconds and peak RSS, how the\n"
     "time split between waiting, I/O, checksums, device copies and image decoding,\n"
     "and a verdict: io-bound, checksum-bound, copy-bound, decode-bound or\n"
     "consumer-bound (the rule: see README,\n"
     "\"Finding the bottleneck\").\n"
     "\n"
     "  --batch-size N         samples per batch (default 32)\n"
     "  --epochs N             epochs to read (default 1); each has its own order\n"
     "  --shuffle MODE         none (dataset order; the default), global (a full\n"
     "                         permutation per epoch, as a trainer reads) or block\n"
     "                         (runs of consecutive samples shuffled within windows:\n"
     "                         near-sequential reads)\n"
     "  --seed S               the order's seed (default 0)\n"
     "  --engine E             auto (default: for shards in the page cache, mmap,\n"
     "                         except pread for large compressed records; io_uring\n"
     "                         for cold reads and --direct), uring, pread or mmap\n"
     "  --direct               O_DIRECT reads that bypass the page cache (a dataset\n"
     "                         packed with --align 4096 and 4096-byte multiples)\n"
     "  --no-verify            skip the records' checksums\n"
     "  --prefetch K           batch slots: read-ahead plus the batch held (default: as\n"
     "                         many as make 2 MiB, at least 4 and at most 8)\n"
     "  --threads N            I/O threads (default: chosen from the engine, the\n"
     "                         record size and the CPU count)\n"
     "  --queue-depth N        io_uring reads in flight per ring (default 32)\n"
     "  --skip-corrupt         substitute the next intact sample for a corrupt one\n"
     "                         instead of stopping (counted in the report)\n"
     "  --device D             where batches are delivered: cpu (default), cuda or\n"
     "                         cuda:N (copied to that GPU), host-copy (a copy thread\n"
     "                         stands in for a GPU: for tests and machines without one)\n"
     "  --json                 the report as one JSON object on stdout\n"
     "  --consumer-sleep-us N  the consumer sleeps N us per batch (a model step)\n"
     "  --trace FILE           write a Chrome/Perfetto trace of every batch's\n"
     "                         stages (ui.perfetto.dev; at most 65536 batches)\n"
     "  --image FIELD=SPEC     decode FIELD's images in the I/O threads: rrc:224:flip\n"
     "                         (RandomResizedCrop(224) + flip), center:224:256 (Resize\n"
     "                         256 + CenterCrop 224) or decode (no resizing); add :hwc,\n"
     "                         :gray, :exact or :flip=P\n"
     "  --remote-mode MODE     DATASET_DIR a URL (s3://, http(s)://): cache (default:\n"
     "                         whole shards through the cache folder) or direct (each\n"
     "                         record by a range request; README \"Remote datasets\")\n"
     "  --cache-dir DIR        the cache folder (default $XDG_CACHE_HOME/shardfeed)\n"
     "  --cache-limit SIZE     the most bytes the cache folder holds (default 16GiB)\n"
     "  -h, --help             this help\n"},
    {"version", "shardfeed version", "print the version of shardfeed and of its format",
     "Prints 'shardfeed VERSION (format MAJOR.MINOR)'. Also: shardfeed --version.\n"},
    {"help", "shardfeed help [COMMAND]", "this overview, or one command's full help",
     "Without COMMAND: every command with a line on what it does. With COMMAND: its\n"
     "full help, as 'shardfeed COMMAND --help' prints it.\n"},
};

#define HELP_COUNT (sizeof HELP / sizeof HELP[0])

static const cli_command_help *find_help(const char *name)
{
    for (size_t i = 0; i < HELP_COUNT; i++)
        if (strcmp(HELP[i].name, name) == 0)
            return &HELP[i];
    return NULL;
}

void cli_overview(FILE *f)
{
    fputs("usage: shardfeed COMMAND [ARGS]\n\n", f);
    for (size_t i = 0; i < HELP_COUNT; i++)
        fprintf(f, "  %-8s %s\n", HELP[i].name, HELP[i].summary);
    fputs("\nThe format is described in SPEC.md; 'shardfeed help COMMAND' (or 'shardfeed\n"
          "COMMAND --help') gives a command's full help; 'man shardfeed' all of them.\n",
          f);
}

int cli_help(FILE *f, const char *cmd)
{
    const cli_command_help *h = find_help(cmd);
    if (!h)
        return -1;
    fprintf(f, "usage: %s\n\n%s", h->synopsis, h->text);
    return 0;
}

/* `s` as roff text: backslashes and hyphens escaped, and a line that starts
 * with a control character ('.' or '\'') protected by \&. */
static void roff_text(FILE *f, const char *s)
{
    int line_start = 1;
    for (; *s; s++) {
        if (line_start && (*s == '.' || *s == '\''))
            fputs("\\&", f);
        if (*s == '\\')
            fputs("\\e", f);
        else if (*s == '-')
            fputs("\\-", f);
        else
            fputc(*s, f);
        line_start = *s == '\n';
    }
    if (!line_start)
        fputc('\n', f);
}

void cli_man(FILE *f)
{
    fprintf(f, ".TH SHARDFEED 1 \"\" \"shardfeed %s\" \"User Commands\"\n", sf_version());
    fputs(".SH NAME\n"
          "shardfeed \\- pack, check, inspect, export and stream datasets of checksummed shards\n"
          ".SH SYNOPSIS\n"
          ".B shardfeed\n"
          ".I COMMAND\n"
          "[ARGS]\n"
          ".SH DESCRIPTION\n"
          "shardfeed packs samples (.npy files, an ImageFolder tree, a list file or WebDataset\n"
          "tar files) into a dataset of checksummed shards, checks, inspects and exports such\n"
          "datasets, and measures how fast its reader streams them. The format is described\n"
          "in SPEC.md; the C library (shardfeed/shardfeed.h, pkg\\-config shardfeed) and the\n"
          "Python module (import shardfeed) read the batches.\n"
          "Each section below is what\n"
          ".B shardfeed help\n"
          ".I COMMAND\n"
          "prints.\n"
          ".SH COMMANDS\n",
          f);
    for (size_t i = 0; i < HELP_COUNT; i++) {
        fprintf(f, ".SS %s\n", HELP[i].name);
        roff_text(f, HELP[i].summary);
        fputs(".PP\n.nf\n", f);
        roff_text(f, HELP[i].synopsis);
        fputs("\n", f);
        roff_text(f, HELP[i].text);
        fputs(".fi\n", f);
    }
    fputs(".SH EXIT STATUS\n"
          "The same for every command:\n"
          ".TP\n0\nsuccess\n"
          ".TP\n1\na usage or environment error (a missing folder, a folder that is not a\n"
          "dataset, I/O, a bad option)\n"
          ".TP\n2\na dataset's files break the format (corrupt or truncated)\n"
          ".SH SEE ALSO\n"
          "SPEC.md and README.md in the shardfeed sources; in Python, help(shardfeed).\n",
          f);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "shardfeed %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'shardfeed help %s')\n", cmd);
    return EXIT_USAGE;
}

int cli_help_option(int c, const char *cmd, const char *short_opts, int argc, char **argv)
{
    if (c == 'h') {
        cli_help(stdout, cmd);
        return EXIT_OK;
    }
    /* getopt_long is quiet (opterr = 0, main.c): its own message named
     * the command "pack" and came with the usage on two more lines. Which
     * option, and what was wrong with it, from optopt and the argument
     * getopt_long stopped at. */
    const char *arg = optind >= 1 && optind <= argc ? argv[optind - 1] : "";
    const char *known = optopt > 0 && optopt < 128 ? strchr(short_opts, optopt) : NULL;
    if (strncmp(arg, "--", 2) == 0) {
        const char *eq = strchr(arg, '=');
        int len = eq ? (int)(eq - arg) : (int)strlen(arg);
        if (!optopt)
            return cli_usage_error(cmd, "unknown (or ambiguous) option '%.*s'", len, arg);
        if (eq)
            return cli_usage_error(cmd, "option '%.*s' takes no value", len, arg);
        return cli_usage_error(cmd, "option '%s' needs a value", arg);
    }
    if (known && known[1] == ':')
        return cli_usage_error(cmd, "option '-%c' needs a value", optopt);
    return cli_usage_error(cmd, "unknown option '-%c'", optopt > 0 ? optopt : '?');
}
