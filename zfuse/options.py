"""libfuse's options for a zfuse mount, and the ``-o`` syntax that adds more.

Only the standard library and ``zfuse._libfuse`` are used at import:
``fuse_options`` itself needs mfusepy (the options differ between libfuse
2 and 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._libfuse import require_mfusepy

__all__ = ["SUBTYPE", "fuse_options", "parse_fuse_options"]

#: The filesystem type zfuse mounts show in /proc/mounts.
SUBTYPE = "zfuse"

# libfuse 3's default number of worker threads (its max_threads option).
_MAX_THREADS = 10


def fuse_options(
    *,
    read_only: bool = False,
    attr_timeout: float = 1.0,
    allow_other: bool = False,
    fsname: str = SUBTYPE,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The libfuse options of a zfuse mount, as ``mfusepy.FUSE`` keyword arguments.

    ``extra`` (``-o`` options: ``{"name": value}``, ``True`` for a flag) is
    applied last and may override any of them.

    Examples
    --------
    >>> fuse_options(read_only=True)["ro"], fuse_options()["hard_remove"]
    (True, True)
    """
    mfusepy = require_mfusepy()
    from .view import BLOCK_SIZE

    if attr_timeout < 0:
        raise ValueError(f"attr_timeout must be >= 0 seconds, not {attr_timeout}")
    options: dict[str, Any] = {
        "fsname": fsname,
        "subtype": SUBTYPE,
        # stat() shows our inode numbers (stable per key, new for new values).
        "use_ino": True,
        # unlink really unlinks: no .fuse_hidden* keys for files still open.
        "hard_remove": True,
        # the kernel checks the modes it shows; it then needs no access() calls.
        "default_permissions": True,
        "attr_timeout": attr_timeout,
        "entry_timeout": attr_timeout,
        "negative_timeout": attr_timeout,
    }
    if mfusepy.fuse_version_major == 2:
        # O_TRUNC reaches open() instead of a separate truncate that would
        # empty the stored value before the new one is written.
        options.update(atomic_o_trunc=True, big_writes=True, max_write=BLOCK_SIZE,
                       max_read=BLOCK_SIZE)
    else:
        # libfuse 3 has atomic O_TRUNC and big writes by default; closing a
        # file opened read-only then sends no FLUSH (nothing to write back).
        options["no_rofd_flush"] = True
        # libfuse 3.12 to 3.14 start with max_idle_threads = -1 ("never end
        # idle threads"), then reject that very value with "Ignoring invalid
        # max threads value 4294967295 > max (100000)." on every mount.  Idle
        # threads up to max_threads (libfuse's default 10) is the same thing:
        # worker threads never end, so the thread state each keeps is never lost.
        options["max_idle_threads"] = (extra or {}).get("max_threads", _MAX_THREADS)
    if read_only:
        options["ro"] = True
    if allow_other:
        options["allow_other"] = True
    options.update(extra or {})
    return options


def parse_fuse_options(texts: list[str]) -> dict[str, Any]:
    """``["a=1,b", "c"]`` (``-o`` arguments) as ``{"a": "1", "b": True, "c": True}``.

    Examples
    --------
    >>> parse_fuse_options(["a=1,b", "c"])
    {'a': '1', 'b': True, 'c': True}
    """
    options: dict[str, Any] = {}
    for text in texts:
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            options[name] = value if sep else True
    return options


