"""The Loader's device path without a GPU.

On the host-copy device (the library's stand-in, SF_DEVICE_HOST_COPY: "device" memory in host
RAM filled by a copy thread, HostStream standing in for a CUDA stream) the whole torch path runs
on CPU tensors: arrays exported from the device pool through DLPack, the consumer's stream made
to wait for the copy at import, the release fenced on that stream when the last tensor dies,
slots not reused under held tensors. A consumer's "kernel" is HostStream.read(), which copies
device memory in stream order; the device counts a read that runs before its copy landed and a
copy that overwrites memory a queued read has yet to read (HostStream.hazards()).

Against the fake CUDA runtime (a build with -DSHARDFEED_CUDA=FAKE; skipped otherwise) the same
handshake on the real device_cuda.c: kDLCUDA capsules on device memory, the wait on the batch's
event in the consumer's stream, the release recorded on that stream and waited for by the slot's
next copy, the bytes read back through cudaMemcpyAsync.

Without a device: device="cuda" is the clear E_UNSUPPORTED error, with CUDA compiled in or not.
See sfpytest.py for how to run it by hand."""
import ctypes
import gc
import os
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import HAVE_TORCH, PYTHON, pack, remove, scratch, shardfeed, torch, write_samples  # noqa: E402

from shardfeed import _device  # noqa: E402
from shardfeed import _shardfeed as _C  # noqa: E402

TMP = None
DS = None
N = 48
BATCH = 8
SHAPE = (3, 16, 16)


def setUpModule():
    global TMP, DS
    TMP = scratch("device-")
    write_samples(os.path.join(TMP, "src"), N, shape=SHAPE, seed=3)
    DS = pack(os.path.join(TMP, "src"), os.path.join(TMP, "ds"))


def tearDownModule():
    _C.HostStream.set_copy_delay_us(0)
    remove(TMP)


def cpu_batches(**kw):
    """{(epoch, index): {field: numpy copy}} of one epoch on the CPU path."""
    out = {}
    with shardfeed.Loader(DS, BATCH, output="numpy", **kw) as ld:
        for b in ld:
            out[(b.epoch, b.index)] = {k: np.array(v) for k, v in b.items()}
    return out


def stream_read(hs, t):
    """Queues a consumer kernel on `hs` reading tensor `t`'s memory; returns the
    destination (valid after hs.synchronize())."""
    dst = np.zeros(t.numel() * t.element_size(), dtype=np.uint8)
    hs.read(dst.ctypes.data, t.data_ptr(), dst.nbytes)
    return dst


def as_bytes(a):
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1)


@unittest.skipUnless(HAVE_TORCH, "needs torch")
class HostCopyTorch(unittest.TestCase):
    """device="host-copy": CPU tensors that live in the device pool, imported on a HostStream."""

    def setUp(self):
        _C.HostStream.set_copy_delay_us(0)
        self.hazards = _C.HostStream.hazards()

    def tearDown(self):
        _C.HostStream.set_copy_delay_us(0)
        gc.collect()

    def assertNoHazards(self):
        self.assertEqual(_C.HostStream.hazards(), self.hazards, "the host-copy device saw a hazard")

    def test_a_whole_epoch_reads_back_the_cpu_bytes_zero_copy(self):
        want = cpu_batches(shuffle="global", seed=5)
        hs = _C.HostStream()
        got = {}
        with shardfeed.Loader(DS, BATCH, shuffle="global", seed=5, device="host-copy") as ld, \
                _device.host_stream(hs):
            self.assertEqual(ld.device, "host-copy")
            dev_bytes = ld.stats()["device_bytes"]
            self.assertGreater(dev_bytes, 0)
            pool = None
            for b in ld:
                for k in ("img", "label"):
                    t = b[k]
                    self.assertIsInstance(t, torch.Tensor)
                    self.assertEqual(t.device.type, "cpu")
                    got[(b.epoch, b.index, k)] = stream_read(hs, t)
                # Zero-copy from the pool: every field of a batch views device memory,
                # never the slab, and no two batches' memory overlaps a third place.
                ptr = b["img"].data_ptr()
                pool = (min(pool[0], ptr), max(pool[1], ptr)) if pool else (ptr, ptr)
            hs.synchronize()
            self.assertLess(pool[1] - pool[0], dev_bytes, "tensors outside the device pool")
            st = ld.stats()
            self.assertEqual(st["device_bytes"], dev_bytes)
            self.assertEqual(st["device"], "host-copy")
            # every field of every batch crossed once (H2D bytes; read-ahead of the next
            # epoch's batches too), in measurable time
            per_batch = sum(v.nbytes for v in got.values()) // len(want)
            self.assertGreaterEqual(st["device_copy_bytes"], per_batch * len(want))
            self.assertEqual(st["device_copy_bytes"] % per_batch, 0)
            self.assertGreater(st["device_copy_seconds"], 0)
        self.assertEqual(len(got), 2 * len(want))
        for (e, i), fields in want.items():
            for k, v in fields.items():
                np.testing.assert_array_equal(got[(e, i, k)], as_bytes(v), err_msg=f"{k} {e}/{i}")
        self.assertNoHazards()
        hs.close()

    def test_the_consumer_stream_waits_for_the_copy(self):
        # Copies are slow: a consumer kernel queued right after the import would read the
        # buffer before its copy lands unless the import made the stream wait for it.
        want = cpu_batches()
        _C.HostStream.set_copy_delay_us(100_000)
        hs = _C.HostStream()
        with shardfeed.Loader(DS, BATCH, device="host-copy", prefetch=2) as ld, \
                _device.host_stream(hs):
            it = iter(ld)
            for _ in range(2):
                b = next(it)
                dst = stream_read(hs, b["img"])
                hs.synchronize()
                np.testing.assert_array_equal(dst, as_bytes(want[(0, b.index)]["img"]))
                del b
            # The stream stalled for the slow copies: the consumer's wait for copies.
            st = ld.stats()
            self.assertGreater(st["device_stream_wait_seconds"], 0)
            self.assertGreater(st["fractions"]["device_wait"], 0)
        self.assertNoHazards()
        hs.close()

    def test_the_release_waits_for_work_queued_on_the_stream(self):
        # The stream is held: a kernel reading batch 0 stays queued after its tensors die.
        # The slot's next copy must wait for it (the release fence on the stream).
        want = cpu_batches()
        hs = _C.HostStream()
        prefetch = 3
        with shardfeed.Loader(DS, BATCH, device="host-copy", prefetch=prefetch) as ld, \
                _device.host_stream(hs):
            it = iter(ld)
            b = next(it)
            hs.hold(True)
            dst = stream_read(hs, b["img"])
            del b  # the tensors die: the slot is released after hs's queued work
            gc.collect()
            later = [next(it) for _ in range(prefetch - 1)]  # one of them reuses batch 0's slot
            # A copy into batch 0's device buffer that ignored the fence would run now;
            # give it the time to (the result below does not depend on this pause).
            time.sleep(0.3)
            hs.hold(False)
            hs.synchronize()
            np.testing.assert_array_equal(dst, as_bytes(want[(0, 0)]["img"]),
                                          "a copy overwrote batch 0 before the queued read")
            for b in later:
                d = stream_read(hs, b["img"])
                hs.synchronize()
                np.testing.assert_array_equal(d, as_bytes(want[(0, b.index)]["img"]))
            del later, b
        self.assertNoHazards()
        hs.close()

    def test_held_tensors_keep_their_slot(self):
        want = cpu_batches()
        hs = _C.HostStream()
        with shardfeed.Loader(DS, BATCH, device="host-copy", prefetch=2) as ld, \
                _device.host_stream(hs):
            it = iter(ld)
            keep = next(it)["img"][1]  # a view keeps the whole batch's slot
            for _ in range(3):
                # One slot is pinned by `keep`: the other one serves every further batch.
                b = next(it)
                d = stream_read(hs, b["img"])
                hs.synchronize()
                np.testing.assert_array_equal(d, as_bytes(want[(0, b.index)]["img"]))
                del b
            d = stream_read(hs, keep)
            hs.synchronize()
            np.testing.assert_array_equal(d, as_bytes(want[(0, 0)]["img"][1]))
            b = next(it)
            with self.assertRaises(shardfeed.Error) as cm:
                next(it)  # keep and b hold both slots
            self.assertEqual(cm.exception.code, _C.E_STATE)
            del keep, b
            gc.collect()
            self.assertIsNotNone(next(it))
        self.assertNoHazards()
        hs.close()

    def test_a_batch_is_imported_on_one_stream(self):
        hs1, hs2 = _C.HostStream(), _C.HostStream()
        with shardfeed.Loader(DS, BATCH, device="host-copy", output="dlpack") as ld:
            b = next(iter(ld))
            img, label = b["img"], b["label"]
            torch.from_dlpack(img)  # the host waits: no stream bound
            torch.utils.dlpack.from_dlpack(img.__dlpack__(stream=hs1.handle))
            with self.assertRaisesRegex(BufferError, "imported on stream"):
                label.__dlpack__(stream=hs2.handle)
            self.assertEqual(np.asarray(label).shape, (BATCH,))  # the host may always wait
            del b, img, label
            b = next(iter(ld))
            with self.assertRaises(shardfeed.Error) as cm:
                b["label"].__dlpack__(stream=12345)  # not a stream
            self.assertEqual(cm.exception.code, _C.E_INVALID)
            del b
        hs1.close()
        hs2.close()
        self.assertNoHazards()

    def test_without_a_stream_the_host_waits(self):
        # numpy (buffer protocol or DLPack without a stream) gets the landed bytes.
        want = cpu_batches()
        _C.HostStream.set_copy_delay_us(20_000)
        with shardfeed.Loader(DS, BATCH, device="host-copy", output="numpy") as ld:
            for b in ld:
                np.testing.assert_array_equal(b["img"], want[(0, b.index)]["img"])
                np.testing.assert_array_equal(b["label"], want[(0, b.index)]["label"])
        self.assertNoHazards()

    def test_dropping_a_batch_does_not_wait_for_its_copy(self):
        # A trainer queues its step and drops the batch; with its GPU behind, the batch's copy
        # is still queued. The release only fences the stream: the I/O thread that refills the
        # slot waits for the copy (the release waited on the host for it, 55% of a trainer's
        # time on an H200). With 1 s copies, a release that waited would take about that.
        _C.HostStream.set_copy_delay_us(1_000_000)
        with shardfeed.Loader(DS, BATCH, device="host-copy", output="dlpack", prefetch=2) as ld:
            b = next(iter(ld))
            start = time.perf_counter()
            del b
            gc.collect()
            dropped = time.perf_counter() - start
            st = ld.stats()
        self.assertLess(dropped, 0.5, f"dropping the batch took {dropped:.3f} s")
        self.assertLess(st["device_wait_seconds"], 0.5, st)
        self.assertNoHazards()


def fake_cuda():
    """The fake CUDA runtime the extension was linked with (ctypes), or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "libfakecuda" in line:
                lib = ctypes.CDLL(line.split()[-1])
                lib.fakecuda_stat.restype = ctypes.c_uint64
                lib.fakecuda_log_count.restype = ctypes.c_size_t
                lib.fakecuda_launch_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                                     ctypes.c_uint, ctypes.c_void_p]
                lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.c_int, ctypes.c_void_p]
                lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
                lib.cudaStreamDestroy.argtypes = [ctypes.c_void_p]
                lib.cudaFreeHost.argtypes = [ctypes.c_void_p]
                return lib
    return None


class LogEntry(ctypes.Structure):
    _fields_ = [("seq", ctypes.c_uint64), ("kind", ctypes.c_int), ("stream", ctypes.c_void_p),
                ("event", ctypes.c_void_p), ("record", ctypes.c_uint64)]


LOG_RECORD, LOG_WAIT = 1, 2
DK_CUDA = 2  # DLPack's kDLCUDA
MEMCPY_D2H = 2


@unittest.skipUnless(fake_cuda(), "the extension is not linked with the fake CUDA runtime "
                                  "(configure with -DSHARDFEED_CUDA=FAKE)")
class FakeCuda(unittest.TestCase):
    """device="cuda:0" on the real device_cuda.c, the GPU played by the fake CUDA runtime."""

    def setUp(self):
        self.fc = fake_cuda()
        self.stream = ctypes.c_void_p()
        self.assertEqual(self.fc.cudaStreamCreate(ctypes.byref(self.stream)), 0)
        self.bad = (self.fc.fakecuda_stat(b"races"), self.fc.fakecuda_stat(b"misuse"))

    def tearDown(self):
        gc.collect()
        self.assertEqual(self.fc.cudaStreamSynchronize(self.stream), 0)
        self.assertEqual(self.fc.cudaStreamDestroy(self.stream), 0)
        self.assertEqual((self.fc.fakecuda_stat(b"races"), self.fc.fakecuda_stat(b"misuse")),
                         self.bad, "the fake CUDA runtime saw a race or a misuse")

    def log(self):
        out = []
        for i in range(self.fc.fakecuda_log_count()):
            e = LogEntry()
            self.assertEqual(self.fc.fakecuda_log_get(ctypes.c_size_t(i), ctypes.byref(e)), 0)
            out.append(e)
        return out

    def read_back(self, a):
        """The bytes of device array `a`, copied on the consumer's stream."""
        host = ctypes.c_void_p()
        self.assertEqual(self.fc.cudaHostAlloc(ctypes.byref(host), ctypes.c_size_t(a.nbytes), 0), 0)
        try:
            self.assertEqual(self.fc.cudaMemcpyAsync(host, a.data_ptr, a.nbytes, MEMCPY_D2H,
                                                     self.stream), 0)
            self.assertEqual(self.fc.cudaStreamSynchronize(self.stream), 0)
            return np.frombuffer(ctypes.string_at(host, a.nbytes), dtype=np.uint8).copy()
        finally:
            self.fc.cudaFreeHost(host)

    def test_capsules_wait_and_release_on_the_consumer_stream(self):
        want = cpu_batches()
        s = self.stream.value
        with shardfeed.Loader(DS, BATCH, device="cuda:0", output="dlpack", prefetch=2) as ld:
            self.assertEqual(ld.stats()["device"], "cuda")
            it = iter(ld)
            b = next(it)
            img, label = b["img"], b["label"]
            self.assertEqual(img.__dlpack_device__(), (DK_CUDA, 0))
            with self.assertRaises(BufferError):
                memoryview(img)  # device memory is not the host's
            self.fc.fakecuda_log_clear()
            caps = [img.__dlpack__(stream=s), label.__dlpack__(stream=s)]
            waits = [e for e in self.log() if e.kind == LOG_WAIT and e.stream == s]
            self.assertTrue(waits and all(e.record for e in waits),
                            "the consumer's stream does not wait for the batch's copy")
            np.testing.assert_array_equal(self.read_back(img), as_bytes(want[(0, 0)]["img"]))
            np.testing.assert_array_equal(self.read_back(label), as_bytes(want[(0, 0)]["label"]))
            # A consumer kernel still reading batch 0 when its arrays die.
            self.assertEqual(self.fc.fakecuda_launch_read(img.data_ptr, img.nbytes, 20000, s), 0)
            self.fc.fakecuda_log_clear()
            del caps, img, label, b
            gc.collect()
            later = [next(it) for _ in range(2)]  # the second reuses batch 0's slot
            log = self.log()
            fences = [e for e in log if e.kind == LOG_RECORD and e.stream == s]
            self.assertEqual(len(fences), 1, "the release was not recorded on the consumer's stream")
            f = fences[0]
            self.assertTrue(any(e.kind == LOG_WAIT and e.event == f.event and e.record == f.record
                                and e.stream != s and e.seq > f.seq for e in log),
                            "the slot's next copy does not wait for the release on the stream")
            for b in later:
                a = b["img"]
                a.__dlpack__(stream=s)
                np.testing.assert_array_equal(self.read_back(a), as_bytes(want[(0, b.index)]["img"]))
            del later, b, a


class NoDevice(unittest.TestCase):
    """device="cuda" where no CUDA device can be used: the clear E_UNSUPPORTED error."""

    def run_child(self, code, **env):
        e = dict(os.environ, **env)
        return subprocess.run([PYTHON, "-c", code], env=e, capture_output=True, text=True)

    def test_cuda_without_a_device_is_unsupported(self):
        # Raw DLPack output skips torch's check: the library says it. FAKECUDA_DEVICES=0
        # makes a FAKE build "CUDA compiled in, no GPU"; other builds here have no GPU or
        # no CUDA at all.
        code = ("import shardfeed, sys\n"
                "try:\n"
                f"    shardfeed.Loader({DS!r}, 4, device='cuda:0', output='dlpack')\n"
                "except shardfeed.Error as e:\n"
                "    print(e.code, e); sys.exit(0)\n"
                "sys.exit('no error')\n")
        r = self.run_child(code, FAKECUDA_DEVICES="0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(f"{_C.E_UNSUPPORTED} "), r.stdout)
        if _C.has_feature("cuda"):
            self.assertIn("no GPU found: no CUDA device", r.stdout)
        else:
            self.assertIn("built without CUDA", r.stdout)

    @unittest.skipUnless(HAVE_TORCH, "needs torch")
    def test_cuda_with_torch_without_a_device(self):
        if torch.cuda.is_available():
            self.skipTest("this machine has a CUDA device")
        with self.assertRaises(shardfeed.Error) as cm:
            shardfeed.Loader(DS, 4, device="cuda")
        self.assertEqual(cm.exception.code, _C.E_UNSUPPORTED)
        self.assertIn("no GPU found: there is no CUDA device", str(cm.exception))

    def test_bad_device_names(self):
        for bad in ("gpu", "cuda:x", "cuda:-1"):
            with self.assertRaises(ValueError):
                shardfeed.Loader(DS, 4, device=bad, output="dlpack")
        with self.assertRaises(ValueError):
            shardfeed.Loader(DS, 4, device="cuda:0", output="numpy")


if __name__ == "__main__":
    unittest.main()
