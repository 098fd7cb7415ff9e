"""Zarr format 2 metadata: the ``.zarray`` and ``.zgroup`` documents zarr-python 2.18 writes.

``array_metadata`` normalizes ``init_array``'s arguments (shape, chunk
guessing, dtype shorthands, fill value, codecs) and encodes them
byte-for-byte as zarr-python 2.18 does; ``encode_array`` encodes fields that
are already normal (the v1 migration's); ``parse_dtype`` reads a ``dtype``
field back.  Checking a document against the specification is
``zstores.metadata.checks``.

Examples
--------
>>> import json
>>> document = json.loads(array_metadata(shape=(4, 4), chunks=2, dtype="i2", compressor=None,
...     fill_value=0, order="C", filters=None, object_codec=None, dimension_separator=None))
>>> document["chunks"], document["dtype"], document["fill_value"]
([2, 2], '<i2', 0)
>>> GROUP_METADATA
b'{\\n    "zarr_format": 2\\n}'
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from ..errors import ZStoresError
from .documents import MetadataError

__all__ = [
    "GROUP_METADATA",
    "ZARR_FORMAT",
    "BadCompressorError",
    "array_metadata",
    "encode",
    "encode_array",
    "encode_fill_value",
    "normalize_fill_value",
    "parse_dtype",
]

ZARR_FORMAT = 2


class BadCompressorError(ZStoresError, ValueError):
    """The compressor is neither a numcodecs codec, ``None``, ``"default"`` nor ``"none"``."""

    def __init__(self, compressor: object) -> None:
        super().__init__(
            f"bad compressor; expected a numcodecs Codec (e.g. numcodecs.Zlib(level=1)), "
            f"None, 'default' or 'none', found {compressor!r}"
        )



# ------------------------------------------------------------ JSON output
class _MetadataEncoder(json.JSONEncoder):
    """Encode numpy numbers as JSON numbers, as zarr-python 2 does."""

    def default(self, o: Any) -> Any:
        if isinstance(o, numbers.Integral):
            return int(o)
        if isinstance(o, numbers.Real):
            return float(o)
        return super().default(o)


def encode(document: Mapping[str, Any]) -> bytes:
    """A v2 document in the layout zarr-python 2 writes: sorted keys, 4-space indent, ASCII.

    Examples
    --------
    >>> encode({"b": 1, "a": np.int64(2)})
    b'{\\n    "a": 2,\\n    "b": 1\\n}'
    """
    text = json.dumps(
        document,
        indent=4,
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ": "),
        cls=_MetadataEncoder,
    )
    return text.encode("ascii")


#: A group's ``.zgroup``, as zarr-python 2 writes it.
GROUP_METADATA = encode({"zarr_format": ZARR_FORMAT})


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
    chunks = tuple(s if c is None or c == -1 else c for s, c in zip(shape, chunks, strict=True))
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


def _descr_from_json(encoded: Any) -> Any:
    """JSON lists of fields (and of subarray shapes) as the tuples numpy wants."""
    if not isinstance(encoded, list):
        return encoded
    fields = []
    for name, field_type, *shape in encoded:
        fields.append((name, _descr_from_json(field_type), *(tuple(s) for s in shape)))
    return fields


def parse_dtype(encoded: Any) -> np.dtype:
    """The numpy dtype of a v2 ``dtype`` field (typestr or structured field list).

    Raises
    ------
    MetadataError
        If the field is neither, or numpy has no such dtype.

    Examples
    --------
    >>> parse_dtype("<f8"), parse_dtype([["a", "<i4"], ["b", "|u1", [2]]]).itemsize
    (dtype('float64'), 6)
    """
    if not isinstance(encoded, (str, list)):
        raise MetadataError(f"'dtype' must be a typestr or a list of fields, not {encoded!r}")
    try:
        return np.dtype(_descr_from_json(encoded))
    except (TypeError, ValueError) as error:
        raise MetadataError(f"'dtype' {encoded!r} is not a numpy dtype ({error})") from None


# ------------------------------------------------------------- fill value
def _equals_zero(value: Any) -> bool:
    try:
        return bool(value == 0)
    except (TypeError, ValueError):
        return False


def normalize_fill_value(fill_value: Any, dtype: np.dtype) -> Any:
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


def encode_fill_value(value: Any, dtype: np.dtype, object_codec: Any = None) -> Any:
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


def _normalize_dimension_separator(separator: str | None) -> str | None:
    if separator not in (".", "/", None):
        raise ValueError(f"dimension_separator must be either '.' or '/', found: {separator!r}")
    return separator


def encode_array(
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
    return encode(document)


def array_metadata(
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
    """The ``.zarray`` of ``init_array``'s arguments, normalized and encoded (no store touched).

    The arguments mean what they mean for ``zstores.hierarchy.init_array``
    (``dimension_separator`` already resolved against the store's default),
    and the errors are its own: ``BadCompressorError`` (a ``ValueError``)
    for a compressor that is no codec, ``ValueError`` for any other argument.

    Examples
    --------
    >>> document = json.loads(array_metadata(3, 3, "u1", None, None, "F", None, None, "/"))
    >>> document["order"], document["dimension_separator"], document["compressor"]
    ('F', '/', None)
    """
    dtype, object_codec = _normalize_dtype(dtype, object_codec)
    shape = _normalize_shape(shape) + dtype.shape
    dtype = dtype.base
    chunks = _normalize_chunks(chunks, shape, dtype.itemsize)
    fill_value = normalize_fill_value(fill_value, dtype)
    filters_config = _filters_config(filters, dtype, object_codec)
    if dtype.kind == "V" and dtype.hasobject and filters_config:
        object_codec = numcodecs.get_codec(filters_config[0])
    return encode_array(
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressor=_compressor_config(compressor, shape),
        fill_value=encode_fill_value(fill_value, dtype, object_codec),
        order=_normalize_order(order),
        filters=filters_config,
        dimension_separator=_normalize_dimension_separator(dimension_separator),
    )
