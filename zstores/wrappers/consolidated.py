"""Consolidated metadata: every metadata document of a hierarchy in one key.

Zarr format 2: ``consolidate_metadata`` writes ``.zmetadata`` (every
``.zarray``, ``.zgroup`` and ``.zattrs``) in the layout zarr-python 2.18
writes, which zarr-python 2 and 3 read with their ``open_consolidated``.

Zarr format 3: it writes the group's ``zarr.json`` again with a
``consolidated_metadata`` field listing every node's ``zarr.json`` below it,
as zarr-python 3 does (an extension of zarr-python 3, not part of the format
3 specification; ``zstores.metadata_v3`` builds it), which zarr-python 3
reads with ``zarr.open_consolidated`` or ``zarr.open_group(...,
use_consolidated=True)``.

``open_consolidated`` reads either back into a ``ConsolidatedStore``, which
answers metadata reads from memory and passes chunk keys to the store.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._progress import Progress, in_batches, listed
from ..base import Buffer, Mode, Store
from ..errors import ReadOnlyError
from ..keys import normalize_storage_path, prefix_of
from ..metadata import v2
from ..metadata import v3 as metadata_v3
from ..metadata.consolidated import (
    CONSOLIDATED_FORMAT,
    checked_document,
    checked_document_v3,
    document_format,
)
from ..metadata.documents import (
    CONSOLIDATED_V2,
    GROUP_V2,
    NODE_V3,
    V2_DOCUMENT_NAMES,
    MetadataError,
    load_json,
)
from .delegate import WrapperStore

if TYPE_CHECKING:
    from ..transactions import ChangeSet

__all__ = ["ConsolidatedStore", "consolidate_metadata", "open_consolidated"]

#: The metadata documents a consolidation gathers, by the last segment of their key.
METADATA_NAMES = V2_DOCUMENT_NAMES
#: The key (under the consolidated group's path) of the consolidated document.
CONSOLIDATED_KEY = CONSOLIDATED_V2
#: A format 3 node's metadata key; the consolidated group's own holds the document.
NODE_KEY = NODE_V3


def _name(key: str) -> str:
    return key.rpartition("/")[2]


class ConsolidatedStore(WrapperStore):
    """A store whose Zarr metadata comes from one consolidated document held in memory.

    Format 2 (a ``.zmetadata`` document): under ``path``, every ``.zarray``,
    ``.zgroup`` and ``.zattrs`` key is answered from the document (encoded as
    zarr-python 2 encodes metadata); one that the document lacks does not
    exist, even if the store has it.  Those keys and ``path/.zmetadata``
    itself (read from the store) are read-only.

    Format 3 (a ``consolidated_metadata`` object): every ``zarr.json`` below
    ``path`` is answered from the document (encoded as zarr-python 3 encodes
    it; a sub-group's without consolidated metadata of its own, as the store
    holds it); ``path/zarr.json`` itself is the store's and read-only.

    Writing, deleting, renaming or removing a read-only key raises
    ``zstores.ReadOnlyError`` naming the key.  Every other key, and
    everything outside ``path``, passes through to the store, writable unless
    the mode is ``"r"``.

    Usually made by ``open_consolidated`` or ``consolidate_metadata``.

    Parameters
    ----------
    store : zstores.Store
        The store holding the hierarchy.  ``close()`` closes it too.
    metadata : Mapping
        The consolidated document, keys relative to ``path``: for format 2
        ``{"metadata": {key: document}, "zarr_consolidated_format": 1}``; for
        format 3 the ``consolidated_metadata`` object of ``path/zarr.json``,
        ``{"kind": "inline", "must_understand": false, "metadata": {node path:
        zarr.json document}}``.
    path : str
        The consolidated group's path ("" for the root).
    mode : {"r", "r+", "a", None}
        ``"r"`` (default) read-only; ``"r+"``/``"a"`` allow writes to chunk
        keys; ``None`` follows the store.

    Notes
    -----
    Pickling pickles the store, the document and ``path``.  Listings come
    from the store with its metadata keys replaced by the document's, so
    they still ask the store for the chunk keys.  Capability flags are the
    store's.

    Examples
    --------
    >>> import json
    >>> from zstores import MemoryStore, ReadOnlyError
    >>> from zstores.wrappers import ConsolidatedStore
    >>> document = {"metadata": {".zgroup": {"zarr_format": 2}},
    ...             "zarr_consolidated_format": 1}
    >>> store = ConsolidatedStore(MemoryStore(), document, mode="r+")
    >>> json.loads(store[".zgroup"])
    {'zarr_format': 2}
    >>> store["x/0"] = b"chunk"
    >>> sorted(store)
    ['.zgroup', 'x/0']
    >>> try:
    ...     store[".zattrs"] = b"{}"
    ... except ReadOnlyError as error:
    ...     print("refused")
    refused
    """

    def __init__(
        self,
        store: Store,
        metadata: Mapping[str, Any],
        *,
        path: str = "",
        mode: Mode | None = "r",
    ) -> None:
        super().__init__(store, mode=mode)
        self._path = normalize_storage_path(path)
        self._prefix = prefix_of(self._path)
        self._zarr_format = document_format(metadata)
        if self._zarr_format == 3:
            self._consolidated_key = self._prefix + NODE_KEY
            self._document = checked_document_v3(metadata, self._consolidated_key)
            self._names: frozenset[str] = frozenset({NODE_KEY})
        else:
            self._consolidated_key = self._prefix + CONSOLIDATED_KEY
            self._document = checked_document(metadata, self._consolidated_key)
            self._names = METADATA_NAMES
        self._metadata: dict[str, bytes] = {}
        self._children: dict[str, set[str]] = {}
        for key, value in self._encoded_documents():
            key = self.normalize(key)
            self._metadata[key] = value
            self._add_ancestors(key)

    def _encoded_documents(self) -> Iterable[tuple[str, bytes]]:
        """``(key, bytes)`` of each document served, encoded as its zarr-python writes it."""
        for relative, document in self._document["metadata"].items():
            if self._zarr_format == 2:
                yield self._prefix + relative, v2.encode(document)
            else:
                # A sub-group's zarr.json in the store has no consolidated metadata; the
                # empty one the listing gives it would hide its members from zarr-python.
                if metadata_v3.is_group(document):
                    document = metadata_v3.with_consolidated(document, None)
                yield self._prefix + relative + "/" + NODE_KEY, metadata_v3.encode(document)

    def _add_ancestors(self, key: str) -> None:
        parts = key.split("/")
        for depth in range(len(parts)):
            prefix = prefix_of("/".join(parts[:depth]))
            self._children.setdefault(prefix, set()).add(parts[depth])

    # ------------------------------------------------------------ the rules
    @property
    def path(self) -> str:
        """The consolidated group's path ("" for the root)."""
        return self._path

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The consolidated document (do not modify it); ``["metadata"]`` lists the nodes."""
        return self._document

    @property
    def zarr_format(self) -> int:
        """2 for a ``.zmetadata`` document, 3 for a ``zarr.json`` consolidated_metadata."""
        return self._zarr_format

    def _served(self, key: str) -> bool:
        """True for the keys answered from the document (present or not)."""
        return (_name(key) in self._names and key.startswith(self._prefix)
                and key != self._consolidated_key)

    def _read_only(self, key: str) -> bool:
        return self._served(key) or key == self._consolidated_key

    def _refuse(self, key: str) -> ReadOnlyError:
        return ReadOnlyError(
            f"{key!r} is Zarr metadata, read-only in {type(self).__name__} (consolidated in "
            f"{self._consolidated_key!r}); change metadata in the store itself and run "
            "zstores.consolidate_metadata again"
        )

    def _check_keys(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self._read_only(key):
                raise self._refuse(key)

    def _overlaps(self, prefix: str) -> bool:
        """Whether the prefix ("" for all) can hold keys answered from the document."""
        return prefix.startswith(self._prefix) or self._prefix.startswith(prefix)

    def _check_prefix(self, prefix: str) -> None:
        """Refuse removing or moving a prefix that holds read-only keys."""
        if not self._overlaps(prefix):
            return
        self._check_keys(sorted(key for key in self._metadata if key.startswith(prefix)))
        self._check_keys(super()._list_prefix(prefix))

    # --------------------------------------------------------------- reads
    def _get(self, key: str) -> bytes:
        if self._served(key):
            try:
                return self._metadata[key]
            except KeyError:
                raise KeyError(key) from None
        return super()._get(key)

    def _contains(self, key: str) -> bool:
        if self._served(key):
            return key in self._metadata
        return super()._contains(key)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        if self._served(key):
            return Store._get_range(self, key, start, length)
        return super()._get_range(key, start, length)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found = {key: self._metadata[key] for key in keys if key in self._metadata}
        rest = [key for key in keys if not self._served(key)]
        if rest:
            found.update(super()._get_many(rest))
        return found

    def _getsize_key(self, key: str) -> int:
        if self._served(key):
            return len(self._get(key))
        return super()._getsize_key(key)

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        keys = super()._list_prefix(prefix)
        if not self._overlaps(prefix):
            return keys
        listed = [key for key in keys if not self._served(key)]
        listed += [key for key in self._metadata if key.startswith(prefix)]
        return listed

    def _listdir(self, prefix: str) -> Iterable[str]:
        names = super()._listdir(prefix)
        if not self._overlaps(prefix):
            return names
        kept = {name for name in names if not self._served(prefix + name)}
        return kept | self._children.get(prefix, set())

    def _len(self) -> int:
        return sum(1 for _ in self._list_prefix(""))

    def _getsize_prefix(self, prefix: str) -> int:
        total = super()._getsize_prefix(prefix)
        if not self._overlaps(prefix):
            return total
        hidden = [key for key in super()._list_prefix(prefix) if self._served(key)]
        total -= sum(super(ConsolidatedStore, self)._getsize_key(key) for key in hidden)
        return total + sum(len(v) for k, v in self._metadata.items() if k.startswith(prefix))

    # -------------------------------------------------------------- writes
    def _set(self, key: str, value: Buffer) -> None:
        self._check_keys([key])
        super()._set(key, value)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        self._check_keys(key for key, _ in items)
        super()._set_many(items)

    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        self._check_keys([key])
        return super()._set_if_absent(key, value)

    def _replace_if(self, key: str, expected: Any, value: Buffer) -> bool:
        self._check_keys([key])
        return super()._replace_if(key, expected, value)

    def _delete(self, key: str) -> None:
        self._check_keys([key])
        super()._delete(key)

    def _delete_many(self, keys: list[str]) -> None:
        self._check_keys(keys)
        super()._delete_many(keys)

    def _rmdir(self, prefix: str) -> None:
        self._check_prefix(prefix)
        super()._rmdir(prefix)

    def _remove_empty_folder(self, prefix: str) -> bool:
        if self._overlaps(prefix) and any(key.startswith(prefix) for key in self._metadata):
            return False  # the consolidated metadata shows keys below it
        return super()._remove_empty_folder(prefix)

    def _clear(self) -> None:
        self._check_prefix("")
        super()._clear()

    def _rename(self, src: str, dst: str) -> None:
        self._check_keys([src, dst])
        src_prefix, dst_prefix = prefix_of(src), prefix_of(dst)
        self._check_prefix(src_prefix)
        if self._overlaps(dst_prefix):
            # A key moved into the consolidated group could become metadata there.
            moved = super()._list_prefix(src_prefix)
            self._check_keys(dst_prefix + key[len(src_prefix):] for key in moved)
        super()._rename(src, dst)

    # -------------------------------------------------------- transactions
    def _check_transaction_keys(self, keys: list[str]) -> None:
        self._check_keys(keys)
        super()._check_transaction_keys(keys)

    def _check_transaction_prefix(self, prefix: str) -> None:
        self._check_prefix(prefix)
        super()._check_transaction_prefix(prefix)

    def _commit_changes(self, changes: ChangeSet) -> None:
        # Metadata keys were read from the document, which does not change:
        # the store's own values of them are not what the transaction saw.
        changes.reads = {key: seen for key, seen in changes.reads.items()
                         if not self._served(key)}
        super()._commit_changes(changes)

    # ------------------------------------------------------------ identity
    def _wrapper_params(self) -> dict[str, Any]:
        return {"metadata": self._document, "path": self._path}

    def _repr_params(self) -> dict[str, Any]:
        return {"path": self._path}


def _as_store(store: Store | str | os.PathLike[str], mode: str) -> tuple[Store, bool]:
    """The store, and whether it was opened here (from a URL or path)."""
    if isinstance(store, Store):
        return store, False
    if isinstance(store, (str, os.PathLike)):
        from ..urls import open_store

        return open_store(store, mode=mode), True  # type: ignore[arg-type]
    raise TypeError(
        f"expected a zstores.Store, a URL or a path, not {type(store).__name__} "
        "(wrap a plain mapping in zstores.MemoryStore first)"
    )


def _format_at(store: Store, path: str) -> int:
    """The Zarr format of the node at ``path``: 3 if it has ``zarr.json`` and no ``.zgroup``."""
    prefix = prefix_of(path)
    return 3 if prefix + NODE_KEY in store and prefix + GROUP_V2 not in store else 2


def _check_format(zarr_format: int | None) -> None:
    if zarr_format not in (None, 2, 3):
        raise ValueError(f"invalid zarr_format {zarr_format!r}; expected 2, 3 or None "
                         "(None: 3 if the group has zarr.json and no .zgroup, else 2)")


def _metadata_documents(store: Store, path: str, names: frozenset[str],
                        skip: str, progress: Progress | None = None) -> dict[str, Any]:
    """Every metadata document below the group ``path`` (but ``skip``), decoded, by key."""
    keys = [key for key in listed(store.list_prefix(path), progress)
            if _name(key) in names and key != skip]
    values: dict[str, Any] = {}
    for found in in_batches(store.getitems, keys, progress, "reading metadata"):
        values.update(found)
    return {key: load_json(value, key) for key, value in sorted(values.items())}


def _consolidate_v2(store: Store, path: str, progress: Progress | None) -> dict[str, Any]:
    prefix = prefix_of(path)
    found = _metadata_documents(store, path, METADATA_NAMES, prefix + CONSOLIDATED_KEY,
                                progress)
    documents = {key[len(prefix):]: document for key, document in found.items()}
    document = {"metadata": documents, "zarr_consolidated_format": CONSOLIDATED_FORMAT}
    store[prefix + CONSOLIDATED_KEY] = v2.encode(document)
    return document


def _consolidate_v3(store: Store, path: str, progress: Progress | None) -> dict[str, Any]:
    prefix = prefix_of(path)
    key = prefix + NODE_KEY
    try:
        group = load_json(store[key], key)
    except KeyError:
        raise KeyError(f"no Zarr format 3 group at {path!r}: {key!r} is missing in "
                       f"{store!r}") from None
    if not metadata_v3.is_group(group):
        raise MetadataError(f"{key!r} in {store!r} is not a Zarr format 3 group (node_type "
                            f"{group.get('node_type') if isinstance(group, dict) else group!r})"
                            "; only groups hold consolidated metadata")
    found = _metadata_documents(store, path, frozenset({NODE_KEY}), key, progress)
    nodes = {node_key[len(prefix):-len(NODE_KEY) - 1]: document
             for node_key, document in found.items()}
    field = metadata_v3.consolidated_field(nodes)
    store[key] = metadata_v3.encode(metadata_v3.with_consolidated(group, field))
    return field


def consolidate_metadata(
    store: Store | str | os.PathLike[str], path: str = "", *, mode: Mode = "r",
    zarr_format: int | None = None, progress: Progress | None = None,
) -> ConsolidatedStore:
    """Gather every Zarr metadata document under the group at ``path`` into one.

    Format 2: the document is ``path/.zmetadata``, ``{"metadata": {key:
    document}, "zarr_consolidated_format": 1}`` with keys relative to
    ``path``, in the JSON layout of zarr-python 2.18: for ``path=""`` the
    bytes equal those of zarr-python 2.18's ``zarr.consolidate_metadata``, and
    zarr-python 2 and 3 read it with ``zarr.open_consolidated``.  zarr-python 3
    also reads one at a sub-group's path (``zarr.open_consolidated(...,
    path=path)``); zarr-python 2 reads only the root's.

    Format 3: ``path/zarr.json`` is written again with a
    ``consolidated_metadata`` field listing every ``zarr.json`` below it by
    node path, as zarr-python 3.1+ writes it (the same bytes as its
    ``zarr.consolidate_metadata`` for the same hierarchy); zarr-python 3 reads
    it with ``zarr.open_consolidated`` or ``use_consolidated=True``.

    Parameters
    ----------
    store : zstores.Store, str or os.PathLike
        The store, or a URL or path for ``zstores.open_store`` (opened with
        mode ``"r+"``; the returned store owns and closes it).
    path : str
        The group whose hierarchy is consolidated ("" for the whole store).
    mode : {"r", "r+"}
        The mode of the returned ``ConsolidatedStore``.
    zarr_format : {None, 2, 3}
        Which metadata to consolidate; ``None`` (default): 3 if ``path`` has a
        ``zarr.json`` and no ``.zgroup``, else 2.  A hierarchy with both (as
        ``zstores migrate --to 3`` leaves it) is consolidated once per format.
    progress : callable, optional
        ``progress(stage, done, total)``, called as the keys below ``path``
        are listed (``"listing keys"``) and the documents read (``"reading
        metadata"``); see ``zstores._progress``.

    Returns
    -------
    ConsolidatedStore
        The store opened with the new consolidated metadata.  Closing it
        closes ``store``.

    Raises
    ------
    MetadataError
        If a metadata key does not hold JSON, or (format 3) ``path`` is an array.
    KeyError
        Format 3 only: if ``path/zarr.json`` is missing.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store)
    >>> zstores.init_array(store, shape=(4,), chunks=(2,), dtype="<i4", path="a")
    >>> consolidated = zstores.consolidate_metadata(store)
    >>> sorted(consolidated.metadata["metadata"])
    ['.zgroup', 'a/.zarray']
    >>> consolidated["a/.zarray"] == store["a/.zarray"]
    True

    Format 3, with a hierarchy ``zstores migrate --to 3`` wrote:

    >>> from zstores.migrate_v3 import migrate_2to3
    >>> _ = migrate_2to3(store, remove_v2_metadata=True)
    >>> consolidated = zstores.consolidate_metadata(store)
    >>> consolidated.zarr_format, sorted(consolidated.metadata["metadata"])
    (3, ['a'])
    """
    _check_open_mode(mode)
    _check_format(zarr_format)
    store, owned = _as_store(store, "r+")
    try:
        path = normalize_storage_path(path)
        if (zarr_format or _format_at(store, path)) == 3:
            document = _consolidate_v3(store, path, progress)
        else:
            document = _consolidate_v2(store, path, progress)
        return ConsolidatedStore(store, document, path=path, mode=mode)
    except BaseException:
        if owned:
            store.close()
        raise


def _read_v2(store: Store, path: str) -> dict[str, Any] | None:
    key = prefix_of(path) + CONSOLIDATED_KEY
    try:
        return load_json(store[key], key)
    except KeyError:
        return None


def _read_v3(store: Store, path: str) -> dict[str, Any] | None:
    key = prefix_of(path) + NODE_KEY
    try:
        group = load_json(store[key], key)
    except KeyError:
        return None
    if not isinstance(group, dict) or group.get("consolidated_metadata") is None:
        return None
    return group["consolidated_metadata"]


def open_consolidated(
    store: Store | str | os.PathLike[str], path: str = "", mode: Mode = "r",
    zarr_format: int | None = None,
) -> ConsolidatedStore:
    """Open a store with the metadata consolidated at ``path``.

    Parameters
    ----------
    store : zstores.Store, str or os.PathLike
        The store, or a URL or path for ``zstores.open_store`` (opened with
        ``mode``; the returned store owns and closes it).
    path : str
        The consolidated group's path ("" for the root).
    mode : {"r", "r+"}
        ``"r"`` read-only; ``"r+"`` lets chunk keys be written (metadata stays
        read-only).
    zarr_format : {None, 2, 3}
        Read ``path/.zmetadata`` (2) or the ``consolidated_metadata`` of
        ``path/zarr.json`` (3); ``None`` (default): the first found, in that
        order.

    Returns
    -------
    ConsolidatedStore
        Metadata from memory, everything else from ``store``.  Closing it
        closes ``store``.

    Raises
    ------
    KeyError
        If there is no consolidated metadata (the message names what is missing).
    MetadataError
        If it is not a consolidated document zstores reads.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store, path="g")
    >>> _ = zstores.consolidate_metadata(store, path="g")
    >>> zstores.open_consolidated(store, path="g").listdir("g")
    ['.zgroup', '.zmetadata']
    >>> zstores.open_consolidated(store)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    KeyError: "no consolidated metadata: '.zmetadata' is missing in MemoryStore(mode='a') and ..."
    """
    _check_open_mode(mode)
    _check_format(zarr_format)
    store, owned = _as_store(store, mode)
    try:
        path = normalize_storage_path(path)
        document = _read_v2(store, path) if zarr_format in (None, 2) else None
        if document is None and zarr_format in (None, 3):
            document = _read_v3(store, path)
        if document is None:
            raise KeyError(f"no consolidated metadata: {_missing(store, path, zarr_format)}; "
                           f"write it with zstores.consolidate_metadata(store, path={path!r})")
        if zarr_format is not None and document_format(document) != zarr_format:
            raise MetadataError(f"the consolidated metadata at {path!r} of {store!r} is not "
                                f"format {zarr_format}")
        return ConsolidatedStore(store, document, path=path, mode=mode)
    except BaseException:
        if owned:
            store.close()
        raise


def _missing(store: Store, path: str, zarr_format: int | None) -> str:
    prefix = prefix_of(path)
    v2 = f"{prefix + CONSOLIDATED_KEY!r} is missing in {store!r}"
    v3 = f"{prefix + NODE_KEY!r} has no consolidated_metadata"
    if zarr_format == 2:
        return v2
    if zarr_format == 3:
        return f"{v3} in {store!r}"
    return f"{v2} and {v3}"


def _check_open_mode(mode: str) -> None:
    if mode not in ("r", "r+"):
        raise ValueError(
            f"invalid mode {mode!r} for consolidated metadata; expected 'r' (read-only) or "
            "'r+' (chunks writable; metadata stays read-only)"
        )
