"""Zarr v2 hierarchy helpers that work on any store or plain mapping.

``init_array`` and ``init_group`` write ``.zarray`` / ``.zgroup`` documents
that are byte-for-byte what zarr-python 2.18 writes for the same call, so a
hierarchy created here opens unchanged in zarr-python 2 (and in any reader of
the Zarr storage specification v2).  ``listdir``, ``rmdir``, ``getsize`` and
``rename`` use the store's own method when it has one (every
``zstores.Store`` does) and fall back to scanning the keys of a plain
``dict`` or other mapping.

The documents themselves (dtype, fill value, chunk and codec rules) are
``zstores.metadata.v2``'s; ``migrate_1to2`` (spec v1 -> v2) is
``zstores.migrate_v1``'s, importable from here too.  This module never
imports zarr.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from .errors import InvalidKeyError, ZStoresError
from .keys import child_name, normalize_key, normalize_storage_path, prefix_of
from .metadata import v2
from .metadata.documents import ARRAY_V2, ATTRS_V2, GROUP_V2, MetadataError
from .metadata.v2 import BadCompressorError
from .metadata.v2 import parse_dtype as _decode_dtype  # noqa: F401 - the former private name
from .migrate_v1 import migrate_1to2

__all__ = [
    "ARRAY_META_KEY",
    "ATTRS_KEY",
    "GROUP_META_KEY",
    "BadCompressorError",
    "ContainsArrayError",
    "ContainsGroupError",
    "MetadataError",
    "contains_array",
    "contains_group",
    "getsize",
    "init_array",
    "init_group",
    "listdir",
    "migrate_1to2",
    "normalize_storage_path",
    "rename",
    "rmdir",
]

#: Key of an array's metadata document, relative to the array's path.
ARRAY_META_KEY = ARRAY_V2
#: Key of a group's metadata document, relative to the group's path.
GROUP_META_KEY = GROUP_V2
#: Key of the user attributes of an array or group.
ATTRS_KEY = ATTRS_V2

StoreLike = MutableMapping[str, Any]


# ----------------------------------------------------------------- errors
class ContainsArrayError(ZStoresError, ValueError):
    """An array already exists at the path (pass ``overwrite=True`` to replace it)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path!r} contains an array")
        self.path = path


class ContainsGroupError(ZStoresError, ValueError):
    """A group already exists at the path (pass ``overwrite=True`` to replace it)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path!r} contains a group")
        self.path = path


# ------------------------------------------------------------- inspection
def contains_array(store: Mapping[str, Any], path: str | bytes | None = None) -> bool:
    """Return True if an array (a ``.zarray`` key) exists at ``path``.

    Parameters
    ----------
    store : Mapping
        A ``zstores.Store`` or any mapping of keys to bytes.
    path : str, optional
        Logical path; the root by default.

    Examples
    --------
    >>> store = {}
    >>> init_array(store, shape=4, path="a")
    >>> contains_array(store, "a"), contains_array(store)
    (True, False)
    """
    return prefix_of(normalize_storage_path(path)) + ARRAY_META_KEY in store


def contains_group(store: Mapping[str, Any], path: str | bytes | None = None) -> bool:
    """Return True if a group (a ``.zgroup`` key) exists at ``path``.

    Parameters
    ----------
    store : Mapping
        A ``zstores.Store`` or any mapping of keys to bytes.
    path : str, optional
        Logical path; the root by default.

    Examples
    --------
    >>> store = {}
    >>> init_group(store, path="g")
    >>> contains_group(store), contains_group(store, "g")
    (True, True)
    """
    return prefix_of(normalize_storage_path(path)) + GROUP_META_KEY in store


# ------------------------------------------------- listdir/rmdir/getsize/rename
def _store_method(store: Any, name: str) -> Any:
    method = getattr(store, name, None)
    return method if callable(method) else None


def _keys_under(store: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """String keys starting with ``prefix`` (all of them for the root, ``""``)."""
    return (k for k in list(store) if isinstance(k, str) and k.startswith(prefix))


def listdir(store: Mapping[str, Any], path: str | bytes | None = None) -> list[str]:
    """Names of the keys and sub-prefixes directly under ``path``.

    Parameters
    ----------
    store : Mapping
        A store with a ``listdir`` method (every ``zstores.Store``), or a plain
        mapping, whose keys are scanned.
    path : str, optional
        Logical path; the root by default.

    Returns
    -------
    list of str
        Sorted child names (the store's own order if it has ``listdir``).

    Examples
    --------
    >>> listdir({"c/0": b"", "cc/0": b"", "c/d/1": b""}, "c")
    ['0', 'd']
    """
    path = normalize_storage_path(path)
    method = _store_method(store, "listdir")
    if method is not None:
        return method(path)
    prefix = prefix_of(path)
    return sorted({child_name(k, prefix) for k in _keys_under(store, prefix) if k != prefix})


def rmdir(store: MutableMapping[str, Any], path: str | bytes | None = None) -> None:
    """Delete every key under ``path`` (every key of the store for the root).

    A key named exactly ``path`` is not under it and stays, as with
    ``Store.rmdir``.

    Parameters
    ----------
    store : MutableMapping
        A store with a ``rmdir`` method, or a plain mutable mapping.
    path : str, optional
        Logical path; the root by default.

    Examples
    --------
    >>> store = {"c/0": b"x", "cc/0": b"y"}
    >>> rmdir(store, "c")
    >>> store
    {'cc/0': b'y'}
    """
    path = normalize_storage_path(path)
    method = _store_method(store, "rmdir")
    if method is not None:
        method(path)
        return
    for key in list(_keys_under(store, prefix_of(path))):
        del store[key]


def _value_size(value: Any) -> int:
    try:
        return memoryview(value).nbytes
    except TypeError:
        raise TypeError(
            f"cannot size a {type(value).__name__} value; store values must be bytes-like"
        ) from None


def getsize(store: Mapping[str, Any], path: str | bytes | None = None) -> int:
    """Size in bytes of the value at ``path``, or the total of every value under it.

    Parameters
    ----------
    store : Mapping
        A store with a ``getsize`` method, or a plain mapping.
    path : str, optional
        Logical path; the root (the whole store) by default.

    Returns
    -------
    int
        The size of the key ``path`` if it exists, else the recursive total
        under the prefix ``path/``; 0 when nothing is there.

    Examples
    --------
    >>> getsize({"c/0": b"ab", "c/d/1": b"cde", "cc/0": b"zzzz"}, "c")
    5
    """
    path = normalize_storage_path(path)
    method = _store_method(store, "getsize")
    if method is not None:
        return method(path)
    if path and path in store:
        return _value_size(store[path])
    return sum(_value_size(store[k]) for k in _keys_under(store, prefix_of(path)))


def _rename_in_mapping(store: MutableMapping[str, Any], src: str, dst: str) -> None:
    """Move ``src`` and everything under ``src/``; copy all before deleting any."""
    src_prefix, dst_prefix = prefix_of(src), prefix_of(dst)
    moves = [(k, dst_prefix + k[len(src_prefix):]) for k in _keys_under(store, src_prefix)]
    if src in store:
        moves.insert(0, (src, dst))
    if not moves:
        raise KeyError(src)
    if src == dst:
        return
    for old, new in moves:
        store[new] = store[old]
    for old, _ in moves:
        del store[old]


def rename(store: MutableMapping[str, Any], src_path: str, dst_path: str) -> None:
    """Move the key ``src_path`` and every key under it to ``dst_path``.

    Existing keys at the destination are overwritten.

    Parameters
    ----------
    store : MutableMapping
        A store with a ``rename`` method, or a plain mutable mapping.
    src_path, dst_path : str
        Logical paths; neither may be the root.

    Raises
    ------
    KeyError
        If nothing exists at ``src_path``.
    InvalidKeyError
        If a path is the root or ``dst_path`` lies inside ``src_path``.

    Examples
    --------
    >>> store = {"c/0": b"x", "cc/0": b"y"}
    >>> rename(store, "c", "d")
    >>> sorted(store)
    ['cc/0', 'd/0']
    """
    src, dst = normalize_storage_path(src_path), normalize_storage_path(dst_path)
    method = _store_method(store, "rename")
    if method is not None:
        method(src, dst)
        return
    src, dst = normalize_key(src_path), normalize_key(dst_path)
    if dst.startswith(src + "/"):
        raise InvalidKeyError(
            f"cannot rename {src!r} to {dst!r}: the destination lies inside the source"
        )
    _rename_in_mapping(store, src, dst)


# ---------------------------------------------------------- initialisation
def _ancestors(path: str) -> list[str]:
    """The root and every proper ancestor of a normalized path (none for the root)."""
    if not path:
        return []
    segments = path.split("/")
    return ["/".join(segments[:i]) for i in range(len(segments))]


def _clear_path(store: StoreLike, path: str, chunk_store: StoreLike | None) -> None:
    rmdir(store, path)
    if chunk_store is not None:
        rmdir(chunk_store, path)


def _check_vacant(store: Mapping[str, Any], path: str) -> None:
    if contains_array(store, path):
        raise ContainsArrayError(path)
    if contains_group(store, path):
        raise ContainsGroupError(path)


def _check_no_array_above(store: Mapping[str, Any], path: str) -> None:
    for parent in _ancestors(path):
        if contains_array(store, parent):
            raise ContainsArrayError(parent)


def _write_group(
    store: StoreLike, path: str, chunk_store: StoreLike | None, overwrite: bool
) -> None:
    if overwrite:
        _clear_path(store, path, chunk_store)
    else:
        _check_vacant(store, path)
    store[prefix_of(path) + GROUP_META_KEY] = v2.GROUP_METADATA


def _require_parent_groups(
    store: StoreLike, path: str, chunk_store: StoreLike | None, overwrite: bool
) -> None:
    """Make every ancestor a group; an ancestor array is replaced (only with overwrite)."""
    for parent in _ancestors(path):
        if contains_array(store, parent):
            _write_group(store, parent, chunk_store, overwrite)
        elif not contains_group(store, parent):
            _write_group(store, parent, chunk_store, False)


def _prepare(
    store: StoreLike, path: str, chunk_store: StoreLike | None, overwrite: bool
) -> None:
    """Check (without overwrite) or clear (with it) the path, then create parent groups.

    Checks come before any write, so a refused call leaves the store unchanged.
    """
    if not overwrite:
        _check_no_array_above(store, path)
        _check_vacant(store, path)
    _require_parent_groups(store, path, chunk_store, overwrite)
    if overwrite:
        _clear_path(store, path, chunk_store)


def init_array(
    store: StoreLike,
    shape: int | Sequence[int],
    chunks: bool | int | Sequence[int | None] | None = True,
    dtype: Any = None,
    compressor: Any = "default",
    fill_value: Any = None,
    order: str = "C",
    overwrite: bool = False,
    path: str | bytes | None = None,
    chunk_store: StoreLike | None = None,
    filters: Sequence[Any] | None = None,
    object_codec: Any = None,
    dimension_separator: str | None = None,
) -> None:
    """Write the ``.zarray`` metadata of a new array, as zarr-python 2.18 does.

    Parent groups are created as needed.  The document is byte-for-byte what
    ``zarr.storage.init_array`` of zarr-python 2.18 writes for the same call.

    Parameters
    ----------
    store : MutableMapping
        A ``zstores.Store`` or any mapping of str keys to bytes.
    shape : int or tuple of int
        Array shape.  A subarray dtype such as ``"(2,)f4"`` appends its shape.
    chunks : bool, int or tuple, optional
        ``True`` or ``None`` guesses a chunk shape from shape and itemsize,
        ``False`` makes one chunk; an int applies to every dimension; ``-1``
        or ``None`` in a tuple means the whole dimension, and a short tuple
        is completed with the remaining dimensions.
    dtype : str, numpy.dtype or type, optional
        Any numpy dtype (float64 by default), including structured dtypes,
        units-qualified ``M8``/``m8``, ``S``/``U`` strings.  ``object`` needs
        ``object_codec``; ``str``, ``bytes`` and ``"array:<dtype>"`` are
        shorthands for object arrays with a variable-length codec.
    compressor : numcodecs.abc.Codec, "default", "none" or None, optional
        ``"default"`` is Blosc (lz4, clevel 5, byte shuffle, blocksize 0).  A
        0-dimensional array is never compressed.
    fill_value : object, optional
        Value of uninitialised elements; ``None`` for none.
    order : {"C", "F"}, optional
        Memory layout within each chunk.
    overwrite : bool, optional
        Delete everything under ``path`` (also in ``chunk_store``) first.
        Without it an existing array or group at ``path`` is an error.
    path : str, optional
        Path of the array in the hierarchy; the root by default.
    chunk_store : MutableMapping, optional
        Separate store for chunks, cleared under ``path`` on overwrite.
    filters : sequence of numcodecs.abc.Codec, optional
        Codecs applied before the compressor.
    object_codec : numcodecs.abc.Codec, optional
        Codec encoding the objects of an object array; stored as the first filter.
    dimension_separator : {None, ".", "/"}, optional
        Separator in chunk keys; by default the store's ``_dimension_separator``
        if it has one, else left out of the metadata (meaning ``"."``).

    Raises
    ------
    ContainsArrayError, ContainsGroupError
        If an array or group exists at ``path`` (or an array above it) and
        ``overwrite`` is false.
    BadCompressorError
        If ``compressor`` is not a codec.
    ValueError
        For an invalid dtype, fill value, order, chunks or separator.

    Examples
    --------
    >>> store = {}
    >>> init_array(store, shape=(100, 100), chunks=(10, -1), dtype="i2", path="foo")
    >>> sorted(store)
    ['.zgroup', 'foo/.zarray']
    >>> import json
    >>> meta = json.loads(store["foo/.zarray"])
    >>> meta["chunks"], meta["dtype"], meta["compressor"]["cname"], meta["fill_value"]
    ([10, 100], '<i2', 'lz4', None)
    """
    path = normalize_storage_path(path)
    if dimension_separator is None:
        dimension_separator = getattr(store, "_dimension_separator", None)
    metadata = v2.array_metadata(
        shape, chunks, dtype, compressor, fill_value, order, filters, object_codec,
        dimension_separator,
    )
    _prepare(store, path, chunk_store, overwrite)
    store[prefix_of(path) + ARRAY_META_KEY] = metadata


def init_group(
    store: StoreLike,
    overwrite: bool = False,
    path: str | bytes | None = None,
    chunk_store: StoreLike | None = None,
) -> None:
    """Write the ``.zgroup`` metadata of a new group, as zarr-python 2.18 does.

    Parameters
    ----------
    store : MutableMapping
        A ``zstores.Store`` or any mapping of str keys to bytes.
    overwrite : bool, optional
        Delete everything under ``path`` (also in ``chunk_store``) first.
        Without it an existing array or group at ``path`` is an error.
    path : str, optional
        Path of the group; the root by default.  Missing parents become groups.
    chunk_store : MutableMapping, optional
        Separate chunk store, cleared under ``path`` on overwrite.

    Raises
    ------
    ContainsArrayError, ContainsGroupError
        If an array or group exists at ``path`` (or an array above it) and
        ``overwrite`` is false.

    Examples
    --------
    >>> store = {}
    >>> init_group(store, path="a/b")
    >>> sorted(store)
    ['.zgroup', 'a/.zgroup', 'a/b/.zgroup']
    >>> store[".zgroup"]
    b'{\\n    "zarr_format": 2\\n}'
    """
    path = normalize_storage_path(path)
    _prepare(store, path, chunk_store, overwrite)
    store[prefix_of(path) + GROUP_META_KEY] = v2.GROUP_METADATA
