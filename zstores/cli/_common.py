"""Parser pieces, store opening and the thread pool the subcommands share."""

from __future__ import annotations

import argparse
import os
import signal
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, Self, TypeVar

from ..base import Store
from ..keys import RESERVED_PREFIX, normalize_storage_path
from ..metadata import MetadataError, load_json
from ..urls import open_store, redact_url
from ._completion import store_path_completer, url_completer
from ._output import UsageError

__all__ = ["INCOMPLETE_COPY", "Pool", "add_jobs", "add_json", "add_path", "add_progress",
           "add_url",
           "batches", "incomplete_copy", "open_url", "path_argument", "shown", "subcommand"]

#: The key ``zstores cp`` writes into its destination first and deletes once every key
#: is copied and read back: while it exists, the destination is an unfinished copy.
INCOMPLETE_COPY = RESERVED_PREFIX + "cp-incomplete"

T = TypeVar("T")
R = TypeVar("R")


def subcommand(commands: Any, name: str, common: argparse.ArgumentParser, *, help: str,
               description: str, examples: Sequence[str]) -> argparse.ArgumentParser:
    """Add a subcommand whose ``--help`` ends with worked examples."""
    epilog = "Examples:\n" + "\n".join(f"  {example}" for example in examples)
    description = textwrap.fill(description, width=79)
    return commands.add_parser(name, parents=[common], help=help, description=description,
                               epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_url(parser: argparse.ArgumentParser, name: str = "url", what: str = "the store") -> None:
    action = parser.add_argument(
        name, metavar=name.upper(),
        help=f"{what}: a URL (sqlite:///d.sqlite, redis://host/0 ...) or a path")
    action.completer = url_completer  # type: ignore[attr-defined]  # argcomplete's protocol


def add_path(parser: argparse.ArgumentParser, required: bool = False,
             store: str = "url") -> None:
    """PATH inside the store of the argument ``store`` (completed from that store)."""
    if required:
        action = parser.add_argument("path", metavar="PATH",
                                     help="a path inside the store (e.g. a/b)")
    else:
        action = parser.add_argument("path", metavar="PATH", nargs="?", default="",
                                     help="a path inside the store (default: the root)")
    action.completer = store_path_completer(store)  # type: ignore[attr-defined]


def add_json(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--json``: the report as one JSON document on stdout, exact (no escaping)."""
    parser.add_argument("--json", action="store_true",
                        help="print JSON for scripts" + (f" ({what})" if what else ""))


def add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=_jobs, default=min(8, (os.cpu_count() or 1) * 2),
                        metavar="N", help="threads working at once (default: %(default)s)")


def add_progress(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--progress", action="store_true", default=None,
                       help="show progress bars on stderr even when it is not a terminal")
    group.add_argument("--no-progress", dest="progress", action="store_false",
                       help="never show progress bars (default: shown on a terminal)")


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def path_argument(text: str | None) -> str:
    """The PATH argument, normalized; a ``.`` or ``..`` segment is a usage error."""
    try:
        return normalize_storage_path(text)
    except ValueError as error:
        raise UsageError(f"bad PATH: {error}") from None


def open_url(url: str, mode: str) -> Store:
    """Open a store for a subcommand; errors keep the URL's password hidden."""
    return open_store(url, mode=mode)


def incomplete_copy(store: Store) -> str | None:
    """What an unfinished ``zstores cp`` into ``store`` left as its marker, or ``None``.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> incomplete_copy(store) is None
    True
    >>> store[INCOMPLETE_COPY] = b'{"src": "a.zip", "path": ""}'
    >>> incomplete_copy(store)  # doctest: +ELLIPSIS
    "an unfinished copy: `zstores cp 'a.zip'` into this store was interrupted or failed; ..."
    """
    try:
        raw = store[INCOMPLETE_COPY]
    except (KeyError, ValueError):  # ValueError: a backend that cannot hold the key
        return None
    try:
        record = load_json(raw)
        source = f"{record['src']!r}" + (f" {record['path']!r}" if record.get("path") else "")
    except (MetadataError, KeyError, TypeError):
        source = "SRC"
    return (f"an unfinished copy: `zstores cp {source}` into this store was interrupted or "
            "failed; run it again to finish it")


def shown(url: str) -> str:
    """The URL as messages show it (no password)."""
    return redact_url(url)


class Pool:
    """Threads running one function over many items, results in completion order.

    At most ``2 * jobs`` items are in flight, so memory stays bounded however
    many there are.  Leaving the ``with`` block (normally, by an error or by
    Ctrl-C) sets ``stop``, cancels what has not started and waits for what
    has: a task is never torn off halfway.  After Ctrl-C, further Ctrl-C are
    ignored, so the stores are closed cleanly before the command exits.

    Examples
    --------
    >>> with Pool(jobs=2) as pool:
    ...     sorted(pool.map(lambda n: n * n, range(5)))
    [0, 1, 4, 9, 16]
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.stop = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="zstores")

    def map(self, function: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        pending: set[Future[R]] = set()
        source = iter(items)
        pending.update(self._executor.submit(function, item)
                       for item in islice(source, 2 * self.jobs))
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                result = future.result()
                for item in islice(source, 1):
                    pending.add(self._executor.submit(function, item))
                yield result

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.stop.set()
        if kind is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
            # The command is ending: let the tasks in flight finish and the stores
            # close (a zip archive is complete only once closed) whatever is pressed.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._executor.shutdown(wait=True, cancel_futures=True)


def batches(items: Sequence[T], size: int) -> Iterator[list[T]]:
    """``items`` in consecutive lists of at most ``size``.

    Examples
    --------
    >>> list(batches([1, 2, 3, 4, 5], 2))
    [[1, 2], [3, 4], [5]]
    """
    for start in range(0, len(items), size):
        yield list(items[start:start + size])
