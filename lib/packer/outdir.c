/* The output directory: its lock, what may already be there, what is kept
 * for a resumed run, and atomic file replacement.
 *
 * What pack may remove is decided by identity, not by name alone: a file
 * is removed only when it carries a dataset_id (a manifest or shard header
 * that decodes, or a temporary whose name holds the id), and only when the
 * id is this run's, or with --force another dataset's. Anything else is a
 * file shardfeed did not write: refused even with --force, never removed. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error_internal.h"
#include "shard_file.h"
#include "pack_internal.h"
#include "shardfeed/remote.h"

void pack_out_path(char *buf, size_t cap, const char *out, const char *name)
{
    int rc = sf_path_join(buf, cap, out, name);
    assert(rc == 0 && strlen(name) <= PACK_NAME_MAX && "OUT is checked by pack_outdir_lock");
    (void)rc;
}

void pack_temp_path(char *buf, size_t cap, const char *dir, const char *name, uint64_t dataset_id)
{
    char temp[PACK_NAME_MAX + 1];
    int n = snprintf(temp, sizeof temp, ".%s.%016" PRIx64 ".tmp", name, dataset_id);
    if (n < 0 || (size_t)n >= sizeof temp) { /* NAME: the manifest's or a shard's, never longer */
        assert(!"a name too long for PACK_NAME_MAX");
        buf[0] = '\0';
        return;
    }
    pack_out_path(buf, cap, dir, temp);
}

int pack_write_temp(const char *dir, const char *name, uint64_t dataset_id, const uint8_t *buf, uint64_t len)
{
    char tmp[SF_PATH_CAP];
    pack_temp_path(tmp, sizeof tmp, dir, name, dataset_id);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sf_fail(-errno, "%s: cannot create: %s", tmp, sf_errno_text(errno));
    int rc = sf_write_full(fd, buf, len);
    if (!rc && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return sf_fail(rc, "%s: %s", tmp, strerror(-rc));
    }
    return 0;
}

int pack_write_atomic(const char *dir, const char *name, uint64_t dataset_id, const uint8_t *buf,
                      uint64_t len)
{
    char tmp[SF_PATH_CAP], dst[SF_PATH_CAP];
    int rc = pack_write_temp(dir, name, dataset_id, buf, len);
    if (rc)
        return rc;
    pack_temp_path(tmp, sizeof tmp, dir, name, dataset_id);
    pack_out_path(dst, sizeof dst, dir, name);
    if (rename(tmp, dst) != 0) {
        rc = -errno;
        unlink(tmp);
        return sf_fail(rc, "%s: %s", dst, strerror(-rc));
    }
    return sf_fsync_dir(dir);
}

/* ---- the lock ---- */

#define LOCK_TAG "shardfeed lock: "

/* mkdir -p of the folders above `out` (parts/%k makes parts/ too). */
static void make_parents(const char *out)
{
    char path[SF_PATH_CAP];
    snprintf(path, sizeof path, "%s", out); /* fits: pack_outdir_lock checked it */
    assert(path[0] && "pack_outdir_lock refuses an empty path"); /* else p starts past the NUL */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0777); /* an error shows when `out` itself is made */
        *p = '/';
    }
}

/* The holder's "pack pid N on HOST", read from the lock file it writes
 * right after locking (it may not have yet: then it is unknown). A push
 * holding the file (shared) writes "push pid N on HOST" where it made it. */
static void read_holder(int fd, char *who, size_t cap)
{
    char buf[512];
    snprintf(who, cap, "shardfeed pack or merge (pid not written yet)");
    for (int tries = 0; tries < 20; tries++) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n > (ssize_t)strlen(LOCK_TAG) && memcmp(buf, LOCK_TAG, strlen(LOCK_TAG)) == 0) {
            buf[n] = '\0';
            buf[strcspn(buf, "\n")] = '\0';
            /* "pack pid 12 on host" -> "shardfeed pack (pid 12 on host)" */
            char *sp = strchr(buf + strlen(LOCK_TAG), ' ');
            if (sp) {
                *sp = '\0';
                snprintf(who, cap, "shardfeed %s (%s)", buf + strlen(LOCK_TAG), sp + 1);
            }
            return;
        }
        usleep(5000);
    }
}

/* Writes "shardfeed lock: pack pid N on HOST" into the held lock file. */
static void write_holder(int fd, const char *what)
{
    char host[256] = "?", line[512];
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    int n = snprintf(line, sizeof line, LOCK_TAG "%s pid %ld on %s\n", what, (long)getpid(), host);
    if (ftruncate(fd, 0) == 0 && n > 0)
        (void)!pwrite(fd, line, (size_t)n, 0); /* only for the message of a second run */
}

/* 1 when the locked file is empty or one of ours: a user's own file of that
 * name is neither overwritten nor removed. */
static int is_lock_file(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, strlen(LOCK_TAG), 0);
    return n == 0 || (n == (ssize_t)strlen(LOCK_TAG) && memcmp(buf, LOCK_TAG, strlen(LOCK_TAG)) == 0);
}

int pack_outdir_lock(pack_lock *l, const char *out, const char *what)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    if (sf_is_url(out)) /* never a local folder named "s3:" */
        return sf_fail(SF_E_INVALID, "%s: a URL: %s writes a local folder (%s into a folder, then upload it "
                       "with sf_push; the command line's 'shardfeed pack -o URL' does both)", out, what, what);
    /* Every path made in OUT is OUT/NAME with NAME at most PACK_NAME_MAX
     * bytes: an OUT too long for that is refused here, before anything is
     * made, rather than a path cut short naming another file (the
     * temporary ".shard-000000.sfs.<id>" cut to ".shard-000000.sfs.12"). */
    size_t len = strlen(out);
    if (len == 0)
        return sf_fail(SF_E_INVALID, "%s: the output folder's path is empty", what);
    if (len + 1 + PACK_NAME_MAX >= SF_PATH_CAP)
        return sf_fail(-ENAMETOOLONG, "%.200s...: the output folder's path is too long (%zu bytes; at most "
                       "%zu, to leave room for the names of the files %s writes in it)",
                       out, len, SF_PATH_CAP - 2 - PACK_NAME_MAX, what);
    snprintf(l->dir, sizeof l->dir, "%s", out);
    pack_out_path(l->path, sizeof l->path, out, PACK_LOCK_NAME);
    make_parents(out);
    if (mkdir(out, 0777) == 0)
        l->created_dir = 1;
    else if (errno != EEXIST)
        return sf_fail(-errno, "%s: cannot create output directory: %s", out, sf_errno_text(errno));
    /* A run that finishes unlinks the lock file while holding it, so the
     * file a second run opened and then locked may no longer be the one
     * at the path: then it tries again with the file now there. */
    for (int attempt = 0; attempt < 1000; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0644);
        if (fd < 0) {
            int e = errno;
            if (e == ENOTDIR)
                return sf_fail(-e, "%s: cannot open output directory: %s", out, strerror(e));
            if (e == ELOOP)
                return sf_fail(SF_E_EXISTS, "%s: a symlink, not shardfeed's lock file; refusing to write there",
                               l->path);
            return sf_fail(-e, "%s: cannot create the lock file: %s", l->path, sf_errno_text(e));
        }
        struct stat held, named;
        if (fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
            close(fd);
            return sf_fail(SF_E_EXISTS, "%s: not shardfeed's lock file; refusing to write there", l->path);
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                char who[600];
                read_holder(fd, who, sizeof who);
                close(fd);
                return sf_fail(-EBUSY, "another %s is %s %s", who,
                               strncmp(who, "shardfeed push", 14) == 0 ? "uploading" : "writing", out);
            }
            close(fd);
            return sf_fail(-e, "%s: cannot lock: %s", l->path, strerror(e));
        }
        if (lstat(l->path, &named) != 0 || named.st_dev != held.st_dev || named.st_ino != held.st_ino) {
            close(fd); /* unlinked by the run that held it: take the new one */
            continue;
        }
        if (!is_lock_file(fd)) {
            close(fd);
            return sf_fail(SF_E_EXISTS, "%s: a file shardfeed did not write; refusing to write there", l->path);
        }
        write_holder(fd, what);
        l->fd = fd;
        return 0;
    }
    return sf_fail(-EBUSY, "%s: the lock file keeps being replaced; is another shardfeed writing %s?",
                   l->path, out);
}

void pack_outdir_unlock(pack_lock *l)
{
    if (!l || l->fd < 0)
        return;
    /* Unlinked while held, so no other run can lock this file and believe
     * it holds the folder (it checks the path still names what it locked). */
    struct stat held, named;
    if (fstat(l->fd, &held) == 0 && lstat(l->path, &named) == 0 && named.st_dev == held.st_dev &&
        named.st_ino == held.st_ino)
        unlink(l->path);
    close(l->fd);
    l->fd = -1;
    if (l->created_dir)
        rmdir(l->dir); /* only when empty: a run that failed before writing anything */
}

/* ---- what is in the folder ---- */

enum file_kind {
    KIND_FOREIGN,  /* not written by shardfeed, as far as can be told: never removed */
    KIND_LOCK,     /* the lock file */
    KIND_MANIFEST, /* manifest.sfm that decodes */
    KIND_SHARD,    /* shard-NNNNNN.sfs whose header decodes */
    KIND_TEMP      /* .shard-NNNNNN.sfs.<id>.tmp or .manifest.sfm.<id>.tmp */
};

typedef struct found_file {
    enum file_kind kind;
    unsigned shard; /* KIND_SHARD: NNNNNN */
    uint64_t id;    /* dataset_id it carries (not KIND_FOREIGN, KIND_LOCK) */
} found_file;

/* N of "shard-NNNNNN.sfs" (SF_SHARD_NAME_FMT); -1 otherwise. */
static long shard_number(const char *name, size_t len)
{
    return (long)sf_shard_name_index(name, len);
}

/* 1 when `name` is a temporary name shardfeed gives a shard or the manifest:
 * ".NAME.<16 hex>.tmp", *id the dataset_id in it; or, as versions before
 * 1.2 named them, ".NAME.tmp", *id 0 (no dataset has id 0: another's). */
static int temp_name(const char *name, uint64_t *id)
{
    size_t len = strlen(name);
    *id = 0;
    if (name[0] != '.' || len < 6 || strcmp(name + len - 4, ".tmp") != 0)
        return 0;
    size_t base = len - 5; /* NAME, with the id if any */
    const size_t hex = 1 + 16; /* ".<hex>" */
    if (base > hex && name[1 + base - hex] == '.') {
        uint64_t v = 0;
        int ok = 1;
        for (size_t i = 1 + base - 16; i < 1 + base && ok; i++) {
            char c = name[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            ok = d >= 0;
            v = v << 4 | (uint64_t)(ok ? d : 0);
        }
        if (ok) {
            base -= hex;
            *id = v;
        }
    }
    return shard_number(name + 1, base) >= 0 ||
           (base == strlen(SF_MANIFEST_NAME) && memcmp(name + 1, SF_MANIFEST_NAME, base) == 0);
}

/* dataset_id of the shard open on fd, or 0 when its header does not decode. */
static uint64_t shard_dataset_id(int fd)
{
    uint8_t buf[SF_SHARD_HEADER_SIZE];
    sf_shard_header h;
    if (sf_pread_full(fd, buf, sizeof buf, 0) == 0 && sf_shard_header_decode(&h, buf) == 0)
        return h.dataset_id;
    return 0;
}

/* dataset_id of the manifest open on fd, or 0 when it does not decode. */
static uint64_t manifest_dataset_id(int fd, const struct stat *st)
{
    if ((uint64_t)st->st_size > SF_MANIFEST_MAX_SIZE)
        return 0;
    uint64_t id = 0;
    uint8_t *buf = malloc((size_t)st->st_size + 1);
    sf_manifest m;
    if (buf && sf_pread_full(fd, buf, (uint64_t)st->st_size, 0) == 0 &&
        sf_manifest_decode(&m, buf, (uint64_t)st->st_size) == 0) {
        id = m.dataset_id;
        sf_manifest_clear(&m);
    }
    free(buf);
    return id;
}

/* What the entry `name` of the folder open as `dfd` is. Only regular files
 * (not symlinks) can be shardfeed's; a manifest or shard counts as one only
 * when it decodes, so a file that merely has such a name is foreign. */
static int classify(int dfd, const char *out, const char *name, found_file *f)
{
    memset(f, 0, sizeof *f);
    f->kind = KIND_FOREIGN;
    if (strcmp(name, PACK_LOCK_NAME) == 0) {
        f->kind = KIND_LOCK;
        return 0;
    }
    long n = shard_number(name, strlen(name));
    uint64_t tid;
    int temp = temp_name(name, &tid);
    int manifest = strcmp(name, SF_MANIFEST_NAME) == 0;
    if (n < 0 && !temp && !manifest)
        return 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
            return sf_fail(-errno, "%s/%s: %s", out, name, sf_errno_text(errno));
        return 0; /* a symlink (ELOOP), or unreadable: not ours */
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if (temp) {
            f->kind = KIND_TEMP;
            f->id = tid;
        } else if (manifest && (f->id = manifest_dataset_id(fd, &st)) != 0) {
            f->kind = KIND_MANIFEST;
        } else if (n >= 0 && (f->id = shard_dataset_id(fd)) != 0) {
            f->kind = KIND_SHARD;
            f->shard = (unsigned)n;
        }
    }
    close(fd);
    return 0;
}

static int remove_file(const char *dir, const char *name)
{
    char path[SF_PATH_CAP];
    pack_out_path(path, sizeof path, dir, name); /* a name classify() knows: PACK_NAME_MAX at most */
    if (unlink(path) != 0 && errno != ENOENT)
        return sf_fail(-errno, "%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

/* What to call the foreign entry `name` of the folder open as `dfd` in a
 * message: a folder is not a "file" to the person who has to move it. */
static const char *entry_noun(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return "file";
    if (S_ISDIR(st.st_mode))
        return "folder";
    if (S_ISLNK(st.st_mode))
        return "symlink";
    return "file";
}

/* First pass: refuses what shardfeed did not write and learns what is there. */
static int survey(DIR *d, const char *out, const pack_plan *plan, uint8_t *reuse, int *have_manifest,
                  int *have_dataset_files, char *other, size_t other_cap)
{
    struct dirent *de;
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        found_file f;
        int rc = classify(dirfd(d), out, de->d_name, &f);
        if (rc)
            return rc;
        if (f.kind == KIND_FOREIGN)
            return sf_fail(SF_E_EXISTS,
                           "%s/%s: output directory holds a %s shardfeed did not write; refusing to write "
                           "there (it is never removed, not even with the force option)",
                           out, de->d_name, entry_noun(dirfd(d), de->d_name));
        if (f.kind == KIND_LOCK)
            continue;
        if (f.kind == KIND_MANIFEST || f.kind == KIND_SHARD)
            *have_dataset_files = 1;
        if (f.id != plan->dataset_id) {
            if (!other[0])
                snprintf(other, other_cap, "%s", de->d_name);
            continue;
        }
        if (f.kind == KIND_MANIFEST)
            *have_manifest = 1;
        else if (f.kind == KIND_SHARD && f.shard < plan->shard_count)
            reuse[f.shard] = 1;
    }
    if (errno)
        return sf_fail(-errno, "%s: reading directory: %s", out, strerror(errno));
    return 0;
}

int pack_outdir_prepare(const char *out, const pack_plan *plan, int force, uint8_t *reuse,
                        pack_outdir_state *state)
{
    *state = PACK_OUT_WRITE;
    memset(reuse, 0, plan->shard_count);
    DIR *d = opendir(out);
    if (!d)
        return sf_fail(-errno, "%s: cannot open output directory: %s", out, sf_errno_text(errno));
    if (access(out, W_OK) != 0) {
        int e = errno;
        closedir(d);
        return sf_fail(-e, "%s: output directory is not writable: %s", out, strerror(e));
    }
    int have_manifest = 0, have_dataset_files = 0;
    char other[256] = "";
    int rc = survey(d, out, plan, reuse, &have_manifest, &have_dataset_files, other, sizeof other);
    if (!rc && !force && other[0])
        rc = sf_fail(SF_E_EXISTS, "%s: holds a different shardfeed dataset (%s; the force option replaces it)", out,
                     other);
    if (rc || (!force && have_manifest)) {
        /* This dataset's manifest: complete, unless its shards do not hold
         * this input. The caller proves them before saying so. */
        if (!rc)
            *state = PACK_OUT_COMPLETE;
        closedir(d);
        return rc;
    }
    if (force && have_dataset_files)
        *state = PACK_OUT_REPLACE;

    /* Second pass. Replacing (--force over a manifest or shards): only
     * temporaries go now; the dataset there stays whole and readable until
     * the new one is written, and pack_outdir_install swaps them. Else the
     * manifest goes first, so the directory stops being a dataset before
     * any shard of it is touched; then what carries this run's id and is
     * not kept: its temporaries and shards past the plan. */
    found_file m;
    if (*state == PACK_OUT_WRITE && (rc = classify(dirfd(d), out, SF_MANIFEST_NAME, &m)) == 0 &&
        m.kind == KIND_MANIFEST && (rc = remove_file(out, SF_MANIFEST_NAME)) == 0)
        rc = sf_fsync_dir(out);
    rewinddir(d);
    struct dirent *de;
    while (!rc && (de = readdir(d)) != NULL) {
        found_file f;
        if ((rc = classify(dirfd(d), out, de->d_name, &f)))
            break;
        int mine = f.id == plan->dataset_id;
        int drop = 0;
        if (f.kind == KIND_TEMP)
            drop = mine || force;
        else if (f.kind == KIND_SHARD && *state == PACK_OUT_WRITE)
            drop = force || !mine || f.shard >= plan->shard_count;
        if (drop)
            rc = remove_file(out, de->d_name);
    }
    closedir(d);
    if (force)
        memset(reuse, 0, plan->shard_count);
    return rc;
}

void pack_outdir_drop_temps(const char *out, const pack_plan *plan)
{
    char tmp[SF_PATH_CAP], name[SF_SHARD_NAME_MAX];
    for (uint64_t i = 0; i < plan->shard_count; i++) {
        snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
        pack_temp_path(tmp, sizeof tmp, out, name, plan->dataset_id);
        unlink(tmp); /* ENOENT: never written, or renamed */
    }
    pack_temp_path(tmp, sizeof tmp, out, SF_MANIFEST_NAME, plan->dataset_id);
    unlink(tmp);
}

int pack_outdir_abandon(int rc, const char *out, const pack_plan *plan, pack_outdir_state state)
{
    pack_outdir_drop_temps(out, plan);
    if (state != PACK_OUT_REPLACE)
        return rc;
    char why[1024];
    snprintf(why, sizeof why, "%s", sf_last_error());
    return sf_fail(rc, "%s (the dataset in %s is as it was: it is replaced only once the new one is written%s)",
                   why, out, rc == -ENOSPC || rc == -EDQUOT ? ", so replacing it needs room for both" : "");
}

/* Renames DIR/.NAME.<id>.tmp to DIR/NAME. */
static int name_temp(const char *out, const char *name, uint64_t id)
{
    char tmp[SF_PATH_CAP], dst[SF_PATH_CAP];
    pack_temp_path(tmp, sizeof tmp, out, name, id);
    pack_out_path(dst, sizeof dst, out, name);
    if (rename(tmp, dst) != 0)
        return sf_fail(-errno, "%s: rename failed: %s", dst, strerror(errno));
    return 0;
}

int pack_outdir_install(const char *out, const pack_plan *plan, int replace)
{
    int rc = 0;
    /* The old manifest first: from here until the new one takes its name
     * the folder is not a dataset, rather than one whose manifest lists
     * other shards. Everything is written already (the new manifest too,
     * under its temporary name): what follows renames and removes only,
     * so it cannot run out of room; a crash here leaves a folder the next
     * run (with --force) writes again. */
    if (replace) {
        DIR *d = opendir(out);
        if (!d)
            return sf_fail(-errno, "%s: cannot open output directory: %s", out, sf_errno_text(errno));
        found_file m;
        if ((rc = classify(dirfd(d), out, SF_MANIFEST_NAME, &m)) == 0 && m.kind == KIND_MANIFEST)
            rc = remove_file(out, SF_MANIFEST_NAME);
        closedir(d);
        if (rc) /* nothing removed */
            return pack_outdir_abandon(rc, out, plan, PACK_OUT_REPLACE);
        rc = sf_fsync_dir(out);
    }
    char name[SF_SHARD_NAME_MAX];
    for (uint64_t i = 0; i < plan->shard_count && !rc; i++) {
        snprintf(name, sizeof name, SF_SHARD_NAME_FMT, (unsigned)i);
        rc = name_temp(out, name, plan->dataset_id);
    }
    if (!rc && replace) {
        /* What is left of the old dataset: its shards past the new plan. */
        DIR *d = opendir(out);
        if (!d) {
            rc = sf_fail(-errno, "%s: cannot open output directory: %s", out, sf_errno_text(errno));
        } else {
            struct dirent *de;
            while (!rc && (errno = 0, de = readdir(d)) != NULL) {
                found_file f;
                if ((rc = classify(dirfd(d), out, de->d_name, &f)) == 0 && f.kind == KIND_SHARD &&
                    f.shard >= plan->shard_count)
                    rc = remove_file(out, de->d_name);
            }
            if (!rc && errno)
                rc = sf_fail(-errno, "%s: reading directory: %s", out, strerror(errno));
            closedir(d);
        }
    }
    if (!rc)
        rc = sf_fsync_dir(out);
    if (!rc)
        rc = name_temp(out, SF_MANIFEST_NAME, plan->dataset_id);
    if (!rc)
        return sf_fsync_dir(out);
    /* Part way: no manifest, so not a dataset (never one whose manifest
     * lists other shards). */
    char why[1024];
    snprintf(why, sizeof why, "%s", sf_last_error());
    pack_outdir_drop_temps(out, plan);
    return sf_fail(rc, "%s (%s stopped part way through taking the new dataset's names: it holds no dataset "
                       "now; the same command, with the force option, writes it again)",
                   why, out);
}
