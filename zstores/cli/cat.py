"""``zstores cat URL KEY``: the value of one key, or the metadata document of a node.

To a pipe or a file the bytes go out exactly as stored.  On a terminal
text is shown with every control character escaped (a value cannot move
the cursor or forge a line), and binary data is refused: redirect it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..base import Store
from ..keys import prefix_of
from ..metadata import NODE_NAMES, MetadataError, load_json
from ._common import add_json, add_path, add_url, open_url, path_argument, shown, subcommand
from ._output import EXIT_OK, CommandError, human_size, print_json, say

__all__ = ["add_parser", "run", "value_of"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "cat", common, help="print a key's value or a node's metadata document",
        description="Write the value of the key PATH to standard output, byte for byte.  "
        "PATH may also be an array or group: its metadata document is printed (.zarray or "
        ".zgroup for Zarr format 2, zarr.json for format 3).  On a terminal, text is shown "
        "with control characters escaped and binary values (chunks) are refused: redirect "
        "them to a file or a pipe.  --json parses the value as JSON and prints it indented.",
        examples=["zstores cat data.zip temperature/.zarray",
                  "zstores cat sqlite:///data.sqlite temperature",
                  "zstores cat data.lmdb temperature/0.0 > chunk.bin",
                  "zstores cat data.zip zarr.json --json"],
    )
    add_url(parser)
    add_path(parser, required=True)
    add_json(parser, "the value parsed as JSON, indented")
    parser.set_defaults(run=run)


def value_of(store: Store, path: str, url: str) -> tuple[str, bytes]:
    """``(key, value)``: the key PATH, else the metadata document of the node at PATH.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store, path="g")
    >>> value_of(store, "g", "memory://")
    ('g/.zgroup', b'{\\n    "zarr_format": 2\\n}')
    """
    value = store.get(path) if path else None  # the root is no key: its document
    if value is not None:
        return path, bytes(value)
    for name in NODE_NAMES:
        key = prefix_of(path) + name
        value = store.get(key)
        if value is not None:
            return key, bytes(value)
    raise CommandError(f"no key and no array or group at {path or '/'!r} in {shown(url)}")


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)  # "" or "/": the root node's document
    with open_url(args.url, "r") as store:
        key, value = value_of(store, path, args.url)
    if args.json:
        try:
            print_json(load_json(value))
        except MetadataError as error:
            raise CommandError(f"{key}: {error}") from None
        return EXIT_OK
    if not sys.stdout.isatty():
        sys.stdout.flush()
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()
        return EXIT_OK
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError(f"{key} holds {human_size(len(value))} of binary data, not shown "
                           "on a terminal; redirect it: zstores cat URL KEY > FILE") from None
    for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        say(line)
    return EXIT_OK


