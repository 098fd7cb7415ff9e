"""Reusable memory for the values a transaction holds until its commit.

A transaction keeps its own copy of every value written in it (the caller may
change its buffer once the call returns) until ``commit()`` hands them to the
backend, which copies them again (into LMDB's pages, SQLite's, a Redis
command).  Held as one ``bytes`` object each, a region of many chunks is many
megabytes allocated together and freed together at the commit; glibc's
``malloc`` then hands the freed megabytes back to the system, and the next
transaction touches fresh pages: one page fault per 4 KiB of every commit
(about 2,000 for 8 MiB), which cost more than the commit itself.

An :class:`Arena` copies values into large blocks of anonymous memory mapped
by this module (``mmap``, outside ``malloc``), and a transaction gives its
blocks back to a pool when it ends, so the next transaction writes into pages
already in memory.  Nothing about the process's ``malloc`` changes.  The pool
keeps at most ``POOL_BYTES``; blocks given back are marked ``MADV_FREE``, so
the kernel may take their pages back under memory pressure (they then read
as zeros, and are written before they are read again).

The values are read-only ``memoryview`` slices of the blocks.  They live only
as long as the transaction: when it ends, :meth:`Arena.release` releases every
view it handed out (a reference kept anywhere then raises ``ValueError`` on
use instead of showing later data), and a block that something made from a
view can still read (a ``memoryview``, a numpy array) is left to the garbage
collector instead of the pool (``_Block.retire``).  So no reader ever sees a
block reused under it.  The transaction never lets a view out: its reads
return ``bytes``, and a backend's commit copies what it keeps.

Examples
--------
>>> arena = Arena()
>>> view = arena.hold(b"x" * 2000)
>>> bytes(view[:3]), view.readonly, len(view)
(b'xxx', True, 2000)
>>> arena.release()
>>> view[:3]
Traceback (most recent call last):
...
ValueError: operation forbidden on released memoryview object
"""

from __future__ import annotations

import mmap
import threading

__all__ = ["Arena", "BLOCK_BYTES", "MIN_BYTES", "POOL_BYTES"]

#: Values shorter than this stay ``bytes`` objects: Python's small-object
#: allocator reuses their memory without involving the system.
MIN_BYTES = 1024
#: The size of an ordinary block; a larger value gets a block of its own.
BLOCK_BYTES = 4 << 20
#: Blocks the pool keeps for the next transactions, at most (bytes).
POOL_BYTES = 64 << 20

_PAGE = mmap.PAGESIZE


class _Block:
    """One mapping and the views of it handed out since it was taken from the pool."""

    __slots__ = ("memory", "whole", "used", "views")

    def __init__(self, size: int) -> None:
        self.memory = mmap.mmap(-1, size)
        self.whole: memoryview | None = None  # made at the first put after each retire
        self.used = 0
        self.views: list[memoryview] = []

    @property
    def size(self) -> int:
        return len(self.memory)

    def room(self) -> int:
        return self.size - self.used

    def put(self, value: bytes | memoryview, length: int) -> memoryview:
        if self.whole is None:
            self.whole = memoryview(self.memory)
        start, stop = self.used, self.used + length
        self.whole[start:stop] = value
        view = self.whole[start:stop].toreadonly()
        self.views.append(view)
        self.used = stop
        return view

    def retire(self) -> bool:
        """Release every view handed out; True if nothing else can read the mapping now.

        A view's own release fails while something holds a buffer of it; a
        ``memoryview`` made from a view (numpy's ``frombuffer`` makes one)
        shares the mapping's export instead, which only the mapping can
        tell: it refuses a resize while any export lives, so a resize to its
        own size (no change) is the test.  Where that cannot be asked (no
        ``mremap``), the block is not reused.
        """
        free = True
        for view in self.views:
            try:
                view.release()
            except BufferError:
                free = False
        if self.whole is not None:
            self.whole.release()
            self.whole = None
        self.views = []
        self.used = 0
        if not free:
            return False
        try:
            self.memory.resize(len(self.memory))
        except BufferError:
            return False  # something made from a view is alive
        except (OSError, SystemError, ValueError):
            return False  # cannot tell here: do not reuse
        return True

    def close(self) -> None:
        """Unmap the block, unless something made from a view still reads it (the GC then)."""
        try:
            self.memory.close()
        except BufferError:
            pass


class _Pool:
    """Blocks of ``BLOCK_BYTES`` kept between transactions (at most ``POOL_BYTES``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: list[_Block] = []

    def take(self) -> _Block:
        with self._lock:
            if self._blocks:
                return self._blocks.pop()
        return _Block(BLOCK_BYTES)

    def give(self, block: _Block) -> None:
        if block.size == BLOCK_BYTES:
            with self._lock:
                if (len(self._blocks) + 1) * BLOCK_BYTES <= POOL_BYTES:
                    _forgettable(block)
                    self._blocks.append(block)
                    return
        block.close()

    def kept(self) -> int:
        """Bytes the pool keeps now."""
        with self._lock:
            return len(self._blocks) * BLOCK_BYTES

    def drain(self) -> None:
        """Unmap every block the pool keeps."""
        with self._lock:
            blocks, self._blocks = self._blocks, []
        for block in blocks:
            block.close()


def _forgettable(block: _Block) -> None:
    """Let the kernel reclaim the block's pages under memory pressure (``MADV_FREE``).

    Pages it has not reclaimed are written again without a fault; a failure
    (an old kernel, another platform) only keeps them resident.
    """
    advice = getattr(mmap, "MADV_FREE", None)
    if advice is None:
        return
    try:
        block.memory.madvise(advice)
    except OSError:
        pass


_POOL = _Pool()


class Arena:
    """Copies of values in pooled blocks, valid until :meth:`release`.

    Not thread-safe on its own: the transaction calls it under its lock.
    """

    __slots__ = ("_blocks", "held")

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self.held = 0  # bytes copied into blocks since the last release

    def hold(self, value: bytes | memoryview) -> bytes | memoryview:
        """A read-only copy of ``value`` that stays unchanged until ``release()``.

        Values shorter than ``MIN_BYTES`` are copied into ``bytes``.
        """
        length = len(value)
        if length < MIN_BYTES:
            return value if type(value) is bytes else bytes(value)
        block = self._blocks[-1] if self._blocks else None
        if block is None or block.room() < length:
            block = _POOL.take() if length <= BLOCK_BYTES else _Block(_round_up(length))
            self._blocks.append(block)
        self.held += length
        return block.put(value, length)

    def release(self) -> None:
        """End every value held: release their views and give the blocks back to the pool."""
        blocks, self._blocks = self._blocks, []
        self.held = 0
        for block in blocks:
            if block.retire():
                _POOL.give(block)
            # else: something still reads a view of it; the garbage collector
            # unmaps it once that is gone (never reused meanwhile).


def pooled_bytes() -> int:
    """Bytes the pool keeps for the next transactions (at most ``POOL_BYTES``)."""
    return _POOL.kept()


def drain_pool() -> None:
    """Unmap every pooled block (tests; a process that wants the memory back)."""
    _POOL.drain()


def _round_up(size: int) -> int:
    return -(-size // _PAGE) * _PAGE
