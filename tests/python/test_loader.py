"""shardfeed.Loader: values, order, epochs, resume, ranks, output kinds, memory lifetime.
See sfpytest.py for how to run it by hand."""
import copy
import gc
import inspect
import json
import os
import pickle
import pydoc
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import (HAVE_TORCH, PYTHON, as_numpy, drain_shared, epoch_ids, load_source, pack,  # noqa: E402
                      rekey, remove, scratch, shardfeed, torch, write_samples)

N = 203          # not a multiple of any batch size used
B = 16
TMP = SRC = DS = None


def setUpModule():
    global TMP, SRC, DS
    TMP = scratch("loader-")
    SRC = os.path.join(TMP, "npy")
    write_samples(SRC, N, extra={"flag": lambda i: np.array([i % 3 == 0, i % 2 == 0])})
    DS = pack(SRC, os.path.join(TMP, "ds"), "--align", "64", "--shard-size", "40KiB")


def tearDownModule():
    remove(TMP)


def loader(**kw):
    kw.setdefault("output", "numpy")
    return shardfeed.Loader(DS, kw.pop("batch_size", B), **kw)


class Values(unittest.TestCase):
    def check_epoch(self, ld):
        ds = shardfeed.open(DS)
        self.assertGreater(len(ds.shards), 1)
        seen = []
        for k, b in enumerate(ld):
            self.assertIsInstance(b, shardfeed.Batch)
            self.assertEqual(b.index, k)
            ids = as_numpy(b.ids)
            self.assertEqual(len(ids), b.size)
            img, label, flag = as_numpy(b["img"]), as_numpy(b["label"]), as_numpy(b["flag"])
            self.assertEqual(img.shape, (b.size, 3, 8, 8))
            self.assertEqual(img.dtype, np.float32)
            self.assertEqual(label.dtype, np.int64)
            self.assertEqual(flag.dtype, np.bool_)
            for j, i in enumerate(ids):
                key = ds.key(int(i))
                np.testing.assert_array_equal(img[j], load_source(SRC, "img", key))
                self.assertEqual(label[j], load_source(SRC, "label", key))
                np.testing.assert_array_equal(flag[j], load_source(SRC, "flag", key))
            seen.extend(ids.tolist())
        self.assertEqual(sorted(seen), list(range(N)))
        self.assertEqual(k + 1, len(ld))
        self.assertEqual(b.size, N % B)  # the short last batch

    def test_numpy(self):
        self.check_epoch(loader(seed=3))

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_torch(self):
        ld = loader(seed=3, output="torch")
        b = next(iter(ld))
        self.assertIsInstance(b["img"], torch.Tensor)
        self.assertIsInstance(b.ids, torch.Tensor)
        self.assertEqual(b["flag"].dtype, torch.bool)
        self.check_epoch(loader(seed=3, output="torch"))

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_auto_is_torch(self):
        self.assertEqual(shardfeed.Loader(DS, B).output, "torch")

    def test_dlpack_objects(self):
        b = next(iter(loader(output="dlpack", shuffle="none")))
        a = b["img"]
        self.assertTrue(hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"))
        self.assertEqual(a.__dlpack_device__(), (1, 0))
        self.assertEqual(a.shape, (B, 3, 8, 8))
        x = np.from_dlpack(a) if hasattr(np, "from_dlpack") else np.asarray(a)
        np.testing.assert_array_equal(x[5], load_source(SRC, "img", shardfeed.open(DS).key(5)))
        np.testing.assert_array_equal(np.asarray(a), x)  # buffer protocol too
        if HAVE_TORCH:
            np.testing.assert_array_equal(torch.from_dlpack(a).numpy(), x)

    def test_shuffle_none_is_dataset_order(self):
        ids = sum(epoch_ids(loader(shuffle="none")), [])
        self.assertEqual(ids, list(range(N)))

    def test_block_shuffle(self):
        ids = sum(epoch_ids(loader(shuffle="block", block_size=8, window=32)), [])
        self.assertEqual(sorted(ids), list(range(N)))
        self.assertNotEqual(ids, list(range(N)))

    def test_len_and_drop_last(self):
        self.assertEqual(len(loader()), (N + B - 1) // B)
        ld = loader(drop_last=True)
        self.assertEqual(len(ld), N // B)
        sizes = [b.size for b in ld]
        self.assertEqual(sizes, [B] * (N // B))
        self.assertEqual(ld.samples_per_epoch, N // B * B)

    def test_stats(self):
        ld = loader()
        for _ in ld:
            pass
        s = ld.stats()
        for k in ("bytes_read", "samples", "batches", "corrupt_substitutions", "wait_seconds",
                  "io_seconds", "checksum_seconds", "engine", "io_threads", "prefetch",
                  "slab_bytes"):
            self.assertIn(k, s)
        self.assertEqual(s["samples"], N)
        self.assertEqual(s["batches"], len(ld))
        # prefetch=None: as many slots as make 2 MiB, 4 to 8; these are far smaller
        # than 2 MiB / 8
        self.assertLess(s["slab_bytes"] // s["prefetch"], (2 << 20) // 8)
        self.assertEqual(s["prefetch"], 8)
        self.assertEqual(ld.prefetch, 8)
        self.assertEqual(loader(prefetch=5).stats()["prefetch"], 5)
        self.assertGreaterEqual(s["bytes_read"], N * 3 * 8 * 8 * 4)


class Order(unittest.TestCase):
    def test_deterministic_per_seed_and_epoch(self):
        a, b = loader(seed=11), loader(seed=11)
        a0, b0 = epoch_ids(a), epoch_ids(b)
        self.assertEqual(a0, b0)
        self.assertEqual(a.epoch, 1)  # advanced by itself
        a1, b1 = epoch_ids(a), epoch_ids(b)
        self.assertEqual(a1, b1)
        self.assertNotEqual(a0, a1)
        self.assertNotEqual(a0, epoch_ids(loader(seed=12)))
        c = loader(seed=11)
        c.set_epoch(1)
        self.assertEqual(epoch_ids(c), a1)
        c.set_epoch(0)
        self.assertEqual(epoch_ids(c), a0)

    def test_batch_epoch_and_index(self):
        ld = loader()
        ld.set_epoch(5)
        bs = [(b.epoch, b.index) for b in ld]
        self.assertEqual(bs, [(5, k) for k in range(len(ld))])
        self.assertEqual(ld.epoch, 6)

    def test_a_loop_that_takes_every_batch_ends_the_epoch(self):
        # zip(range(len(loader)), loader) takes every batch without asking for one more, so the
        # iterator never reached the epoch's end: each next iter() replayed the same epoch, in
        # the same order every time. Every batch handed out now ends it.
        ref = loader(seed=1, shuffle="global")
        want = [epoch_ids(ref) for _ in range(3)]
        ld = loader(seed=1, shuffle="global")
        got = []
        for e in range(3):
            got.append([as_numpy(b.ids).tolist() for _, b in zip(range(len(ld)), ld)])
            self.assertEqual(ld.epoch, e + 1)
        self.assertEqual(got, want)
        state = ld.state_dict()  # the same place, said as (2, len)
        self.assertEqual((state["epoch"], state["next_batch"]), (2, len(ld)))
        again = loader(seed=1, shuffle="global")
        again.load_state_dict(state)
        self.assertEqual(again.epoch, 2)
        self.assertEqual(epoch_ids(again), [])  # nothing left of epoch 2
        self.assertEqual(epoch_ids(again), epoch_ids(ref))  # then epoch 3, as ref's
        # One batch short of the end is not the end: the next iter() starts the epoch over.
        short = [as_numpy(b.ids).tolist() for _, b in zip(range(len(ld) - 1), ld)]
        self.assertEqual(ld.epoch, 3)
        self.assertEqual(epoch_ids(ld)[:len(short)], short)

    def test_abandoned_iteration_restarts_the_epoch(self):
        ld = loader(seed=2)
        full = epoch_ids(loader(seed=2))
        it = iter(ld)
        next(it)
        next(it)
        self.assertEqual(epoch_ids(ld), full)  # iter() starts the epoch over
        with self.assertRaises(RuntimeError):
            next(it)  # replaced by the newer iterator


class Resume(unittest.TestCase):
    def test_state_dict_resumes_exactly(self):
        full = epoch_ids(loader(seed=7))
        for k in (0, 1, 5, len(full) - 1, len(full)):
            ld = loader(seed=7)
            it = iter(ld)
            for _ in range(k):
                next(it)
            state = ld.state_dict()
            self.assertEqual((state["epoch"], state["next_batch"]), (0, k))
            state = json.loads(json.dumps(state))  # checkpoints go through json/pickle
            new = loader(seed=7)
            new.load_state_dict(pickle.loads(pickle.dumps(state)))
            self.assertEqual(new.state_dict()["next_batch"], k)
            self.assertEqual(epoch_ids(new), full[k:], f"resume after {k} batches")
            # and then the next epoch, as an uninterrupted run would
            self.assertEqual(new.epoch, 1)
            ref = loader(seed=7)
            ref.set_epoch(1)
            self.assertEqual(epoch_ids(new), epoch_ids(ref))

    def test_state_in_a_later_epoch(self):
        ld = loader(seed=7)
        for _ in range(3):
            epoch_ids(ld)
        it = iter(ld)
        next(it)
        s = ld.state_dict()
        self.assertEqual((s["epoch"], s["next_batch"]), (3, 1))
        ref = loader(seed=7)
        ref.set_epoch(3)
        new = loader(seed=7)
        new.load_state_dict(s)
        self.assertEqual(epoch_ids(new), epoch_ids(ref)[1:])

    def test_state_after_an_epoch_ends(self):
        ld = loader(seed=7)
        epoch_ids(ld)
        s = ld.state_dict()
        self.assertEqual((s["epoch"], s["next_batch"]), (1, 0))

    def test_epochs_stop_below_2_63(self):
        # The C reader's SF_MAX_EPOCH: an epoch near 2**64 wrapped to epoch 0 there.
        ld = loader(seed=7)
        with self.assertRaisesRegex(ValueError, r"epoch=9223372036854775808 is out of range"):
            ld.set_epoch(2 ** 63)
        ld.set_epoch(2 ** 63 - 1)
        self.assertEqual({b.epoch for b in ld}, {2 ** 63 - 1})
        # The last epoch's end is final: the state stays there (it said epoch 2**63, which
        # load_state_dict refused), and another iter() has nothing to give.
        self.assertEqual(ld.epoch, 2 ** 63 - 1)
        end = ld.state_dict()
        self.assertEqual((end["epoch"], end["next_batch"]), (2 ** 63 - 1, len(ld)))
        self.assertEqual(epoch_ids(ld), [])
        again = loader(seed=7)
        again.load_state_dict(end)
        self.assertEqual(epoch_ids(again), [])
        s = loader(seed=7).state_dict()
        s["epoch"] = 2 ** 63
        with self.assertRaisesRegex(ValueError, r"epoch=9223372036854775808 is not an int"):
            loader(seed=7).load_state_dict(s)
        s["epoch"] = 2 ** 63 - 1
        new = loader(seed=7)
        new.load_state_dict(s)
        self.assertEqual({b.epoch for b in new}, {2 ** 63 - 1})

    def test_mismatching_options_are_refused(self):
        s = loader(seed=7).state_dict()
        # batch_size and world_size may change (elastic resume: test_elastic.py)
        for kw, name in (({"seed": 8}, "seed"), ({"shuffle": "none"}, "shuffle"),
                         ({"drop_last": True}, "drop_last"), ({"uneven": "drop"}, "uneven")):
            kw.setdefault("seed", 7)
            with self.assertRaisesRegex(ValueError, name):
                loader(**kw).load_state_dict(s)
        with self.assertRaisesRegex(ValueError, "lacks"):
            loader(seed=7).load_state_dict({"epoch": 0})

    def test_rank_is_not_part_of_the_match(self):
        s = loader(seed=7, rank=0, world_size=2).state_dict()
        loader(seed=7, rank=1, world_size=2).load_state_dict(s)

    def test_the_state_records_the_manifests_dataset_id(self):
        with open(os.path.join(DS, "manifest.sfm"), "rb") as f:
            dataset_id = int.from_bytes(f.read(64)[48:56], "little")  # SPEC.md, manifest header
        with shardfeed.open(DS) as ds:
            self.assertEqual(ds.dataset_id, dataset_id)
        self.assertEqual(loader().state_dict()["dataset_id"], dataset_id)

    def test_a_state_of_another_dataset_is_refused(self):
        # As many samples, the same fields and options; other keys and values: only the
        # dataset_id tells the two apart.
        src = os.path.join(TMP, "other-npy")
        write_samples(src, N, seed=1, extra={"flag": lambda i: np.array([i % 2 == 0, True])})
        rekey(src, 1000)
        other = pack(src, os.path.join(TMP, "other"), "--align", "64", "--shard-size", "40KiB")
        with shardfeed.open(DS) as a, shardfeed.open(other) as b:
            a_id, b_id = a.dataset_id, b.dataset_id
            self.assertEqual(len(a), len(b))
        self.assertNotEqual(a_id, b_id)
        ld = loader(seed=7)
        it = iter(ld)
        next(it), next(it)
        state = json.loads(json.dumps(ld.state_dict()))
        with self.assertRaisesRegex(ValueError, "does not match this Loader.*"
                                    f"dataset_id is {a_id:#018x} in the state but {b_id:#018x} "
                                    "here"):
            shardfeed.Loader(other, B, seed=7, output="numpy").load_state_dict(state)
        # The same inputs packed again with the same options are the same dataset.
        again = pack(SRC, os.path.join(TMP, "again"), "--align", "64", "--shard-size", "40KiB")
        new = shardfeed.Loader(again, B, seed=7, output="numpy")
        new.load_state_dict(state)
        self.assertEqual(epoch_ids(new), epoch_ids(loader(seed=7))[2:])

    def test_state_dict_after_close(self):
        # A training script may close the Loader (or leave its with block) and then write
        # its checkpoint: the state is the one it had before close().
        full = epoch_ids(loader(seed=7))
        for asked_before in (False, True):  # the dataset's size and id found before or after
            with self.subTest(asked_before=asked_before):
                with loader(seed=7) as ld:
                    it = iter(ld)
                    next(it), next(it)
                    before = ld.state_dict() if asked_before else None
                    spe = ld.samples_per_epoch
                self.assertTrue(ld.closed)
                state = ld.state_dict()
                if before is None:
                    ref = loader(seed=7)
                    it = iter(ref)
                    next(it), next(it)
                    before = ref.state_dict()
                self.assertEqual(state, before)
                self.assertEqual(ld.samples_per_epoch, spe)
                new = loader(seed=7)
                new.load_state_dict(state)
                self.assertEqual(epoch_ids(new), full[2:])
                with self.assertRaisesRegex(ValueError, "the Loader is closed"):
                    ld.load_state_dict(state)

    def test_the_state_describes_the_dataset_read_even_once_the_path_holds_another(self):
        # The state's num_samples and dataset_id come from the files the reader opened. They
        # were found by opening the path again on the first state_dict(): after close() with
        # the folder moved that failed (no manifest), and with the folder replaced by another
        # dataset the state named that one while the batches came from the first.
        base = scratch("loader-state-")
        self.addCleanup(remove, base)
        first, other = os.path.join(base, "first"), os.path.join(base, "other")
        shutil.copytree(DS, first)
        write_samples(os.path.join(base, "other-npy"), 37, shape=(2,), seed=5)
        pack(os.path.join(base, "other-npy"), other)
        ids = {}
        for p in (first, other):
            with shardfeed.open(p) as ds:
                ids[p] = (len(ds), ds.dataset_id)
        ld = shardfeed.Loader(first, 8, seed=7, output="numpy")
        it = iter(ld)
        next(it)
        os.rename(first, first + ".old")
        os.rename(other, first)
        state = ld.state_dict()
        self.assertEqual((state["num_samples"], state["dataset_id"]), ids[first])
        next(it)
        ld.close()
        os.rename(first, other)
        self.assertEqual(ld.state_dict()["next_batch"], 2)  # the path holds nothing now

    def test_a_state_without_dataset_id_still_loads(self):
        # as an older shardfeed saved it, before states recorded the dataset's id
        full = epoch_ids(loader(seed=7))
        ld = loader(seed=7)
        it = iter(ld)
        next(it), next(it)
        state = ld.state_dict()
        del state["dataset_id"]
        new = loader(seed=7)
        new.load_state_dict(state)
        self.assertEqual(epoch_ids(new), full[2:])


class Ranks(unittest.TestCase):
    def check_world(self, world, **kw):
        single = sum(epoch_ids(loader(seed=5, **kw)), [])
        per_rank = [epoch_ids(loader(seed=5, rank=r, world_size=world, **kw)) for r in range(world)]
        nb = len(per_rank[0])
        for r in range(world):
            self.assertEqual(len(per_rank[r]), nb, f"rank {r} batch count")
            self.assertEqual(len(loader(seed=5, rank=r, world_size=world, **kw)), nb)
        # (batch, rank) order concatenated is the single-process order S,
        # plus wrap-around padding S[0], S[1], ... (SPEC: sampler rules)
        cat = [i for j in range(nb) for r in range(world) for i in per_rank[r][j]]
        m = min(N, len(cat))
        self.assertEqual(cat[:m], single[:m])
        return cat, single, per_rank

    def test_world_2_and_3_pad(self):
        for world in (2, 3):
            cat, single, per_rank = self.check_world(world)
            self.assertEqual(set(cat), set(range(N)), "complete")
            pad = len(cat) - N
            self.assertLess(pad, world)
            self.assertEqual(cat[N:], single[:pad], "padding wraps around to the epoch's start")
            sizes = {sum(len(b) for b in rb) for rb in per_rank}
            self.assertEqual(len(sizes), 1, "same samples on every rank")
            # disjoint apart from the padding
            self.assertEqual(len(cat) - len(set(cat)), pad)

    def test_world_3_drop(self):
        cat, single, _ = self.check_world(3, uneven="drop")
        self.assertEqual(len(cat), len(set(cat)), "disjoint")
        self.assertEqual(cat, single[:len(cat)])
        self.assertGreater(len(cat), N - 3)

    def test_env_defaults(self):
        code = ("import json, shardfeed; l = shardfeed.Loader(%r, %d, seed=5, output='numpy'); "
                "print(json.dumps([l.rank, l.world_size, [b.ids.tolist() for b in l]]))" % (DS, B))
        env = dict(os.environ, RANK="1", WORLD_SIZE="3")
        p = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        rank, world, ids = json.loads(p.stdout)
        self.assertEqual((rank, world), (1, 3))
        self.assertEqual(ids, epoch_ids(loader(seed=5, rank=1, world_size=3)))
        # explicit arguments win over the environment
        code2 = ("import shardfeed; l = shardfeed.Loader(%r, %d, rank=0, world_size=1, "
                 "output='numpy'); print(l.rank, l.world_size, len(l))" % (DS, B))
        p = subprocess.run([PYTHON, "-c", code2], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["0", "1", str(len(loader()))])
        # a bad value names the variable
        env = dict(os.environ, RANK="x", WORLD_SIZE="2")
        p = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("RANK", p.stderr)
        env = dict(os.environ, RANK="2", WORLD_SIZE="2")
        p = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("RANK (environment) = 2", p.stderr)

    def test_env_ignored_when_absent(self):
        saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
        try:
            ld = loader()
            self.assertEqual((ld.rank, ld.world_size), (0, 1))
        finally:
            os.environ.update(saved)


class Lifetime(unittest.TestCase):
    def expected(self, ids, field="img"):
        ds = shardfeed.open(DS)
        return np.stack([load_source(SRC, field, ds.key(int(i))) for i in ids])

    def check_outlives(self, output):
        # 3 slots: `first` pins one, the loop variable and the next batch use two
        ld = loader(seed=9, output=output, prefetch=3)
        reader = ld._reader
        first = None
        for b in ld:
            if first is None:
                first, first_ids = b["img"], as_numpy(b.ids).copy()
        # the first tensor outlived its step, the loader's later reads (which
        # cycled through the other slots many times) and the loader itself
        del b, ld
        gc.collect()
        self.assertFalse(reader.freed)
        np.testing.assert_array_equal(as_numpy(first), self.expected(first_ids))
        self.assertEqual(reader.live, 1)
        del first
        gc.collect()
        self.assertEqual(reader.live, 0)
        self.assertTrue(reader.freed)

    def test_a_batch_copies_and_pickles(self):
        # copy.deepcopy(batch) and pickle raised "cannot pickle 'module' object" (the Loader's
        # converter), where "copy what you keep" asks for exactly that. The copies are Batches
        # with the same fields and attributes, and keep no slot.
        for output in ("numpy",) + (("torch",) if HAVE_TORCH else ()):
            ld = loader(seed=9, output=output, prefetch=2)
            reader = ld._reader
            it = iter(ld)
            next(it)
            b = next(it)
            want = {k: as_numpy(v).copy() for k, v in b.items()}
            ids = as_numpy(b.ids).copy()
            copies = [copy.deepcopy(b), pickle.loads(pickle.dumps(b)), copy.copy(b)]
            for c in copies:
                self.assertIsInstance(c, type(b))
                self.assertEqual((c.epoch, c.index, c.size, c.substituted), (0, 1, b.size, 0))
                np.testing.assert_array_equal(as_numpy(c.ids), ids)
                np.testing.assert_array_equal(as_numpy(c.source_ids), ids)
                np.testing.assert_array_equal(as_numpy(c.sources), ids * 0)
                self.assertEqual(sorted(c.keys()), sorted(want))
                for k, v in want.items():
                    np.testing.assert_array_equal(as_numpy(c[k]), v)
            np.testing.assert_array_equal(as_numpy(copies[0]["img"]), self.expected(ids))
            del b, c, copies[2]  # the shallow copy shares the batch's tensors
            gc.collect()
            self.assertEqual(reader.live, 0)  # the deep copies hold no slot
            for _ in it:  # and the loader reads on through both slots
                pass
            for c in copies:
                np.testing.assert_array_equal(as_numpy(c["img"]), want["img"])

    def test_numpy_outlives_step_and_loader(self):
        self.check_outlives("numpy")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_torch_outlives_step_and_loader(self):
        self.check_outlives("torch")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_views_keep_the_batch(self):
        ld = loader(seed=9, output="torch", prefetch=2)
        it = iter(ld)
        b = next(it)
        view = b["img"][3:5, 1]  # a view of a view
        ids = b.ids[3:5].clone()
        del b
        for _ in range(4):  # would reuse the slot if the view did not hold it
            next(it)
        np.testing.assert_array_equal(view.numpy(), self.expected(ids)[:, 1])

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_tensor_freed_in_another_thread(self):
        ld = loader(output="torch", prefetch=2)
        it = iter(ld)
        box = [next(it)["img"]]
        t = threading.Thread(target=box.clear)
        t.start()
        t.join()
        for _ in range(3):
            next(it)
        self.assertEqual(ld._reader.live, 0)

    def test_ids_read_after_the_slot_is_reused(self):
        # Batch.ids and source_ids are made on first use, from copies taken with the batch:
        # read after the batch's fields are gone and its slot has held other batches, they
        # are still this batch's, and keeping them (or the Batch) keeps no slot.
        want = [as_numpy(b.ids).tolist() for b in loader(seed=4, prefetch=2)]
        kept = []
        for b in loader(seed=4, prefetch=2):
            b.clear()  # the fields, and so the slot, go back
            kept.append(b)
        self.assertEqual([as_numpy(b.ids).tolist() for b in kept], want)
        self.assertEqual([as_numpy(b.source_ids).tolist() for b in kept], want)
        self.assertEqual([b.size for b in kept], [len(w) for w in want])

    @unittest.skipUnless(hasattr(os, "fork"), "no fork")
    def test_a_forked_child_cannot_use_the_parents_reader(self):
        # The extension keeps this process's id instead of asking the kernel every batch:
        # after a fork the child must still see the reader as another process's (its I/O
        # threads do not exist there), and the parent's reader must go on unharmed.
        ld = loader(seed=5, prefetch=2)
        it = iter(ld)
        first = as_numpy(next(it).ids).tolist()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report in one byte, never return into unittest
            code = b"?"
            try:
                next(it)
                code = b"n"  # read a batch through the parent's reader
            except RuntimeError as e:
                code = b"y" if "opened in another process" in str(e) else b"m"
            except BaseException:
                code = b"e"
            os.write(w, code)
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            got = f.read()
        os.waitpid(pid, 0)
        self.assertEqual(got, b"y")
        rest = [as_numpy(b.ids).tolist() for b in it]
        whole = [as_numpy(b.ids).tolist() for b in loader(seed=5)]
        self.assertEqual([first] + rest, whole)

    @unittest.skipUnless(hasattr(os, "fork"), "no fork")
    def test_a_forked_child_neither_hangs_nor_reads_the_parents_state(self):
        # A Loader's lock, or its reader's mutex, held by a thread of the parent at the fork
        # stays held for ever in the child: close() and stats() took them and hung there
        # (close() is what a worker's atexit or a `with` block calls). Here a parent thread
        # holds the Loader's lock across the fork, deterministically.
        for mix in (False, True):
            with self.subTest(mix=mix):
                ld = (shardfeed.Loader([DS, DS], B, weights=[1, 1], output="numpy") if mix
                      else loader(seed=5))
                next(iter(ld))
                held, release = threading.Event(), threading.Event()

                def hold():
                    with ld._lock:
                        held.set()
                        release.wait()

                t = threading.Thread(target=hold)
                t.start()
                held.wait()
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the child: one byte per call, never return into unittest
                    out = b""
                    for call in (ld.stats, lambda: ld.set_epoch(1), lambda: iter(ld), ld.close):
                        try:
                            call()
                            out += b"c" if ld.closed else b"?"
                        except RuntimeError as e:
                            out += b"y" if "another process" in str(e) else b"m"
                        except BaseException:
                            out += b"e"
                    os.write(w, out)
                    os._exit(0)
                os.close(w)
                release.set()
                t.join()
                with os.fdopen(r, "rb") as f:
                    ready = select.select([f], [], [], 30)[0]
                    got = f.read() if ready else b"hung"
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.assertEqual(got, b"yyyc")
                ld.set_epoch(1)  # the parent's Loader goes on
                self.assertEqual(sum(1 for _ in ld), len(ld))
                ld.close()

    def test_close_with_batches_alive(self):
        ld = loader(seed=1)
        b = next(iter(ld))
        img = b["img"]
        ids = b.ids.copy()
        ld.close()
        self.assertTrue(ld.closed)
        with self.assertRaises(ValueError):
            iter(ld)
        del b
        gc.collect()
        np.testing.assert_array_equal(img, self.expected(ids))
        reader = ld._reader
        self.assertFalse(reader.freed)
        del img
        gc.collect()
        self.assertTrue(reader.freed)

    def test_close_during_a_call_frees_the_reader_when_the_call_returns(self):
        # trace_write into a FIFO waits (GIL released) until the FIFO is read: a
        # close() meanwhile must leave the reader to the call, and the call's end free it.
        ld = loader(batch_size=1)
        reader = ld._reader
        ld.trace_start()
        self.assertEqual(len(epoch_ids(ld)), N)
        fifo = os.path.join(scratch("fifo-"), "trace.json")
        os.mkfifo(fifo)
        errors = []

        def write():
            try:
                ld.trace_write(fifo)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        t = threading.Thread(target=write)
        t.start()
        while t.is_alive():  # until the call runs: then the reader refuses other calls
            try:
                reader.state()
            except RuntimeError:
                break
            t.join(0.001)
        self.assertTrue(t.is_alive(), errors)
        ld.close()
        self.assertFalse(reader.freed)
        with open(fifo, "rb") as f:
            trace = json.loads(f.read())
        t.join()
        self.assertEqual(errors, [])
        self.assertIn("traceEvents", trace)
        self.assertTrue(reader.freed)
        remove(os.path.dirname(fifo))

    def check_too_many_held(self, output):
        ld = loader(prefetch=3, output=output)
        it = iter(ld)
        held = [next(it) for _ in range(3)]
        with self.assertRaises(shardfeed.Error) as cm:
            next(it)
        e = cm.exception
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual(e.code, shardfeed.E_STATE)
        self.assertIn("prefetch", str(e))
        # giving one back lets the same iterator go on, with the batch it failed on
        held.pop(0)
        gc.collect()
        self.assertEqual(next(it).index, 3)

    def test_too_many_held_numpy(self):
        self.check_too_many_held("numpy")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_too_many_held_torch(self):
        self.check_too_many_held("torch")

    def test_too_many_held_by_a_list(self):
        with self.assertRaisesRegex(RuntimeError, "holds all 2 batch slots"):
            list(loader(prefetch=2))

    def test_for_loop_with_two_slots(self):
        self.assertEqual(len(epoch_ids(loader(prefetch=2))), len(loader()))


class Threads(unittest.TestCase):
    def test_gil_released_while_waiting(self):
        # Another Python thread keeps running while the loader reads.
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1

        t = threading.Thread(target=spin)
        t.start()
        try:
            for _ in range(3):
                epoch_ids(loader(verify=True))
        finally:
            stop.set()
            t.join()
        self.assertGreater(ticks[0], 0)

    def test_iterated_in_a_worker_thread(self):
        out = []
        ld = loader(seed=4)
        t = threading.Thread(target=lambda: out.append(epoch_ids(ld)))
        t.start()
        t.join()
        self.assertEqual(out[0], epoch_ids(loader(seed=4)))


class SharedIterator(unittest.TestCase):
    def test_threads_sharing_an_iterator_get_each_batch_of_the_epoch_once(self):
        # A thread past the "done?" check while another took the epoch's end read on into
        # the next epoch: batch (1, 0) handed out in epoch 0 (6 of 40 trials), then again by
        # the next iter(), which state_dict() said was batch 1.
        n = (N + B - 1) // B
        for trial in range(30):
            ld = loader(batch_size=B, shuffle="global", seed=2, prefetch=8)
            got, errors = drain_shared(iter(ld), lambda b: (b.epoch, b.index))
            self.assertEqual(errors, [])
            self.assertEqual(sorted(got), [(0, i) for i in range(n)], f"trial {trial}")
            self.assertEqual((ld.epoch, ld.state_dict()["next_batch"]), (1, 0))
            first = next(iter(ld))
            self.assertEqual((first.epoch, first.index), (1, 0))
            del first
            ld.close()


class Device(unittest.TestCase):
    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_cuda(self):
        if torch.cuda.is_available():
            ld = loader(output="torch", device="cuda")
            b = next(iter(ld))
            self.assertEqual(b["img"].device.type, "cuda")
            return
        for dev in ("cuda", "cuda:0", torch.device("cuda", 1)):
            with self.assertRaisesRegex(shardfeed.Error, "no CUDA device") as cm:
                loader(output="torch", device=dev)
            self.assertEqual(cm.exception.code, shardfeed.E_UNSUPPORTED)
        with self.assertRaisesRegex(ValueError, "expected 'cpu', 'cuda'"):
            loader(output="torch", device="meta")

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_local_rank_picks_the_cuda_device(self):
        class FakeCuda:
            @staticmethod
            def is_available():
                return True

            @staticmethod
            def device_count():
                return 4

            @staticmethod
            def current_device():
                return 2

        class FakeTorch:
            device = torch.device
            cuda = FakeCuda

        from shardfeed._device import resolve_device
        saved = os.environ.get("LOCAL_RANK")
        try:
            os.environ["LOCAL_RANK"] = "3"
            self.assertEqual(resolve_device("cuda", FakeTorch, "torch").name, "cuda:3")
            self.assertEqual(resolve_device("cuda:1", FakeTorch, "torch").name, "cuda:1")  # explicit wins
            del os.environ["LOCAL_RANK"]
            # "cuda" is torch's current device, as torch.device("cuda") means
            self.assertEqual(resolve_device("cuda", FakeTorch, "torch").name, "cuda:2")
            self.assertIsNone(resolve_device("cpu", FakeTorch, "torch"))
            with self.assertRaisesRegex(shardfeed.Error, "only 4 CUDA"):
                resolve_device("cuda:4", FakeTorch, "torch")
        finally:
            os.environ.pop("LOCAL_RANK", None)
            if saved is not None:
                os.environ["LOCAL_RANK"] = saved

    def test_cpu_device_is_the_default(self):
        self.assertEqual(loader().device, "cpu")


class Reference(unittest.TestCase):
    """help(shardfeed.Loader) describes each parameter, and help(shardfeed) includes it."""

    def described(self, text):
        """The parameter names of the "- name[, name...]:" entries of `text`."""
        names = set()
        for entry in re.findall(r"^\s*\|?\s*- ([a-z_]+(?:, [a-z_]+)*):", text, re.M):
            names.update(entry.split(", "))
        return names

    def test_every_loader_parameter_is_described(self):
        params = set(inspect.signature(shardfeed.Loader).parameters) - {"path"}
        doc = inspect.getdoc(shardfeed.Loader)
        self.assertEqual(params - self.described(doc), set())
        self.assertIn("`path`", doc)

    def test_help_of_the_package_includes_the_loader_parameters(self):
        text = pydoc.render_doc(shardfeed, renderer=pydoc.plaintext)
        params = set(inspect.signature(shardfeed.Loader).parameters) - {"path"}
        self.assertEqual(params - self.described(text), set())
        self.assertIn("Inspecting a dataset", text)


if __name__ == "__main__":
    unittest.main()
