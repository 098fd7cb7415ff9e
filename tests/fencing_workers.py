"""Writer processes of tests/test_fencing.py: a read-modify-write that stops where the test says.

The writer tells the test through a pipe when it reaches the chosen point
(after its read, or at its first write into the store) and waits there for
"go"; the test then stops it with SIGSTOP, so the pause (and the stopped
lease renewals) are placed by the test, not left to timing.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

REGION = slice(0, 10)  # four chunks of 3, the last one only partly


class Pause:
    """Where a writer stops: the first call tells the test and waits for "go".

    Calls from other threads meanwhile (zarr writes chunks in parallel) wait
    too, so every write of the region happens after the pause.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.armed = False
        self._lock = threading.Lock()
        self._resumed = threading.Event()
        self._resumed.set()

    def arm(self) -> None:
        self._resumed.clear()
        self.armed = True

    def __call__(self, where: str) -> None:
        with self._lock:
            first, self.armed = self.armed, False
        if first:
            self.connection.send(where)
            assert self.connection.recv() == "go"
            self._resumed.set()
        self._resumed.wait()


def open_store(kind: str, where: Any, pause: Pause | None = None) -> Any:
    """The data store ``kind`` at ``where``; with ``pause``, one that stops at its first write."""
    from zstores.stores.lmdb import LMDBStore
    from zstores.stores.redis import RedisStore
    from zstores.stores.sqlite import SQLiteStore

    cls = {"sqlite": SQLiteStore, "lmdb": LMDBStore, "redis": RedisStore}[kind]
    if pause is not None:
        cls = _pausing(cls, pause)
    if kind == "redis":
        url, prefix, *options = where  # options: a dict of RedisStore options
        return cls(url, prefix=prefix, **(options[0] if options else {}))
    return cls(where)


def _pausing(cls: type, pause: Pause) -> type:
    class Pausing(cls):  # type: ignore[misc, valid-type]
        def _set(self, key: str, value: Any) -> None:
            pause("write")
            super()._set(key, value)

        def _set_many(self, items: list[Any]) -> None:
            pause("write")
            super()._set_many(items)

        def _commit_changes(self, changes: Any) -> None:
            pause("write")
            super()._commit_changes(changes)

    return Pausing


def paused_writer(kind: str, where: Any, sync: Any, fenced: bool, pause_at: str,
                  connection: Any) -> None:
    """Add 1 to REGION under its locks, stopping after the read or at the write.

    Sends ("done", "") or ("refused", the LeaseExpiredError) at the end.
    """
    pause = Pause(connection)
    add_one_paused(open_store(kind, where, pause), pause, sync, fenced, pause_at, connection)


def add_one_paused(store: Any, pause: Pause, sync: Any, fenced: bool, pause_at: str,
                   connection: Any) -> None:
    """``paused_writer``'s work on ``store`` (one that calls ``pause`` at its writes); closes it."""
    import zarr

    import zstores
    from zstores.errors import LeaseExpiredError

    array = zarr.open_array(zstores.zarr_store(store), path="data", mode="r+")
    proxy = zstores.synchronized(array, sync, fenced=fenced)
    try:
        with proxy.locked(REGION):
            before = np.asarray(proxy[REGION])
            pause.arm()
            if pause_at == "read":
                pause("read")
            proxy[REGION] = before + 1
        connection.send(("done", ""))
    except LeaseExpiredError as error:
        connection.send(("refused", repr(error)))
    except Exception as error:  # noqa: BLE001 - any other failure goes to the test
        connection.send(("error", repr(error)))
    finally:
        store.close()


def take_lock(sync: Any, key: str, connection: Any) -> None:
    """Take ``sync[key]``, say "held", release it."""
    with sync[key]:
        connection.send("held")


class LinePipe:
    """``send`` and ``recv`` of a multiprocessing connection over stdin and stdout (JSON lines).

    For writers started with ``ip netns exec`` in a network namespace, where
    a multiprocessing pipe cannot follow.
    """

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader, self._writer = reader, writer

    def send(self, message: Any) -> None:
        import json

        self._writer.write(json.dumps(message) + "\n")
        self._writer.flush()

    def recv(self) -> Any:
        import json

        line = self._reader.readline()
        if not line:
            raise EOFError("the other end closed the pipe")
        return json.loads(line)


def netns_main(role: str, kind_where: str, sync_args: str, fenced: str) -> None:
    """Entry point of a writer in a namespace: ``python -c`` calls it with JSON arguments."""
    import json
    import sys

    import zstores

    url, prefix, *options = json.loads(kind_where)
    sync_options = json.loads(sync_args)
    sync = zstores.RedisSynchronizer(**sync_options)
    pipe = LinePipe(sys.stdin, sys.stdout)
    # The data: "sqlite:PATH" or "lmdb:PATH" (a file both hosts see), else a Redis URL.
    kind, _, path = url.partition(":")
    if kind in ("sqlite", "lmdb"):
        where: Any = path
    else:
        kind, where = "redis", (url, prefix)
    if role == "paused":
        paused_writer(kind, where if kind != "redis" else (url, prefix, *options), sync,
                      fenced == "1", "write", pipe)
        return
    if role in ("setup", "values"):
        import zarr

        store = open_store(kind, where)
        if role == "setup":
            zarr.create_array(zstores.zarr_store(store), name="data", shape=(20,), chunks=(3,),
                              dtype="i4", fill_value=0, overwrite=True)
        else:
            array = zarr.open_array(zstores.zarr_store(store), path="data", mode="r")
            pipe.send(np.asarray(array[REGION]).tolist())
        store.close()
        return
    if True:  # the other writer: wait for the paused one's lease to end, add 1 ten times
        import redis
        import zarr

        store = open_store(kind, where)
        proxy = zstores.synchronized(
            zarr.open_array(zstores.zarr_store(store), path="data", mode="r+"), sync,
            fenced=fenced == "1")
        client = redis.Redis.from_url(sync_options["url"])  # where the locks are
        names = [sync.lock_name(key) for key in proxy.layout.keys(REGION)]
        assert pipe.recv() == "go"  # started (and zarr imported) before the cut
        while client.exists(*names):
            import time

            time.sleep(0.01)
        for _ in range(10):
            with proxy.locked(REGION):
                proxy[REGION] = proxy[REGION] + 1
        pipe.send(["done", np.asarray(proxy[REGION]).tolist()])
        store.close()
