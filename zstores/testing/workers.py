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
