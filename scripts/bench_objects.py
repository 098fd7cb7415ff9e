#!/usr/bin/env python
"""Object storage: S3Store against the other S3 stores of zarr users, on one S3 server.

Side by side on the same S3 endpoint (the moto emulator of scripts/services,
or any S3-compatible server), each in its own prefix of one bucket:

zstores       zstores.S3Store (obstore; batches on max_concurrency threads)
zarr2-fsspec  zarr-python 2.18's FSStore over s3fs (getitems = fsspec cat,
              setitems = fsspec pipe), run in ``--zarr2-python``
zarr3-fsspec  zarr-python 3's FsspecStore over s3fs
zarr3-obstore zarr-python 3's ObjectStore over obstore's S3Store
raw-obstore   obstore's blocking get/put on an obstore S3Store (single calls
              only: the floor every obstore-based store pays)

A batch on a zarr-python 3 store is what zarr itself does with many keys:
``asyncio.gather`` of the store's ``get``/``set`` calls (here unbounded, the
most a caller can ask of it).  Figures: single ``get``/``set`` in ms per call
(``--singles`` calls in a row), ``getitems``/``setitems`` of ``--keys`` values
in values per second; medians of ``--rounds`` rounds, each round running every
contender once, in a rotated order.  Ratios: zstores' speed over the fastest
peer's (batches) and over the raw client's (single calls).

    ZSTORES_TEST_S3_ENDPOINT=http://127.0.0.1:PORT scripts/bench_objects.py [--record]
    scripts/bench_objects.py --smoke    # a few keys, one round: checks it runs

A second table (``--part sequential``, or ``--part all``, the default) shows
what a batch buys: N single ``store[key]`` gets one after the other against
one ``getitems`` of the same N keys, on ``zstores.S3Store`` (1,000 values of
4 KiB), in one process per round, the two orders alternating between rounds;
wall clock and the process's CPU time (``time.process_time``, all threads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_run_options, load_average, median, missing_peers, record_section

ROOT = Path(__file__).resolve().parents[1]
KEY_ID, SECRET, REGION = "bench", "bench-secret", "us-east-1"
SIZES = {"4 KiB": 4 << 10, "1 MiB": 1 << 20}
BEGIN, END = "<!-- bench_objects:begin -->", "<!-- bench_objects:end -->"
SEQUENTIAL_BEGIN = "<!-- bench_objects_sequential:begin -->"
SEQUENTIAL_END = "<!-- bench_objects_sequential:end -->"


# --------------------------------------------------------------- contenders
class Contender:
    """One way to reach the bucket: single and batch gets and sets of whole values."""

    batches = True

    def set_one(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def get_one(self, key: str) -> bytes:
        raise NotImplementedError

    def set_many(self, items: dict[str, bytes]) -> None:
        raise NotImplementedError

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Zstores(Contender):
    def __init__(self, endpoint: str, bucket: str, prefix: str) -> None:
        from zstores.stores.objectstore import S3Store

        self.store = S3Store(f"{bucket}/{prefix}", endpoint_url=endpoint, access_key_id=KEY_ID,
                             secret_access_key=SECRET, region=REGION)
        self.set_one = self.store.__setitem__
        self.get_one = self.store.__getitem__
        self.set_many = self.store.setitems
        self.get_many = self.store.getitems

    def close(self) -> None:
        self.store.close()


class RawObstore(Contender):
    batches = False

    def __init__(self, endpoint: str, bucket: str, prefix: str) -> None:
        import obstore
        from obstore.store import S3Store

        self.obstore, self.prefix = obstore, prefix
        self.store = S3Store(bucket, endpoint=endpoint, access_key_id=KEY_ID,
                             secret_access_key=SECRET, region=REGION,
                             client_options={"allow_http": True})

    def set_one(self, key: str, value: bytes) -> None:
        self.obstore.put(self.store, f"{self.prefix}/{key}", value)

    def get_one(self, key: str) -> bytes:
        return bytes(self.obstore.get(self.store, f"{self.prefix}/{key}").bytes())


class Zarr3(Contender):
    """A zarr-python 3 store driven as zarr drives it (its own event loop)."""

    def __init__(self, store: Any) -> None:
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        self.store, self.sync, self.prototype = store, sync, default_buffer_prototype()

    def _buffer(self, value: bytes) -> Any:
        return self.prototype.buffer.from_bytes(value)

    def set_one(self, key: str, value: bytes) -> None:
        self.sync(self.store.set(key, self._buffer(value)))

    def get_one(self, key: str) -> bytes:
        return self.sync(self.store.get(key, self.prototype)).to_bytes()

    def set_many(self, items: dict[str, bytes]) -> None:
        async def every() -> None:
            await asyncio.gather(*(self.store.set(k, self._buffer(v)) for k, v in items.items()))

        self.sync(every())

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        async def every() -> list[Any]:
            return await asyncio.gather(*(self.store.get(k, self.prototype) for k in keys))

        return {k: b.to_bytes() for k, b in zip(keys, self.sync(every()), strict=True)}


def zarr3_fsspec(endpoint: str, bucket: str, prefix: str) -> Contender:
    import zarr

    return Zarr3(zarr.storage.FsspecStore.from_url(
        f"s3://{bucket}/{prefix}", storage_options={
            "key": KEY_ID, "secret": SECRET, "asynchronous": True,
            "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION}}))


def zarr3_obstore(endpoint: str, bucket: str, prefix: str) -> Contender:
    import zarr
    from obstore.store import S3Store

    return Zarr3(zarr.storage.ObjectStore(S3Store(
        bucket, prefix=prefix, endpoint=endpoint, access_key_id=KEY_ID, secret_access_key=SECRET,
        region=REGION, client_options={"allow_http": True})))


class Zarr2FSStore(Contender):
    """zarr-python 2.18's FSStore (only in --zarr2-python's interpreter)."""

    def __init__(self, endpoint: str, bucket: str, prefix: str) -> None:
        import zarr

        self.store = zarr.storage.FSStore(
            f"s3://{bucket}/{prefix}", key=KEY_ID, secret=SECRET,
            client_kwargs={"endpoint_url": endpoint, "region_name": REGION})
        self.set_one = self.store.__setitem__
        self.get_one = self.store.__getitem__
        self.set_many = self.store.setitems

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        return self.store.getitems(keys, contexts={})


LOCAL: dict[str, Callable[[str, str, str], Contender]] = {
    "zstores": Zstores, "zarr3-fsspec": zarr3_fsspec, "zarr3-obstore": zarr3_obstore,
    "raw-obstore": RawObstore,
}
CONTENDERS = ["zstores", "zarr2-fsspec", "zarr3-fsspec", "zarr3-obstore", "raw-obstore"]


# ---------------------------------------------------------------- measuring
def measure(contender: Contender, size: int, keys: int, singles: int) -> dict[str, float]:
    """Seconds of each operation (singles: per call), values checked."""
    value = os.urandom(size)
    names = [f"k/{i:05d}" for i in range(keys)]
    times: dict[str, float] = {}
    contender.set_one("warm-up", value)  # connections and credentials set up, untimed
    contender.get_one("warm-up")
    start = time.perf_counter()
    for name in names[:singles]:
        contender.set_one(name, value)
    times["set"] = (time.perf_counter() - start) / singles
    start = time.perf_counter()
    for name in names[:singles]:
        assert contender.get_one(name) == value
    times["get"] = (time.perf_counter() - start) / singles
    if contender.batches:
        items = {name: value for name in names}
        start = time.perf_counter()
        contender.set_many(items)
        times["setitems"] = time.perf_counter() - start
        start = time.perf_counter()
        got = contender.get_many(names)
        times["getitems"] = time.perf_counter() - start
        assert len(got) == keys and all(v == value for v in got.values())
    return times


def measure_sequential(store: Any, size: int, keys: int, batch_first: bool) -> dict[str, float]:
    """N sequential gets against one getitems of the same N keys: wall and CPU seconds."""
    value = os.urandom(size)
    names = [f"s/{i:05d}" for i in range(keys)]
    store.setitems({name: value for name in names})
    assert store["s/00000"] == value  # connections set up, untimed

    def sequential() -> dict[str, bytes]:
        return {name: store[name] for name in names}

    times: dict[str, float] = {}
    runs = [("getitems", lambda: store.getitems(names)), ("sequential", sequential)]
    for name, run in runs if batch_first else runs[::-1]:
        wall, cpu = time.perf_counter(), time.process_time()
        got = run()
        times[name] = time.perf_counter() - wall
        times[name + " cpu"] = time.process_time() - cpu
        assert len(got) == keys and all(v == value for v in got.values())
    return times


def run_worker(args: argparse.Namespace) -> None:
    """``--worker NAME``: one contender's measurements as JSON on stdout."""
    if args.worker == "sequential":
        contender = Zstores(args.endpoint, args.bucket, args.prefix)
        try:
            print(json.dumps(measure_sequential(contender.store, args.size, args.keys,
                                                args.singles == 1)))
        finally:
            contender.close()
        return
    make = Zarr2FSStore if args.worker == "zarr2-fsspec" else LOCAL[args.worker]
    contender = make(args.endpoint, args.bucket, args.prefix)
    try:
        print(json.dumps(measure(contender, args.size, args.keys, args.singles)), flush=True)
    finally:
        contender.close()
    if args.worker == "zarr3-obstore":
        # zarr 3's ObjectStore runs obstore's (tokio's) futures on zarr's event-loop
        # thread, and a tokio thread waking that loop while the interpreter tears down
        # aborts the process (SIGABRT, no message): 6 of 40 workers at load 4-6 with
        # zarr 3.4.2, each after printing its figures.  The peer's exit is not what is
        # measured, so its worker leaves without the teardown.  (zstores' own stores
        # exit cleanly: tests/test_cli_objects.py checks that.)
        os._exit(0)


def measure_in_process(name: str, python: str, endpoint: str, bucket: str, prefix: str,
                       size: int, keys: int, singles: int) -> dict[str, float]:
    """Each contender measures in a fresh interpreter (zarr 2 needs its own anyway)."""
    command = [python, __file__, "--worker", name, "--endpoint", endpoint, "--bucket", bucket,
               "--prefix", prefix, "--size", str(size), "--keys", str(keys),
               "--singles", str(singles)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (status {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_bucket(endpoint: str) -> str:
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/{bucket}", method="PUT")
    urllib.request.urlopen(request, timeout=30).close()
    return bucket


def empty_prefix(endpoint: str, bucket: str, prefix: str) -> None:
    """Delete a contender's objects so the emulator's memory holds one round at a time."""
    from zstores.stores.objectstore import S3Store

    with S3Store(f"{bucket}/{prefix}", endpoint_url=endpoint, access_key_id=KEY_ID,
                 secret_access_key=SECRET, region=REGION) as store:
        store.clear()


# ----------------------------------------------------------------- reporting
def sequential_table(results: dict[str, list[float]], keys: int) -> str:
    """N sequential gets against one getitems: medians and the ratio (batch speed-up)."""
    rows = [("| values | N sequential gets s | one getitems s | getitems speed-up "
             "| sequential CPU s | getitems CPU s |"),
            "|---|---:|---:|---:|---:|---:|"]
    sequential, batch = median(results["sequential"]), median(results["getitems"])
    rows.append(f"| {keys:,} x 4 KiB | {sequential:.2f} | {batch:.2f} | "
                f"{sequential / batch:.1f}x | {median(results['sequential cpu']):.2f} | "
                f"{median(results['getitems cpu']):.2f} |")
    return "\n".join(rows)


def run_sequential(args: argparse.Namespace, bucket: str) -> str:
    """The sequential-gets table's section (rounds alternate which runs first)."""
    load = load_average()
    results: dict[str, list[float]] = {}
    for round_number in range(args.rounds):
        prefix = f"sequential/{round_number}"
        # --singles carries the order to the worker: 1 = getitems first.
        times = measure_in_process("sequential", sys.executable, args.endpoint, bucket, prefix,
                                   SIZES["4 KiB"], args.keys, 1 if round_number % 2 else 0)
        for name, seconds in times.items():
            results.setdefault(name, []).append(seconds)
        empty_prefix(args.endpoint, bucket, prefix)
    end_load = load_average()
    return (
        "## Object storage: one getitems against sequential gets (scripts/bench_objects.py)\n\n"
        f"zstores.S3Store on one moto S3 server on loopback, Python "
        f"{platform.python_version()}, 2 cores shared with other jobs (load average "
        f"{load:.1f} at the start, {end_load:.1f} at the end), {time.strftime('%Y-%m-%d')}.  "
        f"{args.keys:,} values of 4 KiB read as {args.keys:,} single `store[key]` calls one "
        "after the other, and as one `getitems` of the same keys (max_concurrency 64 requests "
        "in flight); seconds of wall clock and of the process's CPU time (all threads), "
        f"median of {args.rounds} rounds, each in a fresh process, the order alternating.  "
        "moto, a Python server, bounds the speed-up: it is what a batch buys against this "
        "server, not against S3's latency, where each sequential get waits a round trip.\n\n"
        + sequential_table(results, args.keys) + "\n")


def table(results: dict[tuple[str, str], dict[str, list[float]]], names: list[str],
          keys_of: dict[str, int], singles: int) -> str:
    rows = ["| values | operation | unit | " + " | ".join(names)
            + " | zstores vs fastest peer | zstores vs raw |",
            "|---|---|---|" + "---:|" * (len(names) + 2)]
    for label in SIZES:
        for operation in ("get", "set", "getitems", "setitems"):
            batch = operation.endswith("items")
            cells, speeds = [], {}
            for name in names:
                times = results.get((label, name), {}).get(operation)
                if not times:
                    cells.append("n/a")
                    continue
                seconds = median(times)
                speeds[name] = keys_of[label] / seconds if batch else 1 / seconds
                cells.append(f"{keys_of[label] / seconds:,.0f}" if batch
                             else f"{seconds * 1000:.2f}")
            peers = [speeds[n] for n in speeds if n not in ("zstores", "raw-obstore")]
            ours = speeds.get("zstores")
            best = f"{ours / max(peers):.2f}x" if ours and peers else "n/a"
            raw = f"{ours / speeds['raw-obstore']:.2f}x" if ours and "raw-obstore" in speeds \
                else "n/a"
            what = (f"{keys_of[label]:,} x {label}" if batch else f"{singles} x {label}")
            unit = "values/s" if batch else "ms per call"
            rows.append(f"| {what} | {operation} | {unit} | " + " | ".join(cells)
                        + f" | {best} | {raw} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default=os.environ.get("ZSTORES_TEST_S3_ENDPOINT"))
    parser.add_argument("--zarr2-python", default=os.environ.get(
        "ZSTORES_ZARR2_PYTHON", str(ROOT / ".venv-zarr2" / "bin" / "python")))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1000, help="values per batch of 4 KiB")
    parser.add_argument("--big-keys", type=int, default=100, help="values per batch of 1 MiB")
    parser.add_argument("--singles", type=int, default=20, help="single calls in a row")
    add_run_options(parser, smoke="a few keys, one round", peers="zarr-python 2.18 (fsspec)")
    parser.add_argument("--part", choices=["all", "peers", "sequential"], default="all",
                        help="the peers' table, the sequential-gets table, or both")
    for hidden in ("--worker", "--bucket", "--prefix"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    if not args.endpoint:
        raise SystemExit("no S3 endpoint: pass --endpoint or set ZSTORES_TEST_S3_ENDPOINT "
                         "(scripts/services starts moto)")
    if args.smoke:
        args.rounds, args.keys, args.big_keys, args.singles = 1, 20, 4, 3
    zarr2_ok = Path(args.zarr2_python).exists() and subprocess.run(
        [args.zarr2_python, "-c", "import zarr, s3fs"], capture_output=True,
        check=False).returncode == 0
    peers = {"zarr2-fsspec": zarr2_ok}
    for module, name in (("s3fs", "zarr3-fsspec"), ("obstore", "zarr3-obstore")):
        try:
            __import__(module)
            peers[name] = True
        except ImportError:
            peers[name] = False
    missing = missing_peers(peers, args.require_peers)
    bucket = make_bucket(args.endpoint)
    if args.part in ("all", "sequential"):
        text = run_sequential(args, bucket)
        print(text)
        if args.record and not args.smoke:
            record_section(SEQUENTIAL_BEGIN, SEQUENTIAL_END, text)
    if args.part == "sequential":
        return
    names = [name for name in CONTENDERS if name not in missing]
    keys_of = {"4 KiB": args.keys, "1 MiB": args.big_keys}
    load = load_average()
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    for round_number in range(args.rounds):
        order = names[round_number % len(names):] + names[:round_number % len(names)]
        for label, size in SIZES.items():
            for name in order:
                python = args.zarr2_python if name == "zarr2-fsspec" else sys.executable
                prefix = f"{name}/{label.replace(' ', '')}"
                times = measure_in_process(name, python, args.endpoint, bucket, prefix, size,
                                           keys_of[label], args.singles)
                for operation, seconds in times.items():
                    results.setdefault((label, name), {}).setdefault(operation, []).append(
                        seconds)
                empty_prefix(args.endpoint, bucket, prefix)
        print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)
    import zarr

    text = (
        "## Object storage (scripts/bench_objects.py)\n\n"
        f"One moto S3 server on loopback (scripts/services), Python "
        f"{platform.python_version()}, zarr-python {zarr.__version__} (zarr 2: 2.18 in its own "
        f"environment), 2 cores shared with other jobs (load average {load:.1f} at the start), "
        f"{time.strftime('%Y-%m-%d')}.  Each contender runs in a fresh process, in its own "
        f"prefix of one bucket; single calls: {args.singles} in a row (ms per call, lower is "
        "better); batches: getitems/setitems, or for zarr 3's stores asyncio.gather of their "
        "get/set as zarr issues them (values per second, higher is better).  Median of "
        f"{args.rounds} rounds, a different contender first each round.  Ratios: zstores' "
        "speed over the fastest peer's and over the raw obstore client's (above 1.0: "
        "faster).  moto is the bottleneck (a Python server answering a few hundred requests "
        "a second on this machine), so these ratios say how well each client keeps it "
        "busy, not what a real S3 endpoint would give.\n\n"
        + table(results, names, keys_of, args.singles) + "\n")
    print(text)
    if args.record and not args.smoke:
        record_section(BEGIN, END, text)


if __name__ == "__main__":
    main()
