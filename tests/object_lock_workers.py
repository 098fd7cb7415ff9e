"""Writer processes of tests/test_object_locks.py: S3 data, locks as lease objects in S3.

Spawned processes (a fresh interpreter each): they share nothing with the
test but the bucket, as functions on separate machines would.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fencing_workers import REGION, Pause, add_one_paused


def s3_store(location: str, options: dict[str, Any], pause: Pause | None = None) -> Any:
    """An S3Store; with ``pause``, one that stops at its first write of any kind."""
    from zstores import S3Store

    cls = S3Store if pause is None else _pausing(S3Store, pause)
    return cls(location, **options)


def _pausing(cls: type, pause: Pause) -> type:
    class Pausing(cls):  # type: ignore[misc, valid-type]
        def _set(self, key: str, value: Any) -> None:
            pause("write")
            super()._set(key, value)

        def _set_many(self, items: list[Any]) -> None:
            pause("write")
            super()._set_many(items)

        def _replace_if(self, key: str, expected: Any, value: Any) -> bool:
            pause("write")
            return super()._replace_if(key, expected, value)

        def _set_if_absent(self, key: str, value: Any) -> bool:
            pause("write")
            return super()._set_if_absent(key, value)

    Pausing.__name__ = cls.__name__
    return Pausing


def paused_writer(location: str, options: dict[str, Any], sync: Any, fenced: bool,
                  pause_at: str, connection: Any) -> None:
    """Add 1 to REGION under its locks, stopping after the read or at the first write.

    Sends ("done", "") or ("refused", the LeaseExpiredError) at the end.
    """
    pause = Pause(connection)
    add_one_paused(s3_store(location, options, pause), pause, sync, fenced, pause_at,
                   connection)


def count_under_lock(sync: Any, location: str, options: dict[str, Any], rounds: int) -> int:
    """Read a counter object, add 1, write it back, ``rounds`` times, under ``sync["counter"]``."""
    store = s3_store(location, options)
    for _ in range(rounds):
        with sync["counter"]:
            value = int(store.get("counter", b"0"))
            store["counter"] = str(value + 1).encode()
    store.close()
    return rounds


def hold_then_check(sync: Any, key: str, connection: Any) -> None:
    """Take ``sync[key]``, say its token, wait for "check", then report what ``check()`` says."""
    from zstores.errors import LeaseExpiredError

    lock = sync[key]
    lock.acquire()
    connection.send(lock.token)
    assert connection.recv() == "check"
    try:
        lock.check()
        connection.send("valid")
    except LeaseExpiredError as error:
        connection.send(f"lost: {error}")
    try:
        lock.release()
    except LeaseExpiredError:
        pass


def add_fenced(location: str, options: dict[str, Any], sync: Any, fenced: bool,
               rounds: int) -> int:
    """``rounds`` read-modify-writes of REGION under ``locked()``."""
    import zarr

    import zstores

    store = s3_store(location, options)
    proxy = zstores.synchronized(
        zarr.open_array(zstores.zarr_store(store), path="data", mode="r+"), sync, fenced=fenced)
    for _ in range(rounds):
        with proxy.locked(REGION):
            proxy[REGION] = proxy[REGION] + 1
    store.close()
    return rounds


def dask_add(location: str, options: dict[str, Any], sync: Any, rounds: int) -> int:
    """A dask task: ``rounds`` fenced read-modify-writes of REGION."""
    return add_fenced(location, options, sync, True, rounds)


def dask_unlocked(location: str, options: dict[str, Any], tasks: int, wait: float = 300) -> int:
    """A dask task without locks: read REGION, wait until every task has read (a barrier of
    ``tasks``), write it + 1.  Every task then writes what all read: all but one lost."""
    import zarr
    from distributed import Event, Queue

    import zstores

    store = s3_store(location, options)
    array = zarr.open_array(zstores.zarr_store(store), path="data", mode="r+")
    before = np.asarray(array[REGION])
    Queue("read").put(1)
    assert Event("go").wait(wait)
    array[REGION] = before + 1
    store.close()
    return 1


def netns_main(role: str, location: str, options_json: str, fenced: str) -> None:
    """A writer in a network namespace (``python -c`` with JSON arguments; messages on stdio).

    Roles: "setup" makes the array, "values" sends REGION, "paused" adds 1 and
    stops at its first write, "other" waits for "go" and adds 1 ten times.
    """
    import json
    import sys

    import zarr
    from fencing_workers import LinePipe

    import zstores

    options = json.loads(options_json)
    wait, lease = options.pop("wait"), options.pop("lease")
    pipe = LinePipe(sys.stdin, sys.stdout)
    sync = zstores.ObjectStoreSynchronizer(s3_store(location, options), lease=lease,
                                           timeout=wait, poll=0.02)
    if role == "paused":
        paused_writer(location, options, sync, fenced == "1", "write", pipe)
        return
    store = s3_store(location, options)
    if role == "setup":
        zarr.create_array(zstores.zarr_store(store), name="data", shape=(20,), chunks=(3,),
                          dtype="i4", fill_value=0, overwrite=True)
    elif role == "values":
        array = zarr.open_array(zstores.zarr_store(store), path="data", mode="r")
        pipe.send(np.asarray(array[REGION]).tolist())
    else:  # the other writer: takes the paused one's locks once their leases stood, adds 1 x10
        proxy = zstores.synchronized(
            zarr.open_array(zstores.zarr_store(store), path="data", mode="r+"), sync,
            fenced=fenced == "1")
        assert pipe.recv() == "go"  # started (and zarr imported) before the cut
        for _ in range(10):
            with proxy.locked(REGION):
                proxy[REGION] = proxy[REGION] + 1
        pipe.send(["done", np.asarray(proxy[REGION]).tolist()])
    store.close()


class PauseAfter(Pause):
    """A ``Pause`` that lets the first ``writes`` writes through and stops at the next."""

    def __init__(self, connection: Any, writes: int) -> None:
        super().__init__(connection)
        self._left = writes

    def __call__(self, where: str) -> None:
        with self._lock:
            self._left -= 1
            through = self._left >= 0
        if not through:
            super().__call__(where)


def killed_writer(location: str, options: dict[str, Any], sync: Any, connection: Any) -> None:
    """Write 7 into REGION (four chunks, fenced): the first chunk lands, then it stops for the
    test to kill it (SIGKILL) at its second chunk's write."""
    import zarr

    import zstores

    pause = PauseAfter(connection, 1)
    pause.arm()
    store = s3_store(location, options, pause)
    proxy = zstores.synchronized(zarr.open_array(zstores.zarr_store(store), path="data",
                                                 mode="r+"), sync, fenced=True)
    proxy[REGION] = 7
    connection.send("not killed")
