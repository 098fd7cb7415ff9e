"""The argument parser of ``zstores`` and ``zfuse``: usage errors on one line, with a guess.

A mistyped subcommand, option or choice is answered with the nearest
valid one (``difflib``), so ``zstores lss`` says ``did you mean 'ls'?``.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from ._output import EXIT_USAGE, one_line

__all__ = ["Parser", "suggestion"]

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>.*?)' \(choose from (?P<choices>.*)\)$")


def suggestion(given: str, possible: Sequence[str]) -> str | None:
    """The one of ``possible`` closest to ``given``, if any is close enough.

    Examples
    --------
    >>> suggestion("lss", ["ls", "info", "du"])
    'ls'
    >>> suggestion("--jsno", ["--json", "--jobs", "--debug"])
    '--json'
    >>> suggestion("frobnicate", ["ls", "info"]) is None
    True
    """
    found = difflib.get_close_matches(given, list(possible), n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (exit status 2) that suggest a fix.

    Examples
    --------
    >>> import contextlib, io
    >>> parser = Parser(prog="demo")
    >>> commands = parser.add_subparsers(dest="command", required=True)
    >>> listing = commands.add_parser("list")
    >>> _ = listing.add_argument("--json", action="store_true")
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     try:
    ...         parser.parse_args(["list", "--jsno"])
    ...     except SystemExit as stop:
    ...         print(stop.code)
    2
    >>> err.getvalue()
    "demo: error: unrecognized arguments: --jsno; did you mean '--json'? (see demo --help)\\n"
    """

    def error(self, message: str) -> NoReturn:
        text = one_line(message)
        matched = _INVALID_CHOICE.search(text)
        if matched:
            choices = [choice.strip().strip("'\"")
                       for choice in matched["choices"].split(",")]
            guess = suggestion(matched["given"], choices)
            if guess is not None:
                text += f"; did you mean {guess!r}?"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {text} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: Any = None) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(self.unrecognized(parsed, extra))
        return parsed

    def unrecognized(self, parsed: argparse.Namespace, extra: Sequence[str]) -> str:
        """argparse's "unrecognized arguments" message, with the nearest option named."""
        text = f"unrecognized arguments: {' '.join(extra)}"
        options = self._option_strings(parsed)
        guesses = [guess for word in extra if word.startswith("-")
                   and (guess := suggestion(word.partition("=")[0], options)) is not None]
        if guesses:
            text += "; did you mean " + " or ".join(repr(guess) for guess in guesses) + "?"
        return text

    def _option_strings(self, parsed: argparse.Namespace) -> list[str]:
        """Every option of this parser and of the subcommand ``parsed`` names."""
        options: list[str] = []
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(parsed, action.dest or "", None)
                if chosen in action.choices:
                    parsers.append(action.choices[chosen])
        for parser in parsers:
            for action in parser._actions:
                options.extend(option for option in action.option_strings
                               if option.startswith("--"))
        return options
