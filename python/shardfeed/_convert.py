"""From the extension's batches to what a Loader yields: a Batch of torch tensors (zero-copy
through DLPack), numpy arrays, or the raw DLPack-capable Array objects; variable-length fields
as lists or (data, offsets) pairs. Device batches (_device.py) are imported on the consumer's
stream."""
from . import _device
from . import _shardfeed as _C


def import_torch():
    """The torch module, or None when it cannot be imported."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def resolve_output(output, device):
    """(output, torch): "auto" made "torch" or "numpy", and the torch module when delivery to
    torch or to a device needs it (else None)."""
    torch = import_torch() if output in ("auto", "torch") or str(device) != "cpu" else None
    if output == "torch" and torch is None:
        raise ValueError("shardfeed: output='torch' but torch is not importable")
    if output == "auto":
        output = "torch" if torch is not None else "numpy"
    return output, torch


class Batch(dict):
    """One batch: a dict from field name to tensor (or array), plus
    ids / source_ids (int64, a copy), epoch, index, size, substituted and sources.

    Iterating a Batch raises TypeError: ``x, y = batch`` would otherwise give the
    field *names*. Take fields by name (``batch["img"]``), use ``batch.keys()`` /
    ``batch.items()``, or construct the Loader with ``fields=("img", "label")`` to get
    tuples. dict(batch), ``{**batch}``, len() and ``in`` work as for a dict."""

    # ids and source_ids are made on first use, from copies taken with the batch (a loop that
    # never looks at them pays nothing per batch for them: 1.2 us of numpy and torch calls).
    __slots__ = ("_ids", "_source_ids", "_raw_ids", "_conv", "epoch", "index", "substituted",
                 "_sources")

    @property
    def ids(self):
        """int64 global sample ids, one per sample (a copy: keeping it keeps no slot)."""
        try:
            return self._ids
        except AttributeError:
            self._ids = self._conv.ids(self._raw_ids[0])
            return self._ids

    @property
    def source_ids(self):
        """int64: the ids whose data the batch holds (ids, unless corrupt samples were
        substituted)."""
        try:
            return self._source_ids
        except AttributeError:
            raw = self._raw_ids[1]
            self._source_ids = self.ids if raw is None else self._conv.ids(raw)
            return self._source_ids

    @property
    def size(self):
        """Samples in the batch."""
        try:
            raw = self._raw_ids
        except AttributeError:  # a copy (__reduce__): its ids were made
            return len(self._ids)
        return len(raw[0]) // 8

    @property
    def sources(self):
        """int64, one per sample: the index of the dataset each sample came from in the
        Loader's list of paths (all 0 for a Loader of one dataset)."""
        try:
            s = self._sources
        except AttributeError:
            return self.ids * 0  # zeros of the ids' kind (torch or numpy) and dtype
        if isinstance(s, int):  # a mix's dataset index: made on first use, as ids are (on
            s = self._sources = self.ids * 0 + s  # CUDA making ids waits for the stream)
        return s

    def __reduce__(self):
        """pickle, copy.copy and copy.deepcopy: a Batch of the same fields and attributes (deepcopy's
        and an unpickled one's fields are copies, which keep no slot) without the Loader's
        converter, which cannot be pickled (both raised "cannot pickle 'module' object")."""
        return (_copied_batch, (dict(self), self.ids, self.source_ids, self.sources, self.epoch,
                                self.index, self.substituted))

    def __iter__(self):
        """Raises TypeError: take the fields by name (see Batch)."""
        raise TypeError("shardfeed: a Batch is a dict of fields: take them by name "
                        "(batch['img']), iterate batch.keys() or batch.items(), or pass "
                        "fields=('img', 'label') to the Loader to get tuples "
                        "(for x, y in loader)")

    def __repr__(self):
        fields = ", ".join(f"{k}: {_describe(v)}" for k, v in self.items())
        return f"<shardfeed.Batch epoch {self.epoch} index {self.index} size {self.size}: {fields}>"


def _copied_batch(fields, ids, source_ids, sources, epoch, index, substituted):
    """A Batch rebuilt from Batch.__reduce__'s parts: its ids made already."""
    b = Batch(fields)
    b._ids, b._source_ids, b._sources = ids, source_ids, sources
    b.epoch, b.index, b.substituted = epoch, index, substituted
    return b


def _describe(v):
    shape = getattr(v, "shape", None)
    dtype = getattr(v, "dtype", None)
    if shape is not None:
        return f"{tuple(shape)} {dtype}"
    return type(v).__name__


class Converter:
    """Turns a C batch into a Batch of torch tensors, numpy arrays or raw
    DLPack objects."""

    def __init__(self, output, varlen, torch, device=None):
        self.output = output
        self.varlen = varlen
        self.torch = torch
        self.device = device  # a _device.Device, or None for the CPU
        # CUDA memory reaches torch only: a field torch cannot import is an error, not numpy.
        self.cuda = device is not None and device.kind == _C.DEVICE_CUDA
        self.stream = None    # the __dlpack__ stream of the batch being converted
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
            # The capsule is made here, with the stream of the batch (None on the CPU), so
            # that every torch version imports it the same way.
            c_from = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack
            self.torch_from = lambda a: c_from(a.__dlpack__(stream=self.stream))
        # Host fields of the dtypes that array() has delivered plainly once (no bool view, no
        # fallback, no stream) go straight to `plain` in __call__: a call per field.
        self.plain_dtypes = set()
        self.plain = None
        if device is None and output == "torch":
            self.plain = lambda a: c_from(a.__dlpack__())
        elif device is None and output == "numpy" and self.np_from_dlpack is not None:
            self.plain = self.np_from_dlpack

    def ids(self, raw):
        np = self.np
        if np is None:
            import numpy as np
            self.np = np
        a = np.frombuffer(raw, dtype="<i8")
        if self.output == "torch":
            t = self.torch.from_numpy(a)
            # Every field on one device, ids too: a small copy from pageable memory.
            return t.to(self.device.torch_device) if self.cuda else t
        return a

    def array(self, a, dtype):
        out = self.output
        if out == "dlpack":
            return a
        if out == "torch" and dtype not in self.torch_fallback:
            try:
                t = self.torch_from(a)
            except (RuntimeError, TypeError, BufferError):
                if self.cuda:
                    raise
                self.torch_fallback.add(dtype)
            else:
                if dtype == _C.DT_BOOL:
                    return t.view(self.torch.bool)
                if self.plain is not None:
                    self.plain_dtypes.add(dtype)
                return t
        if self.cuda:
            raise TypeError(f"shardfeed: dtype {a.dtype} cannot be delivered to CUDA with this "
                            f"torch {self.torch.__version__} (it has no such dtype); use "
                            f"output='dlpack' or device='cpu'")
        np = self.np
        if self.np_from_dlpack is not None:
            x = self.np_from_dlpack(a)
            if dtype == _C.DT_BOOL:
                return x.view(np.bool_)
            if self.plain is not None and out == "numpy":
                self.plain_dtypes.add(dtype)
            return x
        return np.asarray(a)

    def var(self, pair, dtype):
        data, offsets = pair
        if self.output == "dlpack" or (self.varlen == "pair" and not self.cuda):
            return (self.array(data, dtype), self.array(offsets, _C.DT_INT64))
        offs = memoryview(offsets).tolist()
        if self.cuda and self.varlen == "pair":
            return (self.array(data, dtype), self.ids(offsets))  # offsets copied to the device
        if dtype == _C.DT_BYTES and not self.cuda:
            raw = bytes(memoryview(data))
            return [raw[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
        d = self.array(data, dtype)
        esz = data.itemsize
        return [d[offs[i] // esz:offs[i + 1] // esz] for i in range(len(offs) - 1)]

    def __call__(self, b):
        if self.device is not None and self.output == "torch":
            self.stream = _device.import_stream(self.device, self.torch)
        out = Batch()
        plain, plain_dtypes = self.plain, self.plain_dtypes
        epoch, index, substituted, fields, ids, source_ids = b.unpack()
        for name, storage, dtype, value in fields:
            if dtype in plain_dtypes and storage != _C.STORAGE_VARIABLE:
                out[name] = plain(value)
            elif storage == _C.STORAGE_VARIABLE:
                out[name] = self.var(value, dtype)
            else:
                out[name] = self.array(value, dtype)
        out._conv = self
        out._raw_ids = (ids, source_ids)
        out.epoch = epoch
        out.index = index
        out.substituted = substituted
        return out
