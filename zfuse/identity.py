"""Inode numbers and times: what tells a reader that a file changed.

Inode numbers (``use_ino``) come from the key's name while the mount has not
changed the key, and are allocated afresh when the mount creates it; a
replaced value always gets a new modification time (nanoseconds, strictly
increasing), so writers that detect change by (device, inode, mtime), as
tensorstore does, see every change made through the mount.
"""

from __future__ import annotations

import itertools
import threading
import time

__all__ = ["Identities", "Identity"]

#: (inode, mtime in ns, ctime in ns)
Identity = tuple[int, int, int]

# Inode numbers: 1 is the root, small numbers are allocated to keys the
# mount creates, and keys it never changed get a number from their name's
# hash with this bit set, so the two ranges never meet.
_HASH_BIT = 1 << 62
_HASH_MASK = _HASH_BIT - 1

# The mount remembers the identity of at most this many keys it changed;
# the oldest are forgotten first (they fall back to the defaults).
_MAX_IDENTITIES = 1_000_000


class Identities:
    """The inode and times of every key, the ones the mount changed remembered.

    A key the mount never changed shows its name's hash as inode and the
    mount's start as its times; ``new`` and ``touch`` record changes.

    Examples
    --------
    >>> ids = Identities()
    >>> ids.of("")[0], ids.of("a") == ids.of("a")
    (1, True)
    >>> ids.new("b"); ino, mtime, _ = ids.of("b")
    >>> ids.touch("b"); ids.of("b")[0] == ino and ids.of("b")[1] > mtime
    True
    """

    def __init__(self) -> None:
        self.mount_ns = time.time_ns()
        self._last_ns = self.mount_ns
        self._clock = threading.Lock()  # strictly increasing times; eviction
        self._next_ino = itertools.count(2)
        self._known: dict[str, Identity] = {}

    def now(self) -> int:
        """The current time in ns, strictly later than any time handed out before."""
        now = time.time_ns()
        with self._clock:
            if now <= self._last_ns:
                now = self._last_ns + 1
            self._last_ns = now
        return now

    def of(self, key: str) -> Identity:
        """``(inode, mtime, ctime)`` of ``key`` ("" is the root)."""
        identity = self._known.get(key)
        if identity is not None:
            return identity
        if not key:
            return (1, self.mount_ns, self.mount_ns)
        return ((hash(key) & _HASH_MASK) | _HASH_BIT, self.mount_ns, self.mount_ns)

    def inodes(self, keys: list[str]) -> list[int]:
        """The inode numbers of ``keys`` (none of them the root), as ``of`` gives them.

        One pass without a call per key while the mount has changed no key
        (every read-only mount): a listing of a big folder needs them all.

        Examples
        --------
        >>> ids = Identities()
        >>> ids.new("b")
        >>> ids.inodes(["a", "b"]) == [ids.of("a")[0], ids.of("b")[0]]
        True
        """
        known = self._known
        if not known:
            return [(hash(key) & _HASH_MASK) | _HASH_BIT for key in keys]
        return [self.of(key)[0] for key in keys]

    def set(self, key: str, identity: Identity) -> None:
        """Remember ``identity`` for ``key`` (the oldest are forgotten past a million)."""
        known = self._known
        known.pop(key, None)
        known[key] = identity
        if len(known) > _MAX_IDENTITIES:
            with self._clock:
                # Forget the oldest tenth at once, so this runs rarely.
                for old in list(known)[: _MAX_IDENTITIES // 10]:
                    known.pop(old, None)

    def new(self, key: str) -> None:
        """``key`` was created: a new inode, times now."""
        now = self.now()
        self.set(key, (next(self._next_ino), now, now))

    def touch(self, key: str, mtime: int | None = None) -> None:
        """``key``'s value changed: same inode, new times (``mtime`` if given)."""
        ino = self.of(key)[0]
        now = self.now()
        self.set(key, (ino, now if mtime is None else mtime, now))

    def set_mtime(self, key: str, mtime: int) -> None:
        """``utimens``: the modification time ``mtime``, the change time now."""
        self.set(key, (self.of(key)[0], mtime, self.now()))

    def forget(self, key: str) -> None:
        """``key`` is gone: a later key of that name starts afresh."""
        self._known.pop(key, None)

    def move(self, src: str, dst: str) -> None:
        """A renamed file keeps its inode and mtime; its ctime is now."""
        ino, mtime, _ = self.of(src)
        self._known.pop(src, None)
        self.set(dst, (ino, mtime, self.now()))

    def move_tree(self, src: str, dst: str) -> None:
        """A renamed folder: ``src`` and every key below it move under ``dst``."""
        prefix = src + "/"
        known = self._known
        for key in [k for k in list(known) if k == src or k.startswith(prefix)]:
            self.set(dst + key[len(src):], known.pop(key))
