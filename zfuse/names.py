"""Which names the mount makes, shows and looks up: a local disk's rules.

A name that is not UTF-8 is refused with EILSEQ, one with a segment longer
than ``NAME_MAX`` bytes with ENAMETOOLONG, wherever a name is made (create,
mknod, mkdir, link, the target of rename).  Keys that other writers stored
with such names stay reachable through the library only: a listing leaves
them out and a lookup does not find them, so ``ls`` never shows a name that
``open`` then refuses.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Iterator

__all__ = ["NAME_MAX", "ancestors", "all_listable", "listable", "name_error", "parent"]

#: The longest name (bytes of UTF-8) the mount creates, looks up or lists, as
#: on local file systems (statfs reports it as f_namemax).  The kernel itself
#: passes FUSE names up to 1024 bytes, but tools size their buffers by
#: NAME_MAX: a longer name is refused with ENAMETOOLONG when created and is
#: not shown, so what the mount lists is exactly what it can open.
NAME_MAX = 255


def name_error(key: str) -> int | None:
    """Why the mount refuses to create ``key``: EILSEQ, ENAMETOOLONG, or None if it may.

    The kernel hands names over as bytes, decoded with ``surrogateescape``:
    bytes that are not UTF-8 arrive as lone surrogates, which no store can
    keep as a key (EILSEQ, as file systems that require UTF-8 answer).  A
    segment longer than ``NAME_MAX`` bytes is ENAMETOOLONG, as on a local
    disk, instead of a file that would never be listed.

    Examples
    --------
    >>> name_error("a/b") is None
    True
    >>> name_error("a/" + "x" * 256) == errno.ENAMETOOLONG
    True
    >>> name_error(b"caf\\xe9".decode("utf-8", "surrogateescape")) == errno.EILSEQ
    True
    """
    if key.isascii():
        if len(key) <= NAME_MAX:
            return None
        return _too_long(key.split("/"))
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        return errno.EILSEQ
    if len(encoded) <= NAME_MAX:
        return None
    return _too_long(encoded.split(b"/"))


def _too_long(segments: list[str] | list[bytes]) -> int | None:
    return errno.ENAMETOOLONG if any(len(s) > NAME_MAX for s in segments) else None


def listable(name: str) -> bool:
    """Whether a listed name is one the mount can also look up (and the kernel accept).

    Keys that other writers stored with a longer segment, a backslash (the
    store reads it as ``/``) or bytes that are not UTF-8 (a folder store's
    stray file) stay reachable through the library, not through the mount.

    Examples
    --------
    >>> listable("0.0"), listable("a\\\\b"), listable("x" * 256)
    (True, False, False)
    """
    if name.isascii():
        return len(name) <= NAME_MAX and "\\" not in name
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return size <= NAME_MAX and "\\" not in name


def all_listable(names: Iterable[str]) -> bool:
    """Whether every name is ``listable``, tested in a few C-level string calls.

    True for the common folder (short ASCII names without a backslash);
    False tells the caller to check the names one by one.

    Examples
    --------
    >>> all_listable(["0.0", "0.1"]), all_listable(["0.0", "a\\\\b"]), all_listable([])
    (True, False, True)
    """
    names = list(names)
    if not names:
        return True
    joined = "/".join(names)  # no name holds "/": it only separates
    return (joined.isascii() and "\\" not in joined
            and len(max(names, key=len)) <= NAME_MAX)


def parent(key: str) -> str:
    """The folder holding ``key`` ("" for the root).

    Examples
    --------
    >>> parent("a/b/c"), parent("a")
    ('a/b', '')
    """
    return key.rpartition("/")[0]


def ancestors(key: str) -> Iterator[str]:
    """``a/b`` and ``a`` for the key ``a/b/c`` (never the root).

    Examples
    --------
    >>> list(ancestors("a/b/c"))
    ['a/b', 'a']
    """
    while "/" in key:
        key = key.rpartition("/")[0]
        yield key
