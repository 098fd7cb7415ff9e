"""Self-checking values and the writer/reader processes of tests/test_fuse_versions.py.

Every value says which version it is and carries a digest of itself, so a
reader can tell one whole version from a mix of two (or from another key's
bytes) by looking at the bytes alone.  Sizes change from version to version
(300 KB to 1.2 MB), so a reader cut at another version's size is caught too.

Run as a script, it is the writer: it opens the store URL given and writes
the versions asked for on standard input (one number per line, or a number
and another key, answering "ok N" once the write returned), or, with ``--free N``, writes versions
1..N back to back as fast as it can.  ``read_loop`` is the reader.
"""

from __future__ import annotations

import hashlib
import random
import sys

__all__ = ["make_value", "version_of"]

_DIGEST = 32
#: The chunk side of the array "grid": 1024 x 1024 int32, 4 MiB a chunk (more than one
#: read request of the kernel, whose largest is 1 MiB).
CHUNK = 1024


def size_of(version: int) -> int:
    """300,000 to 1,200,000 bytes, changing with every version."""
    return 300_000 + (version * 7919 % 10) * 100_000


def make_value(version: int) -> bytes:
    """Version ``version``'s value: its number, random bytes, and a SHA-256 of both."""
    body = version.to_bytes(8, "big") + random.Random(version).randbytes(
        size_of(version) - 8 - _DIGEST)
    return body + hashlib.sha256(body).digest()


def version_of(value: bytes) -> int | None:
    """The version ``value`` is, whole; None for anything else (a mix, a cut, other bytes).

    Examples
    --------
    >>> version_of(make_value(7)), version_of(make_value(7)[:-1]), version_of(b"")
    (7, None, None)
    """
    if len(value) < 8 + _DIGEST:
        return None
    body = value[:-_DIGEST]
    if hashlib.sha256(body).digest() != value[-_DIGEST:]:
        return None
    version = int.from_bytes(body[:8], "big")
    return version if len(value) == size_of(version) else None


def read_loop(path: str, reads: int) -> tuple[int, int, set[int]]:
    """Read ``path`` whole ``reads`` times: (whole reads, torn reads, versions seen)."""
    whole = torn = 0
    seen: set[int] = set()
    for _ in range(reads):
        with open(path, "rb") as f:
            version = version_of(f.read())
        if version is None:
            torn += 1
        else:
            whole += 1
            seen.add(version)
    return whole, torn, seen


def _main(argv: list[str]) -> None:
    import zstores

    url, key = argv[0], argv[1]
    with zstores.open_store(url) as store:
        if len(argv) > 3 and argv[2] == "--free":
            for version in range(1, int(argv[3]) + 1):
                store[key] = make_value(version)
            return
        for line in sys.stdin:
            version, _, other = line.strip().partition(" ")  # "N" or "N KEY"
            store[other or key] = make_value(int(version))
            print(f"ok {version}", flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])


def rewrite_chunks(url: str, rounds: int) -> None:
    """Rewrite every chunk of the array "grid" (made by ``make_grid``) ``rounds`` times.

    Round ``r`` sets each chunk (``CHUNK`` square, stored uncompressed, so a
    chunk is read in several requests) to one value, ``r * 100 + chunk number``,
    so a reader can tell a whole chunk (one value throughout) from a torn one.
    """
    import numpy as np
    import zarr

    import zstores

    with zstores.open_store(url) as store:
        grid = zarr.open_array(zstores.zarr_store(store), path="grid", mode="r+")
        for r in range(1, rounds + 1):
            data = np.empty(grid.shape, dtype=grid.dtype)
            for i in range(0, grid.shape[0], CHUNK):
                for j in range(0, grid.shape[1], CHUNK):
                    data[i:i + CHUNK, j:j + CHUNK] = r * 100 + (i // CHUNK) * 4 + j // CHUNK
            grid[...] = data


def torn_chunks(data) -> int:  # type: ignore[no-untyped-def]
    """How many chunks of ``data`` hold more than one value."""
    return sum(int(data[i:i + CHUNK, j:j + CHUNK].min() != data[i:i + CHUNK, j:j + CHUNK].max())
               for i in range(0, data.shape[0], CHUNK) for j in range(0, data.shape[1], CHUNK))
