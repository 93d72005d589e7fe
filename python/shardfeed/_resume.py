"""Loader states (state_dict / load_state_dict): what a state holds, which Loader it fits, and
where in the epoch a Loader resumes, also at another world size (elastic resume).

The epoch's order S (a permutation of the n samples) depends only on (seed, epoch, shuffle,
block_size, window, n), never on batch_size or world_size; batches are cut from S with the
global batch G = batch_size * world_size (lib/reader/sampler.h). So a state is a position in S:
after next_batch batches, the first next_batch * G positions of S have been handed out (for
batches before the epoch's last, partial one). A Loader with another G resumes there:

- G unchanged (e.g. 2 ranks of 64 -> 4 ranks of 32): next_batch is the same, and the same global
  batches continue: nothing seen again, nothing skipped.
- G changed: the new Loader resumes at the start of the global batch that holds position
  P = next_batch * G_old, i.e. batch floor(P / G_new). The samples at positions
  [floor(P / G_new) * G_new, P) (fewer than G_new) are seen again; none is skipped.

Either way a state saved after the epoch's last batch resumes at the end of the epoch, also when
the new world size's tail rule would give that epoch one more batch (uneven="drop" with fewer
ranks).

Version 1 states (before elastic resume) load as before: only into a Loader with the same
batch_size and world_size.

A state also records its dataset's dataset_id (the manifest's; Dataset.dataset_id): one of
another dataset of the same size would otherwise resume there silently, at a position in an
order of other samples. A state without it (saved by a shardfeed before it was recorded, of
either version) loads without that check."""

VERSION = 2
# Options that decide the order S and its tail: a state fits only a Loader with the same.
ORDER_OPTIONS = ("shuffle", "seed", "drop_last", "uneven", "block_size", "window", "num_samples")
# What a version 1 state was matched on (all of it, batch_size and world_size included).
V1_OPTIONS = ("batch_size", "shuffle", "seed", "drop_last", "world_size", "uneven",
              "block_size", "window", "num_batches", "samples_per_epoch")


def plain(v):
    """A state value that went through torch.save/json: ints, bools, strings."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v


def check_int(name, v, hi):
    v = plain(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
        raise ValueError(f"shardfeed: state_dict {name}={v!r} is not an int in [0, {hi})")
    return v


def batches_per_epoch(num_samples, batch_size, world_size, drop_last, uneven):
    """Batches per epoch on each rank, as lib/reader/sampler.c counts them: full global batches
    of batch_size * world_size, then the tail (rem samples) unless dropped: uneven="pad" gives
    every rank ceil(rem / world_size) of it, "drop" floor(rem / world_size).
    (tests/python/test_elastic.py checks this against the reader.)"""
    g = batch_size * world_size
    full, rem = divmod(num_samples, g)
    if rem == 0 or drop_last:
        last = 0
    elif uneven == "pad":
        last = -(-rem // world_size)
    else:
        last = rem // world_size
    return full + (last > 0)


def mismatches(state, mine, names):
    """The "NAME is X in the state but Y here" list for options that differ."""
    return [f"{k} is {state[k]!r} in the state but {mine[k]!r} here"
            for k in names if plain(state[k]) != mine[k]]


def other_dataset(state, mine):
    """["dataset_id is X in the state but Y here ..."] when `state` records the id of another
    dataset than `mine`'s; [] when it is the same or the state has none (an older shardfeed's)."""
    if "dataset_id" not in state:
        return []
    theirs = check_int("dataset_id", state["dataset_id"], 2 ** 64)
    if theirs == mine["dataset_id"]:
        return []
    # In hex, as the packer names its temporaries with it (.NAME.<dataset_id>.tmp).
    return [f"dataset_id is {theirs:#018x} in the state but {mine['dataset_id']:#018x} here "
            "(a state of another dataset)"]


def resume_batch(state, mine):
    """The batch of this Loader's epoch at which `state` (a version 2 state, checked) resumes.
    `mine`: this Loader's options (batch_size, world_size, num_batches, num_samples)."""
    g_old = plain(state["batch_size"]) * plain(state["world_size"])
    g_new = mine["batch_size"] * mine["world_size"]
    nb = plain(state["next_batch"])
    # Before the G test: with the same G the new world size's tail rule may still give this
    # Loader a batch more (uneven="drop" cuts a tail of fewer samples than there are ranks;
    # fewer ranks keep part of it as a last batch), and a state saved after the epoch's last
    # batch must not hand it out.
    if nb >= plain(state["num_batches"]) or nb * g_old >= mine["num_samples"]:
        return mine["num_batches"]  # the epoch was over
    if g_old == g_new:
        return min(nb, mine["num_batches"])
    return min(nb * g_old // g_new, mine["num_batches"])


def check(state, mine, what="Loader"):
    """(epoch, next_batch) at which a Loader with options `mine` resumes `state`; ValueError
    naming what does not fit (TypeError for something that is not a state dict)."""
    if not isinstance(state, dict):
        raise TypeError("shardfeed: load_state_dict() takes the dict state_dict() returned")
    if state.get("mix"):
        raise ValueError(f"shardfeed: the state of a Loader that mixes datasets: it restores "
                         f"only a Loader of the same datasets and weights, not a {what} of one")
    if "version" not in state:
        raise ValueError(f"shardfeed: state_dict lacks version: not a {what} state")
    version = plain(state["version"])
    if type(version) is not int or version not in (1, VERSION):  # not True, not 1.0
        raise ValueError(f"shardfeed: state_dict version {state.get('version')!r}; this shardfeed "
                         f"reads versions 1 and {VERSION}")
    base = ("version", "epoch", "next_batch")
    needed = base + (V1_OPTIONS if version == 1 else
                     ORDER_OPTIONS + ("batch_size", "world_size", "num_batches"))
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"shardfeed: state_dict lacks {', '.join(missing)}: not a {what} state")
    bad = other_dataset(state, mine) + mismatches(state, mine,
                                                  V1_OPTIONS if version == 1 else ORDER_OPTIONS)
    if bad:
        raise ValueError(f"shardfeed: state_dict does not match this {what} (resuming would "
                         "give other batches): " + "; ".join(bad))
    epoch = check_int("epoch", state["epoch"], 2 ** 63)  # SF_MAX_EPOCH + 1
    check_int("batch_size", state["batch_size"], 2 ** 32)
    check_int("world_size", state["world_size"], 2 ** 32)
    total = check_int("num_batches", state["num_batches"], 2 ** 64)
    nb = check_int("next_batch", state["next_batch"], total + 1)
    if version == 1:
        return epoch, min(nb, mine["num_batches"])
    if plain(state["batch_size"]) < 1 or plain(state["world_size"]) < 1:
        raise ValueError("shardfeed: state_dict batch_size and world_size must be >= 1")
    # Its position is read in its own batches: they must be the ones its options make, else
    # (an edited or damaged state) it would resume at a position it never reached.
    expected = batches_per_epoch(mine["num_samples"], plain(state["batch_size"]),
                                 plain(state["world_size"]), plain(state["drop_last"]),
                                 plain(state["uneven"]))
    if total != expected:
        raise ValueError(f"shardfeed: state_dict num_batches={total} does not follow from its own "
                         f"batch_size, world_size, drop_last, uneven and num_samples, which make "
                         f"{expected} batches an epoch: a damaged or edited state")
    return epoch, resume_batch(state, mine)
