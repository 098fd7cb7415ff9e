"""Functions run in spawned worker processes by the harness (must be importable)."""

from __future__ import annotations

from typing import Any

from ..base import Store


def value_for(writer: int, index: int, size: int = 4096) -> bytes:
    """A value whose every byte says who wrote it, so a torn value is detectable."""
    return bytes([writer % 251 + 1]) * (size + index)


def write_keys(store: Store, writer: int, count: int, shared_key: str) -> int:
    """Write ``count`` own keys and overwrite ``shared_key`` as often; return writes done."""
    with store:
        for index in range(count):
            store[f"w{writer}/k{index}"] = value_for(writer, index)
            store[shared_key] = value_for(writer, 0)
    return count


def write_in_transaction(store: Store, items: dict[str, bytes], ready: Any, go: Any,
                         commit: bool) -> None:
    """Write ``items`` in one transaction, set ``ready``, wait for ``go``, then end it.

    ``commit`` False rolls back.  The harness SIGKILLs the process between
    ``ready`` and ``go`` to check that a crash before the commit leaves nothing.
    """
    with store:
        tx = store.transaction()
        store.setitems(items)
        ready.set()
        go.wait(120)
        if commit:
            tx.commit()
        else:
            tx.rollback()


def overwrite(store: Store, items: dict[str, bytes]) -> None:
    """Write ``items`` (another process's writes, for the snapshot tests)."""
    with store:
        store.setitems(items)


def race_key(op: str, index: int) -> str:
    """The key round ``index`` of a conditional-write race on ``op`` is about."""
    return f"race/{op}/{index}"


def race_start(index: int) -> bytes:
    """What a ``replace`` race's key holds before its round (no racer writes it)."""
    return b"start %d " % index * 100


def race_conditional(store: Store, writer: int, role: str, op: str, rounds: int,
                     barrier: Any, results: Any, own_handle: bool) -> None:
    """Race on ``rounds`` keys of ``op`` ("create" or "replace"), one per round.

    ``role`` is ``"create"`` (``set_if_not_exists``), ``"replace-bytes"`` and
    ``"replace-version"`` (``replace_if`` from the round's start value, given
    as bytes or as the ``Version`` read before the first round: a version
    read during a round could already be a winner's) or ``"plain"`` (a plain
    write).  Every racer waits at ``barrier`` before each round; the list of
    what each call returned (None for plain writes) goes to ``results`` as
    ``(writer, outcomes)``, or ``(writer, "error text")`` after aborting the
    barrier so that the others do not wait for it.  ``own_handle``: the
    store is this process's own (spawned worker) and is closed at the end.
    """
    try:
        versions = {}
        if role == "replace-version":
            versions = {index: store.get_with_version(race_key(op, index))[1]
                        for index in range(rounds)}
        outcomes: list[bool | None] = []
        for index in range(rounds):
            key, value = race_key(op, index), value_for(writer, index)
            barrier.wait(120)
            if role == "create":
                outcomes.append(store.set_if_not_exists(key, value))
            elif role == "replace-bytes":
                outcomes.append(store.replace_if(key, race_start(index), value))
            elif role == "replace-version":
                outcomes.append(store.replace_if(key, versions[index], value))
            else:
                store[key] = value
                outcomes.append(None)
        results.put((writer, outcomes))
    except BaseException as error:  # noqa: BLE001 - reported to the harness
        barrier.abort()
        results.put((writer, f"{type(error).__name__}: {error}"))
    finally:
        if own_handle:
            store.close()


def race_zarr3_create(url: str, writer: int, rounds: int, barrier: Any, results: Any) -> None:
    """zarr-python 3's ``set_if_not_exists`` through ``zarr_store(url)``, one key per round.

    After each call the racer reads the key back: with an atomic create every
    racer reads the one value that was written first; a check-then-write lets
    a later racer overwrite a value an earlier one has already read.
    """
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    from ..adapters import zarr_store

    adapter = zarr_store(url)
    try:
        seen = []
        for index in range(rounds):
            key = race_key("zarr3", index)
            barrier.wait(120)
            sync(adapter.set_if_not_exists(key, cpu.Buffer.from_bytes(value_for(writer, index))))
            seen.append(adapter.get_sync(key).to_bytes())
        results.put((writer, seen))
    except BaseException as error:  # noqa: BLE001 - reported to the test
        barrier.abort()
        results.put((writer, f"{type(error).__name__}: {error}"))
    finally:
        adapter.close()
