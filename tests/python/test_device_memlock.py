"""io_uring's buffer registration under a small RLIMIT_MEMLOCK: an ordinary user's 8 MiB limit
with 19 MB slots registered nothing before (one buffer per slot, each larger than the whole
limit); now the slab is registered in pieces that fit, and the reader says how much. The
2-thread run starts right after the 1-thread one, as the same user: a ring freed its registered
memory only on the kernel's workqueue after its process exited, still counted then, and the
second run registered nothing (engine_uring.c now unregisters first).

RLIMIT_MEMLOCK binds io_uring only for users without CAP_IPC_LOCK: as root the child drops to
nobody (setgid/setuid) after lowering the limit; as another user the limit binds already; where
neither is possible the test is skipped with the reason. See sfpytest.py for how to run it by
hand."""
import json
import os
import resource
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import pack, remove, scratch  # noqa: E402
from clitest import SHARDFEED  # noqa: E402

NOBODY = 65534
LIMIT = 8 << 20
TMP = None


def setUpModule():
    global TMP
    TMP = scratch("memlock-")


def tearDownModule():
    remove(TMP)


def limited():
    """In the child: the limit lowered, and CAP_IPC_LOCK gone (root becomes nobody)."""
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (LIMIT, LIMIT))
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


class SmallMemlock(unittest.TestCase):
    def test_slots_larger_than_the_limit_are_registered_in_pieces(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if os.geteuid() != 0 and hard != resource.RLIM_INFINITY and hard < LIMIT:
            self.skipTest(f"RLIMIT_MEMLOCK's hard limit is below {LIMIT >> 20} MiB")
        src = os.path.join(TMP, "src")
        os.makedirs(src)
        for i in range(40):  # 602 KB samples, 32 a batch: 19 MB slots
            np.save(os.path.join(src, f"img_{i}.npy"), np.full((3, 224, 224), i, np.float32))
            np.save(os.path.join(src, f"label_{i}.npy"), np.int64(i))
        ds = pack(src, os.path.join(TMP, "ds"))
        os.chmod(TMP, 0o755)  # nobody reads the dataset
        for dirpath, dirs, files in os.walk(TMP):
            for n in dirs + files:
                os.chmod(os.path.join(dirpath, n), 0o755 if n in dirs else 0o644)
        for threads in ("1", "2"):
            r = subprocess.run([SHARDFEED, "bench", ds, "--engine", "uring", "--batch-size", "32",
                                "--epochs", "1", "--threads", threads, "--json"],
                               preexec_fn=limited, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            st = json.loads(r.stdout)["options"]
            self.assertEqual(st["engine"], "uring")
            self.assertGreater(st["slab_bytes"] // 4, LIMIT, "slots must exceed the limit")
            self.assertGreater(st["registered_bytes"], 0,
                               f"{threads} thread(s): nothing registered under an 8 MiB limit")
            self.assertLessEqual(st["registered_bytes"], LIMIT)
            said = [ln for ln in r.stderr.splitlines() if "io_uring registered" in ln]
            self.assertEqual(len(said), 1, r.stderr)
            # Each I/O thread's ring registers on its own; the notice is the first
            # thread's, stats the least any ring holds.
            if threads == "1":
                self.assertIn(f"registered {st['registered_bytes'] >> 10} KiB of the "
                              f"{st['slab_bytes'] >> 10} KiB batch slab", said[0])
            self.assertIn("RLIMIT_MEMLOCK is 8192 KiB", said[0])


if __name__ == "__main__":
    unittest.main()
