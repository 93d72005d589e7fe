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
       world_size=None, device="cpu", prefetch=None, verify=True, on_corrupt="error",
       output="auto", varlen="list", uneven="pad", engine="auto", io_threads=0,
       block_size=0, window=0, direct="auto", fields=None, weights=None,
       transforms=None)

help(shardfeed.Loader) describes every parameter (below, under CLASSES).

- DataLoader-shaped: ``Loader(path, 256, fields=("img", "label"))`` yields tuples
  in that order (``for x, y in loader:``); ``loader.dataset`` (the Dataset),
  ``batch_size``, ``drop_last`` and ``set_epoch`` are there as on a DataLoader
  with a DistributedSampler; ``loader.as_iterable_dataset()`` is a
  torch.utils.data.IterableDataset for frameworks that insist on
  ``torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)``.
- Mixing: ``Loader([path_a, path_b], 256, weights=[0.75, 0.25])`` interleaves
  whole batches of several datasets in those proportions (Batch.sources says
  which; see the weights parameter of help(shardfeed.Loader)).
- Iterating yields one Batch per step: a dict from field name to a tensor whose
  first dimension is the batch (``[size, *shape]``; the last batch of an epoch
  may be shorter unless drop_last). A Batch also has ``.ids`` (the global
  sample ids, int64, in batch order: ``shardfeed.open(path).key(i)`` gives the
  sample's key, e.g. "17" for img_17.npy), ``.source_ids`` (the ids whose data
  the batch holds: equal to ids except where a corrupt sample was substituted),
  ``.epoch``, ``.index`` (batch number within the epoch), ``.size`` and
  ``.substituted``. ids are a copy; the field tensors are not. Iterating a Batch
  raises TypeError (``x, y = batch`` would give field names): take fields by
  name, or use fields=. What the tensors
  are (torch, numpy, DLPack; variable-length fields as lists or pairs) is the
  Loader's output and varlen.
- Memory: the batches live in ``prefetch`` fixed slots allocated when the
  Loader opens (read-ahead plus the batches you hold), each sized for the
  largest batch the dataset can make (stats()["slab_bytes"] is their total).
  prefetch=None (default): as many as make 2 MiB, at least 4 and at most 8
  (4 for a dataset at a URL; ``loader.prefetch`` says which).
  A batch's slot stays valid while any tensor made from it is alive, even past
  its step and past ``del loader`` / ``close()``; then it is handed back for
  reading ahead. So keep fewer than ``prefetch`` batches alive: asking for
  another while all slots are held raises shardfeed.Error (a RuntimeError)
  instead of waiting forever, naming the (epoch, index) of the batches still
  held. Copy (``.clone()``) what you keep for long. A ``for`` loop holds the
  previous batch while asking for the next, so prefetch must be at least 2.
- Epochs: each ``iter(loader)`` runs the current epoch from its first batch (or
  from where load_state_dict() put it); when it is exhausted (its end reached,
  or every batch handed out, as ``zip(range(len(loader)), loader)`` does
  without asking for the end) the epoch advances by one. ``set_epoch(e)`` sets
  it explicitly (DistributedSampler style). The
  order depends only on (seed, epoch, shuffle): the same on every run.
  ``len(loader)`` is the number of batches per epoch for this rank. A new
  iter() makes older iterators of the same Loader raise RuntimeError.
- Resume: ``state_dict()`` returns a small dict (epoch, next batch, the
  options that decide the order, and the dataset's size and id,
  ``Dataset.dataset_id``); ``load_state_dict(s)`` on a new Loader with the
  same options makes its next iter() yield exactly the batches that were left
  in that epoch. A mismatching option, or a state of another dataset (another
  dataset_id, also at the same size), raises ValueError naming it; a state
  without dataset_id (saved by an older shardfeed) loads unchecked.
  ``state_dict()`` works after ``close()`` too, returning what it did before
  (close the Loader, then write the checkpoint). rank is
  not checked: every rank is at the same position, so one rank's state
  restores them all, also at another world_size or batch_size (elastic resume:
  the same global batches continue when batch_size * world_size is unchanged;
  otherwise fewer than one global batch of the epoch is seen again, none
  skipped; see Loader.load_state_dict).
- ``stats()``: bytes read, samples, batches, substitutions, time waited in the
  loader, I/O and checksum thread-seconds, and what the reader runs with
  (engine, io_threads, prefetch, slab size, ...); ``elapsed_seconds`` (first
  batch request to the latest), and the bottleneck: ``verdict`` is
  "io-bound", "checksum-bound", "copy-bound", "decode-bound" (images),
  "consumer-bound" (the loop's own
  work per batch sets the pace) or "none", from ``fractions``
  (consumer_wait, device_wait, io_busy, io_share, checksum_share, copy_share,
  decode_share; decode_seconds: image decoding, apart from io_seconds);
  the rule is sf_reader_verdict's (shardfeed/reader.h, the README). With
  device="cuda" the reader copies on its own streams: device_bytes (its pool),
  device_copy_bytes and device_copy_seconds (H2D bytes and the copies' GPU
  time), device_enqueue_seconds (enqueuing copies), device_stream_wait_seconds
  (your stream stalled waiting for copies) and device_wait_seconds (the host
  waiting for copies) count them; "copy-bound" means you waited more for
  copies than for batches (README, "GPU delivery").
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
    len(ds), ds.fields, ds.shards, ds.class_names, ds.dataset_id, ds.key(0), ds.keys()
    sample = ds[0]        # {"img": ndarray (a writable copy), "label": ...}

Errors from the C library raise shardfeed.Error (a RuntimeError) whose message
is the library's (sf_strerror + sf_last_error: file, shard, record, offset),
with ``.code`` (an SF_E_* constant such as shardfeed.E_CHECKSUM, or -errno) and
``.errno`` (the errno, or None).
"""
from . import _shardfeed as _C
from . import image
from ._convert import Batch
from ._dataset import Dataset, Field, Shard, open  # noqa: A004  (shardfeed.open, like tarfile.open)
from ._loader import Loader
from ._shardfeed import Error

__version__ = _C.__version__
__all__ = ["Loader", "Batch", "Dataset", "Field", "Shard", "Error", "open", "image"]

for _name in dir(_C):
    if _name.startswith("E_"):
        globals()[_name] = getattr(_C, _name)
        __all__.append(_name)

# The public classes are shardfeed.X wherever they are defined: in reprs, help() and pickles.
for _name in ("Loader", "Batch", "Dataset", "Field", "Shard", "open"):
    globals()[_name].__module__ = __name__
del _name
