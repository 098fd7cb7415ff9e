"""Folder stores never leave their root: symbolic links planted below it are not followed.

A sentinel folder outside the store holds files under the very names the
store's operations would touch if they followed a planted link.  Every write,
delete, rename and removal must leave it byte-for-byte unchanged (its whole
tree is hashed before and after); every read must refuse to return its data.
The same holds through a read-write zfuse mount, and while another thread
keeps swapping a real folder of the store for a link.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from zstores import Store
from zstores.errors import UnsafePathError
from zstores.stores.directory import DirectoryStore, NestedDirectoryStore
from zstores.stores.directory import store as directory_store

pytestmark = pytest.mark.timeout(180)

OUTSIDE_FILES = {
    "x": b"outside x",
    "secret": b"outside secret",
    "1": b"outside chunk 1",
    "sub/y": b"outside sub/y",
    "sub/deeper/z": b"outside sub/deeper/z",
    "0/1": b"outside nested 0/1",
}


def tree_digest(top: Path) -> str:
    """A hash of every name, type, link target and file content under ``top``."""
    digest = hashlib.sha256()
    for folder, folders, files in os.walk(top, followlinks=False):
        folders.sort()
        for name in sorted(folders + files):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            digest.update(os.path.relpath(path, top).encode() + b"\0")
            digest.update(f"{info.st_mode:o}\0".encode())
            if os.path.islink(path):
                digest.update(os.readlink(path).encode())
            elif os.path.isfile(path):
                digest.update(Path(path).read_bytes())
    return digest.hexdigest()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The sentinel folder, with files where a followed link would lead."""
    top = tmp_path / "outside"
    for name, data in OUTSIDE_FILES.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_bytes(data)
    return top


@pytest.fixture(params=[DirectoryStore, NestedDirectoryStore], ids=lambda c: c.__name__)
def cls(request: pytest.FixtureRequest) -> type[DirectoryStore]:
    return request.param


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Reads resolve a key in one openat2 call where Linux has it, else folder by folder."""
    if request.param == "walk":
        # Where it is read: the store's opens and stats resolve keys with it.
        monkeypatch.setattr(directory_store, "_openat2", None)
    elif directory_store._openat2 is None:
        pytest.skip("openat2 is not available here (Linux 5.6+, allowed by seccomp)")
    return request.param


@pytest.fixture
def planted(cls: type[DirectoryStore], tmp_path: Path, outside: Path) -> Store:
    """A store with real keys and five planted links.

    ``lnkdir`` -> the outside folder, ``lnkfile`` -> a file outside (a
    top-level key), ``real/lnk`` -> the outside folder below a real folder,
    ``real/sub/lnkfile`` -> a file outside, two folders down, and ``a/0`` ->
    the outside folder in the middle of the chunk path of ``a/0.1``
    (``a/0/1`` in a NestedDirectoryStore).
    """
    root = tmp_path / "root"
    store = cls(root)
    store.update({"real/k": b"inside k", "top": b"inside top", "a/.zarray": b"{}"})
    (root / "lnkdir").symlink_to(outside)
    (root / "lnkfile").symlink_to(outside / "secret")
    (root / "real" / "lnk").symlink_to(outside)
    (root / "real" / "sub").mkdir()
    (root / "real" / "sub" / "lnkfile").symlink_to(outside / "secret")
    (root / "a" / "0").symlink_to(outside)
    return store


KEYS_THROUGH_LINKS = ["lnkdir/x", "lnkdir/sub/y", "real/lnk/x", "lnkdir/new/deeper"]

WRITES: dict[str, Callable[[Store], None]] = {
    "set through a linked folder": lambda s: s.__setitem__("lnkdir/x", b"new"),
    "set creating below a link": lambda s: s.__setitem__("lnkdir/new/deeper", b"new"),
    "set through a nested link": lambda s: s.__setitem__("real/lnk/sub/y", b"new"),
    "set a nested chunk": lambda s: s.__setitem__("a/0.1", b"new"),
    "set a nested chunk path": lambda s: s.__setitem__("a/0/1", b"new"),
    "setitems": lambda s: s.setitems({"fine": b"1", "lnkdir/x": b"new"}),
    "delete": lambda s: s.__delitem__("lnkdir/x"),
    "delete nested chunk": lambda s: s.__delitem__("a/0/1"),
    "delete deep": lambda s: s.__delitem__("real/lnk/sub/deeper/z"),
    "delitems": lambda s: s.delitems(["top", "lnkdir/secret", "a/0.1"]),
    "rename as source": lambda s: s.rename("lnkdir/x", "moved"),
    "rename a linked folder": lambda s: s.rename("lnkdir", "moved"),
    "rename a linked folder's child folder": lambda s: s.rename("lnkdir/sub", "moved"),
    "rename as destination": lambda s: s.rename("top", "lnkdir/x"),
    "rename through a linked parent": lambda s: s.rename("real/k", "real/lnk/x"),
    "rename a folder into a link": lambda s: s.rename("real", "lnkdir/sub"),
    "rename a nested chunk": lambda s: s.rename("a/0.1", "b/0.1"),
    "rmdir below a link": lambda s: s.rmdir("lnkdir/sub"),
    "rmdir nested": lambda s: s.rmdir("a/0"),
    "rmdir a folder holding a link": lambda s: s.rmdir("real"),
    "rmdir a link": lambda s: s.rmdir("lnkdir"),
    "set over a linked key": lambda s: s.__setitem__("lnkfile", b"new"),
    "delete a linked key": lambda s: s.__delitem__("lnkfile"),
    "rename onto a linked key": lambda s: s.rename("top", "lnkfile"),
    "rename onto a linked folder": lambda s: s.rename("real", "lnkdir"),
    "clear": lambda s: s.clear(),
    "rmdir everything": lambda s: s.rmdir(""),
}

# Operations that name a path through a link must refuse; these act on a
# link itself (replace or remove it, never what it points to) and succeed.
ACTS_ON_THE_LINK_ITSELF = {
    "rmdir a folder holding a link", "rmdir a link", "set over a linked key",
    "delete a linked key", "rename onto a linked key", "clear", "rmdir everything",
    "rmdir nested",
}
# In a DirectoryStore chunk key "a/0.1" is the file "a/0.1": no link on its way.
NESTED_ONLY = {
    "set a nested chunk", "rename a nested chunk", "get a nested chunk",
    "getsize of a nested chunk",
}


@pytest.mark.parametrize("name", list(WRITES))
def test_writes_never_change_anything_outside(
    planted: Store, outside: Path, name: str, cls: type[DirectoryStore]
) -> None:
    before = tree_digest(outside)
    if name in ACTS_ON_THE_LINK_ITSELF:
        WRITES[name](planted)
    elif name in NESTED_ONLY and cls is DirectoryStore:
        try:
            WRITES[name](planted)
        except KeyError:
            pass  # renaming "a/0.1", which does not exist
    else:
        with pytest.raises(UnsafePathError) as info:
            WRITES[name](planted)
        error = info.value
        assert error.errno == errno.EACCES and isinstance(error, PermissionError)
        assert "symbolic link" in str(error) and repr(planted) in str(error)
        assert any(f"'{link}'" in str(error) for link in ("lnkdir", "real/lnk", "a/0")), error
    assert tree_digest(outside) == before
    # No outside file ever shows up as a key.
    assert not {planted[key] for key in planted} & set(OUTSIDE_FILES.values())


def test_the_error_names_the_key_and_the_link(planted: Store) -> None:
    with pytest.raises(UnsafePathError) as info:
        planted["real/lnk/sub/y"] = b"new"
    message = str(info.value)
    assert "'real/lnk/sub/y'" in message and "'real/lnk'" in message
    with pytest.raises(UnsafePathError, match="key 'lnkfile' is a symbolic link"):
        planted["lnkfile"]


def test_acting_on_a_link_itself_removes_only_the_link(planted: Store, outside: Path) -> None:
    root = Path(planted.path)
    planted["lnkfile"] = b"a value of our own"
    assert not (root / "lnkfile").is_symlink() and planted["lnkfile"] == b"a value of our own"
    planted.rmdir("lnkdir")
    assert not os.path.lexists(root / "lnkdir")
    planted.rmdir("real")
    assert not os.path.lexists(root / "real")
    (root / "again").symlink_to(outside)
    planted.clear()
    assert os.listdir(root) == []
    assert (outside / "secret").read_bytes() == OUTSIDE_FILES["secret"]


def test_mode_w_reopen_unlinks_links_only(planted: Store, outside: Path, cls) -> None:
    before = tree_digest(outside)
    root = Path(planted.path)
    planted.close()
    with cls(root, mode="w") as store:
        assert len(store) == 0
    assert os.listdir(root) == []
    assert tree_digest(outside) == before


READS: dict[str, Callable[[Store], object]] = {
    "get a linked key": lambda s: s["lnkfile"],
    "get through a link": lambda s: s["lnkdir/x"],
    "get deep through a link": lambda s: s["real/lnk/sub/deeper/z"],
    "get a nested chunk": lambda s: s["a/0.1"],
    "get a linked key deeper": lambda s: s["real/sub/lnkfile"],
    "contains a linked key deeper": lambda s: "real/sub/lnkfile" in s,
    "getsize of a linked key deeper": lambda s: s.getsize("real/sub/lnkfile"),
    "stat of a linked key": lambda s: s.stat("lnkfile"),
    "stat through a link": lambda s: s.stat("lnkdir/secret"),
    "get_range": lambda s: s.get_range("lnkdir/secret", 1, 4),
    "get_range of a linked key": lambda s: s.get_range("lnkfile", -3),
    "getitems": lambda s: s.getitems(["top", "lnkdir/x"]),
    "contains": lambda s: "lnkdir/x" in s,
    "contains a linked key": lambda s: "lnkfile" in s,
    "listdir of a link": lambda s: s.listdir("lnkdir"),
    "listdir below a link": lambda s: s.listdir("real/lnk/sub"),
    "getsize of a linked key": lambda s: s.getsize("lnkfile"),
    "getsize below a link": lambda s: s.getsize("lnkdir/sub"),
    "getsize of a nested chunk": lambda s: s.getsize("a/0.1"),
}


@pytest.mark.parametrize("name", list(READS))
def test_reads_through_a_link_are_refused(
    planted: Store, name: str, cls, resolver: str
) -> None:
    if name in NESTED_ONLY and cls is DirectoryStore:
        pytest.skip("a DirectoryStore keeps chunk 'a/0.1' as the file 'a/0.1', beside the link")
    with pytest.raises(UnsafePathError) as info:
        READS[name](planted)
    assert "symbolic link" in str(info.value)


def test_listings_and_sizes_skip_links(planted: Store, cls, resolver: str) -> None:
    chunk_folder = ["a/.zarray"]
    assert sorted(planted) == sorted(["real/k", "top", *chunk_folder])
    assert len(planted) == 3
    assert planted.listdir() == ["a", "real", "top"]
    # "real/sub" is a folder another program made, holding only a link: listdir
    # lists sub-folders without looking inside (docs/architecture.md, Folders).
    assert planted.listdir("real") == ["k", "sub"]
    assert planted.listdir("real/sub") == []
    assert planted.listdir("a") == [".zarray"]
    assert planted.getsize() == len(b"inside k") + len(b"inside top") + len(b"{}")
    assert planted.getsize("real") == len(b"inside k")
    assert planted.getsize("a") == 2
    assert planted.getitems(["top", "real/k"]) == {"top": b"inside top", "real/k": b"inside k"}


def test_a_root_that_is_a_link_works_normally(cls, tmp_path: Path, resolver: str) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link.zarr"
    link.symlink_to(target, target_is_directory=True)
    store = cls(link)
    store.update({"g/a/0.0": b"chunk", ".zgroup": b"{}"})
    assert store["g/a/0.0"] == b"chunk" and store.get_range("g/a/0.0", 1, 2) == b"hu"
    assert sorted(store.listdir()) == [".zgroup", "g"]
    assert store.getsize() == 7
    store.rename("g", "h")
    del store[".zgroup"]
    assert list(store) == (["h/a/0/0"] if cls is NestedDirectoryStore else ["h/a/0.0"])
    store.rmdir("h")
    assert os.listdir(target) == [] and link.is_symlink()
    store["k"] = b"v"
    store.close()
    with cls(link, mode="w") as again:
        assert len(again) == 0
    assert link.is_symlink() and target.is_dir() and os.listdir(target) == []


def test_a_fifo_planted_in_the_store_is_not_a_key(cls, tmp_path: Path) -> None:
    store = cls(tmp_path / "root")
    store["k"] = b"v"
    os.mkfifo(tmp_path / "root" / "fifo")
    with pytest.raises(KeyError):
        store["fifo"]  # does not hang waiting for a writer
    assert "fifo" not in store and sorted(store) == ["k"]


# ------------------------------------------------------------------- races
def test_a_folder_swapped_for_a_link_in_a_loop(
    cls, tmp_path: Path, outside: Path, resolver: str
) -> None:
    """One thread swaps ``d`` between a real folder and a link to the outside;
    another writes, reads and deletes keys under ``d`` all the while."""
    root = tmp_path / "root"
    store = cls(root)
    store["d/keep"] = b"keeps the folder from being pruned"
    (outside / "k0").write_bytes(b"outside k0")
    before = tree_digest(outside)
    stop = threading.Event()
    swaps = [0]
    problems: list[str] = []

    def move_aside(path: Path) -> None:
        # The writer made a fresh "d" while the real one was parked: keep it
        # inside the store, under another name.
        try:
            os.rename(path, root / f"aside{swaps[0]}-{time.monotonic_ns()}")
        except FileNotFoundError:
            pass  # and pruned it again already

    def swap() -> None:
        real, parked = root / "d", root / "parked"
        while not stop.is_set():
            os.rename(real, parked)
            while True:
                try:
                    os.symlink(outside, real)
                    break
                except FileExistsError:
                    move_aside(real)
            time.sleep(0.001)
            os.unlink(real)
            while True:
                try:
                    os.rename(parked, real)
                    break
                except OSError as error:
                    if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    move_aside(real)
            swaps[0] += 1
            time.sleep(0.001)

    def churn() -> tuple[int, int]:
        done = refused = 0
        # 2 s, and on past them until the race has surely run (50 swaps, 200
        # operations, a refusal): a busy machine gets there later, not never.
        started = time.monotonic()
        while time.monotonic() - started < 2.0 or not (
                swaps[0] > 50 and done > 200 and refused > 0):
            if time.monotonic() - started > 120:
                break  # the assertion below tells what was missing
            key = f"d/k{done % 7}"
            try:
                store[key] = b"inside"
                value = store.get(key)
                if value is not None and value != b"inside":
                    problems.append(f"read {value!r} from {key}")
                if store.get("d/k0", b"inside") != b"inside":
                    problems.append("read outside data through d/k0")
                del store[key]
            except (UnsafePathError, KeyError):
                refused += 1
            done += 1
        return done, refused

    def swap_reporting() -> None:
        try:
            swap()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            problems.append(f"swapper: {error!r}")

    swapper = threading.Thread(target=swap_reporting)
    swapper.start()
    try:
        done, refused = churn()
    finally:
        stop.set()
        swapper.join()
    assert not problems, problems[:3]
    assert tree_digest(outside) == before
    assert swaps[0] > 50 and done > 200 and refused > 0, (swaps[0], done, refused)
    assert store["d/keep"].startswith(b"keeps")


# -------------------------------------------------------------------- FUSE
def test_a_read_write_mount_cannot_reach_through_a_link(
    planted: Store, outside: Path, mountpoint: Path
) -> None:
    import zfuse

    before = tree_digest(outside)
    with zfuse.mounted(planted, mountpoint, attr_timeout=0) as m:
        top = Path(m.path)
        attempts: dict[str, Callable[[], object]] = {
            "create": lambda: (top / "lnkdir" / "x").write_bytes(b"new"),
            "create deep": lambda: (top / "real" / "lnk" / "new").write_bytes(b"new"),
            "create nested chunk": lambda: (top / "a" / "0" / "1").write_bytes(b"new"),
            "unlink": lambda: os.unlink(top / "lnkdir" / "secret"),
            "unlink deep": lambda: os.unlink(top / "lnkdir" / "sub" / "y"),
            "mkdir": lambda: os.mkdir(top / "lnkdir" / "newdir"),
            "rmdir": lambda: os.rmdir(top / "lnkdir" / "sub" / "deeper"),
            "rename into": lambda: os.rename(top / "top", top / "lnkdir" / "x"),
            "rename out of": lambda: os.rename(top / "lnkdir" / "x", top / "stolen"),
            "rename a folder into": lambda: os.rename(top / "real", top / "lnkdir" / "sub"),
            "read": lambda: (top / "lnkdir" / "secret").read_bytes(),
            "read a linked key": lambda: (top / "lnkfile").read_bytes(),
            "truncate": lambda: os.truncate(top / "lnkdir" / "x", 0),
        }
        for name, attempt in attempts.items():
            with pytest.raises(OSError) as info:
                attempt()
            assert info.value.errno in (errno.EACCES, errno.EPERM), (name, info.value)
            assert tree_digest(outside) == before, name
        assert sorted(os.listdir(top)) == ["a", "real", "top"]
        assert (top / "real" / "k").read_bytes() == b"inside k"
    assert tree_digest(outside) == before
