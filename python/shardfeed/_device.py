"""Delivery to a device: which device a Loader's reader delivers batches to, and the stream a
batch is imported on. The C library does the work (sf_reader_opts.device): the slab is
page-locked, each slot has a stream, an event and a buffer in a device pool allocated at open;
a batch's arrays view that pool (DLPack kDLCUDA) and are imported without a copy.

Streams (DLPack's protocol, py_array.c): importing a batch names the consumer's stream, which
waits for the batch's copy on the device; when the batch's last tensor dies the slot is released
after the work queued on that stream, so the next copy into its buffer cannot overtake it.

"host-copy" is the library's stand-in device for tests (SF_DEVICE_HOST_COPY): "device" memory
in host RAM filled by a copy thread, and HostStream objects standing in for CUDA streams, so
this whole path runs without a GPU."""
import contextlib
import threading

from . import _shardfeed as _C
from ._errors import error
from ._options import env_int

HOST_COPY = "host-copy"


class Device:
    """Where a Loader delivers: kind (a _C.DEVICE_* code), index (cuda:N), name ("cuda:0",
    "host-copy") and torch_device (a torch.device, or None without torch)."""

    __slots__ = ("kind", "index", "name", "torch_device")

    def __init__(self, kind, index, name, torch_device):
        self.kind, self.index, self.name, self.torch_device = kind, index, name, torch_device


def _cuda_index(device, torch):
    """N of "cuda" / "cuda:N" / torch.device("cuda", N); None for anything else. "cuda"
    means cuda:LOCAL_RANK when LOCAL_RANK is set, else the current device (0 without torch)."""
    if torch is not None and isinstance(device, torch.device):
        if device.type != "cuda":
            return None
        index = device.index
    elif isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        text = device[5:]
        if text and not text.isdigit():
            raise ValueError(f"shardfeed: device={device!r}: expected 'cuda' or 'cuda:N'")
        index = int(text) if text else None
    else:
        return None
    if index is None:
        index = env_int("LOCAL_RANK")
    if index is None:
        index = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
    return index


def resolve_device(device, torch, output):
    """None for CPU delivery, else the Device batches are delivered to."""
    if device is None or str(device) == "cpu":
        return None
    if isinstance(device, str) and device == HOST_COPY:
        return Device(_C.DEVICE_HOST_COPY, 0, HOST_COPY,
                      torch.device("cpu") if torch is not None else None)
    index = _cuda_index(device, torch)
    if index is None:
        raise ValueError(f"shardfeed: device={device!r}: expected 'cpu', 'cuda' or 'cuda:N' "
                         f"(or a torch.device of those)")
    name = f"cuda:{index}"
    if output != "torch":
        # Raw DLPack arrays need no torch; the library says whether the device exists.
        return Device(_C.DEVICE_CUDA, index, name, None)
    if not torch.cuda.is_available():
        raise error(f"shardfeed: device {name}: no GPU found: there is no CUDA device "
                    f"(torch.cuda.is_available() is False); use device='cpu'", _C.E_UNSUPPORTED)
    if index >= torch.cuda.device_count():
        raise error(f"shardfeed: device {name}: only {torch.cuda.device_count()} CUDA device(s)",
                    _C.E_INVALID)
    return Device(_C.DEVICE_CUDA, index, name, torch.device("cuda", index))


# ---- the consumer's stream a batch is imported on ----

_host = threading.local()


@contextlib.contextmanager
def host_stream(stream):
    """Within the block, this thread's Loaders on device="host-copy" import batches on
    `stream` (a _shardfeed.HostStream), as CUDA batches are imported on torch's current
    stream. Outside, the host waits for each copy itself."""
    old = getattr(_host, "stream", None)
    _host.stream = stream
    try:
        yield stream
    finally:
        _host.stream = old


def import_stream(device, torch):
    """The stream argument for __dlpack__ of a batch delivered to `device`: DLPack's
    convention for CUDA (torch's current stream on the device; its legacy default stream,
    handle 0, is passed as 1), the current host stream's handle for host-copy (None: the
    host waits)."""
    if device.kind == _C.DEVICE_CUDA:
        s = torch.cuda.current_stream(device.torch_device).cuda_stream
        return s if s else 1
    hs = getattr(_host, "stream", None)
    return hs.handle if hs is not None else None
