"""``zstores migrate URL``: upgrade a Zarr spec v1 array at the root to spec v2."""

from __future__ import annotations

import argparse
from typing import Any

from ..hierarchy import migrate_1to2
from ._common import add_url, open_url, shown, subcommand
from ._meta import ARRAY_V2
from ._output import EXIT_OK, CommandError

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "migrate", common, help="upgrade a spec v1 array to spec v2",
        description="Convert the Zarr storage specification v1 array at the root of the "
        "store to spec v2: 'meta' becomes '.zarray' (its compression a numcodecs compressor) "
        "and 'attrs' becomes '.zattrs'; chunks stay as they are.  A store already in v2 is "
        "left alone.",
        examples=["zstores migrate old-array/", "zstores migrate zip:///data/v1.zip"],
    )
    add_url(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_url(args.url, "r+") as store:
        if "meta" not in store:
            if ARRAY_V2 in store:
                print(f"{shown(args.url)} already holds a spec v2 array; nothing to do")
                return EXIT_OK
            raise CommandError(f"no spec v1 array in {shown(args.url)}: there is no 'meta' "
                               "key at the root")
        had_attrs = "attrs" in store
        migrate_1to2(store)
    moved = "meta -> .zarray" + (", attrs -> .zattrs" if had_attrs else "")
    print(f"migrated {shown(args.url)} to spec v2: {moved}")
    return EXIT_OK
