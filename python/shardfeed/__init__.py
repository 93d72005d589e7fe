"""shardfeed: checksummed shards of samples, streamed back as batches.

Reading batches
---------------

    import shardfeed
    loader = shardfeed.Loader("data/train", batch_size=256, shuffle="global", seed=0)
    for epoch in range(10):
        loader.set_epoch(epoch)          # optional: iter() advances the epoch by itself
        for batch in loader:
            x, y = batch["img"], batch["label"]

Loader(path, batch_size, shuffle="global", seed=0, drop_last=False, rank=None,
       world_size=None, device="cpu", prefetch=4, verify=True, on_corrupt="error",
       output="auto", varlen="list", uneven="pad", engine="auto", io_threads=0,
       block_size=0, window=0, direct="auto")

- Iterating yields one Batch per step: a dict from field name to a tensor whose
  first dimension is the batch (``[size, *shape]``; the last batch of an epoch
  may be shorter unless drop_last). A Batch also has ``.ids`` (the global
  sample ids, int64, in batch order: ``shardfeed.open(path).key(i)`` gives the
  sample's key, e.g. "17" for img_17.npy), ``.source_ids`` (the ids whose data
  the batch holds: equal to ids except where a corrupt sample was substituted),
  ``.epoch``, ``.index`` (batch number within the epoch), ``.size`` and
  ``.substituted``. ids are a copy; the field tensors are not.
- ``output``: "torch" gives torch.Tensor made zero-copy through DLPack
  (torch.from_dlpack); "numpy" gives numpy arrays (numpy.from_dlpack, or the
  buffer protocol on old NumPy); "dlpack" gives the raw shardfeed Array
  objects, which implement ``__dlpack__`` / ``__dlpack_device__`` and the
  buffer protocol, for any DLPack consumer; "auto" (default) is "torch" when
  torch can be imported, else "numpy". bool fields come out as bool. torch
  versions without unsigned 16/32/64-bit integers get those fields as numpy
  arrays.
- Variable-length fields: ``varlen="list"`` (default) gives a list with one
  value per sample: ``bytes`` for dtype bytes (a copy), else a 1-D tensor (a
  view). ``varlen="pair"`` gives ``(data, offsets)``: data a 1-D tensor of every
  value back to back (uint8 for dtype bytes), offsets an int64 tensor of
  ``size + 1`` byte offsets into data (sample i is bytes offsets[i]:offsets[i+1]).
  output="dlpack" always gives the (data, offsets) pair.
- Memory: the batches live in ``prefetch`` fixed slots allocated when the
  Loader opens (read-ahead plus the batches you hold), each sized for the
  largest batch the dataset can make (stats()["slab_bytes"] is their total).
  A batch's slot stays
  valid while any tensor made from it is alive, even past its step and past
  ``del loader`` / ``close()``; then it is handed back for reading ahead. So
  keep fewer than ``prefetch`` batches alive: asking for another while all
  slots are held raises shardfeed.Error (a RuntimeError) instead of waiting
  forever, naming the (epoch, index) of the batches still held. Copy (``.clone()``) what you keep for long. A ``for`` loop holds the
  previous batch while asking for the next, so prefetch must be at least 2.
- Epochs: each ``iter(loader)`` runs the current epoch from its first batch (or
  from where load_state_dict() put it); when it is exhausted the epoch advances
  by one. ``set_epoch(e)`` sets it explicitly (DistributedSampler style). The
  order depends only on (seed, epoch, shuffle): the same on every run.
  ``len(loader)`` is the number of batches per epoch for this rank. A new
  iter() makes older iterators of the same Loader raise RuntimeError.
- shuffle: "global" (a full permutation per epoch), "block" (runs of
  block_size consecutive samples shuffled within windows of window positions:
  near-sequential reads), "none" (dataset order); True/False mean global/none.
- Ranks: rank and world_size default to the RANK and WORLD_SIZE environment
  variables (torchrun and most launchers set them), else 0 and 1; explicit
  arguments win. Every rank gets the same number of batches; batches are cut
  from a global batch of batch_size * world_size, so the union over ranks is
  the dataset, plus wrap-around padding to fill the last global batch
  (uneven="pad", the default), or minus that tail (uneven="drop" or
  drop_last=True; drop_last also drops a last batch shorter than batch_size).
- Resume: ``state_dict()`` returns a small dict (epoch, next batch, and the
  options that decide the order); ``load_state_dict(s)`` on a new Loader with
  the same options makes its next iter() yield exactly the batches that were
  left in that epoch. A mismatching option raises ValueError naming it. rank is
  not checked: every rank is at the same position, so one rank's state
  restores them all.
- engine: "auto" (default: io_uring, or mmap for small fixed-size records
  whose shards are already in the page cache), "uring", "pread" or "mmap";
  stats()["engine"] says which ran.
- device: "cpu" (default), or "cuda" / "cuda:N" / a torch.device: tensors are
  copied to the GPU (``.to(device, non_blocking=True)``) and the slot is
  released at once. "cuda" means cuda:LOCAL_RANK when LOCAL_RANK is set.
- verify: check every record's XXH3-64 checksum as it is read (default).
  on_corrupt: "error" raises shardfeed.Error naming the shard, record and
  offset; "skip" substitutes the next intact sample (batch shapes and counts do
  not change; see Batch.substituted and stats()["corrupt_substitutions"]). A
  shard file cut short while it is read is the same: an Error naming it
  (E_TRUNCATED), or with "skip" its lost records substituted; never a crash,
  whatever the engine.
- ``stats()``: bytes read, samples, batches, substitutions, time waited in the
  loader, I/O and checksum thread-seconds, and what the reader runs with
  (engine, io_threads, prefetch, slab size, ...); ``elapsed_seconds`` (first
  batch request to the latest), and the bottleneck: ``verdict`` is
  "io-bound", "checksum-bound", "copy-bound", "consumer-bound" (the loop's own
  work per batch sets the pace) or "none", from ``fractions``
  (consumer_wait, device_wait, io_busy, io_share, checksum_share, copy_share);
  the rule is sf_reader_verdict's (shardfeed/reader.h, the README). device=
  "cuda" copies in torch, outside the reader: that time shows as the loop's.
- ``trace_start(max_batches=0)`` / ``trace_write(path)``: record each batch's
  stages (submitted, read, checksummed, handed, released, ...) and the I/O
  threads' work, and write them as a Chrome trace (JSON for
  https://ui.perfetto.dev). At most 65536 batches per trace; its memory
  (tens of MB at most) is held until the Loader closes.
- The GIL is released while waiting for a batch. One thread iterates a Loader
  at a time. A Loader does not survive fork(): create it in the process that
  uses it (e.g. after DataLoader workers or multiprocessing start).

Inspecting a dataset
--------------------

    ds = shardfeed.open("data/train")
    len(ds), ds.fields, ds.shards, ds.class_names, ds.key(0), ds.keys()
    sample = ds[0]        # {"img": ndarray (read-only view of the shard), "label": ...}

Errors from the C library raise shardfeed.Error (a RuntimeError) whose message
is the library's (sf_strerror + sf_last_error: file, shard, record, offset),
with ``.code`` (an SF_E_* constant such as shardfeed.E_CHECKSUM, or -errno) and
``.errno`` (the errno, or None).
"""
import os
from collections import namedtuple

from . import _shardfeed as _C
from ._shardfeed import Error  # noqa: F401  (re-exported)

__version__ = _C.__version__
__all__ = ["Loader", "Batch", "Dataset", "Field", "Shard", "Error", "open"]

for _name in dir(_C):
    if _name.startswith("E_"):
        globals()[_name] = getattr(_C, _name)
        __all__.append(_name)
del _name

_SHUFFLE = {"none": _C.SHUFFLE_NONE, "global": _C.SHUFFLE_GLOBAL, "block": _C.SHUFFLE_BLOCK}
_UNEVEN = {"pad": _C.UNEVEN_PAD, "drop": _C.UNEVEN_DROP}
_ENGINE = {"auto": _C.ENGINE_AUTO, "uring": _C.ENGINE_URING, "pread": _C.ENGINE_PREAD,
           "mmap": _C.ENGINE_MMAP}
_DIRECT = {"auto": _C.DIRECT_AUTO, "on": _C.DIRECT_ON, "off": _C.DIRECT_OFF}
_ON_CORRUPT = {"error": _C.ON_CORRUPT_ERROR, "skip": _C.ON_CORRUPT_SKIP}
_OUTPUTS = ("auto", "torch", "numpy", "dlpack")
_VARLEN = ("list", "pair")
_U32 = 2 ** 32
_U64 = 2 ** 64
_STATE_VERSION = 1
# Options that decide which batches a position names: a state only fits a
# Loader whose values are the same.
_STATE_OPTIONS = ("batch_size", "shuffle", "seed", "drop_last", "world_size", "uneven",
                  "block_size", "window", "num_batches", "samples_per_epoch")


def _choice(name, value, table):
    if isinstance(value, str) and value.lower() in table:
        return value.lower()
    raise ValueError(f"shardfeed: {name}={value!r}: expected one of {', '.join(map(repr, table))}")


def _uint(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"shardfeed: {name} must be an int, not {type(value).__name__}")
    if not lo <= value < hi:
        raise ValueError(f"shardfeed: {name}={value} is out of range [{lo}, {hi})")
    return value


def _env_int(var):
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"shardfeed: environment variable {var}={raw!r} is not an integer") from None


def _dist_defaults(rank, world_size):
    """rank and world_size: explicit values win, then RANK / WORLD_SIZE, then 0 and 1."""
    src_r, src_w = "rank", "world_size"
    if world_size is None:
        world_size, src_w = _env_int("WORLD_SIZE"), "WORLD_SIZE (environment)"
        if world_size is None:
            world_size, src_w = 1, "world_size (default)"
    if rank is None:
        rank, src_r = _env_int("RANK"), "RANK (environment)"
        if rank is None:
            rank, src_r = 0, "rank (default)"
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1 or world_size >= _U32:
        raise ValueError(f"shardfeed: {src_w} = {world_size!r}: must be an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"shardfeed: {src_r} = {rank!r} is not in [0, {src_w} = {world_size})")
    return rank, world_size


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _resolve_device(device, torch):
    """None for CPU delivery, else the torch.device batches are copied to."""
    if device is None:
        return None
    if torch is None:
        if str(device) == "cpu":
            return None
        raise ValueError(f"shardfeed: device={device!r} needs torch, which is not importable")
    if isinstance(device, str) and device == "cuda":
        local = _env_int("LOCAL_RANK")
        device = f"cuda:{local}" if local is not None else "cuda"
    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError(f"shardfeed: device {dev}: expected 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        e = Error(f"shardfeed: device {dev} asked for, but there is no CUDA device "
                  f"(torch.cuda.is_available() is False); use device='cpu'")
        e.code, e.reason, e.errno = _C.E_NOT_SUPPORTED, _C.strerror(_C.E_NOT_SUPPORTED), None
        raise e
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        e = Error(f"shardfeed: device {dev}: only {torch.cuda.device_count()} CUDA device(s)")
        e.code, e.reason, e.errno = _C.E_INVALID, _C.strerror(_C.E_INVALID), None
        raise e
    return dev


def _to_device(batch, device):
    """Moves a CPU batch onto `device`. The one place that knows about GPUs:
    the C GPU delivery path replaces it. The copy is from pageable memory, so
    it completes before .to() returns and the slot may be released at once."""
    for k, v in batch.items():
        if hasattr(v, "to"):
            batch[k] = v.to(device, non_blocking=True)
        elif isinstance(v, tuple):
            batch[k] = tuple(t.to(device, non_blocking=True) if hasattr(t, "to") else t for t in v)
        elif isinstance(v, list):
            batch[k] = [t.to(device, non_blocking=True) if hasattr(t, "to") else t for t in v]
    return batch


class Batch(dict):
    """One batch: a dict from field name to tensor (or array), plus
    ids / source_ids (int64, a copy), epoch, index, size and substituted."""

    __slots__ = ("ids", "source_ids", "epoch", "index", "substituted")

    @property
    def size(self):
        return len(self.ids)

    def __repr__(self):
        fields = ", ".join(f"{k}: {_describe(v)}" for k, v in self.items())
        return f"<shardfeed.Batch epoch {self.epoch} index {self.index} size {self.size}: {fields}>"


def _describe(v):
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    if shape is not None:
        return f"{tuple(shape)} {dtype}"
    return type(v).__name__


class _Converter:
    """Turns a C batch into a Batch of torch tensors, numpy arrays or raw
    DLPack objects."""

    def __init__(self, output, varlen, torch):
        self.output = output
        self.varlen = varlen
        self.torch = torch
        self.np = None
        if output in ("numpy", "torch"):
            import numpy
            self.np = numpy
        self.np_from_dlpack = getattr(self.np, "from_dlpack", None) if self.np else None
        # dtype codes torch cannot import (unsigned 16/32/64-bit before torch 2.3):
        # those fields come out as numpy arrays.
        self.torch_fallback = set()
        if torch is not None:
            for code, name in ((_C.DT_UINT16, "uint16"), (_C.DT_UINT32, "uint32"),
                               (_C.DT_UINT64, "uint64")):
                if not hasattr(torch, name):
                    self.torch_fallback.add(code)
            c_from = getattr(torch._C, "_from_dlpack", None)
            if c_from is not None:
                self.torch_from = lambda a: c_from(a.__dlpack__())
            else:
                self.torch_from = torch.from_dlpack

    def ids(self, raw):
        np = self.np
        if np is None:
            import numpy as np
            self.np = np
        a = np.frombuffer(raw, dtype="<i8")
        if self.output == "torch":
            return self.torch.from_numpy(a)
        return a

    def array(self, a, dtype):
        out = self.output
        if out == "dlpack":
            return a
        if out == "torch" and dtype not in self.torch_fallback:
            try:
                t = self.torch_from(a)
            except (RuntimeError, TypeError, BufferError):
                self.torch_fallback.add(dtype)
            else:
                return t.view(self.torch.bool) if dtype == _C.DT_BOOL else t
        np = self.np
        if self.np_from_dlpack is not None:
            x = self.np_from_dlpack(a)
            return x.view(np.bool_) if dtype == _C.DT_BOOL else x
        return np.asarray(a)

    def var(self, pair, dtype):
        data, offsets = pair
        if self.varlen == "pair" or self.output == "dlpack":
            return (self.array(data, dtype), self.array(offsets, _C.DT_INT64))
        offs = memoryview(offsets).tolist()
        if dtype == _C.DT_BYTES:
            raw = bytes(memoryview(data))
            return [raw[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
        d = self.array(data, dtype)
        esz = data.itemsize
        return [d[offs[i] // esz:offs[i + 1] // esz] for i in range(len(offs) - 1)]

    def __call__(self, b):
        out = Batch()
        for name, storage, dtype, value in b.fields():
            if storage == _C.STORAGE_VARIABLE:
                out[name] = self.var(value, dtype)
            else:
                out[name] = self.array(value, dtype)
        out.ids = self.ids(b.ids())
        out.source_ids = out.ids if not b.substituted else self.ids(b.source_ids())
        out.epoch = b.epoch
        out.index = b.index
        out.substituted = b.substituted
        return out


class _EpochIterator:
    """Iterator over the rest of one epoch of a Loader."""

    __slots__ = ("_loader", "_gen", "_done")

    def __init__(self, loader, gen):
        self._loader = loader
        self._gen = gen
        self._done = False

    def __iter__(self):
        return self

    def __len__(self):
        if self._done:
            return 0
        return max(0, len(self._loader) - self._loader._pos)

    def __next__(self):
        if self._done:
            raise StopIteration
        loader = self._loader
        if loader._gen != self._gen:
            self._done = True
            raise RuntimeError("shardfeed: this iterator was replaced: a newer iter(loader), "
                               "set_epoch(), load_state_dict() or close() came after it")
        try:
            b = loader._reader.next()
        except Error as e:
            if e.code == _C.E_STATE:
                raise _held_error(e, loader) from None
            raise
        if b is None:
            self._done = True
            loader._epoch += 1
            loader._pos = 0
            raise StopIteration
        loader._pos = b.index + 1
        batch = loader._convert(b)
        if loader._device is not None:
            return _to_device(batch, loader._device)
        return batch


def _held_error(e, loader):
    # The library's message lists the batches held as (epoch, index): the
    # .epoch and .index of the Batch objects (or of the batches whose tensors)
    # something still references.
    msg = (f"{e} -- every batch keeps its slot while the Batch or any tensor made from it is "
           f"alive (look for a Batch with that .epoch and .index, or a tensor taken from one); "
           f"keep fewer than prefetch={loader.prefetch} batches (copy with .clone() what you "
           f"keep) or raise prefetch")
    n = Error(msg)
    n.code, n.reason, n.errno = e.code, e.reason, e.errno
    return n


class Loader:
    __doc__ = "Streams batches of a shardfeed dataset. See the module docstring (help(shardfeed))."

    def __init__(self, path, batch_size, shuffle="global", seed=0, drop_last=False, rank=None,
                 world_size=None, device="cpu", prefetch=4, verify=True, on_corrupt="error",
                 output="auto", varlen="list", uneven="pad", engine="auto", io_threads=0,
                 block_size=0, window=0, direct="auto"):
        self._reader = None
        self._final_stats = None
        self.path = os.fspath(path)
        self.batch_size = _uint("batch_size", batch_size, 1, 2 ** 24 + 1)
        if shuffle is True or shuffle is False:
            shuffle = "global" if shuffle else "none"
        self.shuffle = _choice("shuffle", shuffle, _SHUFFLE)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"shardfeed: seed must be an int, not {type(seed).__name__}")
        self.seed = seed % _U64
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.prefetch = _uint("prefetch", prefetch, 1, 1025)
        self.verify = bool(verify)
        self.on_corrupt = _choice("on_corrupt", on_corrupt, _ON_CORRUPT)
        self.uneven = _choice("uneven", uneven, _UNEVEN)
        self.engine = _choice("engine", engine, _ENGINE)
        self.direct = _choice("direct", direct, _DIRECT)
        self.io_threads = _uint("io_threads", io_threads, 0, _U32)
        self.block_size = _uint("block_size", block_size, 0, _U32)
        self.window = _uint("window", window, 0, _U32)
        if output not in _OUTPUTS:
            raise ValueError(f"shardfeed: output={output!r}: expected one of {_OUTPUTS}")
        if varlen not in _VARLEN:
            raise ValueError(f"shardfeed: varlen={varlen!r}: expected one of {_VARLEN}")
        torch = _import_torch() if output in ("auto", "torch") or str(device) != "cpu" else None
        if output == "torch" and torch is None:
            raise ValueError("shardfeed: output='torch' but torch is not importable")
        if output == "auto":
            output = "torch" if torch is not None else "numpy"
        self.output = output
        self.varlen = varlen
        self._device = _resolve_device(device, torch)
        if self._device is not None and output != "torch":
            raise ValueError(f"shardfeed: device={device!r} needs output='torch'")
        self.device = str(self._device) if self._device is not None else "cpu"
        self._convert = _Converter(output, varlen, torch)

        self._reader = _C.Reader(
            self.path, batch_size=self.batch_size, shuffle=_SHUFFLE[self.shuffle], seed=self.seed,
            rank=self.rank, world_size=self.world_size, drop_last=self.drop_last,
            uneven=_UNEVEN[self.uneven], prefetch=self.prefetch, engine=_ENGINE[self.engine],
            direct=_DIRECT[self.direct], verify=self.verify,
            on_corrupt=_ON_CORRUPT[self.on_corrupt], block_size=self.block_size,
            window=self.window, io_threads=self.io_threads)
        self._num_batches = self._reader.num_batches()
        self._epoch = 0
        self._pos = 0        # next batch of the current epoch (what state_dict reports)
        self._resume = None  # where the next iter() starts, after load_state_dict()
        self._gen = 0        # bumped to retire older iterators

    # ---- iteration ----
    def __len__(self):
        return self._num_batches

    @property
    def samples_per_epoch(self):
        """Samples per epoch for this rank (padding included, drops excluded)."""
        return self._reader.samples_per_epoch()

    @property
    def epoch(self):
        """The epoch the next iter() runs."""
        return self._epoch

    def set_epoch(self, epoch):
        """The next iter() runs `epoch` from its start, as DistributedSampler.set_epoch.
        Right after load_state_dict(), set_epoch of the saved epoch keeps the saved
        position, so the usual loop (set_epoch at the top of every epoch) resumes
        mid-epoch instead of replaying it."""
        self._check_open()
        epoch = _uint("epoch", epoch, 0, _U64)
        if self._resume is not None and epoch == self._epoch:
            return
        self._epoch = epoch
        self._pos = 0
        self._resume = None
        self._gen += 1

    def __iter__(self):
        self._check_open()
        self._gen += 1
        start = self._resume if self._resume is not None else 0
        self._resume = None
        if self._reader.state() != (self._epoch, start):
            self._reader.restore(self._epoch, start)
        self._pos = start
        return _EpochIterator(self, self._gen)

    # ---- resume ----
    def _options(self):
        return {"batch_size": self.batch_size, "shuffle": self.shuffle, "seed": self.seed,
                "drop_last": self.drop_last, "world_size": self.world_size,
                "uneven": self.uneven, "block_size": self.block_size, "window": self.window,
                "num_batches": self._num_batches, "samples_per_epoch": self.samples_per_epoch}

    def state_dict(self):
        """Where this Loader is: {"epoch", "next_batch", options...}. O(1)."""
        pos = self._resume if self._resume is not None else self._pos
        s = {"version": _STATE_VERSION, "epoch": self._epoch, "next_batch": pos,
             "rank": self.rank}
        s.update(self._options())
        return s

    def load_state_dict(self, state):
        """The next iter() continues from `state` (see state_dict)."""
        self._check_open()
        if not isinstance(state, dict):
            raise TypeError("shardfeed: load_state_dict() takes the dict state_dict() returned")
        missing = [k for k in ("version", "epoch", "next_batch") + _STATE_OPTIONS if k not in state]
        if missing:
            raise ValueError(f"shardfeed: state_dict lacks {', '.join(missing)}: not a Loader state")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"shardfeed: state_dict version {state['version']!r}; this shardfeed "
                             f"reads version {_STATE_VERSION}")
        mine = self._options()
        bad = [f"{k} is {state[k]!r} in the state but {mine[k]!r} here"
               for k in _STATE_OPTIONS if _plain(state[k]) != mine[k]]
        if bad:
            raise ValueError("shardfeed: state_dict does not match this Loader (resuming would "
                             "give other batches): " + "; ".join(bad))
        epoch = _uint("state epoch", _plain(state["epoch"]), 0, _U64)
        nb = _uint("state next_batch", _plain(state["next_batch"]), 0, self._num_batches + 1)
        self._epoch = epoch
        self._pos = nb
        self._resume = nb
        self._gen += 1

    # ---- the rest ----
    def stats(self):
        """sf_reader_stats as a dict (after close(): as they were at close)."""
        if self._reader is None or self._reader.freed:
            if self._final_stats is None:
                raise ValueError("shardfeed: the Loader is closed")
            return dict(self._final_stats)
        return self._reader.stats()

    def trace_start(self, max_batches=0):
        """Starts recording a trace of the next max_batches batches (0: up to 65536)."""
        self._check_open()
        self._reader.trace_start(_uint("max_batches", max_batches, 0, _U64))

    def trace_write(self, path):
        """Stops recording and writes the trace (Chrome trace-event JSON) to path."""
        self._check_open()
        self._reader.trace_write(os.fspath(path))

    def close(self):
        """No more batches. Memory of batches still alive stays valid until they die."""
        if self._reader is not None and not self._reader.closed:
            self._final_stats = self._reader.stats()
            self._reader.close()
            self._gen += 1

    @property
    def closed(self):
        return self._reader is None or self._reader.closed

    def __del__(self):
        # The C reader itself lives on until the last batch made from it dies.
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.close()

    def _check_open(self):
        if self._reader is None or self._reader.closed:
            raise ValueError("shardfeed: the Loader is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"shardfeed.Loader({self.path!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle!r}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, device={self.device!r}, output={self.output!r}, "
                f"epoch={self._epoch}, batches={self._num_batches})")


def _plain(v):
    """A state value that went through torch.save/json: ints, bools, strings."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v


# ---- inspection / random access ----

Field = namedtuple("Field", "name dtype shape storage descr item_size codec", defaults=("none",))
Field.__doc__ = """A field of the schema: name; dtype (NumPy's name: "float32", "bytes" for
opaque variable-length data); shape (per sample; (0,) for variable length); storage
("fixed", "variable" or "inline"); descr (NumPy descr, "<f4"); item_size (bytes per value,
0 for variable length); codec ("none" or "zstd": how values are stored; they are always
handed out decompressed)."""
Shard = namedtuple("Shard", "name first_sample num_samples file_size")


class Dataset:
    """An opened dataset: len(ds), ds.fields, ds.shards, ds.class_names, ds.key(i),
    ds.keys(), ds.index(key), ds[i] -> {field: value}. Values are copies that belong to
    the caller: writable numpy arrays (torch.from_numpy(ds[i]["img"]).add_(1) changes
    that copy only), decompressed for compressed fields; bytes for variable-length fields
    of dtype bytes. With verify (default) each record's checksum is checked when it is
    read; a damaged or truncated shard raises shardfeed.Error naming it."""

    def __init__(self, path, verify=True):
        self.path = os.fspath(path)
        self.verify = bool(verify)
        self._ds = _C.Dataset(self.path)
        self.fields = [Field(name, dtype_name, shape, storage, descr, item_size, codec)
                       for name, _code, dtype_name, descr, shape, storage, item_size, codec
                       in self._ds.fields()]
        self._key_index = None

    def __len__(self):
        return self._ds.num_samples()

    @property
    def shards(self):
        return [Shard(*s) for s in self._ds.shards()]

    @property
    def align(self):
        return self._ds.align()

    @property
    def class_names(self):
        """Class names from the manifest's metadata ("class_names"): label i is
        class_names[i], as torchvision's ImageFolder.classes; [] when it has none."""
        return self._ds.class_names()

    @property
    def source(self):
        """The input format the dataset was packed from: "npy", "imagefolder", "list",
        "tar" ("" when the manifest does not say)."""
        return self._ds.source()

    def key(self, i):
        return self._ds.key(i)

    def keys(self):
        return self._ds.keys()

    def index(self, key):
        """The sample id of `key` (e.g. "17" for img_17.npy)."""
        if self._key_index is None:
            self._key_index = {k: i for i, k in enumerate(self._ds.keys())}
        try:
            return self._key_index[str(key)]
        except KeyError:
            raise KeyError(f"shardfeed: no sample with key {key!r} in {self.path}") from None

    def get(self, i, verify=None):
        import numpy as np
        check = self.verify if verify is None else bool(verify)
        out = {}
        for k, f in enumerate(self.fields):
            v = self._ds.get(i, k, check)
            out[f.name] = v if isinstance(v, bytes) else np.asarray(v)
        return out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.get(j) for j in range(*i.indices(len(self)))]
        return self.get(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self.get(i)

    def close(self):
        self._ds.close()

    @property
    def closed(self):
        return self._ds.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        fields = ", ".join(f"{f.name}: {f.dtype}{list(f.shape)} {f.storage}" for f in self.fields)
        return f"<shardfeed.Dataset {self.path!r}: {len(self)} samples, {fields}>"


def open(path, verify=True):  # noqa: A001  (shardfeed.open, like tarfile.open)
    """Opens the dataset in `path` for inspection and random access (see Dataset)."""
    return Dataset(path, verify=verify)
