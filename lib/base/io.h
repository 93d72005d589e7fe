/* I/O helpers every layer uses: whole reads and writes that retry short
 * transfers and EINTR, and making a rename durable. */
#ifndef SF_BASE_IO_H
#define SF_BASE_IO_H

#include <stdint.h>

/* Reads exactly len bytes at off. 0, -errno, or SF_E_TRUNCATED when the
 * file ends first. */
int sf_pread_full(int fd, void *buf, uint64_t len, uint64_t off);
/* Writes exactly len bytes. 0 or -errno. */
int sf_write_full(int fd, const void *buf, uint64_t len);
/* fsyncs the folder `dir` (so that a rename or create in it is durable).
 * 0, or a negative code with "DIR: reason" in sf_last_error(). */
int sf_fsync_dir(const char *dir);

#endif
