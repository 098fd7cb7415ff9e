"""Zarr v2 hierarchy helpers that work on any store or plain mapping.

``init_array`` and ``init_group`` write ``.zarray`` / ``.zgroup`` documents
that are byte-for-byte what zarr-python 2.18 writes for the same call, so a
hierarchy created here opens unchanged in zarr-python 2 (and in any reader of
the Zarr storage specification v2).  ``listdir``, ``rmdir``, ``getsize`` and
``rename`` use the store's own method when it has one (every
``zstores.Store`` does) and fall back to scanning the keys of a plain
``dict`` or other mapping.  ``migrate_1to2`` upgrades a spec v1 array.

This module never imports zarr; it needs only numpy and numcodecs.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import numbers
import warnings
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from .errors import InvalidKeyError, ZStoresError
from .keys import child_name, normalize_key, normalize_storage_path, prefix_of

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
ARRAY_META_KEY = ".zarray"
#: Key of a group's metadata document, relative to the group's path.
GROUP_META_KEY = ".zgroup"
#: Key of the user attributes of an array or group.
ATTRS_KEY = ".zattrs"

ZARR_FORMAT = 2

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


class BadCompressorError(ZStoresError, ValueError):
    """The compressor is neither a numcodecs codec, ``None``, ``"default"`` nor ``"none"``."""

    def __init__(self, compressor: object) -> None:
        super().__init__(
            f"bad compressor; expected a numcodecs Codec (e.g. numcodecs.Zlib(level=1)), "
            f"None, 'default' or 'none', found {compressor!r}"
        )


class MetadataError(ZStoresError, ValueError):
    """A metadata document cannot be decoded (wrong format version, missing field ...)."""


# ------------------------------------------------------------ JSON output
class _MetadataEncoder(json.JSONEncoder):
    """Encode numpy numbers as JSON numbers, as zarr-python 2 does."""

    def default(self, o: Any) -> Any:
        if isinstance(o, numbers.Integral):
            return int(o)
        if isinstance(o, numbers.Real):
            return float(o)
        return super().default(o)


def _json_bytes(document: Mapping[str, Any]) -> bytes:
    """The layout zarr-python 2 writes: sorted keys, 4-space indent, ASCII only."""
    text = json.dumps(
        document,
        indent=4,
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ": "),
        cls=_MetadataEncoder,
    )
    return text.encode("ascii")


_GROUP_METADATA = _json_bytes({"zarr_format": ZARR_FORMAT})


# ------------------------------------------------------- shape and chunks
def _normalize_shape(shape: int | Sequence[int] | None) -> tuple[int, ...]:
    if shape is None:
        raise TypeError("shape is None; give an int or a tuple of ints")
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    shape = tuple(shape)
    if not all(isinstance(s, numbers.Integral) for s in shape):
        warnings.warn("shape contains non-integer value(s)", UserWarning, stacklevel=4)
    return tuple(int(s) for s in shape)


_CHUNK_BASE = 256 * 1024  # bytes; the target grows from here with the array size
_CHUNK_MIN = 128 * 1024  # soft lower limit of the target
_CHUNK_MAX = 64 * 1024 * 1024  # hard upper limit of a chunk


def _target_chunk_bytes(array_bytes: np.float64) -> np.float64:
    """PyTables' rule: the target doubles for every tenfold growth past 1 MiB."""
    with np.errstate(divide="ignore"):
        target = _CHUNK_BASE * (2 ** np.log10(array_bytes / (1024.0 * 1024)))
    return min(max(target, _CHUNK_MIN), _CHUNK_MAX)


def _guess_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Halve the axes in turn until a chunk is near the target size (h5py's heuristic)."""
    chunks = np.maximum(np.array(shape, dtype="=f8"), 1)
    target = _target_chunk_bytes(np.prod(chunks) * itemsize)
    axis = 0
    while True:
        nbytes = np.prod(chunks) * itemsize
        near_target = nbytes < target or abs(nbytes - target) / target < 0.5
        if (near_target and nbytes < _CHUNK_MAX) or np.prod(chunks) == 1:
            break
        index = axis % len(shape)
        chunks[index] = math.ceil(chunks[index] / 2.0)
        axis += 1
    return tuple(int(c) for c in chunks)


def _normalize_chunks(chunks: Any, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    if chunks is None or chunks is True:
        return _guess_chunks(shape, itemsize)
    if chunks is False:
        return shape
    if isinstance(chunks, numbers.Integral):
        chunks = (int(chunks),) * len(shape)
    chunks = tuple(chunks)
    if len(chunks) > len(shape):
        raise ValueError(f"too many dimensions in chunks {chunks} for shape {shape}")
    chunks += shape[len(chunks):]
    chunks = tuple(s if c is None or c == -1 else c for s, c in zip(shape, chunks))
    if not all(isinstance(c, numbers.Integral) for c in chunks):
        warnings.warn("chunks contains non-integer value(s)", UserWarning, stacklevel=4)
    return tuple(int(c) for c in chunks)


# ------------------------------------------------------------------ dtype
# ``dtype="str"`` (or ``str``) is shorthand for an object array with this codec.
_OBJECT_CODEC_IDS = {"str": "vlen-utf8", "bytes": "vlen-bytes", "array": "vlen-array"}


def _shorthand_object_codec(name: str, args: str) -> Any:
    config: dict[str, Any] = {"id": _OBJECT_CODEC_IDS[name]}
    if args:
        if name != "array":
            raise ValueError(f"dtype {name!r} takes no codec arguments, got {args!r}")
        config["dtype"] = args
    return numcodecs.get_codec(config)


def _normalize_dtype(dtype: Any, object_codec: Any) -> tuple[np.dtype, Any]:
    if inspect.isclass(dtype):
        dtype = dtype.__name__
    if isinstance(dtype, str):
        name, _, args = dtype.partition(":")
        if name in _OBJECT_CODEC_IDS:
            if object_codec is None:
                object_codec = _shorthand_object_codec(name, args)
            return np.dtype(object), object_codec
    dtype = np.dtype(dtype)
    if dtype == np.dtype("M8") or dtype == np.dtype("m8"):
        raise ValueError(
            "datetime64 and timedelta64 dtypes need a unit (e.g. 'M8[ns]'); "
            f"the generic {dtype.str!r} is not supported"
        )
    return dtype, object_codec


def _encode_dtype(dtype: np.dtype) -> str | list[Any]:
    """A typestr (``'<f8'``), or the field list of a structured dtype."""
    return dtype.str if dtype.fields is None else dtype.descr


def _decode_dtype(encoded: Any) -> np.dtype:
    """Inverse of ``_encode_dtype`` for JSON input (lists become tuples)."""
    return np.dtype(_descr_from_json(encoded))


def _descr_from_json(encoded: Any) -> Any:
    if not isinstance(encoded, list):
        return encoded
    fields = []
    for name, field_type, *shape in encoded:
        fields.append((name, _descr_from_json(field_type), *(tuple(s) for s in shape)))
    return fields


# ------------------------------------------------------------- fill value
def _equals_zero(value: Any) -> bool:
    try:
        return bool(value == 0)
    except (TypeError, ValueError):
        return False


def _normalize_fill_value(fill_value: Any, dtype: np.dtype) -> Any:
    """The fill value as a numpy scalar of ``dtype`` (``str`` for unicode, as given for object)."""
    if fill_value is None or dtype.hasobject:
        return fill_value
    if not isinstance(fill_value, np.void) and _equals_zero(fill_value):
        return np.zeros((), dtype=dtype)[()]
    if dtype.kind == "U":
        if not isinstance(fill_value, str):
            raise ValueError(
                f"fill_value {fill_value!r} is not valid for dtype {dtype}; must be a str"
            )
        return fill_value
    try:
        if isinstance(fill_value, bytes) and dtype.kind == "V":
            return np.array(fill_value, dtype=dtype.str).view(dtype)[()]
        return np.array(fill_value, dtype=dtype)[()]
    except Exception as error:
        raise ValueError(
            f"fill_value {fill_value!r} is not valid for dtype {dtype}: {error}"
        ) from error


def _encode_float(value: Any) -> float | str:
    if np.isnan(value):
        return "NaN"
    if np.isposinf(value):
        return "Infinity"
    if np.isneginf(value):
        return "-Infinity"
    return float(value)


def _encode_fill_value(value: Any, dtype: np.dtype, object_codec: Any = None) -> Any:
    """The JSON form of a normalized fill value (Zarr v2 spec, "fill_value")."""
    if value is None:
        return None
    kind = dtype.kind
    if kind == "V" and dtype.hasobject:
        if object_codec is None:
            raise ValueError("missing object_codec for object array")
        return base64.standard_b64encode(object_codec.encode(value)).decode("ascii")
    if kind == "f":
        return _encode_float(value)
    if kind in "ui":
        return int(value)
    if kind == "b":
        return bool(value)
    if kind == "c":
        return [_encode_float(value.real), _encode_float(value.imag)]
    if kind in "SV":
        return base64.standard_b64encode(value).decode("ascii")
    if kind in "mM":
        return int(value.view("i8"))
    return value  # "U" and object arrays: as given


# ----------------------------------------------------------------- codecs
def _default_compressor() -> Any:
    """zarr-python 2's default: Blosc/LZ4 level 5 with byte shuffle (Zlib without Blosc)."""
    try:
        return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=0)
    except AttributeError:  # pragma: no cover - numcodecs built without Blosc
        return numcodecs.Zlib(level=1)


def _compressor_config(compressor: Any, shape: tuple[int, ...]) -> dict[str, Any] | None:
    if not compressor or shape == ():  # a 0-d array holds one value: nothing to compress
        return None
    if isinstance(compressor, str):
        if compressor == "none":
            return None
        if compressor != "default":
            raise BadCompressorError(compressor)
        compressor = _default_compressor()
    try:
        return compressor.get_config()
    except AttributeError as error:
        raise BadCompressorError(compressor) from error


def _codec_config(codec: Any, role: str) -> dict[str, Any]:
    try:
        return codec.get_config()
    except AttributeError as error:
        raise TypeError(f"{role} must be a numcodecs Codec, not {codec!r}") from error


def _filters_config(
    filters: Sequence[Any] | None, dtype: np.dtype, object_codec: Any
) -> list[dict[str, Any]] | None:
    """Filter configs; an object array's codec goes first, as zarr-python 2 puts it."""
    configs = [_codec_config(f, "each filter") for f in filters] if filters else []
    if dtype.hasobject:
        if object_codec is not None:
            configs.insert(0, _codec_config(object_codec, "object_codec"))
        elif not filters:
            raise ValueError(
                "missing object_codec for object array; pass e.g. "
                "object_codec=numcodecs.VLenUTF8() or dtype=str"
            )
        else:
            warnings.warn(
                "missing object_codec for object array; this will raise a "
                "ValueError in version 3.0",
                FutureWarning,
                stacklevel=4,
            )
    elif object_codec is not None:
        warnings.warn("an object_codec is only needed for object arrays", stacklevel=4)
    return configs or None


# --------------------------------------------------------- array metadata
def _normalize_order(order: str) -> str:
    normalized = str(order).upper()
    if normalized not in ("C", "F"):
        raise ValueError(f"order must be either 'C' or 'F', found: {order!r}")
    return normalized


def _normalize_dimension_separator(separator: str | None, store: Any) -> str | None:
    if separator is None:
        separator = getattr(store, "_dimension_separator", None)
    if separator not in (".", "/", None):
        raise ValueError(f"dimension_separator must be either '.' or '/', found: {separator!r}")
    return separator


def _array_metadata(
    *,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: np.dtype,
    compressor: dict[str, Any] | None,
    fill_value: Any,
    order: str,
    filters: list[dict[str, Any]] | None,
    dimension_separator: str | None = None,
) -> bytes:
    """A ``.zarray`` document from normalized metadata and the JSON form of the fill value."""
    document = {
        "zarr_format": ZARR_FORMAT,
        "shape": shape,
        "chunks": chunks,
        "dtype": _encode_dtype(dtype),
        "compressor": compressor,
        "fill_value": fill_value,
        "order": order,
        "filters": filters,
    }
    if dimension_separator:
        document["dimension_separator"] = dimension_separator
    return _json_bytes(document)


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
    store[prefix_of(path) + GROUP_META_KEY] = _GROUP_METADATA


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
    metadata = _init_array_metadata(
        store, shape, chunks, dtype, compressor, fill_value, order, filters, object_codec,
        dimension_separator,
    )
    _prepare(store, path, chunk_store, overwrite)
    store[prefix_of(path) + ARRAY_META_KEY] = metadata


def _init_array_metadata(
    store: Any,
    shape: Any,
    chunks: Any,
    dtype: Any,
    compressor: Any,
    fill_value: Any,
    order: str,
    filters: Sequence[Any] | None,
    object_codec: Any,
    dimension_separator: str | None,
) -> bytes:
    """Normalize ``init_array``'s arguments and encode them (before any write)."""
    dtype, object_codec = _normalize_dtype(dtype, object_codec)
    shape = _normalize_shape(shape) + dtype.shape
    dtype = dtype.base
    chunks = _normalize_chunks(chunks, shape, dtype.itemsize)
    fill_value = _normalize_fill_value(fill_value, dtype)
    filters_config = _filters_config(filters, dtype, object_codec)
    if dtype.kind == "V" and dtype.hasobject and filters_config:
        object_codec = numcodecs.get_codec(filters_config[0])
    return _array_metadata(
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressor=_compressor_config(compressor, shape),
        fill_value=_encode_fill_value(fill_value, dtype, object_codec),
        order=_normalize_order(order),
        filters=filters_config,
        dimension_separator=_normalize_dimension_separator(dimension_separator, store),
    )


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
    store[prefix_of(path) + GROUP_META_KEY] = _GROUP_METADATA


# --------------------------------------------------------------- migration
_V1_FIELDS = ("shape", "chunks", "dtype", "compression", "compression_opts", "fill_value", "order")


def _decode_v1_metadata(value: Any) -> dict[str, Any]:
    try:
        meta = json.loads(bytes(value).decode("utf-8"))
    except (TypeError, ValueError) as error:
        raise MetadataError(f"the 'meta' key is not a JSON document: {error}") from error
    if not isinstance(meta, dict) or meta.get("zarr_format") != 1:
        found = meta.get("zarr_format") if isinstance(meta, dict) else meta
        raise MetadataError(f"unsupported zarr format: {found!r} (expected 1)")
    missing = [field for field in _V1_FIELDS if field not in meta]
    if missing:
        raise MetadataError(f"zarr v1 metadata lacks the field(s) {', '.join(missing)}")
    return meta


def _v1_fill_value(value: Any, dtype: np.dtype) -> Any:
    """JSON form of a v1 fill value: encoded as stored (as zarr-python 2 does) if it can be."""
    try:
        return _encode_fill_value(value, dtype)
    except (TypeError, ValueError, AttributeError):
        return _encode_fill_value(_normalize_fill_value(value, dtype), dtype)


def _v1_compressor_config(compression: str | None, options: Any) -> dict[str, Any] | None:
    """numcodecs config of v1 ``compression`` + ``compression_opts``."""
    if compression is None or compression == "none":
        return None
    if isinstance(options, dict):
        return numcodecs.get_codec({**options, "id": compression}).get_config()
    codec_class = numcodecs.registry.codec_registry.get(compression)
    if codec_class is None:
        raise MetadataError(f"unknown zarr v1 compression {compression!r}")
    codec = codec_class() if options is None else codec_class(options)
    return codec.get_config()


def migrate_1to2(store: StoreLike) -> None:
    """Convert a Zarr spec v1 array at the root of ``store`` to spec v2.

    ``meta`` becomes ``.zarray`` (``compression`` and ``compression_opts``
    become a numcodecs ``compressor`` config; ``filters`` is null) and
    ``attrs`` becomes ``.zattrs``; chunk keys are the same in both versions.
    The new keys are written before the old ones are deleted.

    Parameters
    ----------
    store : MutableMapping
        The store holding the v1 array.

    Raises
    ------
    KeyError
        If there is no ``meta`` key.
    MetadataError
        If ``meta`` is not valid v1 metadata.

    Examples
    --------
    >>> store = {"meta": b'{"zarr_format": 1, "shape": [4], "chunks": [2], '
    ...          b'"dtype": "<i4", "compression": "zlib", "compression_opts": 1, '
    ...          b'"fill_value": 0, "order": "C"}', "attrs": b"{}"}
    >>> migrate_1to2(store)
    >>> sorted(store)
    ['.zarray', '.zattrs']
    """
    meta = _decode_v1_metadata(store["meta"])
    dtype = _decode_dtype(meta["dtype"])
    store[ARRAY_META_KEY] = _array_metadata(
        shape=tuple(meta["shape"]),
        chunks=tuple(meta["chunks"]),
        dtype=dtype,
        compressor=_v1_compressor_config(meta["compression"], meta["compression_opts"]),
        fill_value=_v1_fill_value(meta["fill_value"], dtype),
        order=meta["order"],
        filters=None,
    )
    if "attrs" in store:
        store[ATTRS_KEY] = store["attrs"]
        del store["attrs"]
    del store["meta"]
