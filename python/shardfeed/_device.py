"""Delivery to a GPU: which device a Loader copies its batches to, and the copy. The one place
that knows about GPUs; the C library's own device path (sf_reader_opts.device) will replace it."""
from . import _shardfeed as _C
from ._errors import error
from ._options import env_int


def resolve_device(device, torch):
    """None for CPU delivery, else the torch.device batches are copied to. "cuda" means
    cuda:LOCAL_RANK when LOCAL_RANK is set."""
    if device is None:
        return None
    if torch is None:
        if str(device) == "cpu":
            return None
        raise ValueError(f"shardfeed: device={device!r} needs torch, which is not importable")
    if isinstance(device, str) and device == "cuda":
        local = env_int("LOCAL_RANK")
        device = f"cuda:{local}" if local is not None else "cuda"
    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError(f"shardfeed: device {dev}: expected 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        raise error(f"shardfeed: device {dev} asked for, but there is no CUDA device "
                    f"(torch.cuda.is_available() is False); use device='cpu'", _C.E_UNSUPPORTED)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise error(f"shardfeed: device {dev}: only {torch.cuda.device_count()} CUDA device(s)",
                    _C.E_INVALID)
    return dev


def to_device(batch, device):
    """Moves a CPU batch onto `device`. The copy is from pageable memory, so it completes
    before .to() returns and the slot may be released at once."""
    for k, v in batch.items():
        if hasattr(v, "to"):
            batch[k] = v.to(device, non_blocking=True)
        elif isinstance(v, tuple):
            batch[k] = tuple(t.to(device, non_blocking=True) if hasattr(t, "to") else t for t in v)
        elif isinstance(v, list):
            batch[k] = [t.to(device, non_blocking=True) if hasattr(t, "to") else t for t in v]
    return batch
