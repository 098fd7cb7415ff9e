"""The lease a distributed lock holds, kept and checked the same way by every kind.

A lock with a lease (``RedisLock``, ``ObjectLock``) is granted for
``lease`` seconds from just before the request that granted it, measured on
the holder's own monotonic clock, and renewed in the background.  The
holder cannot know whether a late renewal still reached the server in
time, so once its own clock passes the end of the lease it counts the
lease as lost: ``check()`` then raises, and ``synchronized()`` writes
nothing more under it.  What differs between the kinds is only how a
grant, a renewal and a release talk to their server; this module keeps the
bookkeeping they share.

Examples
--------
>>> from zstores.sync.lease import LeasedLock
>>> class Never(LeasedLock):
...     kind = "example lock"
...     def _where(self):
...         return "nowhere"
>>> lock = Never("a/0", "locks/a/0", owner=None, timeout=None)
>>> lock.check()
Traceback (most recent call last):
...
zstores.errors.LeaseExpiredError: the example lock 'locks/a/0' (key 'a/0') is not held
"""

from __future__ import annotations

import logging
import time
from typing import Any, Self

from ..errors import LeaseExpiredError

__all__ = ["LeasedLock"]

logger = logging.getLogger("zstores.sync")


class LeasedLock:
    """The state of a lock with a lease and a fencing token, and its checks.

    A subclass sets ``kind`` (how messages name it), implements ``_where``
    (the server or store it lives on) and ``acquire``/``release``/``_renew``,
    calling ``_granted``, ``_renewed``, ``_overdue`` and ``_renewal_raised``.

    Parameters
    ----------
    key : str
        The key the lock protects.
    name : str
        The lock's own name on its server (a Redis key, a lease object).
    owner : Any
        The synchronizer that made it (its ``lease`` and ``_watchdog``).
    timeout : float or None
        The default bound of ``acquire``.
    """

    #: How messages name this kind of lock ("Redis lock", "lock").
    kind = "lock"

    def __init__(self, key: str, name: str, owner: Any, timeout: float | None) -> None:
        self.key = key
        self.name = name
        self._owner = owner
        self._timeout = timeout
        self.token: int | None = None  # the fencing token while held
        self._value = ""  # this holder's random identity on the server
        self._valid_until = 0.0  # time.monotonic() when the lease may have run out
        self._lost: str | None = None  # why the lease is known to be lost
        self._renewal_failed = False  # the last renewal raised (warned once per streak)

    def _where(self) -> str:
        """The server or store the lock lives on, as messages name it."""
        raise NotImplementedError

    def acquire(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------- lease
    def _granted(self, waiter: str, token: int, sent: float) -> None:
        """Granted with ``token`` to ``waiter`` by a request sent at ``sent``."""
        self.token = token
        self._value = waiter
        self._lost = None
        self._valid_until = sent + self._owner.lease
        self._owner._watchdog.hold(self)

    def _renewed(self, sent: float) -> None:
        """Renewed by a request sent at ``sent`` (monotonic)."""
        self._renewal_failed = False
        if self._lost is None:
            self._valid_until = sent + self._owner.lease

    def _overdue(self) -> bool:
        """Whether the lease's time has passed (then marked lost: a renewal now is too late)."""
        if time.monotonic() < self._valid_until:
            return False
        if self._lost is None:
            self._lost = (f"no renewal reached {self._where()} within its "
                          f"{self._owner.lease} s lease")
        return True

    def _renewal_raised(self, error: BaseException) -> None:
        """A renewal failed with ``error``: warn once per streak; the lease runs out."""
        log = logger.debug if self._renewal_failed else logger.warning
        self._renewal_failed = True
        log("could not renew the lease of the %s %r (retrying until it runs out): %s",
            self.kind, self.name, error)

    def check(self) -> None:
        """Raise ``LeaseExpiredError`` if the lease may have run out.

        ``synchronized()`` calls it before every write it makes under the
        lock, so a holder whose renewals failed or came late (a paused
        process, a cut network) stops before it touches the store.

        Raises
        ------
        LeaseExpiredError
            If the lock is not held, or its lease was lost or may have run out.
        """
        if self.token is None:
            raise LeaseExpiredError(f"the {self.kind} {self.name!r} (key {self.key!r}) is not held")
        self._overdue()
        if self._lost is not None:
            raise LeaseExpiredError(
                f"the lease of the {self.kind} {self.name!r} (key {self.key!r}, token "
                f"{self.token}) is lost: {self._lost}; another writer may hold it now, so "
                "nothing more is written under it")

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
