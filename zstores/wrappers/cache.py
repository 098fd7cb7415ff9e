"""``LRUStoreCache``: a least-recently-used cache of values and listings over any store.

One lock guards the cache; it is never held while the inner store works, so
concurrent misses fetch in parallel.  What keeps a slow miss from caching a
value that a concurrent write has replaced:

* every miss in flight holds a *token* for its key; a write to the key (when
  it starts and when it ends) and every prefix operation drop the tokens, and
  a miss caches its value only if its token survived;
* a write caches the value it wrote only if no other write to the same key
  and no prefix operation overlapped it (otherwise the order in which they
  reached the store is unknown, and the key is simply left uncached);
* listings (``keys``, ``listdir``, ``contains``) are cached only if no write
  started or ended while they were fetched, and every write drops them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ..base import Buffer, Mode, Store, _range_stop
from ..errors import TransactionError
from .delegate import WrapperStore

if TYPE_CHECKING:
    from ..transactions import ChangeSet

__all__ = ["LRUStoreCache"]

_T = TypeVar("_T")


class LRUStoreCache(WrapperStore):
    """Keep recently read values, key listings and ``in`` answers of a slow store in memory.

    Reads are served from the cache when they can; everything else, and every
    write, goes to the wrapped store.  A write through the cache updates it
    (the written value is cached); deletes, ``rmdir``, ``rename`` and
    ``clear`` drop what they touch.  Changes made to the store by anyone else
    are not seen until ``invalidate()``: the cache assumes it is the store's
    only writer, so ``supports_process_writers`` is False whatever the store
    declares.

    Parameters
    ----------
    store : zstores.Store
        The store to cache.  ``close()`` closes it too.
    max_size : int or None
        Most bytes of values kept; ``None`` keeps every value read.  A value
        larger than ``max_size`` is never cached; the least recently used
        values go first to make room.  Listings do not count.
    mode : {None, "r", "r+", "a"}
        ``None`` (default) follows the store; ``"r"`` gives a read-only cache
        over a writable store.

    Attributes
    ----------
    hits, misses : int
        Value reads served from the cache, and read from the store.

    Notes
    -----
    Thread-safe; pickling pickles the store and ``max_size`` (the copy starts
    with an empty cache).  ``getsize`` of a cached key and ``get_range`` on a
    cached value are answered from the cache; a missed range read goes to the
    store and caches nothing.

    Examples
    --------
    >>> from zstores import LRUStoreCache, SQLiteStore
    >>> cache = LRUStoreCache(SQLiteStore(":memory:"), max_size=2**20)
    >>> cache["foo/0.0"] = b"chunk"          # written to the store and cached
    >>> cache["foo/0.0"], cache.hits, cache.misses
    (b'chunk', 1, 0)
    >>> cache.store["foo/0.0"] = b"changed behind the cache's back"
    >>> cache["foo/0.0"]
    b'chunk'
    >>> cache.invalidate()
    >>> cache["foo/0.0"], cache.misses
    (b"changed behind the cache's back", 1)
    >>> cache.listdir("foo")                 # cached until the next write
    ['0.0']
    >>> cache.close()
    """

    def __init__(self, store: Store, max_size: int | None, *, mode: Mode | None = None) -> None:
        super().__init__(store, mode=mode)
        self.supports_process_writers = False  # type: ignore[misc]
        if max_size is not None:
            if isinstance(max_size, bool) or not isinstance(max_size, int):
                raise TypeError(
                    f"max_size must be an int (bytes) or None, not {type(max_size).__name__}"
                )
            if max_size < 0:
                raise ValueError(f"max_size must be >= 0 bytes or None, not {max_size}")
        self._max_size = max_size
        self._lock = threading.Lock()
        self._values: OrderedDict[str, bytes] = OrderedDict()
        self._current_size = 0
        self._keys_cache: list[str] | None = None
        self._keys_set: frozenset[str] = frozenset()
        self._contains_cache: dict[str, bool] = {}
        self._listdir_cache: dict[str, list[str]] = {}
        # Concurrency bookkeeping (see the module docstring).
        self._tokens: dict[str, set[object]] = {}  # misses in flight, per key
        self._writing: dict[str, list[int]] = {}  # key -> [writes in flight, overlapped]
        self._bulk_in_flight = 0  # rmdir / rename / clear running now
        self._bulk_epoch = 0  # bumped when one starts or ends
        self._listing_epoch = 0  # bumped whenever listings are dropped
        self.hits = 0
        self.misses = 0

    # --------------------------------------------------------------- public
    @property
    def max_size(self) -> int | None:
        """Most bytes of values kept (None: no limit)."""
        return self._max_size

    @property
    def current_size(self) -> int:
        """Bytes of values in the cache now."""
        return self._current_size

    def invalidate(self) -> None:
        """Forget every cached value and listing.

        Examples
        --------
        >>> from zstores import LRUStoreCache, MemoryStore
        >>> cache = LRUStoreCache(MemoryStore(), max_size=None)
        >>> cache["a"] = b"1"
        >>> cache.current_size
        1
        >>> cache.invalidate()
        >>> cache.current_size
        0
        """
        with self._lock:
            self._drop_values(lambda key: True)
            self._drop_listings()

    def invalidate_values(self) -> None:
        """Forget every cached value; listings stay.

        Examples
        --------
        >>> from zstores import LRUStoreCache, MemoryStore
        >>> cache = LRUStoreCache(MemoryStore(), max_size=None)
        >>> cache["a"] = b"1"
        >>> cache.invalidate_values()
        >>> cache["a"], cache.misses
        (b'1', 1)
        """
        with self._lock:
            self._drop_values(lambda key: True)

    def invalidate_keys(self) -> None:
        """Forget the cached key listings, ``listdir`` results and ``in`` answers; values stay.

        Examples
        --------
        >>> from zstores import LRUStoreCache, MemoryStore
        >>> cache = LRUStoreCache(MemoryStore(), max_size=None)
        >>> cache.listdir()
        []
        >>> cache.store["new"] = b"written around the cache"
        >>> cache.listdir()
        []
        >>> cache.invalidate_keys()
        >>> cache.listdir()
        ['new']
        """
        with self._lock:
            self._drop_listings()

    def _refuse_inner_transaction(self) -> None:
        """Refuse to work while this thread has a transaction open on the wrapped store.

        The store would answer from the transaction, and the cache would then
        keep (and serve to other threads) values that are not committed and
        may never be.
        """
        if self._store.in_transaction:
            raise TransactionError(
                f"{self!r}: this thread has a transaction open on the wrapped store, whose "
                "uncommitted values the cache must not keep; use the cache outside it"
            )

    # -------------------------------------------------- cache bookkeeping
    # Every method below whose name starts with "_drop", "_insert" or
    # "_release" runs with the lock held.
    def _insert(self, key: str, value: Buffer) -> None:
        size = len(value)
        if self._max_size is not None and size > self._max_size:
            return
        old = self._values.pop(key, None)
        if old is not None:
            self._current_size -= len(old)
        if self._max_size is not None:
            while self._current_size + size > self._max_size:
                _, evicted = self._values.popitem(last=False)
                self._current_size -= len(evicted)
        self._values[key] = value if type(value) is bytes else bytes(value)
        self._current_size += size

    def _drop_values(self, matches: Callable[[str], bool]) -> None:
        """Drop cached values of matching keys, and every miss in flight."""
        for key in [key for key in self._values if matches(key)]:
            self._current_size -= len(self._values.pop(key))
        self._tokens.clear()
        self._bulk_epoch += 1

    def _drop_key(self, key: str) -> None:
        value = self._values.pop(key, None)
        if value is not None:
            self._current_size -= len(value)
        self._tokens.pop(key, None)

    def _drop_listings(self) -> None:
        self._keys_cache = None
        self._keys_set = frozenset()
        self._contains_cache.clear()
        self._listdir_cache.clear()
        self._listing_epoch += 1

    def _lookup(self, key: str) -> bytes | object:
        """The cached value (counted as a hit), or a token for a miss (counted)."""
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
            self.hits += 1
            return value
        self.misses += 1
        token = object()
        self._tokens.setdefault(key, set()).add(token)
        return token

    def _release(self, key: str, token: object) -> bool:
        """Retire a miss's token; True if no write or drop happened since it was taken."""
        tokens = self._tokens.get(key)
        if tokens is None or token not in tokens:
            return False
        tokens.discard(token)
        if not tokens:
            del self._tokens[key]
        return key not in self._writing

    # -------------------------------------------------------------- reads
    def _get(self, key: str) -> bytes:
        self._refuse_inner_transaction()
        with self._lock:
            found = self._lookup(key)
        if type(found) is bytes:
            return found
        try:
            value = self._store[key]
        except BaseException:
            with self._lock:
                self._release(key, found)
            raise
        with self._lock:
            if self._release(key, found):
                self._insert(key, value)
        return value

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        self._refuse_inner_transaction()
        found: dict[str, bytes] = {}
        tokens: dict[str, object] = {}
        with self._lock:
            for key in keys:
                value = self._lookup(key)
                if type(value) is bytes:
                    found[key] = value
                else:
                    tokens[key] = value
        if not tokens:
            return found
        fetched: dict[str, bytes] = {}
        try:
            fetched = self._store.getitems(list(tokens))
        finally:
            with self._lock:
                for key, token in tokens.items():
                    if self._release(key, token) and key in fetched:
                        self._insert(key, fetched[key])
        found.update(fetched)
        return found

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        self._refuse_inner_transaction()
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
        if value is None:
            return self._store.get_range(key, start, length)
        return value[start : None if length is None else _range_stop(start, length, len(value))]

    def _getsize_key(self, key: str) -> int:
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        return size

    def _stat(self, key: str) -> int | None:
        self._refuse_inner_transaction()
        # A cached value or a cached "absent" answers without the store; the
        # store's stat caches nothing (it reads no value).
        with self._lock:
            value = self._values.get(key)
            if value is None and self._keys_cache is not None:
                absent = key not in self._keys_set
            else:
                absent = self._contains_cache.get(key) is False
        if value is not None:
            return len(value)
        if absent:
            return None
        return self._store.stat(key)

    def _contains(self, key: str) -> bool:
        self._refuse_inner_transaction()
        with self._lock:
            if key in self._values:
                return True
            if self._keys_cache is not None:
                return key in self._keys_set
            known = self._contains_cache.get(key)
            epoch = self._listing_epoch
        if known is not None:
            return known
        present = key in self._store
        with self._lock:
            if self._listing_epoch == epoch:
                self._contains_cache[key] = present
        return present

    def _cached_listing(self, cached: Callable[[], Any], fetch: Callable[[], Any],
                        keep: Callable[[Any], None]) -> Any:
        self._refuse_inner_transaction()
        with self._lock:
            listing = cached()
            epoch = self._listing_epoch
        if listing is not None:
            return listing
        listing = fetch()
        with self._lock:
            if self._listing_epoch == epoch:
                keep(listing)
        return listing

    def _all_keys(self) -> list[str]:
        def keep(keys: list[str]) -> None:
            self._keys_cache = keys
            self._keys_set = frozenset(keys)

        return self._cached_listing(  # type: ignore[no-any-return]
            lambda: self._keys_cache, lambda: list(self._store), keep
        )

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        self._refuse_inner_transaction()
        if not prefix:
            return self._all_keys()
        with self._lock:
            keys = self._keys_cache
        if keys is not None:
            return [key for key in keys if key.startswith(prefix)]
        return super()._list_prefix(prefix)

    def _listdir(self, prefix: str) -> Iterable[str]:
        def keep(names: list[str]) -> None:
            self._listdir_cache[prefix] = names

        return self._cached_listing(  # type: ignore[no-any-return]
            lambda: self._listdir_cache.get(prefix), lambda: self._store.listdir(prefix), keep
        )

    def _len(self) -> int:
        self._refuse_inner_transaction()
        with self._lock:
            keys = self._keys_cache
        return len(keys) if keys is not None else len(self._store)

    # ------------------------------------------------------------- writes
    def _write(self, items: dict[str, Buffer | None], call: Callable[[], None]) -> None:
        """Run ``call`` (a write of ``items``; None: a delete) and update the cache around it."""
        self._refuse_inner_transaction()
        with self._lock:
            bulk_epoch = self._bulk_epoch
            for key in items:
                writes = self._writing.get(key)
                if writes is None:
                    self._writing[key] = [1, 0]
                else:
                    writes[0] += 1
                    writes[1] = 1
                self._drop_key(key)
            self._drop_listings()
        succeeded = False
        try:
            call()
            succeeded = True
        finally:
            with self._lock:
                alone = bulk_epoch == self._bulk_epoch and not self._bulk_in_flight
                for key, value in items.items():
                    writes = self._writing[key]
                    writes[0] -= 1
                    overlapped = writes[1]
                    if not writes[0]:
                        del self._writing[key]
                    self._drop_key(key)
                    if succeeded and value is not None and alone and not overlapped:
                        self._insert(key, value)
                self._drop_listings()

    def _set(self, key: str, value: Buffer) -> None:
        self._write({key: value}, lambda: self._store.__setitem__(key, value))

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        values = dict(items)
        self._write(values, lambda: self._store.setitems(values))

    # A conditional write drops the key around it as any write does; its value
    # is not cached (the inner store may have kept another writer's instead).
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        return self._conditional(key, lambda: self._store.set_if_not_exists(key, value))

    def _replace_if(self, key: str, expected: Any, value: Buffer) -> bool:
        return self._conditional(key, lambda: self._store.replace_if(key, expected, value))

    def _conditional(self, key: str, call: Callable[[], bool]) -> bool:
        done: list[bool] = []
        self._write({key: None}, lambda: done.append(call()))
        return done[0]

    def _delete(self, key: str) -> None:
        self._write({key: None}, lambda: self._store.__delitem__(key))

    def _delete_many(self, keys: list[str]) -> None:
        self._write(dict.fromkeys(keys), lambda: self._store.delitems(keys))

    def _bulk(self, matches: Callable[[str], bool], call: Callable[[], _T]) -> _T:
        """Run a prefix operation, dropping what it may touch before and after; its result."""
        self._refuse_inner_transaction()
        with self._lock:
            self._bulk_in_flight += 1
            self._drop_values(matches)
            self._drop_listings()
        try:
            return call()
        finally:
            with self._lock:
                self._bulk_in_flight -= 1
                self._drop_values(matches)
                self._drop_listings()

    def _commit_changes(self, changes: ChangeSet) -> None:
        # Like a prefix operation: drop what the commit may change before and
        # after it, so no value from before the commit is cached after it.
        self._bulk(changes.touches, lambda: WrapperStore._commit_changes(self, changes))

    def _rmdir(self, prefix: str) -> None:
        self._bulk(lambda key: key.startswith(prefix), lambda: WrapperStore._rmdir(self, prefix))

    def _clear(self) -> None:
        self._bulk(lambda key: True, lambda: WrapperStore._clear(self))

    def _remove_empty_folder(self, prefix: str) -> bool:
        # No value can change, but cached listings may name the folder.
        return self._bulk(lambda key: False,
                          lambda: WrapperStore._remove_empty_folder(self, prefix))

    def _rename(self, src: str, dst: str) -> None:
        def touched(key: str) -> bool:
            return key in (src, dst) or key.startswith((src + "/", dst + "/"))

        self._bulk(touched, lambda: WrapperStore._rename(self, src, dst))

    # ----------------------------------------------------------- identity
    def _wrapper_params(self) -> dict[str, Any]:
        return {"max_size": self._max_size}
