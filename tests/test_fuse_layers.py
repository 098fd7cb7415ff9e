"""zfuse's layers without a mount: the view, identities, names, the mount table.

The FUSE handlers are tested through real mounts elsewhere (test_fuse_ops,
test_fuse_hostile ...); here each layer is checked on its own, on every
backend, plus the rule that zfuse asks stores through public methods only.
"""

from __future__ import annotations

import ast
import doctest
import errno
import importlib
from pathlib import Path

import pytest
from mfusepy import FuseOSError

import zfuse
from zfuse.identity import Identities
from zfuse.mounttable import is_mounted, mount_entry, unescape
from zfuse.names import all_listable, listable, name_error
from zfuse.view import StoreView
from zstores import Store

from fuse_helpers import make_store

ZFUSE = Path(zfuse.__file__).parent

BACKENDS = ["memory", "directory", "zip", "dbm", "lmdb", "sqlite", "redis", "mongodb"]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    made = make_store(request.param, tmp_path)
    made.update({"arr/.zarray": b"{}", "arr/0.0": b"chunk", "arr/empty": b"", "top": b"t"})
    yield made
    if not made.closed:
        made.clear()  # a server store shares its server with other tests
        made.close()


def test_view_tells_files_folders_and_nothing_apart(store: Store) -> None:
    view = StoreView(store, attr_timeout=0)
    assert view.stat("arr/0.0")["st_size"] == 5
    # An empty value is a file, not "missing" (Redis' STRLEN answers 0 for both).
    assert view.kind("arr/empty") == "file" and view.stat("arr/empty")["st_size"] == 0
    assert view.kind("arr") == "dir" and view.kind("") == "dir"
    assert view.kind("arr/nothing") is None and view.kind("nothing/below") is None
    with pytest.raises(FuseOSError) as missing:
        view.stat("arr/.zattrs")
    assert missing.value.errno == errno.ENOENT
    assert view.children("") == {"arr": False, "top": True}
    assert view.children("arr/") == {".zarray": True, "0.0": True, "empty": True}


def test_view_sees_changes_by_others_once_the_cache_expires(store: Store) -> None:
    cached, uncached = StoreView(store, attr_timeout=3600), StoreView(store, attr_timeout=0)
    assert cached.kind("arr/new") is None and uncached.kind("arr/new") is None
    store["arr/new"] = b"12"
    assert cached.kind("arr/new") is None  # the negative entry holds for attr_timeout
    assert uncached.stat("arr/new")["st_size"] == 2
    cached.forget("arr/new")
    assert cached.stat("arr/new")["st_size"] == 2


def test_view_refuses_names_a_local_disk_refuses(store: Store) -> None:
    view = StoreView(store)
    assert view.key_to_create("/arr/1.0") == "arr/1.0"
    for path, code in (("/a/" + "x" * 256, errno.ENAMETOOLONG),
                       ("/caf\udce9", errno.EILSEQ), ("/a\\b", errno.EINVAL)):
        with pytest.raises(FuseOSError) as refused:
            view.key_to_create(path)
        assert refused.value.errno == code, path
    with pytest.raises(FuseOSError) as read_only:
        StoreView(store, read_only=True).key_to_create("/arr/1.0")
    assert read_only.value.errno == errno.EROFS


def test_view_renames_folders_with_their_identities(store: Store) -> None:
    if not store.supports_deletes:
        pytest.skip(f"{type(store).__name__} cannot delete, so cannot rename")
    view = StoreView(store, attr_timeout=3600)
    view.identities.new("arr/0.0")
    ino = view.stat("arr/0.0")["st_ino"]
    with view.lock:
        view.rename_dir("arr", "moved")
    assert view.kind("arr") is None
    assert view.stat("moved/0.0")["st_ino"] == ino
    assert store["moved/0.0"] == b"chunk" and "arr/0.0" not in store


def test_identities_new_inodes_and_strictly_later_times() -> None:
    ids = Identities()
    assert ids.of("")[0] == 1 and ids.of("a") == ids.of("a")
    ids.new("a")
    ids.new("b")
    assert ids.of("a")[0] != ids.of("b")[0]
    times = []
    for _ in range(1000):
        ids.touch("a")
        times.append(ids.of("a")[1])
    assert times == sorted(set(times))  # strictly increasing, even within one clock tick
    ids.new("d/e")
    ino = ids.of("d/e")[0]
    ids.move_tree("d", "f")
    assert ids.of("f/e")[0] == ino and ids.of("d/e")[0] != ino


def test_inodes_of_a_listing_are_those_stat_shows() -> None:
    ids = Identities()
    keys = [f"arr/{i}" for i in range(100)]
    assert ids.inodes(keys) == [ids.of(key)[0] for key in keys]  # nothing changed yet
    ids.new("arr/7")
    ids.touch("arr/8")
    assert ids.inodes(keys) == [ids.of(key)[0] for key in keys]
    assert ids.inodes(["arr/7"]) != [Identities().of("arr/7")[0]]  # its own, not the hash


def test_name_rules() -> None:
    assert name_error("a/" + "é" * 127) is None  # 254 bytes
    assert name_error("a/" + "é" * 128) == errno.ENAMETOOLONG
    assert listable("0.0") and not listable("a\\b") and not listable("caf\udce9")
    for names in (["0.0", "1.0"], ["0.0", "a\\b"], ["0.0", "x" * 255], ["0.0", "x" * 256],
                  ["0.0", "é" * 127], ["0.0", "é" * 128], ["caf\udce9"], []):
        assert all_listable(names) in (all(map(listable, names)), False), names
    assert all_listable(["0.0", "x" * 255]) and not all_listable(["0.0", "x" * 256])


def test_mount_table(tmp_path: Path) -> None:
    assert unescape(r"/a\040b\011c") == "/a b\tc"
    assert is_mounted("/proc") and mount_entry("/proc") == ("proc", "proc")
    assert not is_mounted(tmp_path) and mount_entry(str(tmp_path)) is None


ZFUSE_MODULES = sorted(p.stem for p in ZFUSE.glob("*.py") if p.stem != "__main__")


@pytest.mark.parametrize("name", ZFUSE_MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"zfuse.{name}" if name != "__init__" else "zfuse")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def _private_reaches(path: Path) -> list[str]:
    """``obj._name`` in ``path`` where ``obj`` is not ``self``, ``cls`` or ``super()``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
            continue
        if isinstance(owner, ast.Name) and owner.id in ("os", "sys"):
            continue  # os._exit in the daemon's child
        found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_zfuse_reaches_into_no_private_names_of_stores_or_its_own_modules() -> None:
    reaches = [hit for path in sorted(ZFUSE.glob("*.py")) for hit in _private_reaches(path)]
    assert reaches == []
