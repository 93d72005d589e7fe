"""shardfeed.Loader: options, iteration over epochs, resume (state_dict), stats and traces."""
import inspect
import os
import threading

from . import _device
from . import _options as opt
from . import _resume
from . import image as _image
from . import _shardfeed as _C
from ._convert import Converter, resolve_output
from ._dataset import Dataset
from ._errors import error
from ._shardfeed import Error


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

    def _check_current(self):
        if self._loader._gen != self._gen:
            self._done = True
            raise replaced_error()

    def __next__(self):
        if self._done:
            raise StopIteration
        loader = self._loader
        # One step at a time, from the read to its count: the reader refuses a second
        # thread's read while one runs, but not one that starts between a read's return and
        # its count. Threads sharing this iterator so handed out batch (1, 0) in epoch 0 (the
        # reader had gone on past an end another thread took), or dropped the epoch's last
        # batch. `took` (set with the flag, in one step) frees the token on every way out,
        # a signal's exception included.
        took = False
        try:
            with loader._lock:
                self._check_current()
                if self._done:  # another thread sharing the iterator took the epoch's end
                    raise StopIteration
                if loader._stepping:
                    raise RuntimeError("shardfeed: the reader is in use by another thread (one "
                                       "thread iterates a Loader at a time)")
                took = loader._stepping = True
            try:
                b = loader._reader.next()
            except Error as e:
                if e.code == _C.E_STATE:
                    raise _held_error(e, loader) from None
                raise
            # The call let go of the GIL: another thread's set_epoch(), load_state_dict() or
            # close() may have come meanwhile. Then the position it set stands: this batch (or
            # this epoch's end) is dropped, not counted over it. The check and the update are
            # one step under the Loader's lock, which those calls take too.
            with loader._lock:
                self._check_current()
                if b is None:
                    self._done = True
                    loader._epoch_ended()
                    raise StopIteration
                loader._pos = b.index + 1
        finally:
            if took:
                loader._stepping = False
        batch = loader._convert(b)
        if loader.fields is not None:
            return tuple(batch[name] for name in loader.fields)
        return batch


def _forked(loader):
    """Whether this process is a fork of the one that made `loader` (a Loader or a mix)."""
    return os.getpid() != loader._pid


def replaced_error():
    return RuntimeError("shardfeed: this iterator was replaced: a newer iter(loader), set_epoch(), "
                        "load_state_dict() or close() came after it")


def _held_error(e, loader):
    # The library's message lists the batches held as (epoch, index): the
    # .epoch and .index of the Batch objects (or of the batches whose tensors)
    # something still references.
    return error(f"{e} -- every batch keeps its slot while the Batch or any tensor made from it "
                 f"is alive (look for a Batch with that .epoch and .index, or a tensor taken from "
                 f"one); keep fewer than prefetch={loader.prefetch} batches (copy with .clone() "
                 f"what you keep) or raise prefetch", e.code)


class EpochControl:
    """What every Loader has, of one dataset or a mix: the epoch and set_epoch, the position
    load_state_dict sets (_seek), and use in a with block. Needs _epoch, _pos, _resume, _gen,
    _lock (a threading.RLock: the position's and _gen's changes, so that an iterator's "still
    current? then count this batch" is one step against another thread's seek or close;
    re-entrant, so that a signal handler which seeks or closes while the main thread's
    iterator holds it does not deadlock) and _check_open()."""

    @property
    def epoch(self):
        """The epoch the next iter() runs."""
        return self._epoch + 1 if self._took_every_batch() else self._epoch

    def _epoch_ended(self):
        """At an epoch's end (under _lock): the next one from its first batch. After the last
        epoch the reader takes (opt.EPOCHS - 1, the C reader's SF_MAX_EPOCH) there is none: the
        position stays at its end, a state load_state_dict() takes (it said epoch 2**63, which
        it refused)."""
        if self._epoch < opt.EPOCHS - 1:
            self._epoch += 1
            self._pos = 0
        else:
            self._pos = self._resume = len(self)  # every later iter() starts (and ends) there

    def _took_every_batch(self):
        """Every batch of the epoch was handed out, but not its end: a loop that takes len()
        batches without asking for one more (zip(range(len(loader)), loader), islice). The
        epoch is over all the same: the next iter() runs the next one (it replayed this one,
        the same order every epoch, before)."""
        return self._resume is None and self._pos >= len(self) > 0 and self._epoch < opt.EPOCHS - 1

    def set_epoch(self, epoch):
        """The next iter() runs `epoch` from its start, as DistributedSampler.set_epoch.
        Right after load_state_dict(), set_epoch of the saved epoch keeps the saved
        position, so the usual loop (set_epoch at the top of every epoch) resumes
        mid-epoch instead of replaying it."""
        self._check_open()
        epoch = opt.uint("epoch", epoch, 0, opt.EPOCHS)
        if self._resume is not None and epoch == self._epoch:
            return
        self._seek(epoch, 0)
        self._resume = None

    def _begin_epoch(self):
        """For iter(): retires older iterators and takes where this one starts: (its
        generation, the epoch, the batch: where load_state_dict() put it, else 0, and what
        _begin_failed() puts back)."""
        with self._lock:
            self._gen += 1
            before = (self._epoch, self._resume, self._pos)
            if self._took_every_batch():
                self._epoch += 1
            start = self._resume if self._resume is not None else 0
            self._resume = None
            self._pos = start
            return self._gen, self._epoch, start, before

    def _begin_failed(self, gen, before):
        """iter() raised after _begin_epoch() (the reader in use by another thread, say): the
        position load_state_dict() set stays for the next iter(), as state_dict() says, unless
        a seek came since. Before, the failed iter() had taken it, and the next one started the
        epoch from its first batch while state_dict() still reported the loaded one."""
        with self._lock:
            if self._gen == gen:
                self._epoch, self._resume, self._pos = before

    def _seek(self, epoch, batch):
        """The next iter() runs `epoch` from `batch`; older iterators are retired."""
        with self._lock:
            self._epoch, self._pos, self._resume = epoch, batch, batch
            self._gen += 1

    def __enter__(self):
        """The Loader itself; close() at the end of the with block."""
        return self

    def __exit__(self, *exc):
        self.close()


class Loader(EpochControl):
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
    - device: "cpu" (default), or "cuda" / "cuda:N" / a torch.device: the reader copies
      each batch from its page-locked slab into a device buffer of its own (a pool
      allocated at open) on a stream of its own, and every field (labels too; ids as well)
      comes out as a CUDA tensor viewing that buffer, imported on torch's current stream,
      which waits for the copy on the GPU (the host never blocks). The slot is released
      when the batch's last tensor dies, after the work queued on that stream so far. Use
      a batch on one stream, or see README "GPU delivery". "cuda" means cuda:LOCAL_RANK
      when LOCAL_RANK is set. Needs output "torch" (or "dlpack": raw kDLCUDA arrays).
    - prefetch: batch slots, 2 to 1024 (read-ahead plus the batches you hold; see
      "Memory" in help(shardfeed)). A ``for`` loop holds the previous batch while
      asking for the next, so it must be at least 2. None (default): as many as
      make 2 MiB, at least 4 and at most 8 (4 for a dataset at a URL);
      ``loader.prefetch`` is the number chosen.
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
    - engine: "auto" (default: for shards already in the page cache, mmap, except pread
      for records with large compressed fields; at a URL in remote_mode "cache", mmap for
      small fixed-size records and pread for the others; io_uring for cold data; range
      requests in remote_mode "direct"), "uring", "pread" or "mmap"; stats()["engine"]
      says which ran.
    - io_threads: I/O threads; 0 (default) lets the reader choose from the engine, the
      record size and the CPU count.
    - block_size, window: for shuffle="block": samples per run (0: 64) and positions
      shuffled together (0: 16 * block_size).
    - direct: "auto" (default: O_DIRECT when the dataset is larger than the memory the
      page cache may use, its records average 64 KiB or more and its layout allows it,
      else buffered; stats()["direct_reason"] says which and why), "on" (O_DIRECT: cold
      reads that bypass the page cache; needs a dataset packed with --align 4096 and
      fields whose byte size is a multiple of 4096, else Error saying why) or "off";
      True/False mean on/off.
    - fields: None (default) yields each batch as a Batch (a dict by field name); a
      tuple of field names, e.g. ("img", "label"), yields a tuple of those fields'
      tensors in that order, so that ``for x, y in loader:`` works as with a
      DataLoader. A name the dataset lacks is a ValueError listing the fields it has.
    - weights: mixing. With `path` a list of dataset folders, weights (one number > 0
      per path; they need not sum to 1) are the proportions of batches taken from each.
      Every batch comes whole from one dataset (zero-copy); Batch.sources (int64, one
      per sample) is the index of its dataset in the list, Batch.ids its sample ids
      there. An epoch is as many batches as the datasets give without any running past
      its own epoch: the first to run out at its weight gives all its batches (or all
      but one), the others a prefix of their epoch's order (a different one each
      epoch; with shuffle="none", their next batches, wrapping around). Which step takes which dataset is drawn from (seed, epoch): the same on
      every run and rank. The fields read (fields=, else all of the first dataset's)
      must be in every dataset with the same dtype and shape (else ValueError naming
      the field). Such a Loader also has counts (batches per dataset per epoch) and
      datasets; its state_dict() resumes at the same world size only. README "Mixing
      datasets".
    - transforms: {field: shardfeed.image.RandomResizedCrop(...) | CenterCrop(...) |
      Decode()}: that field's encoded images (JPEG, PNG, WebP) are decoded, cropped,
      resized and flipped in the reader's I/O threads, and the batch holds a uint8
      tensor [B, 3, H, W] (help(shardfeed.image)).
    - remote_mode, cache_dir, cache_limit: for `path` a URL (s3://bucket/prefix,
      http(s)://host/folder; README "Remote datasets"). remote_mode "cache" (default):
      whole shards are downloaded ahead into the node's cache folder cache_dir (None:
      $SHARDFEED_CACHE_DIR, else $XDG_CACHE_HOME/shardfeed, else ~/.cache/shardfeed), kept
      at or under cache_limit bytes (None: $SHARDFEED_CACHE_LIMIT, else 16 GiB) and shared
      by the node's processes; "direct": each record by an HTTP range request, nothing on
      disk (global shuffles over more data than the cache holds). Every record is checked
      against its checksum either way.

    Methods and properties: iter() / len() (batches per epoch on this rank), epoch,
    set_epoch(e), samples_per_epoch, state_dict() / load_state_dict(s), stats(),
    trace_start(max_batches=0) / trace_write(path), close() (also as a context
    manager), closed; as DataLoader has them: dataset (the shardfeed.Dataset),
    batch_size, drop_last; as_iterable_dataset() for frameworks that want a
    torch.utils.data.DataLoader.
    """

    def __init__(self, path, batch_size, shuffle="global", seed=0, drop_last=False, rank=None,
                 world_size=None, device="cpu", prefetch=None, verify=True, on_corrupt="error",
                 output="auto", varlen="list", uneven="pad", engine="auto", io_threads=0,
                 block_size=0, window=0, direct="auto",
                 # ---- DataLoader-shaped API (issue 17) ----
                 fields=None,
                 # ---- end DataLoader-shaped API ----
                 # ---- mixing (issue 17) ----
                 weights=None,
                 # ---- end mixing ----
                 # transforms= (issue 14): image fields decoded in the I/O threads
                 transforms=None,
                 # a dataset at a URL (issue 18): how its records are read
                 remote_mode="cache", cache_dir=None, cache_limit=None,
                 ):
        self._reader = None
        self._final_stats = None
        self._lock = threading.RLock()
        self._pid = os.getpid()  # a forked child touches neither the reader nor _lock
        self._stepping = False  # a step under way (_EpochIterator.__next__)
        # ---- mixing (issue 17): a list of paths is a MixedLoader (Loader.__new__) ----
        if weights is not None:
            raise ValueError("shardfeed: weights= mixes several datasets: give path as a list "
                             "of dataset folders, one weight each")
        # ---- end mixing ----
        self.path = os.fspath(path)
        self._remote = opt.remote(remote_mode, cache_dir, cache_limit)
        self.batch_size = opt.bounded("batch_size", batch_size, "reader.batch_size")
        self.shuffle = opt.choice("shuffle", opt.shuffle_name(shuffle), opt.SHUFFLE)
        self.seed = opt.seed64(seed)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = opt.dist_defaults(rank, world_size)
        self.prefetch = None if prefetch is None else opt.prefetch_slots(prefetch)
        self.verify = bool(verify)
        self.on_corrupt = opt.choice("on_corrupt", on_corrupt, opt.ON_CORRUPT)
        self.uneven = opt.choice("uneven", uneven, opt.UNEVEN)
        self.engine = opt.choice("engine", engine, opt.ENGINE)
        self.direct = opt.choice("direct", opt.direct_name(direct), opt.DIRECT)
        self.io_threads = 0 if io_threads == 0 else opt.bounded("io_threads", io_threads, "reader.io_threads")
        self.block_size = opt.uint("block_size", block_size, 0, opt.U32)
        self.window = opt.uint("window", window, 0, opt.U32)
        output = opt.exact_choice("output", output, opt.OUTPUTS)
        self.varlen = opt.exact_choice("varlen", varlen, opt.VARLEN)
        self.output, torch = resolve_output(output, device)
        self._device = _device.resolve_device(device, torch, self.output)
        if self._device is not None and self.output == "numpy" and \
                self._device.kind == _C.DEVICE_CUDA:
            raise ValueError(f"shardfeed: device={device!r} needs output='torch' or 'dlpack'")
        self.device = self._device.name if self._device is not None else "cpu"
        self._convert = Converter(self.output, self.varlen, torch, self._device)
        dev_kind = self._device.kind if self._device is not None else _C.DEVICE_CPU
        dev_index = self._device.index if self._device is not None else 0

        self._reader = _C.Reader(
            self.path, batch_size=self.batch_size, shuffle=opt.SHUFFLE[self.shuffle],
            seed=self.seed, rank=self.rank, world_size=self.world_size,
            drop_last=self.drop_last, uneven=opt.UNEVEN[self.uneven], prefetch=self.prefetch or 0,
            engine=opt.ENGINE[self.engine], direct=opt.DIRECT[self.direct], verify=self.verify,
            on_corrupt=opt.ON_CORRUPT[self.on_corrupt], block_size=self.block_size,
            window=self.window, io_threads=self.io_threads, device=dev_kind,
            device_index=dev_index,
            # transforms= (issue 14): image fields decoded in the I/O threads (shardfeed.image)
            images=_image.specs(transforms), **self._remote)
        self.transforms = dict(transforms) if transforms else {}
        self._num_batches = self._reader.num_batches()
        # Kept, as _num_batches is, for state_dict(), which must work after close() freed
        # the reader (a training loop may close the Loader before writing its checkpoint).
        self._samples_per_epoch = self._reader.samples_per_epoch()
        # What state_dict() records of the dataset: from the files the reader opened, not by
        # opening the path again (it may hold another dataset by then, or be gone).
        self._identity = self._reader.dataset_identity()
        self.prefetch = self._reader.stats()["prefetch"]  # chosen by the reader when None
        # ---- DataLoader-shaped API (issue 17) ----
        self._dataset = None
        self._dataset_schema = None
        self.fields = None if fields is None else opt.field_names(
            fields, [f.name for f in self._schema()[0]])
        # ---- end DataLoader-shaped API ----
        self._epoch = 0
        self._pos = 0        # next batch of the current epoch (what state_dict reports)
        self._resume = None  # where the next iter() starts, after load_state_dict()
        self._gen = 0        # bumped to retire older iterators

    # ---- mixing (issue 17) ----
    def __new__(cls, *args, **kwargs):
        """A list or tuple of paths makes a Loader that mixes those datasets (_mix.py)."""
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        if isinstance(bound.arguments.get("path"), (list, tuple)):
            from ._mix import MixedLoader
            kw = dict(bound.arguments)
            del kw["self"]
            return MixedLoader(**kw)
        return super().__new__(cls)

    # ---- end mixing ----

    # ---- iteration ----
    def __len__(self):
        """Batches per epoch on this rank (the same on every rank)."""
        return self._num_batches

    @property
    def dataset(self):
        """The shardfeed.Dataset read (len, [i], keys, fields), opened on first use."""
        if self._dataset is None:
            self._dataset = Dataset(self.path, verify=self.verify, **self._remote_names())
        return self._dataset

    def _remote_names(self):
        """The remote options as Dataset takes them."""
        r = self._remote
        mode = next(k for k, v in opt.REMOTE_MODE.items() if v == r["remote_mode"])
        return {"remote_mode": mode, "cache_dir": r["cache_dir"],
                "cache_limit": r["cache_limit"] or None}

    def as_iterable_dataset(self):
        """This Loader as a torch.utils.data.IterableDataset, for frameworks that insist on a
        torch DataLoader (Lightning's and Hugging Face's Trainer): iterate it with
        ``torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)`` (the batches are
        already made; shardfeed reads with its own threads). It yields what the Loader
        yields (tuples with fields=, else plain dicts of the fields: DataLoader rebuilds
        mappings, so the Batch attributes do not survive it), has len() and
        set_epoch(e), which sets the Loader's epoch."""
        try:
            from ._interop import LoaderDataset
        except ImportError as e:
            raise ImportError(f"shardfeed: as_iterable_dataset() needs torch: {e}") from None
        return LoaderDataset(self)

    @property
    def samples_per_epoch(self):
        """Samples per epoch for this rank (padding included, drops excluded)."""
        return self._samples_per_epoch

    def __iter__(self):
        """An iterator over the current epoch, from its first batch or from where
        load_state_dict() put it (see Epochs in help(shardfeed))."""
        self._check_open()
        gen, epoch, start, before = self._begin_epoch()
        try:
            if self._reader.state() != (epoch, start):
                self._reader.restore(epoch, start)
        except BaseException:
            self._begin_failed(gen, before)
            raise
        return _EpochIterator(self, gen)

    # ---- resume ----
    def _options(self):
        num_samples, dataset_id = self._identity
        return {"batch_size": self.batch_size, "shuffle": self.shuffle, "seed": self.seed,
                "drop_last": self.drop_last, "world_size": self.world_size,
                "uneven": self.uneven, "block_size": self.block_size, "window": self.window,
                "num_batches": self._num_batches, "samples_per_epoch": self.samples_per_epoch,
                "num_samples": num_samples, "dataset_id": dataset_id}

    def _schema(self):
        """(fields, number of samples, dataset_id) of the dataset, found once: from
        loader.dataset if it is open, else from a Dataset opened and closed at once (it holds
        a file descriptor per shard, which a Loader need not keep). For fields= and mixing;
        state_dict() takes the size and id from the reader (_identity)."""
        if self._dataset_schema is None:
            if self._dataset is not None:
                ds = self._dataset
                self._dataset_schema = (ds.fields, len(ds), ds.dataset_id)
            else:
                with Dataset(self.path, verify=False, **self._remote_names()) as ds:
                    self._dataset_schema = (ds.fields, len(ds), ds.dataset_id)
        return self._dataset_schema

    def state_dict(self):
        """Where this Loader is: {"version", "epoch", "next_batch", "rank", options...,
        "num_samples" and "dataset_id" (the dataset's size and Dataset.dataset_id)}. O(1).
        Any rank's state restores every rank, also at another world size (see
        load_state_dict). After close() it is still there, the same as before close(): a
        training script may close the Loader and then write its checkpoint."""
        pos = self._resume if self._resume is not None else self._pos
        s = {"version": _resume.VERSION, "epoch": self._epoch, "next_batch": pos,
             "rank": self.rank}
        s.update(self._options())
        return s

    def load_state_dict(self, state):
        """The next iter() continues from `state` (see state_dict). The options that decide
        the order (shuffle, seed, drop_last, uneven, block_size, window, the dataset's size)
        must be the same, else ValueError naming them; so must the dataset: a state whose
        dataset_id is not this dataset's (Dataset.dataset_id) is refused with a ValueError
        naming both ids, also at the same size. batch_size and world_size may differ
        (elastic resume): with the same batch_size * world_size the same global batches
        continue; otherwise it resumes at the global batch holding the first sample not yet
        handed out, so fewer than batch_size * world_size samples of the interrupted epoch
        are seen again and none is skipped (README "Elastic resume"). States saved by an
        older shardfeed load: version 1 as before (same batch_size and world_size), and a
        state without dataset_id (saved before it was recorded) without that check. It
        needs an open Loader (ValueError after close()); state_dict() does not."""
        self._check_open()
        epoch, nb = _resume.check(state, self._options())
        self._seek(epoch, nb)

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
        """Stops recording and writes the trace (Chrome trace-event JSON) to path. When
        writing fails, the trace is kept: call trace_write again with another path."""
        self._check_open()
        self._reader.trace_write(os.fspath(path))

    def close(self):
        """No more batches. Memory of batches still alive stays valid until they die."""
        if self._reader is not None and not self._reader.closed and _forked(self):
            # A thread of the parent may have held the reader's mutex or _lock at the fork:
            # taking either waited for ever. Marked closed; the parent's reader is its own.
            self._reader.close()
            return
        if self._reader is not None and not self._reader.closed:
            self._final_stats = self._reader.stats()
            # Before the close, which lets go of the GIL: an iterator in another thread then
            # says it was replaced, not that the reader is closed.
            with self._lock:
                self._gen += 1
            self._reader.close()

    @property
    def closed(self):
        """True after close()."""
        return self._reader is None or self._reader.closed

    def __del__(self):
        # The C reader itself lives on until the last batch made from it dies.
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.close()

    def _check_open(self):
        if self._reader is None or self._reader.closed:
            raise ValueError("shardfeed: the Loader is closed")
        if _forked(self):  # before _lock, which a thread of the parent may have held
            raise RuntimeError("shardfeed: this Loader was opened in another process (before "
                               "a fork); open a new Loader in this process")

    def __repr__(self):
        return (f"shardfeed.Loader({self.path!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle!r}, seed={self.seed}, rank={self.rank}, "
                f"world_size={self.world_size}, device={self.device!r}, output={self.output!r}, "
                f"epoch={self._epoch}, batches={self._num_batches})")


# help(shardfeed.Loader) and inspect.signature show __init__'s parameters, not those of the
# __new__ that picks a mixing Loader for a list of paths.
Loader.__signature__ = inspect.signature(Loader.__init__).replace(
    parameters=list(inspect.signature(Loader.__init__).parameters.values())[1:])
