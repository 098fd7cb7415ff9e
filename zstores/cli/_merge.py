"""Whether one hierarchy can be copied into a store that already holds another.

``cp`` copies keys as they are.  Into an empty destination that is always
right; into one that already holds Zarr data, two mixes leave a hierarchy
zarr-python cannot read, and ``cp`` refuses them before writing anything:

- the other Zarr format (v2 ``.zarray``/``.zgroup`` documents next to v3
  ``zarr.json`` ones, under the copied path or above it);
- a different node at the same path: an array where the destination has a
  group (or the reverse), or an array whose shape, data type, chunks,
  codecs, order or chunk-key layout differ (its chunks would be decoded with
  the wrong metadata).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..base import Store
from ..metadata import ATTRS_V2, metadata_format
from ..metadata.nodes import Array
from ._tree import Node, read_nodes

__all__ = ["merge_conflict"]

#: Array facts that must agree for two arrays' chunks to be interchangeable.
_ARRAY_FACTS = ("zarr_format", "shape", "dtype", "chunks", "order", "compressor", "filters",
                "codecs", "separator", "key_prefix")


def _formats(keys: Iterable[str]) -> dict[int, str]:
    """``{zarr_format: first key showing it}`` among ``keys``."""
    found: dict[int, str] = {}
    for key in sorted(keys):
        version = metadata_format(key)
        if version is not None:
            found.setdefault(version, key)
    return found


def _ancestors(path: str) -> list[str]:
    parts = path.split("/") if path else []
    return ["/".join(parts[:depth]) for depth in range(len(parts))]


def _format_conflict(src_keys: list[str], above: list[Node], dst_keys: Iterable[str]
                     ) -> str | None:
    ours = _formats(src_keys)
    theirs = _formats(dst_keys)
    for node in above:  # DST's nodes at the paths the copy lands below
        if node.zarr_format is not None:
            theirs.setdefault(node.zarr_format, f"{node.path}/" if node.path else "/")
    if not ours or not theirs or set(ours) == set(theirs):
        return None
    mine = " and ".join(f"v{v}" for v in sorted(ours))
    other = sorted(set(theirs) - set(ours)) or sorted(theirs)
    return (f"SRC holds zarr {mine} metadata (first: {ours[min(ours)]!r}) but DST already "
            f"holds zarr v{other[0]} metadata (first: {theirs[other[0]]!r}): the merged "
            "hierarchy would mix formats zarr cannot read")


def _node_text(node: Node) -> str:
    return f"a v{node.zarr_format} {node.kind}"


def _array_difference(ours: Array, theirs: Array) -> str | None:
    for fact in _ARRAY_FACTS:
        mine, other = getattr(ours, fact), getattr(theirs, fact)
        if str(mine) != str(other):
            return f"{fact} {_shown(mine)} in SRC, {_shown(other)} in DST"
    return None


def _shown(value: object) -> str:
    return str(value) if isinstance(value, tuple) else repr(value)


def _node_paths(src_keys: list[str]) -> list[str]:
    """The paths of the nodes ``src_keys`` describe (by their metadata documents)."""
    return sorted({key.rpartition("/")[0] for key in src_keys
                   if metadata_format(key) is not None and key.rpartition("/")[2] != ATTRS_V2})


def _node_conflict(src: Store, paths: list[str], at_paths: list[Node]) -> str | None:
    for ours, theirs in zip(read_nodes(src, paths), at_paths, strict=True):
        if ours.kind == "other" or theirs.kind == "other" or ours.problem or theirs.problem:
            continue
        where = ours.path or "/"
        if ours.kind != theirs.kind:
            return (f"{where} is {_node_text(ours)} in SRC but {_node_text(theirs)} in DST")
        if ours.array is not None and theirs.array is not None:
            difference = _array_difference(ours.array, theirs.array)
            if difference:
                return (f"a different array at {where} ({difference}): its chunks would be "
                        "read with the wrong metadata")
    return None


def merge_conflict(src: Store, dst: Store, src_keys: list[str], dst_keys: Iterable[str],
                   path: str = "") -> str | None:
    """Why copying ``src_keys`` into ``dst`` would leave a hierarchy zarr cannot read.

    Parameters
    ----------
    src, dst : zstores.Store
        The stores copied from and to.
    src_keys : list of str
        The keys to copy.
    dst_keys : iterable of str
        The keys ``dst`` holds under ``path``.
    path : str
        Where the copy lands (its ancestors in ``dst`` are checked too).

    Returns
    -------
    str or None
        One sentence saying why, or ``None`` if the copy merges cleanly.

    Examples
    --------
    >>> import zstores
    >>> src, dst = zstores.MemoryStore(), zstores.MemoryStore()
    >>> zstores.init_array(src, shape=(4,), chunks=(2,), dtype="i4", path="a")
    >>> zstores.init_array(dst, shape=(8,), chunks=(2,), dtype="i4", path="a")
    >>> print(merge_conflict(src, dst, list(src), list(dst)).partition(":")[0])
    a different array at a (shape (4,) in SRC, (8,) in DST)
    >>> dst["zarr.json"] = b'{"zarr_format": 3, "node_type": "group"}'
    >>> conflict = merge_conflict(src, dst, list(src), list(dst))
    >>> conflict.startswith("SRC holds zarr v2 metadata (first: '.zgroup') but DST already ")
    True
    >>> conflict.endswith("zarr v3 metadata (first: 'zarr.json'): the merged hierarchy would "
    ...                   "mix formats zarr cannot read")
    True
    """
    # DST is read once: its nodes above ``path`` and at the copied nodes' paths.
    above, paths = _ancestors(path), _node_paths(src_keys)
    dst_nodes = read_nodes(dst, above + paths)
    return _format_conflict(src_keys, dst_nodes[:len(above)], dst_keys) or \
        _node_conflict(src, paths, dst_nodes[len(above):])
