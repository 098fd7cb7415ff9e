"""``zstores rm URL PATH``: delete the key PATH and every key under it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..base import Store
from ..errors import ZStoresError
from ._common import (
    add_json,
    add_path,
    add_progress,
    add_url,
    batches,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._output import (
    EXIT_OK,
    CommandError,
    UsageError,
    human_size,
    plural,
    print_json,
    progress_bar,
    progress_wanted,
    say,
    visible,
)
from ._tree import keys_under

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "rm", common, help="delete a key, or an array or group with all below it",
        description="Delete the key PATH and every key under PATH/ (an array with its "
        "chunks, a group with its members).  The root cannot be removed this way.  On a "
        "terminal it first says how many keys and bytes will go and asks (--yes does not "
        "ask); elsewhere (a script, a pipe) it does not ask.  --dry-run only says.",
        examples=["zstores rm data.zip results/old", ("zstores rm sqlite:///data/run1.sqlite "
                  "temperature/.zattrs"), "zstores rm data.lmdb results/old --dry-run --json"],
    )
    add_url(parser)
    add_path(parser, required=True)
    parser.add_argument("-n", "--dry-run", action="store_true",
                        help="say how many keys and bytes would go, delete nothing")
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do not ask (on a terminal rm says what will go and asks first; "
                        "not on a terminal it never asks)")
    add_progress(parser)
    add_json(parser, "path, keys, bytes and whether they were removed")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    if not path:
        raise UsageError("PATH is the root; rm deletes a path inside the store, not all of it")
    with open_url(args.url, "r" if args.dry_run else "r+") as store:
        below = keys_under(store, path)
        own_key = path in store
        if not below and not own_key:
            raise CommandError(f"nothing at {path!r} in {shown(args.url)}")
        size = store.getsize(path)  # the key's size if it is one, else the prefix total
        if own_key and below:  # a key that is also a prefix (key/value backends)
            size += store.getsize_prefix(path)
        count = len(below) + own_key
        what = f"{plural(count, 'key')} ({human_size(size)}) at {path}"
        report = {"url": shown(args.url), "path": path, "keys": count, "bytes": size,
                  "removed": False}
        if args.dry_run:
            if args.json:
                print_json(report)
            else:
                say(f"would remove {what}; nothing removed (--dry-run)")
            return EXIT_OK
        if not args.yes and sys.stdin.isatty() and not _confirmed(what, args.url):
            raise CommandError("nothing removed")
        try:
            if below:
                _remove_below(store, path, below, progress_wanted(args.progress))
            if own_key:
                del store[path]
        except OSError as error:
            raise CommandError(_not_removed(error, path, store)) from error
    if args.json:
        print_json({**report, "removed": True})
    else:
        say(f"removed {what}")
    return EXIT_OK


#: Keys from which ``rm`` shows a progress bar (deleting them in batches);
#: fewer go in one ``rmdir``, which some backends do in one request.
PROGRESS_FROM = 1_000
_BATCH = 500


def _remove_below(store: Store, path: str, below: list[str], show: bool) -> None:
    """Delete every key under PATH: one ``rmdir``, or batches with a bar for many keys."""
    if not show or len(below) < PROGRESS_FROM:
        store.rmdir(path)
        return
    bar = progress_bar(True, len(below), "removing", "key")
    try:
        for batch in batches(below, _BATCH):
            store.delitems(batch)
            bar.update(len(batch))
        store.rmdir(path)  # what the batches left: empty folders, keys added meanwhile
    finally:
        bar.close()


def _not_removed(error: OSError, path: str, store: Store) -> str:
    """The failure naming the store and PATH, not the one file the OS names.

    A folder store deletes relative to an open folder (``unlinkat``), so the
    OS error names only the last part of a key (``'.zgroup'``, ``'0'``).
    """
    if isinstance(error, ZStoresError) or repr(store) in str(error):
        return str(error.strerror if repr(store) in str(error.strerror) else error)
    reason = error.strerror or str(error)
    if error.filename is not None and os.path.isabs(str(error.filename)):
        reason += f": {error.filename!r}"  # a whole path: worth showing
    return f"{store!r}: cannot remove {path!r}: {reason}"


def _confirmed(what: str, url: str) -> bool:
    """Ask on the terminal; only "y" or "yes" deletes."""
    sys.stderr.write(visible(f"remove {what} from {shown(url)}? [y/N] "))
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")
