"""A value of a DirectoryStore pinned by an open descriptor (``Store.open_reader``)."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from ...errors import StoreIOError
from ...readers import ValueReader
from .posixfs import _file_version, _pread_all

if TYPE_CHECKING:
    from .store import DirectoryStore

__all__: list[str] = []


class _DescriptorReader(ValueReader):
    """A value pinned by an open descriptor on its file (see ``Store.open_reader``).

    ``version`` is the file's device, inode, size and modification time: a
    write through the store makes a new file (a new inode), and a program that
    rewrites the file in place changes its modification time.  Such an in-place rewrite is the one
    thing a descriptor cannot pin: each read checks the file is unchanged,
    and raises ``StoreIOError`` (``ESTALE``) rather than return a mix.
    """

    def __init__(self, store: DirectoryStore, key: str, fd: int) -> None:
        self.key = key
        self._store = store
        self._fd = fd
        self.version = _file_version(os.fstat(fd))
        self.size = self.version[2]

    def read(self, start: int, length: int) -> bytes:
        fd = self._fd
        if fd < 0:
            raise ValueError(f"{self!r} is closed")
        stop = min(start + length, self.size)
        if stop <= start:
            return b""
        try:
            data = _pread_all(fd, stop - start, start)
            changed = _file_version(os.fstat(fd)) != self.version
        except OSError as error:
            self._store._reraise(error, "read", self.key)
        if changed or len(data) != stop - start:
            raise StoreIOError(
                errno.ESTALE,
                f"{self.key!r} in {self._store!r} was rewritten in place while open "
                "(not by the store, which replaces files whole); open it again")
        return data

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
