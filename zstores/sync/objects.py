"""Locks and fenced writes on object storage alone: no Redis, no shared file system.

``ObjectStoreSynchronizer`` keeps each lock as one small JSON *lease object*
in a store that can create a key if absent and compare-and-swap it
(``set_if_not_exists``, ``get_with_version``, ``replace_if``: S3, GCS and
Azure through conditional requests, and every zstores store with those
flags).  The object is created with ``If-None-Match: *`` (GCS
``ifGenerationMatch=0``) and every later change (grant, renewal, release,
queueing, takeover) is a ``replace_if`` on the version read just before
(``If-Match`` on the ETag, GCS ``ifGenerationMatch``), so of two writers
changing it at once exactly one succeeds and the other reads it again.

Clocks: no two machines' clocks are compared.  The holder counts its lease
from just before the request that granted or renewed it (``time.monotonic``)
and stops writing when it ends; a waiter counts from when it *first saw* the
current grant or renewal (its own ``time.monotonic``, after the answer came)
and declares the lease expired only once that state has stood unchanged for
the lease the holder recorded in the object, plus 2%.  The grant reached the
service after the holder's clock started and the waiter saw it after that,
so the holder always stops first, as long as the two clocks run at rates
within 2% of each other (any NTP-disciplined or free-running quartz clock
does; a VM whose clock stalls does not).  Offsets between clocks do not
matter.  The price: a waiter that first sees a lock whose holder died waits
one full lease (it cannot know how long the object has stood).  The service's
own times (Last-Modified) are not used: ``get_with_version`` does not give
them, and comparing them with a local clock would bring offsets back in.

Fencing tokens: the object holds a counter, raised by one with every grant
(all grants are compare-and-swaps on the one object, so it never goes back);
a new object starts at the wall clock in microseconds, larger than any token
of an earlier object of the same name that was deleted (as long as the
creating machine's clock is not behind by more than the grants made since).

Fenced writes on the store itself (``ConditionalWrites``): an object store
has no transactions, so ``synchronized(..., fenced=True)`` writes each chunk
with a conditional request on the version of it read under the lock
(``replace_if``; ``set_if_not_exists`` when it was absent; for a chunk
written whole without a read, the version read just before the write).  A
holder that lost its lease and was granted again to another writer read its
versions before that grant, so once the new holder wrote a chunk, the late
write of that chunk is refused by the service and changes nothing.  See
docs/parallel-writes.md for what this does and does not promise.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..base import Store, Version
from ..errors import (
    LeaseExpiredError,
    LockTimeoutError,
    TransactionConflictError,
    UnsupportedOperationError,
    ZStoresError,
)
from ..keys import RESERVED_PREFIX
from ..transactions import _IN_STORE, Transaction, _copied
from .lease import LeasedLock
from .locks import (
    RENEWALS_PER_LEASE,
    WARN_AFTER,
    _check_key,
    _check_timeout,
    _check_warn_after,
    _Deadline,
    _wait_for,
    _Watchdog,
)

if TYPE_CHECKING:
    from ..base import Buffer

__all__ = ["ConditionalWrites", "ObjectLock", "ObjectStoreSynchronizer", "conditional_store"]

logger = logging.getLogger("zstores.sync")

#: Where lease objects live by default: hidden from zarr and listings.
LOCK_PREFIX = RESERVED_PREFIX + "locks/"
_SUFFIX = ".lock"  # "a" -> "a.lock", "a/b" -> "a/b.lock": never one key a prefix of another
#: A waiter declares a lease expired after seeing it unchanged this much longer
#: than the lease (the clocks of holder and waiter may run this far apart).
DRIFT = 0.02
#: Compare-and-swaps of one change before giving up (each miss means another
#: writer changed the object: read it again and redo the change).
_CAS_TRIES = 50
_MAX_POLL = 1.0  # seconds between a far-back waiter's looks at the object


def _first_token() -> int:
    """The token of a new lease object: the wall clock in microseconds (see the module)."""
    return time.time_ns() // 1000


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _decode(raw: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(bytes(raw))
        doc["token"] = int(doc["token"])
        doc.setdefault("holder", None)
        doc.setdefault("queue", [])
        doc.setdefault("renewals", 0)
        doc["lease"] = float(doc["lease"])
        return doc
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{where} is not a lease object of ObjectStoreSynchronizer ({error}); "
            "another program wrote it: give the synchronizer a prefix of its own") from error


class _Watch:
    """When this waiter first saw the lease object's current state (its own monotonic clock)."""

    def __init__(self) -> None:
        self.state: Any = object()
        self.since = 0.0

    def see(self, state: Any, now: float) -> None:
        if state != self.state:
            self.state, self.since = state, now

    def stood(self, seconds: float) -> bool:
        return time.monotonic() - self.since >= seconds


class ObjectLock(LeasedLock):
    """The lock of one key of an ``ObjectStoreSynchronizer``: a lease object.

    Once acquired, ``token`` is its fencing token, larger than every earlier
    grant's of this lock.  While it is held, the synchronizer renews the
    lease in the background (a compare-and-swap every third of it);
    ``check()`` raises ``LeaseExpiredError`` once a renewal failed or came
    too late.
    """

    _owner: ObjectStoreSynchronizer

    def __init__(self, key: str, owner: ObjectStoreSynchronizer,
                 timeout: float | None) -> None:
        super().__init__(key, owner.lock_name(key), owner, timeout)

    def _where(self) -> str:
        return repr(self._owner.store)

    # ------------------------------------------------------------- acquire
    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait.

        Waiters queue in the lease object and are served in order: a
        released lock is kept for the first in line until it takes it, or
        until the others have seen it not come for ``reserve`` seconds
        (then it loses its place).  A lease that stands unrenewed for its
        length (as each waiter measures it) is taken from its holder.
        """
        if self.token is not None:
            raise RuntimeError(f"the lock {self.name!r} is already held by this object")
        timeout = self._timeout if timeout is None else timeout
        owner = self._owner
        waiter = os.urandom(12).hex()
        watch = _Watch()

        def attempt(seconds: float | None) -> bool:
            deadline = _Deadline(seconds)
            while True:
                place = self._try(waiter, watch)
                if place < 0:
                    return True
                left = deadline.left()
                if left is not None and left <= 0:
                    return False
                if place == 0:
                    continue  # the object changed under us, or we are next: look again now
                pause = min(owner.poll * place, _MAX_POLL)
                time.sleep(pause if left is None else min(pause, left))

        try:
            acquired = _wait_for(attempt, timeout, owner.warn_after,
                                 lambda: f"the lease object {self.name!r} of key {self.key!r}")
        except BaseException:
            self._leave(waiter)
            raise
        if not acquired:
            self._leave(waiter)
            raise LockTimeoutError(
                f"could not lock key {self.key!r} within {timeout} s: the lease object "
                f"{self.name!r} in {owner.store!r} is held by another writer")

    def _try(self, waiter: str, watch: _Watch) -> int:
        """One look at the lease object: -1 if granted now, else how far back in line.

        0 means "look again at once" (the object changed, or a change of
        ours was refused); the first in line waits ``poll`` between looks.
        """
        owner, store = self._owner, self._owner.store
        try:
            raw, version = store.get_with_version(self.name)
        except KeyError:
            doc = self._doc({"token": _first_token(), "queue": []}, waiter)
            sent = time.monotonic()
            if store.set_if_not_exists(self.name, _encode(doc)):
                self._granted(waiter, doc["token"], sent)
                return -1
            return 0
        seen = time.monotonic()
        doc = _decode(raw, f"{self.name!r} in {store!r}")
        holder, queue = doc["holder"], list(doc["queue"])
        # What waiters time: a grant or renewal of the holder, or whom a free
        # lock is kept for.  Waiters joining the line change nothing here.
        watch.see((holder, doc["token"], doc["renewals"],
                   None if holder is not None or not queue else queue[0]), seen)
        if holder is None and (not queue or queue[0] == waiter):
            granted = self._doc(doc, waiter)
            granted["token"] = doc["token"] + 1
            granted["queue"] = [other for other in queue if other != waiter]
            sent = time.monotonic()
            if store.replace_if(self.name, version, _encode(granted)):
                self._granted(waiter, granted["token"], sent)
                return -1
            return 0
        changed = None
        if waiter not in queue:
            changed = {**doc, "queue": [*queue, waiter]}
        elif holder is None and watch.stood(owner.reserve):
            changed = {**doc, "queue": queue[1:]}  # the first in line missed its turn
        elif holder is not None and watch.stood(doc["lease"] * (1 + DRIFT)):
            changed = {**doc, "holder": None, "expired": holder}  # its lease ran out
        if changed is not None:
            store.replace_if(self.name, version, _encode(changed))
            return 0
        return queue.index(waiter) + (holder is not None)

    def _doc(self, base: dict[str, Any], holder: str) -> dict[str, Any]:
        owner = self._owner
        return {**base, "holder": holder, "lease": owner.lease, "renewals": 0,
                "granted": time.time(), "expired": None}

    def _leave(self, waiter: str) -> None:
        """Leave the line (a waiter that gives up); the next in line would drop it anyway."""
        store = self._owner.store
        try:
            for _ in range(_CAS_TRIES):
                raw, version = store.get_with_version(self.name)
                doc = _decode(raw, self.name)
                if waiter not in doc["queue"]:
                    return
                doc["queue"] = [other for other in doc["queue"] if other != waiter]
                if store.replace_if(self.name, version, _encode(doc)):
                    return
        except Exception:
            logger.debug("could not leave the line of %s", self.name, exc_info=True)

    # ------------------------------------------------------------- renewal
    def _mine(self, doc: dict[str, Any]) -> bool:
        return doc["holder"] == self._value and doc["token"] == self.token

    def _renew(self) -> None:
        """Extend the lease (called by the watchdog); mark the lock lost if that fails."""
        store = self._owner.store
        if self._overdue():  # too late: another writer may hold it by now
            return
        try:
            for _ in range(_CAS_TRIES):
                raw, version = store.get_with_version(self.name)
                doc = _decode(raw, self.name)
                if not self._mine(doc):
                    self._lost = "its lease object had passed to another writer when it renewed it"
                    return
                doc["renewals"] += 1
                sent = time.monotonic()
                if store.replace_if(self.name, version, _encode(doc)):
                    self._renewed(sent)
                    return
        except KeyError:
            self._lost = "its lease object was deleted"
        except (ZStoresError, OSError, ValueError) as error:  # the lease runs out; check() says so
            self._renewal_raised(error)

    def release(self) -> None:
        """Release the lock: the lease object says free (kept for the first in line).

        Raises
        ------
        LeaseExpiredError
            If the lock had passed to another writer (its lease ran out).
        """
        if self.token is None:
            raise RuntimeError(f"the lock {self.name!r} is not held")
        owner, store = self._owner, self._owner.store
        owner._watchdog.drop(self)
        token = self.token
        try:
            for _ in range(_CAS_TRIES):
                try:
                    raw, version = store.get_with_version(self.name)
                except KeyError:
                    break
                doc = _decode(raw, self.name)
                if not self._mine(doc):
                    break
                doc.update(holder=None, released=time.time())
                if store.replace_if(self.name, version, _encode(doc)):
                    return
            else:
                raise ZStoresError(f"{self.name!r} kept changing during {_CAS_TRIES} releases")
        finally:
            self.token = None
        raise LeaseExpiredError(
            f"the lease of the lock {self.name!r} (key {self.key!r}, token {token}) expired "
            f"after {owner.lease} s while it was held, so another writer may have written at "
            "the same time: use synchronized(..., fenced=True), or a longer lease=")


class ObjectStoreSynchronizer:
    """Fair locks per key as lease objects in an object store, with fencing tokens.

    For writers that share nothing but a bucket (serverless functions, dask
    workers on several hosts): no Redis, no shared file system.  ``sync[key]``
    returns a lock usable as a context manager (zarr-python 2's
    ``synchronizer=`` protocol), held as the object ``prefix + key +
    ".lock"`` of ``store``, created if absent and then changed only by
    compare-and-swap on its version (S3 and Azure: ETag; GCS: generation).
    While the holder runs, a thread renews the lease every third of it; a
    waiter takes a lease it has seen unrenewed for its length.  Waiters are
    served in the order they queued.  Every grant carries a fencing token
    (``lock.token``) larger than any before it; ``synchronized(...,
    fenced=True)`` checks it in the data store's transactions, or, with the
    data on an object store, writes every chunk conditionally on the version
    read under the lock.  The synchronizer pickles (with its store), so dask
    workers and spawned processes share its locks.

    Clocks are never compared between machines; each measures durations on
    its own monotonic clock (module ``zstores.sync.objects``).  A lock whose
    holder died is taken over once a waiter has watched it unrenewed for one
    lease.  Lease objects stay in the store (small JSON objects under
    ``prefix``); deleting them while no writer runs is harmless.

    Parameters
    ----------
    store : zstores.Store or str
        A store (or a URL for ``zstores.open_store``) that creates keys if
        absent and compares and swaps (``supports_create_if_absent`` and
        ``supports_compare_and_swap``): S3, GCS, Azure; also Memory, SQLite,
        LMDB, Redis, Directory stores.  It may be the array's own store: the
        default prefix is hidden from zarr.
    prefix : str
        Prepended to every lease object's key; one per dataset.
    lease : float
        Seconds after which a lock whose holder stopped renewing it expires.
    timeout : float or None
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits
        as long as it takes (logging a warning every ``warn_after`` seconds).
    warn_after : float or None
        Seconds of waiting between warnings on the ``zstores.sync`` logger.
    poll : float
        Seconds between the looks at a held lock of the first in line (the
        ``n``-th in line looks ``n`` times less often, at least once a second).
        Each look is one GET.
    reserve : float
        Seconds a released lock is kept for the first in line before the
        others drop it from the line.

    Raises
    ------
    UnsupportedOperationError
        If ``store`` cannot create if absent or compare and swap atomically.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> sync = zstores.ObjectStoreSynchronizer(store, lease=30)
    >>> with sync["data/c/0"] as lock:
    ...     first = lock.token
    >>> with sync["data/c/0"] as lock:
    ...     lock.token == first + 1
    True
    >>> sync.lock_name("data/c/0")
    '.zstores/locks/data/c/0.lock'
    """

    def __init__(self, store: Store | str, *, prefix: str = LOCK_PREFIX, lease: float = 60.0,
                 timeout: float | None = None, warn_after: float | None = WARN_AFTER,
                 poll: float = 0.05, reserve: float = 2.0) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ..urls import open_store

            store = open_store(store)
        if not isinstance(store, Store):
            raise TypeError(f"store must be a zstores Store or a URL, not {type(store).__name__}")
        missing = [flag for flag in ("supports_create_if_absent", "supports_compare_and_swap")
                   if not getattr(store, flag, False)]
        if missing:
            raise UnsupportedOperationError(
                f"ObjectStoreSynchronizer keeps its leases with conditional writes, and "
                f"{store!r} cannot make them atomic ({', '.join(missing)} is False): use an "
                "S3, GCS or Azure store (via='obstore'), or RedisSynchronizer")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        self.store = store
        self.prefix = prefix
        self.lease = float(lease)
        if not self.lease > 0:
            raise ValueError(f"invalid lease {lease!r}: must be > 0 seconds")
        self.poll = float(poll)
        self.reserve = float(reserve)
        if not self.poll > 0 or not self.reserve > 0:
            raise ValueError(f"invalid poll {poll!r} or reserve {reserve!r}: must be > 0 seconds")
        self.timeout = _check_timeout(timeout)
        self.warn_after = _check_warn_after(warn_after)
        self._watchdog = _Watchdog(self.lease / RENEWALS_PER_LEASE)

    def lock_name(self, key: str) -> str:
        """The key of ``key``'s lease object in the store."""
        return self.prefix + _check_key(key) + _SUFFIX

    def __getitem__(self, key: str) -> ObjectLock:
        return ObjectLock(_check_key(key), self, self.timeout)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_object_synchronizer,
                (self.store, self.prefix, self.lease, self.timeout, self.warn_after, self.poll,
                 self.reserve))

    def __repr__(self) -> str:
        return (f"ObjectStoreSynchronizer({self.store!r}, prefix={self.prefix!r}, "
                f"lease={self.lease!r}, timeout={self.timeout!r})")


def _new_object_synchronizer(store: Store, prefix: str, lease: float, timeout: float | None,
                             warn_after: float | None, poll: float,
                             reserve: float) -> ObjectStoreSynchronizer:
    return ObjectStoreSynchronizer(store, prefix=prefix, lease=lease, timeout=timeout,
                                   warn_after=warn_after, poll=poll, reserve=reserve)


# ------------------------------------------------------------ fenced writes
class ConditionalWrites:
    """Fenced writes to a store without transactions: each key written conditionally.

    What ``synchronized(..., fenced=True)`` commits through when the array's
    store has no transactions but conditional writes (object stores):
    ``transaction()`` gives an overlay that remembers the version of every
    value it read, and whose ``commit()`` writes each changed key, in key
    order, only while it still holds that version.
    """

    #: The fence is each chunk's own version: no fence records are kept.
    fences_by_version = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def transaction(self, *, bind_thread: bool = False) -> ConditionalTransaction:
        return ConditionalTransaction(self.store)

    def __repr__(self) -> str:
        return f"ConditionalWrites({self.store!r})"


def conditional_store(store: Any) -> ConditionalWrites | None:
    """``ConditionalWrites`` over ``store`` if it has conditional writes; else None."""
    if isinstance(store, Store) and store.supports_create_if_absent \
            and store.supports_compare_and_swap:
        return ConditionalWrites(store)
    return None


_ABSENT = None


class ConditionalTransaction(Transaction):
    """An overlay whose commit is one conditional write per key (not atomic across keys).

    Reads remember each key's version (``get_with_version``) or absence;
    ``commit()`` writes the keys in sorted order, each with ``replace_if``
    on the version read (``set_if_not_exists`` if it was absent, and for a
    key written without being read the version it has just before), and
    stops at the first refusal with ``TransactionConflictError``, whose
    ``landed`` lists the keys written before it.  Deletes cannot be made
    conditional and are refused.
    """

    fences_by_version = True

    def __init__(self, store: Store) -> None:
        super().__init__(store, bind_thread=False)
        self._versions: dict[str, Version | None] = {}

    def _get(self, key: str) -> bytes:
        with self._lock:
            value = _copied(self._lookup(key))
        if value is _IN_STORE:
            try:
                value, version = self._store.get_with_version(key)
            except KeyError:
                self._remember(key, _ABSENT)
                raise
            self._remember(key, version)
            return value
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[return-value]

    def _remember(self, key: str, version: Version | None) -> None:
        with self._lock:
            if key not in self._writes:
                self._versions.setdefault(key, version)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        return Store._get_many(self, keys)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        return Store._get_range(self, key, start, length)  # the whole value: its version

    def _stat(self, key: str) -> int | None:
        try:
            return len(self._get(key))
        except KeyError:
            return None

    def commit(self) -> None:
        """Write every changed key conditionally, in key order; stop at the first refusal.

        Raises
        ------
        TransactionConflictError
            A key no longer held the version read (another writer changed it):
            it and the keys after it were not written; ``landed`` lists those
            before it, which were.
        UnsupportedOperationError
            The transaction deletes keys (nothing was written).
        """
        with self._lock:
            self._check_open()
            changes = self._changes()
            self._end("failed", keep_values=True)
        try:
            deleted = sorted(key for key, value in changes.writes.items() if value is None)
            if changes.cleared or deleted:
                what = deleted[:3] or changes.cleared
                raise UnsupportedOperationError(
                    f"{self._store!r}: a fenced write cannot delete ({what}): object stores "
                    "have no conditional delete; nothing was written")
            landed: list[str] = []
            for key in sorted(changes.writes):
                if not self._write_if_unchanged(key, changes.writes[key]):
                    conflict = TransactionConflictError(
                        f"{self._store!r}: key {key!r} changed since this writer read it (its "
                        f"version is not {self._versions.get(key)!r} any more): another writer "
                        f"wrote it, so it and the keys after it were not written"
                        + (f" ({len(landed)} keys before it were: {landed[:3]})" if landed
                           else " (nor any before it)"), (key,))
                    conflict.landed = tuple(landed)  # type: ignore[attr-defined]
                    raise conflict
                landed.append(key)
        finally:
            changes.writes = {}
            self._release_values()
        self._state = "committed"

    def _write_if_unchanged(self, key: str, value: Buffer) -> bool:
        store = self._store
        if key in self._versions:
            version = self._versions[key]
        else:  # written whole without a read: the version it has now, under the lock
            try:
                _, version = store.get_with_version(key)
            except KeyError:
                version = _ABSENT
        if version is _ABSENT:
            return store.set_if_not_exists(key, value)
        return store.replace_if(key, version, value)

    def __repr__(self) -> str:
        return f"ConditionalTransaction({self._store!r}, state={self._state!r})"


def lost_leases(locks: Iterable[Any]) -> list[Any]:
    """The locks of ``locks`` whose ``check()`` says their lease is lost."""
    lost = []
    for lock in locks:
        check = getattr(lock, "check", None)
        if callable(check):
            try:
                check()
            except LeaseExpiredError:
                lost.append(lock)
    return lost

