"""Consolidated metadata documents, formats 2 and 3: their checks, and the keys they imply.

A consolidated document names every group and array of a hierarchy, and
each array's metadata gives its chunk grid and key encoding, so together
they say which keys the hierarchy *can* hold: its metadata keys, and one key
per cell of every array's chunk grid (a sharded v3 array: one per shard).
``published_keys`` turns a document into that set (``PublishedKeys``); a
store that cannot list (a static HTTP server) lists from it, asking which of
the possible chunk keys exist, since a chunk never written is the fill value
and must not be listed.

``document_format``, ``checked_document`` and ``checked_document_v3`` are
the rules ``ConsolidatedStore`` applies to the documents it serves.

Examples
--------
>>> import json
>>> document = {"zarr_consolidated_format": 1, "metadata": {
...     ".zgroup": {"zarr_format": 2},
...     "t/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i2",
...                   "compressor": None, "fill_value": 0, "order": "C", "filters": None}}}
>>> keys = published_keys(".zmetadata", json.dumps(document).encode())
>>> keys.metadata_keys, [list(keys.chunk_keys(array)) for array in keys.arrays]
(['.zgroup', '.zmetadata', 't/.zarray'], [['t/0', 't/1']])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..keys import normalize_storage_path, prefix_of
from . import v3
from .documents import CONSOLIDATED_V2, NODE_V3, V2_DOCUMENT_NAMES, MetadataError, load_json
from .nodes import Array, classify

__all__ = [
    "CONSOLIDATED_FORMAT",
    "PublishedKeys",
    "checked_document",
    "checked_document_v3",
    "document_format",
    "published_keys",
]

#: The ``zarr_consolidated_format`` written and understood.
CONSOLIDATED_FORMAT = 1


def _name(key: str) -> str:
    return key.rpartition("/")[2]


def document_format(document: Any) -> int:
    """3 for a format 3 ``consolidated_metadata`` object (it has ``kind``), else 2.

    Examples
    --------
    >>> document_format({"kind": "inline", "metadata": {}}), document_format({"metadata": {}})
    (3, 2)
    """
    return 3 if isinstance(document, Mapping) and "kind" in document \
        and "zarr_consolidated_format" not in document else 2


def checked_document_v3(document: Any, where: str) -> dict[str, Any]:
    """The format 3 ``consolidated_metadata`` object, paths normalized, else MetadataError."""
    listing = v3.check_consolidated_field(document, where)
    normalized = {}
    for path, node in listing.items():
        try:
            normalized[normalize_storage_path(path)] = node
        except ValueError as error:
            raise MetadataError(f"{where!r}: consolidated_metadata lists {path!r}, which is "
                                f"not a valid path ({error})") from None
    return {"kind": "inline", "must_understand": False, "metadata": normalized}


def checked_document(document: Any, where: str) -> dict[str, Any]:
    """The consolidated document if it has format 1 and only metadata keys, else MetadataError."""
    if not isinstance(document, Mapping):
        raise MetadataError(
            f"{where!r} must hold a JSON object, not {type(document).__name__}"
        )
    found = document.get("zarr_consolidated_format")
    if found != CONSOLIDATED_FORMAT:
        raise MetadataError(
            f"{where!r} has zarr_consolidated_format {found!r}; only format "
            f"{CONSOLIDATED_FORMAT} (written by zarr-python 2 and 3 for Zarr format 2) is read"
        )
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        raise MetadataError(f"{where!r} has no 'metadata' object mapping keys to documents")
    for key in metadata:
        if not isinstance(key, str) or _name(key) not in V2_DOCUMENT_NAMES:
            raise MetadataError(
                f"{where!r} lists {key!r}, which is not a metadata key (a key ending in "
                f"{', '.join(sorted(V2_DOCUMENT_NAMES))})"
            )
    return {"metadata": dict(metadata), "zarr_consolidated_format": CONSOLIDATED_FORMAT}


# ------------------------------------------------------------ possible keys
@dataclass
class PublishedKeys:
    """The keys a consolidated hierarchy can hold.

    ``metadata_keys`` (sorted) are the documents the consolidated metadata
    names, and the key holding it; ``arrays`` are its arrays (paths from the
    store's root), whose possible chunk keys ``chunk_keys`` gives.
    ``problems`` lists the arrays whose metadata cannot be used (their
    chunk keys are unknown, so none is listed).
    """

    metadata_keys: list[str]
    arrays: list[Array] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @staticmethod
    def chunk_keys(array: Array) -> Iterator[str]:
        """Every key the array's chunk grid names, from the store's root (shard keys if sharded).

        Examples
        --------
        >>> import numpy as np
        >>> list(PublishedKeys.chunk_keys(Array("g/x", 2, (3, 3), (2, 2), np.dtype("u1"))))
        ['g/x/0.0', 'g/x/0.1', 'g/x/1.0', 'g/x/1.1']
        """
        prefix = prefix_of(array.path)
        for index in itertools.product(*(range(n) for n in array.grid)):
            yield prefix + array.chunk_key(index)


def _keys_v2(document: Any, key: str) -> PublishedKeys:
    prefix = key[:-len(CONSOLIDATED_V2)]
    checked = checked_document(document, key)
    found = PublishedKeys(sorted([key, *(prefix + name for name in checked["metadata"])]))
    for name, node_document in sorted(checked["metadata"].items()):
        if _name(name) != ".zarray":
            continue
        path = (prefix + name[:-len(".zarray")]).rstrip("/")
        node = classify(path, ".zarray", node_document)
        if node.array is None:
            found.problems.append(f"{prefix + name!r}: {'; '.join(node.problems)}")
        else:
            found.arrays.append(node.array)
    return found


def _nodes_v3(listing: Mapping[str, Any], where: str, base: str) -> dict[str, Any]:
    """``{path: zarr.json document}`` of a consolidated listing and the ones nested in its groups.

    zarr-python 3 lists every node below the group flat; a sub-group's own
    ``consolidated_metadata``, when not empty, is read too (its paths are
    relative to that sub-group).
    """
    nodes: dict[str, Any] = {}
    for path, document in checked_document_v3(listing, where)["metadata"].items():
        full = base + path
        nodes[full] = document
        inner = document.get("consolidated_metadata")
        if v3.is_group(document) and isinstance(inner, Mapping) and inner.get("metadata"):
            nodes.update(_nodes_v3(inner, where, full + "/"))
    return nodes


def _keys_v3(document: Any, key: str) -> PublishedKeys | None:
    if not v3.is_group(document) or document.get("consolidated_metadata") is None:
        return None
    prefix = key[:-len(NODE_V3)]
    nodes = _nodes_v3(document["consolidated_metadata"], key, prefix)
    found = PublishedKeys(sorted([key, *(path + "/" + NODE_V3 for path in nodes)]))
    for path, node_document in sorted(nodes.items()):
        node = classify(path, NODE_V3, node_document)
        if node.array is not None:
            found.arrays.append(node.array)
        elif node.kind != "group":
            found.problems.append(f"{path + '/' + NODE_V3!r}: {'; '.join(node.problems)}")
    return found


def published_keys(key: str, value: bytes) -> PublishedKeys | None:
    """The keys the consolidated metadata stored at ``key`` says its hierarchy can hold.

    ``None`` when ``key`` is a ``zarr.json`` without consolidated metadata
    (an array, or a group never consolidated).

    Parameters
    ----------
    key : str
        Where the document is: ``.zmetadata`` (format 2) or ``zarr.json``
        (a format 3 group with ``consolidated_metadata``), at the store's
        root or under a group's path (``"g/.zmetadata"``).
    value : bytes
        The stored document.

    Raises
    ------
    MetadataError
        If the value is not a consolidated document zstores reads.

    Examples
    --------
    >>> import json
    >>> group = {"zarr_format": 3, "node_type": "group", "attributes": {},
    ...          "consolidated_metadata": {"kind": "inline", "must_understand": False,
    ...              "metadata": {"s": {"zarr_format": 3, "node_type": "array", "shape": [],
    ...                  "data_type": "uint8", "chunk_grid": {"name": "regular",
    ...                  "configuration": {"chunk_shape": []}}, "codecs": [{"name": "bytes"}],
    ...                  "fill_value": 0, "chunk_key_encoding": {"name": "default"}}}}}
    >>> keys = published_keys("zarr.json", json.dumps(group).encode())
    >>> keys.metadata_keys, list(keys.chunk_keys(keys.arrays[0]))
    (['s/zarr.json', 'zarr.json'], ['s/c'])
    >>> published_keys("zarr.json", b'{"zarr_format": 3, "node_type": "group"}') is None
    True
    """
    document = load_json(value, key)
    if _name(key) == CONSOLIDATED_V2:
        return _keys_v2(document, key)
    if _name(key) == NODE_V3:
        return _keys_v3(document, key)
    raise ValueError(f"{key!r} holds no consolidated metadata: expected "
                     f"{CONSOLIDATED_V2!r} or {NODE_V3!r}")
