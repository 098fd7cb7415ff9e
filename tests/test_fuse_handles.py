"""zfuse's open-file state without a mount: the order of events the kernel may send."""

import os

from zfuse.handles import Handle, OpenFile
from zstores import MemoryStore


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
