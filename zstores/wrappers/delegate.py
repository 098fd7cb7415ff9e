"""``WrapperStore``: a ``Store`` that passes every operation to another store.

The wrappers (``LRUStoreCache``, ``ConsolidatedStore``) derive from it and
override only what they change.  Each primitive and fast path calls the inner
store's public method (which checks that store is open and writable, and
re-normalizes the key: a no-op on a normalized key), so a wrapper never reaches
into its store's primitives.  Keys reach the primitives normalized by the inner
store's own rule (``normalize``), so a wrapper and its store agree on the
spelling of every key (a nested store's ``0.1`` is ``0/1`` in both).  The one
private call left, ``_location``, is the identity behind ``==``, which has no
public form.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..base import Buffer, Mode, Store, Version, check_mode

if TYPE_CHECKING:
    from ..transactions import ChangeSet

__all__ = ["WrapperStore"]


class WrapperStore(Store):
    """Pass every operation to ``store``; subclasses change what they need.

    Parameters
    ----------
    store : zstores.Store
        The store to wrap.  ``close()`` closes it; garbage collection of the
        wrapper does not (the inner store closes itself when it is collected).
    mode : {None, "r", "r+", "a"}
        ``None`` (default) follows the inner store.  ``"r"`` makes a read-only
        view of a writable store.  ``"r+"``/``"a"`` ask for a writable wrapper
        and need a writable store.  A wrapper never creates or clears its
        store, so ``"w"`` and ``"w-"`` belong to the inner store's opening.

    Notes
    -----
    Capability flags (``supports_range_reads``, ``blocking`` ...) are the
    inner store's; a subclass may narrow them.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> from zstores.wrappers.delegate import WrapperStore
    >>> inner = MemoryStore()
    >>> view = WrapperStore(inner, mode="r")
    >>> inner["a/b"] = b"1"
    >>> view["a/b"], view.read_only, view.persistent
    (b'1', True, False)
    """

    def __init__(self, store: Store, *, mode: Mode | None = None) -> None:
        if not isinstance(store, Store):
            raise TypeError(
                f"{type(self).__name__} wraps a zstores.Store, not {type(store).__name__} "
                "(wrap a plain mapping in zstores.MemoryStore, or open a URL with "
                "zstores.open_store)"
            )
        super().__init__(mode=self._wrapper_mode(store, mode))
        self._store = store
        self._key = store.normalize  # type: ignore[method-assign]
        self.supports_range_reads = store.supports_range_reads
        self.supports_process_writers = store.supports_process_writers  # type: ignore[misc]
        self.supports_deletes = store.supports_deletes  # type: ignore[misc]
        self.max_value_size = store.max_value_size  # type: ignore[misc]
        self.persistent = store.persistent  # type: ignore[misc]
        self.hierarchical = store.hierarchical  # type: ignore[misc]
        self.blocking = store.blocking  # type: ignore[misc]
        self.supports_transactions = store.supports_transactions  # type: ignore[misc]
        self.supports_snapshots = store.supports_snapshots  # type: ignore[misc]
        self._commit_copies_values = store._commit_copies_values
        self._take_conditional_writes(store)

    def _wrapper_mode(self, store: Store, mode: str | None) -> str:
        if mode is None:
            return store.mode
        check_mode(mode)
        if mode in ("w", "w-"):
            raise ValueError(
                f"mode {mode!r} is not a wrapper's: {type(self).__name__} never creates or "
                "clears its store (open the inner store with that mode instead)"
            )
        if mode != "r" and store.read_only:
            raise ValueError(
                f"{store!r} was opened read-only (mode 'r'), so {type(self).__name__} cannot "
                f"be writable (mode {mode!r}); open the store with another mode"
            )
        return mode

    @property
    def store(self) -> Store:
        """The wrapped store."""
        return self._store

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        return self._store[key]

    def _set(self, key: str, value: Buffer) -> None:
        self._store[key] = value

    def _delete(self, key: str) -> None:
        del self._store[key]

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        return self._store.list_prefix(prefix)

    # ------------------------------------------------------------ fast paths
    def _contains(self, key: str) -> bool:
        return key in self._store

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        return self._store.get_range(key, start, length)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        return self._store.getitems(keys)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        self._store.setitems(dict(items))

    def _delete_many(self, keys: list[str]) -> None:
        self._store.delitems(keys)

    def _listdir(self, prefix: str) -> Iterable[str]:
        return self._store.listdir(prefix)

    def _rmdir(self, prefix: str) -> None:
        self._store.rmdir(prefix)

    def _remove_empty_folder(self, prefix: str) -> bool:
        return self._store.remove_empty_folder(prefix)

    def _getsize_key(self, key: str) -> int:
        # stat, not getsize: a missing key must raise (getsize answers 0), so
        # Store._stat's fallback costs one inner call for any non-empty key.
        size = self._store.stat(key)
        if size is None:
            raise KeyError(key)
        return size

    def _getsize_prefix(self, prefix: str) -> int:
        return self._store.getsize_prefix(prefix)

    def _len(self) -> int:
        return len(self._store)

    def _clear(self) -> None:
        self._store.clear()

    def _rename(self, src: str, dst: str) -> None:
        """Move the normalized key or prefix ``src`` to ``dst`` (the inner store's rules)."""
        self._store.rename(src, dst)

    def rename(self, src_path: str, dst_path: str) -> None:
        """Move a key, or every key under a prefix, with the inner store's ``rename``."""
        self._rename(self._key(src_path), self._key(dst_path))

    # -------------------------------------------- transactions and snapshots
    # A transaction on the wrapper gathers its writes in an overlay over the
    # wrapper (reads go through it: a cache serves them); the commit is the
    # inner store's, which checks every read against the stored values.
    # ---------------------------------------------------- conditional writes
    # The inner store's, through its public methods: a wrapper is as atomic as
    # its store, and refuses what the store refuses, for the store's reason.
    def _take_conditional_writes(self, store: Store) -> None:
        self.supports_create_if_absent = store.supports_create_if_absent
        self.supports_compare_and_swap = store.supports_compare_and_swap
        self._create_if_absent_refusal = store._create_if_absent_refusal
        self._compare_and_swap_refusal = store._compare_and_swap_refusal
        self._version_kind = store._version_kind

    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        return self._store.set_if_not_exists(key, value)

    def _get_with_version(self, key: str) -> tuple[bytes, Version]:
        return self._store.get_with_version(key)

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        return self._store.replace_if(key, expected, value)

    def _commit_changes(self, changes: ChangeSet) -> None:
        self._store._commit_changes(changes)

    def _check_transaction_keys(self, keys: list[str]) -> None:
        self._store._check_transaction_keys(keys)

    def _check_transaction_prefix(self, prefix: str) -> None:
        self._store._check_transaction_prefix(prefix)

    def _snapshot(self) -> Store:
        # The same wrapper, read-only, over a snapshot of the store (closing
        # it closes the snapshot).
        return type(self)(self._store.snapshot(), **self._wrapper_params(), mode="r")

    # -------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        self._store.close()

    def __del__(self) -> None:
        # Dropping a wrapper must not close a store its caller still uses.
        pass

    def _wrapper_params(self) -> dict[str, Any]:
        """Keyword arguments of the subclass's constructor besides ``store`` and ``mode``."""
        return {}

    def _params(self) -> dict[str, Any]:
        return {"store": self._store, **self._wrapper_params()}

    def _reopen_as(self, mode: str) -> Store:
        # Reopen the inner store too: a new wrapper must not share (and later
        # close) this one's handle.
        inner_mode = mode if mode == "r" or not self._store.read_only else "r"
        return type(self)(self._store.reopen(inner_mode), **self._wrapper_params(), mode=mode)

    def _location(self) -> Any:
        return (type(self._store), self._store._location())

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, WrapperStore)
        return bool(
            self._store == other._store and self._wrapper_params() == other._wrapper_params()
        )

    def __hash__(self) -> int:
        return hash((type(self), self._store))

    def __reduce__(self) -> tuple[Any, ...]:
        # The inner store pickles itself (a persistent one reopens its location,
        # an in-memory one copies its data); the wrapper keeps its own mode only
        # where it differs from the store's (a read-only view).
        mode = None if self._mode == self._store.mode else self._mode
        return (_rebuild, (type(self), self._store, self._wrapper_params(), mode))

    def __repr__(self) -> str:
        params = "".join(f", {name}={value!r}" for name, value in self._repr_params().items())
        return f"{type(self).__name__}({self._store!r}{params}, mode={self._mode!r})"

    def _repr_params(self) -> dict[str, Any]:
        return self._wrapper_params()


def _rebuild(
    cls: type[WrapperStore], store: Store, params: dict[str, Any], mode: str | None
) -> WrapperStore:
    return cls(store, **params, mode=mode)  # type: ignore[arg-type]
