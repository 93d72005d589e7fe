#!/usr/bin/env python3
"""Mutation checks of the CUDA glue, on the fake CUDA runtime.

Removes each wait, fence, device switch and teardown step of
lib/reader/device_cuda.c (and the reader's slot waits on the device, and the
Python module's wait at import and fence at release), one at a time, in a
scratch copy of the tree; rebuilds with -DSHARDFEED_CUDA=FAKE; runs
tests/unit/test_device_cuda.c, the GPU check and tests/python/test_device.py
(the fake and the host-copy legs) on the fake. Every mutation
must make a test fail, except the ones marked equivalent (with the reason):
a surviving one means a test is missing.

    tests/fakecuda/mutations.py [NAME...]     (all when none given)

Not part of CI (about ten minutes on two cores): run it after changing
device_cuda.c or the reader's calls of the device interface, and update the
table below with the code.
Exit status 1 when a mutation that should be caught survives.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

NOWAIT = ("static void *cuda_device_ptr",
          "static int cuda_nowait(reader_device *d, uint32_t slot)\n{\n    (void)d, (void)slot;\n"
          "    return 0;\n}\n\nstatic void *cuda_device_ptr")
CUDA = "lib/reader/device_cuda.c"
SCHEDULE = "lib/reader/schedule.c"
PY_READER = "python/src/py_reader.c"

# name: (file, [(old, new)], what it removes, None or why it is equivalent)
MUTATIONS = {
    "copy_fence": (CUDA, [("    if (e == cudaSuccess && d->fenced[slot])\n"
                           "        e = cudaStreamWaitEvent(d->stream[slot], d->released[slot], 0);\n", "")],
                   "cudaStreamWaitEvent on the release event before a slot's next copy", None),
    "copy_record": (CUDA, [("    if (e == cudaSuccess)\n"
                            "        e = cudaEventRecord(d->copied[slot], d->stream[slot]);\n", "")],
                    "cudaEventRecord of the copy event after a slot's copy", None),
    "release_record": (CUDA, [("    cudaError_t e = rc ? cudaErrorInvalidDevice\n"
                               "                       : cudaEventRecord(d->released[slot], (cudaStream_t)stream);\n",
                               "    cudaError_t e = cudaSuccess;\n"),
                              ("        d->fenced[slot] = 1;\n", "        d->fenced[slot] = 0;\n")],
                       "release_after's cudaEventRecord on the consumer's stream", None),
    "landed_record": (CUDA, [("    if (e == cudaSuccess)\n        e = cudaEventRecord(d->landed[slot], d->stream[slot]);\n",
                              "")],
                      "the record of the event a slot's refill waits on, after its copy", None),
    "reuse_wait": (CUDA, [("    .reuse = cuda_reuse,", "    .reuse = cuda_nowait,"), NOWAIT],
                   "cudaEventSynchronize of the copy before a host slot is reused", None),
    "batch_wait": (CUDA, [("    .wait = cuda_wait,", "    .wait = cuda_nowait,"), NOWAIT],
                   "cudaEventSynchronize in sf_batch_wait", None),
    "close_stream_sync": (CUDA, [("            cudaStreamSynchronize(d->stream[i]);\n", "")],
                          "cudaStreamSynchronize of each slot stream at close", None),
    "open_set_device": (CUDA, [("(e = cudaSetDevice(d->ordinal)) != cudaSuccess",
                                "(e = cudaSuccess) != cudaSuccess")],
                        "cudaSetDevice(ordinal) at open", None),
    "copy_set_device": (CUDA, [("    cudaError_t e = cudaSetDevice(d->ordinal);\n",
                                "    cudaError_t e = cudaSuccess;\n")],
                        "cudaSetDevice(ordinal) in the I/O thread before a copy", None),
    "close_set_device": (CUDA, [("    reader_device *d = arg;\n    cudaSetDevice(d->ordinal);\n",
                                 "    reader_device *d = arg;\n")],
                         "cudaSetDevice(ordinal) at close", None),
    "own_thread": (CUDA, [("    if (pthread_create(&t, NULL, fn, arg) == 0)\n        pthread_join(t, NULL);\n"
                           "    else\n        fn(arg);\n", "    (void)t;\n    fn(arg);\n")],
                   "open's and close's thread of their own (the caller's device kept)", None),
    "host_register": (CUDA, [("(e = cudaHostRegister(d->slab, d->slab_bytes, cudaHostRegisterDefault)) != cudaSuccess",
                              "(e = cudaSuccess) != cudaSuccess"),
                             ("        d->registered = 1;\n", "        d->registered = 0;\n")],
                      "cudaHostRegister of the slab", None),
    "host_unregister": (CUDA, [("        cudaHostUnregister(d->slab);\n", "        (void)0;\n")],
                        "cudaHostUnregister at close", None),
    "free_pool": (CUDA, [("        cudaFree(d->pool);\n", "        (void)0;\n")], "cudaFree of the pool", None),
    "stream_destroy": (CUDA, [("            cudaStreamDestroy(d->stream[i]);\n", "")],
                       "cudaStreamDestroy at close", None),
    "event_destroy": (CUDA, [("            cudaEventDestroy(d->released[i]);\n", "            (void)0;\n")],
                      "cudaEventDestroy of the release events at close", None),
    "refill_wait": (SCHEDULE, [("    int rc = r->device_ops->reuse(r->device, s->index);",
                                "    int rc = 0;")],
                    "the I/O thread's wait for a slot's last copy before it is refilled", None),
    "wait_on": (CUDA, [("    cudaError_t e = cudaStreamWaitEvent(s, d->copied[slot], 0);\n",
                        "    cudaError_t e = cudaSuccess;\n")],
                "sf_batch_wait_on's cudaStreamWaitEvent on the copy event", None),
    "device_guard": (CUDA, [("    if (*prev == d->ordinal)\n        return 0;\n", "    return 0;\n")],
                     "release's and wait_on's switch to the reader's device (a default-stream handle "
                     "names the current device's stream)",
                     "the fake does not model the default streams (handles 0-2), where the current "
                     "device matters; only a GPU run with two devices shows it"),
    "release_fallback": (CUDA, [("        if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)\n"
                                 "            cudaDeviceSynchronize();\n", "")],
                         "the wait for the consumer's stream when its release cannot be recorded", None),
    "py_import_wait": (PY_READER, [("        rc = sf_batch_wait_on(r, self->b, stream);\n",
                                    "        rc = 0;\n")],
                       "the Python import's wait of the consumer's stream (DLPack __dlpack__)", None),
    "py_release_fence": (PY_READER, [("        sf_reader_release_after(reader_handle(reader), b, stream);\n",
                                      "        (void)stream, sf_reader_release_after(reader_handle(reader), b, NULL);\n")],
                         "the Python batch's release after its import stream", None),
    "schedule_busy": (SCHEDULE, [("            refill += s != r->refilling;\n            continue;\n",
                                "            s->device_busy = 0;\n")],
                      "the schedule's skip of a freed slot whose copy may still read it (released, "
                      "or dropped by a reposition)", None),
}


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def copy_tree(src, dst):
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=src, check=True).stdout.split()
    for f in files:
        if os.path.isfile(os.path.join(src, f)):
            os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
            shutil.copy2(os.path.join(src, f), os.path.join(dst, f))


def failing_tests(build):
    unit = run(["./tests/test_device_cuda", "--verbose", "--jobs", "1"], cwd=build)
    fails = sorted(set(re.findall(r"^\[(?:FAIL|CRASH)\] device_cuda::(\w+)", unit.stdout, re.M)))
    if unit.returncode and not fails:
        fails = ["test_device_cuda exited %d" % unit.returncode]
    gpu = run(["ctest", "-R", "cli.gpu_check_fake"], cwd=build)
    py = run(["ctest", "-R", "^python.test_device$"], cwd=build)
    return (fails + (["cli.gpu_check_fake"] if gpu.returncode else [])
            + (["python.test_device"] if py.returncode else []))


def main():
    names = sys.argv[1:] or list(MUTATIONS)
    for n in names:
        if n not in MUTATIONS:
            sys.exit("no mutation %s (known: %s)" % (n, " ".join(MUTATIONS)))
    root = run(["git", "rev-parse", "--show-toplevel"], check=True).stdout.strip()
    scratch = tempfile.mkdtemp(prefix="sf-mutations-")
    src, build = os.path.join(scratch, "src"), os.path.join(scratch, "build")
    copy_tree(root, src)
    targets = ["test_device_cuda", "gpu_check", "shardfeed_cli", "shardfeed_python"]
    jobs = str(min(os.cpu_count() or 2, 8))
    conf = run(["cmake", "-S", src, "-B", build, "-DSHARDFEED_CUDA=FAKE"])
    if conf.returncode:
        sys.exit(conf.stdout)

    def build_and_test():
        b = run(["cmake", "--build", build, "-j", jobs, "--target"] + targets)
        return ["BUILD FAILED:\n" + b.stdout[-2000:]] if b.returncode else failing_tests(build)

    base = build_and_test()
    if base:
        sys.exit("the unmutated tree fails: %s" % base)
    bad = 0
    print("%-22s %-8s %s" % ("mutation", "verdict", "failing tests"))
    for n in names:
        path, edits, what, equivalent = MUTATIONS[n]
        full = os.path.join(src, path)
        original = open(full).read()
        text = original
        for old, new in edits:
            if text.count(old) != 1:
                sys.exit("%s: the code to remove is not in %s any more: update the table" % (n, path))
            text = text.replace(old, new, 1)
        open(full, "w").write(text)
        fails = build_and_test()
        open(full, "w").write(original)
        if equivalent:
            verdict = "equiv." if not fails else "killed"
        else:
            verdict = "killed" if fails else "SURVIVED"
            bad += not fails
        print("%-22s %-8s %s" % (n, verdict, ", ".join(fails) or "(none: %s)" % (equivalent or "a test is missing")))
        print("%-22s %-8s removes: %s" % ("", "", what))
        sys.stdout.flush()
    shutil.rmtree(scratch)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
