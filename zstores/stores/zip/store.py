"""ZipStore: every key a member of one zip archive."""

from __future__ import annotations

import bz2
import copy
import errno
import io
import os
import shutil
import struct
import tempfile
import threading
import time
import warnings
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...base import Buffer, Mode, Store, _range_stop
from ...errors import (
    CorruptValueError,
    StaleStoreError,
    StoreFullError,
    StoreIOError,
    UnsupportedOperationError,
    ValueTooLargeError,
)
from ...readers import BufferReader, ValueReader
from .._single_writer import LockedConditionalWrites, writer_lock

__all__ = ["ZipStore"]

# Local file header: signature, versions and flags ... name length, extra length.
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"
# A local header, a central directory entry, a ZIP64 end record, an end record.
_RECORD_SIGNATURES = (_LOCAL_SIGNATURE, b"PK\x01\x02", b"PK\x06\x06", b"PK\x05\x06")
# Central directory entry, ZIP64 end record and locator, end record (APPNOTE 4.3).
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_LOCATOR = struct.Struct("<4sLQL")
_END = struct.Struct("<4s4H2LH")
_ZIP64_LIMIT = (1 << 31) - 1  # zipfile's own threshold, so both libraries agree
_FLAG_ENCRYPTED = 0x1
_FLAG_DESCRIPTOR = 0x8  # sizes follow the data (streaming writers); up to 24 bytes
_FLAG_UTF8 = 0x800
_MIN_VERSION = {zipfile.ZIP_BZIP2: 46, zipfile.ZIP_LZMA: 63}

# close() compacts the archive when dead bytes (replaced or deleted members,
# superseded central directories) exceed a quarter of it and this many bytes.
_COMPACT_MIN_DEAD = 64 * 1024
# errno values that mean "no room": the write is refused, nothing is damaged.
_FULL = {errno.ENOSPC, errno.EDQUOT}
# On a full disk, a write gathers dead space with at most this many rounds of
# moves (each ending with a new directory) before it gives up.
_GATHER_ROUNDS = 8
# A reader tries a read this many times (the directory read again in between)
# before it says the archive kept changing under it (StaleStoreError).
_READ_ATTEMPTS = 4
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error)


def _stored_plain(info: zipfile.ZipInfo) -> bool:
    """Whether a member's data are its value's bytes (stored, not encrypted)."""
    return info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & _FLAG_ENCRYPTED


class ZipStore(LockedConditionalWrites, Store):
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

    def _read_directory(self, size: int) -> tuple[list[zipfile.ZipInfo], int, int]:
        """The entries, start and end of the directory zipfile finds in the first ``size`` bytes."""
        with zipfile.ZipFile(_Window(self._fd, size)) as archive:
            self._comment = archive.comment
            start = archive.start_dir  # the directory, after any prefix
            entries = archive.infolist()
        end = size
        probe = size - _END.size - len(self._comment)
        if probe < 0 or os.pread(self._fd, 4, probe) != b"PK\x05\x06":
            end = -1  # zipfile took an end record that does not end the file
        return entries, start, end

    def _last_directory(
        self, size: int, floor: int = 0,
    ) -> tuple[list[zipfile.ZipInfo], int, int] | None:
        """The last complete directory of a file with bytes after it (a crashed writer).

        Only end records from ``floor`` on are looked at (a reader already
        searched the bytes before it).
        """
        block = 1 << 20
        stop = size
        while stop > floor:
            start = max(stop - block, floor)
            data = os.pread(self._fd, stop - start + 3, start)
            at = len(data)
            while (at := data.rfind(b"PK\x05\x06", 0, at)) >= 0:
                if start + at + _END.size <= size:
                    length = os.pread(self._fd, 2, start + at + 20)  # the comment's
                    end = start + at + _END.size + struct.unpack("<H", length)[0]
                    try:
                        entries, tail_start, tail_end = self._read_directory(min(end, size))
                    except (*_ZIP_ERRORS, OSError):
                        continue
                    if tail_end >= 0:
                        return entries, tail_start, tail_end
            stop = start
        return None

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

    def _encode_member(self, key: str, value: Buffer) -> tuple[zipfile.ZipInfo, list[Buffer]]:
        """The member's ZipInfo and bytes (local header, then data), in pieces."""
        info = zipfile.ZipInfo(filename=key, date_time=time.localtime(time.time())[:6])
        info.compress_type = self._compression
        info.external_attr = 0o644 << 16  # rw-r--r--, as zarr-python 2 writes
        if self._compression == zipfile.ZIP_STORED:
            return info, [self._stored_header(info, value), value]
        scratch = io.BytesIO()
        try:
            with zipfile.ZipFile(scratch, "w", allowZip64=self._allow_zip64) as archive:
                archive.writestr(info, value)
                blob = scratch.getvalue()  # before close() adds a directory
        except zipfile.LargeZipFile as error:
            raise self._needs_zip64(key, len(value)) from error
        return info, [blob]

    def _stored_header(self, info: zipfile.ZipInfo, value: Buffer) -> bytes:
        """The local header of an uncompressed member holding ``value``.

        The bytes zipfile's ``writestr`` writes for it (same flags, versions,
        ZIP64 rule), without copying the value into a scratch archive twice:
        the value goes to the file as it is (about 1.4x faster for 1 MiB).
        """
        size = len(value)
        if not self._allow_zip64 and size > _ZIP64_LIMIT:
            raise self._needs_zip64(info.filename, size)
        info.file_size = info.compress_size = size
        info.CRC = zlib.crc32(value)
        info.flag_bits = 0  # sizes known up front: no data descriptor
        # zipfile's rule: ZIP64 fields when the size comes within 5% of the limit.
        return info.FileHeader(self._allow_zip64 and size * 1.05 > _ZIP64_LIMIT)

    def _needs_zip64(self, key: str, size: int) -> ValueTooLargeError:
        return ValueTooLargeError(
            f"{self!r}: the value of {key!r} ({size} bytes) needs ZIP64 "
            f"extensions; open the store with allowZip64=True"
        )

    def _allocate(self, size: int, entry: int = 0) -> tuple[int, bool]:
        """Where ``size`` new bytes go: the first dead gap they fit, or the end.

        ``entry`` is the size of the member's entry in the next directory.

        Returns the offset and whether it is at the end of the file.  Gaps are
        dead in the directory on disk, so writing there cannot damage anything
        acknowledged, whatever happens next.
        """
        directory = self._tail[1] - self._tail[0] + self._dir_growth + entry
        for hole in self._find_holes():
            room = hole[1] - hole[0]
            if room < size:
                continue
            left = room - size if hole[1] == self._tail[0] else None
            if not self._directory_fits(directory, 0, left):
                continue
            self._quiesce()  # a read of the member that was here may be under way
            offset = hole[0]
            hole[0] += size
            return offset, False
        return self._end, True

    def _directory_fits(self, directory: int, appended: int, gap_left: int | None = None) -> bool:
        """Whether a directory of ``directory`` bytes still has a place after this write.

        A write is taken only if the directory that saves it can be written
        afterwards, whatever else fills the disk meanwhile: appended (the file
        system has room for it after the ``appended`` bytes of this write),
        else, with nothing appended after the directory on disk, over the old
        one (no larger) or into the dead gap before it (``gap_left`` bytes of
        it once this write is in, if it goes there).
        """
        if self._room_for((self._blocks(appended) if appended else 0) + self._blocks(directory)):
            return True
        if appended or self._end != self._tail[1]:
            return False
        start, end = self._tail
        if start + directory <= -(-end // self._block) * self._block:
            return True  # over the old one, within the blocks the file has
        if gap_left is None:
            gap_left = next((end - start for start, end in self._find_holes()
                             if end == self._tail[0]), 0)
        return directory <= gap_left

    def _room_for(self, need: int) -> bool:
        """Whether the file system has ``need`` bytes free (asked only when the room
        known from the last time, less what was appended since, may not be enough)."""
        if need <= self._room:
            return True
        try:
            info = os.fstatvfs(self._fd)  # type: ignore[arg-type]
        except (OSError, AttributeError):  # AttributeError: Windows has no fstatvfs
            return True  # cannot tell: the write finds out
        # f_bavail, also for root: ext4 keeps clusters (2% of a small file
        # system) that f_bfree counts and no write of data may take.
        self._room = info.f_bavail * info.f_frsize
        self._block = max(info.f_frsize, 512)
        return need <= self._room

    def _blocks(self, size: int) -> int:
        """The room ``size`` appended bytes may take: whole blocks, and one more (metadata)."""
        return (-(-size // self._block) + 1) * self._block

    def _release(self, offset: int, size: int, appended: bool) -> None:
        """Give back space taken by a write that failed (truncating what it added)."""
        if appended:
            try:
                self._resize(offset)
            except OSError:
                pass  # the bytes past the directory are dead anyway
        elif self._holes is not None:
            self._holes.append([offset, offset + size])

    def _forget(self, info: zipfile.ZipInfo) -> None:
        """A member no key refers to any more: trim the file if it ends there."""
        if info.header_offset < self._tail[1]:
            return  # on disk its space is freed by the next directory
        end = self._data_offsets.get(info.header_offset, info.header_offset) + info.compress_size
        if end == self._end:
            try:
                self._resize(info.header_offset)
                self._end = info.header_offset
            except OSError:
                pass

    # ------------------------------------------------------------ a full disk
    # Deleted and replaced members become dead space only once a directory
    # without them is on disk, and a new member needs one gap it fits whole:
    # after deletes on a full disk, a write first saves them (as flush() does)
    # and then gathers the dead gaps into one, before the directory, by moving
    # the members nearest the end into the first gaps they fit (copies into
    # space no directory names, then a new directory naming the new places:
    # the archive is whole at every step).  No room is needed beyond the
    # directory's, which is written over the old one when nothing else fits.
    def _make_room(self, size: int) -> bool:
        """After a full disk: save pending changes and gather dead space; True if ``size`` fits."""
        try:
            self._commit()  # deletes since the last flush become dead space
            return self._gather_dead_space(size)
        except (StoreIOError, OSError):
            return False  # not even a directory fits: the write's own error says so

    def _gather_dead_space(self, size: int) -> bool:
        """Move members toward the start until a gap holds ``size`` bytes; True if one does."""
        for _ in range(_GATHER_ROUNDS):
            holes = self._find_holes()
            if any(end - start >= size for start, end in holes):
                return True
            if sum(end - start for start, end in holes) < size:
                return False  # all the dead space together is too small
            if not self._move_members_down(holes):
                return False
            self._commit()
        return any(end - start >= size for start, end in self._find_holes())

    def _move_members_down(self, holes: list[list[int]]) -> bool:
        """Copy the members nearest the end into the first gaps before them; False if none fit.

        The copies go to space the directory on disk does not name; the index
        then names them (the caller commits), and their old places are dead.
        """
        self._quiesce()  # a read of a member that was in a gap may be under way
        moved = False
        live = [info for info in self._index.values() if not info.flag_bits & _FLAG_DESCRIPTOR]
        for info in sorted(live, key=lambda member: member.header_offset, reverse=True):
            start, end = self._extent(info)
            hole = next((hole for hole in holes if hole[0] < start
                         and hole[1] - hole[0] >= end - start), None)
            if hole is None:
                continue
            target = hole[0]
            _pwrite_all(self._fd, self._pread(start, end - start, info.filename), target)
            hole[0] += end - start
            moved_info = copy.copy(info)
            moved_info.header_offset = target
            self._data_offsets[target] = target + self._data_offset(info) - start
            self._index[info.filename] = moved_info
            self._dirty = moved = True
        if moved:
            os.fsync(self._fd)  # the copies are on disk before a directory names them
        return moved

    def _find_holes(self) -> list[list[int]]:
        """The gaps between the members (and tail) of the directory on disk."""
        if self._holes is None:
            try:
                extents = sorted(self._extent(info) for info in self._committed)
            except StoreIOError:  # a damaged header: reuse nothing rather than guess
                self._holes = []
                return self._holes
            holes = []
            previous_end = self._first_member_offset(extents)
            for start, end in [*extents, (self._tail[0], self._tail[1])]:
                if start > previous_end:
                    holes.append([previous_end, start])
                previous_end = max(previous_end, end)
            self._holes = holes
        return self._holes

    def _first_member_offset(self, extents: list[tuple[int, int]]) -> int:
        """Where the archive's members begin: dead space from there on may be reused.

        That is the start of the file when it begins with a zip record (a
        dead member, or the directory of the empty archive a new store
        starts as: an archive emptied on a full disk keeps them before its
        directory), else the first live member (or the directory): bytes
        before it are a prefix such as a self-extractor's, never dead space.
        """
        first = extents[0][0] if extents else self._tail[0]
        if first > 0:
            try:
                if os.pread(self._fd, 4, 0) in _RECORD_SIGNATURES:
                    return 0
            except OSError:
                pass
        return first

    def _extent(self, info: zipfile.ZipInfo) -> tuple[int, int]:
        end = self._data_offset(info) + info.compress_size
        if info.flag_bits & _FLAG_DESCRIPTOR:
            end += 24  # the largest data descriptor: never count its bytes as dead
        return info.header_offset, end

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

    def _commit(self) -> None:
        """Append a new directory after everything and sync; the old one becomes dead."""
        if not self._dirty:
            return
        entries = [*self._folders, *self._index.values()]
        position = self._end
        tail = _central_directory(entries, position, self._comment)
        try:
            os.fsync(self._fd)  # the members reach the disk before the directory naming them
            _pwrite_all(self._fd, tail, position)
            os.fsync(self._fd)
        except OSError as error:
            try:
                self._resize(position)
            except OSError:
                pass
            if error.errno not in _FULL or self._end != self._tail[1]:
                raise self._io_error("writing the central directory", error) from error
            if not self._commit_into_gap(entries):
                self._commit_in_place(entries, error)
            return
        self._room -= self._blocks(len(tail))
        self._committed_as(entries, (position, position + len(tail)))

    def _commit_into_gap(self, entries: list[zipfile.ZipInfo]) -> bool:
        """On a full disk: the new directory into the dead gap before the old, then cut the file.

        Until the cut the file still ends with the old directory, so at every
        moment it is one whole archive; the cut also frees what followed.
        False if there is no such gap, or the directory does not fit in it.
        """
        gap = next((hole for hole in self._find_holes() if hole[1] == self._tail[0]), None)
        if gap is None:
            return False
        tail = _central_directory(entries, gap[0], self._comment)
        if gap[0] + len(tail) > gap[1]:
            return False
        try:
            self._quiesce()  # a read of a member that was in the gap may be under way
            _pwrite_all(self._fd, tail, gap[0])
            os.fsync(self._fd)
            self._resize(gap[0] + len(tail))
            os.fsync(self._fd)
        except OSError as error:
            raise self._io_error("writing the central directory", error) from error
        self._committed_as(entries, (gap[0], gap[0] + len(tail)))
        return True

    def _commit_in_place(self, entries: list[zipfile.ZipInfo], full: OSError) -> None:
        """Write the new directory over the old one: the last resort of a full disk.

        Only when nothing was appended after the old directory (new members
        went into dead space, or only deletes happened).  An error puts the
        old directory back.
        """
        start, end = self._tail
        tail = _central_directory(entries, start, self._comment)
        try:
            old = os.pread(self._fd, end - start, start)
        except OSError as error:
            raise self._io_error("reading the central directory", error) from full
        try:
            _pwrite_all(self._fd, tail, start)
            if start + len(tail) < end:
                self._resize(start + len(tail))
            os.fsync(self._fd)
        except OSError as error:
            try:
                self._resize(end)
                _pwrite_all(self._fd, old, start)
                os.fsync(self._fd)
            except OSError:
                pass
            raise self._io_error("writing the central directory", error) from full
        self._committed_as(entries, (start, start + len(tail)))

    def _committed_as(self, entries: list[zipfile.ZipInfo], tail: tuple[int, int]) -> None:
        self._committed = entries
        self._tail = tail
        self._end = tail[1]
        self._holes = None  # dead space changed: found again when needed
        self._dirty = False
        self._dir_growth = 0

    def _resize(self, size: int) -> None:
        self._quiesce()  # a read of a member past ``size`` may be under way
        os.ftruncate(self._fd, size)
        self._end = size

    # ------------------------------------------------------------ reading
    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        """File offset of a member's data, from its local header (cached)."""
        offset = self._data_offsets.get(info.header_offset)
        if offset is None:
            header = self._pread(info.header_offset, _LOCAL_HEADER.size, info.filename)
            fields = _LOCAL_HEADER.unpack(header)
            if fields[0] != _LOCAL_SIGNATURE:
                raise CorruptValueError(
                    f"{self!r}: bad local header for member {info.filename!r}: it is damaged"
                )
            name_length, extra_length = fields[10], fields[11]
            offset = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
            if self._mode == "r":
                self._headers[info.header_offset] = self._own_header(info, fields, header)
            self._data_offsets[info.header_offset] = offset
        return offset

    def _own_header(self, info: zipfile.ZipInfo, fields: tuple[Any, ...], header: bytes) -> bytes:
        """A reader's check that a local header is ``info``'s member's; its bytes with the name.

        A stale directory may name space the writer has given to another
        member (or to a newer value of the same key, even at the same place):
        the name, flags, CRC-32 and sizes must all be the directory's.
        """
        name = self._pread(info.header_offset + _LOCAL_HEADER.size, fields[10], info.filename)
        same = fields[3] & _FLAG_DESCRIPTOR == info.flag_bits & _FLAG_DESCRIPTOR and (
            name == info.filename.encode("utf-8")
            or name.decode("cp437", "replace") == info.filename
        )
        if same and not info.flag_bits & _FLAG_DESCRIPTOR:  # else the sizes follow the data
            same = fields[7] == info.CRC and (fields[8], fields[9]) in (
                (info.compress_size, info.file_size), (0xFFFFFFFF, 0xFFFFFFFF))
        if not same:
            raise CorruptValueError(
                f"{self!r}: bad local header for member {info.filename!r}: it is damaged"
            )
        return header + name

    def _pread_unlocked(self, offset: int, size: int, key: str) -> bytes:
        """``_pread``, letting go of the lock meanwhile; the caller holds it, and again after.

        Cold reads in several threads then reach the disk together instead of
        one after another.  The bytes cannot change under the read: writing
        into dead space, truncating and closing first wait in ``_quiesce``
        until no read is under way.  While a thread waits there, reads keep
        the lock, so a stream of readers cannot starve it.  A caller that
        holds the lock more than once (``getitems``) keeps holding it.
        """
        if self._writers_waiting:
            return self._pread(offset, size, key)
        self._readers += 1
        self._lock.release()
        try:
            return self._pread(offset, size, key)
        finally:
            self._lock.acquire()
            self._readers -= 1
            if not self._readers:
                self._no_readers.notify_all()

    def _quiesce(self) -> None:
        """Wait, holding the lock, until no read runs outside it: before bytes on disk change."""
        if not self._readers:
            return
        self._writers_waiting += 1
        try:
            while self._readers:
                self._no_readers.wait()
        finally:
            self._writers_waiting -= 1

    def _pread(self, offset: int, size: int, key: str) -> bytes:
        chunks = []
        try:
            while size > 0:
                chunk = os.pread(self._fd, size, offset)
                if not chunk:
                    raise CorruptValueError(
                        f"{self!r}: the archive ends inside member {key!r}: it is truncated"
                    )
                chunks.append(chunk)
                offset += len(chunk)
                size -= len(chunk)
        except CorruptValueError:
            raise
        except OSError as error:
            raise self._io_error(f"reading {key!r}", error) from error
        return b"".join(chunks)

    def _decompress(self, info: zipfile.ZipInfo, raw: bytes) -> bytes:
        key = info.filename
        if info.flag_bits & _FLAG_ENCRYPTED:
            raise UnsupportedOperationError(
                f"{self!r}: member {key!r} is encrypted; ZipStore reads no encrypted members"
            )
        try:
            if info.compress_type == zipfile.ZIP_STORED:
                return raw
            if info.compress_type == zipfile.ZIP_DEFLATED:
                inflater = zlib.decompressobj(-15)
                return inflater.decompress(raw) + inflater.flush()
            if info.compress_type == zipfile.ZIP_BZIP2:
                return bz2.decompress(raw)
            if info.compress_type == zipfile.ZIP_LZMA:
                return zipfile.LZMADecompressor().decompress(raw)
        except Exception as error:  # zlib.error, OSError, LZMAError: damaged data
            raise CorruptValueError(
                f"{self!r}: member {key!r} does not decompress: it is damaged ({error})"
            ) from error
        raise UnsupportedOperationError(
            f"{self!r}: member {key!r} uses compression method {info.compress_type}, "
            f"which zipfile does not support"
        )

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

    def _dead_bytes(self) -> int:
        live = sum(
            _LOCAL_HEADER.size + len(info.filename.encode("utf-8")) + info.compress_size
            for info in self._committed
        )
        return self._tail[0] - live

    def _compact(self) -> None:
        """Copy the live members to a new archive and move it over the old one.

        On a disk without room for the copy the archive stays as it is (its
        dead space is reused by later writes); any other failure leaves it
        intact too, and is raised.
        """
        try:
            self._rewrite()
        except OSError as error:
            if error.errno in _FULL:
                return
            raise StoreIOError(
                error.errno or errno.EIO,
                f"{self!r}: compacting the archive failed ({error}); the archive is intact",
            ) from error
        except zipfile.BadZipFile as error:
            raise CorruptValueError(
                f"{self!r}: compacting the archive found a damaged member ({error}); "
                f"the archive is left as it was"
            ) from error

    def _rewrite(self) -> None:
        folder, name = os.path.split(self._path)
        fd, temp_path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w+b") as temp_file:
                with zipfile.ZipFile(self._path) as source, zipfile.ZipFile(
                    temp_file, "w", compression=self._compression, allowZip64=self._allow_zip64
                ) as target:
                    target.comment = source.comment
                    for info in source.infolist():
                        _copy_member(source, target, info)
                temp_file.flush()
                os.fsync(temp_file.fileno())
            os.chmod(temp_path, os.stat(self._path).st_mode & 0o7777)
            os.replace(temp_path, self._path)
        except BaseException:
            try:
                os.unlink(temp_path)
            except FileNotFoundError:
                pass
            raise

    def _release_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()

    def _io_error(self, action: str, error: OSError) -> StoreIOError:
        """The typed error for a failed system call: full disk or other I/O."""
        if error.errno in _FULL:
            return StoreFullError(
                f"{self!r}: {action} failed: the disk is full ({error.strerror}); "
                f"nothing acknowledged (flushed) is lost: delete keys or free space, "
                f"then write and flush() again"
            )
        return StoreIOError(
            error.errno or errno.EIO, f"{self!r}: {action} failed: {error.strerror or error}"
        )

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


def _stamp_of(info: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written or replaced (unlinked): checked after each read."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            info.st_nlink)


def _cut(data: bytes, start: int, length: int | None) -> bytes:
    """``data[start:start + length]`` with ``get_range``'s rules (negative ``start``)."""
    size = len(data)
    first = start if start >= 0 else max(size + start, 0)
    stop = size if length is None else min(_range_stop(start, length, size), size)
    return data[first:stop] if first < stop else b""


class _Window(io.RawIOBase):
    """The first ``size`` bytes of a descriptor as a read-only file, read with ``pread``."""

    def __init__(self, fd: int | None, size: int) -> None:
        super().__init__()
        self._fd, self._size, self._position = fd, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = max(base + offset, 0)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        size = max(min(len(buffer), self._size - self._position), 0)
        data = os.pread(self._fd, size, self._position) if size else b""  # type: ignore[arg-type]
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)


def _pwrite_all(fd: int | None, data: Buffer | list[Buffer], position: int) -> None:
    """Write ``data`` (one buffer, or pieces in order, with one ``pwritev``) at ``position``."""
    views = [memoryview(piece).cast("B") for piece in (data if isinstance(data, list) else [data])]
    views = [view for view in views if view.nbytes]
    while views:
        written = os.pwritev(fd, views, position)  # type: ignore[arg-type]
        position += written
        while views and written >= views[0].nbytes:  # a short write: go on after it
            written -= views[0].nbytes
            views.pop(0)
        if views:
            views[0] = views[0][written:]


def _central_directory(entries: list[zipfile.ZipInfo], position: int, comment: bytes) -> bytes:
    """The central directory naming ``entries``, then the end records, for ``position``.

    The same records zipfile writes when it closes an archive (ZIP64 fields
    only where a size or offset needs them), so zipfile, zarr-python 2 and
    zip tools read the result.
    """
    parts = []
    for info in entries:
        try:
            name, flags = info.filename.encode("ascii"), info.flag_bits
        except UnicodeEncodeError:
            name, flags = info.filename.encode("utf-8"), info.flag_bits | _FLAG_UTF8
        big = [info.file_size, info.compress_size] if max(
            info.file_size, info.compress_size) > _ZIP64_LIMIT else []
        if info.header_offset > _ZIP64_LIMIT:
            big.append(info.header_offset)
        extra = _strip_zip64(info.extra)  # written anew below when needed
        version = _MIN_VERSION.get(info.compress_type, 0)
        if big:
            extra = struct.pack(f"<HH{len(big)}Q", 1, 8 * len(big), *big) + extra
            version = max(version, 45)
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if len(big) >= 2 else (info.compress_size, info.file_size)
        offset = 0xFFFFFFFF if info.header_offset > _ZIP64_LIMIT else info.header_offset
        year, month, day, hour, minute, second = info.date_time
        parts.append(_CENTRAL.pack(
            b"PK\x01\x02", max(version, info.create_version), info.create_system,
            max(version, info.extract_version), info.reserved, flags, info.compress_type,
            hour << 11 | minute << 5 | second // 2, (year - 1980) << 9 | month << 5 | day,
            info.CRC, *sizes, len(name), len(extra), len(info.comment), 0,
            info.internal_attr, info.external_attr, offset,
        ))
        parts += [name, extra, info.comment]
    directory = b"".join(parts)
    count, size, end = len(entries), len(directory), position + len(directory)
    records = []
    if count > 0xFFFF or position > _ZIP64_LIMIT or size > _ZIP64_LIMIT:
        records.append(_END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, position))
        records.append(_END64_LOCATOR.pack(b"PK\x06\x07", 0, end, 1))
        count, size, position = min(count, 0xFFFF), min(size, 0xFFFFFFFF), min(position, 0xFFFFFFFF)
    records.append(_END.pack(b"PK\x05\x06", 0, 0, count, count, size, position, len(comment)))
    return directory + b"".join(records) + comment


def _strip_zip64(extra: bytes) -> bytes:
    """``extra`` without its ZIP64 field (header id 1), which is written anew."""
    kept, at = [], 0
    while at + 4 <= len(extra):
        field_id, length = struct.unpack_from("<HH", extra, at)
        if field_id != 1:
            kept.append(extra[at:at + 4 + length])
        at += 4 + length
    return b"".join(kept)


def _copy_member(source: zipfile.ZipFile, target: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    copy = zipfile.ZipInfo(filename=info.filename, date_time=info.date_time)
    copy.compress_type = info.compress_type
    copy.external_attr = info.external_attr
    copy.create_system = info.create_system
    copy.comment = info.comment
    copy.file_size = info.file_size  # lets zipfile decide on ZIP64 before writing
    with source.open(info) as reader, target.open(copy, "w") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)


class _MemberReader(ValueReader):
    """A stored member, read by range while its key still names the same entry."""

    def __init__(self, store: ZipStore, key: str, info: zipfile.ZipInfo) -> None:
        self.key, self.size = key, info.file_size
        self.version = _entry(info)
        self._store = store

    def read(self, start: int, length: int) -> bytes:
        return self._store._read_pinned(self.version, self.key, start, length)


def _entry(info: zipfile.ZipInfo) -> tuple[str, int, int, int]:
    """What names a member's bytes in one archive: where it starts, its CRC-32 and size.

    Live members are never written over, so an entry with the same values
    holds the same bytes.
    """
    return ("zip", info.header_offset, info.CRC, info.file_size)
