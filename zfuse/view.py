"""The mount's view of a store: which paths are files or folders, their sizes and children.

The file ``/a/b/c`` is the key ``a/b/c``; every prefix of a key (``a``,
``a/b``) is a directory with no key of its own.  If a key is also a prefix
(``a`` and ``a/b`` both keys, which non-hierarchical stores allow), the key
wins: ``a`` shows as a file and the keys below it are not reachable through
the mount.  Folders made with ``mkdir`` (or emptied) live in the mount only
(``LocalDirs``), and files open for writing show their pending contents.

Metadata is cached for ``attr_timeout`` seconds, the time the kernel caches
it too: positive entries (what a listing learnt about each child, so the
``stat`` of ``ls -l``, ``du`` or ``cp -r`` that follows costs no store round
trip) and negative ones (zarr readers probe ``.zarray``, ``.zattrs``,
``zarr.json`` again and again).  Every change made through the mount updates
the cache at once; changes made to the store by others show after at most
``attr_timeout``.

``StoreView`` answers in keys ("" is the root) and raises ``FuseOSError``
for what a path is not; the FUSE handlers (``zfuse.operations``) translate
calls into it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from typing import Any

from zstores import Store
from zstores.errors import InvalidKeyError

from .coherence import KernelCache
from .errors import FuseOSError, fail
from .handles import OpenFile
from .identity import Identities
from .names import NAME_MAX, all_listable, ancestors, listable, name_error

__all__ = ["BLOCK_SIZE", "Attrs", "LocalDirs", "StoreView"]

log = logging.getLogger("zfuse")

#: The I/O size the mount advertises (``st_blksize``) and its statfs block.
BLOCK_SIZE = 128 << 10

# Directories with at least this many names are classified by one prefix
# scan when a sample of this many names is (nearly) all files.
_SCAN_MIN = 256
_SCAN_SAMPLE = 16

# Folders remembered as big and flat (see _kinds_of_flat).
_MAX_FLAT = 10_000

# Entries in the attribute cache before expired ones are swept out.
_MAX_CACHED = 200_000


class Attrs(dict[str, int]):
    """A ``stat`` result as a dict, with room for the FUSE layer's packed form.

    The mount caches these and hands the same object out again; the FUSE
    layer fills libfuse's ``struct stat`` from it once and copies the bytes
    afterwards (``packed``).

    Examples
    --------
    >>> attrs = Attrs(st_size=3)
    >>> attrs["st_size"], attrs.packed
    (3, None)
    """

    __slots__ = ("packed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.packed: bytes | None = None


class LocalDirs:
    """Directories that exist in the mount only: made by ``mkdir``, or emptied.

    A key/value store has no empty folders, so these live as long as the
    mount.  Indexed by parent, so listing a folder does not scan them all.

    Examples
    --------
    >>> dirs = LocalDirs()
    >>> dirs.add("a/b"); dirs.add("a/c/d")
    >>> "a/b" in dirs, sorted(dirs.children("a/")), dirs.any_below("a/c/")
    (True, ['b'], True)
    """

    def __init__(self) -> None:
        self._by_parent: dict[str, set[str]] = {}

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        parent, _, name = key.rpartition("/")
        names = self._by_parent.get(parent)
        return names is not None and name in names

    def add(self, key: str) -> None:
        parent, _, name = key.rpartition("/")
        self._by_parent.setdefault(parent, set()).add(name)

    def discard(self, key: str) -> None:
        parent, _, name = key.rpartition("/")
        names = self._by_parent.get(parent)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_parent[parent]

    def children(self, prefix: str) -> list[str]:
        """Names of the local directories directly under ``prefix`` ("" or "a/")."""
        return list(self._by_parent.get(prefix[:-1], ()))

    def any_below(self, prefix: str) -> bool:
        return bool(self._by_parent.get(prefix[:-1]))

    def below(self, key: str) -> list[str]:
        """``key`` and every local directory under it."""
        prefix = key + "/"
        found = [key] if key in self else []
        for parent, names in list(self._by_parent.items()):
            if parent == key or parent.startswith(prefix):
                found.extend(f"{parent}/{name}" for name in names)
        return found

    def move(self, src: str, dst: str) -> None:
        """A renamed folder: ``src`` and the local folders below it go under ``dst``."""
        for key in self.below(src):
            self.discard(key)
            self.add(dst + key[len(src):])
        self.add(dst)


class StoreView:
    """What a mount shows of ``store``: files, folders, attributes, open files.

    Parameters
    ----------
    store : Store
        Any zstores store; it must stay open while mounted.
    read_only : bool
        Show every entry read-only and refuse new names with EROFS.
    attr_timeout : float
        Seconds metadata may be served from the cache before the store is
        asked again (0: never cached).

    Attributes
    ----------
    identities : Identities
        Inode numbers and times of the keys.
    files : dict of str to OpenFile
        The files open through the mount, by key; changed under ``lock``.
    lock : threading.RLock
        Held by every change of the namespace and of ``files``.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["arr/0.0"] = b"chunk"
    >>> view = StoreView(store)
    >>> view.stat("arr/0.0")["st_size"], view.kind("arr"), view.kind("nothing")
    (5, 'dir', None)
    >>> view.children("arr/")
    {'0.0': True}
    """

    def __init__(self, store: Store, *, read_only: bool = False,
                 attr_timeout: float = 1.0) -> None:
        self.store = store
        self.read_only = bool(read_only or store.read_only)
        self.attr_timeout = float(attr_timeout)
        self.file_mode = stat.S_IFREG | (0o444 if self.read_only else 0o644)
        self.dir_mode = stat.S_IFDIR | (0o555 if self.read_only else 0o755)
        self.identities = Identities()
        self.files: dict[str, OpenFile] = {}
        self.lock = threading.RLock()
        self._uid, self._gid = os.getuid(), os.getgid()
        # Bound once: every attribute the mount hands out asks for it.
        self._identity = self.identities.of
        self._dirs = LocalDirs()
        self._stats: dict[str, tuple[float, Attrs | None]] = {}
        #: What the kernel may hold of each file: the version of its pages,
        #: the size it believes (see ``zfuse.coherence``).
        self.kernel = KernelCache(attr_timeout=self.attr_timeout)
        self._flat: dict[str, None] = {}  # big folders of keys, listed by one scan
        self._witness: dict[str, str] = {}  # folder -> a key seen below it

    # ----------------------------------------------------------- attributes
    def file_stat(self, key: str, size: int) -> Attrs:
        """The attributes of the file ``key`` holding ``size`` bytes."""
        ino, mtime, ctime = self._identity(key)
        return Attrs(
            st_mode=self.file_mode, st_ino=ino, st_nlink=1, st_uid=self._uid,
            st_gid=self._gid, st_size=size, st_blocks=(size + 511) >> 9,
            st_blksize=BLOCK_SIZE, st_atime=mtime, st_mtime=mtime, st_ctime=ctime,
        )

    def dir_stat(self, key: str) -> Attrs:
        """The attributes of the folder ``key``."""
        ino, mtime, ctime = self._identity(key)
        return Attrs(
            st_mode=self.dir_mode, st_ino=ino, st_nlink=2, st_uid=self._uid,
            st_gid=self._gid, st_size=0, st_blocks=0, st_blksize=BLOCK_SIZE,
            st_atime=mtime, st_mtime=mtime, st_ctime=ctime,
        )

    def pending(self, key: str) -> OpenFile | None:
        """The open file whose pending contents ``key`` shows, if any."""
        file = self.files.get(key)
        if file is not None and file.pending:
            return file
        return None

    def stat(self, key: str) -> Attrs:
        """The attributes of ``key`` ("" is the root); ENOENT if it is nothing."""
        if not key:
            return self.dir_stat("")
        if len(key) > NAME_MAX // 4 and name_error(key) == errno.ENAMETOOLONG:
            # Never listed, so never looked up either (a local disk says the same).
            raise fail(errno.ENAMETOOLONG)
        file = self.pending(key)
        if file is not None:
            return self.file_stat(key, file.size())
        entry = self._stats.get(key)
        if entry is not None and entry[0] > time.monotonic():
            if entry[1] is None:
                raise fail(errno.ENOENT)
            return entry[1]
        attrs = self._probe(key)
        self._remember(key, attrs)
        if attrs is None:
            raise fail(errno.ENOENT)
        return attrs

    def kind(self, key: str) -> str | None:
        """"file", "dir" or None, by the same rules as ``stat``."""
        try:
            attrs = self.stat(key)
        except FuseOSError:
            return None
        return "dir" if stat.S_ISDIR(attrs["st_mode"]) else "file"

    def _probe(self, key: str) -> Attrs | None:
        """Ask the store what ``key`` is: a file, a directory or nothing."""
        if key in self._dirs or self._dirs.any_below(key + "/"):
            return self.dir_stat(key)
        if not self._storable(key):
            return None
        size = self._size(key)
        if size is not None:
            self._note_file(key)
            return self.file_stat(key, size)
        if self.has_children(key):
            return self.dir_stat(key)
        return None

    # ------------------------------------------------------ the store itself
    # Every question the view asks the store goes through these, all public
    # Store methods: ``stat`` answers "a key, and how big?" in one backend
    # call (a Redis STRLEN of 0 is confirmed by the store itself).
    def _size(self, key: str) -> int | None:
        """The value's length, or None if ``key`` is not a key (InvalidKeyError if unstorable)."""
        return self.store.stat(key)

    def _has_key(self, key: str) -> bool:
        return key in self.store

    def _names(self, prefix: str) -> list[str]:
        """The names directly under ``prefix`` ("" or "a/"), keys and folders alike."""
        return self.store.listdir(prefix[:-1])

    def _keys_below(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` ("" or "a/"), at any depth."""
        return self.store.list_prefix(prefix[:-1])

    def _storable(self, key: str) -> bool:
        """Whether the store keeps ``key`` under that very name."""
        try:
            return self.store.normalize(key) == key
        except (InvalidKeyError, TypeError):
            return False

    # ---------------------------------------------------------------- cache
    def _remember(self, key: str, attrs: Attrs | None) -> None:
        if self.attr_timeout > 0:
            stats = self._stats
            now = time.monotonic()
            if len(stats) >= _MAX_CACHED:
                _prune(stats, now)
            stats[key] = (now + self.attr_timeout, attrs)

    def forget(self, key: str) -> None:
        """Drop what is cached about ``key``, and negative entries of its parents."""
        stats = self._stats
        stats.pop(key, None)
        for parent in ancestors(key):
            entry = stats.get(parent)
            if entry is not None and entry[1] is None:
                del stats[parent]
        self.kernel.forget(key)

    def forget_all(self) -> None:
        """Drop every cached attribute and page (after a folder was renamed)."""
        self._stats.clear()
        self.kernel.forget_all()

    # -------------------------------------------------------------- folders
    def _note_file(self, key: str) -> None:
        """Remember ``key`` as a witness that the folders above it exist."""
        witness = self._witness
        if len(witness) >= _MAX_CACHED:
            witness.clear()
        for folder in ancestors(key):
            witness[folder] = key

    def has_children(self, key: str) -> bool:
        """Whether any key lies below ``key``.

        A key seen below it before (its witness) answers with one cheap
        lookup; only when that key is gone is the folder listed.
        """
        witness = self._witness.get(key)
        if witness is not None:
            if self.pending(witness) is not None or self._has_key(witness):
                return True
            self._witness.pop(key, None)
        return bool(self._names(key + "/" if key else ""))

    def is_empty_dir(self, key: str) -> bool:
        """Whether the folder ``key`` has nothing in it: no key, local folder or new file."""
        prefix = key + "/"
        if self.has_children(key):
            return False
        if self._dirs.any_below(prefix):
            return False
        return not any(k.startswith(prefix) for k, f in list(self.files.items()) if f.pending)

    def children(self, prefix: str) -> dict[str, bool]:
        """Every name directly under ``prefix``: True for a file, False for a directory."""
        kinds = self._kinds_of_flat(prefix) if prefix in self._flat else None
        if kinds is None:
            names = self._names(prefix)
            if len(names) >= _SCAN_MIN and self._mostly_files(prefix, names):
                kinds = self._kinds_of_flat(prefix)
            if kinds is None:
                kinds = {}
                for name in names:
                    is_file = self._is_file(prefix + name)
                    if is_file is not None:
                        kinds[name] = is_file
        for name in self._dirs.children(prefix):
            kinds.setdefault(name, False)
        for key, file in list(self.files.items()):
            if file.pending and key.startswith(prefix) and "/" not in key[len(prefix):]:
                kinds[key[len(prefix):]] = True
        if all_listable(kinds):  # the usual folder: no per-name check
            return kinds
        return {name: kind for name, kind in kinds.items() if listable(name)}

    def _mostly_files(self, prefix: str, names: list[str]) -> bool:
        """Whether a sample of ``names`` is (nearly) all keys: a folder of chunks."""
        sample = names[:: max(1, len(names) // _SCAN_SAMPLE)][:_SCAN_SAMPLE]
        return sum(self._is_file(prefix + name) is True for name in sample) >= 0.9 * len(sample)

    def _kinds_of_flat(self, prefix: str) -> dict[str, bool] | None:
        """Names and kinds under ``prefix`` from one scan of its keys; None if not flat.

        One prefix scan costs a step per key below ``prefix``, against a
        store round trip per name: it pays for a big folder of keys (chunks),
        not for a folder of sub-folders full of keys.  Folders found big and
        flat are remembered, so the next listing is this one scan alone.
        """
        start = len(prefix)
        keys = self._keys_below(prefix)
        rests = [key[start:] for key in keys]
        kinds: dict[str, bool] = {}
        deeper = 0
        if "/" not in "".join(rests):
            # Only keys (a folder of chunks): one C-level search, no step per key.
            kinds = dict.fromkeys(rests, True)
            if keys:
                self._witness[prefix[:-1]] = keys[-1]
        else:
            for key, rest in zip(keys, rests, strict=True):
                slash = rest.find("/")
                if slash < 0:
                    kinds[rest] = True
                    self._witness[prefix[:-1]] = key
                else:
                    deeper += 1
                    kinds.setdefault(rest[:slash], False)
        if len(kinds) < _SCAN_MIN or deeper > len(kinds):
            self._flat.pop(prefix, None)
            return None if deeper > len(kinds) else kinds
        if len(self._flat) >= _MAX_FLAT:
            self._flat.clear()
        self._flat[prefix] = None
        return kinds

    def _is_file(self, key: str) -> bool | None:
        """Whether a listed name is a key (else, being listed, it is a prefix).

        Asks the store for the size, and caches the full attributes, so the
        ``stat`` that ``ls -l``, ``du`` or ``cp`` sends next costs no round trip.
        None for a name the store refuses as a key (a stray file in a folder
        store): a lookup could not find it, so it is not listed either.
        """
        if self.pending(key) is not None:
            return True
        entry = self._stats.get(key)
        if entry is not None and entry[1] is not None and entry[0] > time.monotonic():
            return not stat.S_ISDIR(entry[1]["st_mode"])
        try:
            size = self._size(key)
        except (InvalidKeyError, TypeError):
            return None
        if size is None:
            self._remember(key, self.dir_stat(key))
            return False
        self._note_file(key)
        self._remember(key, self.file_stat(key, size))
        return True

    # ------------------------------------------------------------ new names
    def key_to_create(self, path: str) -> str:
        """The key of a path the caller wants to create.

        EROFS on a read-only mount, EILSEQ if the name is not UTF-8,
        ENAMETOOLONG if a segment is longer than ``NAME_MAX`` bytes, EINVAL
        if the store refuses the key or would keep it under another name.
        """
        if self.read_only:
            raise fail(errno.EROFS)
        key = path[1:]
        code = name_error(key)
        if code is not None:
            log.warning("refused name %r: %s", path, os.strerror(code))
            raise fail(code)
        try:
            normalized = self.store.normalize(key)
        except InvalidKeyError as error:
            log.warning("refused name %r: %s", path, error)
            raise fail(errno.EINVAL) from None
        if normalized != key:
            log.warning("refused name %r: the store would keep it as %r", path, normalized)
            raise fail(errno.EINVAL)
        return key

    # ----------------------------------------------------------- open files
    def open_file(self, key: str, *, created: bool = False) -> OpenFile:
        """The ``OpenFile`` of ``key`` with one more reference (a new one if ``created``)."""
        with self.lock:
            file = self.files.get(key)
            if file is None or created:
                if file is not None:
                    file.orphan(self.store)
                file = self.files[key] = OpenFile(key, created=created)
            file.refs += 1
        return file

    def close_file(self, file: OpenFile) -> None:
        """One reference less to ``file``; the last one forgets it."""
        with self.lock:
            file.refs -= 1
            if file.refs <= 0 and self.files.get(file.key) is file:
                del self.files[file.key]

    def committed(self, file: OpenFile) -> None:
        """``file``'s value reached the store: it shows a new modification time."""
        identities = self.identities
        identities.touch(file.key, identities.of(file.key)[1] if file.mtime_explicit else None)
        self.forget(file.key)

    def commit_all(self, file: OpenFile) -> None:
        """Store what every writer of ``file`` has pending (before a rename)."""
        if file.commit_all(self.store):
            self.committed(file)

    # ------------------------------------------------------ namespace changes
    # Called under ``lock`` by the FUSE handlers once they checked the errnos.
    def created(self, key: str) -> None:
        """``key`` was created through the mount: a new inode, nothing cached."""
        self._dirs.discard(key)
        self.identities.new(key)
        self.forget(key)

    def make_dir(self, key: str) -> None:
        """``mkdir``: a folder that lives in the mount until a key lands below it."""
        self._dirs.add(key)
        self.forget(key)

    def removed(self, key: str) -> None:
        """``key`` (a file or an empty folder) is gone; the folders above it stay."""
        self._dirs.discard(key)
        self.identities.forget(key)
        self._keep_parents(key)
        self.forget(key)
        self._remember(key, None)

    def remove_dir(self, key: str) -> bool:
        """``rmdir`` of a folder the mount shows empty; False if a key appeared below it.

        The store removes its folder too (a directory store may hold a
        folder with no key in it, left by another program), never a key.
        """
        if not self.store.remove_empty_folder(key):
            return False
        self.removed(key)
        return True

    def remove_file(self, key: str) -> None:
        """``unlink``: delete ``key``; open handles keep reading what it held."""
        file = self.files.pop(key, None)
        unsaved = file is not None and file.created
        if file is not None:
            file.orphan(self.store)
        try:
            del self.store[key]
        except KeyError:
            if not unsaved:  # a new file that never reached the store is gone all the same
                raise
        self.removed(key)

    def _keep_parents(self, key: str) -> None:
        """Keep the folders above a removed entry (``rm -r`` removes them next)."""
        for parent in ancestors(key):
            self._dirs.add(parent)

    def rename_file(self, src: str, dst: str) -> None:
        """Move the file ``src`` to ``dst`` (replacing it), open handles along."""
        moving = self.files.get(src)
        if moving is not None:
            self.commit_all(moving)  # the store holds what it shows
        replaced = self.files.pop(dst, None)
        if replaced is not None:
            replaced.orphan(self.store)
        self.store.rename(src, dst)
        if moving is not None:
            with moving.lock:
                moving.key = dst
            del self.files[src]
            self.files[dst] = moving
        self.identities.move(src, dst)
        self._dirs.discard(dst)
        self.forget(src)
        self.forget(dst)
        self._remember(src, None)
        self._keep_parents(src)

    def rename_dir(self, src: str, dst: str) -> None:
        """Move the folder ``src`` to ``dst`` (absent or empty), open handles along."""
        src_prefix, dst_prefix = src + "/", dst + "/"
        for file in list(self.files.values()):
            if file.key.startswith(src_prefix):
                self.commit_all(file)
        if self.has_children(src):
            self.store.rename(src, dst)
        self._dirs.move(src, dst)
        for key, file in list(self.files.items()):
            if key.startswith(src_prefix):
                with file.lock:
                    file.key = dst_prefix + key[len(src_prefix):]
                del self.files[key]
                self.files[file.key] = file
        self.identities.move_tree(src, dst)
        self.forget_all()
        self._keep_parents(src)

    def copy_file(self, src: str, dst: str) -> None:
        """``link``: ``dst`` becomes a new key holding ``src``'s value as shown now."""
        file = self.pending(src)
        if file is not None:
            with file.lock:
                value = bytes(file.current() or b"")
        else:
            value = self.store[src]
        self.store[dst] = value
        self.created(dst)

    def set_mtime(self, key: str, mtime: int | None) -> None:
        """``utimens``: ``key`` shows ``mtime`` (now if None) until its next change."""
        identities = self.identities
        identities.set_mtime(key, identities.now() if mtime is None else mtime)
        file = self.files.get(key)
        if file is not None:
            file.mtime_explicit = True
        self.forget(key)


def _prune(cache: dict[str, Any], now: float) -> None:
    """Drop expired entries, or all of them if that is not enough.

    A walk over millions of keys must not grow the cache without bound.
    """
    expired = [key for key, entry in list(cache.items()) if entry[0] <= now]
    for key in expired:
        cache.pop(key, None)
    if len(cache) >= _MAX_CACHED // 2:
        cache.clear()
