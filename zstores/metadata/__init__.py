"""Zarr metadata, formats 2 and 3: everything zstores knows about metadata documents.

- ``documents``: the key names (``ARRAY_V2``, ``NODE_V3`` ...), the one error
  for a broken document (``MetadataError``) and JSON decoding;
- ``v2``: ``.zarray``/``.zgroup`` as zarr-python 2.18 writes them (dtype,
  fill value, chunk and codec rules);
- ``checks``: format 2 documents checked against the specification;
- ``v3``: ``zarr.json`` documents, v2 -> v3 conversion, consolidated metadata;
- ``nodes``: what a path is (array or group, format 2 or 3) and an array's
  chunk grid;
- ``consolidated``: consolidated documents checked, and the keys a
  consolidated hierarchy can hold (what a store that cannot list lists from).

Pure functions over decoded JSON: nothing here touches a store (the
hierarchy functions, migrations, consolidation and the CLI do) or imports
zarr.

Examples
--------
>>> from zstores.metadata import ARRAY_V2, MetadataError, metadata_format
>>> ARRAY_V2, metadata_format("a/" + ARRAY_V2), issubclass(MetadataError, ValueError)
('.zarray', 2, True)
"""

from .documents import (
    ARRAY_V2,
    ATTRS_V2,
    CONSOLIDATED_V2,
    GROUP_V2,
    METADATA_NAMES,
    NODE_NAMES,
    NODE_V3,
    V2_DOCUMENT_NAMES,
    V2_NAMES,
    MetadataError,
    load_json,
    metadata_format,
)

__all__ = [
    "ARRAY_V2",
    "ATTRS_V2",
    "CONSOLIDATED_V2",
    "GROUP_V2",
    "METADATA_NAMES",
    "NODE_NAMES",
    "NODE_V3",
    "V2_DOCUMENT_NAMES",
    "V2_NAMES",
    "MetadataError",
    "load_json",
    "metadata_format",
]
