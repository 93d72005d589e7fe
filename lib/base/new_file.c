/* New files named only once complete (new_file.h). */
#include "new_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

static int is_tmpfile(sf_new_file_method m)
{
    return m == SF_NEW_FILE_TMPFILE_PROC || m == SF_NEW_FILE_TMPFILE_EMPTY_PATH;
}

/* A hidden temporary next to where the file goes, made with O_EXCL under a
 * name no other process or thread picks (PID and a counter); a name that
 * exists anyway (left by an earlier run of the same PID, or a sample named
 * so) is skipped, never opened. */
static int open_temp(sf_new_file *nf, mode_t perm)
{
    static atomic_uint counter;
    for (int tries = 0; tries < 100; tries++) {
        snprintf(nf->temp, sizeof nf->temp, ".shardfeed-tmp.%ld.%u", (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        nf->fd = openat(nf->dirfd, nf->temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
        if (nf->fd >= 0 || errno != EEXIST)
            break;
    }
    if (nf->fd < 0) {
        nf->temp[0] = '\0';
        return -errno;
    }
    return 0;
}

int sf_new_file_open(sf_new_file *nf, int dirfd, const char *name, sf_new_file_method method,
                     mode_t perm)
{
    *nf = (sf_new_file){.fd = -1, .dirfd = dirfd, .method = method};
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof nf->name || strchr(name, '/'))
        return -EINVAL;
    memcpy(nf->name, name, len + 1);
    if (is_tmpfile(method))
        nf->fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, perm);
    else if (method == SF_NEW_FILE_DIRECT)
        nf->fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
    else
        return open_temp(nf, perm);
    return nf->fd < 0 ? -errno : 0;
}

/* Links the unnamed file nf->fd as nf->name; linkat never replaces. */
static int link_tmpfile(const sf_new_file *nf)
{
    if (nf->method == SF_NEW_FILE_TMPFILE_EMPTY_PATH)
        return linkat(nf->fd, "", nf->dirfd, nf->name, AT_EMPTY_PATH) == 0 ? 0 : -errno;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", nf->fd);
    return linkat(AT_FDCWD, path, nf->dirfd, nf->name, AT_SYMLINK_FOLLOW) == 0 ? 0 : -errno;
}

/* Renames (or links, then removes) the closed temporary to nf->name. */
static int name_temp(const sf_new_file *nf)
{
    /* The system call, not glibc's renameat2 (2.28 and later only). */
    long r = nf->method == SF_NEW_FILE_RENAME
                 ? syscall(SYS_renameat2, nf->dirfd, nf->temp, nf->dirfd, nf->name, RENAME_NOREPLACE)
                 : linkat(nf->dirfd, nf->temp, nf->dirfd, nf->name, 0);
    int rc = r == 0 ? 0 : -errno;
    if (rc || nf->method == SF_NEW_FILE_LINK)
        unlinkat(nf->dirfd, nf->temp, 0);
    return rc;
}

int sf_new_file_commit(sf_new_file *nf)
{
    int rc;
    if (is_tmpfile(nf->method)) {
        /* Linked before the close (the link needs the descriptor); a
         * failed close (NFS reports lost writes there) unlinks it again. */
        rc = link_tmpfile(nf);
        if (close(nf->fd) != 0 && !rc) {
            rc = -errno;
            unlinkat(nf->dirfd, nf->name, 0);
        }
    } else {
        rc = close(nf->fd) == 0 ? 0 : -errno;
        if (nf->method == SF_NEW_FILE_DIRECT) {
            if (rc)
                unlinkat(nf->dirfd, nf->name, 0);
        } else if (rc) {
            unlinkat(nf->dirfd, nf->temp, 0);
        } else {
            rc = name_temp(nf);
        }
    }
    nf->fd = -1;
    nf->temp[0] = '\0';
    return rc;
}

void sf_new_file_discard(sf_new_file *nf)
{
    if (nf->fd < 0)
        return;
    close(nf->fd);
    if (nf->method == SF_NEW_FILE_DIRECT)
        unlinkat(nf->dirfd, nf->name, 0);
    else if (nf->temp[0])
        unlinkat(nf->dirfd, nf->temp, 0);
    nf->fd = -1;
    nf->temp[0] = '\0';
}

/* Failures that say a method is not available here, rather than that this
 * folder cannot take a file: no O_TMPFILE (EOPNOTSUPP; EISDIR or EINVAL
 * from kernels before 3.11), no /proc or no CAP_DAC_READ_SEARCH for
 * AT_EMPTY_PATH (ENOENT), no RENAME_NOREPLACE (EINVAL), no hard links
 * (EPERM), a sandbox that refuses the call (ENOSYS, EPERM). */
static int unsupported(int rc)
{
    return rc == -EOPNOTSUPP || rc == -ENOTSUP || rc == -EISDIR || rc == -EINVAL || rc == -ENOSYS ||
           rc == -EPERM || rc == -ENOENT || rc == -EXDEV;
}

sf_new_file_method sf_new_file_probe(int dirfd)
{
    static const char probe[] = ".shardfeed-new-file-probe";
    for (int m = SF_NEW_FILE_TMPFILE_EMPTY_PATH; m < SF_NEW_FILE_DIRECT; m++) {
        sf_new_file nf;
        int rc = sf_new_file_open(&nf, dirfd, probe, (sf_new_file_method)m, 0600);
        if (!rc && !(rc = sf_new_file_commit(&nf)))
            unlinkat(dirfd, probe, 0);
        if (!unsupported(rc))
            return (sf_new_file_method)m;
    }
    return SF_NEW_FILE_DIRECT;
}
