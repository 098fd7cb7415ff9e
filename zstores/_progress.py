"""Progress reports from long library jobs (migrations, consolidation) to a caller's bar.

A job takes ``progress=None`` or a callable ``progress(stage, done, total)``:
``stage`` names the step (``"listing keys"``, ``"reading metadata"``,
``"writing metadata"`` ...), ``done`` is how many of its items are done so
far and ``total`` how many there are (None while unknown, as for a listing).
Each stage is announced with ``done=0`` first and ends with ``done`` equal to
its count.  Without a callback a job does exactly what it did before (one
listing, one ``getitems``, one ``setitems``); with one, the work goes in
batches of ``BATCH`` items so the bar moves.  The ``zstores`` commands pass a
tqdm bar (shown on a terminal only); any callable will do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["BATCH", "Progress", "listed", "report", "in_batches"]

#: ``progress(stage, done, total)``: see the module docstring.
Progress = Callable[[str, int, "int | None"], None]

#: Items a batch holds when progress is reported (one call per batch).
BATCH = 1_000

T = TypeVar("T")


def report(progress: Progress | None, stage: str, done: int, total: int | None) -> None:
    """Tell ``progress`` (if any) that ``done`` of ``total`` items of ``stage`` are done."""
    if progress is not None:
        progress(stage, done, total)


def listed(keys: Iterable[str], progress: Progress | None,
           stage: str = "listing keys") -> list[str]:
    """Every key of ``keys`` in a list, counted to ``progress`` every ``BATCH`` keys.

    Examples
    --------
    >>> seen = []
    >>> listed((str(n) for n in range(2500)), lambda *a: seen.append(a))[-1]
    '2499'
    >>> seen
    [('listing keys', 0, None), ('listing keys', 1000, None), ('listing keys', 2000, None), \
('listing keys', 2500, 2500)]
    """
    if progress is None:
        return list(keys)
    found: list[str] = []
    progress(stage, 0, None)
    for key in keys:
        found.append(key)
        if len(found) % BATCH == 0:
            progress(stage, len(found), None)
    progress(stage, len(found), len(found))
    return found


def in_batches(action: Callable[[Any], T], items: Iterable[Any] | Mapping[Any, Any],
               progress: Progress | None, stage: str) -> list[T]:
    """``action(batch)`` for ``items`` (a list or a dict): once, or per ``BATCH`` with progress.

    Returns every call's result, in order.

    Examples
    --------
    >>> seen = []
    >>> in_batches(len, dict.fromkeys(range(1500)), lambda *a: seen.append(a), "writing")
    [1000, 500]
    >>> seen
    [('writing', 0, 1500), ('writing', 1000, 1500), ('writing', 1500, 1500)]
    >>> in_batches(len, [1, 2, 3], None, "writing")
    [3]
    """
    if progress is None:
        return [action(items)]
    pairs = isinstance(items, Mapping)
    ordered = list(items.items()) if pairs else list(items)  # type: ignore[union-attr]
    total = len(ordered)
    progress(stage, 0, total)
    results = []
    for start in range(0, total, BATCH):
        batch = ordered[start:start + BATCH]
        results.append(action(dict(batch) if pairs else batch))
        progress(stage, start + len(batch), total)
    return results
