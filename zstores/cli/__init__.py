# PYTHON_ARGCOMPLETE_OK: argcomplete's global completion looks for this mark
"""The ``zstores`` command: look into, copy, check and repair stores from the shell.

::

    zstores ls URL [PATH] [-r] [--json]
    zstores info URL [PATH] [--json]
    zstores attrs URL [PATH] [--json]
    zstores cat URL PATH [--json]
    zstores du URL [PATH] [--bytes] [--progress | --no-progress] [--json]
    zstores cp SRC DST [PATH] [--jobs N] [--if-exists skip|overwrite|error] [--verify]
               [--progress | --no-progress] [--json]
    zstores verify URL [PATH] [--jobs N] [--against SRC] [--progress | --no-progress] [--json]
    zstores rm URL PATH [--dry-run] [--yes] [--progress | --no-progress] [--json]
    zstores consolidate URL [--progress | --no-progress] [--json]
    zstores migrate URL [--to 2|3] [--dry-run] [--skip-broken] [--remove-v2-metadata]
                    [--progress | --no-progress] [--json]
    zstores --version

Every subcommand takes a store URL as ``zstores.open_store`` does (a plain
path picks the backend by its ending).  Exit status: 0 all well, 1 problems
found or the operation failed, 2 usage error (a mistyped name gets a "did
you mean"), 130 interrupted (Ctrl-C).  Errors and warnings are one line on
stderr; ``--debug`` adds the traceback.  Shell completion: ``_completion``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence

from . import attrs, cat, consolidate, cp, du, info, ls, migrate, rm, verify
from ._completion import complete
from ._output import (
    EXIT_INTERRUPTED,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    MESSAGE_LIMIT,
    CommandError,
    one_line,
    say,
    shortened,
    visible,
    warnings_as_lines,
)
from ._parsing import Parser

__all__ = ["main"]

_COMMANDS = (ls, info, attrs, cat, du, cp, verify, rm, consolidate, migrate)


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand that is not given --debug keeps the top-level value
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command, every subcommand included."""
    parser = Parser(
        prog="zstores",
        description="Look into, copy, check and repair Zarr stores of any zstores backend "
        "(folder, zip, dbm, lmdb, sqlite, redis, mongodb ...), chosen by URL or path.",
        epilog="Example:\n  zstores ls data.zip -r\n  zstores cp data.zip sqlite:///tmp/d.sqlite"
        "\n\nExit status: 0 ok, 1 problems found, 2 usage error, 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("--version", action="version", version=f"zstores {_version()}",
                        help="show the version of zstores and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    common = _common_options()
    for module in _COMMANDS:
        module.add_parser(commands, common)
    return parser


def _version() -> str:
    """The installed version (importlib.metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zstores")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from .. import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zstores`` command with ``argv`` (``sys.argv[1:]`` by default).

    Returns
    -------
    int
        The exit status: 0 ok, 1 problems found, 2 usage error, 130 interrupted.

    Examples
    --------
    >>> import tempfile, zstores
    >>> path = tempfile.mkdtemp()
    >>> zstores.init_array(zstores.open_store(path), shape=(4, 4), chunks=(2, 2), dtype="i2")
    >>> main(["ls", path])
    /  (4, 4) int16
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    complete(parser)  # a shell asking for completions is answered here (and exits)
    args = _parse(parser, argv)
    sigint = signal.getsignal(signal.SIGINT)  # a Ctrl-C ignores later ones; undone at the end
    try:
        with warnings_as_lines("zstores"):
            return int(args.run(args))
    except KeyboardInterrupt:
        return _fail(args, "stopped by Ctrl-C", EXIT_INTERRUPTED)
    except CommandError as error:
        return _fail(args, str(error), error.exit_code)
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as error:  # noqa: BLE001 - one line per error, not a traceback
        return _fail(args, _describe(error), _exit_code(error))
    finally:
        if threading.current_thread() is threading.main_thread() and sigint is not None:
            signal.signal(signal.SIGINT, sigint)


def _parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """The arguments, with PATH allowed after options (``cp A B --jobs 4 PATH``).

    argparse takes a command's positionals in one run, so an optional PATH
    given after an option is left over: it is taken as PATH here if the
    command has one and it was not given.
    """
    args, extra = parser.parse_known_args(argv)
    if len(extra) == 1 and not extra[0].startswith("-") and getattr(args, "path", None) == "":
        args.path = extra[0]
    elif extra:
        parser.error(parser.unrecognized(args, extra))  # exit status 2
    return args


def _describe(error: BaseException) -> str:
    if isinstance(error, KeyError) and error.args:
        return f"no key {error.args[0]!r}"
    from ..errors import ZStoresError

    text = str(error)
    if isinstance(error, ZStoresError | OSError) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _exit_code(error: BaseException) -> int:
    from ..errors import InvalidKeyError
    from ..urls import StoreURLError

    return EXIT_USAGE if isinstance(error, StoreURLError | InvalidKeyError) else EXIT_PROBLEMS


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if getattr(args, "debug", False):
        traceback.print_exc()
    label = "interrupted" if code == EXIT_INTERRUPTED else "error"
    line = visible(f"zstores {args.command}: {label}: {one_line(message)}")
    say(shortened(line, MESSAGE_LIMIT), file=sys.stderr)  # escaped first: then cut
    return code


def _stdout_closed() -> int:
    """The reader of our output went away (``zstores ls -r URL | head``): stop quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
    return EXIT_PROBLEMS
