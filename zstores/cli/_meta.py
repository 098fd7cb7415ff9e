"""Zarr metadata as the command reads it: spec v2 checked field by field, v3 recognised.

``check_array_v2`` lists every way a ``.zarray`` document breaks the Zarr
storage specification v2; ``Array.from_v2`` / ``Array.from_v3`` turn a
document into what ``ls``, ``info`` and ``verify`` need, and ``Array.chunk_index``
maps a key below the array back to its place in the chunk grid.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ARRAY_V2",
    "ATTRS_V2",
    "CONSOLIDATED_V2",
    "GROUP_V2",
    "METADATA_NAMES",
    "NODE_V3",
    "Array",
    "BadMetadata",
    "check_array_v2",
    "check_consolidated",
    "check_group_v2",
    "load_json",
]

ARRAY_V2, GROUP_V2, ATTRS_V2, CONSOLIDATED_V2 = ".zarray", ".zgroup", ".zattrs", ".zmetadata"
NODE_V3 = "zarr.json"
#: Key names that hold metadata rather than data, in either spec version.
METADATA_NAMES = frozenset({ARRAY_V2, GROUP_V2, ATTRS_V2, CONSOLIDATED_V2, NODE_V3})

_V2_ARRAY_FIELDS = ("zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value",
                    "order", "filters")


class BadMetadata(ValueError):
    """A metadata document that cannot be used; the message says which rule it breaks."""


def load_json(value: bytes) -> Any:
    """Decode a metadata value (UTF-8 JSON).

    Examples
    --------
    >>> load_json(b'{"zarr_format": 2}')
    {'zarr_format': 2}
    """
    try:
        return json.loads(bytes(value).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BadMetadata(f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    except ValueError as error:
        raise BadMetadata(f"not JSON ({error})") from None


# ------------------------------------------------------------------ spec v2
def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_list(meta: Mapping[str, Any], name: str, minimum: int) -> list[str]:
    value = meta[name]
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        return [f"{name!r} must be a list of integers, not {value!r}"]
    if any(v < minimum for v in value):
        return [f"{name!r} entries must be >= {minimum}, not {value!r}"]
    return []


def _dtype_descr(encoded: Any) -> Any:
    if not isinstance(encoded, list):
        return encoded
    fields = []
    for item in encoded:
        name, field_type, *shape = item
        fields.append((name, _dtype_descr(field_type), *(tuple(s) for s in shape)))
    return fields


def parse_dtype(encoded: Any) -> np.dtype:
    """The numpy dtype of a v2 ``dtype`` field (typestr or structured field list).

    Examples
    --------
    >>> parse_dtype("<f8"), parse_dtype([["a", "<i4"], ["b", "|u1", [2]]]).itemsize
    (dtype('float64'), 6)
    """
    if not isinstance(encoded, (str, list)):
        raise BadMetadata(f"'dtype' must be a typestr or a list of fields, not {encoded!r}")
    try:
        return np.dtype(_dtype_descr(encoded))
    except (TypeError, ValueError) as error:
        raise BadMetadata(f"'dtype' {encoded!r} is not a numpy dtype ({error})") from None


def _codec_problem(config: Any, role: str) -> str | None:
    import numcodecs

    if not isinstance(config, dict) or not isinstance(config.get("id"), str):
        return f"{role} must be an object with an 'id', not {config!r}"
    try:
        numcodecs.get_codec(dict(config))
    except Exception as error:  # noqa: BLE001 - numcodecs raises many kinds
        return f"{role} {config['id']!r} cannot be loaded by numcodecs ({error})"
    return None


def _float_problem(value: Any) -> bool:
    return not (isinstance(value, (int, float)) and not isinstance(value, bool)
                or value in ("NaN", "Infinity", "-Infinity"))


def fill_value_problem(value: Any, dtype: np.dtype) -> str | None:
    """Why ``value`` is not a v2 fill value of ``dtype``; ``None`` if it is one.

    Examples
    --------
    >>> fill_value_problem("NaN", np.dtype("f8")) is None
    True
    >>> fill_value_problem("x", np.dtype("i4"))
    "'fill_value' 'x' is not an integer (dtype int32)"
    """
    if value is None or dtype.hasobject:
        return None
    kind, shown = dtype.kind, f"'fill_value' {value!r}"
    if kind == "f":
        return None if not _float_problem(value) else f"{shown} is not a number, 'NaN', " \
            f"'Infinity' or '-Infinity' (dtype {dtype})"
    if kind == "c":
        if isinstance(value, list) and len(value) == 2 and not any(map(_float_problem, value)):
            return None
        return f"{shown} is not a [real, imaginary] pair (dtype {dtype})"
    if kind in "iumM":
        if not _is_int(value):
            return f"{shown} is not an integer (dtype {dtype})"
        if kind in "iu":
            limits = np.iinfo(dtype)
            if not limits.min <= value <= limits.max:
                return f"{shown} is out of range for dtype {dtype}"
        return None
    if kind == "b":
        return None if isinstance(value, bool) else f"{shown} is not true or false"
    if kind == "U":
        return None if isinstance(value, str) else f"{shown} is not a string (dtype {dtype})"
    if kind in "SV":
        return _base64_problem(value, dtype, shown)
    return None


def _base64_problem(value: Any, dtype: np.dtype, shown: str) -> str | None:
    if not isinstance(value, str):
        return f"{shown} is not a base64 string (dtype {dtype})"
    try:
        decoded = base64.standard_b64decode(value.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError):
        return f"{shown} is not valid base64 (dtype {dtype})"
    if dtype.kind == "V" and len(decoded) != dtype.itemsize:
        return f"{shown} decodes to {len(decoded)} bytes; dtype {dtype} needs {dtype.itemsize}"
    return None


def check_array_v2(meta: Any) -> list[str]:
    """Every way a decoded ``.zarray`` document breaks the v2 specification.

    Examples
    --------
    >>> check_array_v2({"zarr_format": 2, "shape": [4, 4], "chunks": [2], "dtype": "<f8",
    ...                 "compressor": None, "fill_value": 0, "order": "C", "filters": None})
    ["'chunks' has 1 entries but 'shape' has 2"]
    """
    if not isinstance(meta, dict):
        return [f"not a JSON object but {type(meta).__name__}"]
    missing = [name for name in _V2_ARRAY_FIELDS if name not in meta]
    if missing:
        return [f"lacks the required field(s) {', '.join(missing)}"]
    problems = []
    if meta["zarr_format"] != 2:
        problems.append(f"'zarr_format' is {meta['zarr_format']!r}, not 2")
    problems += _int_list(meta, "shape", 0) + _int_list(meta, "chunks", 1)
    if not problems and len(meta["shape"]) != len(meta["chunks"]):
        problems.append(f"'chunks' has {len(meta['chunks'])} entries but 'shape' has "
                        f"{len(meta['shape'])}")
    try:
        dtype = parse_dtype(meta["dtype"])
    except BadMetadata as error:
        problems.append(str(error))
    else:
        problem = fill_value_problem(meta["fill_value"], dtype)
        if problem:
            problems.append(problem)
    if meta["order"] not in ("C", "F"):
        problems.append(f"'order' must be 'C' or 'F', not {meta['order']!r}")
    if meta["compressor"] is not None:
        problems.append(_codec_problem(meta["compressor"], "'compressor'") or "")
    problems += _filters_problems(meta["filters"])
    separator = meta.get("dimension_separator", ".")
    if separator not in (".", "/"):
        problems.append(f"'dimension_separator' must be '.' or '/', not {separator!r}")
    return [problem for problem in problems if problem]


def _filters_problems(filters: Any) -> list[str]:
    if filters is None:
        return []
    if not isinstance(filters, list):
        return [f"'filters' must be null or a list, not {filters!r}"]
    return [problem for index, config in enumerate(filters)
            if (problem := _codec_problem(config, f"filter {index}"))]


def check_group_v2(meta: Any) -> list[str]:
    """Every way a decoded ``.zgroup`` document breaks the v2 specification.

    Examples
    --------
    >>> check_group_v2({"zarr_format": 3})
    ["'zarr_format' is 3, not 2"]
    """
    if not isinstance(meta, dict):
        return [f"not a JSON object but {type(meta).__name__}"]
    if "zarr_format" not in meta:
        return ["lacks the required field zarr_format"]
    if meta["zarr_format"] != 2:
        return [f"'zarr_format' is {meta['zarr_format']!r}, not 2"]
    return []


def check_consolidated(meta: Any) -> list[str]:
    """The problems of a decoded ``.zmetadata`` document's own format.

    Examples
    --------
    >>> check_consolidated({"metadata": {}, "zarr_consolidated_format": 1})
    []
    """
    if not isinstance(meta, dict):
        return [f"not a JSON object but {type(meta).__name__}"]
    problems = []
    if meta.get("zarr_consolidated_format") != 1:
        problems.append(f"'zarr_consolidated_format' is "
                        f"{meta.get('zarr_consolidated_format')!r}, not 1")
    if not isinstance(meta.get("metadata"), dict):
        problems.append("'metadata' must be an object of key: document")
    return problems


# ------------------------------------------------------------------ spec v3
_V3_TIME_TYPES = ("numpy.datetime64", "numpy.timedelta64")


def v3_itemsize(data_type: Any) -> int:
    """Bytes per element of a v3 ``data_type``; 0 when variable-length or unknown.

    Covers the core types (``int8`` ... ``complex128``, ``r<bits>``) and the
    fixed-size extensions zarr-python writes (datetimes, fixed-length
    strings and bytes, which state ``length_bytes``).

    Examples
    --------
    >>> v3_itemsize("float32"), v3_itemsize("r24"), v3_itemsize("string")
    (4, 3, 0)
    >>> v3_itemsize({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}})
    12
    """
    if isinstance(data_type, dict):
        name, config = data_type.get("name"), data_type.get("configuration") or {}
        if name in _V3_TIME_TYPES:
            return 8
        length = config.get("length_bytes") if isinstance(config, dict) else None
        return length if _is_int(length) and length > 0 else 0
    if not isinstance(data_type, str):
        return 0
    if data_type in _V3_TIME_TYPES:
        return 8
    if data_type.startswith("r") and data_type[1:].isdigit() and int(data_type[1:]) % 8 == 0:
        return int(data_type[1:]) // 8
    if data_type in ("bool", "float16", "float32", "float64", "complex64", "complex128") or \
            data_type.startswith(("int", "uint")) and data_type.lstrip("uint").isdigit():
        try:
            return int(np.dtype(data_type).itemsize)
        except TypeError:
            return 0
    return 0


def _inner_chunks(codecs: list[Any]) -> tuple[int, ...] | None:
    """The inner chunk shape when the array-to-bytes codec is ``sharding_indexed``."""
    for codec in codecs:
        if isinstance(codec, dict) and codec.get("name") == "sharding_indexed":
            return tuple(int(n) for n in (codec.get("configuration") or {})["chunk_shape"])
    return None


# ------------------------------------------------------------ arrays (v2, v3)
@dataclass
class Array:
    """What the command needs to know about one array.

    ``separator`` joins chunk indices in keys; ``key_prefix`` is what stands
    between the array's path and the indices (``"c/"`` for v3's default
    encoding).  ``codecs`` is v3's codec list; v2 uses ``compressor`` and
    ``filters``.
    """

    path: str
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: Any  # numpy dtype (v2), or the v3 data_type (a str or an object)
    order: str = "C"
    compressor: dict[str, Any] | None = None
    filters: list[dict[str, Any]] | None = None
    fill_value: Any = None
    separator: str = "."
    key_prefix: str = ""
    codecs: list[Any] = field(default_factory=list)
    item_bytes: int = 0  # bytes per element of a v3 data type; 0 if variable or unknown
    inner_chunks: tuple[int, ...] | None = None  # a sharded v3 array's inner chunk shape

    @classmethod
    def from_v2(cls, path: str, meta: Mapping[str, Any]) -> Array:
        """An array from a ``.zarray`` document ``check_array_v2`` found no problem in.

        Examples
        --------
        >>> a = Array.from_v2("x", {"zarr_format": 2, "shape": [5], "chunks": [2],
        ...     "dtype": "<i2", "compressor": None, "fill_value": 0, "order": "C",
        ...     "filters": None})
        >>> a.grid, a.nchunks, a.chunk_nbytes
        ((3,), 3, 4)
        """
        return cls(path=path, zarr_format=2, shape=tuple(meta["shape"]),
                   chunks=tuple(meta["chunks"]), dtype=parse_dtype(meta["dtype"]),
                   order=meta["order"], compressor=meta["compressor"],
                   filters=meta["filters"], fill_value=meta["fill_value"],
                   separator=meta.get("dimension_separator") or ".")

    @classmethod
    def from_v3(cls, path: str, meta: Mapping[str, Any]) -> Array:
        """An array from a v3 ``zarr.json`` document (regular chunk grid).

        ``chunks`` is the shape of what one key stores: the shard shape of a
        sharded array, whose inner chunk shape is ``inner_chunks``.

        Examples
        --------
        >>> a = Array.from_v3("x", {"zarr_format": 3, "node_type": "array", "shape": [10],
        ...     "data_type": "uint8", "chunk_grid": {"name": "regular",
        ...     "configuration": {"chunk_shape": [4]}}, "codecs": [{"name": "bytes"}],
        ...     "fill_value": 0, "chunk_key_encoding": {"name": "default"}})
        >>> a.chunk_key((2,)), a.nbytes, a.inner_chunks
        ('c/2', 10, None)
        """
        try:
            shape = tuple(int(n) for n in meta["shape"])
            grid = meta.get("chunk_grid") or {}
            chunks = tuple(int(n) for n in grid.get("configuration", {}).get("chunk_shape", shape))
            encoding = meta.get("chunk_key_encoding") or {"name": "default"}
            codecs = list(meta.get("codecs") or [])
            inner = _inner_chunks(codecs)
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise BadMetadata(f"not a zarr v3 array document ({error!r})") from None
        default = encoding.get("name") == "default"
        separator = (encoding.get("configuration") or {}).get("separator", "/" if default else ".")
        return cls(path=path, zarr_format=3, shape=shape, chunks=chunks,
                   dtype=meta.get("data_type"), fill_value=meta.get("fill_value"),
                   separator=separator, key_prefix="c" + separator if default else "",
                   codecs=codecs, item_bytes=v3_itemsize(meta.get("data_type")),
                   inner_chunks=inner)

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each dimension."""
        return tuple(math.ceil(s / c) if c else 0 for s, c in zip(self.shape, self.chunks))

    @property
    def nchunks(self) -> int:
        """How many chunks the grid has (1 for a 0-d array)."""
        return math.prod(self.grid)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array when decoded (item size times element count)."""
        return math.prod(self.shape) * self.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element (0 for variable-length or unknown data types)."""
        return int(self.dtype.itemsize) if isinstance(self.dtype, np.dtype) else self.item_bytes

    @property
    def chunk_items(self) -> int:
        return math.prod(self.chunks)

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk (edge chunks are stored whole too)."""
        return self.chunk_items * self.itemsize

    def chunk_key(self, index: tuple[int, ...]) -> str:
        """The key of a chunk relative to the array (``"0"`` for a 0-d array)."""
        return self.key_prefix + self.separator.join(map(str, index or (0,)))

    def chunk_index(self, relative: str, nested: bool = False) -> tuple[int, ...] | None:
        """The grid index a relative key names, or ``None`` if it names no chunk.

        ``nested`` accepts ``/`` between indices whatever the separator (a
        ``NestedDirectoryStore`` lists dotted chunks that way).

        Examples
        --------
        >>> a = Array("x", 2, (4, 4), (2, 2), np.dtype("u1"))
        >>> a.chunk_index("1.0"), a.chunk_index("2.0"), a.chunk_index("1/0"), a.chunk_index("01.0")
        ((1, 0), None, None, None)
        """
        if not relative.startswith(self.key_prefix):
            return None
        text = relative[len(self.key_prefix):]
        if nested and self.separator == ".":
            text = text.replace("/", ".")
        parts = text.split(self.separator)
        if len(parts) != max(len(self.shape), 1):
            return None
        if not all(p.isascii() and p.isdigit() and (p == "0" or p[0] != "0") for p in parts):
            return None
        index = tuple(int(p) for p in parts)
        grid = self.grid or (1,)
        if any(i >= n for i, n in zip(index, grid)):
            return None
        return index if self.shape else ()

    def is_chunk_key(self, relative: str, nested: bool = False) -> bool:
        return self.chunk_index(relative, nested) is not None
