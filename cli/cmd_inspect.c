#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *storage_name(int storage)
{
    switch (storage) {
    case SF_STORAGE_FIXED: return "payload";
    case SF_STORAGE_VARIABLE: return "payload, variable length";
    case SF_STORAGE_INLINE: return "inline in the index";
    default: return "?";
    }
}

static void shape_text(char *buf, size_t cap, const sf_field_info *f)
{
    size_t pos = (size_t)snprintf(buf, cap, "(");
    for (uint32_t d = 0; d < f->ndim && pos < cap; d++) {
        if (f->storage == SF_STORAGE_VARIABLE)
            pos += (size_t)snprintf(buf + pos, cap - pos, "*");
        else
            pos += (size_t)snprintf(buf + pos, cap - pos, d ? ", %llu" : "%llu",
                                    (unsigned long long)f->shape[d]);
    }
    if (pos < cap)
        snprintf(buf + pos, cap - pos, f->ndim == 1 ? ",)" : ")");
}

/* The manifest's "image_reencode" (pack --image-max-side; SPEC.md
 * "Metadata", checked when the dataset was opened): 1 with its numbers. */
static int image_reencode(const sf_dataset *ds, uint32_t *side, uint32_t *quality, uint64_t *count)
{
    const void *v;
    size_t len;
    if (sf_dataset_metadata(&v, &len, ds, "image_reencode") != 0 || len != 16)
        return 0;
    const unsigned char *p = v;
    *side = *quality = 0;
    *count = 0;
    for (int i = 3; i >= 0; i--) {
        *side = *side << 8 | p[i];
        *quality = *quality << 8 | p[4 + i];
    }
    for (int i = 7; i >= 0; i--)
        *count = *count << 8 | p[8 + i];
    return 1;
}

static void print_json(const sf_dataset *ds, const char *dir)
{
    int major, minor;
    sf_format_version(&major, &minor);
    printf("{\"path\":");
    cli_json_string(stdout, dir);
    printf(",\"format_version\":\"%d.%d\",\"align\":%u,\"samples\":%llu,\"fields\":[", major, minor,
           sf_dataset_align(ds), (unsigned long long)sf_dataset_num_samples(ds));
    for (uint32_t i = 0; i < sf_dataset_num_fields(ds); i++) {
        sf_field_info f;
        sf_dataset_field(&f, ds, i);
        printf("%s{\"name\":", i ? "," : "");
        cli_json_string(stdout, f.name);
        printf(",\"dtype\":\"%s\",\"shape\":[", f.dtype_name);
        for (uint32_t d = 0; d < f.ndim; d++)
            printf(d ? ",%llu" : "%llu", (unsigned long long)f.shape[d]);
        printf("],\"item_bytes\":%llu,\"storage\":\"%s\",\"codec\":\"%s\"}",
               (unsigned long long)f.item_size,
               sf_storage_name(f.storage), sf_codec_name(f.codec));
    }
    uint64_t total = 0;
    printf("],\"shards\":[");
    for (uint64_t i = 0; i < sf_dataset_num_shards(ds); i++) {
        sf_shard_info s;
        sf_dataset_shard(&s, ds, i);
        total += s.file_size;
        printf("%s{\"name\":\"%s\",\"first_sample\":%llu,\"samples\":%llu,\"bytes\":%llu}", i ? "," : "",
               s.name, (unsigned long long)s.first_sample, (unsigned long long)s.num_samples,
               (unsigned long long)s.file_size);
    }
    printf("],\"bytes\":%llu,\"source\":", (unsigned long long)total);
    cli_json_string(stdout, sf_dataset_source(ds));
    printf(",\"classes\":[");
    for (uint32_t i = 0; i < sf_dataset_num_classes(ds); i++) {
        const char *name;
        size_t len;
        sf_dataset_class_name(&name, &len, ds, i);
        printf(i ? "," : "");
        cli_json_stringn(stdout, name, len);
    }
    uint32_t side, quality;
    uint64_t count;
    if (image_reencode(ds, &side, &quality, &count))
        printf("],\"image_reencode\":{\"max_side\":%u,\"quality\":%u,\"count\":%llu}}\n", side, quality,
               (unsigned long long)count);
    else
        printf("],\"image_reencode\":null}\n");
}

static void print_text(const sf_dataset *ds, const char *dir)
{
    int major, minor;
    char b[32], shape[256];
    sf_format_version(&major, &minor);
    uint64_t total = 0;
    for (uint64_t i = 0; i < sf_dataset_num_shards(ds); i++) {
        sf_shard_info s;
        sf_dataset_shard(&s, ds, i);
        total += s.file_size;
    }
    printf("dataset   %s\n", dir);
    printf("format    %d.%d, records aligned to %u bytes\n", major, minor, sf_dataset_align(ds));
    printf("samples   %llu in %llu shards, %s\n", (unsigned long long)sf_dataset_num_samples(ds),
           (unsigned long long)sf_dataset_num_shards(ds), cli_bytes(b, sizeof b, (double)total));
    if (sf_dataset_source(ds)[0])
        printf("source    %s\n", sf_dataset_source(ds));
    uint32_t nc = sf_dataset_num_classes(ds);
    if (nc) {
        /* The first classes, as labels 0, 1, ...: enough to check a mapping. */
        printf("classes   %u:", nc);
        for (uint32_t i = 0; i < nc && i < 20; i++) {
            const char *name;
            size_t len;
            sf_dataset_class_name(&name, &len, ds, i);
            printf("%s %u=%.*s", i ? "," : "", i, (int)len, name);
        }
        printf(nc > 20 ? ", ...\n" : "\n");
    }
    uint32_t side, quality;
    uint64_t count;
    if (image_reencode(ds, &side, &quality, &count))
        printf("images    at most %u pixels on the longer side: %llu re-encoded as JPEG quality %u at pack time\n",
               side, (unsigned long long)count, quality);
    printf("fields\n");
    for (uint32_t i = 0; i < sf_dataset_num_fields(ds); i++) {
        sf_field_info f;
        sf_dataset_field(&f, ds, i);
        shape_text(shape, sizeof shape, &f);
        char size[32]; /* a variable-length value has no one size ("0 bytes" said it had) */
        if (f.storage == SF_STORAGE_VARIABLE)
            snprintf(size, sizeof size, "%16s", "any size");
        else
            snprintf(size, sizeof size, "%10llu bytes", (unsigned long long)f.item_size);
        printf("  %-16s %-10s %-18s %s  %s%s\n", f.name, f.dtype_name, shape, size,
               storage_name(f.storage),
               f.codec != SF_CODEC_NONE ? (f.codec == SF_CODEC_ZSTD ? ", zstd" : ", ?") : "");
    }
    printf("shards\n");
    for (uint64_t i = 0; i < sf_dataset_num_shards(ds); i++) {
        sf_shard_info s;
        sf_dataset_shard(&s, ds, i);
        printf("  %s  samples %llu..%llu (%llu)  %s\n", s.name, (unsigned long long)s.first_sample,
               (unsigned long long)(s.first_sample + s.num_samples - 1),
               (unsigned long long)s.num_samples, cli_bytes(b, sizeof b, (double)s.file_size));
    }
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'J'},
                                             CLI_REMOTE_LONGOPTS,
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    sf_remote_opts remote = SF_REMOTE_OPTS_INIT;
    int json = 0, c;
    static const char short_opts[] = "h";
    while ((c = getopt_long(argc, argv, short_opts, longopts, NULL)) != -1) {
        const char *bad;
        if (c == 'J')
            json = 1;
        else if (!cli_is_remote_option(c))
            return cli_help_option(c, "inspect", short_opts, argc, argv);
        else if ((bad = cli_remote_option(&remote, c, optarg)))
            return cli_usage_error("inspect", "%s", bad);
    }
    if (optind + 1 != argc)
        return cli_usage_error("inspect", optind == argc ? "no DATASET_DIR given" : "one DATASET_DIR, not %d",
                               argc - optind);
    sf_dataset *ds;
    int rc = sf_dataset_open_ex(&ds, argv[optind], &remote);
    if (rc)
        return cli_fail("inspect", rc);
    char shown[4200];
    if (json)
        print_json(ds, cli_shown(shown, sizeof shown, argv[optind]));
    else
        print_text(ds, cli_shown(shown, sizeof shown, argv[optind]));
    sf_dataset_close(ds);
    return EXIT_OK;
}
