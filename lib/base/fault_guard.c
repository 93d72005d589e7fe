/* The fault guard (fault_guard.h). */
#include "fault_guard.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "error_internal.h"

typedef struct guard_frame {
    sigjmp_buf env;
    volatile int code; /* the si_code of the fault, written by the handler */
} guard_frame;

/* The innermost guarded call of each thread (NULL: none), in a pthread key
 * rather than a _Thread_local: the handler runs in whichever thread faults,
 * and pthread_getspecific only reads the thread's descriptor, where a
 * _Thread_local of a dlopen'ed library (the Python module) may have to be
 * allocated by __tls_get_addr on a thread's first touch -- inside a signal
 * handler, in a thread that never used the guard. (initial-exec TLS would
 * avoid that, but a dlopen'ed module may not get static TLS: "cannot
 * allocate memory in static TLS block".) pthread_setspecific allocates,
 * if ever, when a thread first arms a guard, outside the handler. */
static pthread_key_t armed_key;

static struct sigaction previous; /* the SIGBUS disposition before ours */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_rc;

/* Hands a SIGBUS that is not ours to whoever had it before. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, si, uc);
        return;
    }
    if (previous.sa_handler == SIG_IGN && si->si_code <= 0)
        return; /* a sent SIGBUS that was ignored stays ignored */
    if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        /* The default action: a fault repeats when we return and now kills
         * the process as it would have without us; a sent signal is sent
         * again (SA_NODEFER: not blocked in here). */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        if (si->si_code <= 0)
            raise(sig);
        return;
    }
    previous.sa_handler(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    guard_frame *f = pthread_getspecific(armed_key);
    if (!f) {
        chain(sig, si, uc);
        return;
    }
    /* Any SIGBUS inside a guarded call is its fault: also one another
     * handler re-raised after handling it first (Python's faulthandler,
     * installed after us, does that). Disarmed first: a fault before the
     * jump lands is not ours to catch again. */
    pthread_setspecific(armed_key, NULL); /* only stores: the thread armed it before */
    f->code = si->si_code;
    siglongjmp(f->env, 1);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int e = pthread_key_create(&armed_key, NULL);
    if (e) {
        install_rc = -e;
        return;
    }
    /* Read the old disposition first: our handler must never see
     * `previous` half written. */
    if (sigaction(SIGBUS, NULL, &previous) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
        install_rc = -errno;
}

int sf_fault_guard_init(void)
{
    pthread_once(&install_once, install);
    if (install_rc)
        return sf_fail(install_rc, "cannot install the SIGBUS handler: %s", strerror(-install_rc));
    return 0;
}

/* After a jump back: the error for the fault, SIGBUS unblocked. */
static int recovered(const guard_frame *f)
{
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
    return f->code == BUS_MCEERR_AR || f->code == BUS_MCEERR_AO ? -EIO : SF_E_TRUNCATED;
}

int sf_fault_guarded(sf_guarded_fn fn, void *arg)
{
    pthread_once(&install_once, install);
    if (install_rc)
        return install_rc; /* sf_fault_guard_init told the caller already */
    guard_frame f;
    guard_frame *outer = pthread_getspecific(armed_key); /* not modified after sigsetjmp */
    if (sigsetjmp(f.env, 0)) {
        pthread_setspecific(armed_key, outer);
        return recovered(&f);
    }
    pthread_setspecific(armed_key, &f);
    atomic_signal_fence(memory_order_seq_cst);
    int rc = fn(arg);
    atomic_signal_fence(memory_order_seq_cst);
    pthread_setspecific(armed_key, outer);
    return rc;
}

typedef struct copy_job {
    void *dst;
    const void *src;
    size_t n;
} copy_job;

static int copy_range(void *arg)
{
    const copy_job *j = arg;
    memcpy(j->dst, j->src, j->n);
    return 0;
}

int sf_guarded_copy(void *dst, const void *src, size_t n)
{
    copy_job j = {dst, src, n};
    return sf_fault_guarded(copy_range, &j);
}
