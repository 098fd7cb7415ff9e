"""Zarr format 3 metadata documents: the ``zarr.json`` of groups and arrays.

Everything zstores knows about format 3 metadata lives here, as pure
functions over decoded JSON (no store, no zarr-python):

- ``encode`` writes a document in the layout zarr-python 3 writes
  (2-space indent, ASCII, field order kept);
- ``group_document`` and ``array_from_v2`` build documents; the latter turns
  a format 2 ``.zarray`` (plus its ``.zattrs``) into the equivalent format 3
  array, keeping every chunk where it is (``v2`` chunk key encoding);
- ``consolidated_field`` and ``with_consolidated`` build the consolidated
  metadata zarr-python 3 keeps inside a group's ``zarr.json`` (an extension
  of zarr-python 3, not of the format 3 specification), and
  ``check_consolidated_field`` reads one back.

What format 3 cannot express (object and structured dtypes, subarray dtypes,
``float128``, datetimes without a unit, filters that are not array-to-array
codecs) raises ``MetadataError`` naming the key and the reason.

Examples
--------
>>> doc = array_from_v2({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8",
...     "compressor": {"id": "zlib", "level": 1}, "fill_value": "NaN", "order": "C",
...     "filters": None}, {"units": "K"}, key="t/.zarray")
>>> doc["data_type"], doc["fill_value"], [codec["name"] for codec in doc["codecs"]]
('float64', 'NaN', ['bytes', 'numcodecs.zlib'])
>>> doc["chunk_key_encoding"]
{'name': 'v2', 'configuration': {'separator': '.'}}
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Mapping
from typing import Any

import numcodecs
import numpy as np

from .checks import is_int
from .documents import ARRAY_V2, MetadataError

__all__ = [
    "array_from_v2",
    "check_consolidated_field",
    "consolidated_field",
    "encode",
    "group_document",
    "inner_chunks",
    "is_group",
    "itemsize",
    "with_consolidated",
]

#: numcodecs filters zarr-python 3 runs as array-to-array codecs (the only kind a
#: format 3 codec list accepts before the ``bytes`` codec).
_ARRAY_TO_ARRAY = frozenset({"delta", "fixedscaleoffset", "quantize", "packbits", "astype",
                             "bitround"})
#: Blosc's shuffle numbers and their format 3 names.
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


# ------------------------------------------------------------------ encoding
def encode(document: Mapping[str, Any]) -> bytes:
    """A document as zarr-python 3 writes ``zarr.json``: 2-space indent, ASCII, order kept.

    Examples
    --------
    >>> print(encode(group_document({"é": 1})).decode())
    {
      "attributes": {
        "\\u00e9": 1
      },
      "zarr_format": 3,
      "node_type": "group"
    }
    """
    return json.dumps(document, indent=2, ensure_ascii=True, allow_nan=True).encode("ascii")


def is_group(document: Any) -> bool:
    """Whether a decoded ``zarr.json`` is a format 3 group.

    Examples
    --------
    >>> is_group({"zarr_format": 3, "node_type": "group"}), is_group({"zarr_format": 2})
    (True, False)
    """
    return (isinstance(document, Mapping) and document.get("zarr_format") == 3
            and document.get("node_type") == "group")


def group_document(attributes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A format 3 group's ``zarr.json``, fields in zarr-python 3's order.

    Examples
    --------
    >>> group_document()
    {'attributes': {}, 'zarr_format': 3, 'node_type': 'group'}
    """
    return {"attributes": dict(attributes or {}), "zarr_format": 3, "node_type": "group"}


# ------------------------------------------------------- consolidated metadata
def _empty_consolidated() -> dict[str, Any]:
    return {"kind": "inline", "must_understand": False, "metadata": {}}


def consolidated_field(documents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``consolidated_metadata`` object of a group holding ``documents``.

    ``documents`` maps each node's path relative to the group to its
    ``zarr.json``.  Sub-groups are listed as zarr-python 3 lists them, with an
    empty consolidated metadata of their own (their members are in the flat
    listing); keys are sorted.

    Examples
    --------
    >>> field = consolidated_field({"g": group_document()})
    >>> field["kind"], field["metadata"]["g"]["consolidated_metadata"]["metadata"]
    ('inline', {})
    """
    listed = {}
    for path in sorted(documents):
        document = dict(documents[path])
        if is_group(document):
            document = with_consolidated(document, _empty_consolidated())
        listed[path] = document
    return {"kind": "inline", "must_understand": False, "metadata": listed}


def with_consolidated(group: Mapping[str, Any], field: Mapping[str, Any] | None) -> dict[str, Any]:
    """The group document with its ``consolidated_metadata`` set (``None`` removes it).

    The field goes where zarr-python 3 writes it, before ``node_type``.

    Examples
    --------
    >>> list(with_consolidated(group_document(), consolidated_field({})))
    ['attributes', 'zarr_format', 'consolidated_metadata', 'node_type']
    >>> "consolidated_metadata" in with_consolidated(group_document(), None)
    False
    """
    result: dict[str, Any] = {}
    for name, value in group.items():
        if name == "consolidated_metadata":
            continue
        if name == "node_type" and field is not None:
            result["consolidated_metadata"] = dict(field)
        result[name] = value
    if field is not None and "consolidated_metadata" not in result:
        result["consolidated_metadata"] = dict(field)
    return result


def check_consolidated_field(field: Any, where: str) -> dict[str, dict[str, Any]]:
    """The ``{path: document}`` listing of a ``consolidated_metadata`` object, else MetadataError.

    Examples
    --------
    >>> listing = check_consolidated_field(consolidated_field({"a": group_document()}), "z")
    >>> list(listing), listing["a"]["node_type"]
    (['a'], 'group')
    >>> check_consolidated_field({"kind": "remote"}, "zarr.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'zarr.json' has consolidated_metadata of kind 'remote'; ...
    """
    if not isinstance(field, Mapping):
        raise MetadataError(f"{where!r} has no consolidated_metadata object (found {field!r})")
    if field.get("kind") != "inline":
        raise MetadataError(f"{where!r} has consolidated_metadata of kind {field.get('kind')!r}; "
                            "only 'inline' (written by zarr-python 3) is read")
    listing = field.get("metadata")
    if not isinstance(listing, Mapping):
        raise MetadataError(f"{where!r}: consolidated_metadata has no 'metadata' object "
                            "mapping paths to documents")
    for path, document in listing.items():
        if not isinstance(path, str) or not path or not isinstance(document, Mapping) \
                or document.get("zarr_format") != 3:
            raise MetadataError(f"{where!r}: consolidated_metadata lists {path!r}, which is not "
                                "a path with a format 3 zarr.json document")
    return {path: dict(document) for path, document in listing.items()}


# ------------------------------------------------------------- v2 -> v3 arrays
def _refuse(key: str, reason: str) -> MetadataError:
    return MetadataError(f"{key!r} cannot be written as Zarr format 3: {reason}")


def _v2_dtype(encoded: Any, key: str) -> np.dtype:
    if isinstance(encoded, list):
        raise _refuse(key, f"structured dtype {encoded!r} has no format 3 data type")
    try:
        return np.dtype(encoded)
    except (TypeError, ValueError) as error:
        raise _refuse(key, f"'dtype' {encoded!r} is not a numpy dtype ({error})") from None


def _time_type(dtype: np.dtype, key: str) -> dict[str, Any]:
    unit, scale = np.datetime_data(dtype)
    if unit == "generic":
        raise _refuse(key, f"dtype {dtype.str!r} has no time unit")
    name = "numpy.datetime64" if dtype.kind == "M" else "numpy.timedelta64"
    return {"name": name, "configuration": {"unit": unit, "scale_factor": int(scale)}}


def data_type(dtype: np.dtype, key: str = "") -> str | dict[str, Any]:
    """The format 3 ``data_type`` of a numpy dtype, as zarr-python 3 names it.

    Examples
    --------
    >>> data_type(np.dtype(">i2")), data_type(np.dtype("<U3"))
    ('int16', {'name': 'fixed_length_utf32', 'configuration': {'length_bytes': 12}})
    >>> data_type(np.dtype("O"), "x/.zarray")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'x/.zarray' cannot be written as Zarr format 3: object ...
    """
    kind = dtype.kind
    if dtype.hasobject and dtype.fields is None:
        raise _refuse(key, f"object dtype {dtype.str!r} (variable-length Python objects) "
                      "has no format 3 data type")
    if dtype.fields is not None or dtype.subdtype is not None:
        raise _refuse(key, f"structured or subarray dtype {dtype.descr!r} has no format 3 "
                      "data type")
    if kind == "b":
        return "bool"
    if kind in "iufc" and not (kind == "f" and dtype.itemsize > 8) and dtype.itemsize <= 16:
        return np.dtype(dtype.newbyteorder("=")).name
    if kind in "Mm":
        return _time_type(dtype, key)
    lengths = {"U": "fixed_length_utf32", "S": "null_terminated_bytes", "V": "raw_bytes"}
    if kind in lengths:
        return {"name": lengths[kind], "configuration": {"length_bytes": dtype.itemsize}}
    raise _refuse(key, f"dtype {dtype.str!r} has no format 3 data type")


def _endian(dtype: np.dtype) -> str | None:
    """The ``bytes`` codec's endianness; ``None`` when byte order does not apply."""
    if dtype.itemsize <= 1 or dtype.kind in "SV" or dtype.byteorder == "|":
        return None
    order = dtype.byteorder if dtype.byteorder != "=" else ("<" if sys.byteorder == "little"
                                                            else ">")
    return "little" if order == "<" else "big"


def _as_float(value: Any) -> Any:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def fill_value(value: Any, dtype: np.dtype) -> Any:
    """A v2 ``fill_value`` as format 3 writes it; ``None`` becomes the dtype's zero.

    v2's ``null`` ("no fill value") has no format 3 equivalent: zarr-python 3
    reads such an array with the zero of its dtype, so that is written.

    Examples
    --------
    >>> f4, f8, c8 = np.dtype("f4"), np.dtype("f8"), np.dtype("c8")
    >>> fill_value("NaN", f4), fill_value(0, f8), fill_value(None, c8)
    ('NaN', 0.0, [0.0, 0.0])
    """
    kind = dtype.kind
    if value is None:
        defaults = {"b": False, "f": 0.0, "c": [0.0, 0.0], "U": "", "S": "",
                    "V": base64.standard_b64encode(bytes(dtype.itemsize)).decode("ascii")}
        return defaults.get(kind, 0)
    if kind == "f":
        return _as_float(value)
    if kind == "c" and isinstance(value, list):
        return [_as_float(part) for part in value]
    return value


def _numcodecs_codec(config: Mapping[str, Any], role: str, key: str) -> dict[str, Any]:
    """``{"name": "numcodecs.<id>", "configuration": ...}``, the codec's own normalized config."""
    try:
        codec = numcodecs.get_codec(dict(config))
    except Exception as error:  # noqa: BLE001 - numcodecs raises many kinds
        raise _refuse(key, f"{role} {config!r} cannot be loaded by numcodecs ({error})") from None
    normalized = {name: value for name, value in codec.get_config().items() if name != "id"}
    return {"name": f"numcodecs.{codec.codec_id}", "configuration": normalized}


def _compressor(config: Mapping[str, Any], dtype: np.dtype, key: str) -> dict[str, Any]:
    """A v2 compressor as a format 3 bytes-to-bytes codec, mapped as zarr-python 3 maps it."""
    codec_id = config.get("id")
    if codec_id == "blosc":
        shuffle = config.get("shuffle", 1)
        if shuffle == -1:  # AUTOSHUFFLE: numcodecs picks bit shuffle for 1-byte items
            shuffle = 2 if dtype.itemsize == 1 else 1
        if shuffle not in _BLOSC_SHUFFLE:
            raise _refuse(key, f"blosc shuffle {shuffle!r} is not 0, 1, 2 or -1")
        return {"name": "blosc", "configuration": {
            "typesize": dtype.itemsize, "cname": config.get("cname", "lz4"),
            "clevel": config.get("clevel", 5), "shuffle": _BLOSC_SHUFFLE[shuffle],
            "blocksize": config.get("blocksize", 0)}}
    if codec_id == "zstd":
        return {"name": "zstd", "configuration": {"level": config.get("level", 0),
                                                  "checksum": bool(config.get("checksum"))}}
    if codec_id == "gzip":
        return {"name": "gzip", "configuration": {"level": config.get("level", 1)}}
    if codec_id in _ARRAY_TO_ARRAY:
        raise _refuse(key, f"compressor {codec_id!r} is an array-to-array codec, not a "
                      "bytes-to-bytes one")
    return _numcodecs_codec(config, "compressor", key)


def _filters(filters: Any, key: str) -> list[dict[str, Any]]:
    codecs = []
    for config in filters or []:
        codec_id = config.get("id") if isinstance(config, Mapping) else None
        if codec_id not in _ARRAY_TO_ARRAY:
            raise _refuse(key, f"filter {codec_id or config!r} is not one format 3 can run "
                          f"before the bytes codec (only {', '.join(sorted(_ARRAY_TO_ARRAY))})")
        codecs.append(_numcodecs_codec(config, "filter", key))
    return codecs


def _codecs(zarray: Mapping[str, Any], dtype: np.dtype, key: str) -> list[dict[str, Any]]:
    ndim = len(zarray["shape"])
    codecs: list[dict[str, Any]] = []
    if zarray.get("order", "C") == "F" and ndim:
        # F order stores each chunk with the axes reversed: a transpose codec says so.
        codecs.append({"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}})
    codecs += _filters(zarray.get("filters"), key)
    endian = _endian(dtype)
    codecs.append({"name": "bytes", "configuration": {"endian": endian}} if endian
                  else {"name": "bytes"})
    if zarray.get("compressor") is not None:
        codecs.append(_compressor(zarray["compressor"], dtype, key))
    return codecs


def array_from_v2(zarray: Mapping[str, Any], attributes: Mapping[str, Any] | None = None,
                  *, key: str = ARRAY_V2) -> dict[str, Any]:
    """The format 3 ``zarr.json`` equivalent to a v2 array: same chunks, same bytes.

    Chunk keys stay where v2 put them (``v2`` chunk key encoding with the
    array's ``dimension_separator``), so no chunk is rewritten.  xarray's
    ``_ARRAY_DIMENSIONS`` attribute becomes the ``dimension_names`` field, where
    xarray looks for it in format 3.  Fields are in
    zarr-python 3's order; ``key`` names the ``.zarray`` in error messages.

    Raises
    ------
    MetadataError
        If the array uses what format 3 cannot express (see the module).

    Examples
    --------
    >>> doc = array_from_v2({"zarr_format": 2, "shape": [2, 3], "chunks": [1, 3],
    ...     "dtype": "<i4", "compressor": None, "fill_value": 0, "order": "F",
    ...     "filters": None, "dimension_separator": "/"})
    >>> doc["codecs"][0], doc["chunk_key_encoding"]["configuration"]
    ({'name': 'transpose', 'configuration': {'order': [1, 0]}}, {'separator': '/'})
    """
    if not isinstance(zarray, Mapping) or zarray.get("zarr_format") != 2:
        raise _refuse(key, "not a Zarr format 2 array document")
    try:
        shape, chunks = [int(n) for n in zarray["shape"]], [int(n) for n in zarray["chunks"]]
        dtype = _v2_dtype(zarray["dtype"], key)
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, MetadataError):
            raise
        raise _refuse(key, f"malformed .zarray ({error!r})") from None
    separator = zarray.get("dimension_separator") or "."
    attributes, dimension_names = _dimension_names(attributes, len(shape))
    document = {
        "shape": shape,
        "data_type": data_type(dtype, key),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": separator}},
        "fill_value": fill_value(zarray.get("fill_value"), dtype),
        "codecs": _codecs(zarray, dtype, key),
        "attributes": attributes,
        "dimension_names": dimension_names,
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    if dimension_names is None:
        del document["dimension_names"]
    return document


#: The attribute xarray keeps a v2 array's dimension names in; format 3 has a field.
XARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"


def _dimension_names(attributes: Mapping[str, Any] | None,
                     ndim: int) -> tuple[dict[str, Any], list[str] | None]:
    """The attributes without xarray's ``_ARRAY_DIMENSIONS``, and the names it held.

    xarray reads a format 3 array's dimensions from ``dimension_names`` only
    (and writes no such attribute there), so a well-formed one (a name per
    dimension) moves into the field; anything else stays an attribute.

    Examples
    --------
    >>> _dimension_names({"_ARRAY_DIMENSIONS": ["t", "x"], "units": "K"}, 2)
    ({'units': 'K'}, ['t', 'x'])
    >>> _dimension_names({"_ARRAY_DIMENSIONS": ["t"]}, 2)
    ({'_ARRAY_DIMENSIONS': ['t']}, None)
    """
    attributes = dict(attributes or {})
    names = attributes.get(XARRAY_DIMENSIONS)
    if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
        del attributes[XARRAY_DIMENSIONS]
        return attributes, names
    return attributes, None


# ------------------------------------------------------------ reading arrays
_V3_TIME_TYPES = ("numpy.datetime64", "numpy.timedelta64")


def itemsize(data_type: Any) -> int:
    """Bytes per element of a v3 ``data_type``; 0 when variable-length or unknown.

    Covers the core types (``int8`` ... ``complex128``, ``r<bits>``) and the
    fixed-size extensions zarr-python writes (datetimes, fixed-length
    strings and bytes, which state ``length_bytes``).

    Examples
    --------
    >>> itemsize("float32"), itemsize("r24"), itemsize("string")
    (4, 3, 0)
    >>> itemsize({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}})
    12
    """
    if isinstance(data_type, dict):
        name, config = data_type.get("name"), data_type.get("configuration") or {}
        if name in _V3_TIME_TYPES:
            return 8
        length = config.get("length_bytes") if isinstance(config, dict) else None
        return length if is_int(length) and length > 0 else 0
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


def inner_chunks(codecs: list[Any]) -> tuple[int, ...] | None:
    """The inner chunk shape when the array-to-bytes codec is ``sharding_indexed``."""
    for codec in codecs:
        if isinstance(codec, dict) and codec.get("name") == "sharding_indexed":
            return tuple(int(n) for n in (codec.get("configuration") or {})["chunk_shape"])
    return None
