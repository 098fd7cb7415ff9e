"""The files of a ``dbm.dumb`` database, written so that no failure or crash damages them.

``dbm.dumb`` keeps values in ``NAME.dat`` (each at a 512-byte boundary) and an
index in ``NAME.dir``: one line ``'key', (position, size)`` per write, a later
line for the same key overriding an earlier one, as ``dbm.dumb`` reads them.
``dbm.dumb`` itself overwrites values in place, appends half an index line
when the disk fills up, and rewrites ``.dir`` by renaming it to ``.bak`` and
writing a new one (nothing readable in between), so a full disk or a crash
can leave a database it cannot open.  ``DumbFiles`` writes the same files
with these rules:

- a value is written to space no index line refers to (a gap left by a
  deleted or replaced value, or the end of ``.dat``), then its index line is
  appended to ``.dir``; a failed write truncates what it added, so the old
  value stays and ``.dir`` never holds half a line;
- deletes rewrite ``.dir`` to a temporary file, synced, then moved over it
  (``os.replace``; the old index becomes ``.bak``, as with ``dbm.dumb``);
- ``.dat`` keeps free bytes at its end (the *reserve*, at least the size of
  ``.dir``) which nothing refers to: when the disk is full, the reserve is
  given back to make room for the new index, so deleting keys always works;
- space is reused only once no index on disk refers to it (after a sync).

At every moment, ``dbm.dumb.open`` reads the files as the state before or
after the operation under way.

A reader (``writable=False``) may sit beside a writer in another process,
which gives the space of replaced and deleted values to new ones.  After
each read it compares ``.dir``'s stat with the one its index was read at:
space an index line on disk still refers to is never reused, so a value
whose ``.dir`` did not change from the reading of the index to the end of
the read is whole, and the newest.  If it changed, the reader reads the new
lines (``.dir`` only grows, or is replaced whole) and the value again.

The module uses ``dbm.dumb``'s own object for opening, listing and its
in-memory index (``_index``), and never lets it write (``_modified`` stays
False).
"""

from __future__ import annotations

import ast
import errno
import os
import tempfile
from typing import Any

__all__ = ["DumbFiles", "Stale", "is_dumb"]

#: dbm.dumb aligns every value to this many bytes.
BLOCK = 512
# The reserve: free bytes kept at the end of .dat, given back on a full disk
# to write a new index; always at least .dir's size plus this margin.
_RESERVE_MARGIN = 8 * 1024
# Room kept for an index line when a write goes ahead without the reserve.
_LINE_ROOM = 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)
# A reader tries a read this many times (reading the index again in between)
# before it says the database kept changing under it.
_READ_ATTEMPTS = 4


def is_dumb(db: Any) -> bool:
    """Whether ``db`` is a ``dbm.dumb`` database with the internals used here.

    Examples
    --------
    >>> import dbm.dumb, os, tempfile
    >>> with dbm.dumb.open(os.path.join(tempfile.mkdtemp(), "db"), "c") as db:
    ...     is_dumb(db)
    True
    """
    return (
        type(db).__module__ == "dbm.dumb"
        and isinstance(getattr(db, "_index", None), dict)
        and all(isinstance(getattr(db, name, None), (str, bytes))
                for name in ("_datfile", "_dirfile", "_bakfile"))
    )


def _aligned(position: int) -> int:
    return -(-position // BLOCK) * BLOCK


class DumbFiles:
    """Reads and writes of one open ``dbm.dumb`` database, through kept descriptors.

    Raises ``OSError`` from the system calls (the caller types them) and
    ``ShortValue`` when ``.dat`` ends inside a value.

    Parameters
    ----------
    db : dbm.dumb database
        As opened by ``dbm.dumb.open``; the object keeps its index.
    writable : bool
        Whether writes will be made (the database was not opened with ``"r"``).

    Examples
    --------
    >>> import dbm.dumb, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "db")
    >>> db = dbm.dumb.open(path, "c")
    >>> files = DumbFiles(db, writable=True)
    >>> files.write(b"k", b"value")
    >>> files.write(b"k", b"new value")
    >>> files.delete([b"k", b"missing"])
    1
    >>> files.write(b"j", b"v")
    >>> files.close()
    >>> with dbm.dumb.open(path, "r") as again:
    ...     dict(again)
    {b'j': b'v'}
    """

    def __init__(self, db: Any, *, writable: bool) -> None:
        self.db = db
        self.index: dict[bytes, tuple[int, int]] = db._index
        self._dat_path = os.fsdecode(db._datfile)
        self._dir_path = os.fsdecode(db._dirfile)
        self._bak_path = os.fsdecode(db._bakfile)
        self._writable = writable
        cloexec = getattr(os, "O_CLOEXEC", 0)
        self._dat = os.open(self._dat_path, (os.O_RDWR if writable else os.O_RDONLY) | cloexec)
        self._dir: int | None = None
        self._free: list[list[int]] | None = None  # gaps in .dat no index refers to
        self._pending: list[tuple[int, int]] = []  # freed, reusable after the next sync
        self._lines = 0  # lines in .dir, to know when rewriting it is worth it
        # Readers: .dir's stat when the index was read, and how far (see refresh).
        # dbm.dumb read .dir before any stat was taken: a reader reads it again.
        self._dir_stamp: tuple[int, ...] | None = None
        self._dir_read_to = 0
        self._dir_fd: int | None = None  # readers: the .dir read, kept open (see _read_dir)
        if not writable:
            try:
                self.refresh()
            except BaseException:
                self.close_files()
                raise
            return
        try:
            dat_size = os.fstat(self._dat).st_size
            self._end = max((end for _, end in _regions(self.index.values())), default=0)
            self._reserve_end = max(dat_size, self._end)
            if db._modified or not os.path.exists(self._dir_path):
                self.commit()  # a new database: an empty .dir, written safely
            else:
                self._open_dir()
                self._lines = len(self.index)
        except BaseException:
            self.close_files()
            raise
        db._modified = False

    # -------------------------------------------------------------- reading
    def read(self, raw: bytes) -> bytes:
        """The value of ``raw``; KeyError if missing, ShortValue if ``.dat`` is cut.

        A reader compares ``.dir``'s stat after the read (one stat a read):
        unchanged since the index was read, the value is whole and the newest;
        changed, it reads the new index and the value again, and raises
        ``Stale`` if ``.dir`` changed during each attempt.
        """
        if self._writable:
            return self._read_at(*self.index[raw])
        for attempt in range(_READ_ATTEMPTS):
            if attempt:
                self.refresh()
            stamp = self._dir_stamp
            try:
                value, failure = self._read_at(*self.index[raw]), None
            except (KeyError, ShortValue) as error:
                value, failure = b"", error
            if _stamp_of(self._dir_path) == stamp:
                if failure is not None:
                    raise failure
                return value
        raise Stale(f"its index changed during each of {_READ_ATTEMPTS} attempts")

    def _read_at(self, position: int, size: int) -> bytes:
        value = os.pread(self._dat, size, position)
        while len(value) < size:
            more = os.pread(self._dat, size - len(value), position + len(value))
            if not more:
                raise ShortValue(f".dat ends {size - len(value)} bytes inside the value")
            value += more
        return value

    def refresh(self) -> None:
        """A reader's index, brought up to ``.dir`` as it is now (nothing for a writer).

        ``.dir`` is appended to in place, or replaced whole (``os.replace``);
        ``.dat`` is replaced only when the database is made anew.
        """
        if self._writable:
            return
        for _ in range(_READ_ATTEMPTS):
            stamp = _stamp_of(self._dir_path)
            if stamp == self._dir_stamp:
                return
            try:
                self._read_dir(stamp)
            except _Moved:
                continue  # replaced while being read: again
            return
        raise Stale(f"its index was replaced during each of {_READ_ATTEMPTS} attempts")

    def _read_dir(self, stamp: tuple[int, ...]) -> None:
        """Read the lines of ``.dir`` not read yet (all of them if it was replaced).

        The reader keeps the ``.dir`` it read open: while it does, no new file
        can have its inode number, so the same number means the same file,
        appended to.
        """
        same_file = self._dir_fd is not None and stamp[:2] == _identity(
            os.fstat(self._dir_fd)) and stamp[2] >= self._dir_read_to
        if same_file:
            start, data = self._dir_read_to, _read_from(self._dir_fd, self._dir_read_to)
        else:
            start, fd = 0, None
            if stamp:  # else no .dir (being made anew): an empty database
                try:
                    fd = os.open(self._dir_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except FileNotFoundError:
                    raise _Moved from None
                if _identity(os.fstat(fd)) != stamp[:2]:
                    os.close(fd)
                    raise _Moved
            data = _read_from(fd, 0) if fd is not None else b""
            if self._dir_fd is not None:
                os.close(self._dir_fd)
            self._dir_fd = fd
        complete = data.rfind(b"\n") + 1  # a line being appended is read next time
        entries = _parse_lines(data[:complete])
        if not same_file:
            self._reopen_dat()
            self.index.clear()
        self.index.update(entries)
        self._dir_read_to = start + complete
        self._dir_stamp = stamp

    def _reopen_dat(self) -> None:
        """A reader's ``.dat`` descriptor on the file now at its path (made anew by a writer)."""
        try:
            now = _identity(os.stat(self._dat_path))
        except FileNotFoundError:
            return
        if now != _identity(os.fstat(self._dat)):
            fd = os.open(self._dat_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            os.close(self._dat)
            self._dat = fd

    # -------------------------------------------------------------- writing
    def write(self, raw: bytes, value: bytes) -> None:
        """``db[raw] = value``: the value into free space, then its index line."""
        size = len(value)
        position, appended = self._allocate(size)
        end = position + size
        # The reserve grows with .dir; a write that cannot keep it fails here,
        # unless it goes into a gap and a new index still fits (see below).
        try:
            self._ensure(max(self._end, _aligned(end)) + self._reserve_needed())
        except OSError as error:
            if appended or error.errno not in _FULL or not self._new_index_fits():
                if not appended:
                    self._free.append([position, _aligned(end)])  # type: ignore[union-attr]
                raise
        try:
            _pwrite_all(self._dat, value, position)
            self._append_line(raw, position, size)
        except BaseException:
            if not appended:
                self._free.append([position, _aligned(end)])  # type: ignore[union-attr]
            raise
        if appended:
            self._end = _aligned(end)
        old = self.index.get(raw)
        self.index[raw] = (position, size)
        if old is not None:
            self._pending.extend(_regions([old]))

    def delete(self, raws: list[bytes]) -> int:
        """Delete the keys that exist with one new index; return how many did."""
        removed = {raw: self.index.pop(raw) for raw in raws if raw in self.index}
        if not removed:
            return 0
        try:
            self.commit()
        except BaseException:
            self.index.update(removed)
            raise
        self._free_now(_regions(removed.values()))
        return len(removed)

    def commit(self) -> None:
        """Write the whole index anew: a temporary file, synced, moved over ``.dir``."""
        lines = b"".join(_line(raw, pos_size) for raw, pos_size in self.index.items())
        folder, name = os.path.split(self._dir_path)
        _remove(self._bak_path)  # the backup of the index before last: room first
        try:
            temp = self._write_temporary(folder, name, lines)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self._give_back_reserve()  # the disk is full: make the room kept for this
            temp = self._write_temporary(folder, name, lines)
        try:
            if os.path.exists(self._dir_path):
                os.link(self._dir_path, self._bak_path)  # dbm.dumb's backup of the old index
        except OSError:
            pass  # the backup is a courtesy; the old index stays until the replace
        os.replace(temp, self._dir_path)
        _sync_folder(folder)
        self._open_dir()
        self._lines = len(self.index)
        self._pending, pending = [], self._pending
        self._free_now(pending)
        try:
            self._ensure(self._end + self._reserve_needed())
        except OSError:
            pass  # rebuilt by the next write, which fails if it cannot

    def sync(self) -> None:
        """Make every write durable; space freed so far becomes reusable."""
        if not self._writable:
            return
        os.fsync(self._dat)
        if self._dir is not None:
            os.fsync(self._dir)
        if self._lines > 2 * len(self.index) + 1000:
            self.commit()  # mostly superseded lines: shorten the index
        self._pending, pending = [], self._pending
        self._free_now(pending)

    def close(self) -> None:
        """Sync (writable), close the descriptors and dbm.dumb's object (which writes nothing)."""
        try:
            if self._writable:
                self.sync()
        finally:
            self.close_files()

    def close_files(self) -> None:
        """Close the descriptors and the dbm.dumb object without syncing."""
        for fd in (self._dat, self._dir, self._dir_fd):
            if fd is not None:
                os.close(fd)
        self._dat = self._dir = self._dir_fd = None  # type: ignore[assignment]
        self.db._modified = False  # dbm.dumb must not rewrite .dir behind us
        self.db.close()

    # -------------------------------------------------------------- space
    def _allocate(self, size: int) -> tuple[int, bool]:
        """A block-aligned position for ``size`` bytes: a free gap, or the end."""
        if size:
            free = self._find_free()
            for number, gap in enumerate(free):
                if gap[1] - gap[0] >= size:
                    position = gap[0]
                    gap[0] = min(_aligned(position + size), gap[1])
                    if gap[0] == gap[1]:
                        del free[number]
                    return position, False
        return self._end, True

    def _find_free(self) -> list[list[int]]:
        if self._free is None:
            # Space freed since the last sync still has index lines on disk.
            used = sorted([*_regions(self.index.values()), *self._pending])
            free, previous_end = [], 0
            for start, end in [*used, (self._end, self._end)]:
                if start > previous_end:
                    free.append([previous_end, start])
                previous_end = max(previous_end, end)
            self._free = free
        return self._free

    def _free_now(self, regions: Any) -> None:
        if self._free is None:
            return  # found from the index when first needed
        self._free.extend([start, end] for start, end in regions)

    def _reserve_needed(self) -> int:
        dir_size = os.fstat(self._dir).st_size if self._dir is not None else 0
        return 2 * dir_size + _RESERVE_MARGIN

    def _ensure(self, size: int) -> None:
        """Make ``.dat`` at least ``size`` bytes, its new blocks allocated (ENOSPC if not)."""
        if size <= self._reserve_end:
            return
        # Grow with headroom (1/16 of the file) so that not every write pays
        # a call; on a nearly full disk, exactly what is needed.
        roomy = size + max(_RESERVE_MARGIN, size // 16)
        try:
            self._allocate_to(roomy)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self._allocate_to(size)

    def _allocate_to(self, size: int) -> None:
        old = self._reserve_end
        try:
            try:
                os.posix_fallocate(self._dat, old, size - old)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                _pwrite_all(self._dat, bytes(size - old), old)  # no fallocate: zeros
        except BaseException:
            try:
                os.ftruncate(self._dat, old)
            except OSError:
                pass
            raise
        self._reserve_end = size

    def _new_index_fits(self) -> bool:
        """Whether a delete could still write its new index without the reserve.

        After deletes on a disk other files filled, the reserve given back
        for the new index may not fit again, while the deleted values left
        gaps inside ``.dat``.  A write into such a gap needs no new room
        (its index line at most a block), so it goes ahead as long as a
        delete's new index, no larger than ``.dir`` is with this write's
        line, fits in the free room plus the backup index ``.bak`` (which a
        delete removes first).
        """
        try:
            stat = os.fstatvfs(self._dat)
            free = stat.f_bavail * stat.f_frsize
            block = max(stat.f_frsize, BLOCK)
            dir_size = os.fstat(self._dir).st_size if self._dir is not None else 0
            try:
                backup = os.stat(self._bak_path).st_blocks * 512
            except FileNotFoundError:
                backup = 0
        except OSError:
            return False
        # The new index, rounded to whole blocks, and a block for this write's line.
        needed = -(-(dir_size + _LINE_ROOM) // block) * block + block
        return free + backup >= needed

    def _give_back_reserve(self) -> None:
        os.ftruncate(self._dat, self._end)
        self._reserve_end = self._end

    # -------------------------------------------------------------- .dir
    def _open_dir(self) -> None:
        if self._dir is not None:
            os.close(self._dir)
        self._dir = os.open(self._dir_path, os.O_WRONLY | os.O_APPEND
                            | getattr(os, "O_CLOEXEC", 0))

    def _append_line(self, raw: bytes, position: int, size: int) -> None:
        line = _line(raw, (position, size))
        before = os.fstat(self._dir).st_size  # type: ignore[arg-type]
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._dir, view):]  # type: ignore[arg-type]
        except BaseException:
            os.ftruncate(self._dir, before)  # type: ignore[arg-type]  # never half a line
            raise
        self._lines += 1

    def _write_temporary(self, folder: str, name: str, lines: bytes) -> str:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            _pwrite_all(fd, lines, 0)
            os.fsync(fd)
            mode = os.stat(self._dat_path).st_mode & 0o777  # as dbm.dumb's _chmod
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            _remove(temp)
            raise
        os.close(fd)
        return temp


class ShortValue(Exception):
    """``.dat`` ends before a value its index names: the file was cut or damaged."""


class Stale(Exception):
    """A reader's database kept changing under a read (the caller says which store)."""


class _Moved(Exception):
    """``.dir`` was replaced between its stat and its opening."""


def _identity(info: os.stat_result) -> tuple[int, int]:
    return (info.st_dev, info.st_ino)


def _stamp_of(path: str) -> tuple[int, ...]:
    """What changes when ``path`` is appended to or replaced; empty if it is missing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return ()
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _read_from(fd: int, start: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, start):
        chunks.append(chunk)
        start += len(chunk)
    return b"".join(chunks)


def _parse_lines(data: bytes) -> dict[bytes, tuple[int, int]]:
    """Index lines as ``dbm.dumb`` reads them (``'key', (position, size)``), quickly.

    A key without quotes or backslashes in its repr is cut out directly; any
    other line goes through ``ast.literal_eval``, as in ``dbm.dumb``.
    """
    entries = {}
    for line in data.decode("Latin-1").splitlines():
        line = line.rstrip()
        if not line:
            continue
        key_repr, _, numbers = line.rpartition(", (")
        quote = key_repr[:1]
        if quote in ("'", '"') and key_repr[-1:] == quote and "\\" not in key_repr \
                and quote not in key_repr[1:-1] and numbers.endswith(")"):
            position, _, size = numbers[:-1].partition(", ")
            key, pos_size = key_repr[1:-1], (int(position), int(size))
        else:
            key, pos_size = ast.literal_eval(line)
        entries[key.encode("Latin-1")] = pos_size
    return entries


def _regions(pos_sizes: Any) -> list[tuple[int, int]]:
    """The block-aligned extents of ``(position, size)`` values (empty ones take none)."""
    return [(pos, _aligned(pos + size)) for pos, size in pos_sizes if size]


def _line(raw: bytes, pos_size: tuple[int, int]) -> bytes:
    # dbm.dumb's own line: the key decoded as Latin-1, repr'd; the same encoding back.
    return f"{raw.decode('Latin-1')!r}, {pos_size!r}\n".encode("Latin-1")


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: str) -> None:
    """Make a rename durable (where the system lets a folder be synced)."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
