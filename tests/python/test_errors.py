"""shardfeed.Loader and shardfeed.open: errors (missing data, corrupt records,
bad options, misuse). See sfpytest.py for how to run it by hand."""
import gc
import os
import shutil
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import (HAVE_TORCH, BusyReader, ReaderWithHook, as_numpy, load_source, pack, remove, scratch, shardfeed,  # noqa: E402
                      torch, write_samples)
import sfwrite  # noqa: E402

N = 120
B = 8
BAD = 37  # the sample whose record is corrupted
TMP = SRC = DS = BAD_DS = BAD_SHARD = None


def setUpModule():
    global TMP, SRC, DS, BAD_DS, BAD_SHARD
    TMP = scratch("errors-")
    SRC = os.path.join(TMP, "npy")
    write_samples(SRC, N, seed=4)
    DS = pack(SRC, os.path.join(TMP, "ds"), "--align", "64", "--shard-size", "20KiB")
    BAD_DS = os.path.join(TMP, "bad")
    shutil.copytree(DS, BAD_DS)
    # Flip one byte in the middle of sample BAD's image, in whichever shard holds it.
    ds = shardfeed.open(DS)
    needle = load_source(SRC, "img", ds.key(BAD)).tobytes()
    for s in ds.shards:
        if s.first_sample <= BAD < s.first_sample + s.num_samples:
            BAD_SHARD = s.name
    path = os.path.join(BAD_DS, BAD_SHARD)
    with open(path, "r+b") as f:
        data = f.read()
        at = data.find(needle)
        assert at > 0 and data.find(needle, at + 1) < 0
        f.seek(at + len(needle) // 2)
        f.write(bytes([data[at + len(needle) // 2] ^ 0x40]))
    assert ds.shards[0].name != BAD_SHARD or len(ds.shards) == 1


def tearDownModule():
    remove(TMP)


def loader(path=None, **kw):
    kw.setdefault("output", "numpy")
    kw.setdefault("shuffle", "none")
    return shardfeed.Loader(path or DS, kw.pop("batch_size", B), **kw)


class Missing(unittest.TestCase):
    def test_missing_dir(self):
        missing = os.path.join(TMP, "no-such-dataset")
        for open_it in (lambda: loader(missing), lambda: shardfeed.open(missing)):
            with self.assertRaises(shardfeed.Error) as cm:
                open_it()
            e = cm.exception
            self.assertIsInstance(e, RuntimeError)
            self.assertIn(missing, str(e))
            self.assertEqual(e.errno, 2)  # ENOENT
            self.assertEqual(e.code, -2)

    def test_not_a_dataset(self):
        with self.assertRaises(shardfeed.Error) as cm:
            loader(SRC)
        self.assertIn("manifest", str(cm.exception))

    def test_missing_shard(self):
        d = os.path.join(TMP, "noshard")
        shutil.copytree(DS, d)
        name = shardfeed.open(DS).shards[-1].name
        os.remove(os.path.join(d, name))
        with self.assertRaises(shardfeed.Error) as cm:
            loader(d)
        self.assertIn(name, str(cm.exception))


class Corrupt(unittest.TestCase):
    def test_error_names_the_shard(self):
        ld = loader(BAD_DS, on_corrupt="error")
        got = []
        with self.assertRaises(shardfeed.Error) as cm:
            for b in ld:
                got.append(b.index)
        e = cm.exception
        self.assertEqual(e.code, shardfeed.E_CHECKSUM)
        self.assertIn(BAD_SHARD, str(e))
        self.assertEqual(got, list(range(BAD // B)))  # every batch before the bad one

    def test_skip_substitutes(self):
        ld = loader(BAD_DS, on_corrupt="skip")
        ds = shardfeed.open(DS)
        subs = 0
        for b in ld:
            ids, src = as_numpy(b.ids), as_numpy(b.source_ids)
            self.assertEqual(b["img"].shape[0], B if b.index < len(ld) - 1 else N - (len(ld) - 1) * B)
            for j in range(b.size):
                if ids[j] != src[j]:
                    subs += 1
                    self.assertEqual(ids[j], BAD)
                    self.assertEqual(b.substituted, 1)
                np.testing.assert_array_equal(b["img"][j], load_source(SRC, "img", ds.key(int(src[j]))))
        self.assertEqual(subs, 1)
        self.assertEqual(ld.stats()["corrupt_substitutions"], 1)

    def written(self, name, fields, samples):
        """A dataset written by sfwrite, in one shard."""
        out = os.path.join(TMP, name)
        sfwrite.write_dataset(out, fields, samples, align=64)
        return out

    def flip(self, ds, sample, entry_size):
        """Flips the first payload byte of `sample` of a one-shard dataset, found through the
        index (SPEC.md: the footer gives index_offset; an entry starts with the record's
        offset; entry_size is 32 + 8 per variable-length or inline field)."""
        path = os.path.join(ds, "shard-000000.sfs")
        with open(path, "r+b") as f:
            f.seek(-64, os.SEEK_END)
            index_offset = struct.unpack("<Q", f.read(8))[0]
            f.seek(index_offset + sample * entry_size)
            at = struct.unpack("<Q", f.read(8))[0]
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0x55]))

    def test_a_substitute_passes_the_same_value_check(self):
        # Sample 6 stores a bool byte of 2 under a good checksum: refused as any read is, also
        # as the substitute of damaged sample 5 (it was handed out before).
        fields = [("m", "bool", sfwrite.FIXED, (4,)), ("y", "int64", sfwrite.INLINE, ())]
        samples = [{"m": np.array([1, 0, 1, i % 2], np.uint8), "y": np.int64(i)} for i in range(8)]
        samples[6]["m"] = np.array([2, 0, 1, 0], np.uint8)
        ds = self.written("bool-values", fields, samples)
        self.flip(ds, 5, entry_size=40)
        for engine in ("pread", "mmap"):
            with loader(ds, on_corrupt="skip", engine=engine) as ld:
                b = next(iter(ld))
                self.assertEqual(as_numpy(b.source_ids).tolist(), [0, 1, 2, 3, 4, 7, 7, 7], engine)
                self.assertLessEqual(int(b["m"].view(np.uint8).max()), 1, engine)

    def test_when_nothing_can_substitute_the_error_names_the_damaged_sample(self):
        fields = [("v", "bytes", sfwrite.VAR, ()), ("y", "int64", sfwrite.INLINE, ())]
        samples = [{"v": bytes([65 + i]) * (10 + 10 * i), "y": np.int64(i)} for i in range(5)]
        ds = self.written("nothing-left", fields, samples)
        for i in range(5):
            self.flip(ds, i, entry_size=48)
        with loader(ds, on_corrupt="skip", batch_size=2) as ld:
            with self.assertRaises(shardfeed.Error) as cm:
                next(iter(ld))
        msg = str(cm.exception)
        self.assertIn("record 0 (sample 0)", msg)  # not the last candidate tried
        self.assertIn("no substitute among the 4 samples that follow sample 0: 4 damaged, "
                      "0 too long", msg)

    def test_verify_off_reads_the_bytes_as_they_are(self):
        ld = loader(BAD_DS, verify=False)
        ds = shardfeed.open(DS)
        for b in ld:
            ids = as_numpy(b.ids)
            for j in range(b.size):
                same = np.array_equal(b["img"][j], load_source(SRC, "img", ds.key(int(ids[j]))))
                self.assertEqual(same, ids[j] != BAD)

    def test_error_then_retry(self):
        ld = loader(BAD_DS)
        it = iter(ld)
        for _ in range(BAD // B):
            next(it)
        for _ in range(2):  # the position is unchanged after an error
            with self.assertRaises(shardfeed.Error):
                next(it)
        self.assertEqual(ld.state_dict()["next_batch"], BAD // B)

    def test_a_shard_mended_after_the_error_is_read_by_the_next_call(self):
        # The retry reads when the next call comes, not when the error is handed out.
        for engine in ("pread", "mmap", "uring"):
            mended = os.path.join(TMP, "mended-" + engine)
            shutil.copytree(BAD_DS, mended)
            with loader(mended, engine=engine) as ld:
                it = iter(ld)
                for _ in range(BAD // B):
                    next(it)
                with self.assertRaises(shardfeed.Error):
                    next(it)
                with open(os.path.join(DS, BAD_SHARD), "rb") as good, \
                        open(os.path.join(mended, BAD_SHARD), "r+b") as f:
                    f.write(good.read())  # in place: the same inode, maps included
                b = next(it)
                self.assertEqual(b.index, BAD // B, engine)
                ds = shardfeed.open(DS)
                for j, i in enumerate(as_numpy(b.ids)):
                    np.testing.assert_array_equal(b["img"][j], load_source(SRC, "img", ds.key(int(i))))

    def test_random_access_checks_the_record(self):
        ds = shardfeed.open(BAD_DS)
        with self.assertRaises(shardfeed.Error) as cm:
            ds[BAD]
        self.assertEqual(cm.exception.code, shardfeed.E_CHECKSUM)
        ds[BAD - 1]
        unchecked = shardfeed.open(BAD_DS, verify=False)[BAD]["img"]
        self.assertFalse(np.array_equal(unchecked, load_source(SRC, "img", ds.key(BAD))))


class Options(unittest.TestCase):
    def test_bad_values(self):
        for kw, exc, text in (
                ({"batch_size": 0}, ValueError, "batch_size"),
                ({"batch_size": 2.5}, TypeError, "batch_size"),
                ({"shuffle": "random"}, ValueError, "shuffle"),
                ({"on_corrupt": "ignore"}, ValueError, "on_corrupt"),
                ({"prefetch": 0}, ValueError, "prefetch"),
                ({"rank": 2, "world_size": 2}, ValueError, "rank"),
                ({"world_size": 0}, ValueError, "world_size"),
                ({"output": "jax"}, ValueError, "output"),
                ({"varlen": "ragged"}, ValueError, "varlen"),
                ({"engine": "aio"}, ValueError, "engine"),
                ({"seed": "1"}, TypeError, "seed")):
            with self.assertRaisesRegex(exc, text, msg=str(kw)):
                loader(**kw)

    def test_limits_are_the_librarys(self):
        # The Loader checks against the C library's one table of bounds
        # (shardfeed/params.h), not numbers of its own: the largest value
        # passes the Python check (and the C one), one more does not.
        bounds = shardfeed._shardfeed.param_bounds()
        for kw, key in (("batch_size", "reader.batch_size"), ("prefetch", "reader.prefetch"),
                        ("io_threads", "reader.io_threads")):
            lo, hi = bounds[key]
            self.assertGreaterEqual(lo, 1, key)
            with self.assertRaisesRegex(ValueError, kw):
                loader(**{kw: hi + 1})
        ld = loader(prefetch=bounds["reader.prefetch"][1] // 64, io_threads=bounds["reader.io_threads"][1] // 64)
        self.assertEqual(ld.stats()["io_threads"], bounds["reader.io_threads"][1] // 64)

    def test_stats_say_why_direct_is_what_it_is(self):
        # direct="auto" on this small dataset stays buffered and says why.
        st = loader().stats()
        self.assertFalse(st["direct"])
        self.assertTrue(st["direct_reason"].startswith("auto: buffered ("), st["direct_reason"])
        self.assertIn("off", loader(direct=False).stats()["direct_reason"])

    def test_c_validation_reaches_python(self):
        with self.assertRaises(shardfeed.Error) as cm:
            shardfeed._shardfeed.Reader(DS, batch_size=4, shuffle=7)
        self.assertEqual(cm.exception.code, shardfeed.E_INVALID)
        self.assertIn("shuffle", str(cm.exception))

    def test_shuffle_bool(self):
        self.assertEqual(loader(shuffle=True).shuffle, "global")
        self.assertEqual(loader(shuffle=False).shuffle, "none")

    def test_seed_range(self):
        a = [as_numpy(b.ids).tolist() for b in loader(shuffle="global", seed=-1)]
        b = [as_numpy(b.ids).tolist() for b in loader(shuffle="global", seed=2 ** 64 - 1)]
        self.assertEqual(a, b)


class Misuse(unittest.TestCase):
    def test_closed(self):
        ld = loader()
        ld.close()
        ld.close()  # twice is fine
        for f in (lambda: iter(ld), lambda: ld.set_epoch(1), lambda: ld.load_state_dict({})):
            with self.assertRaisesRegex(ValueError, "closed"):
                f()
        self.assertIn("batches", ld.stats())  # still answers

    def test_closed_midway(self):
        ld = loader()
        it = iter(ld)
        next(it)
        ld.close()
        with self.assertRaises(RuntimeError):
            next(it)

    def test_set_epoch_retires_iterators(self):
        ld = loader()
        it = iter(ld)
        next(it)
        ld.set_epoch(3)
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            next(it)
        self.assertEqual(next(iter(ld)).epoch, 3)

    def test_a_seek_from_another_thread_during_a_read_stands(self):
        # reader.next() lets go of the GIL: a load_state_dict() or set_epoch() from another
        # thread may come while it runs. The wrapper makes that happen inside the call, every
        # time. The position it set must stand: the iterator is retired and the batch it was
        # reading dropped; before, the iterator then counted that batch (or the epoch's end)
        # over the new position, and the next epoch skipped batches silently.
        ld = loader(shuffle="global", seed=1)
        whole = [as_numpy(b.ids).tolist() for b in ld]
        it = iter(ld)
        next(it), next(it)
        saved = ld.state_dict()  # epoch 1 from batch 2
        ld._reader = ReaderWithHook(ld._reader)
        hook = ld._reader.hook
        for _ in it:  # epoch 1 to its end
            pass
        self.assertEqual(ld.epoch, 2)
        for at_end in (False, True):
            with self.subTest(at_end=at_end):
                it = iter(ld)
                if at_end:
                    for _ in range(len(ld)):
                        next(it)
                hook.append(lambda: ld.load_state_dict(saved))
                with self.assertRaisesRegex(RuntimeError, "replaced"):
                    next(it)
                self.assertEqual((ld.epoch, ld.state_dict()["next_batch"]), (1, 2))
                rest = [(b.epoch, as_numpy(b.ids).tolist()) for b in ld]
                ref = loader(shuffle="global", seed=1)
                ref.set_epoch(1)
                self.assertEqual(rest, [(1, ids) for ids in [as_numpy(b.ids).tolist() for b in ref][2:]])
        it = iter(ld)
        hook.append(lambda: ld.set_epoch(7))
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            next(it)
        self.assertEqual([b.epoch for b in ld][:1], [7])
        self.assertEqual(len(whole), len(ld))

    def test_numpy_and_torch_integers_are_ints(self):
        # NumPy's and torch's integer scalars are integers wherever the Loader takes one (they
        # raised TypeError, and world_size=np.int64(1) "world_size = 1: must be an int >= 1");
        # what the Loader keeps and state_dict() reports are Python ints. Bools stay refused.
        ints = [np.int64, np.uint32] + ([lambda v: torch.tensor(v)] if HAVE_TORCH else [])
        ref = loader(batch_size=8, seed=3, shuffle="global")
        ref.set_epoch(1)
        want = [as_numpy(b.ids).tolist() for b in ref]
        for make in ints:
            ld = loader(batch_size=make(8), seed=make(3), rank=make(0), world_size=make(1),
                        shuffle="global", block_size=make(16))
            ld.set_epoch(make(1))
            self.assertEqual([as_numpy(b.ids).tolist() for b in ld], want, make)
            state = ld.state_dict()
            for k in ("batch_size", "seed", "world_size", "rank", "epoch", "block_size"):
                self.assertIs(type(state[k]), int, k)
        for b in (True, np.bool_(True)) + ((torch.tensor(True),) if HAVE_TORCH else ()):
            with self.assertRaisesRegex(TypeError, "batch_size must be an int"):
                loader(batch_size=b)
            with self.assertRaisesRegex(TypeError, "epoch must be an int"):
                ref.set_epoch(b)
        with self.assertRaisesRegex(ValueError, r"world_size = True: must be an int >= 1"):
            loader(world_size=True)

    def test_an_iter_that_fails_keeps_the_loaded_position(self):
        # iter() from a second thread while one reads fails ("in use by another thread"). It
        # had taken the position load_state_dict() set already: state_dict() still said it,
        # while the next iter() started the epoch from batch 0 (a checkpoint written between
        # recorded a position never used). BusyReader makes restore() fail every time.
        ld = loader(shuffle="global", seed=1)
        ld.load_state_dict({**ld.state_dict(), "epoch": 2, "next_batch": 3})
        real, ld._reader = ld._reader, BusyReader(ld._reader)
        with self.assertRaisesRegex(RuntimeError, "in use by another thread"):
            iter(ld)
        ld._reader = real
        state = ld.state_dict()
        self.assertEqual((state["epoch"], state["next_batch"]), (2, 3))
        b = next(iter(ld))
        self.assertEqual((b.epoch, b.index), (2, 3))
        ref = loader(shuffle="global", seed=1)
        ref.set_epoch(2)
        self.assertEqual(as_numpy(b.ids).tolist(), [as_numpy(r.ids).tolist() for r in ref][3])

    def test_options_that_leave_an_epoch_without_batches_are_refused(self):
        # batch_size x world_size above the dataset's size with the tail dropped: every epoch
        # ended at once, and a training loop ran without data and without an error.
        for kw in (dict(batch_size=N + 1, drop_last=True),
                   dict(batch_size=N // 2 + 1, world_size=2, rank=1, drop_last=True)):
            with self.subTest(**kw):
                with self.assertRaisesRegex(shardfeed.Error, "an epoch would have no batch"):
                    loader(**kw)
        self.assertEqual(len(loader(batch_size=N, drop_last=True)), 1)
        self.assertEqual(len(loader(batch_size=N + 1)), 1)  # the last batch kept: short, not lost

    def test_bad_state(self):
        ld = loader()
        s = ld.state_dict()
        s["next_batch"] = len(ld) + 1
        with self.assertRaises(ValueError):
            ld.load_state_dict(s)
        with self.assertRaises(TypeError):
            ld.load_state_dict([1, 2])
        s = ld.state_dict()
        s["version"] = 99
        with self.assertRaisesRegex(ValueError, "version"):
            ld.load_state_dict(s)
        for v in (True, 2.0):  # equal to 1 and 2, but not versions
            s["version"] = v
            with self.assertRaisesRegex(ValueError, "version"):
                ld.load_state_dict(s)

    def test_a_state_whose_batches_do_not_follow_from_its_options(self):
        # An edited state: its batch_size, world_size or num_batches changed alone. It was
        # resumed at a position it never reached (here: the epoch's end, 0 batches left).
        ld = loader()
        it = iter(ld)
        next(it)
        good = ld.state_dict()
        for edit in ({"batch_size": 1000}, {"world_size": 50}, {"num_batches": 10 ** 9,
                                                                 "next_batch": 10 ** 9 - 1}):
            with self.subTest(edit=edit):
                with self.assertRaisesRegex(ValueError, "does not follow from its own"):
                    loader().load_state_dict({**good, **edit})
        # consistent changes (elastic resume) still load
        other = loader(batch_size=5)
        other.load_state_dict(good)
        self.assertGreater(sum(1 for _ in other), 0)

    def test_dataset_index_errors(self):
        ds = shardfeed.open(DS)
        with self.assertRaises(IndexError):
            ds[N]
        with self.assertRaises(IndexError):
            ds[-N - 1]
        with self.assertRaises(KeyError):
            ds.index("no-such-key")
        ds.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            ds[0]

    def test_error_is_catchable_as_runtime_error(self):
        self.assertTrue(issubclass(shardfeed.Error, RuntimeError))
        gc.collect()


if __name__ == "__main__":
    unittest.main()
