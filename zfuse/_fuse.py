"""``mfusepy.FUSE`` with zfuse's hot paths: the class a mount is served by.

Imported only to mount (it needs mfusepy); ``fuse_class()`` builds the
class on first use.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["fuse_class"]

_thread_state = threading.local()
# libfuse 3's FUSE_CAP_READDIRPLUS and FUSE_CAP_READDIRPLUS_AUTO (fuse_common.h).
_CAP_READDIRPLUS = 1 << 13
_CAP_READDIRPLUS_AUTO = 1 << 14


@functools.cache
def fuse_class() -> type:
    """``mfusepy.FUSE`` with a few changes on the hot path (built on first use).

    * Each libfuse worker thread keeps one Python thread state for its whole
      life.  A callback from a thread Python did not start otherwise creates
      and destroys a thread state per call, which costs as much as the rest
      of a small request together.
    * Attributes are written into libfuse's ``struct stat`` once per cached
      entry and copied afterwards, without mfusepy's generic per-field work.
    * Reads copy once, from the bytes the store returned to libfuse's
      buffer, instead of slicing them first.
    * Directory entries go to libfuse's filler with only what the kernel
      keeps of them (type and inode), without mfusepy's generic per-entry checks,
      as plain READDIR records (libfuse 3 is told not to use READDIRPLUS).
    """

    import mfusepy

    ensure = ctypes.pythonapi.PyGILState_Ensure
    stat_size = ctypes.sizeof(mfusepy.c_stat)

    def pack_stat(attrs: Mapping[str, int]) -> bytes:
        st = mfusepy.c_stat()
        st.st_mode = attrs["st_mode"]
        st.st_ino = attrs["st_ino"]
        st.st_nlink = attrs["st_nlink"]
        st.st_uid = attrs["st_uid"]
        st.st_gid = attrs["st_gid"]
        st.st_size = attrs["st_size"]
        st.st_blocks = attrs["st_blocks"]
        st.st_blksize = attrs["st_blksize"]
        for name in ("st_atime", "st_mtime", "st_ctime"):
            spec = getattr(st, name + "spec")
            spec.tv_sec, spec.tv_nsec = divmod(attrs[name], 10**9)
        return ctypes.string_at(ctypes.addressof(st), stat_size)

    class FUSE(mfusepy.FUSE):
        def __init__(self, operations: Any, mountpoint: str, **kwargs: Any) -> None:
            self._max_read = int(kwargs.get("max_read") or 0)
            super().__init__(operations, mountpoint, **kwargs)

        def init_fuse_3(self, conn: Any, config: Any) -> None:
            if conn:
                # libfuse 3 refuses a max_read mount option that init does not repeat.
                if self._max_read:
                    conn.contents.max_read = self._max_read
                # Plain READDIR: zfuse's entries carry no attributes (see
                # readdir_fuse_3), so READDIRPLUS would only send each name in
                # a record 2.6x larger (2,000 names: 168 KB in two requests
                # instead of 64 KB in one), and stat still asks getattr.
                conn.contents.want &= ~(_CAP_READDIRPLUS | _CAP_READDIRPLUS_AUTO)
            super().init_fuse_3(conn, config)

        def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(_thread_state, "pinned", False):
                ensure()  # never released: the thread state outlives this call
                _thread_state.pinned = True
            return super()._wrapper(func, *args, **kwargs)

        def fgetattr(self, path: bytes | None, buf: Any, fip: Any) -> int:
            attrs = self.operations.getattr(
                None if path is None else path.decode(self.encoding, self.errors),
                fip.contents if fip else None,
            )
            packed = getattr(attrs, "packed", None)
            if packed is None:
                packed = pack_stat(attrs)
                if hasattr(attrs, "packed"):
                    attrs.packed = packed  # a cached entry is packed once
            ctypes.memmove(buf, packed, stat_size)
            return 0

        def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
            data, start, length = self.operations.read_view(
                None if path is None else path.decode(self.encoding, self.errors),
                size, offset, fip.contents if fip else None)
            if type(data) is not bytes:  # a backend returned another buffer type
                data, start = bytes(data[start:start + length]), 0
            if length:
                # Copy straight from the bytes object; ``data`` stays referenced here.
                address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
                ctypes.memmove(buf, address + start, length)
            return length

        def _fill(self, path: bytes | None, buf: Any, filler: Any, fip: Any,
                  *flags: int) -> int:
            entries = self.operations.listing(
                None if path is None else path.decode(self.encoding, self.errors),
                fip.contents.fh,
            )
            st = mfusepy.c_stat()
            encoding, errors = self.encoding, self.errors
            for name, mode, ino in entries:
                st.st_mode = mode
                st.st_ino = ino
                if filler(buf, name.encode(encoding, errors), st, 0, *flags):
                    break
            return 0

        def readdir_fuse_2(self, path: bytes | None, buf: Any, filler: Any, offset: int,
                           fip: Any) -> int:
            return self._fill(path, buf, filler, fip)

        def readdir_fuse_3(self, path: bytes | None, buf: Any, filler: Any, offset: int,
                           fip: Any, flags: int) -> int:
            # Entries without FUSE_FILL_DIR_PLUS (a stat asks getattr, served
            # from our cache); init_fuse_3 turns READDIRPLUS off, which could
            # only carry these names in larger records.
            return self._fill(path, buf, filler, fip, 0)

        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            # libfuse 3 sends ftruncate here, with the open file (mfusepy drops it).
            return self.ftruncate(path, length, fip)

    return FUSE
