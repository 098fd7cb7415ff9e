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


def test_listdir_agrees_with_the_keys_through_random_changes():
    # listdir keeps an index of the folders listed (names and key counts) and
    # the sorted keys, brought up to date with the keys written and deleted
    # since; a few changes edit them, many start them again.  Random writes,
    # deletes, batches, removals and copies, checked against the keys.
    import random

    rng = random.Random(17)
    segments = ["a", "b", "0", "1", "a.b", "c0"]
    store = MemoryStore()

    def random_key():
        return "/".join(rng.choice(segments) for _ in range(rng.randint(1, 4)))

    def expected(store, path):
        prefix = f"{path}/" if path else ""
        return sorted({key[len(prefix):].split("/")[0] for key in store if key.startswith(prefix)})

    for step in range(6000):
        roll = rng.random()
        if roll < 0.45:
            store[random_key()] = b"x"
        elif roll < 0.7:
            store.pop(random_key(), None)
        elif roll < 0.73:
            store.rmdir(random_key())
        elif roll < 0.76:  # a batch past the edit limit now and then
            store.setitems({random_key(): b"y" for _ in range(rng.choice([3, 100]))})
        elif roll < 0.79:
            store.delitems([random_key() for _ in range(rng.choice([3, 100]))])
        elif roll < 0.795:
            store.clear()
        elif roll < 0.8:
            path = rng.choice(["", "a", "b/0"])
            assert store.snapshot().listdir(path) == expected(store, path)
        else:
            path = rng.choice(["", "a", "b", "a/b", "0/1", "a/a.b", "c0", "a/b/0"])
            assert store.listdir(path) == expected(store, path), (step, path)
