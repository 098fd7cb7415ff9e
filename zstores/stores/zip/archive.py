"""The zip archive under ZipStore: its records, directory, members' space, commits, reads.

The engine of ``store.py``, speaking the zip format through ``pread`` and
``pwrite`` and knowing nothing of ``Store`` (an engine module never imports
it; errors name the store by its ``repr``):

- the records as APPNOTE 4.3 lays them out (local headers, central
  directory, end records: ``zipfile`` writes and reads the same bytes), the
  file's stamp (what changes when a writer writes or replaces it), a
  descriptor seen as a file by ``zipfile`` (``_Window``), many buffers
  written at once, a member copied between two ``zipfile`` archives;
- ``Archive``, the zip machinery ``ZipStore`` is made of, as methods over the
  archive state the store's ``__init__`` sets (the attributes annotated on
  it): reading a central directory (the last complete one of a file a
  writer left unfinished), a member's local header and bytes (``pread``,
  outside the store's lock while other threads read), the dead space of
  replaced and deleted members (reused, gathered on a full disk), committing
  a new directory (after the end, into the gap before the old one, or over
  it), and compacting on close.
"""

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
import zipfile
import zlib
from typing import Any

from ...errors import (
    CorruptValueError,
    StoreFullError,
    StoreIOError,
    UnsupportedOperationError,
    ValueTooLargeError,
)

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
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error)

#: ``base.Buffer``: the values a store is given (an engine module does not import base).
_Buffer = bytes | memoryview

# errno values that mean "no room": the write is refused, nothing is damaged.
_FULL = {errno.ENOSPC, errno.EDQUOT}
# On a full disk, a write gathers dead space with at most this many rounds of
# moves (each ending with a new directory) before it gives up.
_GATHER_ROUNDS = 8


def _stored_plain(info: zipfile.ZipInfo) -> bool:
    """Whether a member's data are its value's bytes (stored, not encrypted)."""
    return info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & _FLAG_ENCRYPTED


class Archive:
    """The zip machinery of ``ZipStore``: a mixin over the state its ``__init__`` sets.

    The caller holds ``_lock`` (``_pread_unlocked`` lets go of it while it
    reads); ``_fd`` is the archive's descriptor.
    """

    _path: str
    _compression: int
    _allow_zip64: bool
    _mode: str
    _lock: Any
    _readers: int
    _writers_waiting: int
    _no_readers: threading.Condition
    _index: dict[str, zipfile.ZipInfo]
    _folders: list[zipfile.ZipInfo]
    _data_offsets: dict[int, int]
    _comment: bytes
    _fd: int | None
    _committed: list[zipfile.ZipInfo]
    _tail: tuple[int, int]
    _end: int
    _holes: list[list[int]] | None
    _dirty: bool
    _dir_growth: int
    _room: int
    _block: int
    _headers: dict[int, bytes]

    # ------------------------------------------------------------ directories
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

    # ------------------------------------------------------------ members
    def _encode_member(self, key: str, value: _Buffer) -> tuple[zipfile.ZipInfo, list[_Buffer]]:
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

    def _stored_header(self, info: zipfile.ZipInfo, value: _Buffer) -> bytes:
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

    # ------------------------------------------------------------ space
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

    # ------------------------------------------------------------ compacting
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

    # ------------------------------------------------------------ errors
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


def _stamp_of(info: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written or replaced (unlinked): checked after each read."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            info.st_nlink)


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


def _pwrite_all(fd: int | None, data: _Buffer | list[_Buffer], position: int) -> None:
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


def _entry(info: zipfile.ZipInfo) -> tuple[str, int, int, int]:
    """What names a member's bytes in one archive: where it starts, its CRC-32 and size.

    Live members are never written over, so an entry with the same values
    holds the same bytes.
    """
    return ("zip", info.header_offset, info.CRC, info.file_size)
