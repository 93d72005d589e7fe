/* The device interface on its own: the host implementation's asynchronous
 * copies, and the CUDA implementation's clean refusal without a device. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "device.h"
#include "shardfeed/error.h"

#define SLOTS 3
#define SLOT_BYTES (64u * 1024)

static uint8_t *make_slab(void)
{
    void *p = mmap(NULL, SLOTS * SLOT_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    return p;
}

Test(device_host, copies_the_requested_ranges_asynchronously)
{
    uint8_t *slab = make_slab();
    reader_device *d;
    cr_assert_eq(reader_device_host.open(&d, 0, slab, SLOTS * SLOT_BYTES, SLOTS, SLOT_BYTES), 0);
    reader_device_host_hold(d, 1);
    for (uint32_t s = 0; s < SLOTS; s++)
        memset(slab + s * SLOT_BYTES, 0x10 + (int)s, SLOT_BYTES);
    reader_copy_range r[2] = {{0, 100}, {4096, 8192}};
    for (uint32_t s = 0; s < SLOTS; s++)
        cr_assert_eq(reader_device_host.copy(d, s, r, 2), 0);
    /* The copy thread is held: copy() returned with every copy still queued,
     * so nothing has landed (a synchronous copy would have). */
    for (uint32_t s = 0; s < SLOTS; s++)
        cr_assert_eq(((uint8_t *)reader_device_host.device_ptr(d, s))[0], 0,
                     "copy finished synchronously; it must be asynchronous");
    reader_device_host_hold(d, 0);
    for (uint32_t s = 0; s < SLOTS; s++) {
        cr_assert_eq(reader_device_host.wait(d, s), 0);
        uint8_t *dev = reader_device_host.device_ptr(d, s);
        for (uint32_t i = 0; i < 100; i++)
            cr_assert_eq(dev[i], 0x10 + s);
        cr_assert_eq(dev[100], 0, "byte outside the ranges was copied");
        cr_assert_eq(dev[4095], 0);
        for (uint32_t i = 4096; i < 4096 + 8192; i++)
            cr_assert_eq(dev[i], 0x10 + s);
        cr_assert_eq(dev[4096 + 8192], 0);
    }
    cr_assert_eq(reader_device_host.bytes(d), (uint64_t)SLOTS * SLOT_BYTES);
    reader_device_host.close(d);
    munmap(slab, SLOTS * SLOT_BYTES);
}

Test(device_host, reuse_waits_for_the_copy_reading_the_slot)
{
    uint8_t *slab = make_slab();
    reader_device *d;
    cr_assert_eq(reader_device_host.open(&d, 0, slab, SLOTS * SLOT_BYTES, SLOTS, SLOT_BYTES), 0);
    reader_device_host_set_delay_us(30000);
    memset(slab, 0xAB, SLOT_BYTES);
    reader_copy_range r = {0, SLOT_BYTES};
    cr_assert_eq(reader_device_host.copy(d, 0, &r, 1), 0);
    /* The reader calls reuse before overwriting the host slot; after it the
     * device must hold the old bytes, whatever we write now. */
    cr_assert_eq(reader_device_host.reuse(d, 0), 0);
    memset(slab, 0xCD, SLOT_BYTES);
    uint8_t *dev = reader_device_host.device_ptr(d, 0);
    for (uint32_t i = 0; i < SLOT_BYTES; i += 997)
        cr_assert_eq(dev[i], 0xAB);
    reader_device_host_set_delay_us(0);
    reader_device_host.close(d);
    munmap(slab, SLOTS * SLOT_BYTES);
}

Test(device_cuda, refuses_cleanly_without_a_device)
{
    uint8_t *slab = make_slab();
    reader_device *d = NULL;
    int rc = reader_device_cuda.open(&d, 0, slab, SLOTS * SLOT_BYTES, SLOTS, SLOT_BYTES);
    if (rc == 0) {
        reader_device_cuda.close(d);
        munmap(slab, SLOTS * SLOT_BYTES);
        cr_skip_test("a CUDA device is present: tools/gpu-check.sh covers it");
    }
    cr_assert_eq(rc, SF_E_UNSUPPORTED);
    cr_assert(strlen(sf_last_error()) > 0);
    cr_assert_null(d);
    munmap(slab, SLOTS * SLOT_BYTES);
}
