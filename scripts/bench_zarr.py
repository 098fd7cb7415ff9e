#!/usr/bin/env python
"""zarr-python 3 through ``zstores.zarr_store`` side by side with zarr's own LocalStore.

Figures, each the median of ``--rounds`` rounds (every implementation once per
round, in turn, so background load hits them alike):

* array write and read of ``--size`` bytes (default 1 GiB, uint8, no
  compression, so the store's cost shows) in 64 chunks and in 4,096 chunks,
  and the same read into an existing array (``out=``);
* raw keys: ``--keys`` values of 64 KiB set and got one ``await`` after
  another, 64 at a time (``asyncio.gather``), and with the synchronous
  ``get_sync``/``set_sync``.

Ratios are the adapter's speed over LocalStore's (above 1.0: faster).

A second table shows what URL strings cost: an array opened and written,
then opened and read, by the URL string itself (``zarr.create_array("lmdb://...")``,
which zarr hands to fsspec and zstores' ``StoreFileSystem``) against the same
URL through ``zarr_store(url)``; the ratio is the URL string's speed over
``zarr_store``'s.  Opening is part of each figure.

``array[:]`` allocates a new output array, and writing it first costs a page
fault per page, which on a virtual machine can take longer than everything
else in the read (several seconds per GiB, varying from run to run), and
equally for every store.  "into an existing array" reads into an array
whose pages are already touched, so it shows what the store itself costs.
Each round's figures go to stderr, to judge the spread behind a median.

Each
implementation runs in a fresh process per round: a long-lived process reads
large arrays several times slower after a few rounds (its heap, not the
store), which would bias whichever runs last.  The stores live in a temporary
folder on the disk of ``--dir``.

    .venv/bin/python scripts/bench_zarr.py --size 256MiB --rounds 1   # a quick look
    .venv/bin/python scripts/bench_zarr.py --record    # and write docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.storage import LocalStore

from zstores.adapters import zarr_store
from zstores.adapters.fsspec import close_shared_stores

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN = "<!-- bench_zarr:begin -->"
MARK_END = "<!-- bench_zarr:end -->"
IMPLS = {
    "LocalStore": lambda folder: LocalStore(folder / "local"),
    "Directory": lambda folder: zarr_store(f"file://{folder}/dir", mode="w"),
    "LMDB": lambda folder: zarr_store(f"lmdb://{folder}/data.lmdb", mode="w"),
    "SQLite": lambda folder: zarr_store(f"sqlite://{folder}/data.sqlite", mode="w"),
}
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


def timed(function: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Seconds ``function(*args)`` took, and what it returned."""
    gc.collect()
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


# ------------------------------------------------------------------ arrays
def array_figures(make: Callable[[Path], Any], folder: Path, data: np.ndarray) -> dict[str, float]:
    """Bytes per second writing and reading ``data`` in each chunk layout."""
    figures = {}
    for count in CHUNK_COUNTS:
        case = folder / f"a{count}"
        store = make(case)
        chunk = data.size // count
        array = zarr.create_array(store, shape=data.shape, chunks=(chunk,), dtype=data.dtype,
                                  compressors=None, filters=None, fill_value=0, zarr_format=3)
        seconds, _ = timed(array.__setitem__, slice(None), data)
        figures[f"write {count} chunks"] = data.nbytes / seconds
        reader = zarr.open_array(store, mode="r")
        seconds, back = timed(reader.__getitem__, slice(None))
        figures[f"read {count} chunks"] = data.nbytes / seconds
        check_same(store, back, data)
        back[:] = 0  # the same (touched) pages receive the next read
        out = cpu.NDBuffer.from_numpy_array(back)
        seconds, _ = timed(read_into, reader, out)
        figures[f"read {count} chunks into an existing array"] = data.nbytes / seconds
        check_same(store, back, data)
        del back, out
        store.close()
        shutil.rmtree(case, ignore_errors=True)
    return figures


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
def raw_figures(make: Callable[[Path], Any], folder: Path, keys: int) -> dict[str, float]:
    """Keys per second for 64 KiB values: sequential awaits, gathered awaits, sync calls."""
    store = make(folder / "raw")
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
        seconds, _ = timed(function, *(make() for make in coroutine))
        figures[figure] = keys / seconds
    store.close()
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

            seconds, written = timed(write)
            figures[f"open + write {count} chunks|{way}"] = data.nbytes / seconds
            release(written)
            seconds, (reader, back) = timed(read)
            figures[f"open + read {count} chunks|{way}"] = data.nbytes / seconds
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
def worker(args: argparse.Namespace) -> None:
    """Measure one implementation in this process; print its figures as JSON."""
    data = np.resize(np.arange(1, 252, dtype=np.uint8), args.size)  # no chunk equals the fill value
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench_zarr-") as workdir:
        folder = Path(workdir)
        if args.worker.startswith("url:"):
            figures = url_figures(args.worker[4:], folder, data)
        else:
            figures = {**array_figures(IMPLS[args.worker], folder, data),
                       **raw_figures(IMPLS[args.worker], folder, args.keys)}
    print(json.dumps(figures))


def measure(args: argparse.Namespace) -> dict[tuple[str, str], float]:
    """Median speed per (figure, implementation), each run in a fresh process."""
    samples: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for name in [*args.impls, *(f"url:{impl}" for impl in args.url_impls)]:
            done = subprocess.run(
                [sys.executable, __file__, "--worker", name, "--size", str(args.size),
                 "--keys", str(args.keys), "--dir", args.dir],
                capture_output=True, text=True, check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{name} failed:\n{done.stderr}")
            for figure, speed in json.loads(done.stdout.splitlines()[-1]).items():
                samples.setdefault((figure, name), []).append(speed)
        print(f"  round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print_samples(samples, [*args.impls, *(f"url:{impl}" for impl in args.url_impls)])
    return {key: statistics.median(values) for key, values in samples.items()}


def print_samples(samples: dict[tuple[str, str], list[float]], impls: list[str]) -> None:
    """Every round's figure per implementation on stderr, to judge the spread."""
    figures = list(dict.fromkeys(figure for figure, _ in samples))
    for figure in figures:
        scale = 1 if figure.startswith(("set", "get")) else 1 << 20
        if "|" in figure:  # a URL-string figure: one implementation measured two ways
            cells = [f"{name} "
                     + "/".join(f"{speed / scale:.0f}" for speed in samples[figure, name])
                     for name in impls if (figure, name) in samples]
            print(f"  {figure.replace('|', ' by ')}: " + ", ".join(cells), file=sys.stderr)
            continue
        cells = [f"{name} " + "/".join(f"{speed / scale:.0f}" for speed in samples[figure, name])
                 for name in impls if (figure, name) in samples]
        print(f"  {figure}: " + ", ".join(cells), file=sys.stderr)


def table(medians: dict[tuple[str, str], float], args: argparse.Namespace, load: float) -> str:
    impls = [name for name in args.impls if name != "LocalStore"]
    figures = list(dict.fromkeys(figure for figure, _ in medians if "|" not in figure))
    lines = [
        (f"zarr-python {zarr.__version__}, Python {platform.python_version()}, "
         f"{os.cpu_count()} cores (load average {load:.1f} at the start), "
         f"{time.strftime('%Y-%m-%d')}; array of {size_label(args.size)} (uint8, no "
         f"compression); raw keys: {args.keys} values of 64 KiB.  Median of {args.rounds} rounds; "
         "MiB/s for arrays, keys/s for raw keys; ratios are the adapter's speed over "
         "LocalStore's (above 1.0: faster)."),
        "",
        ("| figure | LocalStore | " + " | ".join(impls) + " | "
         + " | ".join(f"{n} ×" for n in impls) + " |"),
        "|---|" + "---:|" * (1 + 2 * len(impls)),
    ]
    for figure in figures:
        scale = 1 if figure.startswith(("set", "get")) else 1 << 20
        speeds = [medians.get((figure, name)) for name in ["LocalStore", *impls]]
        cells = ["" if speed is None else f"{speed / scale:,.0f}" for speed in speeds]
        base = speeds[0]
        ratios = ["" if not base or speed is None else f"{speed / base:.2f}"
                  for speed in speeds[1:]]
        lines.append(f"| {figure} | " + " | ".join(cells + ratios) + " |")
    if args.url_impls:
        lines += ["", url_table(medians, args.url_impls)]
    return "\n".join(lines)


def record(text: str) -> None:
    """Replace (or append) the section between the markers in docs/benchmarks.md."""
    path = ROOT / "docs" / "benchmarks.md"
    section = f"{MARK_BEGIN}\n## zarr-python 3 through zarr_store\n\n{text}\n{MARK_END}"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if MARK_BEGIN in old and MARK_END in old:
        head, rest = old.split(MARK_BEGIN, 1)
        new = head + section + rest.split(MARK_END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(new)
    print(f"recorded in {path}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30,
                        help="array size (default 1GiB)")
    parser.add_argument("--keys", type=int, default=4000,
                        help="raw keys per figure (default 4000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; the median is shown (default 3)")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    parser.add_argument("--url-impls", nargs="*", default=list(URL_IMPLS), choices=list(URL_IMPLS),
                        help="backends whose URL strings are measured (none: skip that table)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the stores live")
    parser.add_argument("--record", action="store_true",
                        help="write the table to docs/benchmarks.md")
    parser.add_argument("--worker", choices=[*IMPLS, *(f"url:{impl}" for impl in URL_IMPLS)],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.size % (max(CHUNK_COUNTS) * 16):
        parser.error(f"--size must be a multiple of {max(CHUNK_COUNTS) * 16} bytes")
    if "LocalStore" not in args.impls:
        args.impls = ["LocalStore", *args.impls]
    load = os.getloadavg()[0]
    text = table(measure(args), args, load)
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
