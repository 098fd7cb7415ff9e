# PYTHON_ARGCOMPLETE_OK: argcomplete's global completion looks for this mark
"""The ``zfuse`` command: mount a store URL as a folder, and unmount it.

::

    zfuse mount URL|- MOUNTPOINT [--read-only | --snapshot] [--foreground] [--allow-other]
                [--attr-timeout S] [-o FUSE_OPTION ...] [--log-file PATH]
    zfuse unmount MOUNTPOINT [--lazy]
    zfuse list [--json]
    zfuse --version

mfusepy (the extra ``zstores[fuse]``) is needed to mount, not for ``--help``,
``--version``, ``list`` or ``unmount``: without it ``mount`` says in one line
which extra to install.

By default ``mount`` starts a daemon and returns once the mount answers.  The
daemon is forked before anything else happens (forking a process that
already runs threads can hang it, and stores and libfuse start threads), then
opens the store and mounts; until the mount answers, whatever it prints and
its verdict travel back to the waiting command through a pipe, so every
failure is reported by the command that was typed, with a non-zero exit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Any

from zstores.cli._completion import complete, directory_completer, url_completer
from zstores.cli._output import say, visible, warnings_as_lines
from zstores.cli._parsing import Parser

from . import registry
from ._libfuse import require_mfusepy
from .mount import MountError, check_mountpoint, mount, raise_read_ahead, unmount
from .options import parse_fuse_options

__all__ = ["main"]

_READY = b"\x00zfuse-ready\n"
_START_TIMEOUT = 120.0
_LOG_FORMAT = "%(asctime)s zfuse[%(process)d] %(levelname)s %(message)s"


class _Failure(Exception):
    """A one-line reason to stop with exit status 1."""


_FORMAT = argparse.RawDescriptionHelpFormatter

_MAIN_EXAMPLES = """\
examples:
  zfuse mount sqlite:///data/run1.sqlite /mnt/run1        # in the background
  zfuse mount --read-only data.zip /mnt/archive           # a plain path works too
  zfuse list                                              # what is mounted, by whom
  zfuse unmount /mnt/run1

Run 'zfuse COMMAND --help' for a command's options.  Mounting needs mfusepy:
pip install 'zstores[fuse]'.
"""

_MOUNT_EXAMPLES = """\
examples:
  zfuse mount lmdb:///data/run1.lmdb /mnt/run1
  zfuse mount --read-only -o kernel_cache zip:///data/run1.zip /mnt/run1
  zfuse mount --snapshot sqlite:///data/live.sqlite /mnt/frozen   # one version, read-only
  zfuse mount --foreground --log-file zfuse.log redis://127.0.0.1:6379/0 /mnt/r
  zfuse mount - /mnt/run1 < url.txt     # a URL with a password: kept out of ps
"""

_UNMOUNT_EXAMPLES = """\
examples:
  zfuse unmount /mnt/run1
  zfuse unmount --lazy /mnt/run1     # busy: detach now, release when files close
"""

_LIST_EXAMPLES = """\
examples:
  zfuse list
  zfuse list --json | python -m json.tool
"""


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked (it may load libfuse)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """``zfuse X, libfuse M.N``, or what is missing for mounting.

    Examples
    --------
    >>> version_text().startswith("zfuse ")
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("zstores")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from zstores import __version__ as ours
    try:
        from ._libfuse import libfuse_version

        major, minor = libfuse_version()
        fuse = f"libfuse {major}.{minor}"
    except ModuleNotFoundError as error:
        fuse = "mfusepy not installed: pip install 'zstores[fuse]'" if error.name == "mfusepy" \
            else f"libfuse not usable: {error}"
    except (ImportError, OSError, AttributeError, ValueError) as error:
        fuse = f"libfuse not usable: {str(error).splitlines()[0] if str(error) else error!r}"
    return f"zfuse {ours}, {fuse}"


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="zfuse", description="Show a zstores store as a folder (FUSE).",
        epilog=_MAIN_EXAMPLES, formatter_class=_FORMAT,
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="show the versions of zfuse and libfuse, and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)

    mount_cmd = commands.add_parser(
        "mount", help="mount a store URL at an empty directory",
        description="Mount a store (file://, zip://, lmdb://, sqlite://, redis:// ... "
        "or a plain path) at MOUNTPOINT.  Goes to the background once the mount answers "
        "unless --foreground is given.",
        epilog=_MOUNT_EXAMPLES, formatter_class=_FORMAT,
    )
    url = mount_cmd.add_argument("url", metavar="URL",
                           help="the store URL, or a path; '-' reads it from standard input "
                           "(a URL with a password or key on the command line shows to every "
                           "user of the machine in ps, for the daemon's whole life)")
    url.completer = url_completer  # type: ignore[attr-defined]  # argcomplete's protocol
    mountpoint = mount_cmd.add_argument("mountpoint", metavar="MOUNTPOINT",
                                        help="an existing empty directory")
    mountpoint.completer = directory_completer  # type: ignore[attr-defined]
    mount_cmd.add_argument("--read-only", action="store_true",
                           help="open the store read-only and refuse every change (EROFS)")
    mount_cmd.add_argument("--create", action="store_true",
                           help="make the store if there is none at URL (a file, folder, "
                           "archive or database); without it, a store that does not exist "
                           "is refused, so that a mistyped path creates nothing")
    mount_cmd.add_argument("--snapshot", action="store_true",
                           help="serve one version of the store (a snapshot taken at mount) "
                           "for the mount's life, read-only, while writers go on; LMDB, "
                           "SQLite and other stores that can take snapshots")
    mount_cmd.add_argument("--foreground", action="store_true",
                           help="stay attached; Ctrl-C or SIGTERM unmounts")
    mount_cmd.add_argument("--allow-other", action="store_true",
                           help="let other users see the mount")
    mount_cmd.add_argument("--attr-timeout", type=_seconds, default=1.0, metavar="S",
                           help="seconds metadata may be cached (default 1); changes made "
                           "to the store by others show after at most this long")
    mount_cmd.add_argument("-o", dest="fuse_options", action="append", default=[],
                           metavar="FUSE_OPTION", help="a libfuse option (name or name=value); "
                           "may be repeated or comma-separated")
    mount_cmd.add_argument("--log-file", metavar="PATH",
                           help="append the daemon's log (failed operations) to PATH")

    unmount_cmd = commands.add_parser("unmount", help="unmount a zfuse mount",
                                      description="Unmount MOUNTPOINT (also after the "
                                      "daemon died) and wait for the daemon to close the store.",
                                      epilog=_UNMOUNT_EXAMPLES, formatter_class=_FORMAT)
    mounted = unmount_cmd.add_argument("mountpoint", metavar="MOUNTPOINT")
    mounted.completer = _mounted  # type: ignore[attr-defined]
    unmount_cmd.add_argument("--lazy", action="store_true",
                             help="detach now even if busy; released when the last file closes")

    list_cmd = commands.add_parser(
        "list", help="list the zfuse mounts on this machine",
        description="List every zfuse mount: mount point, daemon pid and store URL "
        "(passwords shown as ***).  A mount whose daemon has exited shows as 'daemon gone': "
        "clear it with zfuse unmount.",
        epilog=_LIST_EXAMPLES, formatter_class=_FORMAT,
    )
    list_cmd.add_argument("--json", action="store_true",
                          help="print a JSON list of {mountpoint, url, pid, read_only, status}")
    return parser


def _mounted(prefix: str, **_: Any) -> list[str]:
    """The mount points of zfuse mounts (what ``zfuse unmount`` can take)."""
    return [info.mountpoint for info in registry.mounts() if info.mountpoint.startswith(prefix)]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, not {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zfuse`` command; return its exit status."""
    parser = _parser()
    complete(parser)  # a shell asking for completions is answered here (and exits)
    args = parser.parse_args(argv)
    try:
        with warnings_as_lines("zfuse"):
            if args.command == "unmount":
                unmount(args.mountpoint, lazy=args.lazy)
                return 0
            if args.command == "list":
                return _list(args.json)
            return _mount(args)
    except (_Failure, MountError) as error:
        say(f"zfuse: error: {error}", file=sys.stderr)
        return 1


# ------------------------------------------------------------------ list
def _list(as_json: bool) -> int:
    found = registry.mounts()
    if as_json:
        print(json.dumps([info.as_dict() for info in found], indent=2))
        return 0
    if not found:
        print("no zfuse mounts")
        return 0
    rows = [("MOUNTPOINT", "PID", "MODE", "STORE")]
    for info in found:
        mode = "?" if info.read_only is None else ("ro" if info.read_only else "rw")
        store = info.url or "(unknown)"
        if info.status != "running":
            store += f"  [{info.status}: zfuse unmount {info.mountpoint}]"
        rows.append((info.mountpoint, "-" if info.pid is None else str(info.pid), mode, store))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        say("  ".join(cells) + "  " + row[3])
    return 0


# ------------------------------------------------------------------ mount
def _mount(args: argparse.Namespace) -> int:
    _check_fuse()  # first: without mfusepy nothing else matters
    if args.url == "-":
        args.url = _url_from_stdin()
    mountpoint = check_mountpoint(args.mountpoint)
    args.label = _redact(_absolute(args.url))  # what zfuse list shows, from any folder
    if args.log_file:
        args.log_file = os.path.abspath(args.log_file)  # the daemon changes to /
    extra = parse_fuse_options(args.fuse_options)
    if args.foreground:
        _configure_logging(args.log_file)
        store = _open(args.url, args.read_only or args.snapshot, args.create)
        try:
            _serve(args, store, mountpoint, extra, on_ready=lambda: say(
                f"zfuse: {_redact(args.url)} mounted at {mountpoint}; Ctrl-C unmounts",
                file=sys.stderr), fsname=f"zfuse-{os.getpid()}")
        finally:
            store.close()
        return 0
    pid = _start_daemon(args, mountpoint, extra)
    say(f"zfuse: {_redact(args.url)} mounted at {mountpoint} (daemon pid {pid}); "
          f"unmount with: zfuse unmount {mountpoint}")
    return 0


def _url_from_stdin() -> str:
    """``zfuse mount -``: the URL is the first line of standard input.

    The daemon is a fork of this command, so its command line (world-readable
    in /proc/PID/cmdline for as long as the mount lasts) shows ``-``, never a
    password or an object store's key.
    """
    url = sys.stdin.readline().strip()
    if not url:
        raise _Failure("URL '-': no store URL on standard input (one line: the URL)")
    return url


def _check_fuse() -> None:
    try:
        require_mfusepy()  # loads libfuse
    except ModuleNotFoundError as error:
        if error.name != "mfusepy":
            raise _Failure(f"FUSE is not available: {error}") from None
        raise _Failure(str(error)) from None
    except (ImportError, OSError, AttributeError) as error:
        raise _Failure(f"FUSE is not available: {error}") from None
    if not os.path.exists("/dev/fuse"):
        raise _Failure("FUSE is not available: /dev/fuse is missing (load the fuse module)")


def _redact(url: str) -> str:
    try:
        from zstores.urls import redact_url
    except ImportError:
        return url
    return redact_url(url)


def _open(url: str, read_only: bool, create: bool = False) -> Any:
    from zstores.errors import StoreNotFoundError
    from zstores.urls import is_read_only_url, open_store

    try:
        # A store that can only be read (http://) is mounted read-only without --read-only.
        read_only = read_only or is_read_only_url(url)
        if read_only:
            return open_store(url, mode="r")
        return open_store(url, mode="a" if create or not _is_local(url) else "r+")
    except StoreNotFoundError:
        raise _Failure(f"no store at {_redact(url)}; use --create to make one") from None
    except Exception as error:  # noqa: BLE001 - any failure to open is reported in one line
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _Failure(f"cannot open store {_redact(url)}: {message}") from None


def _is_local(url: str) -> bool:
    """Whether ``url`` names a file or folder here, which opening in mode 'a' would create.

    Only those are refused when missing: a prefix in a server or a bucket
    is no store of its own until something is written to it.
    """
    from zstores.urls import SCHEMES

    scheme, separator, _ = str(url).partition("://")
    if not separator:
        return True  # a plain path
    spec = SCHEMES.get(scheme.lower())
    return spec is not None and spec.location == "path" and scheme.lower() not in _OBJECTS


def _absolute(url: str) -> str:
    """``url`` with a relative local path made absolute (other URLs as they are).

    Examples
    --------
    >>> import os
    >>> _absolute("run1.lmdb") == os.path.join(os.getcwd(), "run1.lmdb")
    True
    >>> _absolute("lmdb://x.lmdb?map_size=1") == f"lmdb://{os.getcwd()}/x.lmdb?map_size=1"
    True
    >>> _absolute("redis://host/0")
    'redis://host/0'
    """
    from urllib.parse import quote, unquote

    if not _is_local(url):
        return url
    scheme, separator, rest = url.partition("://")
    if not separator:
        return os.path.abspath(url)
    path, question, query = rest.partition("?")
    if path.startswith("/"):
        return url
    return f"{scheme}://{quote(os.path.abspath(unquote(path)))}{question}{query}"


_OBJECTS = ("s3", "gs", "az")  # their "path" is a bucket and prefix, not a local file


def _serve(args: argparse.Namespace, store: Any, mountpoint: str, extra: dict[str, Any],
           **options: Any) -> None:
    _one_malloc_arena()
    mount(store, mountpoint, read_only=args.read_only, foreground=True,
          attr_timeout=args.attr_timeout, allow_other=args.allow_other,
          fuse_options_extra=extra, label=getattr(args, "label", _redact(args.url)),
          snapshot=args.snapshot,
          **options)


# glibc's mallopt parameter for the most arenas (malloc.h's M_ARENA_MAX).
_M_ARENA_MAX = -8


def _one_malloc_arena() -> bool:
    """Let every thread of this process allocate from glibc's main arena; True if set.

    libfuse serves requests from up to ten threads.  By default glibc gives
    each thread an arena of its own (up to eight per core), and each keeps
    the read windows (up to 4 MiB) its thread freed: the daemon's peak RSS
    then depended on how many threads happened to read a large file (45 or
    78 MiB for one 256 MiB file; 37-39 MiB with one arena).  Nearly all
    allocations happen under the interpreter lock anyway, so one arena costs
    no contention.  Called in the zfuse command's own process only (the
    daemon, or --foreground), before libfuse starts its threads; a mount
    made by ``zfuse.mount()`` leaves its caller's allocator alone.
    """
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_ARENA_MAX, 1))
    except (OSError, AttributeError):  # not glibc: nothing to limit
        return False


def _configure_logging(log_file: str | None) -> None:
    handler: logging.Handler = (logging.FileHandler(log_file) if log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    logger = logging.getLogger("zfuse")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


# ------------------------------------------------------------------ daemon
def _start_daemon(args: argparse.Namespace, mountpoint: str, extra: dict[str, Any]) -> int:
    """Fork the daemon and wait until its mount answers; its pid."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the daemon: never returns
        os.close(read_end)
        status = 1
        try:
            status = _daemon(args, mountpoint, extra, write_end)
        except BaseException as error:  # noqa: BLE001 - reported through the pipe
            print(visible(f"{type(error).__name__}: {error}"), file=sys.stderr, flush=True)
        finally:
            os._exit(status)
    os.close(write_end)
    said = _read_until_closed(read_end, pid)
    if _READY not in said:
        _, status = os.waitpid(pid, 0)
        raise _Failure(_one_line(said, status))
    try:
        os.stat(mountpoint)  # the mount answers (the kernel waits for the daemon's INIT reply)
    except OSError as error:
        raise _Failure(f"the mount at {mountpoint} does not answer: {error.strerror}") from None
    # The daemon raises it too, once ready; doing it here as well means it is
    # in place when this command returns.
    raise_read_ahead(mountpoint)
    return pid


def _one_line(said: bytes, status: int) -> str:
    """The daemon's verdict, with what libfuse said before it (e.g. a bad -o option)."""
    lines = [line.strip() for line in said.decode(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return f"the daemon exited with status {status >> 8} before mounting"
    prefix = "zfuse: error: "
    verdicts = [line for line in lines if line.startswith(prefix)]
    verdict = (verdicts[-1] if verdicts else lines[-1]).removeprefix(prefix)
    others = [line for line in lines if not line.startswith(prefix)]
    return f"{verdict}: {'; '.join(others)}" if verdicts and others else verdict


def _read_until_closed(fd: int, pid: int) -> bytes:
    said = b""
    remaining = _START_TIMEOUT
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], remaining)
            if not ready:
                os.kill(pid, signal.SIGTERM)
                raise _Failure(f"the daemon did not mount within {_START_TIMEOUT:.0f} s")
            chunk = pipe.read(65536)
            if not chunk:
                return said
            said += chunk


def _daemon(args: argparse.Namespace, mountpoint: str, extra: dict[str, Any],
            ready_fd: int) -> int:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    # Until the mount answers, everything said (libfuse's own messages too)
    # goes to the command waiting at the other end of the pipe.
    os.dup2(ready_fd, 1)
    os.dup2(ready_fd, 2)
    _configure_logging(None)
    try:
        store = _open(args.url, args.read_only or args.snapshot, args.create)
    except _Failure as error:
        print(visible(f"zfuse: error: {error}"), file=sys.stderr, flush=True)
        return 1
    os.chdir("/")

    def ready() -> None:
        target = null
        if args.log_file:
            target = os.open(args.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(ready_fd, _READY)
        os.dup2(target, 1)
        os.dup2(target, 2)
        os.close(ready_fd)

    try:
        _serve(args, store, mountpoint, extra, on_ready=ready, fsname=f"zfuse-{os.getpid()}")
    except MountError as error:
        print(visible(f"zfuse: error: {error}"), file=sys.stderr, flush=True)
        return 1
    finally:
        store.close()
    return 0
