#!/usr/bin/env python
"""Copy the figures docs/backends.md quotes from docs/benchmarks.md.

Run after recording a benchmark (``bench_stores.py --record`` or
``bench_zarr.py --record``); tests/test_docs.py checks that the two agree.

    .venv/bin/python scripts/quote_benchmarks.py
"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
STORES_COLUMN = "get / set 64 KiB (keys/s)"
ZARR_ROW = "write / warm read, 64 KiB chunks (MiB/s)"
#: bench_zarr's speed table rows (the one with a unit column) that ZARR_ROW quotes
ZARR_WRITE, ZARR_READ = "64 KiB chunks: write", "64 KiB chunks: read warm"
NOT_RECORDED = "not yet recorded"
# backends.md's names that are not bench_stores' name in lower case
BENCH_NAMES = {"Nested directory": "nested"}


def rows_of(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of every markdown table whose first header cell is ``first_header``."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if cells[0] == first_header else []
        elif header and not set(line) <= set("|-: "):
            # strict: a row whose cells do not match the header is a broken table
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def quote(backends: str, benchmarks: str) -> str:
    # bench_stores' speed table: its listing floor table starts with "backend" too
    stores = {(r["backend"], r["values"], r["op"]): r["zstores"]
              for r in rows_of(benchmarks, "backend") if "op" in r}
    # bench_zarr's speed table: its ratio and URL tables start with "figure" too
    zarr = {r["figure"]: r for r in rows_of(benchmarks, "figure") if "unit" in r}
    lines = backends.splitlines()
    header: list[str] = []
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        if STORES_COLUMN in header:
            backend = BENCH_NAMES.get(cells[0], cells[0].lower())
            cells[header.index(STORES_COLUMN)] = speeds(stores, backend)
        elif cells[0] == ZARR_ROW:
            write, read = zarr[ZARR_WRITE], zarr[ZARR_READ]
            for j, column in enumerate(header[1:], start=1):
                cells[j] = f"{write[column]} / {read[column]}"
        else:
            continue
        lines[i] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines) + "\n"


def speeds(stores: dict[tuple[str, str, str], str], backend: str) -> str:
    """"get / set" at 64 KiB; the network stores are measured at 4 KiB instead."""
    def pair(values: str) -> str | None:
        get, set_ = stores.get((backend, values, "get")), stores.get((backend, values, "set"))
        return f"{get} / {set_}" if get and set_ else None

    if (at_64k := pair("64 KiB")) is not None:
        return at_64k
    if (at_4k := pair("4 KiB")) is not None:
        return f"not measured at 64 KiB; 4 KiB values: {at_4k}"
    return NOT_RECORDED


def main() -> None:
    path = DOCS / "backends.md"
    path.write_text(quote(path.read_text(), (DOCS / "benchmarks.md").read_text()))
    print(f"updated {path}")


if __name__ == "__main__":
    main()
