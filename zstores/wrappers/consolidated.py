"""Consolidated metadata: every ``.zarray``, ``.zgroup`` and ``.zattrs`` of a hierarchy in one key.

``consolidate_metadata`` writes ``.zmetadata`` in the layout zarr-python 2.18
writes (and zarr-python 2 and 3 read with their ``open_consolidated``);
``open_consolidated`` reads it back into a ``ConsolidatedStore``, which
answers metadata reads from memory and passes chunk keys to the store.

Zarr format 3 is not consolidated here: zarr-python 3 keeps a format 3
group's consolidated metadata inside its ``zarr.json`` (an extension that is
not part of the format 3 specification), so both functions refuse a format 3
group with ``UnsupportedOperationError`` and point to zarr-python 3's own
functions, which work on any store through ``zstores.zarr_store``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..base import Buffer, Mode, Store
from ..errors import ReadOnlyError, UnsupportedOperationError
from ..hierarchy import MetadataError, _json_bytes
from ..keys import normalize_storage_path, prefix_of
from .delegate import WrapperStore

__all__ = ["ConsolidatedStore", "consolidate_metadata", "open_consolidated"]

#: The metadata documents a consolidation gathers, by the last segment of their key.
METADATA_NAMES = frozenset({".zarray", ".zgroup", ".zattrs"})
#: The key (under the consolidated group's path) of the consolidated document.
CONSOLIDATED_KEY = ".zmetadata"
#: The ``zarr_consolidated_format`` written and understood.
CONSOLIDATED_FORMAT = 1


def _name(key: str) -> str:
    return key.rpartition("/")[2]


class ConsolidatedStore(WrapperStore):
    """A store whose Zarr metadata comes from one consolidated document held in memory.

    Under ``path``, every ``.zarray``, ``.zgroup`` and ``.zattrs`` key is
    answered from the document (encoded as zarr-python 2 encodes metadata);
    one that the document lacks does not exist, even if the store has it.
    Those keys and ``path/.zmetadata`` itself (read from the store) are
    read-only: writing, deleting, renaming or removing one raises
    ``zstores.ReadOnlyError`` naming the key.  Every other key, and
    everything outside ``path``, passes through to the store, writable unless
    the mode is ``"r"``.

    Usually made by ``open_consolidated`` or ``consolidate_metadata``.

    Parameters
    ----------
    store : zstores.Store
        The store holding the hierarchy.  ``close()`` closes it too.
    metadata : Mapping
        The consolidated document: ``{"metadata": {key: document},
        "zarr_consolidated_format": 1}``, keys relative to ``path``.
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
        self._consolidated_key = self._prefix + CONSOLIDATED_KEY
        self._document = checked_document(metadata, self._consolidated_key)
        self._metadata: dict[str, bytes] = {}
        self._children: dict[str, set[str]] = {}
        for relative, document in self._document["metadata"].items():
            key = self._key(self._prefix + relative)
            self._metadata[key] = _json_bytes(document)
            self._add_ancestors(key)

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
        """The consolidated document (do not modify it)."""
        return self._document

    def _served(self, key: str) -> bool:
        """True for the keys answered from the document (present or not)."""
        return _name(key) in METADATA_NAMES and key.startswith(self._prefix)

    def _read_only(self, key: str) -> bool:
        return self._served(key) or key == self._consolidated_key

    def _refuse(self, key: str) -> ReadOnlyError:
        return ReadOnlyError(
            f"{key!r} is Zarr metadata, read-only in {type(self).__name__} (served from "
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

    def _delete(self, key: str) -> None:
        self._check_keys([key])
        super()._delete(key)

    def _delete_many(self, keys: list[str]) -> None:
        self._check_keys(keys)
        super()._delete_many(keys)

    def _rmdir(self, prefix: str) -> None:
        self._check_prefix(prefix)
        super()._rmdir(prefix)

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

    # ------------------------------------------------------------ identity
    def _wrapper_params(self) -> dict[str, Any]:
        return {"metadata": self._document, "path": self._path}

    def _repr_params(self) -> dict[str, Any]:
        return {"path": self._path}


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
        if not isinstance(key, str) or _name(key) not in METADATA_NAMES:
            raise MetadataError(
                f"{where!r} lists {key!r}, which is not a metadata key (a key ending in "
                f"{', '.join(sorted(METADATA_NAMES))})"
            )
    return {"metadata": dict(metadata), "zarr_consolidated_format": CONSOLIDATED_FORMAT}


def _decode(key: str, value: bytes) -> Any:
    try:
        return json.loads(value)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise MetadataError(f"{key!r} does not hold valid JSON: {error}") from None


def _refuse_format_3(store: Store, path: str) -> None:
    prefix = prefix_of(path)
    if prefix + "zarr.json" in store and prefix + ".zgroup" not in store:
        where = f"{path!r}" if path else "the root"
        raise UnsupportedOperationError(
            f"{where} of {store!r} is a Zarr format 3 group (zarr.json): zstores consolidates "
            "Zarr format 2 only; zarr-python 3 keeps format 3 consolidated metadata inside "
            "zarr.json, so use zarr.consolidate_metadata(zstores.zarr_store(store)) and "
            "zarr.open_consolidated on it"
        )


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


def consolidate_metadata(
    store: Store | str | os.PathLike[str], path: str = "", *, mode: Mode = "r"
) -> ConsolidatedStore:
    """Write every Zarr format 2 metadata document under ``path`` into ``path/.zmetadata``.

    The document is ``{"metadata": {key: document}, "zarr_consolidated_format": 1}``
    with keys relative to ``path``, in the JSON layout of zarr-python 2.18:
    for ``path=""`` the bytes equal those of zarr-python 2.18's
    ``zarr.consolidate_metadata``, and zarr-python 2 and 3 read it with
    ``zarr.open_consolidated``.  zarr-python 3 also reads one at a sub-group's
    path (``zarr.open_consolidated(..., path=path)``); zarr-python 2 reads
    only the root's.

    Parameters
    ----------
    store : zstores.Store, str or os.PathLike
        The store, or a URL or path for ``zstores.open_store`` (opened with
        mode ``"r+"``; the returned store owns and closes it).
    path : str
        The group whose hierarchy is consolidated ("" for the whole store).
    mode : {"r", "r+"}
        The mode of the returned ``ConsolidatedStore``.

    Returns
    -------
    ConsolidatedStore
        The store opened with the new consolidated metadata.  Closing it
        closes ``store``.

    Raises
    ------
    UnsupportedOperationError
        If ``path`` is a Zarr format 3 group.
    MetadataError
        If a metadata key does not hold JSON.

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
    """
    _check_open_mode(mode)
    store, owned = _as_store(store, "r+")
    try:
        path = normalize_storage_path(path)
        prefix = prefix_of(path)
        _refuse_format_3(store, path)
        store._check_open()
        keys = [key for key in store._list_prefix(prefix) if _name(key) in METADATA_NAMES]
        values = store.getitems(keys)
        documents = {
            key[len(prefix):]: _decode(key, value) for key, value in sorted(values.items())
        }
        document = {"metadata": documents, "zarr_consolidated_format": CONSOLIDATED_FORMAT}
        store[prefix + CONSOLIDATED_KEY] = _json_bytes(document)
        return ConsolidatedStore(store, document, path=path, mode=mode)
    except BaseException:
        if owned:
            store.close()
        raise


def open_consolidated(
    store: Store | str | os.PathLike[str], path: str = "", mode: Mode = "r"
) -> ConsolidatedStore:
    """Open a store with the metadata consolidated at ``path/.zmetadata``.

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

    Returns
    -------
    ConsolidatedStore
        Metadata from memory, everything else from ``store``.  Closing it
        closes ``store``.

    Raises
    ------
    KeyError
        If ``path/.zmetadata`` is missing (the message names it).
    UnsupportedOperationError
        If it is missing and ``path`` is a Zarr format 3 group.
    MetadataError
        If it is not a format 1 consolidated document.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store, path="g")
    >>> _ = zstores.consolidate_metadata(store, path="g")
    >>> zstores.open_consolidated(store, path="g").listdir("g")
    ['.zgroup', '.zmetadata']
    >>> zstores.open_consolidated(store)
    Traceback (most recent call last):
    ...
    KeyError: "no consolidated metadata: '.zmetadata' is missing in MemoryStore(mode='a'); write it with zstores.consolidate_metadata(store, path='')"
    """
    _check_open_mode(mode)
    store, owned = _as_store(store, mode)
    try:
        path = normalize_storage_path(path)
        key = prefix_of(path) + CONSOLIDATED_KEY
        try:
            raw = store[key]
        except KeyError:
            _refuse_format_3(store, path)
            raise KeyError(
                f"no consolidated metadata: {key!r} is missing in {store!r}; write it with "
                f"zstores.consolidate_metadata(store, path={path!r})"
            ) from None
        return ConsolidatedStore(store, _decode(key, raw), path=path, mode=mode)
    except BaseException:
        if owned:
            store.close()
        raise


def _check_open_mode(mode: str) -> None:
    if mode not in ("r", "r+"):
        raise ValueError(
            f"invalid mode {mode!r} for consolidated metadata; expected 'r' (read-only) or "
            "'r+' (chunks writable; metadata stays read-only)"
        )
