"""Listing a Zarr hierarchy on a server that cannot list: from its consolidated metadata.

A static HTTP server answers GET and HEAD but has no listing.  A hierarchy
published with consolidated metadata (v2 ``.zmetadata`` at the root, or a v3
root ``zarr.json`` with ``consolidated_metadata``) names every group and
array, and each array's metadata its chunk grid and key encoding, so the keys
it can hold are known (``zstores.metadata.consolidated.published_keys``).
Which of them exist is asked with concurrent HEADs: a chunk never written
reads as the fill value and is not listed.

``PublishedListing`` holds what was learnt: the metadata keys (asked when it
is made) and, per array, its chunks (asked the first time a listing reaches
into that array, so listing the root of a hierarchy of large arrays costs no
chunk request).  What it learnt is kept for the store's lifetime: the
published hierarchy is read-only here, and a listing of 100,000 chunks is
not asked again at every ``listdir`` of a mount; reopen the store to see a
republished hierarchy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ...keys import child_name, prefix_of
from ...metadata.consolidated import PublishedKeys
from ...metadata.nodes import Array

__all__ = ["PublishedListing"]

#: Candidate keys asked per batch of HEADs (bounds the requests queued at once).
PROBE_BATCH = 4096


def _overlaps(folder: str, prefix: str) -> bool:
    """Whether keys under ``folder`` ("" or "a/b/") can be under ``prefix`` too."""
    return folder.startswith(prefix) or prefix.startswith(folder)


def _ancestors(key: str) -> Iterable[str]:
    """The folders a key is in: ``"a/b/c"`` -> ``"a"``, ``"a/b"``."""
    parts = key.split("/")
    return ("/".join(parts[:depth]) for depth in range(1, len(parts)))


class PublishedListing:
    """The existing keys of a consolidated hierarchy, found by HEADs of its possible keys.

    Parameters
    ----------
    published : iterable of PublishedKeys
        What each consolidated document found says (v2 and v3 both, when a
        hierarchy holds both).
    head_many : callable
        ``head_many(keys) -> {key: size}`` for the keys that exist among
        ``keys`` (the store's concurrent HEADs).

    Examples
    --------
    >>> import json
    >>> from zstores.metadata.consolidated import published_keys
    >>> document = {"zarr_consolidated_format": 1, "metadata": {
    ...     "t/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1",
    ...                   "compressor": None, "fill_value": 0, "order": "C", "filters": None}}}
    >>> stored = {".zmetadata": 1, "t/.zarray": 1, "t/1": 2}  # chunk t/0 never written
    >>> listing = PublishedListing(
    ...     [published_keys(".zmetadata", json.dumps(document).encode())],
    ...     lambda keys: {key: stored[key] for key in keys if key in stored})
    >>> sorted(listing.names_in("")), sorted(listing.sizes_under("t/"))
    (['.zmetadata', 't'], ['t/.zarray', 't/1'])
    """

    def __init__(self, published: Iterable[PublishedKeys],
                 head_many: Callable[[list[str]], dict[str, int]]) -> None:
        published = list(published)
        self._head_many = head_many
        self._lock = threading.Lock()
        self._unprobed: list[Array] = [array for keys in published for array in keys.arrays]
        self.problems = [problem for keys in published for problem in keys.problems]
        metadata = sorted({key for keys in published for key in keys.metadata_keys})
        self._arrays = tuple(self._unprobed)
        self._node_folders = {folder for key in metadata for folder in _ancestors(key)}
        self._sizes: dict[str, int] = head_many(metadata)

    def is_folder(self, key: str) -> bool:
        """Whether the hierarchy makes ``key`` a folder (a node's path, a folder of chunks).

        Such a name is no key, whatever a server answers for its URL (many
        answer a folder with a page of links, or redirect to one).
        """
        if key in self._node_folders:
            return True
        for array in self._arrays:
            folder = prefix_of(array.path)
            if key.startswith(folder) and array.is_chunk_folder(key[len(folder):]):
                return True
        return False

    def _probe(self, wanted: Callable[[str], bool]) -> None:
        """Ask which chunks exist of the arrays not asked yet whose folder ``wanted`` takes."""
        arrays = [array for array in self._unprobed if wanted(prefix_of(array.path))]
        if not arrays:
            return
        batch: list[str] = []
        for array in arrays:
            for key in PublishedKeys.chunk_keys(array):
                batch.append(key)
                if len(batch) == PROBE_BATCH:
                    self._sizes.update(self._head_many(batch))
                    batch = []
        if batch:
            self._sizes.update(self._head_many(batch))
        asked = {id(array) for array in arrays}
        self._unprobed = [array for array in self._unprobed if id(array) not in asked]

    def sizes_under(self, prefix: str) -> dict[str, int]:
        """``{key: size}`` of every existing key under ``prefix`` ("" or "a/b/")."""
        with self._lock:
            self._probe(lambda folder: _overlaps(folder, prefix))
            return {key: size for key, size in self._sizes.items() if key.startswith(prefix)}

    def names_in(self, prefix: str) -> set[str]:
        """The names of the keys and folders directly under ``prefix`` ("" or "a/b/")."""
        with self._lock:
            # Only arrays at or above the folder listed can have chunks in it.
            self._probe(lambda folder: prefix.startswith(folder))
            return {child_name(key, prefix) for key in self._sizes
                    if key.startswith(prefix) and len(key) > len(prefix)}
