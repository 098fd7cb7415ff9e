"""``N5Store``: an N5 container shown as a Zarr format 2 hierarchy, over any store.

N5 (https://github.com/saalfeldlab/n5) keeps a hierarchy as folders: each
group or dataset (array) has an ``attributes.json``, and a dataset's blocks
lie in nested folders, the fastest-varying dimension first.  ``N5Store``
shows such a container as zarr-python 2's ``N5Store`` does, so zarr-python
2 and 3 (through ``zstores.zarr_store``), xarray and dask read and write it:

==========================  =================================================
the view (Zarr format 2)    the inner store (N5)
==========================  =================================================
``P/.zarray``               ``P/attributes.json``: dimensions, blockSize,
                            dataType, compression (``zstores.metadata.n5``)
``P/.zgroup``               ``P/attributes.json`` without ``dimensions``
                            (the container's version ``n5`` at the root)
``P/.zattrs``               the other names in ``P/attributes.json``
``P/2.1.0`` (a chunk)       ``P/0/1/2``: an N5 block, header and big-endian
                            values (``zstores.wrappers.n5_blocks``)
any other key               the same key, bytes unchanged
==========================  =================================================

The metadata and chunk translation reads the array's ``attributes.json``
on each call (one small read, once per array in a batch), so a view never
works from a stale copy when another process resizes the array.

Layering: the inner store holds the N5 files under their N5 names; any
``zstores.Store`` will do (``n5://path`` and a plain path ending in ``.n5``
open a ``DirectoryStore``).  Only Zarr format 2 metadata is shown, as
zarr-python 2's ``N5Store`` does: a ``zarr.json`` is never present and
writing one is a ``MetadataError`` (pass ``zarr_format=2`` to zarr-python 3).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..base import Buffer, Mode, Store, Version
from ..errors import InvalidKeyError, StoreIOError
from ..keys import prefix_of
from ..metadata import n5 as n5_metadata
from ..metadata import v2
from ..metadata.documents import (
    ARRAY_V2,
    ATTRS_V2,
    GROUP_V2,
    NODE_V3,
    MetadataError,
    load_json,
)
from .delegate import WrapperStore
from .n5_blocks import (
    BlockSpec,
    decode_block,
    decode_zarr_chunk,
    encode_block,
    encode_zarr_chunk,
)

__all__ = ["N5Store"]

ATTRIBUTES = n5_metadata.ATTRIBUTES
_DOCUMENTS = (ARRAY_V2, GROUP_V2, ATTRS_V2)
_CHUNK_NAME = re.compile(r"\d+(\.\d+)*")
_NUMBER = re.compile(r"\d+")
_CAS_ATTEMPTS = 20  # replace_if with expected bytes: compare again after a lost race
_CORRUPT: dict[str, Any] = {}  # stands for an attributes.json that is not a JSON object


def _split(key: str) -> tuple[str, str]:
    """``"a/b/c"`` -> ``("a/b", "c")``; ``"c"`` -> ``("", "c")``."""
    parent, _, name = key.rpartition("/")
    return parent, name


def _attributes_key(path: str) -> str:
    return prefix_of(path) + ATTRIBUTES


def _encode_attributes(attributes: Mapping[str, Any]) -> bytes:
    # The layout zarr-python 2's N5Store writes (sorted keys, 4-space indent).
    return v2.encode(attributes)


class _Attributes:
    """The parsed ``attributes.json`` of folders, read once per operation."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._found: dict[str, dict[str, Any] | None] = {}

    def load(self, paths: Iterable[str]) -> None:
        """Read the attributes of every folder in ``paths`` not read yet, in one batch."""
        wanted = {_attributes_key(path): path for path in paths if path not in self._found}
        if not wanted:
            return
        values = self._store.getitems(list(wanted))
        for key, path in wanted.items():
            self._found[path] = None if key not in values else self._parse(values[key], key)

    @staticmethod
    def _parse(value: bytes, key: str) -> dict[str, Any]:
        try:
            document = load_json(value, key)
        except MetadataError:
            return _CORRUPT
        return document if isinstance(document, dict) else _CORRUPT

    def get(self, path: str) -> dict[str, Any] | None:
        """The attributes of ``path`` (``_CORRUPT`` if unreadable), or None if it has none."""
        self.load([path])
        return self._found[path]

    def strict(self, path: str) -> dict[str, Any] | None:
        """The attributes of ``path``, or None; a ``MetadataError`` naming the file if bad."""
        found = self.get(path)
        if found is _CORRUPT:
            key = _attributes_key(path)
            value = self._store[key]
            document = load_json(value, key)  # raises for text that is not JSON
            raise MetadataError(f"{key!r} holds {type(document).__name__}, not a JSON object")
        return found

    def arrays(self) -> dict[str, int]:
        """``{path: rank}`` of every array among the folders read so far."""
        return {path: rank for path in self._found if (rank := self.rank(path))}

    def rank(self, path: str) -> int | None:
        """The number of dimensions of the array at ``path``, or None if it is no array."""
        found = self.get(path)
        if not found or not n5_metadata.is_array(found):
            return None
        dimensions = found.get("dimensions")
        return len(dimensions) if isinstance(dimensions, list) else None

    def spec(self, path: str) -> BlockSpec:
        found = self.strict(path)
        assert found is not None
        return BlockSpec.of(found, _attributes_key(path))


class N5Store(WrapperStore):
    """An N5 container as a Zarr format 2 hierarchy (zarr-python 2's ``N5Store`` semantics).

    Parameters
    ----------
    store : zstores.Store, str or os.PathLike
        The store holding the N5 files, or a folder path (opened as a
        ``DirectoryStore`` with ``mode``, and closed with this store).
    mode : {None, "a", "r", "r+", "w", "w-"}
        With a store: ``None`` (default) follows it, ``"r"`` is a read-only
        view (see ``WrapperStore``).  With a path: the folder's mode (default
        ``"a"``).

    Notes
    -----
    What the view shows and where each key goes is in the module's
    docstring.  Arrays hold the N5 data types (``uint8`` ... ``float64``,
    little-endian in the view), fill value 0, order ``"C"``, no filters and
    an N5 compression (raw, gzip/zlib, bzip2, xz, blosc, zstd); a ``.zarray``
    asking for anything else is refused with ``MetadataError``, as is a
    ``.zattrs`` naming an N5 keyword.  A chunk that is not a whole chunk of
    its array, and a stored block that does not decode, raise
    ``CorruptValueError`` naming the key.  Reading a chunk decodes its block
    and hands the reader a chunk compressed at the compressor's fastest
    setting; ``getsize`` of a chunk is the size of that chunk (zfuse shows
    it), so sizing an array reads its blocks.

    Examples
    --------
    >>> import json, tempfile
    >>> import numpy as np
    >>> from zstores import init_array
    >>> from zstores.wrappers.n5 import N5Store
    >>> folder = tempfile.mkdtemp() + "/data.n5"
    >>> store = N5Store(folder)
    >>> init_array(store, shape=(4, 6), chunks=(2, 3), dtype="<u2", compressor=None, path="a")
    >>> json.loads(store["a/.zarray"])["shape"]
    [4, 6]
    >>> json.loads(open(folder + "/a/attributes.json").read())["dimensions"]
    [6, 4]
    >>> store["a/1.0"] = np.arange(6, dtype="<u2")
    >>> sorted(store.store.list_prefix("a"))  # the block of chunk 1.0 is a/0/1
    ['a/0/1', 'a/attributes.json']
    >>> np.frombuffer(store["a/1.0"], dtype="<u2").tolist()
    [0, 1, 2, 3, 4, 5]
    >>> store.close()
    """

    def __init__(self, store: Store | str | os.PathLike[str], *, mode: Mode | None = None
                 ) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ..stores.directory import DirectoryStore

            store = DirectoryStore(store, mode=mode or "a")
            mode = None
        super().__init__(store, mode=mode)
        self._key = self._view_key  # type: ignore[method-assign]
        self.supports_range_reads = False  # chunks are translated whole
        # .zarray and .zattrs share one attributes.json, which each write reads,
        # changes and writes back: zarr-python 3 writes both at once from threads.
        self._attributes_lock = threading.RLock()

    # ------------------------------------------------------------ key rules
    def _view_key(self, key: str) -> str:
        key = self._store.normalize(key)
        if _split(key)[1] == ATTRIBUTES:
            raise InvalidKeyError(
                f"key {key!r}: {ATTRIBUTES} is N5's own file, shown as {GROUP_V2}, {ARRAY_V2} "
                f"and {ATTRS_V2}; write those instead"
            )
        return key

    def _chunk(self, key: str, found: _Attributes) -> tuple[str, BlockSpec] | None:
        """``(block key, spec)`` when ``key`` is a chunk of an array, else None."""
        parent, name = _split(key)
        if not _CHUNK_NAME.fullmatch(name):
            return None
        indices = name.split(".")
        found.strict(parent)  # a chunk of an array whose attributes are unreadable: say so
        if found.rank(parent) != len(indices):
            return None
        return prefix_of(parent) + "/".join(reversed(indices)), found.spec(parent)

    def _check_not_a_block(self, key: str, found: _Attributes) -> None:
        """Refuse a key that names a block file of an array (``a/1/0`` for chunk ``a/0.1``).

        Written as is, it would bypass the translation and corrupt the chunk.
        """
        parts = key.split("/")
        depth = 0
        while depth < len(parts) and _NUMBER.fullmatch(parts[-1 - depth]):
            depth += 1
        for rank in range(2, depth + 1):
            array = "/".join(parts[:-rank])
            if found.rank(array) == rank:
                chunk = prefix_of(array) + ".".join(reversed(parts[-rank:]))
                raise InvalidKeyError(
                    f"key {key!r} is where N5 keeps the block of chunk {chunk!r} of the "
                    f"array {array!r}; read and write the chunk key {chunk!r}"
                )

    # -------------------------------------------------------------- reads
    def _get(self, key: str) -> bytes:
        found = _Attributes(self._store)
        parent, name = _split(key)
        if name in _DOCUMENTS:
            return self._document(parent, name, key, found)
        chunk = self._chunk(key, found)
        if chunk is None:
            self._check_not_a_block(key, found)
            return self._store[key]
        block_key, spec = chunk
        try:
            block = self._store[block_key]
        except KeyError:
            raise KeyError(key) from None
        return encode_zarr_chunk(decode_block(block, spec, key), spec)

    def _document(self, path: str, name: str, key: str, found: _Attributes) -> bytes:
        attributes = found.strict(path)
        if attributes is None:
            raise KeyError(key)
        is_array = n5_metadata.is_array(attributes)
        if name == ARRAY_V2 and is_array:
            return v2.encode(n5_metadata.array_to_zarr(attributes, _attributes_key(path)))
        if name == GROUP_V2 and not is_array:
            return v2.GROUP_METADATA
        if name == ATTRS_V2:
            user = n5_metadata.user_attributes(attributes)
            if user:
                return v2.encode(user)
        raise KeyError(key)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found = _Attributes(self._store)
        found.load({_split(key)[0] for key in keys})
        results: dict[str, bytes] = {}
        blocks: dict[str, tuple[str, BlockSpec]] = {}
        plain: list[str] = []
        for key in keys:
            parent, name = _split(key)
            if name in _DOCUMENTS:
                try:
                    results[key] = self._document(parent, name, key, found)
                except KeyError:
                    pass
                continue
            chunk = self._chunk(key, found)
            if chunk is None:
                self._check_not_a_block(key, found)
                plain.append(key)
            else:
                blocks[chunk[0]] = (key, chunk[1])
        values = self._store.getitems([*plain, *blocks])
        for block_key, (key, spec) in blocks.items():
            if block_key in values:
                block = decode_block(values[block_key], spec, key)
                results[key] = encode_zarr_chunk(block, spec)
        results.update((key, values[key]) for key in plain if key in values)
        return results

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        return Store._get_range(self, key, start, length)  # a chunk is translated whole

    def _contains(self, key: str) -> bool:
        found = _Attributes(self._store)
        parent, name = _split(key)
        if name in _DOCUMENTS:
            return self._has_document(parent, name, found)
        chunk = self._chunk(key, found)
        if chunk is not None:
            return chunk[0] in self._store
        try:
            self._check_not_a_block(key, found)
        except InvalidKeyError:
            return False
        return key in self._store

    @staticmethod
    def _has_document(path: str, name: str, found: _Attributes) -> bool:
        attributes = found.get(path)
        if attributes is None:
            return False
        if attributes is _CORRUPT:
            return name == GROUP_V2  # listed as a group, whose reading names the fault
        is_array = n5_metadata.is_array(attributes)
        if name == ARRAY_V2:
            return is_array
        if name == GROUP_V2:
            return not is_array
        return bool(n5_metadata.user_attributes(attributes))

    def _stat(self, key: str) -> int | None:
        parent, name = _split(key)
        found = _Attributes(self._store)
        if name not in _DOCUMENTS and self._chunk(key, found) is None:
            try:
                self._check_not_a_block(key, found)
            except InvalidKeyError:
                return None
            return self._store.stat(key)
        try:
            return len(self._get(key))
        except KeyError:
            return None

    def _getsize_key(self, key: str) -> int:
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        return size

    # ---------------------------------------------------- conditional writes
    # A chunk is its block in the inner store and any other key itself, so
    # these are the inner store's own atomic operations on the block or key
    # (a chunk's version is its block's).  The metadata documents share one
    # attributes.json, rewritten whole: they are checked and written under
    # the view's lock, atomic among this process's threads only.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        if _split(key)[1] in _DOCUMENTS:
            with self._attributes_lock:
                if self._contains(key):
                    return False
                self._set_document(key, value)
                return True
        target, data = self._inner_write(key, value, _Attributes(self._store))
        return self._store.set_if_not_exists(target, data)

    def _get_with_version(self, key: str) -> tuple[bytes, Version]:
        if _split(key)[1] in _DOCUMENTS:
            return Store._get_with_version(self, key)  # a digest of the document shown
        found = _Attributes(self._store)
        target = self._inner_key(key, found)
        try:
            stored, version = self._store.get_with_version(target)
        except KeyError:
            raise KeyError(key) from None
        return self._view_value(key, stored, found), version

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        if _split(key)[1] in _DOCUMENTS:
            with self._attributes_lock:
                try:
                    current = self._get(key)
                except KeyError:
                    return False
                if not self._holds(current, expected):
                    return False
                self._set_document(key, value)
                return True
        found = _Attributes(self._store)
        target, data = self._inner_write(key, value, found)
        if isinstance(expected, Version):
            return self._store.replace_if(target, expected, data)
        for _ in range(_CAS_ATTEMPTS):
            # The chunk as the view shows it is compared here; the block is
            # replaced only while it is the version that was compared.
            try:
                stored, version = self._store.get_with_version(target)
            except KeyError:
                return False
            if self._view_value(key, stored, found) != expected:
                return False
            if self._store.replace_if(target, version, data):
                return True
        raise StoreIOError(
            f"{self!r}: key {key!r} kept being rewritten during {_CAS_ATTEMPTS} attempts "
            "to compare and replace it")

    def _inner_key(self, key: str, found: _Attributes) -> str:
        """The inner store's key for a chunk or plain key of the view."""
        chunk = self._chunk(key, found)
        if chunk is None:
            self._check_not_a_block(key, found)
            return key
        return chunk[0]

    def _inner_write(self, key: str, value: Buffer, found: _Attributes) -> tuple[str, Buffer]:
        """The inner key and bytes that writing ``value`` at a chunk or plain key becomes."""
        if _split(key)[1] == NODE_V3:
            raise MetadataError(
                f"key {key!r}: an N5 store shows Zarr format 2 metadata only (as "
                "zarr-python 2's N5Store); create arrays and groups with zarr_format=2"
            )
        chunk = self._chunk(key, found)
        if chunk is None:
            self._check_not_a_block(key, found)
            return key, value
        block_key, spec = chunk
        return block_key, encode_block(decode_zarr_chunk(value, spec, key), spec, key)

    def _view_value(self, key: str, stored: bytes, found: _Attributes) -> bytes:
        """What the view shows at ``key`` for the inner store's bytes ``stored``."""
        chunk = self._chunk(key, found)
        if chunk is None:
            return stored
        return encode_zarr_chunk(decode_block(stored, chunk[1], key), chunk[1])

    # ------------------------------------------------------------ listing
    def _view_keys(self, inner_keys: list[str], context: Iterable[str]) -> list[str]:
        """The view's keys for keys of the inner store (``context``: more folders to read)."""
        attribute_folders = [_split(key)[0] for key in inner_keys
                             if _split(key)[1] == ATTRIBUTES]
        found = _Attributes(self._store)
        found.load([*attribute_folders, *context])
        ranks = found.arrays()
        shown = []
        for key in inner_keys:
            parent, name = _split(key)
            if name == ATTRIBUTES:
                shown += [prefix_of(parent) + document for document in _DOCUMENTS
                          if self._has_document(parent, document, found)]
            else:
                shown.append(self._view_key_of_block(key, ranks))
        return shown

    @staticmethod
    def _view_key_of_block(key: str, ranks: Mapping[str, int]) -> str:
        """The chunk key of a block file (``a/1/0`` -> ``a/0.1``), else ``key`` itself."""
        parts = key.split("/")
        for rank in range(1, len(parts) + 1):
            if not _NUMBER.fullmatch(parts[-rank]):
                break
            array = "/".join(parts[:-rank])
            if ranks.get(array) == rank:
                return prefix_of(array) + ".".join(reversed(parts[-rank:]))
        return key

    @staticmethod
    def _ancestors(prefix: str) -> list[str]:
        """Every folder above the folder ``prefix`` (``"a/b/"`` -> ``["", "a"]``)."""
        parts = prefix.rstrip("/").split("/") if prefix else []
        return ["/".join(parts[:depth]) for depth in range(len(parts))]

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        inner = self._store.list_prefix(prefix)
        shown = self._view_keys(inner, self._ancestors(prefix))
        return [key for key in shown if key.startswith(prefix)]

    def _inside_blocks(self, prefix: str) -> bool:
        """True when the folder ``prefix`` lies inside an array (its block folders)."""
        found = _Attributes(self._store)
        ancestors = self._ancestors(prefix)
        found.load(ancestors)
        return any(found.rank(path) for path in ancestors)

    def _listdir(self, prefix: str) -> Iterable[str]:
        path = prefix.rstrip("/")
        found = _Attributes(self._store)
        if found.rank(path) or self._inside_blocks(prefix):
            return {key[len(prefix):].split("/")[0] for key in self._list_prefix(prefix)}
        names = set(self._store.listdir(path))
        if ATTRIBUTES in names:
            names.discard(ATTRIBUTES)
            names.update(name for name in _DOCUMENTS if self._has_document(path, name, found))
        return names

    def _len(self) -> int:
        return len(self._list_prefix(""))

    def _getsize_prefix(self, prefix: str) -> int:
        return sum(self._getsize_key(key) for key in self._list_prefix(prefix))

    # -------------------------------------------------------------- writes
    def _set(self, key: str, value: Buffer) -> None:
        self._set_many([(key, value)])

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        # Metadata first: a chunk in the same batch is written with its array's new attributes.
        documents = [(key, value) for key, value in items if _split(key)[1] in _DOCUMENTS]
        for key, value in documents:
            self._set_document(key, value)
        found = _Attributes(self._store)
        found.load({_split(key)[0] for key, _ in items})
        writes: dict[str, Buffer] = {}
        for key, value in items:
            if _split(key)[1] in _DOCUMENTS:
                continue
            if _split(key)[1] == NODE_V3:
                raise MetadataError(
                    f"key {key!r}: an N5 store shows Zarr format 2 metadata only (as "
                    "zarr-python 2's N5Store); create arrays and groups with zarr_format=2"
                )
            chunk = self._chunk(key, found)
            if chunk is None:
                self._check_not_a_block(key, found)
                writes[key] = value
            else:
                block_key, spec = chunk
                writes[block_key] = encode_block(decode_zarr_chunk(value, spec, key), spec, key)
        if writes:
            self._store.setitems(writes)

    def _set_document(self, key: str, value: Buffer) -> None:
        path, name = _split(key)
        document = load_json(value, key)
        with self._attributes_lock:
            self._write_document(path, name, key, document)

    def _write_document(self, path: str, name: str, key: str, document: Any) -> None:
        found = _Attributes(self._store)
        current = found.strict(path) or {}
        if name == ARRAY_V2:
            kept = {k: v for k, v in current.items() if k not in n5_metadata.ARRAY_KEYWORDS}
            updated = {**kept, **n5_metadata.array_to_n5(document, key)}
            if not path:
                updated[n5_metadata.VERSION_KEY] = n5_metadata.N5_VERSION
        elif name == GROUP_V2:
            if n5_metadata.is_array(current):
                raise MetadataError(
                    f"key {key!r}: {path or 'the root'!r} is an N5 dataset (array); N5 cannot "
                    f"hold a group at the same path (delete {ARRAY_V2} first)"
                )
            updated = {**current, **n5_metadata.group_to_n5(document, key, root=not path)}
        else:
            updated = n5_metadata.with_user_attributes(current, document, key)
        self._store[_attributes_key(path)] = _encode_attributes(updated)

    def _delete(self, key: str) -> None:
        self._delete_keys([key], missing_raises=True)

    def _delete_many(self, keys: list[str]) -> None:
        self._delete_keys(keys, missing_raises=False)

    def _delete_keys(self, keys: list[str], *, missing_raises: bool) -> None:
        """Delete view keys; a missing one raises ``KeyError`` when ``missing_raises``."""
        found = _Attributes(self._store)
        deletes = []
        for key in keys:
            path, name = _split(key)
            if name in _DOCUMENTS:
                with self._attributes_lock:
                    found = _Attributes(self._store)
                    if self._has_document(path, name, found):
                        self._delete_document(path, name, found)
                    elif missing_raises:
                        raise KeyError(key)
                found = _Attributes(self._store)
                continue
            chunk = self._chunk(key, found)
            if chunk is None:
                self._check_not_a_block(key, found)
            target = key if chunk is None else chunk[0]
            if missing_raises:
                try:
                    del self._store[target]
                except KeyError:
                    raise KeyError(key) from None
            else:
                deletes.append(target)
        if deletes:
            self._store.delitems(deletes)

    def _delete_document(self, path: str, name: str, found: _Attributes) -> None:
        current = found.strict(path) or {}
        if name == ATTRS_V2:
            # The group or array stays: its attributes.json is what makes it one.
            remaining = {k: v for k, v in current.items() if k in n5_metadata.RESERVED}
        else:
            dropped = n5_metadata.ARRAY_KEYWORDS if name == ARRAY_V2 else ()
            remaining = {k: v for k, v in current.items()
                         if k not in dropped and k != n5_metadata.VERSION_KEY}
            if remaining and n5_metadata.VERSION_KEY in current:
                remaining[n5_metadata.VERSION_KEY] = current[n5_metadata.VERSION_KEY]
        key = _attributes_key(path)
        if remaining or name == ATTRS_V2:
            self._store[key] = _encode_attributes(remaining)
        else:
            del self._store[key]

    def _rmdir(self, prefix: str) -> None:
        if self._inside_blocks(prefix):
            self._delete_many(list(self._list_prefix(prefix)))
        else:
            self._store.rmdir(prefix)

    def _remove_empty_folder(self, prefix: str) -> bool:
        if self._inside_blocks(prefix):  # block folders exist through their blocks
            return Store._remove_empty_folder(self, prefix)
        return self._store.remove_empty_folder(prefix)

    def _clear(self) -> None:
        self._store.clear()

    def rename(self, src_path: str, dst_path: str) -> None:
        """Move a key, or every key under a prefix (the view's keys, translated)."""
        Store.rename(self, src_path, dst_path)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        # A folder outside any array moves as it is: its keys translate the same
        # way at either place.  Inside an array the block layout differs: copy.
        if self._inside_blocks(src_prefix) or self._inside_blocks(dst_prefix):
            super()._rename_prefix(src_prefix, dst_prefix)
        else:
            self._store.rename(src_prefix.rstrip("/"), dst_prefix.rstrip("/"))

    def _rename_key(self, src: str, dst: str) -> None:
        self._set(dst, self._get(src))
        self._delete(src)

    # ------------------------------------------------------------ identity
    def _repr_params(self) -> dict[str, Any]:
        return {}
