"""What the benchmark scripts (and a few tests) share: the options every script
takes, dropping the page cache, medians and ratios, recording a section of
docs/benchmarks.md, and peers that may be missing.

The scripts run as ``python scripts/bench_x.py``, which puts ``scripts/`` on
``sys.path``; the tests find it through pytest's ``pythonpath`` setting
(pyproject.toml).

Examples
--------
>>> ratio(2.0, 1.0)
'2.00x'
>>> ratio(None, 1.0)
'n/a'
>>> speed_ratio_seconds(1.0, 2.0)
2.0
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "docs" / "benchmarks.md"
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
#: Exit status of a script asked to ``--require-peers`` when one is not installed.
PEER_MISSING = 3


# ---------------------------------------------------------------- page cache
def can_drop_all_caches() -> bool:
    """Whether this process may drop the whole machine's page cache (root)."""
    return os.access(DROP_CACHES, os.W_OK)


def drop_page_cache(path: Path | str | None = None) -> None:
    """Drop cached pages, so the next read comes from the disk (or through a FUSE daemon).

    Parameters
    ----------
    path : path-like or None
        A file: its pages (``posix_fadvise(DONTNEED)``; on a FUSE mount, the
        kernel's copy, so the next read goes to the daemon again).  A folder:
        every file under it.  None: the whole machine's page cache, dentries and
        inodes (``echo 3 > /proc/sys/vm/drop_caches`` after a ``sync``; root only),
        which is what "cold" means for a store of several files or a database
        whose file a fresh process opens.

    Raises
    ------
    PermissionError
        If ``path`` is None and this process may not write ``drop_caches``.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"x" * 4096); f.flush()
    ...     drop_page_cache(f.name)
    """
    if path is None:
        if not can_drop_all_caches():
            raise PermissionError(f"dropping the page cache needs root (writing {DROP_CACHES})")
        os.sync()  # dirty pages cannot be dropped: write them out first
        DROP_CACHES.write_text("3\n")
        return
    path = Path(path)
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def drop_cold(folder: Path | str) -> str:
    """Make ``folder``'s data cold: the whole page cache if root, else its files' pages.

    Returns how ("page cache dropped" or "files' pages dropped"), for the table's notes.
    """
    if can_drop_all_caches():
        drop_page_cache()
        return "page cache dropped"
    os.sync()
    drop_page_cache(folder)
    return "files' pages dropped"


# ---------------------------------------------------------- medians, ratios
def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the figure every table shows)."""
    return statistics.median(list(values))


def speed_ratio_seconds(ours: float, theirs: float) -> float:
    """Our speed over theirs from two durations (above 1.0: we are faster)."""
    return theirs / ours


def ratio(ours: float | None, theirs: float | None) -> str:
    """``ours / theirs`` of two speeds as a table cell, or ``n/a`` if either is missing."""
    if not ours or not theirs:
        return "n/a"
    return f"{ours / theirs:.2f}x"


def verdict(value: float, target: float = 1.0, even: float = 0.10) -> str:
    """How a ratio stands against its target: "met", "even" (within ``even``) or "not met".

    >>> verdict(1.2), verdict(0.95), verdict(0.5)
    ('met', 'even', 'not met')
    """
    if value >= target:
        return "met"
    return "even" if value >= target * (1 - even) else "not met"


# ------------------------------------------------------------------ record
def record_section(begin: str, end: str, text: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace what is between the markers ``begin`` and ``end`` in ``path`` (or append them)."""
    section = f"{begin}\n{text.rstrip()}\n{end}"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + section + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(new)
    print(f"recorded in {path}", file=sys.stderr)


# --------------------------------------------------- the code of another commit
@contextmanager
def baseline_checkout(rev: str) -> Iterator[Path]:
    """A detached git worktree of ``rev`` (this repository's), removed afterwards.

    The version-against-version scripts (``bench_fuse_versions.py``,
    ``bench_versions.py``) run the baseline's code from it, by
    ``pythonpath_env``.
    """
    folder = Path(tempfile.mkdtemp(prefix="zstores-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                    str(folder / "tree"), rev], check=True)
    try:
        yield folder / "tree"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(folder / "tree")], check=False)
        os.rmdir(folder)


def pythonpath_env(tree: Path | None) -> dict[str, str]:
    """The environment importing ``zstores``/``zfuse`` from ``tree`` (None: this checkout).

    ``PYTHONPATH`` comes before the editable install of the shared venv; a
    child that must be sure checks ``zstores.__file__`` (``bench_versions.py`` does).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree if tree is not None else ROOT)
    return env


# ------------------------------------------------------------------- peers
def missing_peers(wanted: dict[str, bool], require: bool) -> list[str]:
    """The names in ``wanted`` (name -> installed?) that are missing, said on stderr.

    With ``require`` (``--require-peers``, which the smoke test passes under
    ``ZSTORES_REQUIRE_PEERS=1``) a missing peer ends the script with status
    ``PEER_MISSING``: a run that silently left a peer out would compare nothing.
    """
    missing = [name for name, present in wanted.items() if not present]
    if missing:
        print(f"peer missing: {', '.join(missing)} (see scripts/setup-env)", file=sys.stderr)
        if require:
            raise SystemExit(PEER_MISSING)
    return missing


def load_average() -> float:
    """The one-minute load average, printed with each table (the machine is shared)."""
    return os.getloadavg()[0]


# ---------------------------------------------------------------- options
def add_run_options(parser: argparse.ArgumentParser, *, smoke: str,
                    peers: str | None) -> None:
    """Add ``--record``, ``--smoke`` and ``--require-peers``, which every bench script takes.

    ``smoke`` says what a smoke run does; ``peers`` names the peers that
    ``--require-peers`` requires (None: the script has none, and takes the
    option only because the smoke test passes it to every script).

    Examples
    --------
    >>> parser = argparse.ArgumentParser()
    >>> add_run_options(parser, smoke="one round", peers="ratarmount")
    >>> vars(parser.parse_args(["--smoke", "--require-peers"]))
    {'record': False, 'smoke': True, 'require_peers': True}
    """
    parser.add_argument("--record", action="store_true",
                        help="write the table to docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help=f"{smoke}: that it all still runs")
    parser.add_argument(
        "--require-peers", action="store_true",
        help=f"fail (status {PEER_MISSING}) when {peers} is missing" if peers else
        "accepted for the smoke tests' sake: this script has no peers")
