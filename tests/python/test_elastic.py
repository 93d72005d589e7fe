"""Elastic resume: a state saved by W1 ranks restores at W2 ranks, for every pair of world
sizes in {1, 2, 3, 4}. With batch_size * world_size unchanged the same global batches continue
(nothing seen twice, nothing skipped); otherwise the epoch resumes at the global batch holding
the first position not yet handed out: the samples seen again are exactly the positions
[floor(P / G2) * G2, P) of the epoch's order (P = batches done * G1), fewer than G2, and the
union before and after is every sample. A state saved after the epoch's last batch resumes at
its end, also where the new world size's tail rule (uneven="drop") would give one batch more.
Version 1 states still load. See sfpytest.py for how to run it by hand."""
import itertools
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import as_numpy, pack, remove, scratch, shardfeed, write_samples  # noqa: E402

N = 101          # prime: no global batch size used divides it
TMP = DS = None
SEED = 11


def setUpModule():
    global TMP, DS
    TMP = scratch("elastic-")
    write_samples(os.path.join(TMP, "npy"), N, shape=(2,))
    DS = pack(os.path.join(TMP, "npy"), os.path.join(TMP, "ds"), "--align", "64")


def tearDownModule():
    remove(TMP)


def loader(world, rank, batch_size, **kw):
    return shardfeed.Loader(DS, batch_size, seed=SEED, rank=rank, world_size=world,
                            output="numpy", **kw)


def order(epoch=0):
    """The epoch's order S: what one rank reads, batch after batch (no padding at world 1)."""
    ld = loader(1, 0, 7)
    ld.set_epoch(epoch)
    return [i for b in ld for i in as_numpy(b.ids).tolist()]


def run_ranks(world, batch_size, stop=None, state=None, **kw):
    """Every rank's loader (restored from `state` if given) iterated for `stop` batches (all
    when None): (ids seen by all ranks, in (batch, rank) order; rank 0's state after)."""
    loaders = [loader(world, r, batch_size, **kw) for r in range(world)]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    iters = [iter(ld) for ld in loaders]
    seen = []
    for _ in itertools.count() if stop is None else range(stop):
        batches = [next(it, None) for it in iters]
        if batches[0] is None:
            assert all(b is None for b in batches), "ranks disagree on the batch count"
            break
        for b in batches:
            seen.extend(as_numpy(b.ids).tolist())
    return seen, loaders[0].state_dict()


class Elastic(unittest.TestCase):
    def check_pair(self, w1, b1, w2, b2, **kw):
        S = order()
        g1, g2 = w1 * b1, w2 * b2
        nb1 = len(loader(w1, 0, b1, **kw))
        for k in sorted({0, 1, nb1 // 2, nb1 - 1, nb1}):
            with self.subTest(w1=w1, b1=b1, w2=w2, b2=b2, stop=k, **kw):
                before, state = run_ranks(w1, b1, stop=k, **kw)
                self.assertEqual(state["next_batch"], k)
                after, _ = run_ranks(w2, b2, state=state, **kw)
                if k == nb1:  # the epoch was over: nothing left of it
                    self.assertEqual(after, [])
                    continue
                p = k * g1  # positions of S handed out before the change
                self.assertEqual(before[:p], S[:p])
                start = p if g1 == g2 else p // g2 * g2
                # after the change: exactly what a fresh W2 run gives from that global batch
                fresh, _ = run_ranks(w2, b2, **kw)
                self.assertEqual(after, fresh[start:])
                # seen again: S[start:p], fewer than G2 (less what W2's tail rule drops)
                end = min(p, len(fresh))
                self.assertEqual(after[:end - start], S[start:end])
                self.assertLess(p - start, g2)
                if kw.get("uneven", "pad") == "pad" and not kw.get("drop_last"):
                    self.assertEqual(set(before) | set(after), set(range(N)), "a sample lost")

    def test_every_pair_of_world_sizes(self):
        for w1, w2 in itertools.product((1, 2, 3, 4), repeat=2):
            self.check_pair(w1, 5, w2, 5)

    def test_global_batch_unchanged_continues_the_same_batches(self):
        for (w1, b1), (w2, b2) in itertools.permutations(((1, 12), (2, 6), (3, 4), (4, 3)), 2):
            self.check_pair(w1, b1, w2, b2)
            before, state = run_ranks(w1, b1, stop=3)
            after, _ = run_ranks(w2, b2, state=state)
            # the full global batches: S in order, none seen twice (only the last, partial
            # global batch's wrap-around padding depends on the world size)
            full = N // 12 * 12
            self.assertEqual(before + after[:full - len(before)], order()[:full])

    def test_drop_modes(self):
        for w1, w2 in ((1, 3), (4, 2), (3, 4)):
            self.check_pair(w1, 4, w2, 4, uneven="drop")
            self.check_pair(w1, 4, w2, 6, drop_last=True)

    def test_drop_with_the_global_batch_unchanged(self):
        # G = 10 leaves a tail of 1 sample (N = 101): uneven="drop" cuts it at 2 and 5 ranks,
        # world 1 keeps it as a batch of its own. A state saved after the last batch at 2 or 5
        # ranks is the end of the epoch at 1 rank too, not one batch more of that tail.
        for (w1, b1), (w2, b2) in itertools.permutations(((1, 10), (2, 5), (5, 2)), 2):
            self.check_pair(w1, b1, w2, b2, uneven="drop")
            full1, _ = run_ranks(w1, b1, uneven="drop")
            full2, _ = run_ranks(w2, b2, uneven="drop")
            nb1 = len(loader(w1, 0, b1, uneven="drop"))
            for k in (nb1 // 2, nb1):
                with self.subTest(w1=w1, b1=b1, w2=w2, b2=b2, stop=k):
                    before, state = run_ranks(w1, b1, stop=k, uneven="drop")
                    after, _ = run_ranks(w2, b2, state=state, uneven="drop")
                    self.assertEqual(before, full1[:k * 10])
                    if k == nb1:
                        self.assertEqual(after, [], "a batch of an epoch that was over")
                    else:  # the uninterrupted order: each id once, none skipped
                        self.assertEqual(before + after, full2)
                    self.assertEqual(len(set(before + after)), len(before + after))

    def test_later_epoch_and_shuffle_block(self):
        for w1, w2 in ((2, 3), (3, 1)):
            ld = loader(w1, 0, 4, shuffle="block", block_size=4, window=16)
            ld.set_epoch(5)
            it = iter(ld)
            next(it), next(it)
            state = ld.state_dict()
            new = loader(w2, 0, 4, shuffle="block", block_size=4, window=16)
            new.load_state_dict(state)
            self.assertEqual(new.epoch, 5)
            ref = loader(w2, 0, 4, shuffle="block", block_size=4, window=16)
            ref.set_epoch(5)
            skip = 2 * 4 * w1 // (4 * w2)
            self.assertEqual([as_numpy(b.ids).tolist() for b in new],
                             [as_numpy(b.ids).tolist() for b in ref][skip:])

    def test_order_options_must_match(self):
        state = loader(2, 0, 5).state_dict()
        with self.assertRaisesRegex(ValueError, "seed is 11 in the state but 12 here"):
            shardfeed.Loader(DS, 5, seed=12, world_size=3, rank=0).load_state_dict(state)
        state["num_samples"] = N + 1  # a state of another dataset
        with self.assertRaisesRegex(ValueError, f"num_samples is {N + 1} in the state but {N}"):
            loader(3, 0, 5).load_state_dict(state)

    def test_the_states_batch_count_rule_is_the_readers(self):
        # load_state_dict refuses a state whose num_batches does not follow from its own
        # options (_resume.batches_per_epoch): that rule must be the reader's.
        from shardfeed import _resume
        for world, bs, drop_last, uneven in itertools.product((1, 2, 3, 4, 7), (1, 3, 8, 50, 200),
                                                              (False, True), ("pad", "drop")):
            try:
                ld = loader(world, 0, bs, drop_last=drop_last, uneven=uneven)
            except shardfeed.Error:  # an epoch without a batch: refused at open
                self.assertEqual(_resume.batches_per_epoch(N, bs, world, drop_last, uneven), 0)
                continue
            with self.subTest(world=world, bs=bs, drop_last=drop_last, uneven=uneven):
                self.assertEqual(_resume.batches_per_epoch(N, bs, world, drop_last, uneven), len(ld))
            ld.close()

    def test_version_1_states_still_load(self):
        ld = loader(2, 1, 5)
        it = iter(ld)
        next(it), next(it)
        v1 = {k: v for k, v in ld.state_dict().items() if k != "num_samples"}
        v1["version"] = 1
        new = loader(2, 1, 5)
        new.load_state_dict(v1)
        self.assertEqual(new.state_dict()["next_batch"], 2)
        with self.assertRaisesRegex(ValueError, "world_size is 2 in the state but 3 here"):
            loader(3, 0, 5).load_state_dict(v1)


if __name__ == "__main__":
    unittest.main()
