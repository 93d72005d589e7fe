"""Checking the Loader's arguments: choices, integer ranges, and rank / world size from the
environment. Every message starts with "shardfeed: " and names the argument (or the
environment variable) that was wrong."""
import operator
import os

from . import _shardfeed as _C

# Each choice's name (what the Loader keeps and state_dict() reports) and its C code.
SHUFFLE = {"none": _C.SHUFFLE_NONE, "global": _C.SHUFFLE_GLOBAL, "block": _C.SHUFFLE_BLOCK}
UNEVEN = {"pad": _C.UNEVEN_PAD, "drop": _C.UNEVEN_DROP}
ENGINE = {"auto": _C.ENGINE_AUTO, "uring": _C.ENGINE_URING, "pread": _C.ENGINE_PREAD,
          "mmap": _C.ENGINE_MMAP}
DIRECT = {"auto": _C.DIRECT_AUTO, "on": _C.DIRECT_ON, "off": _C.DIRECT_OFF}
ON_CORRUPT = {"error": _C.ON_CORRUPT_ERROR, "skip": _C.ON_CORRUPT_SKIP}
REMOTE_MODE = {"cache": 0, "direct": 1}  # sf_remote_mode
OUTPUTS = ("auto", "torch", "numpy", "dlpack")
VARLEN = ("list", "pair")

U32 = 2 ** 32
U64 = 2 ** 64
# Epochs are below 2**63: the C reader's SF_MAX_EPOCH (2**63 - 1), past which its count of
# epochs could wrap to 0.
EPOCHS = 2 ** 63
# The library's option bounds (shardfeed/params.h), inclusive: one table for
# C, the CLI and Python.
BOUNDS = _C.param_bounds()


def bounded(name, value, key):
    """`value`, an int within the library's bounds for option `key`."""
    lo, hi = BOUNDS[key]
    return uint(name, value, lo, hi + 1)


def choice(name, value, table):
    """`value` (any case) as one of the keys of `table`."""
    if isinstance(value, str) and value.lower() in table:
        return value.lower()
    raise ValueError(f"shardfeed: {name}={value!r}: expected one of {', '.join(map(repr, table))}")


def exact_choice(name, value, names):
    """`value`, which must be one of `names` as written."""
    if value not in names:
        raise ValueError(f"shardfeed: {name}={value!r}: expected one of {names}")
    return value


def shuffle_name(shuffle):
    """True and False mean "global" and "none"."""
    if shuffle is True or shuffle is False:
        return "global" if shuffle else "none"
    return shuffle


def direct_name(direct):
    """True and False mean "on" and "off", as shuffle's do "global" and "none"."""
    if direct is True or direct is False:
        return "on" if direct else "off"
    return direct


def prefetch_slots(value):
    """prefetch: within the library's bounds, and at least 2: a ``for`` loop holds the batch of
    the previous step while it asks for the next, so one slot would fail on the second step."""
    value = bounded("prefetch", value, "reader.prefetch")
    if value < 2:
        raise ValueError(f"shardfeed: prefetch={value}: must be at least 2 (a for loop holds the "
                         f"previous batch while asking for the next, so a single slot is always "
                         f"busy; prefetch counts read-ahead plus the batches you hold)")
    return value


def field_names(fields, schema):
    """fields=: None, or a non-empty tuple of distinct names of the dataset's fields (`schema`,
    the names in dataset order)."""
    if fields is None:
        return None
    if isinstance(fields, str):
        raise TypeError(f"shardfeed: fields={fields!r}: a tuple of field names, e.g. "
                        f"fields=({fields!r},) or fields=({', '.join(map(repr, schema))})")
    names = tuple(fields)
    if not names:
        raise ValueError("shardfeed: fields=(): name at least one field")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"shardfeed: fields: {name!r} is not a field name (a str)")
        if name not in schema:
            raise ValueError(f"shardfeed: fields: no field {name!r} in the dataset (it has "
                             f"{', '.join(map(repr, schema))})")
    if len(set(names)) != len(names):
        raise ValueError(f"shardfeed: fields={names!r} names a field twice")
    return names


def is_bool(value):
    """Python's, NumPy's or torch's bool: an integer to operator.index, 0 or 1, never meant as one."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def integer(name, value):
    """`value` as a Python int: any integer (int, NumPy's and torch's integer scalars: what
    has __index__, as range() takes), never a bool."""
    if not is_bool(value):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"shardfeed: {name} must be an int, not {type(value).__name__}")


def uint(name, value, lo, hi):
    """`value`, an integer (integer()) in [lo, hi), as a Python int."""
    value = integer(name, value)
    if not lo <= value < hi:
        raise ValueError(f"shardfeed: {name}={value} is out of range [{lo}, {hi})")
    return value


def remote(remote_mode, cache_dir, cache_limit):
    """The options of a dataset at a URL, as the C extension's keyword arguments:
    remote_mode "cache" or "direct"; cache_dir a folder or None (the default folder);
    cache_limit bytes (an int > 0) or None (the default limit)."""
    mode = choice("remote_mode", remote_mode, REMOTE_MODE)
    if cache_dir is not None:
        cache_dir = os.fspath(cache_dir)
        if not cache_dir:
            raise ValueError("shardfeed: cache_dir='' names no folder (None: the default)")
    limit = 0 if cache_limit is None else uint("cache_limit", cache_limit, 1, U64)
    return {"remote_mode": REMOTE_MODE[mode], "cache_dir": cache_dir, "cache_limit": limit}


def seed64(value):
    """Any int (not a bool), taken modulo 2**64 as the C reader's seed is."""
    return integer("seed", value) % U64


def env_int(var):
    """The integer in environment variable `var`; None when it is unset or blank."""
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"shardfeed: environment variable {var}={raw!r} is not an integer") from None


def dist_defaults(rank, world_size):
    """rank and world_size: explicit values win, then RANK / WORLD_SIZE, then 0 and 1."""
    src_r, src_w = "rank", "world_size"
    if world_size is None:
        world_size, src_w = env_int("WORLD_SIZE"), "WORLD_SIZE (environment)"
        if world_size is None:
            world_size, src_w = 1, "world_size (default)"
    if rank is None:
        rank, src_r = env_int("RANK"), "RANK (environment)"
        if rank is None:
            rank, src_r = 0, "rank (default)"
    try:
        world_size = integer(src_w, world_size)
    except TypeError:
        raise ValueError(f"shardfeed: {src_w} = {world_size!r}: must be an int >= 1") from None
    if not 1 <= world_size < U32:
        raise ValueError(f"shardfeed: {src_w} = {world_size!r}: must be an int in [1, 2**32)")
    try:
        rank = integer(src_r, rank)
    except TypeError:
        rank = None
    if rank is None or not 0 <= rank < world_size:
        raise ValueError(f"shardfeed: {src_r} = {rank!r} is not in [0, {src_w} = {world_size})")
    return rank, world_size
