"""Chunk geometry without zarr: which stored chunks a selection touches, and their keys.

``ChunkLayout`` holds what the lock keys need from an array's metadata: its
shape, the shape of one stored object (a chunk, or a shard when the array is
sharded), its path and chunk key encoding.  ``split`` cuts a basic selection
(integers, slices with positive steps, ``...``) into one part per stored chunk.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..keys import prefix_of

__all__ = [
    "Box",
    "ChunkLayout",
    "Part",
    "boxes",
    "broadcast_value",
    "normalize_selection",
    "selection_shape",
    "split",
]

#: One axis of a normalized selection: an index (the axis is dropped) or
#: ``(start, stop, step)`` with ``step > 0``.
Axis = int | tuple[int, int, int]


@dataclass(frozen=True)
class Part:
    """The piece of a selection that falls in one stored chunk.

    ``coords`` index the chunk in the grid, ``selection`` is the piece in
    array coordinates, and ``value_selection`` the matching piece of the
    value being written (it has no entry for axes an integer dropped).
    """

    coords: tuple[int, ...]
    selection: tuple[int | slice, ...]
    value_selection: tuple[slice, ...]


@dataclass(frozen=True)
class Box:
    """A block of whole grid cells a selection touches: one write covering several chunks.

    ``coords`` lists the grid cells in the box, ``selection`` is the box's
    piece of the selection in array coordinates and ``value_selection`` the
    matching piece of the value (as in ``Part``).
    """

    coords: tuple[tuple[int, ...], ...]
    selection: tuple[int | slice, ...]
    value_selection: tuple[slice, ...]


@dataclass(frozen=True)
class ChunkLayout:
    """Where an array's stored chunks live: the grid and the key of each cell.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    grid : tuple of int
        The shape of one stored object: the chunk shape, or the shard shape
        of a sharded array (a write rewrites a whole shard).
    path : str
        The array's path in the store (``""`` at the root).
    separator : {".", "/"}
        Between the chunk indices of a key.
    encoding : {"v2", "default"}
        ``"v2"``: ``0.1`` (``0`` for a 0-d array); ``"default"`` (Zarr v3): ``c/0/1``.
    metadata_key : str
        The metadata document's name, ``.zarray`` or ``zarr.json``.

    Examples
    --------
    >>> layout = ChunkLayout((10, 10), (4, 4), "a/b", ".", "v2", ".zarray")
    >>> layout.chunk_key((2, 0)), layout.metadata_path
    ('a/b/2.0', 'a/b/.zarray')
    >>> sorted(layout.keys((slice(3, 5), 9)))
    ['a/b/0.2', 'a/b/1.2']
    """

    shape: tuple[int, ...]
    grid: tuple[int, ...]
    path: str
    separator: str
    encoding: str
    metadata_key: str

    def __post_init__(self) -> None:
        if self.encoding not in ("v2", "default"):
            raise ValueError(
                f"unsupported chunk key encoding {self.encoding!r}: zstores computes keys "
                "for 'v2' and 'default'"
            )
        if self.separator not in (".", "/"):
            raise ValueError(f"invalid dimension separator {self.separator!r}: '.' or '/'")
        if len(self.grid) != len(self.shape) or any(size < 1 for size in self.grid):
            raise ValueError(f"chunk shape {self.grid} does not fit an array of shape {self.shape}")

    @property
    def metadata_path(self) -> str:
        """The store key of the metadata document."""
        return prefix_of(self.path) + self.metadata_key

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """The store key of the chunk at ``coords``."""
        indices = self.separator.join(map(str, coords))
        if self.encoding == "default":
            name = "c" + self.separator + indices if indices else "c"
        else:
            name = indices or "0"
        return prefix_of(self.path) + name

    def parts(self, selection: Any) -> list[Part]:
        """The selection cut into one part per stored chunk it touches."""
        return list(split(normalize_selection(selection, self.shape), self.grid))

    def keys(self, selection: Any) -> list[str]:
        """The keys of the stored chunks a selection touches."""
        return [self.chunk_key(part.coords) for part in self.parts(selection)]


def normalize_selection(selection: Any, shape: tuple[int, ...]) -> tuple[Axis, ...]:
    """One ``Axis`` per dimension of a basic selection, bounds-checked like numpy.

    Raises
    ------
    IndexError
        If an index is out of bounds or there are too many indices.
    TypeError
        If the selection is not basic (lists, arrays, masks, ``None``, negative steps).
    """
    items = selection if isinstance(selection, tuple) else (selection,)
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("a selection may contain at most one Ellipsis ('...')")
    at = next((i for i, item in enumerate(items) if item is Ellipsis), None)
    if at is not None:
        fill = (slice(None),) * (len(shape) - len(items) + 1)
        items = items[:at] + fill + items[at + 1:]
    if len(items) > len(shape):
        raise IndexError(
            f"too many indices for an array of shape {shape}: {len(items)} given"
        )
    items = items + (slice(None),) * (len(shape) - len(items))
    pairs = enumerate(zip(items, shape, strict=True))
    return tuple(_axis(item, size, dim) for dim, (item, size) in pairs)


def _axis(item: Any, size: int, dim: int) -> Axis:
    if isinstance(item, slice):
        start, stop, step = item.indices(size)
        if step < 1:
            raise TypeError(
                f"synchronized writes take slices with positive steps; axis {dim} has step {step}"
            )
        return (start, max(stop, start), step)
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(f"synchronized writes take basic selections; axis {dim} has a boolean")
    try:
        index = operator.index(item)
    except TypeError:
        raise TypeError(
            f"synchronized writes take basic selections (integers, slices, ...); axis {dim} "
            f"has {type(item).__name__} {item!r}"
        ) from None
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for axis {dim} with size {size}")
    return index % size if size else index


def selection_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The shape of what a normalized selection selects."""
    return tuple(len(range(*axis)) for axis in axes if not isinstance(axis, int))


def _axis_parts(axis: Axis, chunk: int) -> list[tuple[int, int | slice, slice | None]]:
    """(chunk index, selection in array coordinates, slice of the value) per chunk."""
    if isinstance(axis, int):
        return [(axis // chunk, axis, None)]
    start, stop, step = axis
    count = len(range(start, stop, step))
    if count == 0:
        return []
    last = start + (count - 1) * step
    parts = []
    for index in range(start // chunk, last // chunk + 1):
        low, high = max(start, index * chunk), min(stop, (index + 1) * chunk)
        first = -(-(low - start) // step)  # ceil: the first selected element in the chunk
        end = -(-(high - start) // step)
        if first < end:
            cut = slice(start + first * step, start + (end - 1) * step + 1, step)
            parts.append((index, cut, slice(first, end)))
    return parts


def split(axes: tuple[Axis, ...], grid: tuple[int, ...]) -> Iterator[Part]:
    """The parts of a normalized selection, one per stored chunk, in grid order."""
    per_axis = [_axis_parts(axis, chunk) for axis, chunk in zip(axes, grid, strict=True)]
    for combination in itertools.product(*per_axis):
        yield Part(
            coords=tuple(index for index, _, _ in combination),
            selection=tuple(cut for _, cut, _ in combination),
            value_selection=tuple(part for _, _, part in combination if part is not None),
        )


# One axis' parts, grouped: (chunk indices, selection, slice of the value).
_AxisGroup = tuple[tuple[int, ...], int | slice, slice | None]


def boxes(axes: tuple[Axis, ...], grid: tuple[int, ...], limit: int) -> Iterator[Box]:
    """The selection cut into blocks of at most ``limit`` chunks each, in grid order.

    Consecutive chunks along the last axes are grouped first, so a block is
    a run of neighbouring chunks that one zarr call writes; every chunk the
    selection touches is in exactly one block.

    Examples
    --------
    >>> axes = normalize_selection(np.s_[2:10, 0:3], (12, 3))
    >>> for box in boxes(axes, (3, 3), limit=2):
    ...     print(box.coords, box.selection)
    ((0, 0), (1, 0)) (slice(2, 6, 1), slice(0, 3, 1))
    ((2, 0), (3, 0)) (slice(6, 10, 1), slice(0, 3, 1))
    """
    if limit < 1:
        raise ValueError(f"a block holds at least one chunk, not {limit}")
    per_axis = [_axis_parts(axis, chunk) for axis, chunk in zip(axes, grid, strict=True)]
    room = limit
    grouped: list[list[_AxisGroup]] = []
    for parts in reversed(per_axis):  # the last axes first: their chunks are neighbours
        size = max(1, min(len(parts), room))
        room = max(1, room // size)
        grouped.append([_merged(parts[i:i + size]) for i in range(0, len(parts), size)])
    grouped.reverse()
    for combination in itertools.product(*grouped):
        yield Box(
            coords=tuple(itertools.product(*(indices for indices, _, _ in combination))),
            selection=tuple(cut for _, cut, _ in combination),
            value_selection=tuple(part for _, _, part in combination if part is not None),
        )


def _merged(parts: list[tuple[int, int | slice, slice | None]]) -> _AxisGroup:
    """Consecutive parts of one axis as one: the union of their cuts and value slices."""
    indices = tuple(index for index, _, _ in parts)
    first, last = parts[0], parts[-1]
    if isinstance(first[1], int):  # an integer selects one chunk of its axis
        return indices, first[1], None
    cut = slice(first[1].start, last[1].stop, first[1].step)  # type: ignore[union-attr]
    return indices, cut, slice(first[2].start, last[2].stop)  # type: ignore[union-attr]


def broadcast_value(value: Any, shape: tuple[int, ...]) -> Any:
    """``value`` as an array of ``shape`` (a view), or unchanged if it is a scalar."""
    if np.ndim(value) == 0:
        return value
    array = np.asanyarray(value)
    try:
        return np.broadcast_to(array, shape)
    except ValueError:
        raise ValueError(
            f"a value of shape {array.shape} cannot be written to a selection of shape {shape}"
        ) from None
