"""Every example in the documentation runs, and the site builds without a warning.

What runs, and how (the conventions are also listed in docs/architecture.md):

- ```` ```python ```` blocks of a page (docs/*.md and README.md) run in order,
  in one namespace, in a fresh temporary working directory, in a process of
  their own (the interpreter running the tests).  A block preceded by
  ``<!-- run-with: zarr2 -->`` runs in the zarr-python 2.18 interpreter
  (``ZSTORES_ZARR2_PYTHON``) instead, with a namespace of its own, in the same
  directory, at its place in the page's order.
- ```` ```console ```` blocks are transcripts: each ``$ command`` runs with
  bash in that directory, and the lines up to the next ``$`` are its expected
  output (stdout and stderr), compared as doctest does with ``...`` standing
  for any text.  A command shown without output must succeed.
- ```` ```sh ````, ```` ```bash ```` and ```` ```shell ```` blocks run as bash
  scripts (``set -euo pipefail``) in that directory and must succeed.
- ``<!-- no-test: REASON -->`` on the line before a fence keeps that block
  from running; the reason is required.  Blocks of other languages (or none)
  never run.
- Servers and mounts are real.  The URLs ``redis://127.0.0.1:6379/0``,
  ``redis+cluster://127.0.0.1:7000/`` and ``mongodb://127.0.0.1:27017`` in a
  block are replaced by ``ZSTORES_TEST_REDIS_URL``,
  ``ZSTORES_TEST_REDIS_CLUSTER_URL`` and ``ZSTORES_TEST_MONGODB_URL``; a page that
  needs one of them, or FUSE (it mentions ``zfuse``), is skipped with the
  reason when it is missing, or fails under ``ZSTORES_REQUIRE_PEERS=1``.
- Object storage is the suite's emulators (pages only, see ``OBJECT_SERVICES``):
  ``s3://bucket/`` becomes a new bucket on the S3 emulator
  (``ZSTORES_TEST_S3_ENDPOINT``), its credentials and endpoint in AWS's
  environment variables, where the pages tell readers to keep them;
  ``gs://bucket/`` a new bucket on the GCS emulator, whose endpoint
  (``ZSTORES_TEST_GCS_ENDPOINT``) replaces ``http://127.0.0.1:4443``;
  ``https://example.org/data/`` becomes a new folder of the HTTP server
  (``ZSTORES_TEST_HTTP_URL``), and ``/srv/www/data/``, the folder a page
  publishes through that server, the same folder on disk
  (``ZSTORES_TEST_HTTP_DIR``).

The doctest ``Examples`` of every module of ``zstores`` and ``zfuse`` run too,
with the same server URLs substituted.  An example marked ``+SKIP`` runs when
what it needs (a server, FUSE) is here; one that nothing can run fails the
test.  Finally ``mkdocs build --strict`` builds the site into a temporary
folder, so a broken link, a page left out of the navigation or a docstring
mkdocstrings cannot render fails the suite.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import re
import select
import subprocess
import sys
import textwrap
import tokenize
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import zstores

from conftest import missing_peer
from fuse_helpers import require_fuse, zfuse_mounts

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]

#: Seconds one block may take before the page fails (a hung mount, a dead server).
BLOCK_TIMEOUT = 300

#: The server URLs examples are written with, and the variables naming the test servers.
SERVERS = {
    "redis": ("redis://127.0.0.1:6379/0", "ZSTORES_TEST_REDIS_URL"),
    "redis-cluster": ("redis+cluster://127.0.0.1:7000/", "ZSTORES_TEST_REDIS_CLUSTER_URL"),
    "mongodb": ("mongodb://127.0.0.1:27017", "ZSTORES_TEST_MONGODB_URL"),
}

#: The object-storage URLs pages are written with -> the service they need.
OBJECT_SERVICES = {"s3://bucket/": "s3", "gs://bucket/": "gcs",
                   "https://example.org/data/": "http"}

pytestmark = pytest.mark.timeout(900)


# ------------------------------------------------------------ reading pages
@dataclass
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the first line of code
    language: str
    code: str
    run_with: str = "python"  # or "zarr2"
    no_test: str | None = None  # the reason it does not run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_NO_TEST = re.compile(r"<!--\s*no-test:\s*(?P<reason>\S.*?)\s*-->")
_RUN_WITH = re.compile(r"<!--\s*run-with:\s*(?P<name>[\w-]+)\s*-->")
_MARKER = re.compile(r"<!--\s*(no-test|run-with)\b")


def read_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the markers on the lines before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        info = opening["info"].strip()
        language = info.split()[0].lower() if info else ""
        end = index + 1
        while end < len(lines) and not (
            lines[end].strip().startswith(fence) and lines[end].strip().strip(fence[0]) == ""
        ):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page.relative_to(ROOT)}:{index + 1}: unclosed code fence")
        code = "\n".join(_dedent(line, indent) for line in lines[index + 1:end]) + "\n"
        block = Block(page, index + 2, language, code)
        _apply_markers(block, lines, index)
        blocks.append(block)
        index = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    """A code line less the fence's indentation (a list item's code block is indented)."""
    return line[min(indent, len(line) - len(line.lstrip(" "))):]


def _apply_markers(block: Block, lines: list[str], fence_index: int) -> None:
    """Read the ``<!-- ... -->`` markers on the non-blank lines right above a fence."""
    above = fence_index - 1
    while above >= 0 and _MARKER.search(lines[above]):
        text = lines[above]
        skipped = _NO_TEST.search(text)
        run_with = _RUN_WITH.search(text)
        if skipped:
            block.no_test = skipped["reason"]
        elif run_with:
            if run_with["name"] != "zarr2":
                raise AssertionError(f"{block.where}: unknown run-with {run_with['name']!r} "
                                     "(known: zarr2)")
            block.run_with = "zarr2"
        else:
            raise AssertionError(f"{block.where}: a marker needs a reason: "
                                 f"<!-- no-test: REASON --> ({text.strip()!r})")
        above -= 1


RUNNABLE = {"python", "py", "console", "sh", "bash", "shell"}


def runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.language in RUNNABLE and b.no_test is None]


def needs(text: str) -> set[str]:
    """What a block's text needs beyond this machine's files: servers, FUSE."""
    found = {name for name, (url, _) in SERVERS.items() if url in text}
    if "zfuse" in text:
        found.add("fuse")
    return found


def require(what: set[str]) -> dict[str, str]:
    """Skip (or fail under ZSTORES_REQUIRE_PEERS=1) unless everything in ``what`` is here.

    Returns the replacements to apply: example URL -> test server URL.
    """
    replacements = {}
    for name in sorted(what):
        if name == "fuse":
            require_fuse()
            continue
        url, variable = SERVERS[name]
        actual = os.environ.get(variable)
        if not actual:
            missing_peer(f"{variable} is not set: no {name} server for the examples")
        replacements[url] = actual
    return replacements


def object_services(text: str) -> set[str]:
    """The object-storage services (``OBJECT_SERVICES``) a page's blocks use."""
    return {service for url, service in OBJECT_SERVICES.items() if url in text}


def provide_object_services(wanted: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """A fresh bucket or web folder for each service in ``wanted``, on the suite's emulators.

    Returns the replacements (example URL -> emulator URL) and the environment
    variables the blocks run with.  Skips (fails under ``ZSTORES_REQUIRE_PEERS=1``) when an emulator
    is missing.
    """
    replacements: dict[str, str] = {}
    env: dict[str, str] = {}
    if "s3" in wanted:
        from object_urls import new_s3_bucket, s3_env

        endpoint = os.environ.get("ZSTORES_TEST_S3_ENDPOINT")
        if not endpoint:
            missing_peer("ZSTORES_TEST_S3_ENDPOINT is not set: no S3 emulator for the examples")
        replacements["s3://bucket/"] = f"s3://{new_s3_bucket(endpoint)}/"
        env.update(s3_env(endpoint))
    if "gcs" in wanted:
        from object_urls import new_gcs_bucket

        endpoint = os.environ.get("ZSTORES_TEST_GCS_ENDPOINT")
        if not endpoint:
            missing_peer("ZSTORES_TEST_GCS_ENDPOINT is not set: no GCS emulator for the examples")
        replacements["gs://bucket/"] = f"gs://{new_gcs_bucket(endpoint)}/"
        replacements["http://127.0.0.1:4443"] = endpoint.rstrip("/")
    if "http" in wanted:
        url, folder = (os.environ.get(name) for name in
                       ("ZSTORES_TEST_HTTP_URL", "ZSTORES_TEST_HTTP_DIR"))
        if not url or not folder or not os.path.isdir(folder):
            missing_peer("ZSTORES_TEST_HTTP_URL/ZSTORES_TEST_HTTP_DIR are not set: no HTTP "
                         "server for the examples")
        name = f"docs-{uuid.uuid4().hex[:12]}"  # a page run of its own, never a reused one
        os.makedirs(os.path.join(folder, name))
        replacements["https://example.org/data/"] = f"{url.rstrip('/')}/{name}/"
        replacements["/srv/www/data/"] = os.path.join(folder, name) + "/"
    return replacements, env


def substitute(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


# ------------------------------------------------- running python blocks
# A worker runs blocks in one namespace; requests and replies are JSON lines on
# pipes of its own, so what the examples print cannot disturb them.  A line
# `print(...)  # text` checks that the call prints `text` (`...` matches
# anything): the comment after a print is the output the page promises.
_WORKER = textwrap.dedent(r"""
    import contextlib, doctest, io, json, os, sys, traceback
    requests = os.fdopen(int(sys.argv[1]), "r")
    replies = os.fdopen(int(sys.argv[2]), "w")

    def __doc_print__(call, expected, where):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            call()
        printed = output.getvalue()
        sys.stdout.write(printed)
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        if not doctest.OutputChecker().check_output(expected + "\n", printed, flags):
            raise AssertionError(f"{where} printed {printed.strip()!r}, "
                                 f"but the page shows {expected!r}")

    namespace = {"__name__": "__main__", "__doc_print__": __doc_print__}
    for request in requests:
        block = json.loads(request)
        source = "\n" * (block["line"] - 1) + block["code"]
        try:
            exec(compile(source, block["path"], "exec"), namespace)
        except BaseException:
            reply = {"ok": False, "error": traceback.format_exc()}
        else:
            reply = {"ok": True}
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
""")


def checked_prints(code: str, path: str, first_line: int) -> str:
    """``code`` with each ``print(...)  # output`` line turned into a checked call."""
    lines = code.splitlines()
    for number, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped.startswith("print("):
            continue
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(stripped).readline))
        except (tokenize.TokenError, SyntaxError):
            continue  # a print spread over several lines: not checked
        comments = [t for t in tokens if t.type == tokenize.COMMENT]
        if not comments:
            continue
        call = stripped[:comments[0].start[1]].rstrip()
        expected = comments[0].string[1:].strip()
        try:
            compile(call, path, "eval")
        except SyntaxError:
            continue
        indent = line[:len(line) - len(stripped)]
        where = f"{path}:{first_line + number}"
        lines[number] = f"{indent}__doc_print__(lambda: {call}, {expected!r}, {where!r})"
    return "\n".join(lines) + "\n"


class Worker:
    """A Python process that executes blocks in one namespace, in a working directory."""

    def __init__(self, python: str, cwd: Path, log: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        to_worker_r, self._to_worker = os.pipe()
        self._from_worker, from_worker_w = os.pipe()
        env = {**os.environ, **(extra_env or {}), "PYTHONPATH": str(ROOT),
               "PYTHONUNBUFFERED": "1"}
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [python, "-c", _WORKER, str(to_worker_r), str(from_worker_w)],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, pass_fds=(to_worker_r, from_worker_w),
        )
        os.close(to_worker_r)
        os.close(from_worker_w)
        self._replies = b""

    def run(self, block: Block, code: str) -> dict[str, Any]:
        request = {"code": code, "line": block.line, "path": str(block.page.relative_to(ROOT))}
        os.write(self._to_worker, (json.dumps(request) + "\n").encode())
        while b"\n" not in self._replies:
            ready, _, _ = select.select([self._from_worker], [], [], BLOCK_TIMEOUT)
            if not ready:
                return {"ok": False, "error": f"no answer within {BLOCK_TIMEOUT} s"}
            chunk = os.read(self._from_worker, 65536)
            if not chunk:
                return {"ok": False, "error": "the interpreter running the block died"}
            self._replies += chunk
        line, _, self._replies = self._replies.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        os.close(self._to_worker)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._from_worker)
        self._log.close()


# --------------------------------------------------- running shell blocks
def tool_path() -> str:
    """PATH with this interpreter's scripts (zfuse, zstores) first."""
    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def parse_transcript(code: str) -> list[tuple[str, str]]:
    """``(command, expected output)`` for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"console output before any '$ ' command: {line!r}")
    return [(command, "\n".join(lines).strip()) for command, lines in steps]


def run_shell(script: str, cwd: Path,
              extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT, env={**os.environ, **(extra_env or {}), "PATH": tool_path()},
        check=False,
    )


def output_matches(expected: str, actual: str) -> bool:
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    return checker.check_output(expected + "\n", actual.strip() + "\n", flags)


def check_console(block: Block, code: str, cwd: Path,
                  extra_env: dict[str, str] | None = None) -> list[str]:
    problems = []
    for command, expected in parse_transcript(code):
        done = run_shell(command, cwd, extra_env)
        actual = (done.stdout + done.stderr).strip()
        if not output_matches(expected, actual):
            problems.append(f"{block.where}: `$ {command}` printed\n{actual}\n"
                            f"--- but the page shows\n{expected}")
        elif not expected and done.returncode != 0:
            problems.append(f"{block.where}: `$ {command}` exited {done.returncode}")
    return problems


def check_script(block: Block, code: str, cwd: Path,
                 extra_env: dict[str, str] | None = None) -> list[str]:
    done = run_shell("set -euo pipefail\n" + code, cwd, extra_env)
    if done.returncode != 0:
        return [(f"{block.where}: the script exited {done.returncode}:\n"
                 f"{done.stdout}{done.stderr}")]
    return []


# --------------------------------------------------------- running a page
def leftover_mounts(cwd: Path) -> list[str]:
    """Unmount (lazily) and return the zfuse mounts a page left under ``cwd``."""
    base = str(cwd.resolve())
    left = [path for path in zfuse_mounts() if path.startswith(base)]
    for path in left:
        subprocess.run(["fusermount", "-u", "-z", path], capture_output=True, check=False)
    return left


@dataclass
class PageRun:
    cwd: Path
    pythons: dict[str, str]
    replacements: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)  # object storage's credentials
    workers: dict[str, Worker] = field(default_factory=dict)

    def worker(self, name: str) -> Worker:
        if name not in self.workers:
            log = self.cwd.parent / f"{name}-output.txt"
            self.workers[name] = Worker(self.pythons[name], self.cwd, log, self.env)
        return self.workers[name]

    def run(self, block: Block) -> list[str]:
        code = substitute(block.code, self.replacements)
        if block.language in ("python", "py"):
            code = checked_prints(code, page_id(block.page), block.line)
            reply = self.worker(block.run_with).run(block, code)
            return [] if reply["ok"] else [f"{block.where}: the block failed:\n{reply['error']}"]
        if block.language == "console":
            return check_console(block, code, self.cwd, self.env)
        return check_script(block, code, self.cwd, self.env)

    def close(self) -> str:
        for worker in self.workers.values():
            worker.close()
        outputs = sorted(self.cwd.parent.glob("*-output.txt"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in outputs)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(read_blocks(p))], ids=page_id)
def test_page_examples_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every runnable block of the page runs, in order, and none fails."""
    blocks = runnable(read_blocks(page))
    replacements = require(set().union(*(needs(b.code) for b in blocks)))
    objects, env = provide_object_services(
        set().union(*(object_services(b.code) for b in blocks)))
    replacements.update(objects)
    pythons = {"python": sys.executable}
    if any(b.run_with == "zarr2" for b in blocks):
        pythons["zarr2"] = request.getfixturevalue("zarr2").python
    cwd = tmp_path / "work"
    cwd.mkdir()
    run = PageRun(cwd, pythons, replacements, env)
    problems: list[str] = []
    try:
        for block in blocks:
            problems += run.run(block)
            if problems:
                break  # later blocks build on this one
    finally:
        output = run.close()
        left = leftover_mounts(cwd)
    if left:
        problems.append(f"the examples left zfuse mounts behind (now unmounted): {left}")
    assert not problems, "\n\n".join(problems) + f"\n\nwhat the examples printed:\n{output}"


#: Transcripts kept as ```text blocks, and the test that runs each: they run
#: from the checkout (``.venv/bin/python scripts/...``), not from the page's
#: temporary folder, and print figures that change from run to run.
RECORDED = {"docs/parallel-writes.md": "test_lost_updates_demo_prints_what_the_page_shows"}


def text_transcripts() -> list[Block]:
    """The blocks of a language that never runs whose text is a ``$ command`` transcript."""
    return [b for page in PAGES for b in read_blocks(page)
            if b.language not in RUNNABLE and b.code.startswith("$ ")]


def test_every_recorded_transcript_is_run_by_a_test() -> None:
    unrun = [b.where for b in text_transcripts() if page_id(b.page) not in RECORDED]
    assert not unrun, (f"transcripts in blocks that never run: {unrun}; make them console "
                       "blocks, or add a test that runs them to RECORDED")
    assert all(name in globals() for name in RECORDED.values())


def test_lost_updates_demo_prints_what_the_page_shows() -> None:
    """parallel-writes.md's demo, as the page types it: the synchronized runs lose nothing.

    Every figure but those zeros varies (losses from run to run, totals with
    the writer count, which follows the machine's cores), so each is ``...``.
    """
    import shlex

    [block] = [b for b in text_transcripts() if page_id(b.page) == "docs/parallel-writes.md"]
    [(command, expected)] = parse_transcript(block.code)
    argv = shlex.split(command)
    assert argv[:2] == [".venv/bin/python", "scripts/demo_lost_updates.py"]
    lines = []
    for line in expected.splitlines():
        if "with ProcessSynchronizer" in line:
            assert re.search(r" 0 of ", line), f"the page shows a synchronized loss: {line!r}"
            lines.append(re.sub(r"(?<= of )\d[\d,]*", "...", line))
        else:
            lines.append(re.sub(r"\d[\d,]*", "...", line))
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert output_matches("\n".join(lines), done.stdout), (
        f"{block.where}: the demo printed\n{done.stdout}--- but the page shows\n{expected}")


def test_no_test_markers_are_rare() -> None:
    """Blocks kept from running are the exception: each has a reason, and there are few."""
    kept = [(b.where, b.no_test) for page in PAGES for b in read_blocks(page)
            if b.no_test is not None]
    assert all(reason for _, reason in kept)
    total = sum(1 for page in PAGES for b in read_blocks(page) if b.language in RUNNABLE)
    assert len(kept) * 5 <= total, f"too many blocks marked no-test: {kept}"


# ---------------------------------------------------------------- doctests
def public_modules() -> list[str]:
    names = []
    for package in ("zstores", "zfuse"):
        names.append(package)
        path = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(path, package + "."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue  # __main__ runs a command when imported
            names.append(info.name)
    return sorted(names)


#: Modules whose examples need zarr-python 2.18: they run in its interpreter.
ZARR2_MODULES = {"zstores.adapters.zarr2"}


def docstring_needs(test: doctest.DocTest) -> set[str]:
    found = set().union(*(needs(example.source) for example in test.examples))
    if test.name.startswith("zfuse") and any(
        "mount" in example.source for example in test.examples
    ):
        found.add("fuse")
    return found


def unskip(test: doctest.DocTest, replacements: dict[str, str]) -> None:
    """Run the examples of ``test`` that were skipped for want of a server or FUSE."""
    for example in test.examples:
        example.options.pop(doctest.SKIP, None)
        example.source = substitute(example.source, replacements)


@pytest.mark.parametrize("module_name", [m for m in public_modules() if m not in ZARR2_MODULES])
def test_docstring_examples(module_name: str, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``Examples`` of the module's docstrings run and print what they show."""
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(module_name)
    tests = [t for t in doctest.DocTestFinder().find(module, module_name) if t.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    unavailable: list[str] = []
    never_run: list[str] = []
    for test in tests:
        if any(doctest.SKIP in e.options for e in test.examples):
            wanted = docstring_needs(test)
            if not wanted:
                never_run.append(test.name)
                continue
            try:
                unskip(test, require(wanted))
            except pytest.skip.Exception as skipped:
                unavailable.append(f"{test.name}: {skipped.msg}")
                continue
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert not never_run, (f"examples marked +SKIP that nothing runs: {never_run}; make them "
                           "runnable (this test supplies Redis, MongoDB and FUSE)")
    if unavailable:
        pytest.skip("; ".join(unavailable))


def test_zarr2_adapter_examples(zarr2: Any) -> None:
    """The zarr-python 2.18 adapter's examples, in the zarr-python 2.18 interpreter."""
    for module_name in sorted(ZARR2_MODULES):
        result = zarr2.run(
            """
            import doctest, importlib, io, contextlib
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                outcome = doctest.testmod(importlib.import_module(module_name),
                                          optionflags=doctest.ELLIPSIS)
            result = [outcome.failed, outcome.attempted, output.getvalue()]
            """,
            module_name=module_name,
        )
        failed, attempted, output = result  # type: ignore[misc]
        assert attempted > 0, f"{module_name} has no examples to run"
        assert failed == 0, output


# ---------------------------------------------------------------- the site
def test_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: no broken link, omitted page or unrenderable docstring."""
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as error:
        missing_peer(f"the docs extra is not installed ({error}): pip install -e '.[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "api" / "stores" / "index.html").is_file()


# ------------------------------------------------ claims checked against code
def table_rows(page: Path, first_header: str, *headers: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table whose first column is headed ``first_header``
    and that has the columns ``headers``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_header and set(headers) <= set(cells):
            rows = []
            for row in lines[index + 2:]:
                if not row.startswith("|"):
                    break
                values = [cell.strip() for cell in row.strip().strip("|").split("|")]
                # strict: a row with more or fewer cells than the header is a broken table
                rows.append(dict(zip(cells, values, strict=True)))
            return rows
    raise AssertionError(f"no table headed {first_header!r} with {headers} in {page.name}")


NETWORK = (zstores.RedisStore, zstores.MongoDBStore)


def flags_of(cls: type[zstores.Store], folder: Path) -> dict[str, Any]:
    """A store's capability flags; a real store on disk, so per-instance flags count."""
    if cls in NETWORK:  # their flags are the class's: no server needed to read them
        store: Any = cls
    elif cls is zstores.MemoryStore:
        store = cls()
    else:
        store = cls(folder / cls.__name__)
    try:
        return {
            "process-safe writers": store.supports_process_writers,
            "range reads": store.supports_range_reads,
            "network": cls in NETWORK,
            "largest value": store.max_value_size,
        }
    finally:
        if cls not in NETWORK:
            store.close()


STORE_CLASSES = {
    "Memory": zstores.MemoryStore,
    "Directory": zstores.DirectoryStore,
    "Nested directory": zstores.NestedDirectoryStore,
    "Zip": zstores.ZipStore,
    "DBM": zstores.DBMStore,
    "LMDB": zstores.LMDBStore,
    "SQLite": zstores.SQLiteStore,
    "Redis": zstores.RedisStore,
    "MongoDB": zstores.MongoDBStore,
}


def _size_text(size: int | None) -> str:
    if size is None:
        return "none"
    return f"{size:,} bytes"


def test_backend_table_matches_the_stores(tmp_path: Path) -> None:
    """docs/backends.md's table says what each store's flags say."""
    rows = {row["backend"]: row for row in table_rows(DOCS / "backends.md", "backend")}
    assert set(rows) == set(STORE_CLASSES)
    for name, cls in STORE_CLASSES.items():
        row = rows[name]
        flags = flags_of(cls, tmp_path)
        for column in ("process-safe writers", "range reads", "network"):
            said = row[column].split()[0].strip(",;:").lower()
            assert said in ("yes", "no"), f"{name}: {column} must start with yes or no"
            assert (said == "yes") == flags[column], f"{name}: {column} says {row[column]!r}"
        size = _size_text(flags["largest value"])
        assert row["largest value"].startswith(size), (
            f"{name}: largest value says {row['largest value']!r}, the store declares {size}"
        )


def test_conditional_writes_table_matches_the_stores(tmp_path: Path) -> None:
    """docs/backends.md's table of create-if-absent and compare-and-swap says what
    each store's flags say (object stores: the class's)."""
    rows = {row["store"]: row for row in table_rows(
        DOCS / "backends.md", "store", "create if absent", "compare-and-swap")}
    objects = {"S3": zstores.S3Store, "GCS": zstores.GCSStore, "Azure": zstores.AzureStore,
               "HTTP": zstores.HTTPStore}
    assert set(rows) == set(STORE_CLASSES) | set(objects)
    for name, cls in {**STORE_CLASSES, **objects}.items():
        if cls in NETWORK or name in objects:
            store: Any = cls
        elif cls is zstores.MemoryStore:
            store = cls()
        else:
            store = cls(tmp_path / cls.__name__)
        try:
            for column, flag in (("create if absent", "supports_create_if_absent"),
                                 ("compare-and-swap", "supports_compare_and_swap")):
                said = rows[name][column].split()[0].strip(",;:").lower()
                assert said in ("yes", "no"), f"{name}: {column} must start with yes or no"
                assert (said == "yes") == getattr(store, flag), f"{name}: {column}"
        finally:
            if not isinstance(store, type):
                store.close()


def test_quoted_speeds_match_benchmarks() -> None:
    """Every speed docs/backends.md quotes is the one docs/benchmarks.md recorded.

    scripts/quote_benchmarks.py copies them over after a benchmark is recorded.
    """
    spec = importlib.util.spec_from_file_location("quote_benchmarks",
                                                  ROOT / "scripts" / "quote_benchmarks.py")
    quoting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quoting)
    backends = (DOCS / "backends.md").read_text()
    assert quoting.quote(backends, (DOCS / "benchmarks.md").read_text()) == backends, (
        "docs/backends.md quotes other figures than docs/benchmarks.md records: "
        "run scripts/quote_benchmarks.py"
    )
    assert "| 64 KiB | get |" in (DOCS / "benchmarks.md").read_text()


def _literal(text: object) -> object:
    try:
        return ast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        return str(text)


def test_docstring_defaults_match_signatures() -> None:
    """A numpydoc choice list ``{a, b}`` names its default first; it must be the real one.

    The API reference shows that first choice as the default, so a docstring
    listing the modes as ``{"r", "r+", "a", ...}`` for a parameter defaulting
    to ``"a"`` would show the wrong default.
    """
    try:
        import griffe
    except ImportError as error:
        missing_peer(f"the docs extra is not installed ({error}): pip install -e '.[docs]'")
    wrong = []
    for package in ("zstores", "zfuse"):
        root = griffe.load(package, search_paths=[str(ROOT)], docstring_parser="numpy",
                           allow_inspection=False)
        for obj in _documented_callables(root):
            parameters = obj.parameters if obj.is_function else obj.members["__init__"].parameters
            for section in obj.docstring.parsed:
                if section.kind is not griffe.DocstringSectionKind.parameters:
                    continue
                for documented in section.value:
                    actual = parameters[documented.name].default \
                        if documented.name in parameters else None
                    if actual is None or documented.value is None:
                        continue  # a required parameter, or no default stated
                    if _literal(documented.value) != _literal(actual):
                        wrong.append(f"{obj.path}: {documented.name} defaults to {actual}, "
                                     f"the docstring says {documented.value}")
    assert not wrong, "\n".join(wrong)


def _documented_callables(obj: Any) -> Iterator[Any]:
    """Functions and classes (with an ``__init__``) below ``obj`` that have docstrings."""
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.docstring is not None and (member.is_function or (
                member.is_class and "__init__" in member.members
                and not member.members["__init__"].is_alias)):
            yield member
        if member.is_module or member.is_class:
            yield from _documented_callables(member)


def test_flag_table_matches_the_base_class() -> None:
    """docs/api/stores.md's table of capability flags lists every flag with its default."""
    rows = table_rows(DOCS / "api" / "stores.md", "attribute", "base default")
    documented = {row["attribute"].strip("`"): row["base default"].strip("`") for row in rows}
    flags = {"supports_range_reads", "supports_process_writers", "supports_deletes",
             "max_value_size", "persistent", "hierarchical", "supports_transactions",
             "supports_snapshots", "supports_create_if_absent", "supports_compare_and_swap"}
    assert set(documented) == flags
    for name, default in documented.items():
        assert repr(getattr(zstores.Store, name)) == default, name


def _resolve(dotted: str) -> Any:
    """The object a ``::: dotted.path`` directive documents."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise AssertionError(f"cannot resolve {dotted!r}")


def test_api_reference_covers_the_public_api() -> None:
    """Every name exported by ``zstores`` and ``zfuse`` has an entry in docs/api/."""
    documented: list[Any] = []
    for page in sorted((DOCS / "api").glob("*.md")):
        for target in re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M):
            if target in ZARR2_MODULES or target.startswith("zstores.adapters.zarr2."):
                continue  # needs zarr-python 2 to import; rendered from source
            obj = _resolve(target)
            documented.append(obj)
            if isinstance(obj, type(zstores)):  # a module page documents its members
                documented += [getattr(obj, n) for n in dir(obj) if not n.startswith("_")]
    missing = []
    for package in (zstores, importlib.import_module("zfuse")):
        for name in package.__all__:
            if not any(getattr(package, name) is obj for obj in documented):
                missing.append(f"{package.__name__}.{name}")
    assert not missing, f"public names missing from docs/api/*.md: {missing}"


def test_install_section_matches_pyproject() -> None:
    """The quickstart names every core dependency and every extra of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0]
        assert name in text, f"core dependency {name} is not named in docs/quickstart.md"
    extras = {row["extra"].strip("`") for row in table_rows(DOCS / "quickstart.md", "extra")}
    assert extras == set(project["optional-dependencies"]), extras


def test_readme_extras_table_matches_pyproject() -> None:
    """The README's table of extras names every extra pyproject.toml declares, and no other."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = {row["extra"].strip("`") for row in table_rows(ROOT / "README.md", "extra")}
    assert extras == set(project["optional-dependencies"]), extras


# ------------------------------------------- the environment a page runs in
def _distribution(requirement: str) -> str:
    """``"dask[array]>=2024.1"`` -> ``"dask"`` (normalized as pip compares names)."""
    name = re.split(r"[<>=!\[; ~]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def demo_distributions() -> set[str]:
    """What ``scripts/setup-env --demo`` installs in ``.venv`` (directly, by name).

    zstores with the extras ``all`` and ``docs`` (followed through extras
    naming extras, ``zstores[object]``), and ``DEMO_PEERS``.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    found = {_distribution(r) for r in project["dependencies"]} | {"zstores"}
    pending, seen = ["all", "docs"], set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras[extra]:
            inner = re.fullmatch(r"zstores\[(?P<names>[\w,]+)\]", requirement.strip())
            if inner:
                pending.extend(inner["names"].split(","))
            else:
                found.add(_distribution(requirement))
    script = (ROOT / "scripts" / "setup-env").read_text(encoding="utf-8")
    peers = re.search(r"^DEMO_PEERS=\((?P<items>[^)]*)\)", script, re.MULTILINE)
    assert peers, "scripts/setup-env defines no DEMO_PEERS=(...)"
    found |= {_distribution(item) for item in re.findall(r'"([^"]+)"', peers["items"])}
    assert '".[all,docs]" "${DEMO_PEERS[@]}"' in script, "the demo's .venv is made otherwise"
    return found


def _imports(code: str) -> set[str]:
    """The top-level modules a block imports."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_every_page_imports_only_what_its_environment_has() -> None:
    """A page's examples run in the demo's .venv, or the page says what to pip install.

    The page runs above use the test environment, which has more (tensorstore,
    nx-27017 ...): this catches an example that imports what the environment
    a reader makes from the README (``scripts/demo``) does not have.
    """
    from importlib.metadata import packages_distributions

    providers = packages_distributions()
    demo = demo_distributions()
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        said = {_distribution(name) for line in re.findall(r"pip install ([^`\n]+)", text)
                for name in re.findall(r"[\"']?([A-Za-z][\w.\-]*(?:\[[\w,]+\])?)", line)}
        for block in runnable(read_blocks(page)):
            if block.language not in ("python", "py") or block.run_with != "python":
                continue
            for module in sorted(_imports(block.code) - set(sys.stdlib_module_names)):
                dists = {_distribution(d) for d in providers.get(module, [module])}
                if not dists & (demo | said):
                    missing.append(f"{block.where}: import {module} ({', '.join(dists)})")
    assert not missing, ("examples import what neither scripts/setup-env --demo installs nor "
                         f"their page says to pip install: {missing}")
