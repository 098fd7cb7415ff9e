"""ZipStore: every key a member of one zip archive."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..base import Buffer, Mode, Store, _range_stop
from ..keys import child_name
from ..sync.writer import writer_lock

__all__ = ["ZipStore"]

# Local file header: signature, versions and flags ... name length, extra length.
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_FLAG_ENCRYPTED = 0x1


def _stored_plain(info: zipfile.ZipInfo) -> bool:
    """Whether a member's data are its value's bytes (stored, not encrypted)."""
    return info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & _FLAG_ENCRYPTED


# zipfile's own mode for each store mode ("r+" and "w-" are checked before;
# "w-" has created the file exclusively when it took the writer lock).
_ZIP_MODE = {"r": "r", "r+": "a", "a": "a", "w": "w", "w-": "w"}


class ZipStore(Store):
    """Keys and values as the members of a zip archive.

    The layout is zarr-python 2.18's ``ZipStore``: one member per key, named by
    the key, with Unix permissions ``0o644``, the current local time and the
    store's compression, so either library reads the other's archives.

    Zip members cannot be replaced or removed in place.  Overwriting a key
    appends a new member and deleting one only hides it; the store indexes the
    latest member of every live key, so reads see the newest value at once.
    If anything was overwritten or deleted, ``close()`` copies the live
    members to a temporary archive next to the file and moves it over the old
    one (``os.replace``), so a closed archive holds exactly one member per key.

    An archive is complete only after ``close()`` (which writes the central
    directory): a writer must close the store before another handle, process
    or tool reads the file, and a crash before ``close()`` can leave the
    archive unreadable, as with every zip writer.  Pickling reopens the same
    path, so it too sees only what a closed writer left.

    Parameters
    ----------
    path : str or os.PathLike
        The archive file.
    compression : int
        ``zipfile.ZIP_STORED`` (default; allows range reads),
        ``ZIP_DEFLATED``, ``ZIP_BZIP2`` or ``ZIP_LZMA`` for new members.
    allowZip64 : bool
        Allow the ZIP64 extensions needed past 4 GiB or 65,535 members.
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` and ``"r+"`` need an existing archive, ``"a"`` creates it if
        missing, ``"w"`` replaces it and ``"w-"`` refuses an existing file.

    Notes
    -----
    Capability flags:

    - ``supports_range_reads``: True when ``compression`` is ``ZIP_STORED``;
      ``get_range`` then reads only the asked bytes of stored members (others
      are decompressed whole).
    - ``supports_deletes``: True, through the rewrite at ``close()``.
    - ``supports_process_writers``: False; one writer process per archive.  A
      writable store holds an exclusive lock (``flock``) on the archive while
      open, so a second process opening it for writing gets
      ``StoreLockedError`` (handles within one process share the lock).
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
        self._index: dict[str, zipfile.ZipInfo] = {}
        self._folders: list[zipfile.ZipInfo] = []  # "name/" entries other tools write
        self._data_offsets: dict[int, int] = {}
        self._read_fd: int | None = None
        self._garbage = False  # the archive holds members no key points to
        self._modified = False
        self._unflushed = False

        exists = os.path.exists(self._path)
        self._check_existence(exists)
        # Taken before the file is read or opened by zipfile: a second writer
        # process must fail clearly, before mode "w" truncates the archive.
        self._writer = writer_lock(self._path, self, self._mode, create_new=self._mode == "w-")
        try:
            self._open_archive(exists)
        except BaseException:
            self._release_writer()
            raise

    def _open_archive(self, exists: bool) -> None:
        if exists and self._mode in ("r+", "a") and os.path.getsize(self._path) > 0:
            if not zipfile.is_zipfile(self._path):
                raise zipfile.BadZipFile(
                    f"{self._path!r} exists and is not a zip archive (or its writer has "
                    f"not closed it yet); mode {self._mode!r} would append an archive to "
                    "it (mode 'w' replaces the file)"
                )
        self._zf = self._open_zip(_ZIP_MODE[self._mode])
        self._load_index()

    # ------------------------------------------------------------ opening
    def _open_zip(self, zip_mode: str) -> zipfile.ZipFile:
        return zipfile.ZipFile(
            self._path, mode=zip_mode, compression=self._compression, allowZip64=self._allow_zip64
        )

    def _load_index(self) -> None:
        entries = self._zf.infolist()
        for info in entries:  # central directory order: a later duplicate wins
            if info.is_dir():
                self._folders.append(info)
            else:
                self._index[info.filename] = info
        self._garbage = len(self._index) + len(self._folders) != len(entries)

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        with self._lock:
            info = self._index[key]
            if not _stored_plain(info):
                with self._zf.open(info) as member:  # inflates and checks the CRC
                    return member.read()
            # A stored member is its bytes: one pread, without zipfile's
            # per-open header parsing and buffering (about twice as fast).
            data = self._pread(self._data_offset(info), info.file_size)
        if zlib.crc32(data) != info.CRC:
            raise zipfile.BadZipFile(f"bad CRC-32 for member {key!r} in {self._path!r}")
        return data

    def _set(self, key: str, value: Buffer) -> None:
        with self._lock:
            self._write_member(key, value)

    def _write_member(self, key: str, value: Buffer) -> None:
        info = zipfile.ZipInfo(filename=key, date_time=time.localtime(time.time())[:6])
        info.compress_type = self._compression
        info.external_attr = 0o644 << 16  # rw-r--r--, as zarr-python 2 writes
        if key in self._index:
            self._garbage = True
        # Our index is the source of truth; dropping zipfile's own name entry
        # keeps it from warning about the duplicate member we are about to add.
        self._zf.NameToInfo.pop(key, None)
        self._zf.writestr(info, value)
        self._index[key] = info
        self._modified = True
        self._unflushed = True

    def _delete(self, key: str) -> None:
        with self._lock:
            del self._index[key]
            self._zf.NameToInfo.pop(key, None)
            self._garbage = self._modified = True

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        with self._lock:
            if not prefix:
                return list(self._index)
            return [key for key in self._index if key.startswith(prefix)]

    # ------------------------------------------------------------ fast paths
    def _contains(self, key: str) -> bool:
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
        with self._lock:
            info = self._index[key]
            if not _stored_plain(info):
                return super()._get_range(key, start, length)
            size = info.file_size
            first = start if start >= 0 else max(size + start, 0)
            stop = size if length is None else min(_range_stop(start, length, size), size)
            if first >= stop:
                return b""
            return self._pread(self._data_offset(info) + first, stop - first)

    def _listdir(self, prefix: str) -> Iterable[str]:
        with self._lock:
            return {child_name(key, prefix) for key in self._index if key.startswith(prefix)}

    def _getsize_key(self, key: str) -> int:
        return self._index[key].file_size

    def _getsize_prefix(self, prefix: str) -> int:
        with self._lock:
            return sum(
                info.file_size for key, info in self._index.items() if key.startswith(prefix)
            )

    def _len(self) -> int:
        return len(self._index)

    def _clear(self) -> None:
        with self._lock:
            # Truncate instead of hiding every member: the file shrinks now.
            self._zf.close()
            self._zf = self._open_zip("w")
            self._index.clear()
            self._folders.clear()
            self._data_offsets.clear()
            self._garbage = False
            self._modified = True

    # ------------------------------------------------------------ range reads
    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        """File offset of a member's data, from its local header (cached)."""
        offset = self._data_offsets.get(info.header_offset)
        if offset is None:
            header = self._pread(info.header_offset, _LOCAL_HEADER.size)
            fields = _LOCAL_HEADER.unpack(header)
            if fields[0] != _LOCAL_SIGNATURE:
                raise zipfile.BadZipFile(
                    f"bad local header for member {info.filename!r} in {self._path!r}"
                )
            name_length, extra_length = fields[10], fields[11]
            offset = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
            self._data_offsets[info.header_offset] = offset
        return offset

    def _pread(self, offset: int, size: int) -> bytes:
        if self._unflushed:
            # The separate descriptor reads the file, not zipfile's buffer.  (zipfile
            # flushes when it seeks back to finish a member's header; don't rely on it.)
            self._zf.fp.flush()  # type: ignore[union-attr]
            self._unflushed = False
        if self._read_fd is None:
            self._read_fd = os.open(self._path, os.O_RDONLY)
        chunks = []
        while size > 0:
            chunk = os.pread(self._read_fd, size, offset)
            if not chunk:
                raise zipfile.BadZipFile(f"{self._path!r} ends inside a member")
            chunks.append(chunk)
            offset += len(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        with self._lock:
            if self._read_fd is not None:
                os.close(self._read_fd)
                self._read_fd = None
            try:
                # Complete the archive as it is first: if the rewrite fails, the
                # file is still a valid archive (with stale members).
                self._zf.close()
                if self._mode != "r" and self._modified and self._garbage:
                    self._rewrite()
            finally:
                self._release_writer()

    def _release_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()

    def _rewrite(self) -> None:
        """Copy the live members to a new archive and move it over the old one."""
        folder, name = os.path.split(self._path)
        fd, temp_path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w+b") as temp_file:
                with self._open_zip("r") as source, zipfile.ZipFile(
                    temp_file, "w", compression=self._compression, allowZip64=self._allow_zip64
                ) as target:
                    target.comment = source.comment
                    for info in [*self._folders, *self._index.values()]:
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
        self._garbage = False

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


def _copy_member(source: zipfile.ZipFile, target: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    copy = zipfile.ZipInfo(filename=info.filename, date_time=info.date_time)
    copy.compress_type = info.compress_type
    copy.external_attr = info.external_attr
    copy.create_system = info.create_system
    copy.comment = info.comment
    copy.file_size = info.file_size  # lets zipfile decide on ZIP64 before writing
    with source.open(info) as reader, target.open(copy, "w") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)
