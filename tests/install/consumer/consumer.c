/* A program built against an installed shardfeed (tests/install/check.sh):
 * opens the dataset it is given, reads one epoch through sf_reader and
 * prints the library version, the sample count and the sum of the labels. */
#include <inttypes.h>
#include <stdio.h>

#include <shardfeed/shardfeed.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: consumer DATASET\n");
        return 2;
    }
    sf_reader_opts o = SF_READER_OPTS_INIT;
    o.batch_size = 4;
    sf_reader *r;
    if (sf_reader_open(&r, argv[1], &o) < 0) {
        fprintf(stderr, "consumer: %s\n", sf_last_error());
        return 1;
    }
    int64_t sum = 0;
    uint64_t n = 0;
    const sf_batch *b;
    int rc;
    while ((rc = sf_reader_next(&b, r)) == 0 && b) {
        const sf_batch_field *label = sf_batch_field_find(b, "label");
        for (uint32_t i = 0; label && i < b->size; i++)
            sum += ((const int64_t *)label->data)[i];
        n += b->size;
        sf_reader_release(r, b);
    }
    if (rc < 0) /* an error (a corrupt record, a read that failed), not the end of the epoch */
        fprintf(stderr, "consumer: %s\n", sf_last_error());
    sf_reader_close(r);
    if (rc < 0)
        return 1;
    printf("shardfeed %s: %" PRIu64 " samples, label sum %" PRId64 "\n", sf_version(), n, sum);
    return 0;
}
