/* The fault guard: reading a file through mmap(2) turns "the file is shorter
 * than when it was mapped" into SIGBUS on the first touch of a page past its
 * new end (and an I/O error while paging in into SIGBUS too). A shard
 * truncated or replaced while a reader copies from its mapping would kill
 * the whole training process. Code that touches a mapping runs the touch
 * under this guard instead, and gets an error it can report with the file's
 * name.
 *
 * How: one SIGBUS handler per process, installed on first use (pthread_once)
 * with SA_SIGINFO | SA_NODEFER | SA_ONSTACK, remembering the handler that was
 * there before. A guarded call records a sigjmp_buf on its own stack and
 * points the thread's pthread key at it (pthread_getspecific, in the
 * handler, only reads the thread's descriptor and never allocates, in any
 * thread: fault_guard.c says why not a _Thread_local); sigsetjmp(env, 0)
 * saves no signal mask, so arming costs no system call. A SIGBUS in a thread inside a guarded call jumps back there
 * (siglongjmp) and the call returns an error; any other SIGBUS goes to the
 * previous handler, or takes the default action (the process dies as it
 * would have without the guard). With SA_NODEFER, SIGBUS is not left blocked
 * after the jump; the rare recovery path unblocks it anyway, in case another
 * handler that chained to ours had it blocked.
 *
 * What may run guarded: code that only reads the mapping and writes memory
 * the caller owns (memcpy, hashing with a caller's state, zstd decompression
 * with a context the caller resets afterwards). Nothing that takes a lock or
 * allocates: a jump out of it would leak the lock or the memory.
 *
 * The guard does not make sf_dataset_get's pointers safe: the caller touches
 * those after the call returns (shardfeed/dataset.h says so). */
#ifndef SF_FORMAT_FAULT_GUARD_H
#define SF_FORMAT_FAULT_GUARD_H

#include <stddef.h>
#include <stdint.h>

/* Installs the SIGBUS handler (once per process). Call it when making a
 * mapping whose reads will be guarded; the guarded calls also call it.
 * Returns 0 or -errno from sigaction. */
int sf_fault_guard_init(void);

typedef int (*sf_guarded_fn)(void *arg);

/* Runs fn(arg) and returns what it returns, unless fn touches a mapped page
 * that cannot be read (SIGBUS): then fn is abandoned where it was and the
 * result is SF_E_TRUNCATED (a page past the end of the file: BUS_ADRERR)
 * or -EIO (a hardware memory error on the page). Calls nest. */
int sf_fault_guarded(sf_guarded_fn fn, void *arg);

/* memcpy(dst, src, n) under the guard: 0, SF_E_TRUNCATED or -EIO. */
int sf_guarded_copy(void *dst, const void *src, size_t n);


#endif
