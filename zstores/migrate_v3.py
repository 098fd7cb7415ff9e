"""Migrate a Zarr format 2 hierarchy to format 3 in place, on any store: ``migrate_2to3``.

Every ``.zgroup`` and ``.zarray`` (with its ``.zattrs``) gets a ``zarr.json``
beside it, built by ``zstores.metadata_v3``; chunks are not touched (the
arrays keep the ``v2`` chunk key encoding).  A group that held ``.zmetadata``
gets format 3 consolidated metadata in its ``zarr.json``, which
zarr-python 3's own ``migrate_v2_to_v3`` refuses to do.

The migration is all or nothing before it writes: every document is built and
checked first, so an array format 3 cannot express (an object dtype ...)
stops it with nothing written.  The ``zarr.json`` keys are then written in one
``setitems`` (one transaction on SQLite and LMDB), deepest first, so on other
stores a crash leaves at worst some extra ``zarr.json`` beside intact v2
metadata; running again completes it (a ``zarr.json`` equal to the one it
would write is accepted, any other is refused).  The v2 documents are
deleted only when asked, after every ``zarr.json`` is written, in an order
(``.zarray``/``.zgroup`` deepest first, then ``.zattrs``, then
``.zmetadata``) that lets a run stopped halfway be finished by running again:
a node whose v2 document is gone is taken as its ``zarr.json`` says.

Examples
--------
>>> import zstores
>>> store = zstores.MemoryStore()
>>> zstores.init_group(store)
>>> zstores.init_array(store, shape=(4,), chunks=(2,), dtype="<f8", path="t")
>>> result = migrate_2to3(store, remove_v2_metadata=True)
>>> sorted(result.written), result.removed
(['t/zarr.json', 'zarr.json'], ['t/.zarray', '.zgroup'])
>>> sorted(store)
['t/zarr.json', 'zarr.json']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._progress import Progress, in_batches, listed
from .base import Store
from .errors import UnsupportedOperationError
from .metadata import v3 as metadata_v3
from .metadata.documents import (
    ARRAY_V2,
    ATTRS_V2,
    CONSOLIDATED_V2,
    GROUP_V2,
    NODE_V3,
    V2_NAMES,
    MetadataError,
    load_json,
)
from .metadata.nodes import classify

__all__ = ["V2_METADATA_NAMES", "BrokenMetadataError", "Migration", "migrate_2to3",
           "plan_2to3"]

#: The key names of format 2 metadata, removed by ``remove_v2_metadata=True``.
V2_METADATA_NAMES = V2_NAMES


@dataclass
class Migration:
    """What a migration writes and removes.

    ``written`` maps each new ``zarr.json`` key to its bytes (deepest first,
    the root last); ``unchanged`` lists the ``zarr.json`` keys already holding
    exactly those bytes (a second run); ``removed`` the v2 keys deleted (or,
    in a plan, to delete); ``arrays``/``groups``/``consolidated`` count nodes
    and the groups that received consolidated metadata.
    """

    written: dict[str, bytes] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    arrays: int = 0
    groups: int = 0
    consolidated: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, why): left as v2


class BrokenMetadataError(MetadataError):
    """Metadata documents break the specification: a migration would write what zarr refuses.

    ``problems`` lists ``(key, rule broken)`` for every one of them, checked
    by the rules ``zstores verify`` applies (``zstores.metadata.nodes.classify``).
    """

    def __init__(self, problems: list[tuple[str, str]], store: object) -> None:
        self.problems = problems
        key, why = problems[0]
        count = f"{len(problems)} metadata documents break" if len(problems) > 1 else \
            "a metadata document breaks"
        super().__init__(f"{count} the Zarr specification in {store!r} (first: {key!r} "
                         f"{why}); nothing was migrated")


def _split(key: str) -> tuple[str, str]:
    """``(node path, name)`` of a metadata key."""
    path, _, name = key.rpartition("/")
    return path, name


def _prefix(path: str) -> str:
    return f"{path}/" if path else ""


def _read(store: Store, progress: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every v2 metadata document by key, and every ``zarr.json`` by node path, decoded."""
    keys = listed(store.keys(), progress)
    wanted = [key for key in keys if _split(key)[1] in V2_METADATA_NAMES]
    nodes = [key for key in keys if _split(key)[1] == NODE_V3]
    values: dict[str, Any] = {}
    for found in in_batches(store.getitems, wanted + nodes, progress, "reading metadata"):
        values.update(found)
    v2 = {key: load_json(values[key], key) for key in sorted(wanted) if key in values}
    v3 = {_split(key)[0]: load_json(values[key], key) for key in nodes if key in values}
    return v2, v3


def _attributes(documents: Mapping[str, Any], path: str) -> dict[str, Any]:
    key = _prefix(path) + ATTRS_V2
    attributes = documents.get(key, {})
    if not isinstance(attributes, dict):
        raise MetadataError(f"{key!r} must hold a JSON object, not {type(attributes).__name__}")
    return attributes


def _nodes(documents: Mapping[str, Any], existing: Mapping[str, Any],
           store: Store) -> dict[str, dict[str, Any]]:
    """Each v2 node's format 3 document, and a group for every ancestor without one.

    An ancestor that already has a ``zarr.json`` keeps it (a run that was
    interrupted while removing v2 metadata left it there).
    """
    arrays = {_split(key)[0] for key in documents if _split(key)[1] == ARRAY_V2}
    groups = {_split(key)[0] for key in documents if _split(key)[1] == GROUP_V2}
    both = sorted(arrays & groups)
    if both:
        raise MetadataError(f"{_prefix(both[0])}.zarray and .zgroup are both in {store!r}: "
                            "is it an array or a group?")
    ancestors = set()
    for path in arrays | groups:
        # zarr-python 3 finds a node only through groups: give every ancestor one.
        parts = path.split("/") if path else []
        for depth in range(len(parts)):
            ancestor = "/".join(parts[:depth])
            if ancestor in arrays:
                raise MetadataError(f"{ancestor!r} is an array with a node {path!r} below it "
                                    f"in {store!r}")
            ancestors.add(ancestor)
    nodes = {path: metadata_v3.array_from_v2(documents[_prefix(path) + ARRAY_V2],
                                             _attributes(documents, path),
                                             key=_prefix(path) + ARRAY_V2)
             for path in arrays}
    nodes.update({path: metadata_v3.group_document(_attributes(documents, path))
                  for path in groups})
    for path in ancestors - groups:
        known = existing.get(path)
        nodes[path] = dict(known) if metadata_v3.is_group(known) else \
            metadata_v3.group_document(_attributes(documents, path))
    return nodes


def _consolidate(nodes: dict[str, dict[str, Any]], existing: Mapping[str, Any],
                 documents: Mapping[str, Any]) -> list[str]:
    """Give every group that had ``.zmetadata`` format 3 consolidated metadata; their paths.

    The listing holds every node below the group: those migrated now and
    those that already have a ``zarr.json`` only (already format 3).
    """
    everything = {**existing, **nodes}
    done = []
    for key in documents:
        path, name = _split(key)
        if name != CONSOLIDATED_V2 or not metadata_v3.is_group(nodes.get(path)):
            continue
        prefix = _prefix(path)
        below = {other[len(prefix):]: document for other, document in everything.items()
                 if other != path and other.startswith(prefix)}
        nodes[path] = metadata_v3.with_consolidated(nodes[path],
                                                    metadata_v3.consolidated_field(below))
        done.append(path)
    return done


def _depth(path: str) -> int:
    return path.count("/") + 1 if path else 0


def _removal_order(key: str) -> tuple[int, int, str]:
    """Node documents first (deepest first), then ``.zattrs``, then ``.zmetadata``.

    So a run stopped midway leaves v2 leftovers that a new run still plans
    the same ``zarr.json`` from (a node whose ``.zarray`` is gone is kept as
    its ``zarr.json`` says) and then removes.
    """
    path, name = _split(key)
    rank = {ARRAY_V2: 0, GROUP_V2: 0, ATTRS_V2: 1, CONSOLIDATED_V2: 2}[name]
    return rank, -_depth(path), key


def _problems_v2(documents: Mapping[str, Any]) -> dict[str, str]:
    """``{key: why}`` for each ``.zarray``/``.zgroup`` that breaks the v2 specification."""
    found = {}
    for key, document in documents.items():
        path, name = _split(key)
        if name in (ARRAY_V2, GROUP_V2):
            problems = classify(path, name, document).problems
            if problems:
                found[key] = "breaks the spec: " + "; ".join(problems)
    return found


def _problems_v3(nodes: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """``{path: why}`` for each built ``zarr.json`` verify would reject (never written)."""
    found = {}
    for path, document in nodes.items():
        problems = classify(path, NODE_V3, document).problems
        if problems:
            found[path] = "would become a zarr.json that breaks the spec (v3): " + \
                "; ".join(problems)
    return found


def _without(documents: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """``documents`` less the node documents ``keys`` and the ``.zattrs`` beside them."""
    paths = {_split(key)[0] for key in keys}
    return {key: document for key, document in documents.items()
            if key not in keys and not (_split(key)[1] == ATTRS_V2 and _split(key)[0] in paths)}


def _checked(documents: dict[str, Any], existing: Mapping[str, Any], store: Store,
             skip_broken: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]],
                                         list[tuple[str, str]]]:
    """The documents and nodes to migrate, and the broken ones left out (when asked)."""
    broken = _problems_v2(documents)
    if broken and not skip_broken:
        raise BrokenMetadataError(sorted(broken.items()), store)
    documents = _without(documents, set(broken))
    nodes = _nodes(documents, existing, store)
    unreadable = {_prefix(path) + ARRAY_V2: why for path, why in _problems_v3(nodes).items()}
    if unreadable and not skip_broken:
        raise BrokenMetadataError(sorted(unreadable.items()), store)
    if unreadable:
        documents = _without(documents, set(unreadable))
        nodes = _nodes(documents, existing, store)
    return documents, nodes, sorted({**broken, **unreadable}.items())


def plan_2to3(store: Store, *, skip_broken: bool = False,
              progress: Progress | None = None) -> Migration:
    """What ``migrate_2to3`` would write, computed without writing anything.

    Every ``.zarray`` and ``.zgroup`` is first checked by the rules ``zstores
    verify`` applies, and so is every ``zarr.json`` built from them.

    Parameters
    ----------
    store : zstores.Store
        The store.
    skip_broken : bool
        Leave the nodes whose documents break the specification as they
        are (listed in ``skipped``) and migrate the rest, instead of
        refusing the whole migration.
    progress : callable, optional
        ``progress(stage, done, total)``, called as the keys are listed
        (``"listing keys"``) and the metadata read (``"reading metadata"``);
        see ``zstores._progress``.

    Raises
    ------
    BrokenMetadataError
        If a document breaks the specification (unless ``skip_broken``);
        ``problems`` names every one.
    MetadataError
        If there is no v2 metadata, if an array cannot be expressed in format 3
        (the message names its ``.zarray`` and why), or if a node already has a
        different ``zarr.json``.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store)
    >>> sorted(plan_2to3(store).written), len(store)
    (['zarr.json'], 1)
    """
    documents, existing = _read(store, progress)
    if not documents:
        raise MetadataError(f"no Zarr format 2 metadata (.zgroup or .zarray) in {store!r}: "
                            "nothing to migrate")
    documents, nodes, skipped = _checked(documents, existing, store, skip_broken)
    result = Migration(arrays=sum(1 for d in nodes.values() if d["node_type"] == "array"),
                       groups=sum(1 for d in nodes.values() if d["node_type"] == "group"),
                       consolidated=_consolidate(nodes, existing, documents), skipped=skipped)
    for path in sorted(nodes, key=lambda p: (-_depth(p), p)):
        key, value = _prefix(path) + NODE_V3, metadata_v3.encode(nodes[path])
        if path not in existing:
            result.written[key] = value
        elif metadata_v3.encode(existing[path]) == value or existing[path] == json.loads(value):
            result.unchanged.append(key)
        else:
            raise MetadataError(f"{key!r} already exists in {store!r} with other content "
                                "than the migration would write (delete it to migrate again)")
    result.removed = sorted(documents, key=_removal_order)
    return result


def migrate_2to3(store: Store, *, dry_run: bool = False, remove_v2_metadata: bool = False,
                 skip_broken: bool = False, progress: Progress | None = None) -> Migration:
    """Write format 3 metadata for the format 2 hierarchy in ``store``.

    Parameters
    ----------
    store : zstores.Store
        The store, open for writing (unless ``dry_run``).
    dry_run : bool
        Compute and return what would be written and removed; write nothing.
    remove_v2_metadata : bool
        After every ``zarr.json`` is written, delete the ``.zarray``,
        ``.zgroup``, ``.zattrs`` and ``.zmetadata`` keys.  Without it both
        sets stay, and zarr-python 2 still reads the hierarchy.
    skip_broken : bool
        Migrate the nodes whose metadata is valid and leave the others as
        they are (``skipped``), instead of refusing the whole migration.
    progress : callable, optional
        ``progress(stage, done, total)``, called as ``plan_2to3`` calls it,
        then as the documents are written (``"writing metadata"``) and the
        v2 ones removed (``"removing v2 metadata"``).  The documents are
        then written in batches, deepest nodes first as without it.

    Returns
    -------
    Migration
        ``removed`` is empty unless ``remove_v2_metadata`` (a dry run lists
        what it would remove).

    Raises
    ------
    MetadataError
        As ``plan_2to3`` (``BrokenMetadataError`` naming every broken
        document); nothing is written then.
    UnsupportedOperationError
        If ``remove_v2_metadata`` and the store cannot delete keys (nothing written).

    Examples
    --------
    >>> import numcodecs, zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_array(store, shape=(3,), dtype=object, object_codec=numcodecs.VLenUTF8())
    >>> migrate_2to3(store)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: '.zarray' cannot be written as Zarr format 3: object dtype ...
    >>> sorted(store)
    ['.zarray']
    """
    if remove_v2_metadata and not store.supports_deletes:
        raise UnsupportedOperationError(f"{store!r} cannot delete keys: migrate without "
                                        "remove_v2_metadata")
    result = plan_2to3(store, skip_broken=skip_broken, progress=progress)
    if not remove_v2_metadata:
        result.removed = []
    if dry_run:
        return result
    if result.written:
        in_batches(store.setitems, result.written, progress, "writing metadata")
    if result.removed:
        in_batches(store.delitems, result.removed, progress, "removing v2 metadata")
    return result
