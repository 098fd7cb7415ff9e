"""Every key rule in one place.

Keys follow the logical-path rules of the Zarr storage specification v2:
backslashes become ``/``; leading, trailing and repeated ``/`` are removed;
a ``.`` or ``..`` segment is an error.  On top of the specification zstores
refuses the empty key and NUL characters, which no backend can store
faithfully.
"""

from __future__ import annotations

from .errors import InvalidKeyError

#: Keys under this prefix belong to zstores itself (the fence records of
#: ``synchronized(..., fenced=True)``): no Zarr node is named ``.zstores``,
#: zarr-python skips the folder, and ``zstores verify`` ignores it.
RESERVED_PREFIX = ".zstores/"

__all__ = [
    "RESERVED_PREFIX",
    "check_utf8_key",
    "child_name",
    "is_chunk_key_segment",
    "normalize_key",
    "normalize_storage_path",
    "prefix_of",
    "prefix_upper_bound",
]


def normalize_storage_path(path: str | bytes | None) -> str:
    """Normalize a logical path per the Zarr v2 specification.

    Parameters
    ----------
    path : str, bytes or None
        The path; ``None`` and ``""`` both mean the root.

    Returns
    -------
    str
        The normalized path, ``""`` for the root.

    Raises
    ------
    InvalidKeyError
        If the path has a ``.`` or ``..`` segment, a NUL character or a lone
        surrogate (a key must be valid Unicode, so that every backend can
        store it as UTF-8).
    TypeError
        If the path is not a string.

    Examples
    --------
    >>> normalize_storage_path("\\\\foo//bar/")
    'foo/bar'
    """
    if path is None:
        return ""
    if isinstance(path, bytes):
        path = path.decode("utf-8")
    if not isinstance(path, str):
        raise TypeError(f"a key or path must be a str, not {type(path).__name__}")
    if "\\" in path:
        path = path.replace("\\", "/")
    if "\x00" in path:
        raise InvalidKeyError(f"invalid key {path!r}: keys may not contain NUL characters")
    if not path.isascii():
        check_utf8_key(path)
    if path.startswith("/") or path.endswith("/") or "//" in path:
        path = "/".join(segment for segment in path.split("/") if segment)
    if "." in path:
        for segment in path.split("/"):
            if segment in (".", ".."):
                raise InvalidKeyError(
                    f"invalid key {path!r}: a path segment may not be '.' or '..'"
                )
    return path


def normalize_key(key: str) -> str:
    """Normalize a key; unlike a path, a key may not be empty.

    Examples
    --------
    >>> normalize_key("/foo/bar/.zarray")
    'foo/bar/.zarray'
    """
    if (
        key.__class__ is str
        and key
        and key[0] not in "/."
        and key[-1] != "/"
        and "/." not in key
        and "//" not in key
        and "\\" not in key
        and "\x00" not in key
        and key.isascii()
    ):
        # Already normal, and no segment can be '.' or '..': every store call
        # passes here, so the common case costs a few substring tests.  Keys
        # with non-ASCII characters take the slow path, which refuses lone
        # surrogates (keys must be valid Unicode on every backend).
        return key
    if not isinstance(key, str):
        raise TypeError(f"a key must be a str, not {type(key).__name__}")
    normalized = normalize_storage_path(key)
    if not normalized:
        raise InvalidKeyError(f"invalid key {key!r}: a key may not be empty or only '/'")
    return normalized


def prefix_of(path: str) -> str:
    """The key prefix of a normalized path: ``""`` for the root, else ``path + "/"``."""
    return path + "/" if path else ""


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with ``prefix``.

    Sorted backends use ``[prefix, bound)`` as a range query.  Python compares
    strings by code point, which orders them like their UTF-8 bytes, so the same
    bound works for SQLite's BINARY collation and LMDB's byte order.  ``None``
    means "no bound" (the root prefix).
    """
    if not prefix:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def child_name(key: str, prefix: str) -> str:
    """The first segment of ``key`` below ``prefix`` (which ``key`` starts with)."""
    rest = key[len(prefix):]
    slash = rest.find("/")
    return rest if slash < 0 else rest[:slash]


def is_chunk_key_segment(segment: str) -> bool:
    """True for a dotted chunk index such as ``0.1.2`` (two or more dimensions).

    A one-dimensional chunk key (``"3"``) has no dot and is the same under both
    dimension separators, so it does not count.
    """
    if "." not in segment:
        return False
    return all(part.isdigit() and part.isascii() for part in segment.split("."))


def check_utf8_key(key: str) -> str:
    """Refuse a key that has no UTF-8 form (a lone surrogate)."""
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidKeyError(
                f"invalid key {key!r}: a key must be encodable as UTF-8 (no lone surrogates)"
            ) from None
    return key
