"""``zstores attrs URL [PATH]``: the attributes of an array or group.

Zarr format 2 keeps them in ``PATH/.zattrs``, format 3 in the
``attributes`` field of ``PATH/zarr.json``; either way they are shown the
same, one per line (``--json``: the whole object, exact).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..base import Store
from ..keys import prefix_of
from ..metadata import ATTRS_V2, MetadataError, load_json
from ._common import add_json, add_path, add_url, open_url, path_argument, shown, subcommand
from ._output import EXIT_OK, CommandError, print_json, say
from ._tree import read_nodes

__all__ = ["add_parser", "attributes", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "attrs", common, help="the attributes of an array or group",
        description="Print the attributes (user metadata) of the array or group at PATH (the "
        "root by default), one 'name: value' per line, values as JSON; any Zarr format "
        "(v2 .zattrs, v3 zarr.json 'attributes').  --json prints the whole object.",
        examples=["zstores attrs data.zip", "zstores attrs sqlite:///data.sqlite temperature",
                  "zstores attrs data.lmdb temperature --json"],
    )
    add_url(parser)
    add_path(parser)
    add_json(parser, "the attributes as one object")
    parser.set_defaults(run=run)


def attributes(store: Store, path: str, url: str) -> dict[str, Any]:
    """The attributes of the node at ``path``; ``CommandError`` if there is none or they break.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store)
    >>> store[".zattrs"] = b'{"title": "run 1"}'
    >>> attributes(store, "", "memory://")
    {'title': 'run 1'}
    """
    [node] = read_nodes(store, [path])
    where = path or "/"
    if node.kind == "other" and node.zarr_format is None:
        raise CommandError(f"no array or group at {where!r} in {shown(url)}")
    if node.problem and node.meta is None:
        raise CommandError(f"{where}: unreadable {node.kind} metadata: {node.problem}")
    if node.zarr_format == 3:
        found = node.meta.get("attributes", {}) if isinstance(node.meta, dict) else {}
        key = prefix_of(path) + "zarr.json"
    else:
        key = prefix_of(path) + ATTRS_V2
        raw = store.get(key)
        try:
            found = {} if raw is None else load_json(raw)
        except MetadataError as error:
            raise CommandError(f"{key}: {error}") from None
    if not isinstance(found, dict):
        raise CommandError(f"{key}: the attributes are a {type(found).__name__}, not an object")
    return found


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    with open_url(args.url, "r") as store:
        found = attributes(store, path, args.url)
    if args.json:
        print_json(found)
    elif not found:
        say("(no attributes)")
    else:
        for name, value in found.items():
            say(f"{name}: {json.dumps(value, ensure_ascii=False)}")  # escaped by say
    return EXIT_OK
