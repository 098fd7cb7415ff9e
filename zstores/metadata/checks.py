"""Checking Zarr format 2 metadata against the specification, rule by rule.

Each ``check_*`` function lists every way a decoded document breaks the
Zarr storage specification v2 (an empty list: none), in words a user can
act on; ``zstores verify``, ``ls`` and ``info`` report them.

Examples
--------
>>> check_group_v2({"zarr_format": 2}), check_consolidated({"metadata": []})
([], ["'zarr_consolidated_format' is None, not 1", "'metadata' must be an object of key: document"])
"""

from __future__ import annotations

import base64
import binascii
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .documents import MetadataError
from .v2 import parse_dtype

__all__ = ["check_array_v2", "check_consolidated", "check_group_v2", "fill_value_problem",
           "is_int"]

_V2_ARRAY_FIELDS = ("zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value",
                    "order", "filters")


# ------------------------------------------------------------------ spec v2
def is_int(value: Any) -> bool:
    """Whether a decoded JSON value is an integer (``true`` is not one)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_list(meta: Mapping[str, Any], name: str, minimum: int) -> list[str]:
    value = meta[name]
    if not isinstance(value, list) or not all(is_int(v) for v in value):
        return [f"{name!r} must be a list of integers, not {value!r}"]
    if any(v < minimum for v in value):
        return [f"{name!r} entries must be >= {minimum}, not {value!r}"]
    return []


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
        if not _float_problem(value):
            return None
        return f"{shown} is not a number, 'NaN', 'Infinity' or '-Infinity' (dtype {dtype})"
    if kind == "c":
        if isinstance(value, list) and len(value) == 2 and not any(map(_float_problem, value)):
            return None
        return f"{shown} is not a [real, imaginary] pair (dtype {dtype})"
    if kind in "iumM":
        if not is_int(value):
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
    except MetadataError as error:
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
