"""StoreFileSystem: any ``zstores`` store URL as an fsspec file system.

zarr-python, xarray and dask hand every URL whose scheme they do not know
to fsspec, which looks the scheme up in its registry.  zstores registers
its own schemes there (the ``fsspec.specs`` entry points in pyproject.toml),
so ``zarr.open_group("lmdb:///data/run1.lmdb")``,
``xarray.open_zarr("sqlite:///data/run1.sqlite")`` and
``dask.array.from_zarr("redis://host:6379/0?prefix=run1")`` reach the store
``zstores.open_store`` opens for the same URL.

Registered: ``nested``, ``dbm``, ``lmdb``, ``sqlite``, ``redis``,
``rediss``, ``redis+cluster``, ``rediss+cluster``, ``mongodb`` and
``mongodb+srv``.  Not registered, on purpose:
``file``, ``zip`` and ``memory`` are fsspec's own file systems (fsspec lets
an entry point replace a built-in, and zarr, xarray and dask users rely on
those three), and plain paths stay zarr's ``LocalStore``.

The whole URL names one store; a group or array inside it is zarr's
``path=``, xarray's ``group=`` or dask's ``component=``.  Paths given to the
file system's methods are keys of the store (``"group/array/zarr.json"``).

The file system is asynchronous as well (an fsspec ``AsyncFileSystem``), so
zarr calls it without fsspec's thread-per-call wrapper: stores that answer
from memory (LMDB, Memory: ``Store.blocking`` is False) are called directly,
as ``zarr_store`` calls them; the others in worker threads.

One store per process: fsspec caches file system instances per thread
(those zarr asks for), while LMDB allows one environment per process and DBM
one writer, so every instance with the same URL and options shares one
store, opened on first use and closed when the interpreter exits.  Reads
open it read-only (mode ``"r"``: no write lock taken, no lock or reserve
file created, so a reader works on read-only media and beside a writer in
another process); the first write opens it again writable.  Reading a URL
that names no store opens nothing and creates nothing.
A file system pickles to its URL and options, so a dask worker opens the
store again in its own process.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractBufferedFile, make_instance

from ..base import Store, check_mode
from ..errors import StoreNotFoundError
from ..keys import normalize_key, normalize_storage_path, prefix_of
from .common import keys_with_prefix

__all__ = ["PROTOCOLS", "StoreFile", "StoreFileSystem", "close_shared_stores", "shared_store_urls"]

#: The schemes registered with fsspec.  ``file``, ``zip`` and ``memory`` are
#: left to fsspec's own file systems (see the module docstring).
PROTOCOLS: tuple[str, ...] = (
    "nested", "dbm", "lmdb", "sqlite", "redis", "rediss", "redis+cluster", "rediss+cluster",
    "mongodb", "mongodb+srv", "n5",
)

# Keyword arguments fsspec (or zarr, through fsspec) passes to every file
# system: they configure the file system object, never the store.
_FSSPEC_OPTIONS = frozenset({
    "asynchronous", "loop", "skip_instance_cache", "use_listings_cache",
    "listings_expiry_time", "max_paths", "add_docs",
})

# Modes an unpickled copy opens with: "w" cleared the store once already and
# "w-" found it absent once; a dask worker must do neither again.
_MODE_IN_ANOTHER_PROCESS = {None: None, "r": "r", "r+": "r+", "a": "a", "w": "a", "w-": "a"}


T = TypeVar("T")

# --------------------------------------------------------- one store a process
class _SharedStores:
    """The stores opened through fsspec in this process, one per URL and options.

    With no ``store_mode`` a URL is opened read-only (``"r"``) by reads and
    writable by the first write, which replaces the read-only store for
    every later call.  A replaced store is kept open (and referenced) until
    ``close_all`` or exit, so a read in flight on it keeps its handle.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[Any, ...], Store] = {}
        # Read-only stores a write replaced: still open for reads in flight.
        self._replaced: list[Store] = []
        # Stores a forked child inherited: kept referenced so their finalizers
        # never close a handle the parent still uses.
        self._inherited: list[Store] = []

    def get(self, token: tuple[Any, ...], url: str, mode: str | None,
            options: dict[str, Any], need: str) -> Store | None:
        """The shared store for ``token``, opened if needed; None if absent and not created.

        ``need`` is ``"read"``, ``"write"`` (an existing store) or
        ``"create"``.  With ``mode`` None a read opens the store ``"r"``,
        so reading takes no write lock and leaves no file behind (and
        reading a URL that names nothing creates nothing); a write opens it
        ``"r+"`` (``"a"`` to create), or ``"r"`` again where nothing can be
        written (read-only media: the write then raises ``ReadOnlyError``).
        """
        store = self._stores.get(token)  # every call passes here: no lock once open
        if store is not None and self._serves(store, mode, need):
            return store
        with self._lock:
            store = self._stores.get(token)
            if store is not None and self._serves(store, mode, need):
                return store
            opened = self._open(url, mode, options, need, store)
            if opened is not store and store is not None and not store.closed:
                self._replaced.append(store)
            if opened is not None:
                self._stores[token] = opened
            return opened

    @staticmethod
    def _serves(store: Store, mode: str | None, need: str) -> bool:
        """Whether the open ``store`` answers a call that needs ``need``."""
        return not store.closed and (need == "read" or mode is not None or not store.read_only)

    @staticmethod
    def _open(url: str, mode: str | None, options: dict[str, Any], need: str,
              read_only: Store | None) -> Store | None:
        """Open the store for ``need``; ``read_only`` is the open read-only one, if any."""
        from ..urls import open_store

        if mode is not None:
            return open_store(url, mode=mode, **options)  # type: ignore[arg-type]
        wanted = {"read": "r", "write": "r+", "create": "a"}[need]
        try:
            return open_store(url, mode=wanted, **options)  # type: ignore[arg-type]
        except StoreNotFoundError:
            return None
        except BlockingIOError:
            # StoreLockedError: for dbm.gnu/ndbm files the reader lock of this
            # process's own read-only store keeps its writer out; close it (a
            # read in flight on it fails) and open the writer.  Untested here:
            # the test machine's Python has neither _gdbm nor _dbm.
            if need == "read" or read_only is None or read_only.closed:
                raise
            read_only.close()
            return open_store(url, mode=wanted, **options)  # type: ignore[arg-type]
        except OSError as error:
            if need == "read" or not _cannot_write(error):
                raise
            # read-only files, folder or medium: the store refuses the write
            # itself (ReadOnlyError, naming it)
            if read_only is not None and not read_only.closed:
                return read_only
            if need == "create":
                raise
        try:
            return open_store(url, mode="r", **options)
        except StoreNotFoundError:
            return None

    def peek(self, token: tuple[Any, ...]) -> Store | None:
        """The open shared store for ``token``, without opening it (no lock: a dict read)."""
        store = self._stores.get(token)
        return None if store is None or store.closed else store

    def urls(self) -> list[str]:
        with self._lock:
            return sorted({token[1] for token, store in self._stores.items() if not store.closed})

    def close_all(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            replaced, self._replaced = self._replaced, []
        for store in [*stores, *replaced]:
            store.close()

    def forget_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._inherited.extend(self._stores.values())
        self._inherited.extend(self._replaced)
        self._stores = {}
        self._replaced = []


_SHARED = _SharedStores()
atexit.register(_SHARED.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SHARED.forget_after_fork)


def close_shared_stores() -> None:
    """Close every store opened through fsspec in this process.

    They are closed when the interpreter exits anyway; call this to release
    files or connections earlier.  A later use of a URL opens it again.

    Examples
    --------
    >>> from zstores.adapters.fsspec import close_shared_stores
    >>> close_shared_stores()
    """
    _SHARED.close_all()


def shared_store_urls() -> list[str]:
    """The URLs (passwords hidden) of the stores open through fsspec in this process.

    Examples
    --------
    >>> from zstores.adapters.fsspec import close_shared_stores, shared_store_urls
    >>> close_shared_stores()
    >>> shared_store_urls()
    []
    """
    from ..urls import redact_url

    return [redact_url(url) for url in _SHARED.urls()]


def _cannot_write(error: OSError) -> bool:
    """Whether ``error`` says the store is there but cannot be written.

    A ``ReadOnlyError`` or ``PermissionError`` (read-only files or folder),
    or ``EROFS`` from a backend that tried to create a lock or journal file
    on a read-only medium (a DBM store's ``.lock``).
    """
    return isinstance(error, PermissionError) or error.errno == errno.EROFS


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such key in the store", path)


# ------------------------------------------------------------- the file system
class StoreFileSystem(AsyncFileSystem):
    """An fsspec file system over the ``zstores`` store a URL names.

    Parameters
    ----------
    url : str
        The store URL as ``zstores.open_store`` takes it
        (``"lmdb:///data/run1.lmdb?map_size=1073741824"``).  fsspec passes it
        from the URL it was given.
    store_mode : {None, "r", "r+", "a", "w", "w-"}, optional
        The store's mode.  By default a read opens an existing store
        read-only (``"r"``: no write lock, no file created, works on
        read-only media) and never creates one; the first write opens it
        again writable (``"r+"``, or ``"a"`` to create it) and every later
        call uses that.  ``mode`` is accepted too, but ``fsspec.url_to_fs`` (which
        zarr uses) drops a ``mode`` storage option, so give ``store_mode`` in
        ``storage_options``.
    **options
        Store constructor options (``map_size``, ``table``, ``prefix`` ...),
        as ``open_store`` takes them; fsspec's own options (``asynchronous``
        ...) are accepted and not passed on.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> url = "sqlite://" + os.path.join(tempfile.mkdtemp(), "run1.sqlite")
    >>> array = zarr.create_array(url, shape=(4,), dtype="i4", chunks=(2,))
    >>> array[:] = np.arange(4)
    >>> zarr.open_array(url, mode="r")[:].tolist()
    [0, 1, 2, 3]
    >>> import fsspec
    >>> fs, path = fsspec.url_to_fs(url)
    >>> type(fs).__name__, path, fs.ls("c", detail=False)
    ('StoreFileSystem', '', ['c/0', 'c/1'])
    """

    protocol: ClassVar[tuple[str, ...]] = PROTOCOLS  # type: ignore[misc]
    root_marker = ""

    def __init__(self, url: str | None = None, *, store_mode: str | None = None,
                 mode: str | None = None, **options: Any) -> None:
        super().__init__(**{k: v for k, v in options.items() if k in _FSSPEC_OPTIONS})
        if not url:
            raise TypeError(
                f"{type(self).__name__} needs the store URL, e.g. "
                "fsspec.url_to_fs('lmdb:///data/run1.lmdb') or "
                "fsspec.filesystem('lmdb', url='lmdb:///data/run1.lmdb')"
            )
        if store_mode is not None and mode is not None and store_mode != mode:
            raise ValueError(f"store_mode={store_mode!r} and mode={mode!r} disagree; give one")
        self.store_mode = store_mode if store_mode is not None else mode
        if self.store_mode is not None:
            check_mode(self.store_mode)
        self.url = url
        self.store_options = {k: v for k, v in options.items() if k not in _FSSPEC_OPTIONS}
        self._token: tuple[Any, ...] = (
            os.getpid(), url, self.store_mode,
            tuple(sorted((name, repr(value)) for name, value in self.store_options.items())),
        )
        self._check_scheme()

    def _check_scheme(self) -> None:
        scheme = self.url.partition("://")[0].lower()
        if scheme not in PROTOCOLS:
            from ..urls import StoreURLError, redact_url

            raise StoreURLError(
                f"{redact_url(self.url)!r} is not a URL of a scheme zstores registers with "
                f"fsspec ({', '.join(PROTOCOLS)})"
            )

    # ---------------------------------------------------------- URL handling
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        """A store URL is the store's root (``""``); any other path is a key path.

        A leading ``/`` is kept, so listings answer in the form they were
        asked (zarr's ``FsspecStore`` strips what it put in front).
        """
        if isinstance(path, list):
            return [cls._strip_protocol(item) for item in path]
        path = os.fspath(path) if not isinstance(path, str) else path
        scheme, separator, _ = path.partition("://")
        if separator and scheme.lower() in PROTOCOLS:
            return ""
        return path.rstrip("/") or path[:1]  # "/" stays "/": the root, asked with a slash

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        scheme, separator, _ = path.partition("://")
        if separator and scheme.lower() in PROTOCOLS:
            return {"url": path}
        return {}

    def unstrip_protocol(self, name: str) -> str:
        """The store URL for the root; a key path otherwise (keys have no URL of their own)."""
        return self.url if not name.strip("/") else name

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from the URL and options in the process that unpickles it (a
        # dask worker), never with a mode that would clear the store again.
        kwargs = {name: value for name, value in self.storage_options.items() if name != "loop"}
        for name in ("store_mode", "mode"):
            if name in kwargs:
                kwargs[name] = _MODE_IN_ANOTHER_PROCESS[kwargs[name]]
        return make_instance, (type(self), self.storage_args, kwargs)

    def __eq__(self, other: object) -> bool:
        # Equal when on the same store, whichever thread made them (fsspec's
        # own token holds the thread of an asynchronous instance).
        return type(other) is type(self) and other._token[1:] == self._token[1:]  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), *self._token[1:]))

    def __repr__(self) -> str:
        from ..urls import redact_url

        return f"{type(self).__name__}({redact_url(self.url)!r})"

    # ------------------------------------------------------------- the store
    @property
    def store(self) -> Store:
        """The shared store, opened writable (and created if absent) on first use."""
        return self._store("create")  # type: ignore[return-value]

    def _store(self, need: str = "read") -> Store | None:
        """The shared store for ``need`` (``"read"``, ``"write"``, ``"create"``); None if absent."""
        return _SHARED.get(self._token, self.url, self.store_mode, self.store_options, need)

    @classmethod
    def _path(cls, path: Any) -> str:
        """The normalized store path ("" for the root) of an fsspec path."""
        return normalize_storage_path(cls._strip_protocol(path))

    @staticmethod
    def _join(asked: str, name: str) -> str:
        """``name`` below the path ``asked``, in the form the caller wrote ``asked``."""
        base = asked.rstrip("/")
        return f"{base}/{name}" if base or asked.startswith("/") else name

    # ------------------------------------------------------------ listings
    def _kind(self, store: Store, path: str) -> str | None:
        """``"file"``, ``"directory"`` or None (nothing there)."""
        if not path:
            return "directory"
        if path in store:
            return "file"
        return "directory" if store.listdir(path) else None

    def info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
        name = self._strip_protocol(path)
        key = self._path(name)
        store = self._store("read")
        kind = None if store is None else self._kind(store, key)
        if kind is None:
            if not key:  # the root of a store that does not exist yet
                return {"name": name, "size": 0, "type": "directory"}
            raise _missing(name)
        size = store.getsize(key) if kind == "file" else 0  # type: ignore[union-attr]
        return {"name": name, "size": size, "type": kind}

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> list[Any]:
        asked = self._strip_protocol(path)
        key = self._path(asked)
        store = self._store("read")
        if store is None:
            if key:
                raise _missing(asked)
            return []
        if key and key in store:  # fsspec lists a file as itself
            return [self.info(asked)] if detail else [asked]
        names = store.listdir(key)
        if key and not names:
            raise _missing(asked)
        paths = [self._join(asked, name) for name in names]
        if not detail:
            return paths
        entries = []
        for name, full in zip(names, paths, strict=True):
            child = f"{key}/{name}" if key else name
            if child in store:
                entries.append({"name": full, "size": store.getsize(child), "type": "file"})
            else:
                entries.append({"name": full, "size": 0, "type": "directory"})
        return entries

    def find(self, path: Any, maxdepth: int | None = None, withdirs: bool = False,
             detail: bool = False, **kwargs: Any) -> Any:
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        asked = self._strip_protocol(path)
        key = self._path(asked)
        store = self._store("read")
        found: dict[str, str] = {}  # path -> type
        if store is not None:
            if key and key in store:
                found[asked] = "file"
            for full_key in keys_with_prefix(store, prefix_of(key)):
                relative = full_key[len(prefix_of(key)):]
                parts = relative.split("/")
                if maxdepth is not None and len(parts) > maxdepth:
                    if withdirs:
                        self._add_dirs(found, asked, parts[:maxdepth])
                    continue
                if withdirs:
                    self._add_dirs(found, asked, parts[:-1])
                found[self._join(asked, relative)] = "file"
        names = sorted(found)
        if not detail:
            return names
        return {name: self.info(name) if found[name] == "file"
                else {"name": name, "size": 0, "type": "directory"} for name in names}

    def _add_dirs(self, found: dict[str, str], asked: str, parts: list[str]) -> None:
        for depth in range(1, len(parts) + 1):
            found.setdefault(self._join(asked, "/".join(parts[:depth])), "directory")

    def exists(self, path: Any, **kwargs: Any) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def isdir(self, path: Any) -> bool:
        try:
            return self.info(path)["type"] == "directory"
        except FileNotFoundError:
            return False

    def isfile(self, path: Any) -> bool:
        try:
            return self.info(path)["type"] == "file"
        except FileNotFoundError:
            return False

    # ---------------------------------------------------------------- reads
    def cat_file(self, path: Any, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        """The value at ``path``, or its bytes ``[start, end)`` (negative: from the end)."""
        name = self._strip_protocol(path)
        key = normalize_key(name)
        store = self._store("read")
        if store is None:
            raise _missing(name)
        try:
            if start is None and end is None:
                return store[key]
            return self._range(store, key, start or 0, end)
        except KeyError:
            raise _missing(name) from None

    @staticmethod
    def _range(store: Store, key: str, start: int, end: int | None) -> bytes:
        if end is None:
            return store.get_range(key, start)
        if start >= 0 and end >= 0:
            return store.get_range(key, start, max(end - start, 0))
        # A bound counted from the end: both become offsets from the start.
        size = store.getsize(key) if key in store else None
        if size is None:
            raise KeyError(key)
        first = max(size + start, 0) if start < 0 else min(start, size)
        stop = max(size + end, 0) if end < 0 else min(end, size)
        return store.get_range(key, first, max(stop - first, 0))

    def cat_ranges(self, paths: list[Any], starts: Any, ends: Any, max_gap: Any = None,
                   on_error: str = "return", **kwargs: Any) -> list[Any]:
        count = len(paths)
        starts = list(starts) if isinstance(starts, Iterable) else [starts] * count
        ends = list(ends) if isinstance(ends, Iterable) else [ends] * count
        if not len(starts) == len(ends) == count:
            raise ValueError("paths, starts and ends must have the same length")
        results: list[Any] = []
        for path, start, end in zip(paths, starts, ends, strict=True):
            try:
                results.append(self.cat_file(path, start, end))
            except Exception as error:  # fsspec's on_error contract: any error, returned
                if on_error != "return":
                    raise
                results.append(error)
        return results

    # --------------------------------------------------------------- writes
    def pipe_file(self, path: Any, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Set the value at ``path``; ``mode="create"`` refuses an existing key."""
        key = normalize_key(self._strip_protocol(path))
        store = self.store
        if mode == "create" and key in store:
            raise FileExistsError(errno.EEXIST, "the key exists already", path)
        store[key] = value

    def rm_file(self, path: Any) -> None:
        name = self._strip_protocol(path)
        store = self._store("write")
        if store is None:
            raise _missing(name)
        try:
            del store[normalize_key(name)]
        except KeyError:
            raise _missing(name) from None

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Delete keys; ``recursive=True`` also deletes everything under a folder.

        A missing path is ``FileNotFoundError`` unless ``recursive`` (``rm -rf``):
        zarr's ``FsspecStore.clear`` removes a folder and then each path found
        below it, and stops at the first ``FileNotFoundError``.
        """
        for item in path if isinstance(path, list) else [path]:
            self._rm_one(self._strip_protocol(item), recursive)

    def _rm_one(self, name: str, recursive: bool) -> None:
        key = self._path(name)
        store = self._store("write")
        if store is None:
            if recursive:
                return
            raise _missing(name)
        if key and key in store:
            del store[key]
        elif recursive:
            store.rmdir(key)  # nothing there: nothing to do
        elif store.listdir(key):
            raise IsADirectoryError(
                errno.EISDIR, "a folder of keys: pass recursive=True to delete it", name
            )
        else:
            raise _missing(name)
        if recursive and key and store.listdir(key):  # hierarchical stores cannot have both
            store.rmdir(key)

    def mkdir(self, path: Any, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to do: a store's folders exist while keys lie below them."""

    def makedirs(self, path: Any, exist_ok: bool = False) -> None:
        """Nothing to do: a store's folders exist while keys lie below them."""

    def rmdir(self, path: Any) -> None:
        """Nothing to do for an empty folder; refuses one that holds keys."""
        store = self._store("read")
        key = self._path(path)
        if store is not None and key and store.listdir(key):
            raise OSError(errno.ENOTEMPTY, "the folder holds keys", path)

    def touch(self, path: Any, truncate: bool = True, **kwargs: Any) -> None:
        key = normalize_key(self._strip_protocol(path))
        store = self.store
        if truncate or key not in store:
            store[key] = b""

    def cp_file(self, path1: Any, path2: Any, **kwargs: Any) -> None:
        self.pipe_file(path2, self.cat_file(path1))

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> None:
        """Rename a key or a folder of keys, through the store's own rename."""
        source, target = self._strip_protocol(path1), self._strip_protocol(path2)
        store = self._store("write")
        if store is None:
            raise _missing(source)
        try:
            store.rename(source, target)
        except KeyError:
            raise _missing(source) from None

    # ------------------------------------------------------------ open files
    def _open(self, path: Any, mode: str = "rb", block_size: Any = None,
              autocommit: bool = True, cache_options: dict[str, Any] | None = None,
              **kwargs: Any) -> StoreFile:
        if not autocommit:
            raise NotImplementedError(
                f"{type(self).__name__} has no transactions: a written file is stored when closed"
            )
        return StoreFile(self, self._strip_protocol(path), mode=mode, block_size=block_size,
                         cache_options=cache_options, **kwargs)


    # ------------------------------------------------- the asynchronous face
    # What zarr's FsspecStore awaits.  Each runs its synchronous twin (which
    # must be defined here: fsspec would otherwise make the twin a wrapper
    # that awaits this coroutine, and each would wait on the other): at once
    # for a store that answers from memory, else in a worker thread (also
    # while the store is not open yet: opening may wait on disk or network).
    async def _run(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        store = _SHARED.peek(self._token)
        if store is not None and not store.blocking:
            return method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)

    async def _info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
        return await self._run(self.info, path)

    async def _ls(self, path: Any, detail: bool = True, **kwargs: Any) -> list[Any]:
        return await self._run(self.ls, path, detail)

    async def _find(self, path: Any, maxdepth: int | None = None, withdirs: bool = False,
                    **kwargs: Any) -> Any:
        return await self._run(self.find, path, maxdepth, withdirs, kwargs.get("detail", False))

    async def _exists(self, path: Any, **kwargs: Any) -> bool:
        return await self._run(self.exists, path)

    async def _isdir(self, path: Any) -> bool:
        return await self._run(self.isdir, path)

    async def _isfile(self, path: Any) -> bool:
        return await self._run(self.isfile, path)

    async def _cat_file(self, path: Any, start: int | None = None, end: int | None = None,
                        **kwargs: Any) -> bytes:
        return await self._run(self.cat_file, path, start, end)

    async def _cat_ranges(self, paths: list[Any], starts: Any, ends: Any, max_gap: Any = None,
                          batch_size: Any = None, on_error: str = "return",
                          **kwargs: Any) -> list[Any]:
        return await self._run(self.cat_ranges, paths, starts, ends, on_error=on_error)

    async def _pipe_file(self, path: Any, value: bytes, mode: str = "overwrite",
                         **kwargs: Any) -> None:
        await self._run(self.pipe_file, path, value, mode)

    async def _rm_file(self, path: Any, **kwargs: Any) -> None:
        await self._run(self.rm_file, path)

    async def _rm(self, path: Any, recursive: bool = False, batch_size: Any = None,
                  maxdepth: int | None = None, **kwargs: Any) -> None:
        await self._run(self.rm, path, recursive, maxdepth)

    async def _mkdir(self, path: Any, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to do: a store's folders exist while keys lie below them."""

    async def _makedirs(self, path: Any, exist_ok: bool = False) -> None:
        """Nothing to do: a store's folders exist while keys lie below them."""


class StoreFile(AbstractBufferedFile):
    """A value of a store opened as a file.

    Reading fetches byte ranges with ``Store.get_range``; writing gathers the
    bytes and stores them as one value when the file is closed, so a reader
    never sees half a value.  ``"ab"`` appends to the existing value, ``"xb"``
    refuses an existing key.
    """

    fs: StoreFileSystem

    def __init__(self, fs: StoreFileSystem, path: str, mode: str = "rb", **kwargs: Any) -> None:
        self._parts: list[bytes] = []
        key = normalize_key(path)
        if mode in ("ab", "xb"):
            store = fs._store("read")
            existing = store is not None and key in store
            if mode == "xb" and existing:
                raise FileExistsError(errno.EEXIST, "the key exists already", path)
            if existing:
                self._parts.append(store[key])  # type: ignore[index]
            mode = "wb"
        super().__init__(fs, path, mode=mode, **kwargs)
        self.key = key

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start, end)

    def _initiate_upload(self) -> None:
        """Nothing to start: the value is stored whole on close."""

    def _upload_chunk(self, final: bool = False) -> bool:
        self._parts.append(self.buffer.getvalue())
        if final:
            self.fs.store[self.key] = b"".join(self._parts)
            self._parts = []
        return True
