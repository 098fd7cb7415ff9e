"""NestedDirectoryStore: a DirectoryStore writing chunk ``foo/0.1.2`` as ``foo/0/1/2``."""

from __future__ import annotations

from ...keys import is_chunk_key_segment
from .store import DirectoryStore

__all__ = ["NestedDirectoryStore"]


class NestedDirectoryStore(DirectoryStore):
    """A DirectoryStore that writes chunk ``foo/0.1.2`` as the file ``foo/0/1/2``.

    A key whose last segment is a dotted chunk index of two or more dimensions
    (``0.1``, ``3.0.12``) has its dots turned into folder separators, with the
    rule of older zarr-python 2 ``NestedDirectoryStore`` releases (2.18 instead
    records ``dimension_separator: "/"`` in ``.zarray`` and receives ``0/1``;
    the files are the same).  One-dimensional chunk keys (``3``)
    and all other keys are unchanged.  Every operation (get, set, delete,
    contains, ranges, sizes, rename) maps the key, so ``foo/0.1`` and
    ``foo/0/1`` name the same value; listings show the on-disk form
    (``foo/0/1``), as zarr-python 2 does.

    This reads arrays written by zarr-python 2's ``NestedDirectoryStore``
    whether or not their ``.zarray`` records ``dimension_separator``, and
    arrays with ``dimension_separator: "/"`` are also readable by
    zarr-python 3's ``LocalStore``.  An array whose ``.zarray`` says
    ``dimension_separator: "."`` cannot keep dotted chunk files here.

    Parameters, capability flags and the rules about links and full disks
    are those of :class:`DirectoryStore`.

    Examples
    --------
    >>> import os, tempfile
    >>> from zstores.stores.directory import NestedDirectoryStore
    >>> root = tempfile.mkdtemp()
    >>> store = NestedDirectoryStore(root)
    >>> store["arr/1.2"] = b"chunk"
    >>> list(store), store["arr/1/2"] == store["arr/1.2"]
    (['arr/1/2'], True)
    >>> os.path.isfile(os.path.join(root, "arr", "1", "2"))
    True
    """

    def _key(self, key: str) -> str:
        key = super()._key(key)
        folder, _, last = key.rpartition("/")
        if is_chunk_key_segment(last):
            nested = last.replace(".", "/")
            return f"{folder}/{nested}" if folder else nested
        return key
