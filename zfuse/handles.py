"""Open files: a write buffer per handle, a read window per handle, commit on flush.

Every handle that writes keeps its own buffer: a private copy of the value
taken at its first write (empty after ``O_TRUNC`` or ``create``).  The buffer
reaches the store whole, in one ``store[key] = value``, when the handle is
flushed (``close``), synced (``fsync``) or released, so the store and its
other users only ever see a value some writer finished: the old one or a new
one, never a mix, even when several handles write the same file at once
(the last commit wins).

A commit that fails (a full disk: ENOSPC at ``close``) leaves the handle
``failed``: the writer has been told, so the release that follows does not
try again behind its back (a retry that succeeded once room was freed
would store a value its writer was told was not saved).  The store keeps
the value it had; a later write or ``fsync`` on the same handle tries anew.

A handle opened for reading pins one version of its key at ``open``
(``pin``: ``Store.open_reader``) and reads only that version until it is
released, whatever is written meanwhile through the mount or any other
door: a file read in many requests is one whole version, never a mix
(see ``zfuse.coherence`` for the kernel's side of it).  A value held in
memory is served as it is; a pinned file or snapshot is read in windows
that grow up to ``MAX_WINDOW`` for a sequential reader, so a value read in
the kernel's 128 KiB requests costs a few reads, never one per request.

Through the mount, a key being written shows the most recently written
pending buffer (its size, its bytes) to handles opened while it is pending,
which is what the kernel believes the file holds while writes are under
way; a handle pinned before the writes began keeps its version.
"""

from __future__ import annotations

import errno
import os
import threading

from zstores import Store
from zstores.readers import ValueReader

__all__ = ["IDENTITY_DIGEST_LIMIT", "MAX_WINDOW", "MIN_WINDOW", "Handle", "OpenFile"]

#: The first read-ahead window of a sequential reader, in bytes.
MIN_WINDOW = 256 << 10
#: The largest read-ahead window, in bytes.
MAX_WINDOW = 4 << 20
#: A pinned value held in memory up to this size is identified by a digest when
#: its backend has no version token (a 64 KiB value: ~70 us), so the kernel may
#: keep its pages across opens while it is unchanged; larger ones never.
IDENTITY_DIGEST_LIMIT = 1 << 20


class OpenFile:
    """What every handle open on one key shares.

    Parameters
    ----------
    key : str
        The store key (renaming the file changes it).
    created : bool
        The file was created through the mount and is not in the store yet.

    Attributes
    ----------
    writers : list of Handle
        Handles holding a write buffer, least recently written first.
    orphaned : bool
        The key was unlinked or replaced while open: nothing is committed
        any more, and readers keep reading ``snapshot`` (the value then).
    mtime_explicit : bool
        ``utimens`` set the modification time after the last write; the next
        commit keeps it instead of stamping the current time.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> f = OpenFile("a/b", created=True)
    >>> h = Handle(f, os.O_WRONLY, ranged=True)
    >>> h.write(store, b"hello", 3)
    5
    >>> f.size(), h.commit(store), store["a/b"]
    (8, True, b'\\x00\\x00\\x00hello')
    """

    __slots__ = ("created", "key", "lock", "mtime_explicit", "orphaned", "refs", "snapshot",
                 "writers")

    def __init__(self, key: str, *, created: bool = False) -> None:
        self.key = key
        self.lock = threading.Lock()
        self.refs = 0
        self.created = created
        self.writers: list[Handle] = []
        self.orphaned = False
        self.snapshot: bytes | None = None
        self.mtime_explicit = False

    @property
    def pending(self) -> bool:
        """True when the mount, not the store, defines what the file holds now."""
        return bool(self.writers) or self.created or self.snapshot is not None

    def current(self) -> bytes | bytearray | None:
        """The contents the mount shows while ``pending`` (None otherwise)."""
        writers = self.writers
        if writers:
            return writers[-1].buffer
        if self.snapshot is not None:
            return self.snapshot
        return b"" if self.created else None

    def size(self) -> int:
        """The size the mount shows while ``pending``."""
        current = self.current()
        return 0 if current is None else len(current)

    def read_current(self, size: int, offset: int) -> bytes | None:
        """Bytes of the pending contents, or None when the store holds them."""
        with self.lock:
            current = self.current()
            if current is None:
                return None
            return bytes(current[offset:offset + size])

    def wrote(self, handle: Handle) -> None:
        """Make ``handle`` the most recent writer (call with ``lock`` held)."""
        writers = self.writers
        if not writers or writers[-1] is not handle:
            if handle in writers:
                writers.remove(handle)
            writers.append(handle)
        self.mtime_explicit = False

    def forget_writer(self, handle: Handle) -> None:
        with self.lock:
            if handle in self.writers:
                self.writers.remove(handle)

    def superseded_by(self, handle: Handle) -> None:
        """Drop the buffers of clean handles that ``handle``'s commit made stale.

        Without this, a handle whose release arrives late (the kernel sends
        ``release`` after ``close`` returns) would show its old buffer again
        once a later writer is forgotten.  Call with ``lock`` held.
        """
        for other in list(self.writers):
            if other is not handle and not other.dirty:
                other.buffer = None
                self.writers.remove(other)

    def commit_all(self, store: Store) -> bool:
        """Commit every writer's buffer, least recent first (the latest wins)."""
        committed = False
        for handle in list(self.writers):
            committed = handle.commit(store) or committed
        return committed

    def orphan(self, store: Store) -> None:
        """Detach from the key (unlinked or replaced): keep the value to read, commit nothing."""
        with self.lock:
            if self.orphaned:
                return
            if not self.writers and not self.created:
                try:
                    self.snapshot = bytes(store[self.key])
                except Exception:  # noqa: BLE001 - a failing store leaves nothing to keep
                    self.snapshot = b""
            self.orphaned = True


class Handle:
    """One open file descriptor of the mount: its write buffer and its read window.

    The kernel's read-ahead sends several requests for one descriptor at
    once, from several threads and not always in order; a lock makes the
    later ones wait for the window the first one is fetching instead of
    fetching it again, and any read at or just past the current window
    counts as sequential.

    Parameters
    ----------
    file : OpenFile
        The shared state of the key.
    flags : int
        The ``open`` flags.
    ranged : bool
        The store reads byte ranges without fetching the whole value (used
        by a handle that reads without a pinned version).

    Attributes
    ----------
    pinned : ValueReader or None
        The version this handle reads (``pin``), until ``unpin``.
    identity : hashable or None
        The pinned version's identity, as the kernel cache knows it.
    direct : bool
        The kernel reads this handle with ``direct_io`` (past its page cache).

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["k"] = bytes(range(10))
    >>> h = Handle(OpenFile("k"), os.O_RDONLY, ranged=True)
    >>> h.pin(store)
    >>> store["k"] = b"rewritten"
    >>> h.read(store, 4, 2), h.pinned.size
    (b'\\x02\\x03\\x04\\x05', 10)
    >>> h.unpin()
    """

    __slots__ = ("ahead", "append", "buffer", "direct", "dirty", "failed", "file", "identity",
                 "lock", "pinned", "ranged", "window")

    def __init__(self, file: OpenFile, flags: int, *, ranged: bool) -> None:
        self.file = file
        self.append = bool(flags & os.O_APPEND)
        self.ranged = ranged
        self.buffer: bytearray | None = None
        self.dirty = False
        self.failed = False  # the last commit raised, and nothing was written since
        self.window: tuple[int, bytes, bool] | None = None  # start, data, reaches the end
        self.ahead = 0
        self.lock = threading.Lock()
        self.pinned: ValueReader | None = None
        self.identity: object = None
        self.direct = False

    # ------------------------------------------------------------ versions
    def pin(self, store: Store) -> None:
        """Pin the version of the key the store holds now (KeyError if none)."""
        self.pinned = store.open_reader(self.file.key)
        self.identity = self.pinned.identity(IDENTITY_DIGEST_LIMIT)

    def unpin(self) -> None:
        """Release the pinned version (its descriptor, transaction or bytes)."""
        pinned, self.pinned = self.pinned, None
        self.window = None
        if pinned is not None:
            pinned.close()

    # ------------------------------------------------------------ writing
    def _buffer(self, store: Store) -> bytearray:
        """This handle's buffer: on first use, a copy of the committed value.

        Never a copy of another handle's pending buffer, so a commit holds
        what this handle made of a value some writer finished.
        """
        if self.buffer is None:
            file = self.file
            if file.snapshot is not None:
                self.buffer = bytearray(file.snapshot)
            elif file.created:
                self.buffer = bytearray()
            else:
                try:
                    self.buffer = bytearray(store[file.key])
                except KeyError:
                    self.buffer = bytearray()
        return self.buffer

    def write(self, store: Store, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset`` (at the end for ``O_APPEND``), zero-filling a gap."""
        file = self.file
        with file.lock:
            buffer = self._buffer(store)
            if self.append:
                offset = len(buffer)
            gap = offset - len(buffer)
            if gap > 0:
                buffer.extend(bytes(gap))
            buffer[offset:offset + len(data)] = data
            self.dirty = True
            self.failed = False
            file.wrote(self)
        return len(data)

    def truncate(self, store: Store, length: int) -> None:
        """Cut or zero-extend this handle's contents to ``length`` bytes."""
        file = self.file
        with file.lock:
            if length == 0:
                self.buffer = bytearray()
            else:
                buffer = self._buffer(store)
                if length < len(buffer):
                    del buffer[length:]
                else:
                    buffer.extend(bytes(length - len(buffer)))
            self.dirty = True
            self.failed = False
            file.wrote(self)

    def commit(self, store: Store) -> bool:
        """Write this handle's buffer to the store if it holds unsaved writes; True if so.

        If the store raises, the handle stays dirty and becomes ``failed``
        (see the module's docstring) until it is written to or committed again.
        """
        file = self.file
        with file.lock:
            if not self.dirty or file.orphaned:
                return False
            # The store copies (or writes out) the bytearray before returning;
            # the lock keeps this handle's writers from resizing it meanwhile.
            try:
                store[file.key] = self.buffer
            except BaseException:
                self.failed = True
                raise
            self.dirty = False
            self.failed = False
            file.created = False
            file.superseded_by(self)
            return True

    # ------------------------------------------------------------ reading
    def read(self, store: Store, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end of the value)."""
        data, start, length = self.read_view(store, size, offset)
        if start == 0 and length == len(data) and type(data) is bytes:
            return data
        return bytes(data[start:start + length])

    def read_view(self, store: Store, size: int, offset: int) -> tuple[bytes, int, int]:
        """Where the bytes asked for are: ``(data, start, length)``, without copying them.

        The caller copies ``data[start:start + length]`` to the kernel's buffer
        straight from ``data``, which it must keep referenced until then.
        """
        file = self.file
        if self.buffer is not None:
            with file.lock:
                data = bytes(self.buffer[offset:offset + size])
            return data, 0, len(data)
        pinned = self.pinned
        if pinned is not None:
            if pinned.in_memory:  # the whole value: no window to keep
                whole = pinned.read(0, pinned.size)
                return whole, min(offset, pinned.size), max(0, min(size, pinned.size - offset))
        elif file.pending:
            data = file.read_current(size, offset)
            if data is not None:
                return data, 0, len(data)
        if pinned is None and not self.ranged:
            whole = bytes(store[file.key])
            return whole, min(offset, len(whole)), max(0, min(size, len(whole) - offset))
        found = self._from_window(size, offset)
        if found is not None:
            return found
        with self.lock:
            found = self._from_window(size, offset)  # fetched meanwhile by another thread
            if found is not None:
                return found
            return self._fetch(store, size, offset)

    def _from_window(self, size: int, offset: int) -> tuple[bytes, int, int] | None:
        window = self.window
        if window is None:
            return None
        start, data, at_end = window
        first = offset - start
        if first < 0:
            return None
        if first + size <= len(data):
            return data, first, size
        if at_end:
            return data, min(first, len(data)), max(0, len(data) - first)
        return None

    def _fetch(self, store: Store, size: int, offset: int) -> tuple[bytes, int, int]:
        # Grow the window while reads stay at or just past it; a random
        # reader gets exactly what it asked for.
        window = self.window
        sequential = window is not None and 0 <= offset - window[0] <= len(window[1]) + MIN_WINDOW
        if sequential or (window is None and offset == 0):
            self.ahead = min(max(2 * self.ahead, MIN_WINDOW), MAX_WINDOW)
        else:
            self.ahead = 0
        want = max(size, self.ahead)
        pinned = self.pinned
        if pinned is None:
            data = store.get_range(self.file.key, offset, want)
        else:
            try:
                data = pinned.read(offset, want)
            except OSError as error:
                # Unlinked or replaced through this mount (a Zip member's
                # entry is then gone): the value kept at that moment is it.
                snapshot = self.file.snapshot
                if error.errno != errno.ESTALE or snapshot is None:
                    raise
                data = snapshot[offset:offset + want]
        # Kept even when it holds no more than was asked for: it marks where
        # this reader is, so a new sequential run starting here is seen as one.
        self.window = (offset, data, len(data) < want)
        return data, 0, min(size, len(data))
