/* Discovery's reading of a tar, whole (tar_end.h).
 *
 * libarchive stops at the end-of-archive marker, accepts a tar that simply
 * stops after a member (as GNU tar does), never reads what follows the
 * marker, and its gzip reader does not compare the CRC-32 in each gzip
 * trailer (its source: "XXX TODO: Verify the length and CRC"). A flipped
 * bit in a .tar.gz then decompresses, often, to other bytes that pack would
 * store under a checksum of their own, and verify would find nothing.
 *
 * So discovery decompresses a compressed tar itself and hands libarchive's
 * tar reader plain bytes: gzip through zlib (which checks every member's
 * CRC-32 and length), anything else through libarchive's raw reader (its
 * zstd, xz and bzip2 readers check what their formats hold). After the
 * headers' end the stream is read on to the end of the compressed data,
 * where those checks are, noting the last byte that is not zero. One
 * decompression, as before; a plain tar costs a read of its tail. */
#include "shardfeed_config.h"

#include "tar_end.h"

#if SF_HAVE_ARCHIVE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "error_internal.h"

#define TAR_STREAM_CHUNK (256u << 10)

struct tar_stream {
    const char *tar;
    int fd; /* the file, read with pread (gzip) or by the raw reader; -1: mem */
    const uint8_t *mem;
    size_t mem_len;
    struct archive *raw; /* libarchive's raw reader (not gzip), NULL for gzip */
    z_stream zs;         /* gzip: zlib, a gzip wrapper, its checks */
    int in_member;       /* gzip: inside a member (its end not yet seen) */
    uint64_t in_off;     /* gzip: compressed bytes read */
    uint8_t *in, *out;   /* gzip: compressed and decompressed chunks */
    int eof;
    uint64_t produced;     /* decompressed bytes handed out */
    uint64_t last_nonzero; /* 1 + the offset of the last byte handed out that is not 0; 0: none */
    int rc;                /* the error met, its message in msg */
    char msg[1024];
};

static int stream_fail(tar_stream *s, int rc)
{
    s->rc = rc;
    snprintf(s->msg, sizeof s->msg, "%s", sf_last_error());
    return rc;
}

/* Notes n bytes handed out: the last non-zero one, found from the end (at
 * once, for a block of data; a run of zeros is read through once). */
static void note(tar_stream *s, const uint8_t *b, size_t n)
{
    for (size_t i = n; i-- > 0;)
        if (b[i]) {
            s->last_nonzero = s->produced + i + 1;
            break;
        }
    s->produced += n;
}

/* Up to cap compressed bytes at in_off into s->in: *got, 0 at the end. */
static int read_in(tar_stream *s, size_t *got)
{
    if (s->fd < 0) {
        size_t left = s->in_off >= s->mem_len ? 0 : s->mem_len - (size_t)s->in_off;
        *got = left < TAR_STREAM_CHUNK ? left : TAR_STREAM_CHUNK;
        memcpy(s->in, s->mem + s->in_off, *got);
        return 0;
    }
    ssize_t n;
    do
        n = pread(s->fd, s->in, TAR_STREAM_CHUNK, (off_t)s->in_off);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return sf_fail(-errno, "%s: %s", s->tar, sf_errno_text(errno));
    *got = (size_t)n;
    return 0;
}

/* The next decompressed bytes of a gzip tar (gzip allows several members
 * one after another; zeros after the last are padding, as gzip takes them). */
static ssize_t gzip_pull(tar_stream *s, const void **buf)
{
    z_stream *zs = &s->zs;
    for (;;) {
        if (zs->avail_in == 0) {
            size_t got = 0;
            int rc = read_in(s, &got);
            if (rc)
                return stream_fail(s, rc);
            if (got == 0) {
                if (s->in_member)
                    return stream_fail(s, sf_fail(SF_E_INPUT,
                                                  "%s: the gzip data stops before its end (at compressed "
                                                  "byte %llu): the file is cut short (an interrupted "
                                                  "copy or download, a full disk)",
                                                  s->tar, (unsigned long long)s->in_off));
                s->eof = 1;
                return 0;
            }
            s->in_off += got;
            zs->next_in = s->in;
            zs->avail_in = (uInt)got;
        }
        if (!s->in_member) { /* between members: zeros, or the next member's header */
            while (zs->avail_in && *zs->next_in == 0) {
                zs->next_in++;
                zs->avail_in--;
            }
            if (zs->avail_in == 0)
                continue;
            inflateReset(zs);
            s->in_member = 1;
        }
        zs->next_out = s->out;
        zs->avail_out = TAR_STREAM_CHUNK;
        int z = inflate(zs, Z_NO_FLUSH);
        size_t n = TAR_STREAM_CHUNK - zs->avail_out;
        if (z == Z_STREAM_END)
            s->in_member = 0;
        else if (z != Z_OK && !(z == Z_BUF_ERROR && zs->avail_in == 0))
            return stream_fail(s, sf_fail(SF_E_INPUT,
                                          "%s: damaged gzip data (zlib: %s, before compressed byte "
                                          "%llu): it does not decompress to the bytes that were "
                                          "written, so it is not packed",
                                          s->tar, zs->msg ? zs->msg : "error",
                                          (unsigned long long)(s->in_off - zs->avail_in)));
        if (n) {
            note(s, s->out, n);
            *buf = s->out;
            return (ssize_t)n;
        }
    }
}

/* The next decompressed bytes through libarchive's raw reader. */
static ssize_t raw_pull(tar_stream *s, const void **buf)
{
    size_t n;
    la_int64_t off;
    int r = archive_read_data_block(s->raw, buf, &n, &off);
    if (r == ARCHIVE_EOF) {
        s->eof = 1;
        return 0;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
        return stream_fail(s, sf_fail(SF_E_INPUT,
                                      "%s: damaged compressed data (%s, after %llu bytes "
                                      "decompressed): it does not decompress to the bytes that were "
                                      "written, so it is not packed",
                                      s->tar, archive_error_string(s->raw),
                                      (unsigned long long)s->produced));
    if ((uint64_t)off != s->produced) /* the raw reader hands the stream in order, no holes */
        return stream_fail(s, sf_fail(SF_E_INPUT, "%s: decompressed data out of order at byte %llu",
                                      s->tar, (unsigned long long)off));
    note(s, *buf, n);
    return (ssize_t)n;
}

static ssize_t pull(tar_stream *s, const void **buf)
{
    if (s->rc)
        return s->rc;
    if (s->eof)
        return 0;
    return s->raw ? raw_pull(s, buf) : gzip_pull(s, buf);
}

static la_ssize_t stream_read(struct archive *a, void *ctx, const void **buf)
{
    tar_stream *s = ctx;
    ssize_t n = pull(s, buf);
    if (n < 0) {
        archive_set_error(a, EIO, "%s", s->msg);
        return -1;
    }
    return (la_ssize_t)n;
}

/* A raw reader over the tar's bytes: its filters, from their first bytes. */
static int open_raw(struct archive **out, const char *tar, int fd, const uint8_t *mem, size_t mem_len)
{
    struct archive *a = archive_read_new();
    *out = NULL;
    if (!a)
        return sf_fail(-ENOMEM, "out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    struct archive_entry *e;
    int rc = 0;
    if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0)
        rc = sf_fail(-errno, "%s: %s", tar, sf_errno_text(errno));
    else if ((fd >= 0 ? archive_read_open_fd(a, fd, 64u << 10) : archive_read_open_memory(a, mem, mem_len)) !=
                 ARCHIVE_OK ||
             archive_read_next_header(a, &e) != ARCHIVE_OK)
        rc = sf_fail(SF_E_INPUT, "%s: cannot read as a tar file: %s", tar, archive_error_string(a));
    if (rc) {
        archive_read_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void tar_stream_free(tar_stream *s)
{
    if (!s)
        return;
    if (s->raw)
        archive_read_free(s->raw);
    else
        inflateEnd(&s->zs);
    free(s->in);
    free(s->out);
    free(s);
}

int tar_stream_open(tar_stream **out, const char *tar, int fd, const uint8_t *mem, size_t mem_len)
{
    *out = NULL;
    struct archive *raw;
    int rc = open_raw(&raw, tar, fd, mem, mem_len);
    if (rc)
        return rc;
    if (archive_filter_count(raw) == 1) { /* no filter but the file's bytes: a plain tar */
        archive_read_free(raw);
        return 0;
    }
    tar_stream *s = calloc(1, sizeof *s);
    if (!s) {
        archive_read_free(raw);
        return sf_fail(-ENOMEM, "out of memory");
    }
    *s = (tar_stream){.tar = tar, .fd = fd, .mem = mem, .mem_len = mem_len, .in_member = 1};
    if (archive_filter_count(raw) == 2 && archive_filter_code(raw, 0) == ARCHIVE_FILTER_GZIP) {
        archive_read_free(raw);
        s->in = malloc(TAR_STREAM_CHUNK);
        s->out = malloc(TAR_STREAM_CHUNK);
        /* 16 + 15: a gzip wrapper, whose CRC-32 and length zlib checks */
        if (!s->in || !s->out || inflateInit2(&s->zs, 16 + 15) != Z_OK) {
            free(s->in);
            free(s->out);
            free(s);
            return sf_fail(-ENOMEM, "out of memory");
        }
    } else {
        s->raw = raw;
    }
    *out = s;
    return 0;
}

int tar_stream_attach(struct archive *a, tar_stream *s)
{
    return archive_read_open(a, s, NULL, stream_read, NULL);
}

int tar_stream_failed(const tar_stream *s)
{
    if (!s || !s->rc)
        return 0;
    return sf_fail(s->rc, "%s", s->msg);
}

/* A plain tar's bytes from at->end to its end: *bad 1 + the offset of the
 * first that is not zero, 0 when all are. */
static int plain_tail(uint64_t *bad, const char *tar, int fd, const uint8_t *mem, size_t mem_len,
                      const tar_end *at)
{
    *bad = 0;
    if (fd < 0) {
        for (uint64_t i = at->end; i < mem_len && !*bad; i++)
            *bad = mem[i] ? i + 1 : 0;
        return 0;
    }
    uint8_t *buf = malloc(TAR_STREAM_CHUNK);
    if (!buf)
        return sf_fail(-ENOMEM, "out of memory");
    int rc = 0;
    for (uint64_t pos = at->end; !*bad;) {
        ssize_t n;
        do
            n = pread(fd, buf, TAR_STREAM_CHUNK, (off_t)pos);
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
            rc = n < 0 ? sf_fail(-errno, "%s: %s", tar, sf_errno_text(errno)) : 0;
            break;
        }
        for (ssize_t i = 0; i < n && !*bad; i++)
            *bad = buf[i] ? pos + (uint64_t)i + 1 : 0;
        pos += (uint64_t)n;
    }
    free(buf);
    return rc;
}

static int after_marker(const char *tar, uint64_t at, uint64_t end)
{
    return sf_fail(SF_E_INPUT,
                   "%s: data after the end-of-archive marker (a byte that is not zero at byte %llu of "
                   "the tar, the marker ending at byte %llu): a second tar appended to the first (cat "
                   "a.tar b.tar), whose members tar tools do not read, or a damaged file; give the "
                   "tars as separate files",
                   tar, (unsigned long long)at, (unsigned long long)end);
}

int tar_end_check(const char *tar, tar_stream *s, int fd, const uint8_t *mem, size_t mem_len,
                  const tar_end *at)
{
    /* libarchive consumes the marker's first block, then its second when
     * it is zeros too: less than a block after the last member's data is a
     * tar that just stops. */
    if (at->end < at->data_end + 512)
        return sf_fail(SF_E_INPUT,
                       "%s: no end-of-archive marker after its last member '%s' (the tar's bytes "
                       "end at %llu, right after that member): it looks cut short (an interrupted "
                       "copy or download, a full disk), and samples after that member would be "
                       "lost without a word; write or copy it again",
                       tar, at->last, (unsigned long long)at->end);
    if (!s) {
        uint64_t bad;
        int rc = plain_tail(&bad, tar, fd, mem, mem_len, at);
        return rc ? rc : bad ? after_marker(tar, bad - 1, at->end) : 0;
    }
    const void *buf;
    ssize_t n;
    while ((n = pull(s, &buf)) > 0)
        ;
    if (n < 0)
        return tar_stream_failed(s);
    if (s->last_nonzero > at->end)
        return after_marker(tar, s->last_nonzero - 1, at->end);
    return 0;
}
#else
typedef int tar_end_unused; /* tar inputs are compiled out */
#endif
