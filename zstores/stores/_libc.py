"""The C library calls the local engines make through ctypes, each found once at import.

Python's ``os`` lacks them: ``madvise`` on an address (LMDB's map),
``sync_file_range`` (LMDB's early writeback), ``openat2`` and ``renameat2``
(DirectoryStore's link-free opens and no-replace renames).  Each finder
returns a Python function, or None where the platform has no such call (the
caller then does without: these are optimizations or fallbacks, never
needed for correctness).  ctypes calls release the GIL.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["find_madvise", "find_openat2", "find_renameat2", "find_sync_file_range"]

#: <fcntl.h>: sync_file_range flag that starts writing dirty pages and waits for none.
SYNC_FILE_RANGE_WRITE = 2


def _libc_function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int) -> Any:
    """The C library's function ``name`` (errno kept for ``ctypes.get_errno``), or None."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


def find_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise(address, length, advice)``, where there is one (else None)."""
    if not hasattr(mmap, "MADV_WILLNEED") or sys.platform == "win32":
        return None
    return _libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


def find_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range(fd, offset, nbytes, flags)`` (Linux only; else None)."""
    if not sys.platform.startswith("linux"):
        return None
    return _libc_function("sync_file_range",
                          [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


# RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH: no link anywhere on the path, no escape.
_RESOLVE_SAFELY = 0x04 | 0x08
# openat2's number where Linux uses the shared table of new system calls.
_SYS_OPENAT2 = 437
_SHARED_TABLE = {"x86_64", "aarch64", "arm64", "armv7l", "armv8l", "riscv64", "ppc64le",
                 "ppc64", "s390x", "i686", "i386", "loongarch64"}
_O_PATH = getattr(os, "O_PATH", 0)


def find_openat2(read_flags: int, stat_flags: int) -> Callable[[int, str, bool], int] | None:
    """``openat2(dir_fd, path, for_stat)`` refusing every link on the path; None if absent.

    It opens ``path`` with ``read_flags``, or with ``stat_flags`` (an
    ``O_PATH`` descriptor, for ``fstat`` only) when ``for_stat`` is true, and
    returns the new descriptor or ``-errno``.

    One system call resolves a whole key path below the root, where walking
    it takes two per folder.  Linux 5.6 and later; a container's seccomp
    filter may refuse it (then the walk does all the work).
    """
    if sys.platform != "linux" or not _O_PATH or platform.machine() not in _SHARED_TABLE:
        return None
    syscall = _libc_function("syscall", [ctypes.c_long, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long)
    if syscall is None:
        return None
    # The kernel only reads these: one pair serves every thread.
    hows = (_OpenHow(read_flags, 0, _RESOLVE_SAFELY), _OpenHow(stat_flags, 0, _RESOLVE_SAFELY))
    refs, size = [ctypes.byref(how) for how in hows], ctypes.sizeof(_OpenHow)

    def openat2(dir_fd: int, path: str, for_stat: bool = False) -> int:
        # A miss is common (zarr probes for missing chunks): an errno costs
        # less than raising an exception.
        fd = syscall(_SYS_OPENAT2, dir_fd, path.encode(), refs[for_stat], size)
        return fd if fd >= 0 else -ctypes.get_errno()

    top = os.open("/", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        for for_stat in (False, True):
            fd = openat2(top, ".", for_stat)
            if fd < 0:  # ENOSYS: before Linux 5.6; EPERM: refused by seccomp
                return None
            os.close(fd)
    finally:
        os.close(top)
    return openat2


_RENAME_NOREPLACE = 1


def find_renameat2() -> Callable[[int, str, int, str], int] | None:
    """``renameat2(old_dir, old, new_dir, new)`` with ``RENAME_NOREPLACE``; None if absent.

    Returns 0, or ``-errno``.  Linux 3.15, glibc 2.28.
    """
    if sys.platform != "linux":
        return None
    function = _libc_function("renameat2", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                            ctypes.c_char_p, ctypes.c_uint])
    if function is None:
        return None

    def renameat2(old_dir: int, old: str, new_dir: int, new: str) -> int:
        done = function(old_dir, os.fsencode(old), new_dir, os.fsencode(new),
                        _RENAME_NOREPLACE)
        return 0 if done == 0 else -ctypes.get_errno()

    return renameat2
