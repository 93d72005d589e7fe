"""Datasets of many shards: a dataset of 20,000 one-record shards opens, reads and verifies
under `ulimit -n 256` (shards are opened on first use, at most half the limit stay open), and
the mmap engine is not used past its map budget.

The dataset is written by sfwrite.write_tiny_dataset (tests/python), not packed: pack syncs
every shard, which takes a minute for 20,000 of them on a disk and six under ASan. About 15 s."""
import json
import os
import unittest

from clitest import SHARDFEED, remove, run, scratch
import sfwrite

SHARDS = 20000
NOFILE = 256


class ManyShards(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = scratch("sf-scale-")
        cls.ds = sfwrite.write_tiny_dataset(os.path.join(cls.tmp, "ds"), SHARDS, per_shard=1)
        assert len([n for n in os.listdir(cls.ds) if n.endswith(".sfs")]) == SHARDS

    @classmethod
    def tearDownClass(cls):
        remove(cls.tmp)

    def bench(self, *args):
        p = run("bench", self.ds, "--batch-size", "256", "--shuffle", "global", "--json", *args,
                nofile=NOFILE, check=None)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_every_engine_reads_every_sample_under_the_limit(self):
        for engine in ("uring", "pread", "mmap"):
            with self.subTest(engine=engine):
                j = self.bench("--engine", engine, "--epochs", "1")
                self.assertEqual(j["samples"], SHARDS)
                self.assertEqual(j["options"]["engine"], engine)
                self.assertEqual(j.get("substituted", 0), 0)

    def test_deep_uring_queues_share_the_descriptor_cap(self):
        # Each task a ring claims holds its shard's descriptor until its reads finish: 4 rings
        # of queue depth 128 held up to 1,024, and under a global shuffle of one-record shards
        # failed with "Too many open files" at the first batch. The rings now share the cap.
        j = self.bench("--engine", "uring", "--threads", "4", "--queue-depth", "128",
                       "--prefetch", "16", "--epochs", "2")
        self.assertEqual((j["samples"], j["options"]["engine"]), (2 * SHARDS, "uring"))
        self.assertEqual(j.get("substituted", 0), 0)

    def test_mmap_is_not_chosen_past_the_map_budget(self):
        # The mmap engine keeps a map of every shard it reads until the dataset closes, and a
        # process may have vm.max_map_count maps (65,530 by default): past half of that (or
        # $SHARDFEED_MAP_LIMIT), auto reads warm small records with pread instead, and an
        # explicit mmap is refused at open, not with ENOMEM part-way through an epoch.
        def bench(limit, *args):
            env = dict(os.environ, SHARDFEED_MAP_LIMIT=str(limit))
            return run("bench", self.ds, "--batch-size", "256", "--json", "--epochs", "1", *args,
                       nofile=NOFILE, env=env)
        roomy = bench(SHARDS)
        self.assertEqual(roomy.returncode, 0, roomy.stderr)
        self.assertEqual(json.loads(roomy.stdout)["options"]["engine"], "mmap")  # warm, small records
        tight = bench(SHARDS - 1)
        self.assertEqual(tight.returncode, 0, tight.stderr)
        j = json.loads(tight.stdout)
        self.assertEqual((j["options"]["engine"], j["samples"]), ("pread", SHARDS))
        refused = bench(SHARDS - 1, "--engine", "mmap")
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(f"{SHARDS} shards", refused.stderr)
        self.assertIn("vm.max_map_count", refused.stderr)

    def test_inspect_and_verify_under_the_limit(self):
        p = run("inspect", self.ds, nofile=NOFILE)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(str(SHARDS), p.stdout.replace(",", ""))
        p = run("verify", self.ds, nofile=NOFILE)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_python_loader_values_under_the_limit(self):
        """Every sample's value comes back (x_i is 8 bytes of i % 251), in global shuffle."""
        code = f"""
import resource, sys, numpy as np, shardfeed
resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE}))
seen = np.zeros({SHARDS}, np.int64)
with shardfeed.Loader(sys.argv[1], batch_size=500, shuffle="global", output="numpy") as L:
    for b in L:
        ids, x = np.asarray(b.ids), np.asarray(b["x"])
        assert (x == (ids % 251)[:, None]).all()
        seen[ids] += 1
assert (seen == 1).all(), "every sample once"
print("ok")
"""
        import subprocess
        from clitest import SOURCE_DIR
        pypath = os.path.join(os.path.dirname(SHARDFEED), "python")
        if not os.path.isdir(os.path.join(pypath, "shardfeed")):
            self.skipTest("the Python module is not built")
        env = dict(os.environ, PYTHONPATH=pypath)
        p = subprocess.run(["/usr/bin/python3", "-c", code, self.ds], capture_output=True, text=True,
                           env=env, cwd=SOURCE_DIR, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ok", p.stdout)


if __name__ == "__main__":
    unittest.main()
