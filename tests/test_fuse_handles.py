"""zfuse's open-file state without a mount: the order of events the kernel may send."""

import errno
import os
from types import SimpleNamespace

import pytest
from mfusepy import FuseOSError

from zfuse.handles import Handle, OpenFile
from zfuse.operations import StoreOperations
from zstores import DirectoryStore, MemoryStore
from zstores.errors import StoreClosedError


def test_a_late_release_does_not_bring_back_a_committed_buffer() -> None:
    # close() returns after FLUSH; RELEASE may arrive after the next syscall.
    store = MemoryStore()
    file = OpenFile("f")
    appender = Handle(file, os.O_WRONLY | os.O_APPEND, ranged=True)
    appender.write(store, b"new+more", 0)
    assert appender.commit(store)  # flush at close; release still pending

    truncater = Handle(file, os.O_WRONLY, ranged=True)  # truncate(path, 6)
    truncater.truncate(store, 6)
    assert truncater.commit(store)
    file.forget_writer(truncater)

    assert store["f"] == b"new+mo"
    assert file.current() is None  # the store, not the appender's old buffer, defines the file
    assert appender.read(store, 100, 0) == b"new+mo"


def test_a_dirty_writer_keeps_its_buffer_when_another_commits() -> None:
    store = MemoryStore()
    file = OpenFile("f")
    first = Handle(file, os.O_WRONLY, ranged=True)
    second = Handle(file, os.O_WRONLY, ranged=True)
    first.write(store, b"first", 0)
    second.write(store, b"second", 0)
    assert second.commit(store)
    assert first.dirty and file.current() == b"second"
    assert first.commit(store)  # the last commit wins
    assert store["f"] == b"first"


def test_a_failed_commit_is_not_retried_by_the_release_behind_the_writers_back(
        small_fs) -> None:
    # close() reported ENOSPC; if room is freed before RELEASE arrives, a retry
    # there would store the value its writer was told was not saved.
    store = DirectoryStore(small_fs / "data")
    store["f"] = b"old"
    for n in range(10_000):  # fill the 16 MiB file system
        try:
            store[f"filler/{n}"] = bytes(256 << 10)
        except OSError as error:
            assert error.errno == errno.ENOSPC
            break
    else:
        raise AssertionError("the file system never filled up")
    ops = StoreOperations(store, attr_timeout=0)
    fi = SimpleNamespace(flags=os.O_WRONLY | os.O_TRUNC, fh=0, keep_cache=0)
    ops.open("/f", fi)
    ops.write(None, bytes(1 << 20), 0, fi)
    with pytest.raises(FuseOSError) as raised:
        ops.flush(None, fi)
    assert raised.value.errno == errno.ENOSPC
    store.rmdir("filler")  # room again, before the kernel sends RELEASE
    ops.release(None, fi)
    assert store["f"] == b"old"
    ops.open("/f", fi)  # the same file written again is saved as usual
    ops.write(None, b"new", 0, fi)
    ops.flush(None, fi)
    ops.release(None, fi)
    assert store["f"] == b"new"
    store.close()


def test_a_write_after_a_failed_commit_is_committed_again() -> None:
    store = MemoryStore()
    file = OpenFile("f")
    handle = Handle(file, os.O_WRONLY, ranged=True)
    handle.write(store, b"data", 0)
    store.close()
    with pytest.raises(StoreClosedError):
        handle.commit(store)
    assert handle.failed and handle.dirty
    handle.write(store, b"more", 4)
    assert not handle.failed  # a new write: the next flush or release tries again
