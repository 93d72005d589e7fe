"""shardfeed.open and Dataset: inspecting a dataset (fields, shards, keys, class names) and
random access to its samples (copies)."""
import operator
import os
from collections import namedtuple

from . import _options as opt
from . import _shardfeed as _C

Field = namedtuple("Field", "name dtype shape storage descr item_size codec", defaults=("none",))
Field.__doc__ = """A field of the schema: name; dtype (NumPy's name: "float32", "bytes" for
opaque variable-length data); shape (per sample; (0,) for variable length); storage
("fixed", "variable" or "inline"); descr (NumPy descr, "<f4"); item_size (bytes per value,
0 for variable length); codec ("none" or "zstd": how values are stored; they are always
handed out decompressed)."""
Shard = namedtuple("Shard", "name first_sample num_samples file_size")
Shard.__doc__ = """A shard of the dataset: name (its file name), first_sample (the global id of
its first sample), num_samples, file_size (bytes)."""


def _sample_index(i, n):
    """i as an int: any integer (int, NumPy's and torch's integer scalars), never a bool,
    whose index would read sample 0 or 1 (ds[True], a one-element mask). One beyond 64 bits
    is out of range, as any other (before: OverflowError from the conversion to C)."""
    if opt.is_bool(i):
        raise TypeError(f"shardfeed: a sample index is an integer, not a bool ({i!r})")
    i = operator.index(i)
    if not -2 ** 63 <= i < 2 ** 63:
        raise IndexError(f"shardfeed: sample {i} out of range (the dataset has {n})")
    return i


class Dataset:
    """An opened dataset: len(ds), ds.fields, ds.shards, ds.class_names, ds.dataset_id,
    ds.key(i), ds.keys(), ds.index(key), ds[i] -> {field: value}. Values are copies that
    belong to the caller: writable numpy arrays (torch.from_numpy(ds[i]["img"]).add_(1)
    changes that copy only), decompressed for compressed fields; bytes for variable-length
    fields of dtype bytes. With verify (default) each record's checksum is checked when it
    is read; a damaged or truncated shard raises shardfeed.Error naming it."""

    def __init__(self, path, verify=True, remote_mode="cache", cache_dir=None, cache_limit=None):
        self.path = os.fspath(path)
        self.verify = bool(verify)
        self._remote = opt.remote(remote_mode, cache_dir, cache_limit)
        self._ds = _C.Dataset(self.path, **self._remote)
        self.fields = [Field(name, dtype_name, shape, storage, descr, item_size, codec)
                       for name, _code, dtype_name, descr, shape, storage, item_size, codec
                       in self._ds.fields()]
        self._key_index = None

    def __len__(self):
        """Samples in the dataset."""
        return self._ds.num_samples()

    @property
    def shards(self):
        """The shards, as Shard tuples in order."""
        return [Shard(*s) for s in self._ds.shards()]

    @property
    def align(self):
        """The byte alignment of the records (pack --align)."""
        return self._ds.align()

    @property
    def dataset_id(self):
        """The manifest's dataset_id, a 64-bit int (SPEC.md) that every shard repeats. The
        packer makes it from the input format, keys, value sizes, schema, class names and
        options: it names the dataset's plan, not its values, so the same inputs packed with
        the same options have the same id. A Loader's state_dict() records it and
        load_state_dict() refuses a state of another id."""
        return self._ds.dataset_id()

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
        """The key of sample `i` (e.g. "17" for img_17.npy)."""
        return self._ds.key(_sample_index(i, len(self)))

    def keys(self):
        """Every sample's key, in sample order."""
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
        """Sample `i` as {field: value} (copies; see Dataset); verify overrides the
        Dataset's verify for this read."""
        import numpy as np
        check = self.verify if verify is None else bool(verify)
        i = _sample_index(i, len(self))
        out = {}
        for k, f in enumerate(self.fields):
            v = self._ds.get(i, k, check)
            out[f.name] = v if isinstance(v, bytes) else np.asarray(v)
        return out

    def __getitem__(self, i):
        """ds[i] is get(i); ds[a:b] a list of samples."""
        if isinstance(i, slice):
            return [self.get(j) for j in range(*i.indices(len(self)))]
        return self.get(i)

    def __iter__(self):
        """Every sample, in order."""
        for i in range(len(self)):
            yield self.get(i)

    def close(self):
        """Releases the dataset's files."""
        self._ds.close()

    @property
    def closed(self):
        """True after close()."""
        return self._ds.closed

    def __enter__(self):
        """The Dataset itself; close() at the end of the with block."""
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        fields = ", ".join(f"{f.name}: {f.dtype}{list(f.shape)} {f.storage}" for f in self.fields)
        return f"<shardfeed.Dataset {self.path!r}: {len(self)} samples, {fields}>"


def open(path, verify=True, remote_mode="cache", cache_dir=None,  # noqa: A001 (like tarfile.open)
         cache_limit=None):
    """Opens the dataset in `path` for inspection and random access (see Dataset). `path` may
    be a URL (s3://bucket/prefix, http(s)://host/folder): its shards are then read through
    the local cache (cache_dir, default $XDG_CACHE_HOME/shardfeed; cache_limit bytes,
    default 16 GiB); see README "Remote datasets"."""
    return Dataset(path, verify=verify, remote_mode=remote_mode, cache_dir=cache_dir,
                   cache_limit=cache_limit)
