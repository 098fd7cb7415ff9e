"""URL strings in zarr, xarray and dask: zstores' fsspec file system (adapters/fsspec.py).

Every test opens stores the way a scientist would, with a plain URL string,
and then checks the data through ``zstores.open_store`` on the same URL, so
a test passes only when the bytes really went to the named backend.
"""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import threading
import uuid
import zipfile

import fsspec
import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu
from zarr.storage import FsspecStore
from zarr.testing.store import StoreTests

from zstores.adapters.fsspec import PROTOCOLS, StoreFileSystem, close_shared_stores
from zstores.errors import InvalidKeyError, ReadOnlyError, StoreNotFoundError
from zstores.urls import StoreURLError, open_store

from zarr3_suite import run_async_tests

FILE_BACKENDS = {  # scheme -> file name
    "lmdb": "data.lmdb",
    "sqlite": "data.sqlite",
    "dbm": "data.dbm",
    "nested": "data.nested",
}
STORE_CLASSES = {
    "lmdb": "LMDBStore", "sqlite": "SQLiteStore", "dbm": "DBMStore",
    "nested": "NestedDirectoryStore", "redis": "RedisStore", "mongodb": "MongoDBStore",
}
BACKENDS = [*FILE_BACKENDS, "redis", "mongodb"]


def unique(stem: str) -> str:
    return f"{stem}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _fresh_shared_stores():
    """Each test starts and ends without stores left open by another."""
    close_shared_stores()
    yield
    close_shared_stores()


def make_url(backend: str, tmp_path, request) -> str:
    """A URL naming a new, empty store of ``backend``."""
    if backend in FILE_BACKENDS:
        return f"{backend}://{tmp_path / unique('d')}_{FILE_BACKENDS[backend]}"
    if backend == "redis":
        return f"{request.getfixturevalue('redis_url')}?prefix={unique('url')}"
    base = request.getfixturevalue("mongodb_url").rstrip("/")
    return f"{base}/?database=zstores_tests&collection={unique('url')}"


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path) -> str:
    return make_url(request.param, tmp_path, request)


def stored_keys(url: str) -> set[str]:
    """The keys a fresh handle on the URL sees, after the shared stores are closed."""
    close_shared_stores()
    try:
        store = open_store(url, mode="r")
    except StoreNotFoundError:  # Redis, MongoDB: no keys under the prefix is no store
        return set()
    with store:
        return set(store)


# -------------------------------------------------------------- registration
def test_registered_schemes_open_our_file_system():
    for scheme in PROTOCOLS:
        assert fsspec.get_filesystem_class(scheme) is StoreFileSystem, scheme


def test_fsspec_builtins_are_not_shadowed():
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.memory import MemoryFileSystem
    from fsspec.implementations.zip import ZipFileSystem

    assert fsspec.get_filesystem_class("zip") is ZipFileSystem
    assert fsspec.get_filesystem_class("memory") is MemoryFileSystem
    assert fsspec.get_filesystem_class("file") is LocalFileSystem


def test_fsspec_zip_url_still_reads_a_zip_file(tmp_path):
    path = tmp_path / "plain.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("inner/a.txt", b"from zipfile")
    with fsspec.open(f"zip://inner/a.txt::file://{path}", "rb") as handle:
        assert handle.read() == b"from zipfile"


def test_zarr_memory_url_is_still_zarrs_own():
    name = f"memory://{unique('m')}"
    array = zarr.create_array(name, shape=(3,), dtype="i2")
    array[:] = [1, 2, 3]
    assert "zstores" not in type(array.store).__module__
    assert zarr.open_array(name, mode="r")[:].tolist() == [1, 2, 3]


def test_plain_paths_stay_zarrs_local_store(tmp_path):
    array = zarr.create_array(str(tmp_path / "plain.lmdb"), shape=(2,), dtype="i1")
    assert type(array.store).__name__ == "LocalStore"
    assert os.path.isdir(tmp_path / "plain.lmdb")
    assert (tmp_path / "plain.lmdb" / "zarr.json").exists()


# --------------------------------------------------------------------- zarr
def test_zarr_open_group_create_array_and_open_array(url):
    group = zarr.open_group(url, mode="w")
    array = group.create_array("g/x", shape=(6, 4), chunks=(3, 2), dtype="f8")
    array[:] = np.arange(24.0).reshape(6, 4)
    direct = zarr.create_array(url, name="y", shape=(5,), chunks=(2,), dtype="i4")
    direct[:] = np.arange(5)

    again = zarr.open_array(url, path="g/x", mode="r")
    np.testing.assert_array_equal(again[:], np.arange(24.0).reshape(6, 4))
    assert zarr.open_array(url, path="y")[:].tolist() == [0, 1, 2, 3, 4]
    assert sorted(zarr.open_group(url, mode="r").array_keys()) == ["y"]

    fs, root = fsspec.url_to_fs(url)
    assert root == "" and type(fs.store).__name__ == STORE_CLASSES[url.split(":")[0]]
    keys = stored_keys(url)
    assert {"zarr.json", "g/x/zarr.json", "g/x/c/1/1", "y/zarr.json", "y/c/2"} <= keys


def test_zarr_mode_w_clears_only_through_the_store(url):
    zarr.create_array(url, name="old", shape=(2,), dtype="i1")[:] = 1
    zarr.open_group(url, mode="w")
    assert stored_keys(url) == {"zarr.json"}


def test_zarr_read_of_a_missing_store_creates_nothing(tmp_path):
    path = tmp_path / "absent.sqlite"
    with pytest.raises(FileNotFoundError):
        zarr.open_group(f"sqlite://{path}", mode="r")
    with pytest.raises(FileNotFoundError):
        zarr.open_array(f"lmdb://{tmp_path / 'absent.lmdb'}", mode="r")
    assert not path.exists() and not (tmp_path / "absent.lmdb").exists()


@pytest.fixture
def read_only_medium(tmp_path):
    """``(src, ro)``: a folder, and the same folder bind-mounted read-only (EROFS on writes).

    Root ignores file modes, so only a read-only mount makes a medium a
    store cannot write to, as a DVD, a read-only NFS export or a snapshot is.
    """
    import shutil
    import subprocess

    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to make a read-only bind mount")
    made = subprocess.run([mount, "--bind", str(src), str(ro)], check=False,
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"bind mount refused: {made.stderr.decode().strip()}")
    try:
        subprocess.run([mount, "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
        yield src, ro
    finally:
        close_shared_stores()
        gc.collect()  # an array xarray still holds keeps the file open
        # --lazy: detached at once even if a handle the test cannot reach is open
        subprocess.run(["umount", "--lazy", str(ro)], check=True, capture_output=True)


@pytest.mark.parametrize("backend", sorted(FILE_BACKENDS))
def test_reading_a_url_on_read_only_media(backend, read_only_medium):
    xarray = pytest.importorskip("xarray")
    src, ro = read_only_medium
    name = FILE_BACKENDS[backend]
    dataset = xarray.Dataset({"t": ("x", np.arange(6))})
    dataset.to_zarr(f"{backend}://{src / name}", mode="w", consolidated=False)
    close_shared_stores()
    (src / (name + ".zstores-reserve")).unlink(missing_ok=True)  # cannot be made on ro
    before = sorted(os.listdir(src))
    with pytest.raises(OSError, match="Read-only"):
        (ro / "probe").write_bytes(b"")  # the medium really refuses writes
    url = f"{backend}://{ro / name}"
    loaded = xarray.open_zarr(url, consolidated=False).load()
    xarray.testing.assert_identical(loaded, dataset)
    assert zarr.open_array(url, path="t", mode="r")[:].tolist() == list(range(6))
    # a write after the reads: refused, naming the store (ReadOnlyError from the
    # read-only store, or EROFS from a folder store, which opens writable there)
    with pytest.raises(OSError, match=f"^(\\[Errno 30\\] )?{STORE_CLASSES[backend]}.*[Rr]ead-only"):
        zarr.open_array(url, path="t", mode="r+")[:] = 1
    assert sorted(os.listdir(src)) == before


def files_under(folder) -> list[str]:
    """Every file below ``folder``, relative to it (lock, journal and reserve files included)."""
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def shared_store(url: str):
    """The store the URL's shared file system reads through (opening it read-only if needed)."""
    fs, _ = fsspec.url_to_fs(url)
    return fs._store("read")


@pytest.mark.parametrize("backend", sorted(FILE_BACKENDS))
def test_a_read_opens_the_store_read_only_and_leaves_no_file(backend, tmp_path):
    xarray = pytest.importorskip("xarray")
    name = FILE_BACKENDS[backend]
    url = f"{backend}://{tmp_path / name}"
    dataset = xarray.Dataset({"t": ("x", np.arange(6))})
    dataset.to_zarr(url, mode="w", consolidated=False)
    close_shared_stores()
    # What a writable open makes beside the store (SQLite's reserve, DBM's
    # writer lock file) is gone, as for a store another program wrote: a read
    # must not make it again.
    for made_by_writers in (".zstores-reserve", ".lock"):
        (tmp_path / (name + made_by_writers)).unlink(missing_ok=True)
    before = files_under(tmp_path)
    xarray.testing.assert_identical(xarray.open_zarr(url, consolidated=False).load(), dataset)
    assert zarr.open_array(url, path="t", mode="r")[:].tolist() == list(range(6))
    store = shared_store(url)
    close_shared_stores()
    assert files_under(tmp_path) == before
    assert store.read_only and store.mode == "r"


def test_a_read_beside_a_writer_holding_the_write_lock(tmp_path):
    """A DBM writer in another process holds the store's write lock; a URL read still works."""
    import subprocess
    import sys

    path = tmp_path / "locked.dbm"
    url = f"dbm://{path}"
    zarr.create_array(url, shape=(4,), dtype="i2", chunks=(2,))[:] = 7
    close_shared_stores()
    script = ("import sys; from zstores.urls import open_store\n"
              f"store = open_store({url!r}, mode='r+')\n"
              "print('holding', flush=True); sys.stdin.read(); store.close()")
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline() == "holding\n"  # the lock is taken: no race
        with pytest.raises(BlockingIOError):  # the lock is real: a second writer is refused
            open_store(url, mode="r+")
        assert zarr.open_array(url, mode="r")[:].tolist() == [7] * 4
        assert shared_store(url).read_only
        with pytest.raises(BlockingIOError):  # a write still waits for the other writer
            zarr.open_array(url, mode="r+")[:] = 1
        assert zarr.open_array(url, mode="r")[:].tolist() == [7] * 4  # reads go on
    finally:
        holder.communicate("")
    assert holder.returncode == 0


@pytest.mark.parametrize("backend", sorted(FILE_BACKENDS))
def test_a_read_then_a_write_in_one_process(backend, tmp_path):
    xarray = pytest.importorskip("xarray")
    url = f"{backend}://{tmp_path / FILE_BACKENDS[backend]}"
    xarray.Dataset({"t": ("x", np.arange(4))}).to_zarr(url, mode="w", consolidated=False)
    close_shared_stores()
    lazy = xarray.open_zarr(url, consolidated=False)  # read: opens the store read-only
    reader = zarr.open_array(url, path="t", mode="r")
    first = shared_store(url)
    assert first.read_only and reader[:].tolist() == [0, 1, 2, 3]

    zarr.open_array(url, path="t", mode="r+")[:] = 9  # the first write reopens it writable
    xarray.Dataset({"u": ("x", np.ones(4))}).to_zarr(url, mode="a", consolidated=False)
    now = shared_store(url)
    assert not now.read_only and now is not first
    assert not first.closed and first["t/zarr.json"]  # a read in flight keeps its handle
    assert reader[:].tolist() == [9] * 4 and lazy["t"].values.tolist() == [9] * 4
    assert xarray.open_zarr(url, consolidated=False)["u"].values.tolist() == [1.0] * 4
    close_shared_stores()
    assert first.closed and now.closed
    assert set(stored_keys(url)) >= {"t/c/0", "u/zarr.json"}


def test_zarr2_format_through_a_url(tmp_path):
    url = f"lmdb://{tmp_path / 'v2.lmdb'}"
    zarr.create_array(url, name="a", shape=(4,), chunks=(2,), dtype="u1", zarr_format=2)[:] = 7
    assert zarr.open_array(url, path="a", zarr_format=2)[:].tolist() == [7] * 4
    assert {"a/.zarray", "a/0", "a/1"} <= stored_keys(url)


def test_n5_through_a_url_string_is_real_n5(tmp_path):
    # n5:// reaches N5Store through fsspec: the folder holds N5 (attributes.json,
    # block headers), which tensorstore's own n5 driver reads.
    ts = pytest.importorskip("tensorstore")
    path = tmp_path / "data.n5"
    array = zarr.create_array(f"n5://{path}", name="a", shape=(5, 3), chunks=(2, 2),
                              dtype="i4", zarr_format=2, compressors=None)
    array[:] = np.arange(15).reshape(5, 3)
    assert type(array.store.fs.store).__name__ == "N5Store"
    assert (path / "a" / "attributes.json").exists() and not (path / "a" / ".zarray").exists()
    assert zarr.open_array(f"n5://{path}", path="a", mode="r")[:].tolist() == (
        np.arange(15).reshape(5, 3).tolist())
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(path / "a")}}
    # N5 lists dimensions fastest-first: tensorstore shows the transpose.
    np.testing.assert_array_equal(ts.open(spec).result().read().result(),
                                  np.arange(15).reshape(5, 3).T)


def test_zarr_awaits_our_file_system_directly(tmp_path):
    array = zarr.create_array(f"lmdb://{tmp_path / 'direct.lmdb'}", shape=(2,), dtype="i1")
    assert type(array.store.fs) is StoreFileSystem  # no AsyncFileSystemWrapper in between
    assert array.store.fs.asynchronous


def test_every_coroutine_has_its_own_synchronous_twin():
    # fsspec turns a missing twin into a wrapper that awaits the coroutine,
    # which here runs the twin: the two would wait on each other forever.
    from fsspec.spec import AbstractFileSystem

    coroutines = [name for name, value in vars(StoreFileSystem).items()
                  if name.startswith("_") and asyncio.iscoroutinefunction(value)
                  and hasattr(AbstractFileSystem, name[1:])]
    assert "_cat_file" in coroutines
    assert [name for name in coroutines if name[1:] not in vars(StoreFileSystem)] == []


# ------------------------------------------------------------------- xarray
def test_xarray_to_zarr_then_open_zarr(url):
    xarray = pytest.importorskip("xarray")
    dataset = xarray.Dataset(
        {"temperature": (("time", "site"), np.random.default_rng(0).random((8, 3)))},
        coords={"time": np.arange(8), "site": [10, 20, 30]},
        attrs={"title": "run 1"},
    )
    dataset.to_zarr(url, group="run1", mode="w", consolidated=False)
    loaded = xarray.open_zarr(url, group="run1", consolidated=False).load()
    xarray.testing.assert_identical(loaded, dataset)
    dataset.to_zarr(url, group="run2", mode="w")  # xarray's default: consolidated metadata
    xarray.testing.assert_identical(xarray.open_zarr(url, group="run2").load(), dataset)
    assert any(key.startswith("run1/temperature/") for key in stored_keys(url))


# --------------------------------------------------------------------- dask
def test_dask_to_zarr_and_from_zarr_threaded(url):
    da = pytest.importorskip("dask.array")
    import dask

    source = da.arange(40, chunks=8, dtype="i8").reshape(5, 8).rechunk((2, 4))
    with dask.config.set(scheduler="threads", num_workers=4):
        da.to_zarr(source, url, component="arr", overwrite=True)
        loaded = da.from_zarr(url, component="arr")
        np.testing.assert_array_equal(loaded.compute(), np.arange(40).reshape(5, 8))
        assert int((loaded * 2).sum().compute()) == 2 * sum(range(40))
    assert "arr/c/2/1" in stored_keys(url)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


# DBM refuses a second writer process by design (its lock): not for a cluster.
@pytest.mark.parametrize("backend", ["lmdb", "sqlite", "nested", "redis", "mongodb"])
def test_dask_distributed_workers_reopen_the_url(backend, tmp_path, request, dask_client):
    da = pytest.importorskip("dask.array")
    url = make_url(backend, tmp_path, request)
    source = da.arange(64, chunks=8, dtype="i4")
    da.to_zarr(source, url, component="arr", overwrite=True)  # the client's scheduler
    workers = dask_client.run(os.getpid)
    assert os.getpid() not in workers.values() and len(set(workers.values())) == 2
    total = da.from_zarr(url, component="arr").sum().compute()
    assert int(total) == sum(range(64))
    opened = dask_client.run(lambda: __import__(
        "zstores.adapters.fsspec", fromlist=["shared_store_urls"]).shared_store_urls())
    assert any(opened.values())  # the workers opened the URL themselves
    assert {f"arr/c/{index}" for index in range(8)} <= stored_keys(url)


# ---------------------------------------------------------- storage options
def test_storage_options_reach_the_store(tmp_path):
    path = tmp_path / "single-file.mdb"
    url = f"lmdb://{path}"
    zarr.create_array(url, shape=(3,), dtype="i1", storage_options={"subdir": False})[:] = 5
    assert path.is_file()  # subdir=False: the data file itself, no folder
    close_shared_stores()
    assert zarr.open_array(url, storage_options={"subdir": False})[:].tolist() == [5] * 3

    sqlite = f"sqlite://{tmp_path / 'tables.sqlite'}"
    zarr.create_array(sqlite, shape=(2,), dtype="i1", storage_options={"table": "run1"})[:] = 1
    close_shared_stores()
    with open_store(sqlite + "?table=run1", mode="r") as store:
        assert "zarr.json" in store
    with pytest.raises(FileNotFoundError):  # the default table was never made
        open_store(sqlite, mode="r")


def test_store_mode_r_refuses_writes(tmp_path):
    url = f"sqlite://{tmp_path / 'ro.sqlite'}"
    zarr.create_array(url, shape=(2,), dtype="i1")[:] = 3
    close_shared_stores()
    array = zarr.open_array(url, mode="a", storage_options={"store_mode": "r"})
    assert array[:].tolist() == [3, 3]
    with pytest.raises(ReadOnlyError):
        array[:] = 4
    assert zarr.open_array(url, mode="r")[:].tolist() == [3, 3]


def test_unknown_storage_option_names_it(tmp_path):
    with pytest.raises(StoreURLError, match="unknown option 'colour'.*sqlite"):
        zarr.create_array(f"sqlite://{tmp_path / 'x.sqlite'}", shape=(1,), dtype="i1",
                          storage_options={"colour": "blue"})


def test_query_options_in_the_url(tmp_path):
    url = f"sqlite://{tmp_path / 'q.sqlite'}?table=arrays"
    zarr.create_array(url, shape=(2,), dtype="i1")[:] = 9
    close_shared_stores()
    with open_store(f"sqlite://{tmp_path / 'q.sqlite'}?table=arrays", mode="r") as store:
        assert "c/0" in store


# ----------------------------------------------- one store a URL, pickling
def test_threads_share_one_store(tmp_path):
    url = f"lmdb://{tmp_path / 'shared.lmdb'}"
    stores = []

    barrier = threading.Barrier(4)

    def open_in_thread(index):
        barrier.wait()  # all four alive at once: four thread ids, four fsspec instances
        fs, _ = fsspec.url_to_fs(url, asynchronous=True)  # as zarr asks: cached per thread
        fs.pipe_file(f"k{index}", b"v")
        stores.append((fs, fs.store))

    threads = [threading.Thread(target=open_in_thread, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(fs) for fs, _ in stores}) == 4  # fsspec caches an instance per thread
    assert all(store is stores[0][1] for _, store in stores)
    assert len(stored_keys(url)) == 4


def test_pickle_rebuilds_from_the_url_and_never_clears_again(tmp_path):
    url = f"sqlite://{tmp_path / 'p.sqlite'}"
    fs = fsspec.filesystem("sqlite", url=url, store_mode="w")
    fs.pipe_file("a/b", b"1")
    copy = pickle.loads(pickle.dumps(fs))
    assert copy.url == url and copy.store_mode == "a"
    close_shared_stores()  # as in another process: the copy opens the store again
    assert copy.cat_file("a/b") == b"1"


def test_the_file_system_needs_a_url():
    with pytest.raises(TypeError, match="needs the store URL"):
        fsspec.filesystem("lmdb")


def test_repr_and_errors_hide_passwords(redis_url):
    secret = redis_url.replace("redis://", "redis://user:hunter2@")
    fs = StoreFileSystem(secret)
    assert "hunter2" not in repr(fs)


# ------------------------------------------------- the fsspec file system
@pytest.fixture
def fs(tmp_path):
    filesystem, _ = fsspec.url_to_fs(f"sqlite://{tmp_path / 'fs.sqlite'}")
    filesystem.pipe_file("g/a/0", b"0123456789")
    filesystem.pipe_file("g/b", b"bee")
    filesystem.pipe_file("top", b"t")
    return filesystem


def test_ls_info_exists(fs):
    assert fs.ls("", detail=False) == ["g", "top"]
    assert fs.ls("/", detail=False) == ["/g", "/top"]
    assert fs.ls("g", detail=True) == [
        {"name": "g/a", "size": 0, "type": "directory"},
        {"name": "g/b", "size": 3, "type": "file"},
    ]
    assert fs.ls("g/b", detail=False) == ["g/b"]
    assert fs.info("g/a/0") == {"name": "g/a/0", "size": 10, "type": "file"}
    assert fs.isdir("g") and fs.isfile("g/b") and not fs.isfile("g")
    assert fs.exists("top") and not fs.exists("nope") and fs.exists("")
    with pytest.raises(FileNotFoundError):
        fs.ls("nope")
    with pytest.raises(FileNotFoundError):
        fs.info("g/nope")


def test_cat_file_ranges(fs):
    assert fs.cat_file("g/a/0") == b"0123456789"
    assert fs.cat_file("g/a/0", start=2, end=5) == b"234"
    assert fs.cat_file("g/a/0", start=7) == b"789"
    assert fs.cat_file("g/a/0", start=-3) == b"789"
    assert fs.cat_file("g/a/0", start=-4, end=-1) == b"678"
    assert fs.cat_file("g/a/0", start=1, end=-8) == b"1"
    assert fs.cat_file("g/a/0", start=8, end=50) == b"89"
    assert fs.cat_ranges(["g/b", "nope"], [0, 0], [2, 1])[0] == b"be"
    assert isinstance(fs.cat_ranges(["nope"], [0], [1])[0], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_file("nope")


def test_find_and_walk(fs):
    assert fs.find("") == ["g/a/0", "g/b", "top"]
    assert fs.find("g", withdirs=True) == ["g/a", "g/a/0", "g/b"]
    assert fs.find("", maxdepth=1) == ["top"]
    assert fs.find("g/b") == ["g/b"]
    assert fs.find("/g") == ["/g/a/0", "/g/b"]
    assert fs.du("g") == 13


def test_rm_and_mv(fs):
    with pytest.raises(IsADirectoryError):
        fs.rm("g")
    fs.rm("g/b")
    assert not fs.exists("g/b")
    with pytest.raises(FileNotFoundError):
        fs.rm("g/b")
    fs.mv("g", "h")
    assert fs.find("") == ["h/a/0", "top"]
    fs.rm("h", recursive=True)
    assert fs.find("") == ["top"]
    fs.rm(["h", "h/a/0"], recursive=True)  # rm -rf: nothing there, nothing to do
    fs.mkdir("new/dir")
    fs.makedirs("new/dir", exist_ok=True)
    assert not fs.exists("new")


def test_zarr_clear_empties_nested_folders(url):
    # FsspecStore.clear removes each path find() lists, folders first, and
    # stops at the first FileNotFoundError: a removed folder's keys must not raise.
    zarr.create_array(url, name="a/b", shape=(4,), chunks=(2,), dtype="i1")[:] = 1
    zarr.create_array(url, name="z", shape=(2,), dtype="i1")[:] = 2
    store = FsspecStore.from_url(url)
    asyncio.run(store.clear())
    assert stored_keys(url) == set()


def test_open_files(fs):
    with fs.open("g/a/0", "rb", block_size=4) as handle:
        handle.seek(3)
        assert handle.read(4) == b"3456"
    with fs.open("w/x", "wb", block_size=5 * 2**20) as handle:
        handle.write(b"half ")
        handle.flush()
        assert not fs.exists("w/x")  # nothing stored before close
        handle.write(b"done")
    assert fs.cat_file("w/x") == b"half done"
    with fs.open("w/x", "ab") as handle:
        handle.write(b"!")
    assert fs.cat_file("w/x") == b"half done!"
    with pytest.raises(FileExistsError):
        fs.open("w/x", "xb")


def test_bad_keys_are_named(fs):
    with pytest.raises(InvalidKeyError, match="a/../b"):
        fs.pipe_file("a/../b", b"x")


# ------------------------------------------------- zarr's own store suite
class FsspecSuite(StoreTests[FsspecStore, cpu.Buffer]):
    """zarr.testing.store.StoreTests: zarr's FsspecStore over a URL string's file system."""

    store_cls = FsspecStore
    buffer_cls = cpu.Buffer
    scheme: str

    @pytest.fixture
    def store_kwargs(self, tmp_path):
        url = f"{self.scheme}://{tmp_path / unique('suite')}.{self.scheme}"
        fs, path = fsspec.url_to_fs(url, asynchronous=True)
        return {"fs": fs, "path": path}

    @pytest.fixture
    def store(self, open_kwargs):
        return asyncio.run(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs):
        return self.store_cls(**store_kwargs)

    async def set(self, store, key, value) -> None:
        store.fs.pipe_file(key, value.to_bytes())

    async def get(self, store, key):
        return self.buffer_cls.from_bytes(store.fs.cat_file(key))

    def test_store_repr(self, store) -> None:
        assert repr(store) == "<FsspecStore(StoreFileSystem, )>"

    def test_store_supports_writes(self, store) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store) -> None:
        assert store.supports_listing


for _scheme in ("lmdb", "sqlite"):
    _name = f"TestZarrSuiteThroughURL_{_scheme}"
    globals()[_name] = run_async_tests(type(_name, (FsspecSuite,), {"scheme": _scheme}))
del _scheme, _name


# --------------------------------------------------------- default engines
def test_gs_urls_default_to_the_engine_tested_against_the_emulator():
    """``gs://`` without ``via`` is gcsfs, which fake-gcs-server serves; obstore is opt-in."""
    from urllib.parse import urlencode

    from object_urls import GCS_TOKEN, new_gcs_bucket

    endpoint = os.environ.get("ZSTORES_TEST_GCS_ENDPOINT")
    if not endpoint:
        pytest.skip("ZSTORES_TEST_GCS_ENDPOINT is not set: no GCS emulator (scripts/services)")
    bucket = new_gcs_bucket(endpoint)
    query = urlencode({"endpoint_url": endpoint, "token": GCS_TOKEN})
    with open_store(f"gs://{bucket}/run1?{query}", mode="w") as store:
        assert store.via == "fsspec"
        store["a/.zgroup"] = b'{"zarr_format": 2}'
    with open_store(f"gs://{bucket}/run1?{query}", mode="r") as store:
        assert store["a/.zgroup"] == b'{"zarr_format": 2}'
    with pytest.raises(ValueError, match="invalid via .boto.: expected one of obstore, fsspec"):
        open_store(f"gs://{bucket}/run1?{query}&via=boto")
