"""What every subcommand shares: failures and exit codes, sizes, JSON, progress bars.

Exit codes: 0 when all is well, 1 when a problem was found (or an operation
failed), 2 for a usage error, 130 after Ctrl-C (SIGINT).
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "CommandError",
    "Interrupted",
    "UsageError",
    "MESSAGE_LIMIT",
    "human_size",
    "one_line",
    "shortened",
    "plural",
    "print_json",
    "print_problems",
    "StageBars",
    "progress_bar",
    "progress_wanted",
    "say",
    "visible",
    "warnings_as_lines",
]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class CommandError(Exception):
    """A one-line reason to stop with exit status 1."""

    exit_code = EXIT_PROBLEMS


class UsageError(CommandError):
    """The command line asks for something impossible (exit status 2)."""

    exit_code = EXIT_USAGE


class Interrupted(CommandError):
    """Ctrl-C stopped the command cleanly; the message says what was done."""

    exit_code = EXIT_INTERRUPTED


def one_line(text: str) -> str:
    """``text`` with its line breaks joined by ``"; "``: every error is one line.

    Examples
    --------
    >>> one_line("first\\n  second\\n")
    'first; second'
    """
    parts = [part.strip() for part in str(text).splitlines()]
    return "; ".join(part for part in parts if part)


#: The most characters of an error line: a long key is shortened in the middle.
MESSAGE_LIMIT = 299


def shortened(text: str, limit: int) -> str:
    """``text``, or its start and end joined by ``" ... "`` when longer than ``limit``.

    Examples
    --------
    >>> shortened("a" * 10 + "b" * 10, 13)
    'aaaaaa ... bb'
    >>> shortened(f"invalid key 'k/{'x' * 400}': too long", 80)
    "invalid key 'k/xxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx': too long"
    """
    if len(text) <= limit:
        return text
    # Long words first (a key, a path): the rule broken stays whole.
    text = re.sub(r"\S{49,}", lambda word: word[0][:24] + "..." + word[0][-20:], text)
    if len(text) <= limit:
        return text
    keep = limit - 5
    head = keep - keep // 3  # the start says what failed; the end often says why
    return text[:head] + " ... " + text[len(text) - (keep - head):]


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on, not show, written as an escape.

    Keys, paths and document text come from the data: a key named
    ``"x\\nno problems found"`` or holding an escape sequence must not
    forge a line of output or move the cursor.  Every character Python does
    not call printable (control characters, line and paragraph separators,
    format characters such as bidirectional overrides, unassigned code
    points) is shown as ``\\n``, ``\\x1b``, ``\\u202e`` ...; printable
    text is left as it is.  Keys hold no backslash (zstores turns it into
    ``/``), so a shown key cannot be mistaken for another.  Every line the
    commands print goes through here (``say``); ``--json`` output does not
    (JSON has its own escapes).

    Examples
    --------
    >>> print(visible("evil\\nno problems found\\x1b[2J\\u202e"))
    evil\\nno problems found\\x1b[2J\\u202e
    >>> visible("température/0.0")
    'température/0.0'
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


@contextmanager
def warnings_as_lines(prog: str) -> Iterator[None]:
    """Show every warning raised in the block as one line ``PROG: warning: MESSAGE``.

    Python's own format names the source file and line and repeats the
    line of code: noise to a user, who needs only what happened (a zip
    archive with bytes after its directory, a numcodecs notice ...).
    The message is escaped (``visible``) and cut to ``MESSAGE_LIMIT``.

    Examples
    --------
    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err), warnings_as_lines("zstores"):
    ...     warnings.warn("first\\nsecond", RuntimeWarning, stacklevel=1)
    >>> err.getvalue()
    'zstores: warning: first; second\\n'
    """
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        text = shortened(visible(f"{prog}: warning: {one_line(str(message))}"), MESSAGE_LIMIT)
        try:
            print(text, file=sys.stderr if file is None else file)
        except OSError:  # stderr gone: a warning is not worth failing for
            pass

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def say(text: str = "", *, file: Any = None) -> None:
    """Print one line of human output, every character of data in it shown (``visible``)."""
    print(visible(text), file=sys.stdout if file is None else file)


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(size: int) -> str:
    """A byte count the way people read it (powers of 1024).

    Examples
    --------
    >>> human_size(325), human_size(800_000_000)
    ('325 B', '762.9 MiB')
    """
    value = float(size)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def plural(count: int, noun: str) -> str:
    """``"1 key"``, ``"2 keys"``, with thousands separators.

    Examples
    --------
    >>> plural(1, "key"), plural(12000, "chunk")
    ('1 key', '12,000 chunks')
    """
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def print_json(document: Any) -> None:
    """Write ``document`` to stdout as indented JSON (the ``--json`` output)."""
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=_json_default)
    sys.stdout.write("\n")


def _json_default(value: Any) -> Any:
    """numpy scalars and tuples-as-arrays for the ``--json`` output."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def print_problems(lines: list[str], limit: int, breakdown: str = "", *,
                   prefix: str = "", file: Any = None) -> None:
    """Print the first ``limit`` lines, then one line saying how many were left out.

    A store of 20,000 stray keys must not bury the summary under 20,000
    lines: the rest is counted (``breakdown`` says of what kinds) and
    ``--json`` lists it all.

    Examples
    --------
    >>> print_problems([f"k{i}: stray" for i in range(5)], 2, "5 stray_key")
    k0: stray
    k1: stray
    ... and 3 more (5 stray_key in all; --json lists every one)
    """
    out = sys.stdout if file is None else file
    for line in lines[:limit]:
        say(f"{prefix}{line}", file=out)
    if len(lines) > limit:
        detail = f"{breakdown} in all; " if breakdown else ""
        print(f"{prefix}... and {len(lines) - limit:,} more ({detail}--json lists every one)",
              file=out)


class _NoBar:
    """Stands in for a tqdm bar when progress is not shown."""

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_wanted(flag: bool | None) -> bool:
    """``--progress`` (True) or ``--no-progress`` (False); by default, if stderr is a terminal."""
    return sys.stderr.isatty() if flag is None else flag


def progress_bar(wanted: bool, total: int | None, desc: str, unit: str,
                 *, position: int = 0, scale: bool = False) -> Any:
    """A tqdm bar on stderr, or a stand-in that shows nothing.

    Parameters
    ----------
    wanted : bool
        Whether to show it (see ``progress_wanted``).
    total : int or None
        The count the bar fills up to; ``None`` when unknown.
    desc, unit : str
        The label before the bar and the unit of the count.
    position : int
        The line of the bar when several are shown together.
    scale : bool
        Show the count in k/M/G (for bytes).
    """
    if not wanted:
        return _NoBar()
    from tqdm import tqdm  # imported only when a bar is shown: keeps start-up fast

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=scale,
                unit_divisor=1024 if scale else 1000, position=position,
                leave=False, file=sys.stderr, dynamic_ncols=True)


class StageBars:
    """A library job's ``progress(stage, done, total)`` shown as one bar per stage.

    The bar of a stage replaces the last one's when the stage changes; none
    is drawn unless ``wanted``.  Use as a context manager, so the last bar
    is cleared when the job ends or fails.

    Examples
    --------
    >>> with StageBars(False) as bars:
    ...     bars("listing keys", 0, None)
    ...     bars("listing keys", 10, 10)
    >>> bars.stages
    ['listing keys']
    """

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.stages: list[str] = []
        self._bar: Any = None
        self._done = 0

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if not self.stages or self.stages[-1] != stage:
            self.close()
            self.stages.append(stage)
            unit = "key" if stage.startswith("listing") else "document"
            self._bar = progress_bar(self.wanted, total, stage, unit)
            self._done = 0
        if total is not None and getattr(self._bar, "total", total) != total:
            self._bar.total = total  # a listing learns its count at the end
        self._bar.update(done - self._done)
        self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> StageBars:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
