"""Mixing datasets: Loader([a, b], batch_size, weights=[...]): the proportions over an epoch,
the values and Batch.sources, determinism by (seed, epoch), the same steps on every rank,
resume, and the errors (fields that differ, bad weights, states of the other kind). See
sfpytest.py for how to run it by hand."""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import (HAVE_TORCH, BusyReader, ReaderWithHook, as_numpy, drain_shared, pack, rekey, remove, scratch, shardfeed,  # noqa: E402
                      torch, write_samples)

NA, NB = 997, 613   # neither a multiple of the batch size
B = 8
TMP = A = BB = None


def setUpModule():
    global TMP, A, BB
    TMP = scratch("mix-")
    write_samples(os.path.join(TMP, "a-npy"), NA, shape=(2,), label=lambda i: i)
    write_samples(os.path.join(TMP, "b-npy"), NB, shape=(2,), seed=1, label=lambda i: 10000 + i)
    A = pack(os.path.join(TMP, "a-npy"), os.path.join(TMP, "a"), "--align", "64")
    BB = pack(os.path.join(TMP, "b-npy"), os.path.join(TMP, "b"), "--align", "64")


def tearDownModule():
    remove(TMP)


def mixed(weights=(0.75, 0.25), **kw):
    kw.setdefault("output", "numpy")
    return shardfeed.Loader([A, BB], kw.pop("batch_size", B), weights=list(weights), **kw)


def steps(ld):
    """(source, ids) of every batch of one epoch."""
    out = []
    for b in ld:
        src = as_numpy(b.sources).tolist()
        out.append((src[0], as_numpy(b.ids).tolist()))
    return out


class Proportions(unittest.TestCase):
    def test_counts_within_one_percent_of_the_weights(self):
        for weights in ((0.75, 0.25), (3, 1), (0.5, 0.5), (0.1, 0.9)):
            with self.subTest(weights=weights):
                ld = mixed(weights)
                per = [0, 0]
                for b in ld:
                    src = as_numpy(b.sources)
                    self.assertEqual(src.dtype, np.int64)
                    self.assertEqual(len(set(src.tolist())), 1)  # a batch comes from one dataset
                    per[int(src[0])] += b.size
                share = per[0] / sum(per)
                want = weights[0] / sum(weights)
                self.assertLess(abs(share - want), 0.01, (per, weights))
                self.assertEqual(sum(per), ld.samples_per_epoch)
                # the dataset that runs out first at its weight gives all its batches, or all
                # but one; none gives more than its epoch
                whole = [(NA + B - 1) // B, (NB + B - 1) // B]
                self.assertTrue(any(c >= w - 1 for c, w in zip(ld.counts, whole)), ld.counts)
                self.assertTrue(all(c <= w for c, w in zip(ld.counts, whole)), ld.counts)
                self.assertEqual(sum(ld.counts), len(ld))

    def test_values_come_from_the_source_dataset(self):
        ds = [shardfeed.open(A), shardfeed.open(BB)]
        seen, count = [set(), set()], [0, 0]
        for b in mixed():
            src = int(as_numpy(b.sources)[0])
            for j, i in enumerate(as_numpy(b.ids).tolist()):
                self.assertEqual(int(as_numpy(b["label"])[j]), int(ds[src][i]["label"]))
                np.testing.assert_array_equal(as_numpy(b["img"])[j], ds[src][i]["img"])
                seen[src].add(i)
                count[src] += 1
        # no sample twice within an epoch of a dataset (no padding at world size 1)
        self.assertEqual([len(s) for s in seen], count)
        self.assertEqual(count[0], NA)  # the dataset that runs out first at 0.75

    @unittest.skipUnless(HAVE_TORCH, "torch not importable")
    def test_torch_sources_and_fields_tuples(self):
        ld = mixed(output="torch", fields=("label", "img"))
        y, x = next(iter(ld))
        self.assertEqual(tuple(x.shape), (B, 2))
        b = next(iter(mixed(output="torch")))
        self.assertIsInstance(b.sources, torch.Tensor)
        dl = torch.utils.data.DataLoader(mixed(output="torch").as_iterable_dataset(),
                                         batch_size=None)
        self.assertEqual(sum(len(b["label"]) for b in dl), mixed().samples_per_epoch)


class Order(unittest.TestCase):
    def test_deterministic_by_seed_and_epoch(self):
        first = steps(mixed(seed=3))
        self.assertEqual(steps(mixed(seed=3)), first)
        self.assertNotEqual(steps(mixed(seed=4)), first)
        ld = mixed(seed=3)
        ld.set_epoch(1)
        e1 = steps(ld)
        self.assertNotEqual([s for s, _ in e1], [s for s, _ in first])
        again = mixed(seed=3)
        steps(again)  # epoch 0, then iter() advances to epoch 1
        self.assertEqual(steps(again), e1)

    def test_every_rank_gets_the_same_steps(self):
        for world in (2, 3):
            with self.subTest(world=world):
                ranks = [steps(mixed(rank=r, world_size=world, seed=5)) for r in range(world)]
                self.assertEqual(len({len(r) for r in ranks}), 1)
                for k in range(len(ranks[0])):
                    self.assertEqual(len({r[k][0] for r in ranks}), 1, f"step {k}")
                    ids = [i for r in ranks for i in r[k][1]]
                    self.assertEqual(len(ids), len(set(ids)), f"step {k}: ranks overlap")


class Resume(unittest.TestCase):
    def test_state_dict_resumes_exactly(self):
        full = steps(mixed(seed=2))
        for k in (0, 1, 37, len(full)):
            ld = mixed(seed=2)
            it = iter(ld)
            for _ in range(k):
                next(it)
            state = ld.state_dict()
            new = mixed(seed=2)
            new.load_state_dict(state)
            self.assertEqual(steps(new), full[k:], f"after {k} batches")
            ref = mixed(seed=2)
            ref.set_epoch(1)
            self.assertEqual(steps(new), steps(ref))

    def test_a_seek_from_another_thread_during_a_read_stands(self):
        # As test_errors' test of one dataset: a set_epoch() that comes while a child's
        # reader.next() runs (GIL released) stands; the batch read meanwhile is dropped.
        ld = mixed(seed=2)
        hook = []
        for child in ld._children:
            child._reader = ReaderWithHook(child._reader)
            child._reader.hook = hook  # one list: whichever child reads next runs it
        it = iter(ld)
        next(it)
        hook.append(lambda: ld.set_epoch(3))
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            next(it)
        self.assertEqual((ld.epoch, ld.state_dict()["next_batch"]), (3, 0))
        ref = mixed(seed=2)
        ref.set_epoch(3)
        self.assertEqual(steps(ld), steps(ref))

    def test_a_loop_that_takes_every_batch_ends_the_epoch(self):
        # As test_loader's: zip(range(len(ld)), ld) replayed epoch 0 every time.
        ref = mixed(seed=2)
        want = [steps(ref) for _ in range(2)]
        ld = mixed(seed=2)
        got = []
        for e in range(2):
            got.append([(int(as_numpy(b.sources)[0]), as_numpy(b.ids).tolist())
                        for _, b in zip(range(len(ld)), ld)])
            self.assertEqual(ld.epoch, e + 1)
        self.assertEqual(got, want)

    def test_an_iter_that_fails_keeps_the_loaded_position(self):
        # As test_errors' test of one dataset: an iter() that fails in a child (its reader in
        # use by another thread) leaves the mix's loaded position for the next iter().
        full = steps(mixed(seed=2))
        ld = mixed(seed=2)
        it = iter(ld)
        for _ in range(5):
            next(it)
        state = ld.state_dict()
        ld = mixed(seed=2)
        ld.load_state_dict(state)
        real = [c._reader for c in ld._children]
        for c in ld._children:
            c._reader = BusyReader(c._reader)
        with self.assertRaisesRegex(RuntimeError, "in use by another thread"):
            iter(ld)
        for c, r in zip(ld._children, real):
            c._reader = r
        self.assertEqual(ld.state_dict()["next_batch"], 5)
        self.assertEqual(steps(ld), full[5:])

    def test_a_seek_while_a_batch_is_being_finished_stands(self):
        # After the child's read, the mix still makes the batch (its fields, its sources)
        # before counting it. A set_epoch() from another thread in that window was overwritten
        # by the count (the state then said batch pos + 1 of the new epoch: a checkpoint
        # taken then skipped batches on resume). Here the window is hit for certain: listing
        # the batch's fields, which leaving out the unread ones does, runs the seek.
        ld = mixed(seed=2)
        hook = []

        def hooked(convert):
            def conv(b):
                batch = convert(b)

                class Hooked(type(batch)):
                    __slots__ = ()

                    def keys(self):
                        while hook:
                            hook.pop()()
                        return super().keys()
                batch.__class__ = Hooked
                return batch
            return conv
        for child in ld._children:
            child._convert = hooked(child._convert)
        it = iter(ld)
        next(it), next(it)
        hook.append(lambda: ld.set_epoch(3))
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            next(it)
        self.assertEqual((ld.epoch, ld.state_dict()["next_batch"]), (3, 0))

    def test_shuffle_none_reads_every_batch_over_the_epochs(self):
        # With shuffle="none" a dataset's order is the same every epoch: each epoch took the
        # same first c_i batches of it, and the rest was never read. Now each epoch takes the
        # next c_i, wrapping around.
        ld = mixed(shuffle="none")
        counts = ld.counts
        nb = [len(c) for c in ld._children]
        self.assertLess(counts[1], nb[1])
        epochs = []
        for e in range(3):
            ld.set_epoch(e)
            epochs.append(steps(ld))
        # samples_per_epoch counts each epoch's own samples: those whose share of B takes B's
        # short last batch (613 = 76 x 8 + 5) are 3 shorter (it said the longer count always).
        sizes = [sum(len(ids) for _, ids in ep) for ep in epochs]
        self.assertEqual(len(set(sizes)), 2, sizes)  # one of these takes B's last batch
        for e, size in enumerate(sizes):
            ld.set_epoch(e)
            self.assertEqual(ld.samples_per_epoch, size, e)
        # ... also after a loop that takes len() batches and not the end (zip, islice): the
        # epoch is over, and the count is the next one's (it was the finished epoch's).
        ld.set_epoch(0)
        for e in range(3):
            said = ld.samples_per_epoch
            got = sum(b.size for _, b in zip(range(len(ld)), ld))
            self.assertEqual((said, got), (sizes[e], sizes[e]), e)
        seen_b = [set(i for src, ids in ep if src == 1 for i in ids) for ep in epochs]
        self.assertEqual(len(seen_b[0] | seen_b[1]), NB)  # two epochs read all of B
        # epoch 1 goes on where epoch 0 stopped: B's batch counts[1] in its order (ids in
        # dataset order: batch k holds ids k*B ...)
        first_b = next(ids for src, ids in epochs[1] if src == 1)
        self.assertEqual(first_b[0], counts[1] * B)
        # deterministic, and resumable mid-epoch
        ld.set_epoch(1)
        self.assertEqual(steps(ld), epochs[1])
        for k in (1, 17, len(epochs[2]) - 1):
            part = mixed(shuffle="none")
            part.set_epoch(2)
            it = iter(part)
            for _ in range(k):
                next(it)
            new = mixed(shuffle="none")
            new.load_state_dict(part.state_dict())
            self.assertEqual(steps(new), epochs[2][k:], f"resumed after {k} batches")
        # A state an older shardfeed saved mid-epoch (no "rotation"): its position was in the
        # batches it read then, not in these; refused. At an epoch's start it loads.
        old = part.state_dict()
        del old["rotation"]
        with self.assertRaisesRegex(ValueError, "mid-epoch by a shardfeed whose shuffle='none' mix"):
            mixed(shuffle="none").load_state_dict(old)
        new = mixed(shuffle="none")
        new.load_state_dict(dict(old, next_batch=0))
        self.assertEqual(steps(new), epochs[2])

    def test_holding_every_slot_names_the_dataset(self):
        # The child's error lists its own batch numbers, which a mixed Batch's .index (its
        # step in the mix) does not show: the error says which dataset and how to find them.
        ld = mixed(prefetch=2)
        held = []
        with self.assertRaises(shardfeed.Error) as cm:
            for b in ld:
                held.append(b)
        self.assertRegex(str(cm.exception), r"in dataset \d of the mix \(.*\): the indexes named "
                                            r"are that dataset's own batch numbers")

    def test_sources_are_made_only_when_asked_for(self):
        # On CUDA, making ids waits for the stream: a mix that never looks at sources must not
        # make them (it made them for every batch).
        ld = mixed(seed=2)
        b = next(iter(ld))
        self.assertFalse(hasattr(b, "_ids"))
        src = as_numpy(b.sources)
        self.assertEqual(set(src.tolist()), {src[0]})
        self.assertEqual(len(src), b.size)

    def test_states_of_the_other_kind_are_refused(self):
        with self.assertRaisesRegex(ValueError, "weights are"):
            mixed((0.5, 0.5)).load_state_dict(mixed().state_dict())
        with self.assertRaisesRegex(ValueError, "dataset 0: seed"):
            mixed(seed=1).load_state_dict(mixed(seed=2).state_dict())
        plain = shardfeed.Loader(A, B, output="numpy")
        with self.assertRaisesRegex(ValueError, "mixes datasets"):
            plain.load_state_dict(mixed().state_dict())
        with self.assertRaisesRegex(ValueError, "not the state of a mixing Loader"):
            mixed().load_state_dict(plain.state_dict())
        # damaged or edited states: a clear ValueError, never a KeyError or a silent load
        good = mixed().state_dict()
        for edit, says in (({"mix": "yes"}, "not the state of a mixing Loader"),
                           ({"version": 99}, "version"), ({"version": True}, "version"),
                           ({"epoch": None}, "epoch"), ({"datasets": None}, "datasets"),
                           ({"datasets": [None, None]}, "datasets"),
                           ({"weights": None}, "weights")):
            with self.subTest(edit=edit):
                with self.assertRaisesRegex(ValueError, says):
                    mixed().load_state_dict({**good, **edit})
        for key in ("version", "epoch", "batch_size"):
            state = dict(good)
            del state[key]
            with self.assertRaisesRegex(ValueError, f"lacks {key}"):
                mixed().load_state_dict(state)
        state = {**good, "datasets": [dict(d) for d in good["datasets"]]}
        del state["datasets"][1]["seed"]
        with self.assertRaisesRegex(ValueError, r"lacks datasets\[1\]\.seed"):
            mixed().load_state_dict(state)

    def test_state_dict_after_close(self):
        full = steps(mixed(seed=2))
        ld = mixed(seed=2)
        it = iter(ld)
        for _ in range(3):
            next(it)
        ld.close()
        state = ld.state_dict()  # nothing asked before close(): every dataset's found after it
        ref = mixed(seed=2)
        it = iter(ref)
        for _ in range(3):
            next(it)
        self.assertEqual(state, ref.state_dict())
        self.assertEqual(ld.samples_per_epoch, ref.samples_per_epoch)
        new = mixed(seed=2)
        new.load_state_dict(state)
        self.assertEqual(steps(new), full[3:])

    def test_a_state_of_other_datasets_is_refused(self):
        # C: as many samples as BB, the same fields; other keys and values: only the
        # dataset_id tells them apart.
        src = os.path.join(TMP, "other-npy")
        write_samples(src, NB, shape=(2,), seed=2, label=lambda i: 20000 + i)
        rekey(src, 100000)
        c = pack(src, os.path.join(TMP, "other"), "--align", "64")
        with shardfeed.open(BB) as b, shardfeed.open(c) as other:
            b_id, c_id = b.dataset_id, other.dataset_id
        self.assertNotEqual(b_id, c_id)
        full = steps(mixed(seed=2))
        ld = mixed(seed=2)
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
        self.assertEqual([d["dataset_id"] for d in state["datasets"]],
                         [d.dataset_id for d in ld.datasets])
        ac = shardfeed.Loader([A, c], B, weights=[0.75, 0.25], seed=2, output="numpy")
        with self.assertRaisesRegex(ValueError, f"dataset 1: dataset_id is {b_id:#018x} in the "
                                    f"state but {c_id:#018x} here"):
            ac.load_state_dict(state)
        # as an older shardfeed saved it, without the datasets' ids: loads unchecked
        for d in state["datasets"]:
            del d["dataset_id"]
        new = mixed(seed=2)
        new.load_state_dict(state)
        self.assertEqual(steps(new), full[3:])


class Errors(unittest.TestCase):
    def test_fields_must_match(self):
        other = os.path.join(TMP, "c-npy")
        write_samples(other, 20, shape=(3,))
        c = pack(other, os.path.join(TMP, "c"))
        with self.assertRaisesRegex(ValueError, r"field 'img' is float32\[2\] in .*a but "
                                                r"float32\[3\] in .*c$"):
            shardfeed.Loader([A, c], B, weights=[1, 1])
        nolabel = os.path.join(TMP, "d-npy")
        write_samples(nolabel, 20, shape=(2,))
        for f in os.listdir(nolabel):
            if f.startswith("label_"):
                os.remove(os.path.join(nolabel, f))
        d = pack(nolabel, os.path.join(TMP, "d"))
        with self.assertRaisesRegex(ValueError, "field 'label' is read but .*d has no such field"):
            shardfeed.Loader([A, d], B, weights=[1, 1])
        # reading only the shared field works
        ld = shardfeed.Loader([A, d], B, weights=[1, 1], fields=("img",), output="numpy")
        self.assertEqual(len(next(iter(ld))), 1)
        # a dataset's extra fields are left out, so every batch has the same keys
        ld = shardfeed.Loader([d, A], B, weights=[1, 1], output="numpy")
        self.assertEqual({tuple(sorted(b.keys())) for b in ld}, {("img",)})

    def test_bad_weights(self):
        with self.assertRaisesRegex(ValueError, "needs weights"):
            shardfeed.Loader([A, BB], B)
        with self.assertRaisesRegex(ValueError, "2 paths"):
            shardfeed.Loader([A, BB], B, weights=[1])
        with self.assertRaisesRegex(ValueError, "> 0"):
            shardfeed.Loader([A, BB], B, weights=[1, 0])
        with self.assertRaisesRegex(ValueError, "give path as a list"):
            shardfeed.Loader(A, B, weights=[1])
        # numpy numbers are numbers: taken as the Python ones
        for w in (np.array([3, 1]), np.array([0.75, 0.25], np.float32)):
            ld = shardfeed.Loader([A, BB], B, weights=w, output="numpy")
            self.assertEqual(ld.counts, mixed().counts)
            self.assertTrue(all(type(x) in (int, float) for x in ld.state_dict()["weights"]))


class SharedIterator(unittest.TestCase):
    def test_threads_sharing_a_mix_iterator_get_each_step_once(self):
        # A step reads its dataset outside the mix's lock: two threads took the same step
        # (a dataset gave more than its share, or "ran out within its own epoch"), and a
        # thread past the "done?" check read step 0 again after another took the epoch's end.
        for trial in range(20):
            ld = mixed((1, 1), batch_size=1 + trial % 3, shuffle="global", seed=trial)
            got, errors = drain_shared(iter(ld), lambda b: (b.index, int(as_numpy(b.sources)[0])))
            self.assertEqual(errors, [])
            self.assertEqual(sorted(i for i, _ in got), list(range(len(ld))), f"trial {trial}")
            self.assertEqual([sum(1 for _, s in got if s == k) for k in (0, 1)], ld.counts)
            ld.close()

    def test_an_exception_anywhere_in_a_step_leaves_the_loader_usable(self):
        # A signal's exception (Ctrl-C, a SIGALRM watchdog) that came between setting the
        # "step under way" flag and the try that clears it (at the lock's __exit__) left a mix
        # refusing every later next() as "in use by another thread". A signal's handler runs
        # at a call: here an exception is raised at each call a step makes in turn (a profile
        # function sees C calls too) once the flag is set, for a mix and for one dataset.
        import shardfeed._loader as loadermod
        import shardfeed._mix as mixmod
        for make, code in ((lambda: mixed((1, 1)), mixmod._MixIterator.__next__.__code__),
                           (lambda: shardfeed.Loader(A, B, output="numpy"),
                            loadermod._EpochIterator.__next__.__code__)):
            for nth in range(8):
                ld = make()
                seen = [0]

                def profile(frame, event, arg, ld=ld, nth=nth):
                    step = frame if event == "c_call" else frame.f_back
                    if (event in ("call", "c_call") and step is not None and step.f_code is code
                            and ld._stepping):
                        seen[0] += 1
                        if seen[0] == nth + 1:
                            raise KeyboardInterrupt("a signal")

                it = iter(ld)
                sys.setprofile(profile)
                try:
                    next(it)
                except KeyboardInterrupt:
                    pass
                finally:
                    sys.setprofile(None)
                self.assertFalse(ld._stepping, f"{code.co_qualname}, call {nth}")
                ld.set_epoch(1)
                self.assertEqual(sum(1 for _ in ld), len(ld))
                ld.close()


# A child under RLIMIT_NOFILE 128: a mix of two 300-shard datasets read under a global shuffle
# for two epochs, the most descriptors the process held, then 40 more files opened.
MANY_SHARDS_CHILD = r"""
import os, sys
import shardfeed
a, b = sys.argv[1:3]
ld = shardfeed.Loader([a, b], 16, weights=[1, 1], shuffle="global", output="numpy")
most = n = 0
for epoch in range(2):
    ld.set_epoch(epoch)
    for batch in ld:
        n += batch.size
        most = max(most, len(os.listdir("/proc/self/fd")))
extra = [open(os.devnull) for _ in range(40)]
print(n, most, len(extra))
"""


class ManyShards(unittest.TestCase):
    def test_two_datasets_share_one_budget_of_descriptors(self):
        # Each dataset kept up to half of RLIMIT_NOFILE open for itself: two of many shards
        # held all of it, and the trainer's next open (here a Dataset's manifest, in a
        # trainer a checkpoint) failed with "Too many open files". The process's open
        # datasets now share half the limit.
        import resource
        import subprocess
        from sfpytest import PYTHON
        import sfwrite
        paths = [os.path.join(TMP, "many-a"), os.path.join(TMP, "many-b")]
        for p in paths:
            if not os.path.exists(p):
                sfwrite.write_tiny_dataset(p, 300, per_shard=1)
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))  # noqa: E731
        p = subprocess.run([PYTHON, "-c", MANY_SHARDS_CHILD, *paths], capture_output=True,
                           text=True, preexec_fn=limit, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        samples, most, extra = map(int, p.stdout.split())
        self.assertEqual((samples, extra), (2 * 600, 40))
        # 64 for both datasets, plus what they are reading and the interpreter's own
        self.assertLess(most, 64 + 24, p.stdout)


if __name__ == "__main__":
    unittest.main()
