"""Functions run in spawned worker processes by the harness (must be importable)."""

from __future__ import annotations

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
