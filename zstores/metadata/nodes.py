"""Zarr nodes: what a path is (array or group, format 2 or 3) and an array's chunk grid.

``classify`` reads the decoded metadata document found at a path (the key
name says its format) and says what the path is; ``read_node`` does the
same from the stored bytes, and ``find_node`` picks the document that counts
when several are there (``NODE_NAMES`` order).  ``Array`` is the shape,
chunk grid and chunk keys of an array of either format.

Examples
--------
>>> node = read_node("t", "zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
>>> node.kind, node.zarr_format, node.problems
('group', 3, [])
>>> read_node("t", ".zgroup", b'{"zarr_format": 1}').problems
["'zarr_format' is 1, not 2"]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..keys import prefix_of
from . import v2, v3
from .checks import check_array_v2, check_group_v2
from .documents import ARRAY_V2, GROUP_V2, NODE_NAMES, NODE_V3, MetadataError, load_json

__all__ = ["Array", "NodeMetadata", "classify", "find_node", "read_node"]



def _whole(values: Any, least: int) -> bool:
    """A list of integers (not booleans, not floats) each at least ``least``."""
    return isinstance(values, list | tuple) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= least for n in values)


def _check_grid_v3(shape: Any, grid: Any, chunks: tuple[int, ...],
                   inner: tuple[int, ...] | None, encoding: Any) -> None:
    """The v3 rules ``int()`` alone would let through: what zarr-python refuses too."""
    if not _whole(shape, 0):
        raise MetadataError(f"'shape' must hold integers >= 0, not {shape!r}")
    if not isinstance(grid, Mapping) or grid.get("name") != "regular":
        name = grid.get("name") if isinstance(grid, Mapping) else grid
        raise MetadataError(f"chunk grid {name!r} is not read (only 'regular')")
    stated = (grid.get("configuration") or {}).get("chunk_shape")
    if not _whole(stated, 1):
        raise MetadataError(f"'chunk_shape' must hold integers >= 1, not {stated!r}")
    if inner is not None and not all(n >= 1 for n in inner):
        raise MetadataError(f"the inner chunk shape must hold integers >= 1, not {list(inner)}")
    if not isinstance(encoding, Mapping) or encoding.get("name") not in ("default", "v2"):
        raise MetadataError(f"chunk key encoding {encoding!r} is not 'default' or 'v2'")
    separator = (encoding.get("configuration") or {}).get("separator")
    if separator not in (None, "/", "."):
        raise MetadataError(f"chunk key separator {separator!r} is not '/' or '.'")

@dataclass
class Array:
    """What a reader of the store needs to know about one array (format 2 or 3).

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
                   chunks=tuple(meta["chunks"]), dtype=v2.parse_dtype(meta["dtype"]),
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
            inner = v3.inner_chunks(codecs)
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise MetadataError(f"not a zarr v3 array document ({error!r})") from None
        _check_grid_v3(meta.get("shape"), grid, chunks, inner, encoding)
        if len(chunks) != len(shape) or (inner is not None and len(inner) != len(shape)):
            raise MetadataError(
                f"not a zarr v3 array document: shape {list(shape)} has {len(shape)} dimensions "
                f"but the chunk shape {list(chunks)}"
                + ("" if inner is None else f" / inner chunk shape {list(inner)}")
                + " does not"
            )
        default = encoding.get("name") == "default"
        separator = (encoding.get("configuration") or {}).get("separator", "/" if default else ".")
        return cls(path=path, zarr_format=3, shape=shape, chunks=chunks,
                   dtype=meta.get("data_type"), fill_value=meta.get("fill_value"),
                   separator=separator, key_prefix="c" + separator if default else "",
                   codecs=codecs, item_bytes=v3.itemsize(meta.get("data_type")),
                   inner_chunks=inner)

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each dimension."""
        pairs = zip(self.shape, self.chunks, strict=True)
        return tuple(math.ceil(s / c) if c else 0 for s, c in pairs)

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
        """The key of a chunk relative to the array.

        A 0-d array's one chunk is ``"0"`` in format 2 (and v3's ``v2``
        encoding), ``"c"`` with v3's default encoding, as zarr-python writes them.

        Examples
        --------
        >>> Array("x", 3, (), (), "uint8", key_prefix="c/", separator="/").chunk_key(())
        'c'
        """
        if not index and self.key_prefix:
            return self.key_prefix[:-len(self.separator)]
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
        if not self.shape and self.key_prefix and relative == self.chunk_key(()):
            return ()
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
        if any(i >= n for i, n in zip(index, grid, strict=True)):
            return None
        return index if self.shape else ()

    def is_chunk_key(self, relative: str, nested: bool = False) -> bool:
        return self.chunk_index(relative, nested) is not None

    def is_chunk_folder(self, relative: str) -> bool:
        """Whether ``relative`` is a folder chunk keys can be in (``"c"``, ``"c/1"`` for v3).

        Only a ``/`` separator (and v3's ``c/``) makes folders: dotted chunk
        keys lie directly in the array's folder.

        Examples
        --------
        >>> a = Array("x", 3, (4, 4), (2, 2), "uint8", separator="/", key_prefix="c/")
        >>> a.is_chunk_folder("c"), a.is_chunk_folder("c/1"), a.is_chunk_folder("c/1/0")
        (True, True, False)
        >>> a.is_chunk_folder("c/2"), a.is_chunk_folder("d")
        (False, False)
        """
        parts = relative.split("/")
        if self.key_prefix:
            if self.separator != "/" or parts[0] != self.key_prefix[:-1]:
                return False
            parts = parts[1:]
        elif self.separator != "/":
            return False
        if len(parts) >= len(self.shape):
            return False
        grid = self.grid
        return all(p.isascii() and p.isdigit() and (p == "0" or p[0] != "0") and int(p) < n
                   for p, n in zip(parts, grid, strict=False))


@dataclass
class NodeMetadata:
    """What the metadata at a path makes of it.

    ``kind`` is ``"array"`` or ``"group"``, or ``"other"`` for a format 3
    document that is neither; ``array`` is set for an array whose document
    can be used; ``problems`` lists the rules the document breaks.
    """

    path: str
    kind: str
    zarr_format: int
    document: Any = None
    array: Array | None = None
    problems: list[str] = field(default_factory=list)


def classify(path: str, name: str, document: Any) -> NodeMetadata:
    """What the decoded document ``name`` (one of ``NODE_NAMES``) makes of ``path``.

    A format 2 node is what its key name says, even when its document breaks
    the specification (the problems say how); a format 3 node is what its
    ``node_type`` says, ``"other"`` when that is neither or the array
    document cannot be read.

    Examples
    --------
    >>> classify("a", ".zarray", {"zarr_format": 2}).problems  # doctest: +ELLIPSIS
    ['lacks the required field(s) shape, chunks, dtype, ...']
    >>> classify("a", "zarr.json", {"zarr_format": 3, "node_type": "x"}).problems
    ["'node_type' is 'x', not 'array' or 'group'"]
    """
    if name == NODE_V3:
        return _classify_v3(path, document)
    if name not in (ARRAY_V2, GROUP_V2):
        raise ValueError(f"{name!r} is not a node's metadata key; expected one of {NODE_NAMES}")
    kind = "array" if name == ARRAY_V2 else "group"
    problems = check_array_v2(document) if kind == "array" else check_group_v2(document)
    array = Array.from_v2(path, document) if kind == "array" and not problems else None
    return NodeMetadata(path, kind, 2, document, array, problems)


def _classify_v3(path: str, document: Any) -> NodeMetadata:
    kind = document.get("node_type") if isinstance(document, dict) else None
    try:
        if kind not in ("array", "group"):
            raise MetadataError(f"'node_type' is {kind!r}, not 'array' or 'group'")
        array = Array.from_v3(path, document) if kind == "array" else None
    except MetadataError as error:
        return NodeMetadata(path, "other", 3, document, problems=[str(error)])
    return NodeMetadata(path, kind, 3, document, array)


def read_node(path: str, name: str, value: bytes) -> NodeMetadata:
    """``classify`` of a stored value; a value that is not JSON is a problem too.

    Examples
    --------
    >>> read_node("a", ".zarray", b"{").problems  # doctest: +ELLIPSIS
    ['not JSON (Expecting ...)']
    """
    try:
        document = load_json(value)
    except MetadataError as error:
        kind = {ARRAY_V2: "array", GROUP_V2: "group"}.get(name, "other")
        return NodeMetadata(path, kind, 3 if name == NODE_V3 else 2, problems=[str(error)])
    return classify(path, name, document)


def find_node(path: str, found: Mapping[str, bytes]) -> NodeMetadata | None:
    """The node at ``path`` from the metadata values read (``found``, by key); ``None`` if none.

    Examples
    --------
    >>> find_node("g", {"g/.zgroup": b'{"zarr_format": 2}', "g/zarr.json": b"{}"}).zarr_format
    2
    >>> find_node("g", {}) is None
    True
    """
    prefix = prefix_of(path)
    for name in NODE_NAMES:
        if prefix + name in found:
            return read_node(path, name, found[prefix + name])
    return None
