"""Zarr storage specification v1 -> v2: ``migrate_1to2``.

Spec v1 kept an array's metadata in ``meta`` and its attributes in
``attrs``; v2 names them ``.zarray`` and ``.zattrs`` and describes the
compressor as a numcodecs config.  Chunk keys are the same in both.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numcodecs
import numpy as np

from ._progress import Progress, report
from .metadata import v2
from .metadata.documents import ARRAY_V2, ATTRS_V2, MetadataError, load_json
from .metadata.nodes import classify

__all__ = ["migrate_1to2", "plan_1to2"]

_V1_FIELDS = ("shape", "chunks", "dtype", "compression", "compression_opts", "fill_value", "order")


def _decode_v1_metadata(value: Any) -> dict[str, Any]:
    meta = load_json(value, key="meta")
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
        return v2.encode_fill_value(value, dtype)
    except (TypeError, ValueError, AttributeError):
        return v2.encode_fill_value(v2.normalize_fill_value(value, dtype), dtype)


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


def plan_1to2(store: Mapping[str, Any]) -> dict[str, bytes]:
    """The spec v2 documents ``migrate_1to2`` would write, checked, computed without writing.

    The ``.zarray`` is checked by the rules ``zstores verify`` applies, so
    a ``meta`` that would become metadata zarr refuses is refused here.

    Raises
    ------
    KeyError
        If there is no ``meta`` key.
    MetadataError
        If ``meta`` is not valid v1 metadata, or would not become a valid
        ``.zarray`` (the message names ``meta`` and the rule broken).

    Examples
    --------
    >>> store = {"meta": b'{"zarr_format": 1, "shape": [-4], "chunks": [2], '
    ...          b'"dtype": "<i4", "compression": null, "compression_opts": null, '
    ...          b'"fill_value": 0, "order": "C"}'}
    >>> plan_1to2(store)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'meta' would become a .zarray that breaks the spec: ...
    """
    meta = _decode_v1_metadata(store["meta"])
    try:
        dtype = v2.parse_dtype(meta["dtype"])
        zarray = v2.encode_array(
            shape=tuple(meta["shape"]),
            chunks=tuple(meta["chunks"]),
            dtype=dtype,
            compressor=_v1_compressor_config(meta["compression"], meta["compression_opts"]),
            fill_value=_v1_fill_value(meta["fill_value"], dtype),
            order=meta["order"],
            filters=None,
        )
    except MetadataError as error:
        raise MetadataError(f"'meta': {error}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise MetadataError(f"'meta' cannot be converted: {type(error).__name__}: "
                            f"{error}") from None
    problems = classify("", ARRAY_V2, load_json(zarray, key=ARRAY_V2)).problems
    if problems:
        raise MetadataError(f"'meta' would become a .zarray that breaks the spec: "
                            f"{'; '.join(problems)}")
    written = {ARRAY_V2: bytes(zarray)}
    if "attrs" in store:
        written[ATTRS_V2] = bytes(store["attrs"])
    return written


def migrate_1to2(store: MutableMapping[str, Any], *,
                 progress: Progress | None = None) -> dict[str, bytes]:
    """Convert a Zarr spec v1 array at the root of ``store`` to spec v2.

    ``meta`` becomes ``.zarray`` (``compression`` and ``compression_opts``
    become a numcodecs ``compressor`` config; ``filters`` is null) and
    ``attrs`` becomes ``.zattrs``; chunk keys are the same in both versions.
    The new keys are written before the old ones are deleted.

    Parameters
    ----------
    store : MutableMapping
        The store holding the v1 array.
    progress : callable, optional
        ``progress(stage, done, total)``, called as the v2 documents are
        written (``"writing metadata"``) and the v1 ones removed
        (``"removing v1 metadata"``); see ``zstores._progress``.

    Raises
    ------
    KeyError
        If there is no ``meta`` key.
    MetadataError
        If ``meta`` is not valid v1 metadata or would become an invalid
        ``.zarray`` (nothing is written then).

    Returns
    -------
    dict
        The documents written, by key.

    Examples
    --------
    >>> store = {"meta": b'{"zarr_format": 1, "shape": [4], "chunks": [2], '
    ...          b'"dtype": "<i4", "compression": "zlib", "compression_opts": 1, '
    ...          b'"fill_value": 0, "order": "C"}', "attrs": b"{}"}
    >>> sorted(migrate_1to2(store))
    ['.zarray', '.zattrs']
    >>> sorted(store)
    ['.zarray', '.zattrs']
    """
    written = plan_1to2(store)
    report(progress, "writing metadata", 0, len(written))
    for done, (key, value) in enumerate(written.items(), 1):
        store[key] = value
        report(progress, "writing metadata", done, len(written))
    old = ["attrs", "meta"] if "attrs" in store else ["meta"]
    report(progress, "removing v1 metadata", 0, len(old))
    for done, key in enumerate(old, 1):
        del store[key]
        report(progress, "removing v1 metadata", done, len(old))
    return written
