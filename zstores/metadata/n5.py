"""N5 ``attributes.json`` <-> Zarr format 2 metadata: the translation ``N5Store`` applies.

An N5 container keeps one ``attributes.json`` per group or dataset (array).
A dataset's holds the N5 keywords ``dimensions``, ``blockSize``, ``dataType``
and ``compression`` beside the user's attributes; the container's root holds
the format version under ``n5``.  zarr-python 2's ``N5Store`` shows each one
as the Zarr documents ``.zarray`` (or ``.zgroup``) and ``.zattrs``; so do
these functions, with three rules of N5 built in:

- the dimension order is reversed: N5 lists the fastest-varying dimension
  first, Zarr (order ``"C"``) last, so ``dimensions`` is ``shape`` reversed
  and ``blockSize`` is ``chunks`` reversed;
- N5 has no fill value, filters or order: the Zarr view says ``fill_value``
  0, no filters, order ``"C"``, and a ``.zarray`` asking otherwise is refused;
- each N5 compression is shown as the numcodecs compressor that reads and
  writes the same stream (gzip -> ``gzip`` or ``zlib``, bzip2 -> ``bz2``,
  xz -> ``lzma``, blosc -> ``blosc``, zstd -> ``zstd``, raw -> ``None``).

Unlike zarr-python 2 (whose ``.zarray`` names its ``n5_wrapper`` codec),
the view names the plain compressor and a little-endian ``dtype``: the store
turns N5 blocks (a header, big-endian values) into ordinary Zarr chunks
(``zstores.wrappers.n5_blocks``), so any Zarr reader opens the view without an
N5 codec.

Pure functions over decoded JSON; every error is a ``MetadataError`` naming
the key (``where``) and the rule.

Examples
--------
>>> attributes = {"dimensions": [30, 20], "blockSize": [8, 7], "dataType": "int32",
...               "compression": {"type": "gzip", "level": -1, "useZlib": False},
...               "unit": "m"}
>>> zarray = array_to_zarr(attributes, "a/attributes.json")
>>> zarray["shape"], zarray["chunks"], zarray["dtype"], zarray["compressor"]
([20, 30], [7, 8], '<i4', {'id': 'gzip', 'level': -1})
>>> user_attributes(attributes)
{'unit': 'm'}
>>> array_to_n5(zarray, "a/.zarray") == {k: attributes[k] for k in ARRAY_KEYWORDS}
True
"""

from __future__ import annotations

import lzma
from collections.abc import Mapping
from typing import Any

import numpy as np

from .checks import check_array_v2, check_group_v2
from .documents import MetadataError
from .v2 import ZARR_FORMAT, parse_dtype

__all__ = [
    "ARRAY_KEYWORDS",
    "ATTRIBUTES",
    "COMPRESSIONS",
    "DATA_TYPES",
    "N5_VERSION",
    "RESERVED",
    "VERSION_KEY",
    "array_to_n5",
    "array_to_zarr",
    "compression_to_zarr",
    "compressor_to_n5",
    "group_to_n5",
    "is_array",
    "user_attributes",
    "with_user_attributes",
]

#: The file holding a group's or dataset's attributes, in its folder.
ATTRIBUTES = "attributes.json"
#: The attribute holding the N5 format version, in the container's root.
VERSION_KEY = "n5"
#: The version written (the one zarr-python 2's N5Store writes; N5 readers
#: read every 2.x container).
N5_VERSION = "2.0.0"
#: The keywords that make an ``attributes.json`` a dataset's (array's).
ARRAY_KEYWORDS = ("dimensions", "blockSize", "dataType", "compression")
#: Names a user attribute may not take: they are N5's own.
RESERVED = (VERSION_KEY, *ARRAY_KEYWORDS)

#: N5 ``dataType`` -> the Zarr ``dtype`` of the view (little-endian, as
#: zarr-python writes ``"i4"``; the store swaps N5's big-endian bytes).
DATA_TYPES = {
    "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "float32": "<f4", "float64": "<f8",
}
_TYPE_OF_DTYPE = {np.dtype(dtype): name for name, dtype in DATA_TYPES.items()}

#: The N5 compression types read and written.
COMPRESSIONS = ("raw", "gzip", "bzip2", "xz", "blosc", "zstd")


def _fail(where: str, rule: str) -> MetadataError:
    return MetadataError(f"{where!r}: {rule}")


# ------------------------------------------------------------ compression
def compression_to_zarr(compression: Any, where: str) -> dict[str, Any] | None:
    """The numcodecs compressor config reading an N5 ``compression``; None for raw.

    Examples
    --------
    >>> compression_to_zarr({"type": "bzip2", "blockSize": 9}, "attributes.json")
    {'id': 'bz2', 'level': 9}
    >>> compression_to_zarr({"type": "lz4", "blockSize": 65536}, "a/attributes.json")
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'a/attributes.json': N5 compression 'lz4' is not \
supported (supported: raw, gzip, bzip2, xz, blosc, zstd)
    """
    if not isinstance(compression, Mapping) or not isinstance(compression.get("type"), str):
        raise _fail(where, f"'compression' must be an object with a 'type', not {compression!r}")
    kind = compression["type"]
    try:
        if kind == "raw":
            return None
        if kind == "gzip":
            codec = "zlib" if compression.get("useZlib", False) else "gzip"
            return {"id": codec, "level": int(compression.get("level", -1))}
        if kind == "bzip2":
            return {"id": "bz2", "level": int(compression.get("blockSize", 9))}
        if kind == "xz":
            return {"id": "lzma", "format": lzma.FORMAT_XZ, "check": -1,
                    "preset": int(compression.get("preset", 6)), "filters": None}
        if kind == "blosc":
            return {"id": "blosc", "cname": str(compression["cname"]),
                    "clevel": int(compression["clevel"]), "shuffle": int(compression["shuffle"]),
                    "blocksize": int(compression.get("blocksize", 0))}
        if kind == "zstd":
            return {"id": "zstd", "level": int(compression.get("level", 3))}
    except (KeyError, TypeError, ValueError) as error:
        raise _fail(where, f"N5 compression {compression!r} lacks or misspells a parameter "
                           f"({type(error).__name__}: {error})") from None
    raise _fail(where, f"N5 compression {kind!r} is not supported (supported: "
                       f"{', '.join(COMPRESSIONS)})")


def _unwrapped(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # zarr-python 2's N5Store names its n5_wrapper codec (only zarr-python 2 has
    # it); the compressor is inside.
    if config.get("id") == "n5_wrapper":
        inner = config.get("compressor_config")
        return None if not isinstance(inner, Mapping) or inner.get("id") == "raw" else inner
    return config


def compressor_to_n5(config: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """The N5 ``compression`` writing what the numcodecs compressor ``config`` writes.

    zarr-python 2's ``n5_wrapper`` config is accepted (its inner compressor
    counts).  A compressor N5 has no stream for is a ``MetadataError``.

    Examples
    --------
    >>> compressor_to_n5({"id": "zlib", "level": 3}, ".zarray")
    {'type': 'gzip', 'level': 3, 'useZlib': True}
    >>> compressor_to_n5(None, ".zarray")
    {'type': 'raw'}
    """
    config = None if config is None else _unwrapped(config)
    if config is None:
        return {"type": "raw"}
    codec = config.get("id")
    if codec in ("gzip", "zlib"):
        return {"type": "gzip", "level": config.get("level", -1), "useZlib": codec == "zlib"}
    if codec == "bz2":
        return {"type": "bzip2", "blockSize": config.get("level", 9)}
    if codec == "lzma":
        if config.get("format", lzma.FORMAT_XZ) != lzma.FORMAT_XZ or config.get("filters"):
            raise _fail(where, "an lzma compressor other than the plain xz format "
                               "(format=1, no filters) has no N5 equivalent")
        if config.get("check", -1) not in (-1, lzma.CHECK_CRC64):
            raise _fail(where, "N5's xz streams carry a CRC64 check; lzma check "
                               f"{config.get('check')!r} has no N5 equivalent")
        preset = config.get("preset")
        return {"type": "xz", "preset": 6 if preset is None else preset}
    if codec == "blosc":
        shuffle = config.get("shuffle", 1)
        return {"type": "blosc", "cname": config.get("cname", "lz4"),
                "clevel": config.get("clevel", 5), "shuffle": 1 if shuffle == -1 else shuffle,
                "blocksize": config.get("blocksize", 0)}
    if codec == "zstd":
        return {"type": "zstd", "level": config.get("level", 3)}
    raise _fail(where, f"compressor {codec!r} has no N5 equivalent; N5 arrays take gzip, zlib, "
                       "bz2, lzma (xz format), blosc, zstd or no compressor")


# ------------------------------------------------------------------ arrays
def is_array(attributes: Mapping[str, Any]) -> bool:
    """True when an ``attributes.json`` document is a dataset's (it has ``dimensions``)."""
    return "dimensions" in attributes


def _positive_ints(attributes: Mapping[str, Any], name: str, minimum: int, where: str
                   ) -> list[int]:
    value = attributes.get(name)
    if not isinstance(value, list) or not value or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= minimum for n in value):
        raise _fail(where, f"{name!r} must be a non-empty list of integers >= {minimum}, "
                           f"not {value!r}")
    return value


def array_to_zarr(attributes: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``.zarray`` document of the view for a dataset's ``attributes.json``.

    Raises
    ------
    MetadataError
        If a keyword is missing or malformed, the ``dataType`` is not one of
        ``DATA_TYPES`` or the compression is not one of ``COMPRESSIONS``.
    """
    missing = [name for name in ARRAY_KEYWORDS if name not in attributes]
    if missing:
        raise _fail(where, f"an N5 dataset's attributes lack {', '.join(missing)}")
    dimensions = _positive_ints(attributes, "dimensions", 0, where)
    block_size = _positive_ints(attributes, "blockSize", 1, where)
    if len(dimensions) != len(block_size):
        raise _fail(where, f"'blockSize' has {len(block_size)} entries but 'dimensions' has "
                           f"{len(dimensions)}")
    data_type = attributes["dataType"]
    if data_type not in DATA_TYPES:
        raise _fail(where, f"N5 dataType {data_type!r} is not supported (supported: "
                           f"{', '.join(DATA_TYPES)})")
    return {
        "chunks": block_size[::-1],
        "compressor": compression_to_zarr(attributes["compression"], where),
        "dimension_separator": ".",
        "dtype": DATA_TYPES[data_type],
        "fill_value": 0,
        "filters": None,
        "order": "C",
        "shape": dimensions[::-1],
        "zarr_format": ZARR_FORMAT,
    }


def _data_type(encoded: Any, where: str) -> str:
    try:
        dtype = parse_dtype(encoded)
    except MetadataError as error:
        raise _fail(where, str(error)) from None
    if dtype.byteorder == "=":
        dtype = dtype.newbyteorder("<") if np.little_endian else dtype.newbyteorder(">")
    name = _TYPE_OF_DTYPE.get(dtype)
    if name is None:
        if dtype.kind in "iuf" and dtype.byteorder == ">" and dtype.newbyteorder("<") in \
                _TYPE_OF_DTYPE:
            raise _fail(where, f"dtype {encoded!r} is big-endian; the Zarr view of an N5 array "
                               "is little-endian (N5 stores big-endian, the store swaps the "
                               f"bytes): write {dtype.newbyteorder('<').str!r}")
        raise _fail(where, f"dtype {encoded!r} has no N5 dataType; N5 arrays hold "
                           f"{', '.join(DATA_TYPES)}")
    return name


def _check_n5_expressible(zarray: Mapping[str, Any], where: str) -> None:
    if len(zarray["shape"]) == 0:
        raise _fail(where, "N5 has no 0-dimensional datasets: give the array at least one "
                           "dimension")
    fill_value = zarray["fill_value"]
    if fill_value is not None and (isinstance(fill_value, str) or fill_value != 0):
        raise _fail(where, f"fill_value {fill_value!r}: N5 has no fill value (missing blocks "
                           "read as 0), so an N5 array takes fill_value 0 or null")
    if zarray["order"] != "C":
        raise _fail(where, f"order {zarray['order']!r}: N5 stores blocks in one order, "
                           "shown as 'C'")
    if zarray["filters"]:
        raise _fail(where, "N5 has no filters; an N5 array takes filters null or []")
    if zarray.get("dimension_separator", ".") != ".":
        raise _fail(where, f"dimension_separator {zarray['dimension_separator']!r}: an N5 "
                           "array's chunk keys are written '0.1' (the store keeps them as N5's "
                           "reversed folders '1/0')")


def array_to_n5(zarray: Any, where: str) -> dict[str, Any]:
    """The N5 keywords (``ARRAY_KEYWORDS``) of a ``.zarray`` document written to the view.

    Raises
    ------
    MetadataError
        If the document breaks the v2 specification, or asks for what N5
        cannot hold: another dtype, a fill value other than 0, filters, order
        ``"F"``, the ``"/"`` separator, no dimension, or a compressor without
        an N5 stream.

    Examples
    --------
    >>> array_to_n5({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8",
    ...              "compressor": None, "fill_value": 1.5, "order": "C", "filters": None},
    ...             "x/.zarray")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'x/.zarray': fill_value 1.5: N5 has no fill value ...
    """
    if isinstance(zarray, Mapping) and isinstance(zarray.get("compressor"), Mapping):
        zarray = {**zarray, "compressor": _unwrapped(zarray["compressor"])}
    problems = check_array_v2(zarray)
    if problems:
        raise _fail(where, "; ".join(problems))
    _check_n5_expressible(zarray, where)
    return {
        "dimensions": list(zarray["shape"])[::-1],
        "blockSize": list(zarray["chunks"])[::-1],
        "dataType": _data_type(zarray["dtype"], where),
        "compression": compressor_to_n5(zarray["compressor"], where),
    }


# ---------------------------------------------------------- groups, attrs
def group_to_n5(zgroup: Any, where: str, *, root: bool) -> dict[str, Any]:
    """The N5 attributes a ``.zgroup`` document writes: the version at the root, else none.

    Examples
    --------
    >>> group_to_n5({"zarr_format": 2}, ".zgroup", root=True)
    {'n5': '2.0.0'}
    >>> group_to_n5({"zarr_format": 2}, "g/.zgroup", root=False)
    {}
    """
    problems = check_group_v2(zgroup)
    if problems:
        raise _fail(where, "; ".join(problems))
    return {VERSION_KEY: N5_VERSION} if root else {}


def user_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The user's attributes in an ``attributes.json``: all but N5's ``RESERVED`` names."""
    return {name: value for name, value in attributes.items() if name not in RESERVED}


def with_user_attributes(attributes: Mapping[str, Any], user: Any, where: str
                         ) -> dict[str, Any]:
    """``attributes`` with its user attributes replaced by ``user`` (a ``.zattrs`` document).

    Raises
    ------
    MetadataError
        If ``user`` is not a JSON object, or names one of N5's ``RESERVED``
        keywords (writing ``dimensions`` would turn a group into a broken array).

    Examples
    --------
    >>> with_user_attributes({"n5": "2.0.0", "old": 1}, {"new": 2}, ".zattrs")
    {'n5': '2.0.0', 'new': 2}
    """
    if not isinstance(user, Mapping):
        raise _fail(where, f"attributes must be a JSON object, not {type(user).__name__}")
    clash = sorted(name for name in user if name in RESERVED)
    if clash:
        raise _fail(where, f"attribute name(s) {', '.join(map(repr, clash))} are N5's own "
                           f"keywords ({', '.join(RESERVED)}) and cannot be user attributes")
    kept = {name: value for name, value in attributes.items() if name in RESERVED}
    return {**kept, **user}
