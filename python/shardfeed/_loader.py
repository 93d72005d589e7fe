"""shardfeed.Loader: options, iteration over epochs, resume (state_dict), stats and traces."""
import os

from . import _device
from . import _options as opt
from . import _shardfeed as _C
from ._convert import Converter, resolve_output
from ._errors import error
from ._shardfeed import Error

_STATE_VERSION = 1
# Options that decide which batches a position names: a state only fits a
# Loader whose values are the same.
_STATE_OPTIONS = ("batch_size", "shuffle", "seed", "drop_last", "world_size", "uneven",
                  "block_size", "window", "num_batches", "samples_per_epoch")


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
            return _device.to_device(batch, loader._device)
        return batch


def _held_error(e, loader):
    # The library's message lists the batches held as (epoch, index): the
    # .epoch and .index of the Batch objects (or of the batches whose tensors)
    # something still references.
    return error(f"{e} -- every batch keeps its slot while the Batch or any tensor made from it "
                 f"is alive (look for a Batch with that .epoch and .index, or a tensor taken from "
                 f"one); keep fewer than prefetch={loader.prefetch} batches (copy with .clone() "
                 f"what you keep) or raise prefetch", e.code)


def _plain(v):
    """A state value that went through torch.save/json: ints, bools, strings."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v


class Loader:
    """Streams batches of the shardfeed dataset in folder `path`: iterating yields one
    Batch per step (help(shardfeed): batches, their memory, epochs, resume). A bad
    argument raises ValueError or TypeError naming it; a dataset that cannot be read,
    shardfeed.Error.

    Parameters:

    - batch_size: samples per batch on this rank, 1 to 2**24.
    - shuffle: "global" (a full permutation per epoch), "block" (runs of block_size
      consecutive samples shuffled within windows of window positions: near-sequential
      reads), "none" (dataset order); True/False mean global/none.
    - seed: any int (taken modulo 2**64). The order depends only on (seed, epoch,
      shuffle): the same on every run.
    - drop_last: drop the tail that does not fill a global batch, and a last batch
      shorter than batch_size.
    - rank, world_size: this process's place among world_size readers of the same
      dataset; default to the RANK and WORLD_SIZE environment variables (torchrun and
      most launchers set them), else 0 and 1; explicit arguments win. Every rank gets
      the same number of batches; batches are cut from a global batch of batch_size *
      world_size, so the union over ranks is the dataset, plus wrap-around padding to
      fill the last global batch (uneven="pad", the default), or minus that tail
      (uneven="drop" or drop_last=True).
    - device: "cpu" (default), or "cuda" / "cuda:N" / a torch.device: tensors are
      copied to the GPU (``.to(device, non_blocking=True)``) and the slot is released at
      once. "cuda" means cuda:LOCAL_RANK when LOCAL_RANK is set. Needs output "torch".
    - prefetch: batch slots, 1 to 1024 (read-ahead plus the batches you hold; see
      "Memory" in help(shardfeed)). A ``for`` loop holds the previous batch while
      asking for the next, so it must be at least 2.
    - verify: check every record's XXH3-64 checksum as it is read (default).
    - on_corrupt: "error" raises shardfeed.Error naming the shard, record and offset;
      "skip" substitutes the next intact sample (batch shapes and counts do not change;
      see Batch.substituted and stats()["corrupt_substitutions"]). A shard file cut
      short while it is read is the same: an Error naming it (E_TRUNCATED), or with
      "skip" its lost records substituted; never a crash, whatever the engine.
    - output: "torch" gives torch.Tensor made zero-copy through DLPack
      (torch.from_dlpack); "numpy" gives numpy arrays (numpy.from_dlpack, or the buffer
      protocol on old NumPy); "dlpack" gives the raw shardfeed Array objects, which
      implement ``__dlpack__`` / ``__dlpack_device__`` and the buffer protocol, for any
      DLPack consumer; "auto" (default) is "torch" when torch can be imported, else
      "numpy". bool fields come out as bool. torch versions without unsigned
      16/32/64-bit integers get those fields as numpy arrays.
    - varlen: how variable-length fields come out. "list" (default) gives a list with
      one value per sample: ``bytes`` for dtype bytes (a copy), else a 1-D tensor (a
      view). "pair" gives ``(data, offsets)``: data a 1-D tensor of every value back to
      back (uint8 for dtype bytes), offsets an int64 tensor of ``size + 1`` byte offsets
      into data (sample i is bytes offsets[i]:offsets[i+1]). output="dlpack" always
      gives the (data, offsets) pair.
    - uneven: "pad" or "drop": the last global batch when the dataset does not fill it
      (see rank, world_size).
    - engine: "auto" (default: for shards already in the page cache, mmap for small
      fixed-size records and pread for the others; io_uring for cold data), "uring",
      "pread" or "mmap";
      stats()["engine"] says which ran.
    - io_threads: I/O threads; 0 (default) lets the reader choose from the engine, the
      record size and the CPU count.
    - block_size, window: for shuffle="block": samples per run (0: 64) and positions
      shuffled together (0: 16 * block_size).
    - direct: "auto" (default; buffered in this version), "on" (O_DIRECT: cold reads
      that bypass the page cache; needs a dataset packed with --align 4096 and fields
      whose byte size is a multiple of 4096, else Error saying why) or "off".

    Methods and properties: iter() / len() (batches per epoch on this rank), epoch,
    set_epoch(e), samples_per_epoch, state_dict() / load_state_dict(s), stats(),
    trace_start(max_batches=0) / trace_write(path), close() (also as a context
    manager), closed.
    """

    def __init__(self, path, batch_size, shuffle="global", seed=0, drop_last=False, rank=None,
                 world_size=None, device="cpu", prefetch=4, verify=True, on_corrupt="error",
                 output="auto", varlen="list", uneven="pad", engine="auto", io_threads=0,
                 block_size=0, window=0, direct="auto"):
        self._reader = None
        self._final_stats = None
        self.path = os.fspath(path)
        self.batch_size = opt.bounded("batch_size", batch_size, "reader.batch_size")
        self.shuffle = opt.choice("shuffle", opt.shuffle_name(shuffle), opt.SHUFFLE)
        self.seed = opt.seed64(seed)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = opt.dist_defaults(rank, world_size)
        self.prefetch = opt.bounded("prefetch", prefetch, "reader.prefetch")
        self.verify = bool(verify)
        self.on_corrupt = opt.choice("on_corrupt", on_corrupt, opt.ON_CORRUPT)
        self.uneven = opt.choice("uneven", uneven, opt.UNEVEN)
        self.engine = opt.choice("engine", engine, opt.ENGINE)
        self.direct = opt.choice("direct", direct, opt.DIRECT)
        self.io_threads = 0 if io_threads == 0 else opt.bounded("io_threads", io_threads, "reader.io_threads")
        self.block_size = opt.uint("block_size", block_size, 0, opt.U32)
        self.window = opt.uint("window", window, 0, opt.U32)
        output = opt.exact_choice("output", output, opt.OUTPUTS)
        self.varlen = opt.exact_choice("varlen", varlen, opt.VARLEN)
        self.output, torch = resolve_output(output, device)
        self._device = _device.resolve_device(device, torch)
        if self._device is not None and self.output != "torch":
            raise ValueError(f"shardfeed: device={device!r} needs output='torch'")
        self.device = str(self._device) if self._device is not None else "cpu"
        self._convert = Converter(self.output, self.varlen, torch)

        self._reader = _C.Reader(
            self.path, batch_size=self.batch_size, shuffle=opt.SHUFFLE[self.shuffle],
            seed=self.seed, rank=self.rank, world_size=self.world_size,
            drop_last=self.drop_last, uneven=opt.UNEVEN[self.uneven], prefetch=self.prefetch,
            engine=opt.ENGINE[self.engine], direct=opt.DIRECT[self.direct], verify=self.verify,
            on_corrupt=opt.ON_CORRUPT[self.on_corrupt], block_size=self.block_size,
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
        epoch = opt.uint("epoch", epoch, 0, opt.U64)
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
        epoch = opt.uint("state epoch", _plain(state["epoch"]), 0, opt.U64)
        nb = opt.uint("state next_batch", _plain(state["next_batch"]), 0, self._num_batches + 1)
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
        self._reader.trace_start(opt.uint("max_batches", max_batches, 0, opt.U64))

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
