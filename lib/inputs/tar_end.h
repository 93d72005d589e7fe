/* Discovery's reading of a tar, whole (input_tar.c): a compressed tar's
 * bytes decompressed by a stream of our own that checks them to the end of
 * the compressed data, and what follows the last member checked: the
 * end-of-archive marker, then nothing but zeros. */
#ifndef SF_TAR_END_H
#define SF_TAR_END_H

#include <stddef.h>
#include <stdint.h>

struct archive;

/* A compressed tar's decompressed bytes, for libarchive's tar reader. */
typedef struct tar_stream tar_stream;

/* Where a tar's headers ended, from libarchive's reading of them:
 * data_end the (uncompressed) byte after the last member's data and
 * padding, end the byte after the end-of-archive marker or where the
 * stream ended, last the last member's name. */
typedef struct tar_end {
    uint64_t data_end;
    uint64_t end;
    const char *last;
} tar_end;

/* Looks at the start of `tar` (fd, or mem when fd < 0) with libarchive's
 * filters: *out NULL for a tar that is not compressed (read it as it is),
 * else a stream of its decompressed bytes that checks what the format
 * holds: gzip through zlib, each member's CRC-32 and length (libarchive's
 * gzip reader skips them), any other compression through libarchive's
 * readers (zstd, xz, bzip2 check their own). fd's offset is left anywhere. */
int tar_stream_open(tar_stream **out, const char *tar, int fd, const uint8_t *mem, size_t mem_len);

/* archive_read_open on `a` (its tar format supported) reading from s. */
int tar_stream_attach(struct archive *a, tar_stream *s);

/* The error s met while the tar reader read from it (its message in
 * sf_last_error after this call), or 0. */
int tar_stream_failed(const tar_stream *s);

void tar_stream_free(tar_stream *s);

/* After the tar reader's ARCHIVE_EOF: refuses, naming `tar` and the reason,
 * a tar that ends without the end-of-archive marker (cut short at a
 * member's end: its remaining samples would be lost without a word), one
 * with anything but zeros after the marker (a second tar appended with
 * cat, whose members tar tools and libarchive never read), and compressed
 * data that does not decompress whole with its checksums (the stream s is
 * read to its end). A plain tar's (s NULL) tail is read from fd or mem. */
int tar_end_check(const char *tar, tar_stream *s, int fd, const uint8_t *mem, size_t mem_len,
                  const tar_end *at);

#endif
