"""Finding nodes: what a path holds (array, group or neither) and what lies below it.

A node is read from its metadata keys in one ``getitems`` round trip per
listing, so a tree over a network store costs one listing and one batch
read per group, never a read per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..base import Store
from ..keys import RESERVED_PREFIX, normalize_storage_path, prefix_of
from ..metadata import METADATA_NAMES, NODE_NAMES
from ..metadata.nodes import Array, find_node

_RESERVED = RESERVED_PREFIX.rstrip("/")

__all__ = ["Node", "children", "join", "key_prefix", "keys_under", "read_nodes", "walk"]


def join(path: str, name: str) -> str:
    """``path/name``, or ``name`` at the root."""
    return f"{path}/{name}" if path else name


def key_prefix(store: Store, path: str) -> str:
    """The store's own prefix of every key under ``path`` (``""`` for the root)."""
    path = normalize_storage_path(path)
    return prefix_of(store.normalize(path)) if path else ""


def keys_under(store: Store, path: str) -> list[str]:
    """Every key under ``path`` (not ``path`` itself), sorted.

    A sorted backend answers with a range query; this is the one full
    listing a command makes.
    """
    return store.list_prefix(key_prefix(store, path))


@dataclass
class Node:
    """A path and what its metadata says it is.

    ``kind`` is ``"array"``, ``"group"`` or ``"other"`` (keys without
    metadata); ``problem`` is set when a metadata document cannot be used.
    """

    path: str
    kind: str
    zarr_format: int | None = None
    meta: Any = None
    array: Array | None = None
    problem: str | None = None

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    def describe(self) -> str:
        """``(100, 100) float64`` for an array, ``group`` or ``no zarr metadata``."""
        if self.problem:
            return f"unreadable {self.kind} metadata: {self.problem}"
        if self.array is not None:
            return f"{self.array.shape} {self.array.dtype}"
        return "group" if self.kind == "group" else "no zarr metadata"

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"path": self.path, "name": self.name, "type": self.kind}
        if self.zarr_format is not None:
            document["zarr_format"] = self.zarr_format
        if self.array is not None:
            document.update(shape=list(self.array.shape), chunks=list(self.array.chunks),
                            dtype=str(self.array.dtype))
        if self.problem:
            document["problem"] = self.problem
        return document


def _node(path: str, found: dict[str, bytes]) -> Node:
    meta = find_node(path, found)
    if meta is None:
        return Node(path, "other")
    return Node(path, meta.kind, meta.zarr_format, meta.document, meta.array,
                "; ".join(meta.problems) or None)


def read_nodes(store: Store, paths: Iterable[str]) -> list[Node]:
    """The node at each path, read with one batch of metadata reads."""
    paths = list(paths)
    wanted = [prefix_of(p) + name for p in paths for name in NODE_NAMES]
    found = store.getitems(wanted) if wanted else {}
    return [_node(path, found) for path in paths]


def children(store: Store, path: str) -> list[Node]:
    """The nodes directly under ``path`` (metadata keys left out), sorted by name."""
    names = [name for name in store.listdir(path) if name not in METADATA_NAMES
             and (path or name != _RESERVED)]  # zstores' own records: no member
    return read_nodes(store, [join(path, name) for name in names])


def walk(store: Store, node: Node, depth: int = 0) -> Iterator[tuple[int, Node, bool]]:
    """``(depth, node, is_last_sibling)`` for the node and everything below it.

    Arrays are leaves: their chunks are never listed.
    """
    yield depth, node, True
    yield from _walk_below(store, node, depth)


def _walk_below(store: Store, node: Node, depth: int) -> Iterator[tuple[int, Node, bool]]:
    if node.kind == "array":
        return
    below = children(store, node.path)
    for position, child in enumerate(below):
        yield depth + 1, child, position == len(below) - 1
        yield from _walk_below(store, child, depth + 1)
