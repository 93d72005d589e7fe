"""A shard replaced on disk while a Loader reads the dataset is an error naming
it (lib/dataset/shard_files.c): the reader reopens shards by name (an O_DIRECT
entry when first used, or one its descriptor cap closed), and a file that is
not the one the dataset's index was read from must never be read at that
index's offsets.

The case: 40 one-record shards under RLIMIT_NOFILE 24 (the reader keeps at
most 12 open), epoch 0 in dataset order (shard 20's descriptor is closed by
its end; the first shards are read again already, as epoch 1's read-ahead),
shard 20 replaced by a copy of itself (same bytes, another file), epoch 1:
the reopened shard 20 is refused. Without the check the copy would be read,
and with other bytes it would be read at the old offsets. Then shard 20
rewritten in place with shard 21's bytes (same device and inode, which is
also what `rm` and a copy often give: file systems reuse a deleted file's
inode number), checksums off: refused by its header, where it was read as
shard 20 and handed out sample 21's values."""
import os
import resource
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import PYTHON, pack, remove, scratch, write_samples  # noqa: E402

CHILD = r"""
import os, shutil, sys
import shardfeed
ds, engine, how = sys.argv[1:4]
ld = shardfeed.Loader(ds, 4, shuffle="none", output="numpy", engine=engine,
                      verify=how != "rewritten")
n = sum(1 for _ in ld)
names = sorted(f for f in os.listdir(ds) if f.endswith(".sfs"))
shard = os.path.join(ds, names[20])
if how == "renamed":
    shutil.copyfile(shard, shard + ".new")
    os.replace(shard + ".new", shard)
else:
    with open(os.path.join(ds, names[21]), "rb") as f:
        other = f.read()
    with open(shard, "wb") as f:  # the same inode, truncated and written
        f.write(other)
try:
    m = sum(1 for _ in ld)
except shardfeed.Error as e:
    print("error", e.code, e)
    sys.exit(0)
print("read", n, m)
"""


class ReplacedShard(unittest.TestCase):
    def setUp(self):
        self.tmp = scratch("replaced-")

    def tearDown(self):
        remove(self.tmp)

    def test_a_shard_replaced_while_read_is_refused_by_name(self):
        write_samples(os.path.join(self.tmp, "src"), 40, shape=(64,), seed=1)
        ds = pack(os.path.join(self.tmp, "src"), os.path.join(self.tmp, "ds"), "--shard-size", "1")
        shards = sorted(f for f in os.listdir(ds) if f.endswith(".sfs"))
        self.assertEqual(len(shards), 40)
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (24, 24))  # noqa: E731
        # The copy engines reopen shards by name; the mmap engine keeps the map of the
        # file it first read (the old one: its index still describes it).
        for engine in ("pread", "uring"):
            for how in ("renamed", "rewritten"):
                with self.subTest(engine=engine, how=how):
                    shutil.rmtree(ds)
                    pack(os.path.join(self.tmp, "src"), ds, "--shard-size", "1")
                    self.assertEqual(os.path.getsize(os.path.join(ds, shards[20])),
                                     os.path.getsize(os.path.join(ds, shards[21])))
                    p = subprocess.run([PYTHON, "-c", CHILD, ds, engine, how], capture_output=True,
                                       text=True, preexec_fn=limit, timeout=120)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertTrue(p.stdout.startswith("error "), p.stdout)
                    self.assertIn(f"{shards[20]} was replaced by another file since the dataset "
                                  "was opened", p.stdout)


if __name__ == "__main__":
    unittest.main()
