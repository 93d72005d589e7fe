/* The output directory: what may already be there, what is kept for a
 * resumed run, and atomic file replacement. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/error_internal.h"
#include "format/shard_file.h"
#include "pack_internal.h"

int pack_write_full(int fd, const uint8_t *buf, uint64_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += n;
        len -= (uint64_t)n;
    }
    return 0;
}

int pack_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sf_fail(-errno, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (rc)
        return sf_fail(rc, "%s: fsync: %s", dir, strerror(-rc));
    return 0;
}

int pack_write_atomic(const char *dir, const char *name, const uint8_t *buf, uint64_t len)
{
    char tmp[4096], dst[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sf_fail(-errno, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = pack_write_full(fd, buf, len);
    if (!rc && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, dst) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return sf_fail(rc, "%s: %s", dst, strerror(-rc));
    }
    return pack_fsync_dir(dir);
}

enum file_kind { KIND_FOREIGN, KIND_MANIFEST, KIND_SHARD, KIND_TEMP };

static enum file_kind classify(const char *name, unsigned *shard)
{
    unsigned n;
    int end = 0;
    if (strcmp(name, SF_MANIFEST_NAME) == 0)
        return KIND_MANIFEST;
    if (sscanf(name, "shard-%6u.sfs%n", &n, &end) == 1 && end == (int)strlen(name) &&
        strlen(name) == strlen("shard-000000.sfs")) {
        *shard = n;
        return KIND_SHARD;
    }
    size_t len = strlen(name);
    if (name[0] == '.' && len > 5 && strcmp(name + len - 4, ".tmp") == 0)
        return KIND_TEMP;
    return KIND_FOREIGN;
}

/* dataset_id of the shard `path`, or 0 when it is not a readable shard. */
static uint64_t shard_dataset_id(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    uint8_t buf[SF_SHARD_HEADER_SIZE];
    sf_shard_header h;
    uint64_t id = 0;
    if (sf_pread_full(fd, buf, sizeof buf, 0) == 0 && sf_shard_header_decode(&h, buf) == 0)
        id = h.dataset_id;
    close(fd);
    return id;
}

/* dataset_id in the manifest at `path`, or 0 when it does not decode. */
static uint64_t manifest_dataset_id(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    uint64_t id = 0;
    struct stat st;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size <= SF_MANIFEST_MAX_SIZE) {
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        sf_manifest m;
        if (buf && sf_pread_full(fd, buf, (uint64_t)st.st_size, 0) == 0 &&
            sf_manifest_decode(&m, buf, (uint64_t)st.st_size) == 0) {
            id = m.dataset_id;
            sf_manifest_clear(&m);
        }
        free(buf);
    }
    close(fd);
    return id;
}

static int remove_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) != 0 && errno != ENOENT)
        return sf_fail(-errno, "%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

/* mkdir -p of the folders above `out` (parts/%k makes parts/ too). */
static void make_parents(const char *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", out);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0777); /* an error shows when `out` itself is made */
        *p = '/';
    }
}

int pack_outdir_prepare(const char *out, const pack_plan *plan, int force, uint8_t *reuse)
{
    make_parents(out);
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        return sf_fail(-errno, "%s: cannot create output directory: %s", out, strerror(errno));
    DIR *d = opendir(out);
    if (!d)
        return sf_fail(-errno, "%s: cannot open output directory: %s", out, strerror(errno));
    if (access(out, W_OK) != 0) {
        int e = errno;
        closedir(d);
        return sf_fail(-e, "%s: output directory is not writable: %s", out, strerror(e));
    }

    /* First pass: refuse anything we did not write, and learn what is here. */
    int rc = 0, have_manifest = 0, other_dataset = 0;
    char path[4096];
    struct dirent *de;
    while (!rc && (de = readdir(d)) != NULL) {
        unsigned n = 0;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", out, de->d_name);
        switch (classify(de->d_name, &n)) {
        case KIND_FOREIGN:
            rc = sf_fail(SF_E_EXISTS, "%s: output directory holds a file shardfeed did not write; refusing to write there",
                         path);
            break;
        case KIND_MANIFEST:
            have_manifest = 1;
            if (manifest_dataset_id(path) != plan->dataset_id)
                other_dataset = 1;
            break;
        case KIND_SHARD:
            if (shard_dataset_id(path) == plan->dataset_id && n < plan->shard_count)
                reuse[n] = 1;
            else if (shard_dataset_id(path) != 0)
                other_dataset = 1;
            break;
        case KIND_TEMP:
            break;
        }
    }
    if (rc) {
        closedir(d);
        return rc;
    }
    if (!force && have_manifest && !other_dataset) {
        closedir(d);
        return sf_fail(SF_E_EXISTS, "%s: already holds this dataset, complete (--force rewrites it)", out);
    }
    if (!force && other_dataset) {
        closedir(d);
        return sf_fail(SF_E_EXISTS, "%s: holds a different shardfeed dataset (--force replaces it)", out);
    }

    /* Second pass: the manifest goes first, so the directory stops being a
     * dataset before any shard of it is touched. Then temporaries from a
     * killed run, then (with --force, or when unusable) old shards. */
    if (have_manifest) {
        if ((rc = remove_file(out, SF_MANIFEST_NAME)) || (rc = pack_fsync_dir(out))) {
            closedir(d);
            return rc;
        }
    }
    rewinddir(d);
    while (!rc && (de = readdir(d)) != NULL) {
        unsigned n = 0;
        enum file_kind k = classify(de->d_name, &n);
        if (k == KIND_TEMP)
            rc = remove_file(out, de->d_name);
        else if (k == KIND_SHARD && (force || n >= plan->shard_count || !reuse[n])) {
            if (n < plan->shard_count)
                reuse[n] = 0;
            rc = remove_file(out, de->d_name);
        }
    }
    closedir(d);
    if (force)
        memset(reuse, 0, plan->shard_count);
    return rc;
}
