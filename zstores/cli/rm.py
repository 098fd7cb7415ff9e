"""``zstores rm URL PATH``: delete the key PATH and every key under it."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import add_path, add_url, open_url, path_argument, shown, subcommand
from ._output import EXIT_OK, CommandError, UsageError, human_size, plural, say
from ._tree import keys_under

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "rm", common, help="delete a key, or an array or group with all below it",
        description="Delete the key PATH and every key under PATH/ (an array with its "
        "chunks, a group with its members).  The root cannot be removed this way.",
        examples=["zstores rm data.zip results/old", ("zstores rm sqlite:///data/run1.sqlite "
                  "temperature/.zattrs")],
    )
    add_url(parser)
    add_path(parser, required=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    if not path:
        raise UsageError("PATH is the root; rm deletes a path inside the store, not all of it")
    with open_url(args.url, "r+") as store:
        below = keys_under(store, path)
        own_key = path in store
        if not below and not own_key:
            raise CommandError(f"nothing at {path!r} in {shown(args.url)}")
        size = store.getsize(path)  # the key's size if it is one, else the prefix total
        if own_key and below:  # a key that is also a prefix (key/value backends)
            size += store.getsize_prefix(path)
        if below:
            store.rmdir(path)
        if own_key:
            del store[path]
    say(f"removed {plural(len(below) + own_key, 'key')} ({human_size(size)}) at {path}")
    return EXIT_OK
