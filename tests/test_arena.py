"""The pooled memory transactions hold their values in (zstores/_arena.py)."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest

import zstores
from zstores import _arena

CHUNK = 128 * 1024


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.fixture(autouse=True)
def empty_pool() -> None:
    _arena.drain_pool()


def test_small_values_stay_bytes_and_large_ones_are_read_only_copies() -> None:
    arena = _arena.Arena()
    assert arena.hold(b"x" * 10) == b"x" * 10
    assert type(arena.hold(memoryview(b"y" * 10))) is bytes
    source = bytearray(b"z" * 5000)
    held = arena.hold(memoryview(source))
    source[:] = b"w" * 5000
    assert isinstance(held, memoryview) and held.readonly and bytes(held) == b"z" * 5000
    arena.release()
    with pytest.raises(ValueError, match="released"):
        bytes(held)


def test_released_blocks_are_written_again_without_page_faults() -> None:
    # 2 MiB held and released, again and again: the pool's pages stay mapped.
    value = b"v" * CHUNK
    counts = []
    for _ in range(6):
        arena = _arena.Arena()
        before = faults()
        for _ in range(16):
            arena.hold(value)
        counts.append(faults() - before)
        arena.release()
    assert counts[0] >= 16 * CHUNK // 4096 // 2, counts  # the first round maps fresh pages
    assert max(counts[1:]) < 64, f"page faults per round: {counts}"
    assert _arena.pooled_bytes() == _arena.BLOCK_BYTES


def test_a_block_still_exported_is_never_reused() -> None:
    arena = _arena.Arena()
    held = arena.hold(b"a" * CHUNK)
    array = np.frombuffer(held, np.uint8)  # an export of the view
    arena.release()
    assert _arena.pooled_bytes() == 0, "a block with a live export went back to the pool"
    later = _arena.Arena()
    later.hold(b"b" * CHUNK)
    assert bytes(array[:3]) == b"aaa"
    later.release()


def test_values_larger_than_a_block_get_their_own_and_are_not_pooled() -> None:
    arena = _arena.Arena()
    big = b"q" * (_arena.BLOCK_BYTES + 1)
    assert bytes(arena.hold(big)) == big
    arena.release()
    assert _arena.pooled_bytes() == 0


def test_the_pool_keeps_at_most_its_limit() -> None:
    arenas = [_arena.Arena() for _ in range(_arena.POOL_BYTES // _arena.BLOCK_BYTES + 3)]
    for arena in arenas:
        arena.hold(b"p" * CHUNK)
    for arena in arenas:
        arena.release()
    assert _arena.pooled_bytes() == _arena.POOL_BYTES


def test_a_transaction_rewriting_one_key_holds_about_one_copy(tmp_path: Path) -> None:
    with zstores.LMDBStore(tmp_path / "data.lmdb") as store, store.transaction() as tx:
        for round_ in range(200):
            store["chunk"] = bytes([round_ % 256]) * CHUNK  # 25 MiB written in all
        held = tx._arena.held  # type: ignore[union-attr]
        assert held <= 2 * _arena.BLOCK_BYTES + CHUNK, held
    with zstores.LMDBStore(tmp_path / "data.lmdb", mode="r") as store:
        assert store["chunk"] == bytes([199]) * CHUNK


def test_a_commit_gives_the_memory_back_and_ends_every_view(tmp_path: Path) -> None:
    with zstores.LMDBStore(tmp_path / "data.lmdb") as store:
        with store.transaction() as tx:
            store["a"] = b"1" * CHUNK
            held = tx._writes["a"]  # the overlay's own view
        assert store["a"] == b"1" * CHUNK
        with pytest.raises(ValueError, match="released"):
            bytes(held)
        assert _arena.pooled_bytes() == _arena.BLOCK_BYTES
        with pytest.raises(RuntimeError):
            with store.transaction():
                store["b"] = b"2" * CHUNK
                raise RuntimeError("roll back")
        assert "b" not in store and _arena.pooled_bytes() == _arena.BLOCK_BYTES


def test_memory_store_transactions_keep_bytes() -> None:
    # MemoryStore keeps the objects a commit gives it: no pooled memory there.
    store = zstores.MemoryStore()
    with store.transaction() as tx:
        store["a"] = bytearray(b"1" * CHUNK)
        assert type(tx._writes["a"]) is bytes
    assert _arena.pooled_bytes() == 0
