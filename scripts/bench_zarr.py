#!/usr/bin/env python
"""zarr-python 3 through ``zstores.zarr_store`` beside the stores users would pick instead.

The peers: zarr-python's own LocalStore (the anchor), zarr-sqlite (the Zarr v3
SQLite store) and icechunk (a local-filesystem repository), each measured when
installed (``scripts/setup-env`` puts them in ``.venv-zarr-latest``, whose
newest zarr-python they need; run this script there).  Ours: Directory, LMDB,
SQLite, and SQLite with ``synchronous=FULL`` once SQLiteStore offers it.

Figures, each the median of ``--rounds`` rounds (every implementation once per
round, a different one first and in another order each round, so background
load and what the one before left behind hit them alike; the disk synced
between implementations),
on arrays of ``--size`` bytes (default 256 MiB, uint8) in three cases: 4 MiB
and 64 KiB chunks without compression, and 1 MiB chunks of low-entropy bytes
with zstd.  Each implementation runs each phase in a fresh process:

* write: create the array, write it, close the store (icechunk: commit), timed;
* read: after dropping the page cache (``bench_common.drop_cold``: the whole
  cache as root), each array whole, cold then warm, into an existing array
  whose pages are already touched (allocating the output costs a page fault
  per page, on this VM often more than the read itself, alike for every
  store); and ``list_dir`` of the 64 KiB case's chunk folder;
* random: after another drop, chunks one by one in a seeded random order,
  cold then warm;
* raw keys: ``--keys`` values of 64 KiB set and got one ``await`` after
  another, 64 at a time (``asyncio.gather``), and with ``get_sync``/``set_sync``.

Ratios pair each of ours with the peer the targets name (above 1.0: ours is
faster).  A last table shows what URL strings cost: an array opened and
written, then opened and read, by the URL string itself (which zarr hands to
fsspec and zstores' ``StoreFileSystem``) against ``zarr_store(url)``.
Each round's figures go to stderr, to judge the spread behind a median.

    .venv-zarr-latest/bin/python scripts/bench_zarr.py --rounds 1   # a quick look
    .venv-zarr-latest/bin/python scripts/bench_zarr.py --record     # and write docs/benchmarks.md
    .venv-zarr-latest/bin/python scripts/bench_zarr.py --smoke      # seconds: that it still runs
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import zarr
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from zstores.adapters import zarr_store
from zstores.adapters.fsspec import close_shared_stores

from bench_common import (
    add_run_options,
    drop_cold,
    drop_page_cache,
    load_average,
    missing_peers,
    ratio,
    record_section,
)

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN = "<!-- bench_zarr:begin -->"
MARK_END = "<!-- bench_zarr:end -->"
#: Backends whose URL strings are measured against zarr_store(url): scheme, file ending.
URL_IMPLS = {"LMDB": ("lmdb", "lmdb"), "SQLite": ("sqlite", "sqlite")}
URL_WAYS = ("zarr_store", "URL string")
CHUNK_COUNTS = (64, 4096)
RAW_VALUE = 64 << 10
GATHER_BATCH = 64


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*(|B|KiB|MiB|GiB)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected e.g. 1GiB, 256MiB, 1048576")
    unit = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[match.group(2)]
    return int(match.group(1)) * unit


def size_label(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


class Span(NamedTuple):
    """How long one timed call took: wall-clock seconds, and CPU seconds of this process.

    CPU time counts every thread of the process (``time.process_time``) and no
    waiting (for the disk, for a core other jobs hold): on a loaded machine it
    says what the work cost where wall time says mostly how busy the machine was.
    """

    wall: float
    cpu: float


def timed(function: Callable[..., Any], *args: Any) -> tuple[Span, Any]:
    """How long ``function(*args)`` took, and what it returned."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return Span(time.perf_counter() - start, time.process_time() - cpu), result


#: Prefix of the figure names that hold speeds by CPU time (amount per CPU second).
CPU = "cpu|"


def put(figures: dict[str, float], figure: str, amount: float, spans: list[Span]) -> None:
    """``figure``'s speed by wall time and (``CPU + figure``) by CPU time: medians of ``spans``."""
    figures[figure] = amount / statistics.median(span.wall for span in spans)
    figures[CPU + figure] = amount / max(statistics.median(span.cpu for span in spans), 1e-9)


# ------------------------------------------------------------------ stores
#: Our stores, through zarr_store(url); "SQLite FULL" joins when SQLiteStore takes synchronous=.
OURS = {
    "Directory": "file://{folder}/dir",
    "LMDB": "lmdb://{folder}/data.lmdb",
    "SQLite": "sqlite://{folder}/data.sqlite",
    "SQLite FULL": "sqlite://{folder}/data.sqlite?synchronous=FULL",
}
#: The peers: zarr's LocalStore (the anchor), zarr-sqlite and icechunk (local storage).
PEERS = ("LocalStore", "zarr-sqlite", "icechunk")
#: Ratio columns: (ours, theirs), as the issue's targets pair them.
PAIRS = (("Directory", "LocalStore"), ("Directory", "icechunk"), ("LMDB", "LocalStore"),
         ("SQLite", "LocalStore"), ("SQLite", "zarr-sqlite"), ("SQLite FULL", "zarr-sqlite"))
#: Array cases: name -> (chunk bytes, compressed?).
CASES = {"4 MiB chunks": (4 << 20, False), "64 KiB chunks": (64 << 10, False),
         "1 MiB chunks, zstd": (1 << 20, True)}
#: Left out of the raw-key figures: icechunk (writes mean nothing before a commit)
#: and zarr-sqlite (its connection stays bound to the event loop it first ran on,
#: and these figures run each in a fresh ``asyncio.run``).
NO_RAW_KEYS = ("icechunk", "zarr-sqlite")
#: Random chunk reads: at most this many chunks, in a seeded random order.
RANDOM_CHUNKS = 256


def peer_installed(name: str) -> bool:
    import importlib.util

    module = {"zarr-sqlite": "zarr_sqlite", "icechunk": "icechunk"}.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def sqlite_takes_synchronous() -> bool:
    """Whether our SQLiteStore offers ``synchronous=`` (then FULL is measured too)."""
    import inspect

    from zstores.stores.sqlite import SQLiteStore

    return "synchronous" in inspect.signature(SQLiteStore).parameters


def available_impls() -> list[str]:
    names = ["LocalStore", "Directory", "LMDB", "SQLite"]
    if sqlite_takes_synchronous():
        names.append("SQLite FULL")
    return names + [name for name in PEERS[1:] if peer_installed(name)]


def open_for(name: str, folder: Path, write: bool) -> tuple[Any, Callable[[], None]]:
    """A zarr store of implementation ``name`` in ``folder``, and what ends its use.

    Writing, the end is the commit (icechunk) or the close (every other store),
    timed with the writes: the data is then where a reader in another process finds it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if name in OURS:
        store = zarr_store(OURS[name].format(folder=folder), mode="w" if write else "r")
        return store, store.close
    if name == "LocalStore":
        store = LocalStore(folder / "local", read_only=not write)
        return store, store.close
    if name == "zarr-sqlite":
        from zarr_sqlite import SQLiteStore

        store = SQLiteStore(folder / "zarr-sqlite.sqlite", read_only=not write)
        return store, store.close
    import icechunk

    storage = icechunk.local_filesystem_storage(str(folder / "icechunk"))
    if write:
        session = icechunk.Repository.create(storage).writable_session("main")
        return session.store, lambda: session.commit("bench_zarr") and None
    session = icechunk.Repository.open(storage).readonly_session(branch="main")
    return session.store, lambda: None


# ------------------------------------------------------------------ arrays
def case_data(case: str, size: int) -> np.ndarray:
    """The array of one case: a repeating ramp, or (compressed) low-entropy random bytes."""
    if CASES[case][1]:
        return np.random.default_rng(7).integers(0, 16, size, dtype=np.uint8)
    return np.resize(np.arange(1, 252, dtype=np.uint8), size)  # no chunk equals the fill value


def case_folder(folder: Path, case: str) -> Path:
    return folder / re.sub(r"\W+", "_", case)


def write_phase(name: str, folder: Path, size: int) -> dict[str, float]:
    """Bytes per second creating, writing and committing/closing each case's array."""
    figures = {}
    for case, (chunk, compressed) in CASES.items():
        data = case_data(case, size)

        def write(case: str = case, chunk: int = chunk, compressed: bool = compressed,
                  data: np.ndarray = data) -> None:
            store, finish = open_for(name, case_folder(folder, case), write=True)
            array = zarr.create_array(store, shape=data.shape, chunks=(chunk,), dtype=data.dtype,
                                      compressors=zarr.codecs.ZstdCodec() if compressed else None,
                                      filters=None, fill_value=0, zarr_format=3)
            array[:] = data
            finish()

        span, _ = timed(write)
        put(figures, f"{case}: write", data.nbytes, [span])
    return figures


def read_phase(name: str, folder: Path, size: int) -> dict[str, float]:
    """Whole-array reads, the first cold (the caller dropped the page cache), then warm.

    Both read into one array whose pages are touched beforehand: allocating the
    output would cost a page fault per page, alike for every store and often
    more than the read (see the module's notes).
    """
    figures = {}
    out_array = np.ones(size, dtype=np.uint8)
    for case in CASES:
        data = case_data(case, size)
        store, finish = open_for(name, case_folder(folder, case), write=False)
        reader = zarr.open_array(store, mode="r")
        out = cpu.NDBuffer.from_numpy_array(out_array)
        span, _ = timed(read_into, reader, out)
        put(figures, f"{case}: read cold", size, [span])
        check_same(store, out_array, data)
        warm = [timed(read_into, reader, out)[0] for _ in range(3)]
        put(figures, f"{case}: read warm", size, warm)
        if case == "64 KiB chunks":
            put(figures, f"{case}: list_dir of the chunks", *list_dir_spans(store))
        finish()
    return figures


def list_dir_spans(store: Any) -> tuple[int, list[Span]]:
    """Names in the chunk folder ``c`` (one per chunk), and how long listing it took, warm."""
    async def names() -> int:
        return len([name async for name in store.list_dir("c")])

    # on zarr's own event loop, as zarr's synchronous API runs everything: a store
    # may bind its connection to the loop it first ran on (zarr-sqlite does)
    count = sync(names())
    return count, [timed(sync, names())[0] for _ in range(5)]


def random_phase(name: str, folder: Path, size: int) -> dict[str, float]:
    """Chunks per second reading chunks one by one in a random order, cold then warm."""
    figures = {}
    for case, (chunk, _) in CASES.items():
        chunks = size // chunk
        count = max(1, min(RANDOM_CHUNKS, chunks // 2))
        order = np.random.default_rng(11).permutation(chunks)[:count]
        store, finish = open_for(name, case_folder(folder, case), write=False)
        reader = zarr.open_array(store, mode="r")

        def read_chunks(reader: Any = reader, order: np.ndarray = order,
                        chunk: int = chunk) -> None:
            for index in order:
                reader[int(index) * chunk:(int(index) + 1) * chunk]

        for temperature in ("cold", "warm"):
            span, _ = timed(read_chunks)
            put(figures, f"{case}: random chunks {temperature}", len(order), [span])
        finish()
    return figures


PHASES = {"write": write_phase, "read": read_phase, "random": random_phase}


def read_into(reader: Any, out: Any) -> Any:
    """Read all of ``reader`` into the existing buffer ``out`` (no fresh output array).

    A function of its arguments rather than a lambda over the loop's ``reader`` and
    ``out``, which the loop then deletes: the call cannot see another round's objects.
    """
    return reader.get_basic_selection(slice(None), out=out)


def check_same(store: Any, back: np.ndarray, data: np.ndarray) -> None:
    if not np.array_equal(back[:: 1 << 16], data[:: 1 << 16]):
        raise AssertionError(f"{store!r}: read back other data than written")


# ---------------------------------------------------------------- raw keys
def raw_figures(name: str, folder: Path, keys: int) -> dict[str, float]:
    """Keys per second for 64 KiB values: sequential awaits, gathered awaits, sync calls."""
    store, finish = open_for(name, folder / "raw", write=True)
    value = cpu.Buffer.from_bytes(np.random.default_rng(0).bytes(RAW_VALUE))
    prototype = default_buffer_prototype()
    names = [f"raw/c/{i}" for i in range(keys)]

    async def set_each() -> None:
        await store._ensure_open()
        for name in names:
            await store.set(name, value)

    async def get_each() -> None:
        for name in names:
            if await store.get(name, prototype) is None:
                raise AssertionError(name)

    async def get_gathered() -> None:
        for first in range(0, keys, GATHER_BATCH):
            batch = names[first:first + GATHER_BATCH]
            found = await asyncio.gather(*(store.get(name, prototype) for name in batch))
            if any(buffer is None for buffer in found):
                raise AssertionError("a key went missing")

    async def set_gathered() -> None:
        for first in range(0, keys, GATHER_BATCH):
            batch = names[first:first + GATHER_BATCH]
            await asyncio.gather(*(store.set(name, value) for name in batch))

    def get_sync() -> None:
        for name in names:
            store.get_sync(name, prototype=prototype)

    def set_sync() -> None:
        for name in names:
            store.set_sync(name, value)

    runs = {
        "set 64 KiB, awaited one by one": (asyncio.run, set_each),
        "get 64 KiB, awaited one by one": (asyncio.run, get_each),
        f"set 64 KiB, {GATHER_BATCH} gathered": (asyncio.run, set_gathered),
        f"get 64 KiB, {GATHER_BATCH} gathered": (asyncio.run, get_gathered),
        "set 64 KiB, set_sync": (set_sync,),
        "get 64 KiB, get_sync": (get_sync,),
    }
    figures = {}
    for figure, (function, *coroutine) in runs.items():
        span, _ = timed(function, *(make() for make in coroutine))
        put(figures, figure, keys, [span])
    finish()
    shutil.rmtree(folder / "raw", ignore_errors=True)
    return figures


# ------------------------------------------------------------- URL strings
def url_figures(impl: str, folder: Path, data: np.ndarray) -> dict[str, float]:
    """Bytes per second opening + writing, then opening + reading, by URL string and zarr_store."""
    scheme, ending = URL_IMPLS[impl]
    for way in URL_WAYS:  # untimed: imports and thread pools are ready before the first figure
        url = f"{scheme}://{folder}/warm_{way.replace(' ', '_')}.{ending}"
        target = url if way == "URL string" else zarr_store(url, mode="w")
        warm = zarr.create_array(target, shape=(64,), chunks=(8,), dtype=data.dtype, zarr_format=3)
        warm[:] = data[:64]
        release(warm)
        source = url if way == "URL string" else zarr_store(url, mode="r")
        release(zarr.open_array(source, mode="r"))
    figures = {}
    for count in CHUNK_COUNTS:
        chunk = data.size // count
        for way in URL_WAYS:
            url = f"{scheme}://{folder}/{way.replace(' ', '_')}{count}.{ending}"

            def target(mode: str, url: str = url, way: str = way) -> Any:
                return url if way == "URL string" else zarr_store(url, mode=mode)

            def write(target: Callable[[str], Any] = target, chunk: int = chunk) -> Any:
                array = zarr.create_array(target("w"), shape=data.shape, chunks=(chunk,),
                                          dtype=data.dtype, compressors=None, filters=None,
                                          fill_value=0, zarr_format=3)
                array[:] = data
                return array

            def read(target: Callable[[str], Any] = target) -> Any:
                array = zarr.open_array(target("r"), mode="r")
                return array, array[:]

            span, written = timed(write)
            figures[f"open + write {count} chunks|{way}"] = data.nbytes / span.wall
            release(written)
            span, (reader, back) = timed(read)
            figures[f"open + read {count} chunks|{way}"] = data.nbytes / span.wall
            check_same(url, back, data)
            release(reader)
            del back
    return figures


def release(array: Any) -> None:
    """Close what opening ``array`` opened, so the next figure opens it again."""
    if hasattr(array.store, "store"):  # zarr_store's adapter: closes the store it opened
        array.store.close()
    close_shared_stores()  # URL strings: the store fsspec's file system opened


def url_table(medians: dict[tuple[str, str], float], impls: list[str]) -> str:
    lines = [
        ("URL strings against `zarr_store(url)`: MiB/s opening and writing, then opening "
         "and reading, the same array; ratios are the URL string's speed over zarr_store's."),
        "",
        "| figure | " + " | ".join(f"{impl} {way}" for impl in impls for way in URL_WAYS)
        + " | " + " | ".join(f"{impl} URL ×" for impl in impls) + " |",
        "|---|" + "---:|" * (3 * len(impls)),
    ]
    figures = list(dict.fromkeys(figure.split("|")[0] for figure, impl in medians
                                 if impl.startswith("url:")))
    for figure in figures:
        cells, ratios = [], []
        for impl in impls:
            pair = [medians.get((f"{figure}|{way}", f"url:{impl}")) for way in URL_WAYS]
            cells += ["" if speed is None else f"{speed / (1 << 20):,.0f}" for speed in pair]
            ratios.append(f"{pair[1] / pair[0]:.2f}" if None not in pair else "")
        lines.append(f"| {figure} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ driver
#: Modules an implementation imports on first use, imported before anything is timed,
#: as zarr's LocalStore is by this script's own imports: a one-off per process (and with
#: PYTHONDONTWRITEBYTECODE a compile of the source), not part of writing or reading an array.
FIRST_USE_MODULES = {"zarr-sqlite": ("zarr_sqlite",), "icechunk": ("icechunk",)}
OUR_FIRST_USE_MODULES = ("zstores.adapters.zarr3",)


def import_ahead(name: str) -> None:
    """Import what implementation ``name`` would import inside its first timed figure."""
    import importlib

    for module in OUR_FIRST_USE_MODULES if name in OURS else FIRST_USE_MODULES.get(name, ()):
        importlib.import_module(module)


def worker(args: argparse.Namespace) -> None:
    """Measure one phase of one implementation in this process; print its figures as JSON."""
    folder = Path(args.folder)
    import_ahead(args.worker.removeprefix("url:"))
    if args.worker.startswith("url:"):
        data = np.resize(np.arange(1, 252, dtype=np.uint8), args.size)
        figures = url_figures(args.worker[4:], folder, data)
    elif args.phase == "raw":
        figures = raw_figures(args.worker, folder, args.keys)
    else:
        figures = PHASES[args.phase](args.worker, folder, args.size)
    print(json.dumps(figures))


def run_phase(args: argparse.Namespace, name: str, phase: str, folder: Path
              ) -> dict[str, float]:
    """One phase of one implementation in a fresh process; its figures."""
    done = subprocess.run(
        [sys.executable, __file__, "--worker", name, "--phase", phase, "--size", str(args.size),
         "--keys", str(args.keys), "--folder", str(folder)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} ({phase}) failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def make_cold(args: argparse.Namespace, folder: Path) -> None:
    """Before a cold phase: the whole page cache dropped (root), else the store's files.

    The smoke run only drops the store's own files' pages: the test suite runs
    beside it, and every other test would start cold too.
    """
    if args.smoke:
        os.sync()
        drop_page_cache(folder)
    else:
        args.cold_how = drop_cold(folder)


def round_order(impls: list[str], round_: int) -> list[str]:
    """The order of ``impls`` in round ``round_``: a different one first, other neighbours.

    Round 0 keeps the given order; later rounds shuffle it (seeded by the round,
    so a rerun repeats it) and put ``impls[round_ % len(impls)]`` first.  A mere
    rotation would keep every implementation behind the same one in every
    round, and what the one before leaves behind (its files just deleted, pages
    still to write back) would weigh on the same implementation each time.

    Examples
    --------
    >>> round_order(["a", "b", "c", "d"], 0)
    ['a', 'b', 'c', 'd']
    >>> [order[0] for order in (round_order(["a", "b", "c", "d"], r) for r in range(4))]
    ['a', 'b', 'c', 'd']
    """
    if round_ == 0:
        return list(impls)
    first = impls[round_ % len(impls)]
    rest = [name for name in impls if name != first]
    random.Random(round_).shuffle(rest)
    return [first, *rest]


def settle() -> None:
    """Between implementations: write back what the last one left (its deleted files too).

    Outside every timing.  Without it the next implementation's writes share
    the disk with the previous one's write-back.  Deleted files cost the next
    writer too: ext4 looks past recently deleted inodes when it allocates new
    ones (``find_inode_bit``, ``recently_deleted``: 0-35% of a 64 KiB-chunk
    write's CPU time in ``perf`` profiles here, the same code from run to run),
    which a shuffled order spreads over every file-per-chunk store.
    """
    os.sync()


def measure(args: argparse.Namespace) -> dict[tuple[str, str], float]:
    """Median speed per (figure, implementation), each phase run in a fresh process."""
    samples: dict[tuple[str, str], list[float]] = {}
    names = [*args.impls, *(f"url:{impl}" for impl in args.url_impls)]
    for round_ in range(args.rounds):
        for name in round_order(args.impls, round_) + names[len(args.impls):]:
            folder = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench_zarr-"))
            try:
                figures = {}
                if name.startswith("url:"):
                    figures.update(run_phase(args, name, "url", folder))
                else:
                    for phase in ("write", "read", "random"):
                        if phase != "write":
                            make_cold(args, folder)
                        figures.update(run_phase(args, name, phase, folder))
                    if name not in NO_RAW_KEYS:
                        figures.update(run_phase(args, name, "raw", folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
                settle()
            for figure, speed in figures.items():
                samples.setdefault((figure, name), []).append(speed)
        print(f"  round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print_samples(samples, names)
    return {key: statistics.median(values) for key, values in samples.items()}


def unit_of(figure: str) -> tuple[str, float]:
    """A figure's unit and the divisor from its raw speed (bytes/s or items/s)."""
    figure = figure.removeprefix(CPU)
    if "random chunks" in figure:
        return "chunks/s", 1
    if "list_dir" in figure:
        return "names/s", 1
    if figure.startswith(("set", "get")):
        return "keys/s", 1
    return "MiB/s", 1 << 20


def print_samples(samples: dict[tuple[str, str], list[float]], impls: list[str]) -> None:
    """Every round's figure per implementation on stderr, to judge the spread."""
    figures = list(dict.fromkeys(figure for figure, _ in samples))
    for figure in figures:
        scale = unit_of(figure)[1]
        cells = [f"{name} " + "/".join(f"{speed / scale:.0f}" for speed in samples[figure, name])
                 for name in impls if (figure, name) in samples]
        label = f"{figure.removeprefix(CPU)} (by CPU time)" if figure.startswith(CPU) else figure
        print(f"  {label.replace('|', ' by ')}: " + ", ".join(cells), file=sys.stderr)


def wall_figures(medians: dict[tuple[str, str], float]) -> list[str]:
    """The figures timed by the wall clock, in the order measured (no URL-string ones)."""
    return list(dict.fromkeys(figure for figure, name in medians
                              if not name.startswith("url:") and not figure.startswith(CPU)))


def speed_table(medians: dict[tuple[str, str], float], impls: list[str]) -> list[str]:
    figures = wall_figures(medians)
    lines = ["| figure | unit | " + " | ".join(impls) + " |",
             "|---|---|" + "---:|" * len(impls)]
    for figure in figures:
        unit, scale = unit_of(figure)
        speeds = [medians.get((figure, name)) for name in impls]
        cells = ["" if speed is None else f"{speed / scale:,.0f}" for speed in speeds]
        lines.append(f"| {figure} | {unit} | " + " | ".join(cells) + " |")
    return lines


def ratio_table(medians: dict[tuple[str, str], float], impls: list[str],
                prefix: str = "") -> list[str]:
    """Our speed over each peer's, as the targets pair them (above 1.0: ours is faster).

    ``prefix`` ``CPU``: speeds by CPU time, i.e. the peer's CPU seconds over ours.
    """
    pairs = [(ours, theirs) for ours, theirs in PAIRS if ours in impls and theirs in impls]
    figures = [prefix + figure for figure in wall_figures(medians)]
    lines = ["| figure | " + " | ".join(f"{ours} / {theirs}" for ours, theirs in pairs) + " |",
             "|---|" + "---:|" * len(pairs)]
    for figure in figures:
        cells = [ratio(medians.get((figure, ours)), medians.get((figure, theirs)))
                 for ours, theirs in pairs]
        lines.append(f"| {figure.removeprefix(prefix)} | " + " | ".join(cells) + " |")
    return lines


def table(medians: dict[tuple[str, str], float], args: argparse.Namespace, load: float) -> str:
    versions = [f"zarr-python {zarr.__version__}", f"Python {platform.python_version()}"]
    for peer in ("zarr-sqlite", "icechunk"):
        if peer in args.impls:
            versions.append(f"{peer} {importlib.metadata.version(peer)}")
    durability = (
        "Durability differs: zarr-sqlite leaves SQLite's `synchronous=FULL` (WAL, an fsync at "
        "every commit); our SQLite uses `synchronous=NORMAL` in WAL mode (no corruption on a "
        "crash or power loss, but the last commits may roll back on power loss)"
        + ("; \"SQLite FULL\" is ours with `synchronous=FULL`, the same promise as zarr-sqlite's"
           if "SQLite FULL" in args.impls else
           "; a `synchronous=` option to match it is not there yet")
        + ".  The others: LocalStore and our Directory write each chunk to a temporary file "
        "and rename it, with no fsync (Directory's `fsync=True` adds one per key and folder); "
        "our LMDB commits without a flush (`sync=False`, zarr-python 2's setting) and flushes "
        "the file once at `close()`, inside the write timing (an `fdatasync`; every 4 MiB "
        "committed the store has asked the kernel to start writing, so it waits for the "
        "last few MiB)")
    lines = [
        "## zarr-python 3 through zarr_store, and its peers",
        "",
        (f"{', '.join(versions)}, {os.cpu_count()} cores shared with other jobs (load average "
         f"{load:.1f} at the start), {time.strftime('%Y-%m-%d')}.  Arrays of "
         f"{size_label(args.size)} (uint8) in three cases: 4 MiB chunks and 64 KiB chunks "
         "without compression, and 1 MiB chunks of low-entropy random bytes with zstd.  Each "
         "implementation runs each phase in a fresh process: writing (creating the array, "
         "writing it, and the close, or for icechunk the commit, inside the timing); then, "
         f"after the {args.cold_how}, reading each array whole (cold, then warm: the median of "
         "3 reads) into an existing array; then, after another drop, reading "
         f"up to {RANDOM_CHUNKS} chunks one by one in a random order (cold, then warm).  "
         f"\"list_dir\": zarr's `list_dir` of the 64 KiB case's chunk folder (4,096 names at "
         f"256 MiB), warm.  Raw keys: {args.keys:,} values of 64 KiB set and got through the "
         "zarr Store API (not icechunk, whose writes mean nothing before a commit, nor "
         "zarr-sqlite, which hangs when its connection is used from a second event loop).  "
         f"Median of {args.rounds} rounds; each round a different implementation first and the "
         "others shuffled, the disk synced (`sync`) between implementations."),
        "",
        durability + ".",
        "",
        *speed_table(medians, args.impls),
        "",
        ("Ratios: our speed over the peer's (above 1.0: ours is faster; within 0.90-1.10 "
         "counts as even)."),
        "",
        *ratio_table(medians, args.impls),
        "",
        ("CPU time: the same ratios by the CPU seconds each process spent (all its threads; "
         "waiting for the disk or for a core not counted), which other jobs on the machine "
         "sway far less than the wall clock: above 1.0, ours spent less CPU on the figure.  "
         "Cold reads and durable writes wait for the disk, which only the table above shows."),
        "",
        *ratio_table(medians, args.impls, CPU),
    ]
    if args.url_impls:
        lines += ["", url_table(medians, args.url_impls)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=parse_size, default=256 << 20,
                        help="array size (default 256MiB)")
    parser.add_argument("--keys", type=int, default=4000,
                        help="raw keys per figure (default 4000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; the median is shown (default 3)")
    parser.add_argument("--impls", nargs="+", choices=[*OURS, *PEERS],
                        help="implementations (default: every one installed)")
    parser.add_argument("--url-impls", nargs="*", default=list(URL_IMPLS), choices=list(URL_IMPLS),
                        help="backends whose URL strings are measured (none: skip that table)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the stores live")
    add_run_options(parser, smoke="tiny arrays, few keys, one round",
                    peers="zarr-sqlite or icechunk")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=[*PHASES, "raw", "url"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.smoke:
        if args.record:
            parser.error("--smoke figures are not worth recording")
        args.size, args.keys, args.rounds = 4 << 20, 64, 1
        args.url_impls = args.url_impls[:1]
    if args.size % (max(CHUNK_COUNTS) * 16) or args.size % (4 << 20):
        parser.error("--size must be a multiple of 4 MiB")
    missing_peers({peer: peer_installed(peer) for peer in PEERS}, args.require_peers)
    if args.impls is None:
        args.impls = available_impls()
    elif "LocalStore" not in args.impls:
        args.impls = ["LocalStore", *args.impls]
    args.cold_how = "store's files' pages dropped" if args.smoke else "page cache dropped"
    load = load_average()
    text = table(measure(args), args, load)
    print(text)
    if args.record:
        record_section(MARK_BEGIN, MARK_END, text)


if __name__ == "__main__":
    main()
