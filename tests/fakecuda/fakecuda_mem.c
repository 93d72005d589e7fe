/* fakecuda's memory: device allocations (mappings kept PROT_NONE), page-
 * locked host memory (registered ranges and cudaHostAlloc blocks), the
 * checks every copy's pointers go through, and the copy itself. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda_internal.h"

/* Fresh device memory holds this byte, not zeros: a copy that never
 * happened shows, however the data looks. */
#define FC_DEVICE_FILL 0xDB

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static uintptr_t round_down(uintptr_t x, size_t a)
{
    return x - x % a;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static const char *kind_name(enum fc_region_kind k)
{
    return k == FC_DEVICE ? "device memory (cudaMalloc)"
           : k == FC_HOST_ALLOC ? "page-locked host memory (cudaHostAlloc)"
                                : "registered host memory (cudaHostRegister)";
}

fc_region *fc_region_find(const void *p)
{
    const uint8_t *b = p;
    for (fc_region *r = fc.regions; r; r = r->next) {
        size_t extent = r->kind == FC_DEVICE ? r->mapped : r->size;
        if (b >= r->base && b < r->base + extent)
            return r;
    }
    return NULL;
}

static fc_region *region_add_locked(enum fc_region_kind kind, void *base, size_t size,
                                    size_t mapped, int device, unsigned flags)
{
    fc_region *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    *r = (fc_region){fc.regions, kind, ++fc.next_id, base, size, mapped, device, 1, flags};
    fc.regions = r;
    return r;
}

cudaError_t fc_check_device_range(const fc_call *c, const char *role, const void *p, size_t len)
{
    const uint8_t *b = p;
    fc_region *r = fc_region_find(p);
    if (!r || r->kind != FC_DEVICE)
        return fc_misuse(c, cudaErrorInvalidValue, "%s %p is not device memory%s%s", role, p,
                         r ? ": it is " : "", r ? kind_name(r->kind) : "");
    if (!r->live)
        return fc_misuse(c, cudaErrorInvalidValue,
                         "%s %p: use after free: it lies in device allocation #%llu (%zu bytes at "
                         "%p), released by cudaFree",
                         role, p, (unsigned long long)r->id, r->size, (void *)r->base);
    size_t off = (size_t)(b - r->base);
    if (off >= r->size || len > r->size - off)
        return fc_misuse(c, cudaErrorInvalidValue,
                         "%s [%p, +%zu) is out of bounds of device allocation #%llu (%zu bytes at "
                         "%p): it ends %zu bytes past it",
                         role, p, len, (unsigned long long)r->id, r->size, (void *)r->base,
                         off + len - r->size);
    return cudaSuccess;
}

cudaError_t fc_check_host_range(const fc_call *c, const char *role, const void *p, size_t len)
{
    const uint8_t *b = p;
    fc_region *r = fc_region_find(p);
    if (r && r->kind == FC_DEVICE)
        return fc_misuse(c, cudaErrorInvalidValue, "%s %p is device memory, not host memory", role,
                         p);
    if (!r || !r->live)
        return fc_misuse(c, cudaErrorInvalidValue,
                         "%s %p is pageable host memory%s: neither cudaHostRegister'd nor from "
                         "cudaHostAlloc (with a GPU the copy would go through a staging buffer "
                         "and be silently synchronous)",
                         role, p, r ? " (its registration was undone)" : "");
    size_t off = (size_t)(b - r->base);
    if (len > r->size - off)
        return fc_misuse(c, cudaErrorInvalidValue,
                         "%s [%p, +%zu) runs %zu bytes past the end of %s [%p, +%zu)", role, p,
                         len, off + len - r->size, kind_name(r->kind), (void *)r->base, r->size);
    return cudaSuccess;
}

size_t fc_device_used(int dev)
{
    return fc.used[dev];
}

int fakecuda_host_registered(const void *ptr, size_t len)
{
    fc_init_once();
    pthread_mutex_lock(&fc.lock);
    fc_region *r = fc_region_find(ptr);
    int yes = r && r->live && r->kind == FC_HOST_REGISTERED &&
              len <= r->size - (size_t)((const uint8_t *)ptr - r->base);
    pthread_mutex_unlock(&fc.lock);
    return yes;
}

/* ---- device memory ------------------------------------------------------------ */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    FC_CALL("cudaMalloc", "devPtr=%p, size=%zu", (void *)devPtr, size);
    if (!devPtr)
        return fc_misuse(&call_, cudaErrorInvalidValue, "devPtr is NULL");
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    size_t pg = page_size(), bytes = round_up(size, pg);
    if (bytes < size)
        return fc_error(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&fc.lock);
    int fits = bytes <= fc.mem_bytes - fc.used[dev];
    if (fits)
        fc.used[dev] += bytes; /* reserved now, so two threads cannot both take the last bytes */
    pthread_mutex_unlock(&fc.lock);
    if (!fits)
        return fc_error(cudaErrorMemoryAllocation);
    /* The allocation, then one guard page; all PROT_NONE once filled. */
    uint8_t *m = mmap(NULL, bytes + pg, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    fc_region *r = NULL;
    if (m != MAP_FAILED) {
        memset(m, FC_DEVICE_FILL, bytes);
        if (mprotect(m, bytes + pg, PROT_NONE) != 0) {
            perror("fakecuda: mprotect");
            abort();
        }
    }
    pthread_mutex_lock(&fc.lock);
    if (m != MAP_FAILED)
        r = region_add_locked(FC_DEVICE, m, size, bytes + pg, dev, 0);
    if (!r)
        fc.used[dev] -= bytes;
    pthread_mutex_unlock(&fc.lock);
    if (!r) {
        if (m != MAP_FAILED)
            munmap(m, bytes + pg);
        return fc_error(cudaErrorMemoryAllocation);
    }
    *devPtr = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
    FC_CALL("cudaFree", "devPtr=%p", devPtr);
    if (!devPtr)
        return cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    fc_region *r = fc_region_find(devPtr);
    cudaError_t e = cudaSuccess;
    if (!r || r->kind != FC_DEVICE)
        e = fc_misuse(&call_, cudaErrorInvalidValue, "%p is not device memory%s%s", devPtr,
                      r ? ": it is " : "", r ? kind_name(r->kind) : "");
    else if (r->base != (uint8_t *)devPtr)
        e = fc_misuse(&call_, cudaErrorInvalidValue,
                      "%p lies inside device allocation #%llu at %p: not a pointer cudaMalloc "
                      "returned",
                      devPtr, (unsigned long long)r->id, (void *)r->base);
    if (!e) /* cudaFree synchronizes: the device's queued work ends first */
        fc_device_drain_locked(r->device);
    if (!e && !r->live)
        e = fc_misuse(&call_, cudaErrorInvalidValue,
                      "double free: device allocation #%llu (%zu bytes at %p) was already "
                      "released by cudaFree",
                      (unsigned long long)r->id, r->size, devPtr);
    if (!e) {
        /* Stays mapped and PROT_NONE: the address is never handed out again,
         * so a stale pointer is reported as a use after free. */
        r->live = 0;
        fc.used[r->device] -= r->mapped - page_size();
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* ---- page-locked host memory ---------------------------------------------------- */

static cudaError_t host_alloc(const fc_call *c, void **pHost, size_t size, unsigned flags)
{
    if (!pHost)
        return fc_misuse(c, cudaErrorInvalidValue, "pHost is NULL");
    if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return fc_misuse(c, cudaErrorInvalidValue, "unknown flags 0x%x", flags);
    int dev;
    cudaError_t e = fc_current_device(c, &dev);
    if (e)
        return e;
    if (size == 0) {
        *pHost = NULL;
        return cudaSuccess;
    }
    size_t bytes = round_up(size, page_size());
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return fc_error(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&fc.lock);
    fc_region *r = region_add_locked(FC_HOST_ALLOC, m, size, bytes, dev, flags);
    pthread_mutex_unlock(&fc.lock);
    if (!r) {
        munmap(m, bytes);
        return fc_error(cudaErrorMemoryAllocation);
    }
    *pHost = m;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    FC_CALL("cudaHostAlloc", "pHost=%p, size=%zu, flags=0x%x", (void *)pHost, size, flags);
    return host_alloc(&call_, pHost, size, flags);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    FC_CALL("cudaMallocHost", "ptr=%p, size=%zu", (void *)ptr, size);
    return host_alloc(&call_, ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr)
{
    FC_CALL("cudaFreeHost", "ptr=%p", ptr);
    if (!ptr)
        return cudaSuccess;
    pthread_mutex_lock(&fc.lock);
    fc_region *r = fc_region_find(ptr);
    uint64_t sid = 0;
    cudaError_t e = cudaSuccess;
    if (!r || r->kind != FC_HOST_ALLOC)
        e = fc_misuse(&call_, cudaErrorInvalidValue, "%p is not from cudaHostAlloc%s%s", ptr,
                      r ? ": it is " : "", r ? kind_name(r->kind) : "");
    else if (r->base != (uint8_t *)ptr)
        e = fc_misuse(&call_, cudaErrorInvalidValue, "%p lies inside the block at %p, not at its start",
                      ptr, (void *)r->base);
    else if (!r->live)
        e = fc_misuse(&call_, cudaErrorInvalidValue,
                      "double free: the block #%llu at %p was already released by cudaFreeHost",
                      (unsigned long long)r->id, ptr);
    else if (fc_host_range_queued(r->base, r->size, &sid))
        e = fc_misuse(&call_, cudaErrorIllegalState,
                      "a copy queued on stream S%llu still uses it: synchronize first",
                      (unsigned long long)sid);
    if (!e) {
        r->live = 0;
        munmap(r->base, r->mapped);
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* 1 when every page of [p, p + size) is mapped. */
static int is_mapped(const void *p, size_t size)
{
    size_t pg = page_size();
    uintptr_t lo = round_down((uintptr_t)p, pg), hi = round_up((uintptr_t)p + size, pg);
    unsigned char *vec = malloc((hi - lo) / pg);
    if (!vec)
        return 1; /* cannot tell: let it pass */
    int ok = mincore((void *)lo, hi - lo, vec) == 0 || errno != ENOMEM;
    free(vec);
    return ok;
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    FC_CALL("cudaHostRegister", "ptr=%p, size=%zu, flags=0x%x", ptr, size, flags);
    if (!ptr || !size)
        return fc_misuse(&call_, cudaErrorInvalidValue, "empty range");
    if (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped |
                            cudaHostRegisterIoMemory | cudaHostRegisterReadOnly))
        return fc_misuse(&call_, cudaErrorInvalidValue, "unknown flags 0x%x", flags);
    int dev;
    cudaError_t e = fc_current_device(&call_, &dev);
    if (e)
        return e;
    if (!is_mapped(ptr, size))
        return fc_misuse(&call_, cudaErrorInvalidValue, "[%p, +%zu) is not mapped memory", ptr, size);
    const uint8_t *lo = ptr, *hi = lo + size;
    pthread_mutex_lock(&fc.lock);
    for (fc_region *r = fc.regions; r && !e; r = r->next) {
        size_t extent = r->kind == FC_DEVICE ? r->mapped : r->size;
        int overlap = lo < r->base + extent && r->base < hi;
        if (!overlap || (!r->live && r->kind != FC_DEVICE))
            continue;
        e = fc_misuse(&call_,
                      r->kind == FC_DEVICE ? cudaErrorInvalidValue
                                           : cudaErrorHostMemoryAlreadyRegistered,
                      "[%p, +%zu) overlaps %s [%p, +%zu)", ptr, size, kind_name(r->kind),
                      (void *)r->base, r->size);
    }
    if (!e && !region_add_locked(FC_HOST_REGISTERED, ptr, size, size, dev, flags))
        e = fc_error(cudaErrorMemoryAllocation);
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaHostUnregister(void *ptr)
{
    FC_CALL("cudaHostUnregister", "ptr=%p", ptr);
    pthread_mutex_lock(&fc.lock);
    fc_region *r = NULL;
    for (fc_region *x = fc.regions; x && !r; x = x->next)
        if (x->kind == FC_HOST_REGISTERED && x->base == (uint8_t *)ptr)
            r = x;
    uint64_t sid = 0;
    cudaError_t e = cudaSuccess;
    if (!r) {
        fc_region *in = fc_region_find(ptr);
        e = fc_misuse(&call_, cudaErrorHostMemoryNotRegistered, "%p is not the start of a registered range%s%s",
                      ptr, in ? ": it lies in " : "", in ? kind_name(in->kind) : "");
    } else if (!r->live) {
        e = fc_misuse(&call_, cudaErrorHostMemoryNotRegistered,
                      "the range [%p, +%zu) was already unregistered", ptr, r->size);
    } else if (fc_host_range_queued(r->base, r->size, &sid)) {
        e = fc_misuse(&call_, cudaErrorIllegalState,
                      "a copy queued on stream S%llu still uses [%p, +%zu): synchronize first",
                      (unsigned long long)sid, ptr, r->size);
    }
    if (!e)
        r->live = 0;
    pthread_mutex_unlock(&fc.lock);
    return e;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    FC_CALL("cudaPointerGetAttributes", "attributes=%p, ptr=%p", (void *)attributes, ptr);
    if (!attributes)
        return fc_misuse(&call_, cudaErrorInvalidValue, "attributes is NULL");
    memset(attributes, 0, sizeof *attributes);
    pthread_mutex_lock(&fc.lock);
    fc_region *r = fc_region_find(ptr);
    cudaError_t e = cudaSuccess;
    if (r && r->kind == FC_DEVICE && !r->live) {
        e = fc_misuse(&call_, cudaErrorInvalidValue, "use after free: %p was released by cudaFree",
                      ptr);
    } else if (r && r->live) {
        attributes->type = r->kind == FC_DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
        attributes->device = r->device;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = r->kind == FC_DEVICE ? NULL : (void *)ptr;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)ptr;
    }
    pthread_mutex_unlock(&fc.lock);
    return e;
}

/* ---- the copy ------------------------------------------------------------------ */

/* Device pages are readable and writable only here, one copy at a time. */
static void set_access(const void *p, size_t len, int prot)
{
    size_t pg = page_size();
    uintptr_t lo = round_down((uintptr_t)p, pg), hi = round_up((uintptr_t)p + len, pg);
    if (mprotect((void *)lo, hi - lo, prot) != 0) {
        perror("fakecuda: mprotect of device memory");
        abort();
    }
}

void fc_dma(const fc_op *op)
{
    int to_dev = op->dir == cudaMemcpyHostToDevice || op->dir == cudaMemcpyDeviceToDevice;
    int from_dev = op->dir == cudaMemcpyDeviceToHost || op->dir == cudaMemcpyDeviceToDevice;
    pthread_mutex_lock(&fc.dma);
    if (to_dev)
        set_access(op->dst, op->len, PROT_READ | PROT_WRITE);
    if (from_dev)
        set_access(op->src, op->len, PROT_READ | PROT_WRITE);
    memcpy(op->dst, op->src, op->len);
    uint64_t landed = op->dir == cudaMemcpyHostToDevice ? fc_hash(op->dst, op->len) : 0;
    if (to_dev)
        set_access(op->dst, op->len, PROT_NONE);
    if (from_dev)
        set_access(op->src, op->len, PROT_NONE);
    pthread_mutex_unlock(&fc.dma);
    if (op->dir == cudaMemcpyHostToDevice && landed != op->src_hash)
        fc_race("%s: the host bytes changed between the call and the copy: a host buffer was "
                "overwritten while its copy was still queued",
                op->what);
}
