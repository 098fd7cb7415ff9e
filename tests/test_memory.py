from zstores import MemoryStore
from zstores.testing import StoreTests

from raw_access import memory_delete, memory_get, memory_set


class TestMemoryStore(StoreTests):
    def open_store(self, location, mode="a"):
        return MemoryStore(mode=mode)

    # The backend of a MemoryStore is its dict.
    def raw_get(self, store, key):
        return memory_get(store, key)

    def raw_set(self, store, key, value):
        memory_set(store, key, value)


def test_listdir_follows_every_change_after_a_listing():
    # listdir remembers the sorted keys and each folder listed until the key
    # set changes: every kind of write must make it look again.  Each step
    # keeps the number of keys as it was (adding or removing keys out of band),
    # so that only the store's own record of changes can tell.
    store = MemoryStore()
    store.update({"a/0.0": b"x", "a/1.0": b"x", "b/c/0": b"x"})
    assert store.listdir("a") == ["0.0", "1.0"] and store.listdir() == ["a", "b"]

    def out_of_band(added=(), removed=()):
        for key in added:
            memory_set(store, key, b"x")
        for key in removed:
            memory_delete(store, key)

    steps = [
        (lambda: (store.__setitem__("a/2.0", b"x"), out_of_band(removed=["a/0.0"])),
         ["1.0", "2.0"]),
        (lambda: store.__setitem__("a/2.0", b"overwritten"), ["1.0", "2.0"]),
        (lambda: (store.setitems({"a/3.0": b"x", "a/d/e": b"x"}),
                  out_of_band(removed=["a/1.0", "a/2.0"])), ["3.0", "d"]),
        (lambda: (store.__delitem__("a/3.0"), out_of_band(added=["a/4.0"])), ["4.0", "d"]),
        (lambda: (store.delitems(["a/4.0", "a/missing"]), out_of_band(added=["a/5.0"])),
         ["5.0", "d"]),
        (lambda: (store.rmdir("a/d"), out_of_band(added=["a/6.0"])), ["5.0", "6.0"]),
        (lambda: store.rename("a/5.0", "a/7.0"), ["6.0", "7.0"]),
        (lambda: (store.clear(), out_of_band(added=["a/x", "a/y", "a/z"])), ["x", "y", "z"]),
    ]
    for change, expected in steps:
        change()
        assert store.listdir("a") == expected
    assert store.listdir() == ["a"]


def test_listdir_while_threads_write():
    import threading

    store = MemoryStore()
    done = threading.Event()
    seen = []

    def list_until_done():
        while not done.is_set():
            seen.append(len(store.listdir("a")))

    readers = [threading.Thread(target=list_until_done) for _ in range(2)]
    for reader in readers:
        reader.start()
    for i in range(3000):
        store[f"a/{i}"] = b"x"
        if i % 3 == 0:
            del store[f"a/{i}"]
    done.set()
    for reader in readers:
        reader.join()
    assert store.listdir("a") == sorted(key[2:] for key in store)
    assert len(store.listdir("a")) == 2000 and seen
