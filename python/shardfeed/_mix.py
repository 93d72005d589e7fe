"""Mixing datasets: Loader([path_a, path_b, ...], batch_size, weights=[...]).

Each dataset is read by a Loader of its own (its own C reader, zero-copy batches); the mix
interleaves their *batches*: every batch comes whole from one dataset, and Batch.sources says
which (the index into the list of paths, one per sample). Mixing whole batches keeps batches
zero-copy; mixing samples inside a batch would copy every sample into a new buffer.

An epoch is T batches, where T is as large as it can be without any dataset giving more than
its own epoch: T = min over datasets of floor(batches_i / w_i) (w normalized to sum 1), and
dataset i gives c_i of them: w_i * T rounded by largest remainder (so sum c_i = T and
|c_i - w_i T| < 1). The dataset that runs out first at its weight gives all its batches (or
all but one: T is whole); the others give the first c_i batches of their own epoch order,
which changes every epoch. With shuffle="none" that order is the same every epoch, so dataset
i gives the next c_i batches instead, wrapping around: epoch e starts at its batch
(e * c_i) mod batches_i, and over the epochs every batch is read. Which of the T
steps takes which dataset is a permutation of that multiset drawn from (seed, epoch): the same
on every run and every rank, so every rank gets T batches and, at each step, batches of the
same dataset."""
import numbers
import os
import threading
from fractions import Fraction

from . import _options as opt
from . import _resume
from . import _shardfeed as _C
from ._errors import error
from ._shardfeed import Error
from ._loader import EpochControl, Loader, _forked, replaced_error

_MASK = 2 ** 64 - 1


def _splitmix64(x):
    """(next state, output) of splitmix64 (the generator the C sampler seeds with)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return x, z ^ (z >> 31)


def schedule(counts, seed, epoch):
    """The epoch's steps: dataset i appears counts[i] times, in an order drawn from (seed,
    epoch) by a Fisher-Yates shuffle (Python-version independent: no `random`)."""
    steps = [i for i, c in enumerate(counts) for _ in range(c)]
    x, _ = _splitmix64(seed)
    x ^= epoch & _MASK
    for k in range(len(steps) - 1, 0, -1):
        x, r = _splitmix64(x)
        j = (r * (k + 1)) >> 64  # uniform in [0, k] up to 2**-64 bias
        steps[k], steps[j] = steps[j], steps[k]
    return steps


def epoch_counts(weights, batches):
    """(T, counts): the batches per epoch and how many come from each dataset (see above)."""
    w = [Fraction(x) for x in weights]
    total = sum(w)
    w = [x / total for x in w]
    T = min(int(nb / wi) for nb, wi in zip(batches, w))
    exact = [wi * T for wi in w]
    counts = [int(e) for e in exact]
    by_remainder = sorted(range(len(w)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[:T - sum(counts)]:
        counts[i] += 1
    assert all(c <= nb for c, nb in zip(counts, batches)) and sum(counts) == T
    return T, counts


def check_weights(weights, n):
    if weights is None:
        raise ValueError("shardfeed: mixing several datasets needs weights=[...], one per path "
                         "(e.g. weights=[0.75, 0.25])")
    weights = list(weights)
    if len(weights) != n:
        raise ValueError(f"shardfeed: weights has {len(weights)} values for {n} paths")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0 < w < float("inf"):
            raise ValueError(f"shardfeed: weights={weights!r}: each must be a number > 0")
    # numpy scalars (weights=np.array([...])) as Python numbers: exact in Fraction, plain in
    # state_dict() and repr.
    return [w if isinstance(w, (int, float)) else
            (int(w) if isinstance(w, numbers.Integral) else float(w)) for w in weights]


def _describe(f):
    return f"{f.dtype}{list(f.shape)}" if f.item_size else f"{f.dtype} of variable length"


def check_fields(children, fields):
    """The field names every batch will have: `fields`, or all of the first dataset's; each
    must be in every dataset with the same dtype and shape (how it is stored may differ)."""
    first = {f.name: f for f in children[0]._schema()[0]}
    names = fields if fields is not None else tuple(first)
    for child in children[1:]:
        theirs = {f.name: f for f in child._schema()[0]}
        for name in names:
            if name not in theirs:
                raise ValueError(f"shardfeed: field {name!r} is read but {child.path} has no such "
                                 f"field (it has {', '.join(map(repr, theirs))}); mixed datasets "
                                 f"must share the fields read (fields= reads fewer)")
            a, b = first[name], theirs[name]
            if _describe(a) != _describe(b):
                raise ValueError(f"shardfeed: field {name!r} is {_describe(a)} in "
                                 f"{children[0].path} but {_describe(b)} in {child.path}")
    return tuple(names)


class _MixIterator:
    """Iterator over the rest of one epoch of a mixing Loader."""

    __slots__ = ("_loader", "_gen", "_steps", "_iters", "_done")

    def __init__(self, loader, gen, steps, iters):
        self._loader, self._gen, self._steps, self._iters = loader, gen, steps, iters
        self._done = False

    def __iter__(self):
        return self

    def __len__(self):
        return 0 if self._done else max(0, len(self._steps) - self._loader._pos)

    def _check_current(self):
        if self._loader._gen != self._gen:
            self._done = True
            raise replaced_error()

    def _read(self, i):
        """The next batch of dataset i, the fields the mix does not read left out."""
        loader = self._loader
        try:
            batch = next(self._iters[i], None)
        except Error as e:
            if e.code != _C.E_STATE:
                raise
            raise error(f"{e} -- in dataset {i} of the mix ({loader.paths[i]}): the indexes "
                        f"named are that dataset's own batch numbers, not the mix's steps (a "
                        f"mixed Batch's .index); the Batches holding them are those whose "
                        f".sources are {i}", e.code) from None
        if batch is None:
            assert loader.shuffle == "none", "a mixed dataset ran out within its own epoch"
            # Only with shuffle="none": its next c_i batches ran past the end of its order
            # (the same every epoch), which goes on from its first batch.
            child = loader._children[i]
            child._seek(loader._epoch, 0)
            self._iters[i] = iter(child)
            batch = next(self._iters[i])
        for name in [k for k in batch.keys() if k not in loader._read]:
            del batch[name]
        return batch

    def __next__(self):
        loader = self._loader
        if self._done:
            raise StopIteration
        # One step at a time: a step reads its dataset's batch outside the lock, and two
        # threads sharing an iterator took the same step twice (a dataset giving more batches
        # than its share, then "ran out within its own epoch"). Refused, as one dataset's
        # reader refuses a second thread.
        took = False  # set with the flag, in one step: freed on every way out
        try:
            with loader._lock:
                if loader._stepping:
                    raise RuntimeError("shardfeed: the mix is in use by another thread (one "
                                       "thread iterates a Loader at a time)")
                self._check_current()
                if self._done:  # another thread sharing the iterator took the epoch's end
                    raise StopIteration
                pos = loader._pos
                if pos >= len(self._steps):
                    self._done = True
                    loader._epoch_ended()
                    raise StopIteration
                took = loader._stepping = True
            i = self._steps[pos]
            batch = self._read(i)
            # Another thread's set_epoch() etc. during the read stands: checked, and the
            # batch counted, in one step under the lock that its _seek takes.
            with loader._lock:
                self._check_current()
                loader._pos = pos + 1
        finally:
            if took:
                loader._stepping = False
        batch.index = pos
        batch._sources = i  # Batch.sources makes the tensor if asked for
        if loader.fields is not None:
            return tuple(batch[name] for name in loader.fields)
        return batch


class MixedLoader(EpochControl):
    """Loader([path, ...], batch_size, weights=[...], ...): see help(shardfeed.Loader),
    parameter weights, and _mix's module docstring."""

    def __init__(self, path, batch_size, weights=None, fields=None, seed=0, **options):
        self._children = []
        self._lock = threading.RLock()
        self._pid = os.getpid()  # a forked child never takes _lock (_loader._forked)
        self.paths = [os.fspath(p) for p in path]
        if not self.paths:
            raise ValueError("shardfeed: path=[]: give at least one dataset")
        self.weights = check_weights(weights, len(self.paths))
        self.seed = opt.seed64(seed)
        # Each dataset's order gets a seed of its own (equal datasets would otherwise be
        # read in the same order): seed_i = splitmix64 of (seed + i).
        for i, p in enumerate(self.paths):
            child_seed = _splitmix64((self.seed + i) & _MASK)[1]
            self._children.append(Loader(p, batch_size, seed=child_seed, **options))
        first = self._children[0]
        self.fields = None if fields is None else opt.field_names(
            fields, [f.name for f in first._schema()[0]])
        self._read = check_fields(self._children, self.fields)
        for name in ("batch_size", "shuffle", "drop_last", "rank", "world_size", "prefetch",
                     "verify", "on_corrupt", "uneven", "engine", "direct", "io_threads",
                     "block_size", "window", "output", "varlen", "device"):
            setattr(self, name, getattr(first, name))
        self._num_batches, self._counts = epoch_counts(self.weights,
                                                       [len(c) for c in self._children])
        if self._num_batches == 0:
            per = [len(c) for c in self._children]
            raise ValueError("shardfeed: these datasets make no batch at these weights "
                             f"(batches per epoch on this rank: {per})")
        self._epoch = 0
        self._pos = 0
        self._stepping = False  # a step under way (_MixIterator.__next__)
        self._resume = None
        self._gen = 0

    # ---- iteration ----
    def __len__(self):
        """Batches per epoch on this rank (the same on every rank)."""
        return self._num_batches

    @property
    def counts(self):
        """Batches per epoch taken from each dataset, in the order of the paths."""
        return list(self._counts)

    @property
    def samples_per_epoch(self):
        """Samples in the current epoch (the one the next iter() runs) for this rank: the same
        every epoch, except with shuffle="none", where a dataset whose share is fewer batches
        than its own epoch has goes on each epoch from where the last one ended (wrapping
        around): an epoch whose share takes that dataset's last batch, which may be short, is
        shorter by as much. (This said the longer count every epoch.)"""
        total = 0
        for child, c in zip(self._children, self._counts):
            n = len(child)
            if c == n:
                total += child.samples_per_epoch
                continue
            total += c * self.batch_size  # c batches from the start of its order: full ones
            short = n * self.batch_size - child.samples_per_epoch  # its last batch's shortfall
            if self.shuffle == "none" and short and (n - 1 - self.epoch * c) % n < c:
                total -= short  # this epoch's c batches, from batch epoch * c mod n, take it
        return total

    @property
    def datasets(self):
        """The shardfeed.Dataset of each path."""
        return [c.dataset for c in self._children]

    def __iter__(self):
        """An iterator over the current epoch, from its first batch or from where
        load_state_dict() put it."""
        self._check_open()
        gen, epoch, start, before = self._begin_epoch()
        try:
            steps = schedule(self._counts, self.seed, epoch)
            for i, child in enumerate(self._children):
                taken = steps[:start].count(i)
                if self.shuffle == "none":  # the next counts[i] batches, from where epoch - 1 ended
                    taken = (epoch * self._counts[i] + taken) % len(child)
                child._seek(epoch, taken)
            iters = [iter(c) for c in self._children]
        except BaseException:
            self._begin_failed(gen, before)
            raise
        return _MixIterator(self, gen, steps, iters)

    def as_iterable_dataset(self):
        """As Loader.as_iterable_dataset."""
        from ._interop import LoaderDataset
        return LoaderDataset(self)

    # ---- resume ----
    def state_dict(self):
        """{"version", "mix", "epoch", "next_batch", "weights", "datasets": [each dataset's
        order options and dataset_id], batch_size, world_size, num_batches}. O(number of
        datasets). After close() too, as Loader.state_dict."""
        pos = self._resume if self._resume is not None else self._pos
        return {"version": _resume.VERSION, "mix": True, "rotation": True, "epoch": self._epoch,
                "next_batch": pos, "rank": self.rank, "batch_size": self.batch_size,
                "world_size": self.world_size, "num_batches": self._num_batches,
                "weights": list(self.weights),
                "datasets": [c._options() for c in self._children]}

    def load_state_dict(self, state):
        """The next iter() continues from `state`. Everything that decides the batches must
        be the same (weights, each dataset's order options and dataset_id, batch_size,
        world_size): mixing resumes at the world size it was saved at. A state without
        dataset_id (saved before it was recorded) loads without that check."""
        self._check_open()
        if not isinstance(state, dict) or _resume.plain(state.get("mix")) is not True:
            raise ValueError("shardfeed: not the state of a mixing Loader (a Loader of several "
                             "datasets restores only a state it saved)")
        missing = [k for k in ("version", "epoch", "next_batch", "batch_size", "world_size",
                               "num_batches", "weights", "datasets") if k not in state]
        theirs = state.get("datasets")
        if not missing and (not isinstance(theirs, (list, tuple)) or
                            not all(isinstance(d, dict) for d in theirs)):
            missing.append("datasets (a list of each dataset's options)")
        elif not missing:
            missing += sorted({f"datasets[{i}].{k}" for i, d in enumerate(theirs)
                               for k in _resume.ORDER_OPTIONS if k not in d})
        if not missing and not isinstance(state["weights"], (list, tuple)):
            missing.append("weights (a list)")
        if missing:
            raise ValueError(f"shardfeed: state_dict lacks {', '.join(missing)}: not a mixing "
                             f"Loader's state")
        version = _resume.plain(state["version"])
        if type(version) is not int or version != _resume.VERSION:
            raise ValueError(f"shardfeed: state_dict version {state['version']!r}; a mixing "
                             f"Loader reads version {_resume.VERSION}")
        mine = self.state_dict()
        bad = _resume.mismatches(state, mine, ("batch_size", "world_size", "num_batches"))
        if [_resume.plain(w) for w in state.get("weights", [])] != mine["weights"]:
            bad.append(f"weights are {state.get('weights')!r} in the state but "
                       f"{mine['weights']!r} here")
        if len(theirs) != len(mine["datasets"]):
            bad.append(f"{len(theirs)} datasets in the state but {len(mine['datasets'])} here")
        else:
            for i, (t, m) in enumerate(zip(theirs, mine["datasets"])):
                bad += [f"dataset {i}: {b}" for b in _resume.other_dataset(t, m) +
                        _resume.mismatches(t, m, _resume.ORDER_OPTIONS)]
        if bad:
            raise ValueError("shardfeed: state_dict does not match this Loader (resuming would "
                             "give other batches): " + "; ".join(bad))
        epoch = _resume.check_int("epoch", state["epoch"], 2 ** 63)  # SF_MAX_EPOCH + 1
        nb = _resume.check_int("next_batch", state["next_batch"], self._num_batches + 1)
        if self.shuffle == "none" and nb and "rotation" not in state:
            raise ValueError("shardfeed: state_dict was saved mid-epoch by a shardfeed whose "
                             "shuffle='none' mix read the same batches of each dataset every "
                             "epoch; this one reads on (README \"Mixing datasets\"), so that "
                             "position holds other batches: load a state of an epoch's start "
                             "(next_batch 0), or finish the epoch with that shardfeed")
        self._seek(epoch, nb)

    # ---- the rest ----
    def stats(self):
        """{"datasets": [each dataset's Loader.stats()]}."""
        return {"datasets": [c.stats() for c in self._children]}

    def trace_start(self, max_batches=0):
        """Not for a mix (shardfeed.Error E_UNSUPPORTED): trace a Loader of one dataset."""
        raise error("shardfeed: traces are per dataset: trace a Loader of one of the paths",
                    _C.E_UNSUPPORTED)

    def trace_write(self, path):
        """Not for a mix: see trace_start."""
        self.trace_start()

    def close(self):
        """Closes every dataset's Loader (batches still alive stay valid)."""
        if not _forked(self):  # else a thread of the parent may have held _lock at the fork
            with self._lock:
                self._gen += 1
        for c in self._children:
            c.close()

    @property
    def closed(self):
        """True after close()."""
        return any(c.closed for c in self._children)

    def _check_open(self):
        if self.closed:
            raise ValueError("shardfeed: the Loader is closed")
        if _forked(self):  # before _lock, which a thread of the parent may have held
            raise RuntimeError("shardfeed: this Loader was opened in another process (before "
                               "a fork); open a new Loader in this process")

    def __repr__(self):
        return (f"shardfeed.Loader({self.paths!r}, batch_size={self.batch_size}, "
                f"weights={self.weights!r}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, epoch={self._epoch}, "
                f"batches={self._num_batches} {self._counts})")

