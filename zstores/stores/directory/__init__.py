"""DirectoryStore and NestedDirectoryStore: one file per key under a folder.

The layout is zarr-python 2's: key ``a/b/c`` is the file ``<root>/a/b/c``, so
either library reads the other's folders.  Four rules keep the folder a
faithful key/value mapping:

* Writes are atomic.  A value is written to a temporary file in the key's own
  folder and moved into place with ``rename``; a reader sees the old or the
  new value, and a crash leaves at worst a temporary file.  Temporary files are
  named ``.zstores-tmp.<32 hex digits>`` (a fixed length, so a long key never
  makes its temporary name overflow ``NAME_MAX``); that name is reserved, and
  every listing skips it.  A write that finds the disk full removes its
  temporary file and raises ``StoreFullError``; the old value stays.
* A key is a file and a prefix is a folder, so no key is also a prefix
  (``hierarchical = True``): the conflict is refused, never resolved by
  deleting data as zarr-python 2 did.
* A folder exists only while it holds a key.  Deleting, moving or removing the
  last key of a folder removes the emptied folders up to the root, and a
  failed write removes the folders it made; a write whose folder is removed
  under it (a concurrent delete pruning it) makes it again and retries.  So
  ``listdir`` lists sub-folders without looking inside them (one ``scandir``,
  as zarr-python 2 and 3 list a folder with one ``os.listdir``).  A folder
  holding no key all the same (made by another program, left by zarr-python's
  own deletes or by a crash between a write's ``mkdir`` and its ``rename``, or
  seen while a concurrent write is between the two) shows in ``listdir`` with
  nothing below it, as in zarr-python; every other call (iteration, ``len``,
  ``list_prefix``, ``getsize``, ``in``) sees keys only, and a key may be
  written where such a folder stands (it is removed first).
* Nothing below the root follows a symbolic link.  The root is opened once
  (it may itself be a link: the user chose it) and every path below it is
  resolved one folder at a time from that descriptor with ``O_NOFOLLOW``
  (``openat``, ``mkdirat``, ``renameat``, ``unlinkat``, ``fstatat``), so a link
  planted in the store, even one swapped in while a call runs, can never make
  a read, write or delete reach a file outside it.  Reaching a key through a
  link raises ``UnsafePathError``; listings skip links; removing a folder
  (``rmdir``, ``clear``, mode ``"w"``) unlinks the links in it, never what
  they point to.

The descriptor-relative calls need a POSIX system (Linux, macOS, the BSDs).

``DirectoryStore`` is ``store.py``'s, ``NestedDirectoryStore`` ``nested.py``'s,
over ``posixfs.py``: the descriptor-relative machinery (opens that never
follow a link, listings, tree removal, the link rules of a create-if-absent),
which never imports ``Store``.
"""

from .nested import NestedDirectoryStore
from .posixfs import NAME_MAX, TEMP_PREFIX
from .store import DirectoryStore

__all__ = ["NAME_MAX", "TEMP_PREFIX", "DirectoryStore", "NestedDirectoryStore"]
