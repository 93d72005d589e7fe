"""Block shuffle's read-ahead hints (lib/reader/readahead.c): on data that is not in the page
cache, the reader asks the kernel for the blocks about one shuffle window ahead of the batches it
reads (posix_fadvise WILLNEED), so those blocks are cached before their reads come; with
SHARDFEED_READAHEAD=0 it does not. Pages are dropped with POSIX_FADV_DONTNEED (the test's own
files: no root needed) and looked at with mincore. See sfpytest.py for how to run it by hand."""
import ctypes
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfpytest import as_numpy, pack, remove, scratch, shardfeed, write_samples  # noqa: E402

N, B, BLOCK, WINDOW = 512, 16, 16, 64   # a window is 4 blocks, 4 batches
# The batch taken and the slots behind it stay within the first window's 4 blocks. The hinting
# threads take blocks found cached 8 times in a row for warm data and then look at one block in
# 16 only (readahead.c, WARM_STREAK): with 4 slots the reads spanned 8 blocks, which a loaded
# machine's I/O threads could read before their hints were looked at, and the blocks a window
# ahead then went unhinted.
PREFETCH = 2
TMP = DS = None
EXTENTS = None   # sample id -> (shard file, byte offset, bytes)
ORDER = None     # the epoch's batches of ids

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
PAGE = os.sysconf("SC_PAGE_SIZE")


def record_extents(ds):
    """(file, offset, size) of every record, by sample id (SPEC.md: header, index entries)."""
    out = []
    names = sorted(n for n in os.listdir(ds) if n.endswith(".sfs"))
    for name in names:
        path = os.path.join(ds, name)
        with open(path, "rb") as f:
            head = f.read(128)
            (_, _, _, _, _, _, count, _, _, index_off, _, entry_size, _) = struct.unpack_from(
                "<HHIIIQQQQQQII", head, 8)
            f.seek(index_off)
            index = f.read(count * entry_size)
        for r in range(count):
            off, size = struct.unpack_from("<QQ", index, r * entry_size)
            out.append((path, off, size))
    return out


def evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def resident(ranges):
    """The share of the pages of [(file, offset, size)] that are in the page cache."""
    seen = cached = 0
    for path, off, size in ranges:
        fd = os.open(path, os.O_RDONLY)
        length = os.fstat(fd).st_size
        addr = libc.mmap(None, length, 1, 1, fd, 0)   # PROT_READ, MAP_SHARED
        os.close(fd)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        first, last = off // PAGE, (off + size - 1) // PAGE
        vec = ctypes.create_string_buffer(last - first + 1)
        assert libc.mincore(addr + first * PAGE, (last - first + 1) * PAGE, vec) == 0
        libc.munmap(addr, length)
        seen += last - first + 1
        cached += sum(b & 1 for b in vec.raw)
    return cached / seen


def block_ranges(blocks):
    return [EXTENTS[i] for b in blocks for i in range(b * BLOCK, min(N, (b + 1) * BLOCK))]


def setUpModule():
    global TMP, DS, EXTENTS, ORDER
    TMP = scratch("readahead-")
    src = os.path.join(TMP, "npy")
    write_samples(src, N, shape=(8, 32, 32))   # 32 KiB a sample: a block is 512 KiB
    # One block per shard file (16 records and the index fit 540,000 bytes): the kernel's own
    # read-ahead, which follows a file's sequential reads and may reach megabytes on
    # (read_ahead_kb is 8192 on the development VM), then stays within the block it read
    # instead of caching the blocks after it, and only the reader's hints reach other blocks.
    # In one file, a loaded machine's interleaving of the I/O threads' reads let it reach
    # far blocks now and then.
    DS = pack(src, os.path.join(TMP, "ds"), "--align", "4096", "--shard-size", "540000")
    EXTENTS = record_extents(DS)
    assert len({e[0] for e in EXTENTS}) == N // BLOCK, "not one block per shard"
    ld = shardfeed.Loader(DS, B, shuffle="block", block_size=BLOCK, window=WINDOW, output="numpy")
    ORDER = [[int(i) for i in as_numpy(b.ids)] for b in ld]
    ld.close()


def tearDownModule():
    remove(TMP)


class BlockReadahead(unittest.TestCase):
    def setUp(self):
        files = sorted({e[0] for e in EXTENTS})
        evict(files)
        if resident(EXTENTS) > 0.05:
            self.skipTest("this file system keeps the dataset's pages cached (tmpfs?)")
        # Read: the batch taken and the read-ahead slots behind it. Hinted: up to a window on.
        blocks_of = [{i // BLOCK for i in ids} for ids in ORDER]
        read = set().union(*blocks_of[:PREFETCH + 1])
        near = read | {b + d for b in read for d in (-1, 1)}   # the kernel's own read-ahead
        ahead = set().union(*blocks_of[PREFETCH + 1:PREFETCH + 1 + WINDOW // B])
        self.target = sorted(ahead - near)
        far = set().union(*blocks_of[len(ORDER) // 2:]) - near - ahead
        self.far = sorted(far - set().union(*blocks_of[:len(ORDER) // 2]))
        self.assertGreater(len(self.target), 0)
        self.assertGreater(len(self.far), 0)

    def first_batch(self):
        ld = shardfeed.Loader(DS, B, shuffle="block", block_size=BLOCK, window=WINDOW,
                              prefetch=PREFETCH, output="numpy")
        it = iter(ld)
        self.assertEqual([int(i) for i in as_numpy(next(it).ids)], ORDER[0])
        return ld, it

    def test_blocks_a_window_ahead_are_cached_before_they_are_read(self):
        ld, it = self.first_batch()
        deadline = time.monotonic() + 10
        while resident(block_ranges(self.target)) < 0.95 and time.monotonic() < deadline:
            time.sleep(0.05)
        ahead, far = resident(block_ranges(self.target)), resident(block_ranges(self.far))
        ld.close()
        self.assertGreaterEqual(ahead, 0.95, f"blocks {self.target} not read ahead")
        self.assertLess(far, 0.2, f"blocks {self.far}, half an epoch on, were read too")

    def test_without_hints_those_blocks_wait_for_their_reads(self):
        os.environ["SHARDFEED_READAHEAD"] = "0"
        try:
            ld, it = self.first_batch()
        finally:
            del os.environ["SHARDFEED_READAHEAD"]
        time.sleep(1.0)
        ahead = resident(block_ranges(self.target))
        ld.close()
        self.assertLess(ahead, 0.5, f"blocks {self.target} were cached without hints")


if __name__ == "__main__":
    unittest.main()
