"""Which libfuse zfuse loads: libfuse 3 where it can mount, else libfuse 2.

mfusepy loads the library named by ``FUSE_LIBRARY_PATH`` when it is first
imported, so the choice is made here, before anything imports mfusepy.
libfuse 3 is preferred because it spares most of the kernel's round trips:
a mount that lets the kernel keep pages can decline ``open`` for good (the
kernel then sends no OPEN, FLUSH or RELEASE at all), and read-only opens on
a read-write mount skip FLUSH.

libfuse 3 mounts through ``fusermount3`` unless the process is root (then
it calls mount(2) itself); Debian's ``fuse3`` package, which has it,
conflicts with ``fuse`` (libfuse 2's ``fusermount``).  So libfuse 3 is taken
only when it is installed and can mount: as root, or with ``fusermount3`` on
the PATH.  ``ZFUSE_LIBFUSE=2`` (or ``3``) forces a version, and an explicit
``FUSE_LIBRARY_PATH`` is always respected.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import sys
from typing import Any

__all__ = ["MISSING_MFUSEPY", "libfuse_version", "load_mfusepy", "require_mfusepy"]

#: What to do when mfusepy, the optional package zfuse mounts with, is missing.
MISSING_MFUSEPY = "zfuse needs mfusepy: pip install 'zstores[fuse]'"

_FORCE = "ZFUSE_LIBFUSE"
_PATH = "FUSE_LIBRARY_PATH"


def load_mfusepy() -> None:
    """Import mfusepy with the libfuse chosen here (a no-op once it is imported).

    The choice is passed to mfusepy for its import only, so that processes
    this one starts choose for themselves.  An import error (no libfuse
    installed) is left for the first real use of FUSE to report.

    Raises
    ------
    ValueError
        If ``ZFUSE_LIBFUSE`` is set to something other than ``2`` or ``3``.
    """
    if "mfusepy" in sys.modules:
        return
    path = None if os.environ.get(_PATH) else _library_path()
    if path is not None:
        os.environ[_PATH] = path
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError, AttributeError):
        pass
    finally:
        if path is not None:
            del os.environ[_PATH]


def require_mfusepy() -> Any:
    """The mfusepy module, or an ImportError naming the extra that installs it.

    Raises
    ------
    ModuleNotFoundError
        If mfusepy is not installed: ``zfuse needs mfusepy: pip install 'zstores[fuse]'``.

    Examples
    --------
    >>> require_mfusepy().__name__
    'mfusepy'
    """
    try:
        import mfusepy
    except ModuleNotFoundError as error:
        if error.name != "mfusepy":
            raise
        raise ModuleNotFoundError(MISSING_MFUSEPY, name="mfusepy") from None
    return mfusepy


def _library_path() -> str | None:
    forced = os.environ.get(_FORCE, "").strip()
    if forced not in ("", "2", "3"):
        raise ValueError(f"{_FORCE} must be 2 or 3 (the libfuse major version), not {forced!r}")
    if forced == "2":
        return ctypes.util.find_library("fuse")
    fuse3 = ctypes.util.find_library("fuse3")  # runs ldconfig: once
    if forced == "3" or (fuse3 is not None and _fuse3_can_mount()):
        return fuse3
    return None


def _fuse3_can_mount() -> bool:
    return os.geteuid() == 0 or shutil.which("fusermount3") is not None


def libfuse_version() -> tuple[int, int]:
    """The (major, minor) version of the libfuse zfuse mounts with.

    Examples
    --------
    >>> libfuse_version()[0] in (2, 3)                            # doctest: +SKIP
    True
    """
    load_mfusepy()
    import mfusepy

    return mfusepy.fuse_version_major, mfusepy.fuse_version_minor
