"""ZipStore: every key a member of one zip archive.

The store over its engine: ``archive.py`` (the archive's directory, its
members' space, commits and reads, mixed into ``ZipStore``, over the zip
records it reads and writes with ``pread``/``pwrite``).
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...base import Buffer, Mode, Store, _range_stop
from ...errors import CorruptValueError, StaleStoreError, StoreFullError, StoreIOError
from ...readers import BufferReader, ValueReader
from .._single_writer import LockedConditionalWrites, writer_lock
from .archive import (
    _CENTRAL,
    _END,
    _ZIP_ERRORS,
    Archive,
    _entry,
    _pwrite_all,
    _stamp_of,
    _stored_plain,
)

__all__ = ["ZipStore"]


# close() compacts the archive when dead bytes (replaced or deleted members,
# superseded central directories) exceed a quarter of it and this many bytes.
_COMPACT_MIN_DEAD = 64 * 1024
# A reader tries a read this many times (the directory read again in between)
# before it says the archive kept changing under it (StaleStoreError).
_READ_ATTEMPTS = 4


class ZipStore(LockedConditionalWrites, Archive, Store):
    """Keys and values as the members of a zip archive.

    The layout is zarr-python 2.18's ``ZipStore``: one member per key, named by
    the key, with Unix permissions ``0o644``, the current local time and the
    store's compression, so either library reads the other's archives.

    **What is saved when.**  A zip archive is readable only through its
    central directory, written at its end.  The store writes each value as a
    member at once, but a value is *acknowledged* (durable, and seen by other
    handles and tools) only once ``flush()`` or ``close()`` has written a new
    central directory and synced the file.  The directory on disk is never
    overwritten while it is the valid one: new members and the new directory
    go after it (or into space no directory refers to any more), and only a
    complete, synced directory at the end of the file replaces it.  So, at
    every moment, the file is a valid archive of the state at the last
    successful ``flush()``/``close()``:

    - a write that fails (a full disk: ``StoreFullError``; another I/O
      error: ``StoreIOError``) is undone, and an overwrite that fails leaves
      the old value;
    - a ``flush()`` or ``close()`` that fails leaves the archive as it was at
      the last successful one: values written and keys deleted since are not
      saved (``close()`` says so in its error);
    - a crash loses only what was not yet flushed.

    Replaced and deleted members become dead space.  New members reuse the
    dead space of earlier flushes when they fit, and ``close()`` copies the
    live members to a new archive (moved over the old one) once more than a
    quarter of the file is dead, if the disk has room for the copy.

    **A full disk.**  Deleting keys is enough to write again, though the file
    does not shrink: a write that finds no room first saves the deletes (as
    ``flush()`` does), then gathers the dead gaps into one by moving the
    members nearest the end into the first gaps they fit (each copy goes to
    space no directory names; then a directory naming the new places), and
    writes there.  It needs no room beyond the new directory's.  A write is
    taken only if the directory that saves it still has a place afterwards:
    room on the file system after it, else the dead gap before the old
    directory (written there, the file is then cut after it), else over the
    old one (the one case where a crash at that moment could leave the
    archive unreadable).  So ``flush()`` and ``close()`` succeed after
    writes on a full disk.

    **Readers beside a writer.**  A reader (mode ``"r"``, in another process
    or another handle) sees the archive as the writer last flushed it.  After
    each read it compares the file's stat (size, times, link count) with the
    one its directory was read at; if the file changed it reads the newest
    directory (searching only what was appended since) and reads the value
    again, so a read returns the newest flushed value.  The bytes are checked
    as well (the CRC-32 of a whole value; for a range, the member's local
    header read again after it), so a member whose space the writer has
    given to another value is never returned.  If the file changes during
    each of four attempts the last checked value is returned (a whole, older
    version), or ``StaleStoreError`` if there is none.  After ``close()``
    compacted the archive, readers follow the new file.

    Parameters
    ----------
    path : str or os.PathLike
        The archive file.
    compression : int
        ``zipfile.ZIP_STORED`` (default; allows range reads),
        ``ZIP_DEFLATED``, ``ZIP_BZIP2`` or ``ZIP_LZMA`` for new members.
    allowZip64 : bool
        Allow the ZIP64 extensions needed past 2 GiB or 65,535 members.
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` and ``"r+"`` need an existing archive, ``"a"`` creates it if
        missing, ``"w"`` replaces it and ``"w-"`` refuses an existing file.

    Raises
    ------
    StoreFullError
        A write, ``flush()`` or ``close()`` found the disk full (``errno``
        ``ENOSPC``); nothing acknowledged is lost.
    CorruptValueError
        The file is not a zip archive, or a member is damaged (bad CRC-32,
        header or length); the message names the store and the key.
    StaleStoreError
        A reader found the member it read rewritten by a writer process during
        each of four attempts (``errno`` ``ESTALE``); read it again.

    Notes
    -----
    Capability flags:

    - ``supports_range_reads``: True when ``compression`` is ``ZIP_STORED``;
      ``get_range`` then reads only the asked bytes of stored members (others
      are decompressed whole).
    - ``supports_deletes``: True; a delete is saved by the next
      ``flush()``/``close()``.
    - ``supports_process_writers``: False; one writer process per archive.  A
      writable store holds an exclusive lock (``flock``) on the archive while
      open, so a second process opening it for writing gets
      ``StoreLockedError`` (handles within one process share the lock).
      Readers see the archive as the writer last flushed it (above).
    - ``hierarchical``: False.  Member names are free strings, so ``a`` and
      ``a/b`` can both exist, as zarr-python 2 allowed; tools that extract the
      archive to folders cannot hold both, so avoid that in archives meant for
      them.
    - ``getsize`` counts uncompressed bytes (zarr-python 2 counted compressed).

    Examples
    --------
    >>> import tempfile, os
    >>> from zstores.stores.zip import ZipStore
    >>> path = os.path.join(tempfile.mkdtemp(), "data.zip")
    >>> with ZipStore(path, mode="w") as store:
    ...     store["foo/.zgroup"] = b'{"zarr_format": 2}'
    ...     store["foo/.zgroup"] = b'{"zarr_format": 2} '
    ...     store.flush()  # durable now, and visible to readers
    >>> with ZipStore(path, mode="r") as store:
    ...     store.listdir("foo"), store.get_range("foo/.zgroup", 2, 11)
    (['.zgroup'], b'zarr_format')
    """

    supports_deletes = True
    supports_process_writers = False
    hierarchical = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        compression: int = zipfile.ZIP_STORED,
        allowZip64: bool = True,
        mode: Mode = "a",
    ) -> None:
        super().__init__(mode=mode)
        self._path = os.path.abspath(os.fspath(path))
        self._compression = compression
        self._allow_zip64 = allowZip64
        self.supports_range_reads = compression == zipfile.ZIP_STORED
        self._lock = threading.RLock()
        # Reads of stored members pread outside the lock (_pread_unlocked), so
        # readers in many threads reach the disk together; whatever would change
        # bytes a read may be reading waits for them first (_quiesce).
        self._readers = 0  # reads under way outside the lock
        self._writers_waiting = 0  # threads in _quiesce: new reads keep the lock
        self._no_readers = threading.Condition(self._lock)
        self._index: dict[str, zipfile.ZipInfo] = {}
        self._folders: list[zipfile.ZipInfo] = []  # "name/" entries other tools write
        self._data_offsets: dict[int, int] = {}  # header offset -> data offset
        self._comment = b""
        self._fd: int | None = None
        # The state on disk: the members its central directory names and where
        # that directory (with the end records) lies; it ends the file.
        self._committed: list[zipfile.ZipInfo] = []
        self._tail = (0, 0)
        self._end = 0  # end of the file: the tail, then members not yet flushed
        self._holes: list[list[int]] | None = None  # dead space, found when needed
        self._dirty = False
        self._dir_growth = 0  # directory bytes the members written since the last commit add
        self._room = 0  # bytes the file system had free when last asked, less those appended
        self._block = 4096  # its block size
        # Readers (mode "r") only: the file as its directory was read (see
        # _refresh), the directory's bytes, where a newer directory may start,
        # and each member's local header as first read (see _read_range).
        self._stamp: tuple[int, ...] = ()
        self._tail_bytes = b""
        self._scan_floor = 0
        self._headers: dict[int, bytes] = {}

        exists = os.path.exists(self._path)
        self._check_existence(exists)
        # Taken before the file is read or opened: a second writer process
        # must fail clearly, before mode "w" truncates the archive.
        self._writer = writer_lock(self._path, self, self._mode, create_new=self._mode == "w-")
        try:
            self._open_archive(exists)
        except BaseException:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._release_writer()
            raise

    # ------------------------------------------------------------ opening
    def _open_archive(self, exists: bool) -> None:
        writable = self._mode != "r"
        try:
            self._fd = os.open(self._path, (os.O_RDWR if writable else os.O_RDONLY)
                               | getattr(os, "O_CLOEXEC", 0))
            info = os.fstat(self._fd)
            size = info.st_size
            self._stamp = _stamp_of(info)  # before the directory is read: a change after shows
        except OSError as error:
            raise self._io_error("opening the archive", error) from error
        if self._mode in ("w", "w-") or not exists or size == 0:
            if writable:  # a new archive is a valid, empty one from the start
                self._dirty = True
                self._resize(0)
                self._commit()
            return
        if writable:
            self._load_index(size)
        else:
            self._load_index_as_reader()

    def _load_index_as_reader(self) -> None:
        """A reader's first directory: read again if a writer was writing it meanwhile."""
        failure: CorruptValueError | None = None
        for _ in range(_READ_ATTEMPTS):
            if self._stamp[2] == 0:
                return  # emptied (a writer's mode "w" makes it anew): no keys yet
            try:
                self._load_index(self._stamp[2])
                return
            except CorruptValueError as error:
                stamp = self._current_stamp()
                if stamp == self._stamp:
                    raise  # the file, unchanged, is not a readable archive
                failure, self._stamp = error, stamp
        raise StaleStoreError(
            f"{self!r}: the archive could not be opened: another process kept rewriting it "
            f"during {_READ_ATTEMPTS} attempts ({failure}); try again, or open it once the "
            f"writer has closed it"
        ) from failure

    def _load_index(self, size: int) -> None:
        try:
            entries, tail_start, tail_end = self._read_directory(size)
            if tail_end < 0:
                raise zipfile.BadZipFile("the last end record does not end the file")
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as error:
            found = self._last_directory(size)
            if found is None:
                raise CorruptValueError(
                    f"{self!r}: {self._path!r} is not a readable zip archive ({error}). "
                    f"Mode 'w' replaces the file"
                ) from error
            entries, tail_start, tail_end = found
        except OSError as error:
            raise self._io_error("reading the central directory", error) from error
        if tail_end != size and self._mode != "r":
            # A writer holds the lock: no other writer is active, so one died
            # after writing members it never flushed (or the file was cut).
            # The last complete directory is the saved state; readers of a
            # live writer see the same, without a warning.
            warnings.warn(
                f"{self!r}: {size - tail_end} bytes after the archive's last central "
                f"directory are ignored (a writer stopped before flush() or close(), "
                f"or the file is damaged); the archive reads as that directory says",
                RuntimeWarning, stacklevel=4,
            )
        for info in entries:  # central directory order: a later duplicate wins
            if info.is_dir():
                self._folders.append(info)
            else:
                self._index[info.filename] = info
        self._committed = entries
        self._tail = (tail_start, tail_end)
        self._end = size  # new members go after any bytes left past the tail
        if self._mode == "r":
            self._tail_bytes = os.pread(self._fd, tail_end - tail_start, tail_start)
            self._scan_floor = size

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        if self._mode == "r":
            return self._read_checked(key, None)
        with self._lock:
            info = self._index[key]
            data = self._read_whole(info, key)
        self._check_crc(info, data, key)
        return data

    def _read_whole(self, info: zipfile.ZipInfo, key: str) -> bytes:
        """A member's value (its CRC-32 not yet checked); the caller holds the lock."""
        if _stored_plain(info):
            # A stored member is its bytes: one pread, without zipfile's
            # per-open header parsing and buffering (about twice as fast).
            return self._pread_unlocked(self._data_offset(info), info.file_size, key)
        raw = self._pread(self._data_offset(info), info.compress_size, key)
        return self._decompress(info, raw)

    def _check_crc(self, info: zipfile.ZipInfo, data: bytes, key: str) -> None:
        if zlib.crc32(data) != info.CRC:
            raise CorruptValueError(f"{self!r}: bad CRC-32 for member {key!r}: it is damaged")

    def _set(self, key: str, value: Buffer) -> None:
        with self._lock:
            self._write_member(key, value)

    def _delete(self, key: str) -> None:
        with self._lock:
            self._forget(self._index.pop(key))
            self._dirty = True

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        with self._lock:
            self._refresh_reader()
            if not prefix:
                return list(self._index)
            return [key for key in self._index if key.startswith(prefix)]

    # ------------------------------------------------------------ fast paths
    def _contains(self, key: str) -> bool:
        if self._mode == "r":
            with self._lock:
                self._refresh_reader()
        return key in self._index

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        with self._lock:
            return super()._get_many(keys)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        with self._lock:
            for key, value in items:
                self._write_member(key, value)

    def _delete_many(self, keys: list[str]) -> None:
        with self._lock:
            super()._delete_many(keys)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        if self._mode == "r":
            return self._read_checked(key, (start, length))
        with self._lock:
            info = self._index[key]
            if not _stored_plain(info):
                return super()._get_range(key, start, length)
            return self._read_range(info, key, start, length)

    def _open_reader(self, key: str) -> ValueReader:
        # A stored member is pinned by its directory entry, not copied: live
        # members are never written over (writes go to the end or into the
        # gaps of dead ones), so while the key still names an entry with the
        # same offset, CRC-32 and size its bytes are the same.
        # A reader beside another writer process (mode "r") reads each range
        # checked against the newest directory, and only while that still
        # holds the same entry.
        with self._lock:
            self._refresh_reader()
            info = self._index[key]
            if _stored_plain(info):  # nothing read at open: a warm open costs a look-up
                return _MemberReader(self, key, info)
        # A compressed member is read whole (CRC-checked); its entry is its
        # version when it is the same before and after the read.
        entry = _entry(info)
        data = self._get(key)
        with self._lock:
            self._refresh_reader()
            after = self._index.get(key)
        return BufferReader(key, data, entry if after is not None and _entry(after) == entry
                            else None)

    def _read_pinned(self, entry: tuple[str, int, int, int], key: str, start: int,
                     length: int) -> bytes:
        """A range of ``key`` while it names the directory entry ``entry`` (``_MemberReader``)."""
        with self._lock:
            info = self._check_entry(entry, key)  # a reader: against the newest directory
            if self._mode != "r":
                return self._read_range(info, key, start, length)
            # Beside a writer process: the entry named these bytes when the
            # directory was checked; the writer may since have given the
            # space to another member, which it writes header first, so an
            # unchanged local header after the read proves the bytes were
            # this entry's (one fstat and two preads; no retry loop: a pinned
            # version that is gone is gone).
            try:
                return self._read_range_checked(info, key, start, length)
            except CorruptValueError as error:
                raise StaleStoreError(
                    errno.ESTALE,
                    f"{key!r} in {self!r} was replaced, deleted or moved while open; "
                    "open it again") from error

    def _check_entry(self, entry: tuple[str, int, int, int], key: str) -> zipfile.ZipInfo:
        with self._lock:
            self._refresh_reader()
            info = self._index.get(key)
            if info is None or _entry(info) != entry:
                raise StaleStoreError(
                    errno.ESTALE,
                    f"{key!r} in {self!r} was replaced, deleted or moved while open; "
                    "open it again")
            return info

    def _read_range(self, info: zipfile.ZipInfo, key: str, start: int,
                    length: int | None) -> bytes:
        """Bytes of a stored member; the caller holds the lock."""
        size = info.file_size
        first = start if start >= 0 else max(size + start, 0)
        stop = size if length is None else min(_range_stop(start, length, size), size)
        if first >= stop:
            return b""
        return self._pread_unlocked(self._data_offset(info) + first, stop - first, key)

    def _listdir(self, prefix: str) -> Iterable[str]:
        with self._lock:
            self._refresh_reader()
            keys = [key for key in self._index if key.startswith(prefix)]
        # Names in C-level string calls, no function call per key (the index
        # is a dict in archive order, so every key is looked at once anyway).
        start = len(prefix)
        names = [key[start:] for key in keys]
        if "/" not in "\x00".join(names):  # keys cannot hold NUL
            return names
        return {name.partition("/")[0] for name in names}

    def _getsize_key(self, key: str) -> int:
        if self._mode == "r":
            with self._lock:
                self._refresh_reader()
        return self._index[key].file_size

    def _getsize_prefix(self, prefix: str) -> int:
        with self._lock:
            self._refresh_reader()
            return sum(
                info.file_size for key, info in self._index.items() if key.startswith(prefix)
            )

    def _len(self) -> int:
        if self._mode == "r":
            with self._lock:
                self._refresh_reader()
        return len(self._index)

    # ------------------------------------------------------------ readers
    # A reader (mode "r") may sit beside a writer in another process (or
    # another handle of this one), which writes new members into space its own
    # last directory left dead: space an older directory, the reader's, may
    # still name.  So a reader checks the bytes it read are still the member's
    # (the CRC-32 for whole values, the local header for ranges: a member
    # written over this one starts at or before its header, see
    # _read_range_checked), then compares the file's stat with the one its
    # directory was read at, and reads the directory and the value again when
    # they differ.  A file that keeps changing raises StaleStoreError.
    def _read_checked(self, key: str, window: tuple[int, int | None] | None) -> bytes:
        """A reader's read of ``key`` (whole, or ``window`` = (start, length)), checked.

        The file's stat is compared after the read, one stat a read: the file
        unchanged since its directory was read, the value is the newest.
        Changed, the directory is read again and the read made again; if the
        file still changes on the last attempt, its checked value (a whole
        version, if not the newest) is returned.
        """
        failure: CorruptValueError | None = None
        forced = False  # this attempt's directory was read again after a failed check
        for attempt in range(_READ_ATTEMPTS):
            outcome: KeyError | CorruptValueError | None = None
            data = b""
            with self._lock:
                if attempt:
                    self._refresh_reader(force=forced)
                stamp = self._stamp
                try:
                    info = self._index[key]
                    if window is not None and _stored_plain(info):
                        data = self._read_range_checked(info, key, *window)
                    else:  # whole (a compressed member too, cut below)
                        data = self._read_whole(info, key)
                except (KeyError, CorruptValueError) as error:
                    outcome = error
            if outcome is None and (window is None or not _stored_plain(info)):
                try:
                    self._check_crc(info, data, key)
                except CorruptValueError as error:
                    outcome = error
                else:
                    data = data if window is None else _cut(data, *window)
            fresh = self._current_stamp() == stamp
            if isinstance(outcome, CorruptValueError):
                if fresh and forced:
                    raise outcome  # read twice as the unchanged file's directory says: damaged
                failure, forced = outcome, True
                continue
            forced = False
            if fresh or attempt == _READ_ATTEMPTS - 1:
                if outcome is not None:
                    raise KeyError(key)
                return data
        raise StaleStoreError(
            f"{self!r}: {key!r} could not be read: another process kept rewriting the "
            f"archive during {_READ_ATTEMPTS} attempts ({failure}). Nothing wrong was "
            f"returned; read it again, or open the store once the writer has closed it"
        ) from failure

    def _read_range_checked(self, info: zipfile.ZipInfo, key: str, start: int,
                            length: int | None) -> bytes:
        """A range of a stored member, then its local header read again and compared.

        No checksum covers part of a value.  A writer writes a new member at
        the start of a dead gap and the next one right after it, so bytes
        written over this member's data were written over its header first:
        the header as it was when first read proves the data read before it
        were this member's.
        """
        data = self._read_range(info, key, start, length)
        expected = self._headers.get(info.header_offset)
        try:
            same = expected is not None and os.pread(
                self._fd, len(expected), info.header_offset) == expected  # type: ignore[arg-type]
        except OSError as error:
            raise self._io_error(f"reading {key!r}", error) from error
        if not same:
            raise CorruptValueError(
                f"{self!r}: bad local header for member {key!r}: it is damaged"
            )
        return data

    def _refresh_reader(self, force: bool = False) -> None:
        """A reader's directory, read again if the file changed (or ``force``); lock held."""
        if self._mode != "r":
            return
        failure: CorruptValueError | None = None
        for _ in range(_READ_ATTEMPTS):
            stamp = self._current_stamp()
            if stamp == self._stamp and not force:
                return
            self._quiesce()  # reads outside the lock use the descriptor and the index
            try:
                if self._replaced():
                    self._reopen()
                elif force:
                    self._scan_floor = 0
                self._reload_directory()
                return
            except CorruptValueError as error:
                if self._current_stamp() == stamp:
                    raise  # the file, unchanged, has no readable directory
                failure, force = error, True  # caught while the writer wrote it: again
            except OSError as error:
                raise self._io_error("reading the central directory", error) from error
        raise StaleStoreError(
            f"{self!r}: the archive's central directory could not be read: another process "
            f"kept rewriting it during {_READ_ATTEMPTS} attempts ({failure}); try again, or "
            f"open the store once the writer has closed it"
        ) from failure

    def _reopen(self) -> None:
        """A reader's descriptor on the file now at the path (the writer moved a new one there)."""
        fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        os.close(self._fd)  # type: ignore[arg-type]
        self._fd = fd
        self._stamp = ()
        self._tail_bytes = b""
        self._scan_floor = 0

    def _reload_directory(self) -> None:
        """Read the newest complete directory, from ``_scan_floor`` on; keep ours if none."""
        info = os.fstat(self._fd)  # type: ignore[arg-type]
        stamp, size = _stamp_of(info), info.st_size  # the path's stat too: the same file
        if size < self._scan_floor:  # cut since: a directory may lie before the floor
            self._scan_floor = 0
        if size == 0:  # emptied: a writer's mode "w" makes it anew; no keys yet
            self._index, self._folders, self._committed = {}, [], []
            self._tail, self._tail_bytes, self._end, self._stamp = (0, 0), b"", 0, stamp
            self._data_offsets.clear()
            self._headers.clear()
            return
        start, end = self._tail
        probe = size - _END.size - len(self._comment)
        found = None
        keep = False
        if probe >= 0 and os.pread(self._fd, 4, probe) == b"PK\x05\x06":
            # The file ends with a directory (the writer has flushed): ours still?
            keep = size == end and bool(self._tail_bytes) and \
                os.pread(self._fd, end - start, start) == self._tail_bytes
            if not keep:
                try:
                    found = self._read_directory(size)
                except _ZIP_ERRORS:
                    found = None  # written at this moment: search as below
                if found is not None and found[2] < 0:
                    found = None  # an end record that does not end the file
        if not keep and found is None:  # members written after the last directory
            found = self._last_directory(size, self._scan_floor)
            if found is None:
                if self._scan_floor == 0 or not self._tail_bytes:
                    raise CorruptValueError(
                        f"{self!r}: {self._path!r} has no readable central directory now"
                    )
                keep = True  # nothing newer than ours after what was searched before
        if found is not None:
            entries, tail_start, tail_end = found
            self._index, self._folders = {}, []
            for entry in entries:
                if entry.is_dir():
                    self._folders.append(entry)
                else:
                    self._index[entry.filename] = entry
            self._committed = entries
            self._tail = (tail_start, tail_end)
            self._tail_bytes = os.pread(self._fd, tail_end - tail_start, tail_start)
            self._data_offsets.clear()
            self._headers.clear()
        self._end = size
        # A directory written later ends after what was searched now, unless
        # the writer cut the file and wrote again: then a check after a read
        # fails, and the retry searches the whole file (force).
        self._scan_floor = max(self._tail[1], size - _END.size - len(self._comment) - 3)
        self._stamp = stamp

    def _current_stamp(self) -> tuple[int, ...]:
        """The stamp of this handle's file now.

        ``fstat`` of the descriptor, about half the cost of a ``stat`` of the
        path: a file moved over this one (``close()`` compacting) shows as
        this one's link count dropping to 0.
        """
        return _stamp_of(os.fstat(self._fd))  # type: ignore[arg-type]

    def _replaced(self) -> bool:
        """Whether another file is at the path now (not if none is: this one is all there is)."""
        try:
            now = os.stat(self._path)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) != self._stamp[:2]

    def _clear(self) -> None:
        with self._lock:
            # Saved by the next flush()/close(), like any delete; close() then
            # finds the file mostly dead and compacts it.
            for info in [*self._index.values(), *self._folders]:
                self._forget(info)
            self._index.clear()
            self._folders.clear()
            self._dirty = True

    # ------------------------------------------------------------ writing
    def _write_member(self, key: str, value: Buffer) -> None:
        info, parts = self._encode_member(key, value)
        size = sum(len(part) for part in parts)
        try:
            self._place_member(key, info, parts, size)
        except StoreFullError:
            if not self._make_room(size):
                raise
            self._place_member(key, info, parts, size)

    def _place_member(self, key: str, info: zipfile.ZipInfo, parts: list[Buffer],
                      size: int) -> None:
        entry = _CENTRAL.size + 3 * 8 + 4 + len(key.encode("utf-8"))  # its ZIP64 field at most
        offset, appended = self._allocate(size, entry)
        directory = self._tail[1] - self._tail[0] + self._dir_growth + entry
        if appended and not self._directory_fits(directory, size):
            full = OSError(errno.ENOSPC, "no room for the value and the directory after it")
            raise self._io_error(f"writing {key!r}", full) from full
        try:
            _pwrite_all(self._fd, parts, offset)
        except OSError as error:
            self._release(offset, size, appended)
            raise self._io_error(f"writing {key!r}", error) from error
        self._dir_growth += entry
        if appended:
            self._end = offset + size
            self._room -= self._blocks(size)
        info.header_offset = offset
        self._data_offsets[offset] = offset + size - info.compress_size
        old = self._index.get(key)
        self._index[key] = info
        if old is not None:
            self._forget(old)
        self._dirty = True

    # ------------------------------------------------------------ committing
    def flush(self) -> None:
        """Save every write and delete so far: write the central directory, sync.

        Afterwards the values are durable and other handles, processes and
        zip tools see them.  A flush that fails leaves the archive as it was
        and raises; the values written since stay readable in this handle.

        Raises
        ------
        StoreFullError
            The disk has no room for the new directory (``errno`` ``ENOSPC``).

        Examples
        --------
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "data.zip")
        >>> writer = ZipStore(path, mode="w")
        >>> writer["a"] = b"1"
        >>> writer.flush()
        >>> with ZipStore(path, mode="r") as reader:
        ...     reader["a"]
        b'1'
        >>> writer.close()
        """
        self._check_open()
        with self._lock:
            if self._mode != "r":
                self._commit()

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        with self._lock:
            self._quiesce()  # reads under way finish before the descriptor closes
            try:
                if self._mode != "r":
                    self._close_writer()
            finally:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                self._release_writer()

    def _close_writer(self) -> None:
        try:
            self._commit()
        except StoreIOError as error:
            # The archive stays as the last flush left it: drop what follows.
            try:
                os.ftruncate(self._fd, self._tail[1])
            except OSError:
                pass
            raise type(error)(
                error.errno,
                f"{error.strerror}; the archive keeps the state of its last successful "
                f"flush() or close(): writes and deletes since then are not saved",
            ) from error.__cause__
        if self._dead_bytes() > max(self._tail[1] // 4, _COMPACT_MIN_DEAD):
            self._compact()

    def _release_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()

    def _location(self) -> Any:
        return self._path

    def _describe(self) -> str:
        return self._path

    def _params(self) -> dict[str, Any]:
        return {
            "path": self._path,
            "compression": self._compression,
            "allowZip64": self._allow_zip64,
        }

    @property
    def path(self) -> Path:
        """The archive file."""
        return Path(self._path)


def _cut(data: bytes, start: int, length: int | None) -> bytes:
    """``data[start:start + length]`` with ``get_range``'s rules (negative ``start``)."""
    size = len(data)
    first = start if start >= 0 else max(size + start, 0)
    stop = size if length is None else min(_range_stop(start, length, size), size)
    return data[first:stop] if first < stop else b""


class _MemberReader(ValueReader):
    """A stored member, read by range while its key still names the same entry."""

    def __init__(self, store: ZipStore, key: str, info: zipfile.ZipInfo) -> None:
        self.key, self.size = key, info.file_size
        self.version = _entry(info)
        self._store = store

    def read(self, start: int, length: int) -> bytes:
        return self._store._read_pinned(self.version, self.key, start, length)
