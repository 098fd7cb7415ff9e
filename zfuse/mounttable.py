"""The kernel's mount table: what is mounted where, and which mounts are zfuse's.

One place reads ``/proc/self/mounts`` and ``/proc/self/mountinfo`` for the
rest of zfuse: ``mount_entry`` (is anything mounted at a path, of which
type), ``zfuse_mount_table`` (every zfuse mount, for ``zfuse list``).
Only the standard library is used: listing and unmounting work without
mfusepy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

__all__ = ["FSTYPE", "is_mounted", "mount_entry", "unescape", "zfuse_mount_table"]

#: The filesystem type of every zfuse mount in the mount table.
FSTYPE = "fuse.zfuse"

_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    r"""A mount table field as the path it names (the kernel writes ``\040`` for a space).

    Examples
    --------
    >>> unescape("/mnt/my\\040data")
    '/mnt/my data'
    """
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_entry(path: str) -> tuple[str, str] | None:
    """(source, type) of the mount at ``path`` per /proc/self/mounts, or None.

    Examples
    --------
    >>> mount_entry("/proc")[1]
    'proc'
    """
    wanted = {os.path.abspath(path), os.path.realpath(path)}
    entry = None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as table:
            for line in table:
                fields = line.split(" ")
                if len(fields) >= 3 and unescape(fields[1]) in wanted:
                    entry = (unescape(fields[0]), fields[2])  # the last mount on top wins
    except FileNotFoundError:
        return None
    return entry


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """True if something is mounted at ``path`` (also a mount whose daemon died).

    Examples
    --------
    >>> is_mounted("/proc"), is_mounted("/proc/self")
    (True, False)
    """
    return mount_entry(os.fspath(path)) is not None


def zfuse_mount_table() -> Iterator[tuple[str, str]]:
    """``(mountpoint, source)`` of every zfuse mount in this mount namespace, in mount order."""
    try:
        table = open(  # noqa: SIM115 - closed by the with below; a missing table lists nothing
            "/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return
    with table:
        for line in table:
            # mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
            head, sep, tail = line.rstrip("\n").partition(" - ")
            fields, after = head.split(" "), tail.split(" ")
            if sep and len(fields) >= 5 and len(after) >= 2 and after[0] == FSTYPE:
                yield unescape(fields[4]), unescape(after[1])
