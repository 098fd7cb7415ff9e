"""What the kernel may hold of each file, so that no reader sees two versions mixed.

A file opened through the mount reads one version of its key, pinned at
``open`` (``Store.open_reader``).  The kernel, though, keeps one page cache
and one size per inode, not per open file, so the mount must keep them
agreeing with the versions its open files read:

* **Pages.**  ``keep_cache`` at ``open`` tells the kernel it may serve the
  pages it loaded earlier; otherwise it drops them.  They are kept only when
  the version opened is the very one they were loaded from (the reader's
  ``identity``: an inode and mtime, LMDB's last commit, a digest of a small
  value); pages of an unknown version are never kept.
* **One version in the page cache at a time.**  While files of one version
  are open through the page cache, a file opened on another version reads
  with ``direct_io`` (straight from its pinned reader, past the page cache),
  so neither can load pages the other then reads.
* **Sizes.**  The kernel ends a cached read at the size it was last told
  (for ``attr_timeout``).  While files of one version are open through the
  page cache, every ``getattr`` reports that version's size; a file opened on
  a version whose size differs from what the kernel may still believe reads
  with ``direct_io``, which the kernel does not cut at its cached size.

This is close-to-open consistency as NFS states it: an ``open`` sees every
write completed before it, through any door; an open file keeps reading the
version it opened.

Examples
--------
>>> cache = KernelCache(attr_timeout=1.0)
>>> cache.opened("k", "v1", 10)                # nothing cached yet: load pages
(False, False)
>>> cache.closed("k", "v1", direct=False)
>>> cache.opened("k", "v1", 10)                # the same version: keep its pages
(True, False)
>>> cache.opened("k", "v2", 10)                # another version while v1 is open
(False, True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

__all__ = ["KernelCache"]

# At most this many keys are remembered; past it, the oldest half is forgotten
# (a forgotten key only costs a page-cache reload at its next open).
_MAX_KEYS = 16384
# The kernel starts its attribute timeout when it receives a reply, a little
# after the mount sends it: count a reported size as believed a bit longer.
_MARGIN = 0.25


class _KeyState:
    __slots__ = ("cached", "open", "reported", "reported_until")

    def __init__(self) -> None:
        # (identity, size) of the version whose pages the kernel may hold.
        self.cached: tuple[Hashable | None, int] | None = None
        # Open files reading through the page cache: identity -> count.
        self.open: dict[Hashable | None, int] = {}
        self.reported = -1  # the size last reported to the kernel
        self.reported_until = 0.0  # ... which it may believe until then


class KernelCache:
    """Per key: the version in the kernel's page cache, its open readers, the size it believes.

    Parameters
    ----------
    attr_timeout : float
        The mount's attribute timeout: how long the kernel believes a size.
    max_keys : int
        How many keys to remember at most (``len`` of the cache).
    """

    def __init__(self, *, attr_timeout: float, max_keys: int = _MAX_KEYS) -> None:
        self.attr_timeout = float(attr_timeout)
        self.max_keys = max_keys
        self._keys: dict[str, _KeyState] = {}
        self._lock = threading.Lock()

    def _state(self, key: str) -> _KeyState:
        keys = self._keys
        state = keys.get(key)
        if state is None:
            if len(keys) >= self.max_keys:
                self._forget_idle()
            state = keys[key] = _KeyState()
        return state

    def __len__(self) -> int:
        return len(self._keys)

    def _forget_idle(self) -> None:
        # First what the kernel can no longer believe and nobody reads; only
        # if that is not enough, idle keys whose reported size may still be
        # believed (a later open of another size there may then read
        # through the page cache cut at the old size: the rare price of a
        # bound on memory with more than _MAX_KEYS files stat'ed at once).
        now = time.monotonic()
        keys = self._keys
        stale = [key for key, state in keys.items()
                 if not state.open and state.reported_until <= now]
        if len(stale) < len(keys) // 4:
            stale += [key for key, state in keys.items()
                      if not state.open and state.reported_until > now][: len(keys) // 2]
        for key in stale:
            del keys[key]

    def opened(self, key: str, identity: Hashable | None, size: int) -> tuple[bool, bool]:
        """A file of ``key`` opened on a version: ``(keep_cache, direct_io)`` for the kernel.

        Call ``closed`` with the same identity when it is released.
        """
        with self._lock:
            state = self._state(key)
            others = state.open
            if others and (identity is None or others.keys() != {identity}):
                return False, True  # another version is in the page cache now
            if (state.reported != size and state.reported_until > time.monotonic()
                    and not others):
                return False, True  # the kernel may cut reads at another size
            keep = identity is not None and state.cached == (identity, size)
            state.cached = (identity, size)
            others[identity] = others.get(identity, 0) + 1
            return keep, False

    def closed(self, key: str, identity: Hashable | None, *, direct: bool) -> None:
        """A file opened by ``opened`` was released."""
        if direct:
            return
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                return
            count = state.open.get(identity, 0) - 1
            if count > 0:
                state.open[identity] = count
            else:
                state.open.pop(identity, None)

    def size_to_report(self, key: str, size: int) -> int:
        """The size to tell the kernel for ``key``: that of the version its open files read.

        ``size`` is the store's (or a pinned reader's) own; while files read
        ``key`` through the page cache, their version's size is reported
        instead, and what is reported is remembered.
        """
        with self._lock:
            state = self._keys.get(key)
            if state is not None and state.open and state.cached is not None:
                size = state.cached[1]
            if self.attr_timeout > 0:
                if state is None:
                    state = self._state(key)
                state.reported = size
                state.reported_until = time.monotonic() + self.attr_timeout + _MARGIN
            return size

    def forget(self, key: str) -> None:
        """The mount changed ``key``: its cached pages are of no version a reader may keep."""
        with self._lock:
            state = self._keys.get(key)
            if state is not None:
                state.cached = None

    def forget_all(self) -> None:
        """Forget every cached version (after a folder was renamed)."""
        with self._lock:
            for state in self._keys.values():
                state.cached = None
