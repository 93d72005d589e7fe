/* A new file that appears under its name only once it is complete, and
 * never in place of anything that exists.
 *
 *   sf_new_file nf;
 *   sf_new_file_open(&nf, dirfd, "name", method, 0644);   // nf.fd: write here
 *   ... write(nf.fd, ...) ...
 *   sf_new_file_commit(&nf);    // or sf_new_file_discard(&nf) after a failed write
 *
 * Until the commit the data has no name, or a hidden temporary one (see the
 * methods), so a process killed while it writes (any signal, SIGKILL
 * included) never leaves a file cut short under the final name. The commit
 * gives the file its name with a call that fails with EEXIST rather than
 * replace anything there (a file, a symlink, a name the file system folds
 * onto the same entry). Nothing is fsynced: after a power loss or an OS
 * crash a committed file may still be short. */
#ifndef SF_BASE_NEW_FILE_H
#define SF_BASE_NEW_FILE_H

#include <sys/types.h>

typedef enum sf_new_file_method {
    /* An unnamed file (O_TMPFILE), linked with AT_EMPTY_PATH: one call, no
     * path to resolve, but older kernels ask for CAP_DAC_READ_SEARCH
     * (ENOENT without it; recent ones let the process that opened the file). */
    SF_NEW_FILE_TMPFILE_EMPTY_PATH,
    /* An unnamed file (O_TMPFILE), linked through /proc/self/fd/N: no
     * capability needed, but /proc must be mounted. */
    SF_NEW_FILE_TMPFILE_PROC,
    /* A hidden temporary (.shardfeed-tmp.PID.N, O_EXCL) renamed with
     * RENAME_NOREPLACE: a killed process can leave the temporary. */
    SF_NEW_FILE_RENAME,
    /* The same temporary, hard-linked to the name, then removed (file
     * systems without RENAME_NOREPLACE, such as NFS). */
    SF_NEW_FILE_LINK,
    /* The final name itself, O_EXCL: where none of the above works. A
     * killed process leaves the file cut short; a failed one removes it. */
    SF_NEW_FILE_DIRECT,
} sf_new_file_method;

typedef struct sf_new_file {
    int fd;    /* write the contents here; -1 once committed or discarded */
    int dirfd; /* the folder it goes in (the caller's; never closed here) */
    sf_new_file_method method;
    char name[256]; /* the final name */
    char temp[64];  /* the hidden temporary's name, "" when it has none */
} sf_new_file;

/* Starts the new file `name` (one path component, at most NAME_MAX bytes) in
 * the folder dirfd, with permissions `perm` (less the umask). 0, or -errno
 * (nothing is left then; DIRECT: EEXIST when the name exists). */
int sf_new_file_open(sf_new_file *nf, int dirfd, const char *name, sf_new_file_method method,
                     mode_t perm);

/* Closes the file and gives it its name. 0, or -errno: EEXIST when
 * something has that name already (it is left as it was), else the close or
 * the link failed; in every case the new file is gone. */
int sf_new_file_commit(sf_new_file *nf);

/* Closes and removes the file (a failed write). No-op when already done. */
void sf_new_file_discard(sf_new_file *nf);

/* The first method that works in the folder dirfd (a probe file, made
 * with each method in the order above until one succeeds, then removed).
 * A method is skipped only when it fails in a way that says it is not
 * supported there; any other failure (read-only, no space) returns that
 * method, and using it will report the error. */
sf_new_file_method sf_new_file_probe(int dirfd);

#endif
