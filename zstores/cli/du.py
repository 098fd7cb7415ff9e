"""``zstores du URL [PATH]``: bytes and keys under each child of PATH, and their total."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from ..base import Store
from ..keys import RESERVED_PREFIX
from ._common import (
    add_path,
    add_progress,
    add_url,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._output import (
    EXIT_OK,
    CommandError,
    human_size,
    plural,
    print_json,
    progress_bar,
    progress_wanted,
    say,
)
from ._tree import join, key_prefix, keys_under, read_nodes

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "du", common, help="bytes and keys under each child of PATH",
        description="Show, for each child of PATH (the root by default), the bytes its "
        "values take and how many keys it holds, then the total.  Arrays, groups and other "
        "prefixes end with '/'.  Sizes are of the stored (compressed) values; any zarr "
        "format, as it only counts keys.  At the root, zstores' own records (.zstores/: "
        "an unfinished copy's marker, locks) are shown on a line of their own and left out "
        "of the total.",
        examples=["zstores du data.zip", "zstores du sqlite:///data/run1.sqlite results",
                  "zstores du data.lmdb --bytes", "zstores du data.lmdb --json"],
    )
    add_url(parser)
    add_path(parser)
    parser.add_argument("--bytes", action="store_true",
                        help="print sizes as exact byte counts instead of KiB/MiB/GiB")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_progress(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    with open_url(args.url, "r") as store:
        rows = _usage(store, path, progress_wanted(args.progress))
        own_key = bool(path) and path in store
        own_size = store.getsize(path) if own_key else 0
    if path and not rows and not own_key:
        raise CommandError(f"nothing at {path!r} in {shown(args.url)}")
    reserved = [row for row in rows if row["type"] == "reserved"]
    rows = [row for row in rows if row["type"] != "reserved"]
    total_bytes = own_size + sum(row["bytes"] for row in rows)
    total_keys = int(own_key) + sum(row["keys"] for row in rows)
    if args.json:
        document = {"path": path, "bytes": total_bytes, "keys": total_keys, "children": rows}
        if reserved:  # not data: outside the children and the totals
            document["reserved"] = {key: reserved[0][key] for key in ("path", "bytes", "keys")}
        print_json(document)
        return EXIT_OK
    size = str if args.bytes else human_size
    width = max([len(size(row["bytes"])) for row in rows + reserved]
                + [len(size(total_bytes))])
    count_width = max(len(plural(row["keys"], "key")) for row in
                      [*reserved, {"keys": total_keys}])
    for row in rows:
        name = row["name"] + ("/" if row["type"] != "key" else "")
        count = plural(row["keys"], "key")
        say(f"{size(row['bytes']).rjust(width)}  {count.ljust(count_width)}  {name}")
    count = plural(total_keys, "key")
    say(f"{size(total_bytes).rjust(width)}  {count.ljust(count_width)}  /{path} (total)")
    for row in reserved:
        count = plural(row["keys"], "key")
        say(f"{size(row['bytes']).rjust(width)}  {count.ljust(count_width)}  "
            f"{row['name']}/ (zstores' own records, not in the total)")
    return EXIT_OK


def _usage(store: Store, path: str, show: bool = False) -> list[dict[str, Any]]:
    """One row per child: name, path, type, bytes and keys (a bar per child sized if ``show``)."""
    prefix = key_prefix(store, path)
    counts: Counter[str] = Counter()
    is_key: set[str] = set()
    for key in keys_under(store, path):
        name, slash, _ = key[len(prefix):].partition("/")
        counts[name] += 1
        if not slash:
            is_key.add(name)
    names = sorted(counts)
    folders = [name for name in names if counts[name] > (name in is_key)]
    nodes = read_nodes(store, [join(path, name) for name in folders])
    kinds = {node.name: node.kind for node in nodes}
    rows = []
    # One getsize per child (a listing or a sum on most backends): the slow part.
    bar = progress_bar(show, len(names), "sizing", "child")
    for name in names:
        bar.update()
        child = join(path, name)
        below = counts[name] - (name in is_key)
        size = store.getsize(child)  # the key's size if it is one, else the prefix total
        if name in is_key and below:  # a key that is also a prefix (key/value backends)
            size += store.getsize_prefix(prefix + name)
        kind = kinds.get(name, "key") if below else "key"
        if not path and below and name == RESERVED_PREFIX.rstrip("/"):
            kind = "reserved"
        rows.append({"name": name, "path": child, "type": "prefix" if kind == "other" else kind,
                     "bytes": size, "keys": counts[name]})
    bar.close()
    return rows
