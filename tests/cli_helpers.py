"""Running the ``zstores`` command for real, and the stores the CLI tests use."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

import zstores

#: The console script pip installed next to this interpreter, else ``python -m zstores``.
_SCRIPT = Path(sys.executable).with_name("zstores")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "zstores"]

BLOSC = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
ZLIB = numcodecs.Zlib(level=1)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.out, f"no output; exit status {self.code}, stderr: {self.err}"
        return json.loads(self.out)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def zstores_cmd(*args: str, timeout: float = 300) -> Result:
    """Run ``zstores ARGS`` in a subprocess (no terminal) and collect what it printed."""
    done = subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


def unique_name() -> str:
    return "cli" + uuid.uuid4().hex[:12]


def with_option(url: str, name: str, value: str) -> str:
    """``url`` with the query option ``name=value`` added."""
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


def file_url(kind: str, folder: Path, name: str) -> str:
    """A new store of a file-based backend under ``folder``."""
    return {
        "directory": str(folder / name),
        "nested": f"nested://{folder / name}",
        "zip": str(folder / f"{name}.zip"),
        "lmdb": f"lmdb://{folder / name}.lmdb",
        "sqlite": f"sqlite://{folder / name}.sqlite",
    }[kind]


# ------------------------------------------------------------------ samples
SAMPLE_CHUNKS = {"g/temp": 16, "counts": 2}  # chunks written (counts has 3, one missing)


def write_sample(url: str) -> dict[str, bytes]:
    """A small v2 hierarchy: a group with a blosc 2-d array, and a zlib 1-d array
    whose last chunk is missing.  Returns every key and value written."""
    with zstores.open_store(url, mode="w") as store:
        zstores.init_group(store)
        zstores.init_group(store, path="g")
        store["g/.zattrs"] = b'{"units": "K"}'
        zstores.init_array(store, shape=(20, 20), chunks=(5, 5), dtype="<f8", path="g/temp",
                           compressor=BLOSC, fill_value=0.0)
        zstores.init_array(store, shape=(10,), chunks=(4,), dtype="<i2", path="counts",
                           compressor=ZLIB, fill_value=0)
        chunks = {f"g/temp/{i}.{j}": BLOSC.encode(np.full((5, 5), 4 * i + j, dtype="<f8"))
                  for i, j in itertools.product(range(4), range(4))}
        chunks.update({f"counts/{i}": ZLIB.encode(np.arange(4, dtype="<i2") + i)
                       for i in range(2)})
        store.setitems(chunks)
        return {key: bytes(store[key]) for key in store}


def write_rows(url: str, rows: int) -> None:
    """One zlib array of ``rows`` chunks (one row of 64 float64 each): many small keys."""
    with zstores.open_store(url, mode="w") as store:
        zstores.init_array(store, shape=(rows, 64), chunks=(1, 64), dtype="<f8",
                           compressor=ZLIB, fill_value=0.0)
        for start in range(0, rows, 1000):
            store.setitems({f"{i}.0": ZLIB.encode(np.arange(64, dtype="<f8") * i)
                            for i in range(start, min(start + 1000, rows))})


def contents(url: str) -> dict[str, bytes]:
    with zstores.open_store(url, mode="r") as store:
        return {key: bytes(value) for key, value in store.getitems(list(store)).items()}


def remove_store(url: str) -> None:
    """Delete what a test left in a server store (a file store goes with tmp_path)."""
    if url.startswith(("redis://", "mongodb://")):
        with zstores.open_store(url, mode="a") as store:
            store.clear()


def environment_url(variable: str) -> str | None:
    return os.environ.get(variable) or None
