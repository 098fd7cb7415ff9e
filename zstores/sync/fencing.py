"""Fenced writes: a lock's fencing token checked inside the data store's transactions.

A lock with a lease (``RedisSynchronizer``) can be lost while its holder is
paused or cut off; the next holder then writes, and the old one, when it
wakes, would write stale data over it.  Each grant of such a lock carries a
fencing token larger than every earlier grant's.  The data store keeps one
*fence record* per locked key, ``.zstores/fence/<key>``, holding the token of
the latest holder that wrote there:

1. right after a grant, the holder records its token in a transaction that
   first reads the record: a larger token there means the lock was granted
   again since, and the holder is refused (``advance``);
2. every write under the lock is a transaction that reads the record too
   (``read``) and must find the holder's own token; its commit re-checks
   every key it read, so a later holder's record written meanwhile makes
   the commit fail and nothing is written (``LeaseExpiredError``, with the
   ``TransactionConflictError`` as its context: ``explain``).

So once a new holder has recorded its token, which it does before it reads
anything, no write of an earlier holder can land.  Only stores with
transactions (``store.supports_transactions``) can do this.  Object stores
fence by each chunk's own version instead (``objects.ConditionalWrites``,
whose ``fences_by_version`` makes ``advance`` and ``read`` no-ops).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import LeaseExpiredError, TransactionConflictError
from ..keys import RESERVED_PREFIX

if TYPE_CHECKING:
    from ..base import Store

__all__ = ["FENCE_PREFIX", "advance", "explain", "fence_key", "read"]

#: Where the fence records live in the data store.
FENCE_PREFIX = RESERVED_PREFIX + "fence/"

#: Tries of recording a token whose transaction conflicts with another
#: writer's record (each conflict means the record changed: read it again).
_TRIES = 20


def fence_key(key: str) -> str:
    """The key of the fence record of the locked key ``key``.

    Examples
    --------
    >>> fence_key("data/0.0")
    '.zstores/fence/data/0.0'
    """
    return FENCE_PREFIX + key


def _record(lock: Any) -> bytes:
    return json.dumps({"lock": lock.name, "token": lock.token}).encode()


def _parse(raw: bytes | None) -> tuple[str | None, int]:
    """(lock name, token) of a fence record; (None, 0) if there is none."""
    if raw is None:
        return None, 0
    try:
        record = json.loads(bytes(raw))
        return str(record["lock"]), int(record["token"])
    except (ValueError, KeyError, TypeError):
        return None, 0  # not one of ours: the next holder's record replaces it


def _stale(lock: Any, name: str | None, token: int, store: object) -> LeaseExpiredError:
    holder = "a later holder" if name == lock.name else f"the lock {name!r}"
    return LeaseExpiredError(
        f"{store}: the fence record {fence_key(lock.key)!r} holds token {token} of {holder}, "
        f"newer than this writer's token {lock.token} of {lock.name!r}: its lease ran out and "
        "the lock was granted again, so nothing was written"
    )


def advance(store: Store, *locks: Any) -> None:
    """Record each lock's token in its fence record, unless a newer one is there.

    Called right after the locks are granted, before anything is read under
    them; the records of all the locks a write takes at once go in one
    transaction.  A record of another lock name (another synchronizer, or
    none of ours) is replaced: tokens of different synchronizers cannot be
    compared.

    Raises
    ------
    LeaseExpiredError
        If a record holds a larger token of the same lock: the lock was
        granted again after this grant (nothing is recorded).
    """
    if getattr(store, "fences_by_version", False) or not locks:
        return  # each chunk's version read under the lock is its fence
    for attempt in range(1, _TRIES + 1):
        tx = store.transaction(bind_thread=False)
        try:
            for lock in locks:
                key = fence_key(lock.key)
                name, token = _parse(tx.get(key))
                if name == lock.name and token > lock.token:
                    raise _stale(lock, name, token, store)
                if name == lock.name and token == lock.token:
                    continue  # recorded already (the lock's key was locked twice)
                lock.check()
                tx[key] = _record(lock)
            tx.commit()
            return
        except TransactionConflictError:
            if attempt == _TRIES:
                raise
        finally:
            if tx.state == "open":
                tx.rollback()


def read(tx: Store, locks: Iterable[Any]) -> None:
    """Read the fence records of ``locks`` inside ``tx``: each must hold its lock's token.

    The reads make ``tx.commit()`` fail if a record changes before it.

    Raises
    ------
    LeaseExpiredError
        If a record holds another token or lock: the lock was granted again.
    """
    if getattr(tx, "fences_by_version", False):
        return
    for lock in locks:
        name, token = _parse(tx.get(fence_key(lock.key)))
        if (name, token) != (lock.name, lock.token):
            raise _stale(lock, name, token, tx)


def explain(conflict: TransactionConflictError, locks: Iterable[Any]) -> None:
    """Raise ``LeaseExpiredError`` if ``conflict`` came from a lock of ``locks`` granted again.

    That is: a fence record of theirs moved, or (object stores, whose fence
    is each chunk's version) one of their leases is lost by now.
    """
    locks = list(locks)
    moved = [lock for lock in locks if fence_key(lock.key) in conflict.keys]
    if not moved and hasattr(conflict, "landed"):
        from .objects import lost_leases

        moved = lost_leases(locks)
    if moved:
        names = ", ".join(repr(lock.name) for lock in moved[:3])
        landed = getattr(conflict, "landed", ())
        written = "nothing was written" if not landed else (
            f"only the {len(landed)} keys before the refused one in key order were written "
            f"({', '.join(map(repr, landed[:3]))}), each over the very version it had read")
        raise LeaseExpiredError(
            f"the lock {names} was granted to another writer while this one (token "
            f"{moved[0].token}) was writing: its lease had run out, so its commit was refused "
            f"and {written}"
        ) from conflict
