"""The one abstract base class every store derives from.

``Store`` does the shared work once: its public methods check that the store
is open and writable, normalize and check keys (``keys.py``), coerce values to
bytes and enforce the backend's value limit.  A backend implements four small
primitives::

    _get(key) -> bytes          raise KeyError when missing
    _set(key, value)            value is bytes or a 1-d byte memoryview
    _delete(key)                raise KeyError when missing
    _list_prefix(prefix)        every key that starts with prefix ("" or "x/")

and inherits a correct (if slower) fallback for everything else.  It overrides
a fast path only where its engine offers one: ``_get_range``, ``_get_many``,
``_set_many``, ``_delete_many``, ``_contains``, ``_stat``, ``_listdir``,
``_rmdir``, ``_getsize_key``, ``_getsize_prefix``, ``_rename_key``,
``_rename_prefix``, ``_len``, ``_clear``.  The conditional writes
(``set_if_not_exists``, ``replace_if``) call ``_set_if_absent`` and
``_replace_if``, which a backend implements only where its engine makes
them atomic against every writer (and sets ``supports_create_if_absent`` /
``supports_compare_and_swap``); ``_get_with_version`` falls back to a digest
of the value, which ``_holds`` compares.  Keys reaching a primitive are
already normalized and values already coerced, so a backend never repeats
those checks.

Layers above a store (adapters, the command line, zfuse) use only public
methods: besides the mapping interface, ``normalize`` (the store's key rule),
``stat`` (size or None in one backend call), ``list_prefix`` and
``getsize_prefix`` (a folder's keys and total size) and ``reopen`` (a second
handle).  The underscore methods are the backends' side of the contract.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from .errors import (
    InvalidKeyError,
    ReadOnlyError,
    StoreClosedError,
    StoreExistsError,
    StoreNotFoundError,
    TransactionError,
    UnsupportedOperationError,
    ValueTooLargeError,
)
from .keys import child_name, normalize_key, normalize_storage_path, prefix_of
from .readers import BufferReader, ValueReader

if TYPE_CHECKING:
    from .transactions import ChangeSet, Transaction

__all__ = [
    "MODES", "Mode", "SortedNames", "Store", "Version", "children_by_scan", "children_by_seek",
    "to_buffer",
]

Mode = Literal["r", "r+", "a", "w", "w-"]

MODES: dict[str, str] = {
    "r": "read-only; the store must exist",
    "r+": "read-write; the store must exist",
    "a": "read-write; created if missing",
    "w": "read-write; created, and cleared if it exists",
    "w-": "read-write; created, and an error if it exists",
}

# After unpickling, a store reopens the location it was created at: it must
# neither clear it again ("w") nor refuse it for existing ("w-").  Not "r+"
# either: a store that is still empty may not exist yet as far as its backend
# can tell (a Redis prefix without keys, a dbm file not yet written).
_MODE_AFTER_PICKLE = {"r": "r", "r+": "r+", "a": "a", "w": "a", "w-": "a"}

Buffer = bytes | memoryview


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is one of ``MODES``, else raise ``ValueError``."""
    if mode not in MODES:
        known = ", ".join(f"{m!r} ({meaning})" for m, meaning in MODES.items())
        raise ValueError(f"invalid mode {mode!r}; expected one of {known}")
    return mode


def to_buffer(value: Any) -> Buffer:
    """Coerce a value to ``bytes`` or a 1-d byte ``memoryview`` without copying.

    Anything with the buffer protocol is accepted; its bytes are stored in
    memory order, as numcodecs does for C- and Fortran-ordered arrays.

    Raises
    ------
    TypeError
        If the value does not support the buffer protocol (``str``, ``int`` ...).
    ValueError
        If the buffer is not contiguous in memory.
    """
    if type(value) is bytes:
        return value
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(
            "a store value must support the buffer protocol (bytes, bytearray, "
            f"memoryview, numpy array), not {type(value).__name__}"
        ) from None
    if view.c_contiguous:
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    if view.contiguous:
        return view.tobytes(order="A")
    raise ValueError(
        f"a store value must be contiguous in memory; this {type(value).__name__} "
        "is a strided view (copy it first, e.g. numpy.ascontiguousarray)"
    )


class SortedNames(list):  # type: ignore[type-arg]
    """Names a backend's ``_listdir`` returns already sorted: ``listdir`` copies, never sorts.

    A backend that keeps its listings sorted (MemoryStore) returns one of
    these; sorting a sorted list again cost ``listdir`` of 1,000 names most
    of its time.  Anything else ``_listdir`` returns is sorted by ``listdir``.
    """

    __slots__ = ()


def children_by_seek(prefix: str, first_key_from: Callable[[str], str | None]) -> list[str]:
    """List the direct children of ``prefix`` in a sorted key space by seeking.

    ``first_key_from(lower)`` returns the smallest key that is ``>= lower`` and
    starts with ``prefix``, or ``None``.  After finding a child folder ``c`` the
    scan jumps past every key under ``prefix + c + "/"`` (the successor of ``/``
    is ``0``), so the cost grows with the number of children, not of keys.
    Names come back unique but not sorted (``a.b`` sorts between ``a`` and ``a/x``).
    """
    children: dict[str, None] = {}
    key = first_key_from(prefix)
    while key is not None:
        name = child_name(key, prefix)
        children[name] = None
        if len(key) == len(prefix) + len(name):
            key = first_key_from(key + "\x00")  # a plain key: the very next key
        else:
            key = first_key_from(prefix + name + "0")
    return list(children)


def children_by_scan(
    prefix: str, keys_from: Callable[[str], Iterable[str]], *, rows_per_folder: int = 32
) -> list[str]:
    """List the direct children of ``prefix`` in a sorted key space by reading it in order.

    ``keys_from(lower)`` yields, in sorted order, the keys that are
    ``>= lower`` and start with ``prefix`` (a cursor over a range query).  One
    read usually serves the whole folder: plain keys are names as they come,
    and the keys of a child folder are read past while there are few of them.
    After ``rows_per_folder`` keys inside one child folder the scan starts a
    new read past it (like ``children_by_seek``), so a folder of a million
    chunks costs a few rows, not a million.  Names come back unique but not
    sorted (``a.b`` sorts between ``a`` and ``a/x``).

    Examples
    --------
    >>> keys = sorted(["a/.zarray", "a/0.0", "a/b/0", "a/b/1", "a/c/0", "x"])
    >>> def keys_from(lower):
    ...     return (key for key in keys if key >= lower and key.startswith("a/"))
    >>> sorted(children_by_scan("a/", keys_from))
    ['.zarray', '0.0', 'b', 'c']
    """
    children: dict[str, None] = {}
    start = len(prefix)
    lower: str | None = prefix
    while lower is not None:
        rows = keys_from(lower)
        lower = None
        folder_end = ""  # keys below this one lie inside the last child folder
        inside = 0
        for key in rows:
            if key < folder_end:
                inside += 1
                if inside >= rows_per_folder:
                    lower = folder_end  # a big folder: jump past it
                    break
                continue
            slash = key.find("/", start)
            if slash < 0:
                children[key[start:]] = None
            else:
                children[key[start:slash]] = None
                folder_end = key[:slash] + "0"  # "0" follows "/"
                inside = 0
    return list(children)


# ------------------------------------------------------- the one route in
# Every public method of ``Store`` that touches data is written as its body
# alone and put behind one gate by ``_reads`` or ``_writes``.  The gate is a
# truth test of attributes that are all false on the fast path; when one is
# true (the store is closed, read-only for a write, or some thread has a
# transaction bound to it) ``Store._detour`` checks the store and hands a
# call from a thread with a bound transaction to that transaction.
# ``Store.__init_subclass__`` puts a subclass's override of such a method
# behind the same gate, so no public method can miss the route
# (tests/test_base.py checks each one).
#
# The gate takes the body's own parameters: it is written out with them and
# compiled once per method, as ``dataclasses`` writes ``__init__``.  A gate
# taking ``*args, **kwargs`` cost ``store[key]`` on a MemoryStore about twice
# its time; one with the body's parameters costs nothing measurable
# (docs/benchmarks.md, "The transaction route").

_Method = TypeVar("_Method", bound=Callable[..., Any])

#: Public method name -> True if it writes (the gate also refuses mode "r").
_GATED: dict[str, bool] = {}


def _gate(body: _Method, writes: bool) -> _Method:
    """``body`` behind the gate; the result is a function with ``body``'s signature."""
    params = list(inspect.signature(body).parameters.values())[1:]
    if any(param.kind is not param.POSITIONAL_OR_KEYWORD for param in params):
        raise TypeError(f"{body.__qualname__}: a gated method takes plain parameters only")
    names = ", ".join(param.name for param in params)
    closed = "self._closed or self._transactions" + (" or self._mode == 'r'" if writes else "")
    source = (
        "def make(body):\n"
        f"    def gated(self, {names}):\n"
        f"        if {closed}:\n"
        f"            return self._detour(body, {writes}, ({names}{',' if params else ''}))\n"
        f"        return body(self, {names})\n"
        "    return gated\n"
    )
    namespace: dict[str, Any] = {}
    # The module's globals: doctest finds the gated method's examples by them.
    exec(source, body.__globals__, namespace)  # noqa: S102 - our own text, made above
    gated = functools.update_wrapper(namespace["make"](body), body)
    gated.__defaults__ = body.__defaults__
    gated._gated = writes  # type: ignore[attr-defined]
    return gated  # type: ignore[no-any-return]


def _reads(body: _Method) -> _Method:
    """A public reading method: refused on a closed store, routed to a bound transaction."""
    _GATED[body.__name__] = False
    return _gate(body, writes=False)


def _writes(body: _Method) -> _Method:
    """A public writing method: refused on a closed or read-only store, routed likewise."""
    _GATED[body.__name__] = True
    return _gate(body, writes=True)


@dataclass(frozen=True)
class Version:
    """One version of a key's value, as ``Store.get_with_version`` saw it.

    The token ``Store.replace_if`` takes as ``expected``: the replace happens
    only while the key still holds this version.  What the token is depends
    on the engine: ``kind="etag"`` (S3, Azure) or ``"generation"`` (GCS) is
    the object store's own version of the object, so an object rewritten
    with the same bytes is a new version; ``kind="sha256"`` (``"sha1"`` on
    Redis, whose server computes it) is a digest of the value, compared by
    the store inside its write transaction, so a value changed and changed
    back counts as unchanged.  A ``Version`` is a frozen dataclass of two
    strings: it pickles, hashes and compares equal across processes and
    handles, so a lease holder may pass it to another process.

    Attributes
    ----------
    kind : str
        What the token is: ``"sha256"``, ``"sha1"``, ``"etag"`` or ``"generation"``.
    token : str
        The digest in hex, the ETag or the generation number, as text.

    Examples
    --------
    >>> import pickle
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["lease"] = b"owner=a"
    >>> value, version = store.get_with_version("lease")
    >>> version.kind, pickle.loads(pickle.dumps(version)) == version
    ('sha256', True)
    """

    kind: str
    token: str

    @classmethod
    def of_value(cls, value: Buffer, kind: str = "sha256") -> Version:
        """The digest version of ``value`` (``kind`` is a ``hashlib`` algorithm)."""
        return cls(kind, hashlib.new(kind, value).hexdigest())


class Store(MutableMapping[str, bytes]):
    """A Zarr key/value store: a ``MutableMapping[str, bytes]`` with extras.

    Parameters
    ----------
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` read-only, ``"r+"`` read-write on an existing store, ``"a"``
        read-write creating it if needed (default), ``"w"`` create and clear,
        ``"w-"`` create and fail if it exists.

    Examples
    --------
    A backend needs four primitives; everything else is inherited:

    >>> class DictStore(Store):
    ...     def __init__(self, *, mode="a"):
    ...         super().__init__(mode=mode)
    ...         self._data = {}
    ...     def _get(self, key): return self._data[key]
    ...     def _set(self, key, value): self._data[key] = bytes(value)
    ...     def _delete(self, key): del self._data[key]
    ...     def _list_prefix(self, prefix):
    ...         return [k for k in self._data if k.startswith(prefix)]
    >>> s = DictStore()
    >>> s["foo/bar/0.0"] = b"abc"
    >>> s.listdir("foo"), s.getsize(), s.get_range("foo/bar/0.0", 1)
    (['bar'], 3, b'bc')
    """

    #: Byte-range reads fetch only the range (otherwise the whole value is read).
    supports_range_reads: bool = False
    #: Several processes may write to the same location at once.
    supports_process_writers: ClassVar[bool] = False
    #: Keys can be deleted (and so overwritten without growing without bound).
    supports_deletes: ClassVar[bool] = True
    #: The largest value in bytes, or None for no limit below memory.
    max_value_size: ClassVar[int | None] = None
    #: Data outlives the store object (False for in-memory stores).
    persistent: ClassVar[bool] = True
    #: A key cannot also be a prefix (``a`` and ``a/b``): folders, zip paths.
    hierarchical: ClassVar[bool] = False
    #: Calls may wait on disk or network long enough that an event loop should
    #: hand them to a thread (False: in-memory or memory-mapped, cheaper than a
    #: hand-off; the zarr-python 3 adapter then calls them directly).
    blocking: ClassVar[bool] = True
    #: An empty value is stored and read back as ``b""``.  An instance may say
    #: False (Berkeley DB's ndbm reads ``b""`` back as a missing key): such a
    #: store refuses empty values with ``UnsupportedOperationError``.
    supports_empty_values: bool = True
    #: ``transaction()`` works: writes inside become visible together at commit,
    #: or not at all (see ``zstores.transactions``).
    supports_transactions: bool = False
    #: ``snapshot()`` works: a read-only view of one state of the store.
    supports_snapshots: bool = False
    #: ``_commit_changes`` copies each value out (into the engine's pages, a
    #: command) rather than keeping the object: a transaction then holds its
    #: values in pooled memory (``zstores._arena``) instead of ``bytes``.
    _commit_copies_values: bool = True
    #: ``set_if_not_exists`` works, atomically against every other writer of
    #: the location (other threads, handles and processes, through any door).
    supports_create_if_absent: bool = False
    #: ``replace_if`` (compare-and-swap) works, atomically in the same sense.
    supports_compare_and_swap: bool = False
    #: Why ``set_if_not_exists``/``replace_if`` are refused where the flag is False
    #: (shown in the ``UnsupportedOperationError``).
    _create_if_absent_refusal: str = (
        "its engine offers no atomic create-if-absent")
    _compare_and_swap_refusal: str = (
        "its engine offers no atomic compare-and-swap")
    #: The digest ``get_with_version`` gives where the engine has no version of
    #: its own (a ``hashlib`` name; Redis's server computes ``sha1``).
    _version_kind: str = "sha256"
    #: What ``transaction()`` makes: ``zstores.transactions.Transaction``, set by
    #: that module when imported (it imports this one, not the reverse).
    _transaction_class: ClassVar[type[Transaction]]

    def __init__(self, *, mode: Mode = "a") -> None:
        self._mode = check_mode(mode)
        self._closed = False
        # Open transactions bound to a thread, by thread id: the gate of the
        # public methods hands a call from such a thread to its transaction.
        # Empty almost always, so the gate's test stays false.
        self._transactions: dict[int, Transaction] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # An override of a gated public method goes behind the same gate.
        for name, writes in _GATED.items():
            body = cls.__dict__.get(name)
            if inspect.isfunction(body) and not hasattr(body, "_gated"):
                setattr(cls, name, _gate(body, writes))

    def _detour(self, body: Callable[..., Any], writes: bool, args: tuple[Any, ...]) -> Any:
        """The gate's slow way: refuse a closed (or, for a write, read-only) store, then
        run ``body`` here or, from a thread with a bound transaction, in the transaction."""
        if writes:
            self._check_writable()
        else:
            self._check_open()
        tx = self._own_transaction() if self._transactions else None
        if tx is None:
            return body(self, *args)
        return getattr(tx, body.__name__)(*args)

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        raise NotImplementedError

    def _set(self, key: str, value: Buffer) -> None:
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        raise NotImplementedError

    # --------------------------------------------- fast paths with fallbacks
    def _contains(self, key: str) -> bool:
        try:
            self._get(key)
        except KeyError:
            return False
        return True

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        """Bytes ``start .. start+length`` of a value; negative ``start`` counts from the end."""
        value = self._get(key)
        stop = None if length is None else _range_stop(start, length, len(value))
        return value[start:stop]

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found = {}
        for key in keys:
            try:
                found[key] = self._get(key)
            except KeyError:
                pass
        return found

    def _getview(self, key: str) -> Buffer:
        """A read-only bytes-like value (``getview``): a copy unless the backend can do better."""
        return self._get(key)

    def _getviews(self, keys: list[str]) -> dict[str, Buffer]:
        return self._get_many(keys)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        for key, value in items:
            self._set(key, value)

    def _delete_many(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self._delete(key)
            except KeyError:
                pass

    def _listdir(self, prefix: str) -> Iterable[str]:
        return {child_name(key, prefix) for key in self._list_prefix(prefix)}

    def _rmdir(self, prefix: str) -> None:
        self._delete_many(list(self._list_prefix(prefix)))

    def _remove_empty_folder(self, prefix: str) -> bool:
        # A store whose folders are only implied by keys has nothing to remove.
        return next(iter(self._list_prefix(prefix)), None) is None

    def _getsize_key(self, key: str) -> int:
        return len(self._get(key))

    def _stat(self, key: str) -> int | None:
        """The size of ``key``'s value, or None when the key is absent.

        Backends override it where their engine answers both in one call.  The
        fallback asks ``_getsize_key`` (one call for a present key, and for an
        absent one where it raises ``KeyError``) and confirms a size of 0 with
        ``_contains``: some engines (Redis ``STRLEN``) answer 0 for a missing key.
        """
        try:
            size = self._getsize_key(key)
        except KeyError:
            return None
        if size == 0 and not self._contains(key):
            return None
        return size

    def _getsize_prefix(self, prefix: str) -> int:
        return sum(self._getsize_key(key) for key in self._list_prefix(prefix))

    def _rename_key(self, src: str, dst: str) -> None:
        self._set(dst, self._get(src))
        self._delete(src)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        # Copy everything before deleting anything: a crash part-way leaves
        # duplicates, never a lost value.  A target is also a source key only
        # when the source lies inside the destination ("a/b" -> "a"), and then
        # it is shorter than its source: copying shorter keys first reads every
        # source before it is overwritten, and sources that became targets stay.
        keys = sorted(self._list_prefix(src_prefix), key=len)
        moves = {key: dst_prefix + key[len(src_prefix):] for key in keys}
        for key in keys:
            self._set(moves[key], self._get(key))
        targets = set(moves.values())
        self._delete_many([key for key in keys if key not in targets])

    def _len(self) -> int:
        return sum(1 for _ in self._list_prefix(""))

    def _clear(self) -> None:
        self._rmdir("")

    def _close(self) -> None:
        """Release the backend's resources; called once."""

    # The hooks a transaction calls (``zstores.transaction_hooks.TransactionHooks``
    # says what each must do) are the read primitives above, these defaults,
    # ``_version_of``/``_holds`` and the route's ``_bind_transaction``.
    def _commit_changes(self, changes: ChangeSet) -> None:
        """Check ``changes.reads`` and apply the changes, atomically: all or nothing.

        Backends that set ``supports_transactions`` implement it in one backend
        transaction: ``changes.check(current, self)`` with ``current`` reading
        inside it, then delete the keys under each prefix of
        ``changes.cleared``, then set or delete each key of ``changes.writes``.
        """
        raise UnsupportedOperationError(f"{self!r} cannot commit a transaction")

    def _snapshot(self) -> Store:
        """A read-only store showing the data as it is now, whatever is written later."""
        raise UnsupportedOperationError(f"{self!r} cannot take a snapshot")

    # ---------------------------------------------- conditional write primitives
    # Called only where the store's flag says True, with the key normalized and
    # the value checked; each is atomic against every other writer.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        """Write ``value`` only if ``key`` holds none; True if written."""
        raise UnsupportedOperationError(f"{self!r} cannot create a key if absent")

    def _get_with_version(self, key: str) -> tuple[bytes, Version]:
        """The value of ``key`` and its version; raise KeyError when missing.

        The fallback digests the value (``_version_kind``): right for every
        store whose ``_replace_if`` compares with ``_holds``.
        """
        value = self._get(key)
        return value, self._version_of(value)

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        """Write ``value`` only if ``key`` holds ``expected`` (``_holds``); True if written."""
        raise UnsupportedOperationError(f"{self!r} cannot compare and swap")

    def _version_of(self, value: Buffer) -> Version:
        """The digest version of a value, as ``_get_with_version``'s fallback gives it."""
        return Version.of_value(value, self._version_kind)

    def _holds(self, current: Buffer | None, expected: Buffer | Version) -> bool:
        """Whether ``current`` (the key's value now; None: absent) is what ``expected`` says.

        For the stores whose versions are digests of the value; call it inside
        the write transaction (or under the lock) that then writes.
        """
        if current is None:
            return False
        if isinstance(expected, Version):
            if expected.kind != self._version_kind:
                raise ValueError(
                    f"{self!r}: {expected!r} is not a version this store gives "
                    f"(its versions are {self._version_kind} digests of the value; "
                    "pass a Version from this store's get_with_version, or the expected bytes)"
                )
            return self._version_of(current) == expected
        return len(current) == len(expected) and current == expected

    def _check_transaction_keys(self, keys: list[str]) -> None:
        """Refuse, when a transaction writes them, keys the store refuses to write."""

    def _check_transaction_prefix(self, prefix: str) -> None:
        """Refuse, when a transaction removes or renames it, a prefix the store protects."""

    def _location(self) -> Any:
        """What identifies the stored data: equal for two handles on it."""
        return id(self)

    def _describe(self) -> str:
        """The location as shown by ``repr`` (never a password)."""
        return ""

    def _params(self) -> dict[str, Any]:
        """Constructor keyword arguments that reopen this store (for pickle)."""
        return {}

    #: Normalize a caller's key; backends with extra rules override it with a
    #: method that calls ``normalize_key`` first.  A staticmethod saves a frame
    #: on every call.
    _key = staticmethod(normalize_key)

    # ------------------------------------------------------- helpers for init
    def _check_existence(self, exists: bool) -> None:
        """Apply the mode's rule about an existing store; call before creating."""
        if not exists and self._mode in ("r", "r+"):
            raise StoreNotFoundError(
                f"no store at {self._describe()}: mode {self._mode!r} requires an "
                "existing store (mode 'a' creates it)"
            )
        if exists and self._mode == "w-":
            raise StoreExistsError(
                f"a store already exists at {self._describe()} and mode 'w-' refuses "
                "to overwrite it (mode 'w' clears it, mode 'a' opens it)"
            )

    def _clear_if_mode_w(self) -> None:
        """Clear the freshly opened store when the mode is ``"w"``."""
        if self._mode == "w":
            self._clear()

    # ------------------------------------------------------------ properties
    @property
    def mode(self) -> str:
        """The mode the store was opened with."""
        return self._mode

    @property
    def read_only(self) -> bool:
        """True when the store refuses writes (mode ``"r"``)."""
        return self._mode == "r"

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")
        if self._mode == "r":
            raise ReadOnlyError(f"{self!r} is read-only (opened with mode 'r')")

    def _value(self, key: str, value: Any) -> Buffer:
        buffer = to_buffer(value)
        limit = self.max_value_size
        if limit is not None and len(buffer) > limit:
            raise ValueTooLargeError(
                f"value for key {key!r} is {len(buffer)} bytes; "
                f"{type(self).__name__} holds at most {limit} bytes per value"
            )
        return buffer

    # ----------------------------------------------------- mapping interface
    @_reads
    def __getitem__(self, key: str) -> bytes:
        return self._get(self._key(key))

    @_writes
    def __setitem__(self, key: str, value: Any) -> None:
        key = self._key(key)
        self._set(key, self._value(key, value))

    @_writes
    def __delitem__(self, key: str) -> None:
        self._delete(self._key(key))

    @_reads
    def __contains__(self, key: object) -> bool:
        try:
            key = self._key(key)  # type: ignore[arg-type]
        except (InvalidKeyError, TypeError):
            return False  # a key that cannot be stored is not in the store
        return self._contains(key)

    @_reads
    def __iter__(self) -> Iterator[str]:
        return iter(self._list_prefix(""))

    @_reads
    def __len__(self) -> int:
        return self._len()

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        """Set many keys at once, as one batch (see ``setitems``)."""
        items = dict(other.items() if isinstance(other, Mapping) else other)
        items.update(kwargs)
        self.setitems(items)

    @_writes
    def clear(self) -> None:
        """Delete every key."""
        self._clear()

    # ---------------------------------------------------------------- extras
    @_reads
    def get_range(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        """Read part of a value without fetching all of it where the backend allows.

        Parameters
        ----------
        key : str
            The key.
        start : int
            First byte; negative counts from the end (``-n`` is the last n bytes).
        length : int or None
            Number of bytes; ``None`` reads to the end.  The range is clipped to
            the value as a Python slice is.

        Raises
        ------
        KeyError
            If the key is missing.
        ValueError
            If ``length`` is negative.
        """
        if length is not None and length < 0:
            raise ValueError(f"length must be >= 0 or None, not {length}")
        return self._get_range(self._key(key), int(start), length)

    @_reads
    def getitems(self, keys: Iterable[str]) -> dict[str, bytes]:
        """Values of the keys that exist, keyed as asked; missing keys are left out."""
        return self._read_many(keys, self._get_many)

    @_reads
    def getview(self, key: str) -> Buffer:
        """The value of ``key`` as a read-only bytes-like object, copied only if need be.

        What ``store[key]`` gives, for readers that only look at the bytes (the
        zarr adapters of read-only stores): most backends return the same
        ``bytes``; LMDB returns a read-only ``memoryview`` of its memory map
        for large values, which keeps a read transaction open until the last
        reference to it is gone, so its bytes never change (see
        ``LMDBStore``).  Drop views when done: while one lives, LMDB cannot
        reuse the pages it shows.

        Raises
        ------
        KeyError
            If ``key`` holds no value.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["a"] = b"xyz"
        >>> bytes(store.getview("a"))
        b'xyz'
        """
        return self._getview(self._key(key))

    @_reads
    def getviews(self, keys: Iterable[str]) -> dict[str, Buffer]:
        """``getitems`` as ``getview``: read-only bytes-like values of the keys that exist.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["a"] = b"xyz"
        >>> {key: bytes(value) for key, value in store.getviews(["a", "b"]).items()}
        {'a': b'xyz'}
        """
        return self._read_many(keys, self._getviews)

    @_reads
    def open_reader(self, key: str) -> ValueReader:
        """A reader of one version of ``key``'s value, by byte ranges, until closed.

        Every read through it returns bytes of the version current at this
        call, whatever is written meanwhile, in this process or another: a
        folder store keeps a descriptor on the file its renames replace,
        LMDB a read transaction (a zero-copy view), SQLite a read
        transaction of its own for large values, the other stores the value
        read whole.  zfuse opens one per open file, so a file read in many
        requests is one whole version.  Close it when done (or use ``with``):
        until then it may hold a descriptor, a transaction or the value.

        Raises
        ------
        KeyError
            If ``key`` holds no value.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["a"] = b"old value"
        >>> with store.open_reader("a") as reader:
        ...     store["a"] = b"new"
        ...     reader.size, bytes(reader.read(0, 3))
        (9, b'old')
        """
        return self._open_reader(self._key(key))

    def _open_reader(self, key: str) -> ValueReader:
        # The whole value pins its version; a view (LMDB) pins it without a copy.
        return BufferReader(key, self._getview(key))

    def _read_many(self, keys: Iterable[str],
                   fetch: Callable[[list[str]], dict[str, Buffer]]) -> dict[str, Buffer]:
        """``getitems``/``getviews``: ``fetch``'s values of the normalized keys (each
        asked once), keyed as the caller spelled them."""
        asked = {key: self._key(key) for key in keys}
        found = fetch(list(dict.fromkeys(asked.values())))
        return {key: found[norm] for key, norm in asked.items() if norm in found}

    @_writes
    def setitems(self, values: Mapping[str, Any]) -> None:
        """Set many keys in one transaction or round trip where the backend allows."""
        items = {}
        for key, value in values.items():
            key = self._key(key)
            items[key] = self._value(key, value)
        self._set_many(list(items.items()))

    @_writes
    def delitems(self, keys: Iterable[str]) -> None:
        """Delete many keys at once; keys that do not exist are ignored."""
        self._delete_many(list(dict.fromkeys(self._key(key) for key in keys)))

    @_reads
    def listdir(self, path: str = "") -> list[str]:
        """Sorted names of the keys and sub-prefixes directly under ``path``."""
        names = self._listdir(prefix_of(normalize_storage_path(path)))
        return list(names) if type(names) is SortedNames else sorted(names)

    @_writes
    def rmdir(self, path: str = "") -> None:
        """Delete every key under ``path`` (the whole store for ``""``)."""
        path = normalize_storage_path(path)
        if path:
            self._rmdir(prefix_of(path))
        else:
            self._clear()

    @_writes
    def remove_empty_folder(self, path: str) -> bool:
        """Remove the folder ``path`` if no key lies below it, as ``os.rmdir`` would.

        Unlike :meth:`rmdir`, this never deletes a key: it is the safe way to
        drop a folder that ``listdir`` shows with nothing in it (a folder
        another program left in a directory store) while other writers may
        be adding keys.  Stores whose folders exist only through their keys
        have nothing to remove.

        Parameters
        ----------
        path : str
            The folder; ``""`` (the root) is never removed.

        Returns
        -------
        bool
            True when no folder ``path`` remains, False when a key lies
            below it (nothing was changed then).

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["a/b"] = b"1"
        >>> store.remove_empty_folder("a")
        False
        >>> del store["a/b"]
        >>> store.remove_empty_folder("a")
        True
        """
        path = normalize_storage_path(path)
        if not path:
            return next(iter(self._list_prefix("")), None) is None
        return self._remove_empty_folder(prefix_of(path))

    @_reads
    def getsize(self, path: str = "") -> int:
        """Size of the value at ``path``, or the total under the prefix; 0 if absent."""
        path = normalize_storage_path(path)
        if path:
            path = self._key(path)
            size = self._stat(path)
            if size is not None:
                return size
        return self._getsize_prefix(prefix_of(path))

    # ------------------------------------------------------ namespace queries
    def normalize(self, key: str) -> str:
        """The key as this store spells it, or a typed error naming the rule broken.

        Applies the spec's normalization (``keys.normalize_key``) and the
        backend's own rules: a length limit (LMDB, folder names), UTF-8
        (SQLite, Redis, MongoDB), a nested store's chunk-key folders.  Two
        keys are the same key of this store exactly when they normalize
        equally.  Works on a closed store (the rules do not change).

        Parameters
        ----------
        key : str
            A key as a caller writes it.

        Returns
        -------
        str
            The normalized key, as ``iter(store)`` lists it.

        Raises
        ------
        InvalidKeyError
            If the key breaks a rule (empty, ``..``, NUL, a lone surrogate,
            too long for the backend ...); the message names key and rule.
        TypeError
            If the key is not a ``str``.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> MemoryStore().normalize("/foo//bar/")
        'foo/bar'
        """
        return self._key(key)

    @_reads
    def stat(self, key: str) -> int | None:
        """The size in bytes of ``key``'s value, or None when there is no such key.

        One backend call where the engine allows (a dict lookup, one
        transaction, one SQL query, one ``fstatat``, one round trip), so a
        caller asking "does it exist, and how big?" pays once.  Only keys
        count: a prefix with keys under it (a folder) is None here.

        Parameters
        ----------
        key : str
            The key (normalized by ``normalize``).

        Returns
        -------
        int or None
            The value's size (0 for an empty value), or None if absent.

        Raises
        ------
        InvalidKeyError
            If the key breaks the store's key rules.
        StoreClosedError
            If the store is closed.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store.update({"a/b": b"abc", "a/empty": b""})
        >>> store.stat("a/b"), store.stat("a/empty"), store.stat("a"), store.stat("nope")
        (3, 0, None, None)
        """
        return self._stat(self._key(key))

    @_reads
    def list_prefix(self, path: str = "") -> list[str]:
        """Every key under the folder ``path``, sorted (all keys for ``""``).

        Keys, not names: each comes back whole (``"a/b/c"`` for ``path="a"``),
        at any depth below ``path``.  ``path`` is a folder: a key equal to
        ``path`` itself is not under it, and ``"a"`` does not match ``"ab/c"``.
        Sorted in Python's string order (equal to UTF-8 byte order), so
        listings are repeatable whatever the backend.

        Parameters
        ----------
        path : str
            A folder path; ``""`` (default) is the root.

        Returns
        -------
        list of str
            The keys, sorted.

        Raises
        ------
        InvalidKeyError
            If ``path`` has a ``.``/``..`` segment, a NUL or a lone surrogate
            (the path rule of ``listdir``).
        StoreClosedError
            If the store is closed.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store.update({"a/c/1": b"x", "a/b": b"y", "a": b"z", "ab/d": b"w"})
        >>> store.list_prefix("a")
        ['a/b', 'a/c/1']
        >>> store.list_prefix()
        ['a', 'a/b', 'a/c/1', 'ab/d']
        """
        return sorted(self._list_prefix(self._folder_prefix(path)))

    @_reads
    def getsize_prefix(self, path: str = "") -> int:
        """The total size in bytes of the values under the folder ``path``.

        The same keys as ``list_prefix(path)``: a key equal to ``path`` itself
        is not counted (``getsize(path)`` returns a key's own size instead).
        0 if there is nothing under ``path``.

        Parameters
        ----------
        path : str
            A folder path; ``""`` (default) is the whole store.

        Returns
        -------
        int
            The sum of the sizes of the values under ``path``.

        Raises
        ------
        InvalidKeyError
            If ``path`` has a ``.``/``..`` segment, a NUL or a lone surrogate.
        StoreClosedError
            If the store is closed.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store.update({"a/b": b"12", "a/c/d": b"345", "a": b"6"})
        >>> store.getsize_prefix("a"), store.getsize_prefix(), store.getsize_prefix("x")
        (5, 6, 0)
        """
        return self._getsize_prefix(self._folder_prefix(path))

    @staticmethod
    def _folder_prefix(path: str) -> str:
        """``path`` as a primitive's prefix (``"a/b/"``, or ``""`` for the root).

        A folder path follows the spec's path rule, as ``listdir``: a backend's
        extra key rules concern keys (a nested store's ``0.1`` -> ``0/1`` maps
        a chunk key, and a folder named ``0.1`` is a folder).
        """
        return prefix_of(normalize_storage_path(path))

    @_writes
    def rename(self, src_path: str, dst_path: str) -> None:
        """Move a key, or every key under a prefix, to a new name.

        Existing keys at the destination are overwritten.

        Raises
        ------
        KeyError
            If nothing exists at ``src_path``.
        InvalidKeyError
            If either path is the root or ``dst_path`` lies inside ``src_path``.
        """
        src, dst = self._key(src_path), self._key(dst_path)
        if src == dst:
            if not (self._contains(src) or self._listdir(prefix_of(src))):
                raise KeyError(src_path)
            return
        if dst.startswith(src + "/"):
            raise InvalidKeyError(
                f"cannot rename {src!r} to {dst!r}: the destination lies inside the source"
            )
        moved = False
        if self._contains(src):
            self._rename_key(src, dst)
            moved = True
        if any(True for _ in self._listdir(prefix_of(src))):
            self._rename_prefix(prefix_of(src), prefix_of(dst))
            moved = True
        if not moved:
            raise KeyError(src_path)

    # ------------------------------------------------------- conditional writes
    @_writes
    def set_if_not_exists(self, key: str, value: Any) -> bool:
        """Write ``value`` under ``key`` only if ``key`` holds no value.

        Atomic against every other writer of the store, in any thread or
        process and through any door (another handle, a mount, zarr): of
        several callers racing on a missing key exactly one gets True and
        its value is the one stored; a plain write racing with it either
        comes first (then this returns False) or overwrites afterwards.
        zarr-python 3's ``Store.set_if_not_exists``, and the first step of
        lock-free coordination on object stores (a lease object created if
        absent, then renewed or released with ``replace_if``).

        Inside a transaction (``store.transaction()``) it works on the
        transaction's overlay: it sees the transaction's own writes, and
        the commit raises ``TransactionConflictError`` (applying nothing)
        if another writer created the key meanwhile.

        Parameters
        ----------
        key : str
            The key.
        value : bytes-like
            The value (anything with the buffer protocol, as ``store[key] = value``).

        Returns
        -------
        bool
            True if this call wrote the value, False if the key already held one.

        Raises
        ------
        UnsupportedOperationError
            If the store cannot do it atomically (``supports_create_if_absent``
            is False); the message says why.  Nothing is written.
        ReadOnlyError
            If the store is read-only.
        KeyConflictError
            On a hierarchical store (folders), if ``key`` is a prefix of
            other keys or lies below a key, as for ``store[key] = value``.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store.set_if_not_exists("lease", b"owner=a")
        True
        >>> store.set_if_not_exists("lease", b"owner=b")
        False
        >>> store["lease"]
        b'owner=a'
        """
        if not self.supports_create_if_absent:
            raise self._conditional_refusal("set_if_not_exists", "supports_create_if_absent",
                                            self._create_if_absent_refusal)
        key = self._key(key)
        return self._set_if_absent(key, self._value(key, value))

    @_reads
    def get_with_version(self, key: str) -> tuple[bytes, Version]:
        """The value of ``key`` and a token for this version of it, read together.

        Pass the token to ``replace_if`` as ``expected``: the replace happens
        only while the key still holds this version.  Object stores give
        their own version (the ETag on S3 and Azure, the generation on GCS:
        rewriting the same bytes is a new version); the other stores a
        digest of the value (a value changed and changed back counts as
        unchanged).  See ``Version``.

        Parameters
        ----------
        key : str
            The key.

        Returns
        -------
        tuple of (bytes, Version)
            The value and its version.

        Raises
        ------
        KeyError
            If the key holds no value.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["lease"] = b"owner=a;renewals=0"
        >>> value, version = store.get_with_version("lease")
        >>> store.replace_if("lease", version, b"owner=a;renewals=1")
        True
        >>> store.replace_if("lease", version, b"owner=b;renewals=0")  # stale version
        False
        >>> store["lease"]
        b'owner=a;renewals=1'
        """
        return self._get_with_version(self._key(key))

    @_writes
    def replace_if(self, key: str, expected: Any, value: Any) -> bool:
        """Compare-and-swap: write ``value`` only if ``key`` holds ``expected`` now.

        Atomic against every other writer of the store, in any thread or
        process: of several callers replacing the same expected value exactly
        one gets True.  A missing key never matches (``set_if_not_exists``
        creates).

        Inside a transaction it works on the transaction's overlay, and the
        commit raises ``TransactionConflictError`` (applying nothing) if
        another writer changed the key since it was compared.

        Parameters
        ----------
        key : str
            The key.
        expected : bytes-like or Version
            The bytes the key must hold, or a ``Version`` from this store's
            ``get_with_version``.
        value : bytes-like
            The new value.

        Returns
        -------
        bool
            True if this call replaced the value; False if the key holds
            another value or version, or no value.

        Raises
        ------
        UnsupportedOperationError
            If the store cannot do it atomically (``supports_compare_and_swap``
            is False); the message says why.  Nothing is written.
        ReadOnlyError
            If the store is read-only.
        ValueError
            If ``expected`` is a ``Version`` of another kind than this store gives.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["counter"] = b"1"
        >>> store.replace_if("counter", b"1", b"2"), store.replace_if("counter", b"1", b"3")
        (True, False)
        >>> store["counter"], store.replace_if("missing", b"", b"x")
        (b'2', False)
        """
        if not self.supports_compare_and_swap:
            raise self._conditional_refusal("replace_if", "supports_compare_and_swap",
                                            self._compare_and_swap_refusal)
        key = self._key(key)
        if not isinstance(expected, Version):
            expected = to_buffer(expected)
        return self._replace_if(key, expected, self._value(key, value))

    def _conditional_refusal(self, method: str, flag: str, why: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"{self!r} cannot {method} atomically ({flag}=False): {why}")

    # ------------------------------------------------ transactions, snapshots
    def transaction(self, *, bind_thread: bool = True) -> Transaction:
        """Gather writes and commit them at once: all become visible together, or none.

        Every write, delete, ``rmdir``, ``rename`` and ``clear`` made inside
        ``with store.transaction():`` from the thread that opened it (or
        through the returned object, from any thread) is held back and
        applied in one backend transaction when the block ends; an exception
        in the block rolls everything back, and a crash before the commit
        leaves nothing.  Reads inside see the transaction's own writes; other
        threads and processes see them only after the commit.

        Conflicts are optimistic: the commit raises
        ``TransactionConflictError`` (applying nothing) when a value the
        transaction read was changed by another writer since it read it.
        Writes that read nothing never conflict: the later commit wins.

        Parameters
        ----------
        bind_thread : bool
            True (default): this store's own methods, called from this thread,
            act in the transaction until it ends.  False: only the returned
            object does (an adapter passing it to worker threads).

        Returns
        -------
        zstores.Transaction
            A ``Store`` over this one; a context manager that commits on a
            normal exit.  ``commit()``/``rollback()`` end it explicitly.

        Raises
        ------
        UnsupportedOperationError
            If the store cannot commit atomically (``supports_transactions``
            is False: folders, zip archives, dbm files).
        TransactionError
            If this thread already has a transaction open on the store
            (transactions do not nest).
        StoreClosedError
            If the store is closed.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["x/0"] = b"old"
        >>> try:
        ...     with store.transaction():
        ...         store["x/0"] = b"new"
        ...         store["x/1"] = b"new"
        ...         raise RuntimeError("changed my mind")
        ... except RuntimeError:
        ...     pass
        >>> sorted(store.items())
        [('x/0', b'old')]
        """
        self._check_open()
        if not self.supports_transactions:
            raise UnsupportedOperationError(
                f"{self!r} cannot run transactions (supports_transactions=False): it has no "
                "way to make several writes visible at once; use LMDB, SQLite, Memory, Redis "
                "or MongoDB for atomic commits"
            )
        if bind_thread and self._transactions and self._own_transaction() is not None:
            raise TransactionError(
                f"{self!r}: this thread already has a transaction open on the store, and "
                "transactions do not nest (commit or roll back the open one first)"
            )
        return self._transaction_class(self, bind_thread=bind_thread)

    @property
    def in_transaction(self) -> bool:
        """True when the calling thread has a transaction open on this store."""
        return bool(self._transactions) and self._own_transaction() is not None

    def snapshot(self) -> Store:
        """A read-only view of the store as it is now, unaffected by later writes.

        The view is a ``Store`` (mode ``"r"``) usable from several threads
        until closed; use it as a context manager, or ``close()`` it: a
        snapshot holds resources (LMDB and SQLite keep the old pages it reads
        from being reused, a MemoryStore's is a copy).

        Raises
        ------
        UnsupportedOperationError
            If the store cannot (``supports_snapshots`` is False).
        StoreClosedError
            If the store is closed.

        Examples
        --------
        >>> from zstores import MemoryStore
        >>> store = MemoryStore()
        >>> store["a"] = b"1"
        >>> with store.snapshot() as view:
        ...     store["a"] = b"2"
        ...     view["a"], store["a"], view.read_only
        (b'1', b'2', True)
        """
        self._check_open()
        if not self.supports_snapshots:
            raise UnsupportedOperationError(
                f"{self!r} cannot take snapshots (supports_snapshots=False): it cannot show "
                "one state of its data while writers go on"
            )
        return self._snapshot()

    def _own_transaction(self) -> Transaction | None:
        """The transaction the calling thread has open on this store, if any."""
        tx = self._transactions.get(threading.get_ident())
        if tx is None or tx._thread is not threading.current_thread():
            return None  # a dead thread's id, reused
        return tx

    def _bind_transaction(self, tx: Transaction) -> None:
        self._transactions[threading.get_ident()] = tx

    def _unbind_transaction(self, tx: Transaction) -> None:
        for ident, bound in list(self._transactions.items()):
            if bound is tx:
                del self._transactions[ident]

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Release the backend's resources; calling it again does nothing."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown; nothing to report to
            pass

    def reopen(self, mode: str | None = None) -> Store:
        """Open a second, independent handle on the same data.

        The new handle has its own connection or file handles and is closed
        on its own; this one may stay open, or be closed already (the handle
        is made from the store's parameters).  Backends with a single writer
        (Zip, DBM) may refuse a second writable handle while this one writes.

        Parameters
        ----------
        mode : {None, "r", "r+", "a", "w", "w-"}
            The new handle's mode.  None (default) is what unpickling uses:
            this store's mode, except that ``"w"`` and ``"w-"`` become ``"a"``
            (the location is neither cleared again nor refused for existing).

        Returns
        -------
        Store
            A new store of the same type on the same location.

        Raises
        ------
        ValueError
            If ``mode`` is not one of the modes.
        UnsupportedOperationError
            If the store is not persistent: an in-memory store's data belongs
            to its object (``pickle`` copies it instead).

        Examples
        --------
        >>> import tempfile
        >>> from zstores import DirectoryStore
        >>> store = DirectoryStore(tempfile.mkdtemp(), mode="w")
        >>> store["a"] = b"1"
        >>> reader = store.reopen("r")
        >>> reader["a"], reader.mode, store.mode
        (b'1', 'r', 'w')
        >>> reader.close()
        """
        mode = check_mode(mode) if mode is not None else self._mode_after_pickle()
        if not self.persistent:
            raise UnsupportedOperationError(
                f"{self!r} keeps its data in memory, so there is no location to open a "
                "second handle on (pickle.loads(pickle.dumps(store)) copies the data)"
            )
        return self._reopen_as(mode)

    def _reopen_as(self, mode: str) -> Store:
        """A new handle on the same location (persistent stores), opened with ``mode``."""
        return type(self)(**self._params(), mode=mode)

    def _mode_after_pickle(self) -> str:
        """The mode an unpickled copy opens with: never clearing or refusing the location."""
        return _MODE_AFTER_PICKLE[self._mode]

    def __reduce__(self) -> tuple[Any, ...]:
        mode = self._mode_after_pickle()
        if self.persistent:
            return (_reopen, (type(self), self._params(), mode))
        data = dict(self.items())
        return (_reopen_with_data, (type(self), self._params(), mode, data))

    def __repr__(self) -> str:
        where = self._describe()
        where = f"{where!r}, " if where else ""
        return f"{type(self).__name__}({where}mode={self._mode!r})"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return NotImplemented
        return self._location() == other._location()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._location()))


def _range_stop(start: int, length: int, size: int) -> int:
    first = start if start >= 0 else max(size + start, 0)
    return first + length


def _reopen(cls: type[Store], params: dict[str, Any], mode: str) -> Store:
    return cls(**params, mode=mode)


def _reopen_with_data(
    cls: type[Store], params: dict[str, Any], mode: str, data: dict[str, bytes]
) -> Store:
    writable_mode = "a" if mode == "r" else mode
    store = cls(**params, mode=writable_mode)
    store.setitems(data)
    store._mode = mode
    return store
