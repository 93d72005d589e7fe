/* I/O helpers (io.h). */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "error_internal.h"

int sf_pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return SF_E_TRUNCATED;
        p += n;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int sf_write_full(int fd, const void *buf, uint64_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (uint64_t)n;
    }
    return 0;
}

int sf_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sf_fail(-e, "%s: %s%s", dir, strerror(e), sf_errno_hint(e));
    }
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (rc)
        return sf_fail(rc, "%s: fsync: %s", dir, strerror(-rc));
    return 0;
}
