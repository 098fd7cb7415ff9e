"""Shell completion of ``zstores`` and ``zfuse``, asked as bash, zsh and fish ask.

Each shell's completion script (``register-python-argcomplete``) runs the
command with ``_ARGCOMPLETE`` and the line typed so far in its environment;
argcomplete answers in a file (``_ARGCOMPLETE_STDOUT_FILENAME``).  The
tests do exactly that through a subprocess, with each shell's own
variables; bash's generated function is also run for real in bash, and
fish's when fish is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zstores

from cli_helpers import COMMAND, write_sample

pytest.importorskip("argcomplete", reason="completion needs argcomplete: zstores[completion]")

#: The command that writes a shell's completion script (register-python-argcomplete).
_REGISTER = [sys.executable, "-m", "argcomplete.scripts.register_python_argcomplete"]

#: bash's default COMP_WORDBREAKS: it splits "sqlite://x" at the colon.
BASH_WORDBREAKS = " \t\n\"'><=;|&(:"

#: What each shell's completion script puts in the environment, and how the answer is split.
SHELLS = {
    "bash": ({"_ARGCOMPLETE_SHELL": "bash", "_ARGCOMPLETE_COMP_WORDBREAKS": BASH_WORDBREAKS,
              "_ARGCOMPLETE_SUPPRESS_SPACE": "1", "COMP_TYPE": "9"}, "\013", None),
    "zsh": ({"_ARGCOMPLETE_SHELL": "zsh", "_ARGCOMPLETE_SUPPRESS_SPACE": "1"}, "\013", ":"),
    "fish": ({"_ARGCOMPLETE_SHELL": "fish", "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_DFS": "\t",
              "_ARGCOMPLETE_SUPPRESS_SPACE": "1", "COMP_TYPE": ""}, "\n", "\t"),
}


def _program(name: str) -> list[str]:
    if len(COMMAND) == 1:
        return [str(Path(COMMAND[0]).with_name(name))]
    return [sys.executable, "-m", name]


def completions(line: str, shell: str, tmp_path: Path, cwd: Path | None = None) -> list[str]:
    """What the command answers the shell for ``line`` (the cursor at its end)."""
    extra, separator, description = SHELLS[shell]
    answer = tmp_path / "answer"
    env = {**os.environ, **extra, "_ARGCOMPLETE": "1", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    done = subprocess.run(_program(line.split()[0]), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    text = answer.read_text()
    found = text.split(separator) if text else []
    if shell == "zsh":  # "completion:description", a colon in the completion escaped
        return [re.split(r"(?<!\\):", entry)[0].replace("\\:", ":") for entry in found]
    return [entry.partition(description)[0] if description else entry for entry in found]


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    write_sample(str(folder / "exp.sqlite"))
    (folder / "run1.zarr").mkdir()
    return folder


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_subcommands_and_options(shell: str, tmp_path: Path) -> None:
    assert completions("zstores c", shell, tmp_path) == ["cat", "cp", "consolidate"]
    assert completions("zstores ls x --js", shell, tmp_path) == ["--json"]
    assert completions("zstores cp a b --if-exists o", shell, tmp_path) == ["overwrite"]
    assert completions("zfuse mo", shell, tmp_path) == ["mount"]


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_store_urls_complete_schemes_and_local_files(shell: str, tmp_path: Path,
                                                     sample: Path) -> None:
    assert completions("zstores ls sq", shell, tmp_path, sample) == ["sqlite://"]
    assert completions("zstores ls ex", shell, tmp_path, sample) == ["exp.sqlite"]
    assert completions("zstores ls ru", shell, tmp_path, sample) == ["run1.zarr/"]
    after_scheme = completions(f"zstores ls sqlite://{sample}/e", shell, tmp_path)
    # bash splits the word at ":" (COMP_WORDBREAKS): it is given the part after it
    expected = f"//{sample}/exp.sqlite" if shell == "bash" else f"sqlite://{sample}/exp.sqlite"
    assert after_scheme == [expected]
    assert completions("zfuse mount ex", shell, tmp_path, sample) == ["exp.sqlite"]
    assert completions("zfuse mount exp.sqlite ru", shell, tmp_path, sample) == ["run1.zarr/"]


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_paths_inside_a_store_complete_from_the_store(shell: str, tmp_path: Path,
                                                      sample: Path) -> None:
    url = str(sample / "exp.sqlite")
    assert completions(f"zstores ls {url} ", shell, tmp_path)[-3:] == [
        ".zgroup", "counts/", "g/"]
    assert completions(f"zstores info {url} g/", shell, tmp_path) == [
        "g/.zattrs", "g/.zgroup", "g/temp/"]
    assert completions(f"zstores cp {url} copy.zip g/t", shell, tmp_path) == ["g/temp/"]
    with zstores.open_store(url) as store:
        assert ".zstores" not in store.listdir("")  # nothing written by completing
    missing = tmp_path / "nosuch.sqlite"
    offered = completions(f"zstores ls {missing} ", shell, tmp_path)
    assert "--json" in offered and all(entry.startswith("-") for entry in offered)
    assert not missing.exists()  # completing never creates a store


def test_bash_runs_the_generated_script(tmp_path: Path, sample: Path) -> None:
    """The function ``register-python-argcomplete zstores`` defines, run by bash itself."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = subprocess.run([*_REGISTER,
                             "zstores"], capture_output=True, text=True,
                            check=True).stdout
    (tmp_path / "zstores.bash").write_text(script)
    line = f"zstores ls {sample / 'exp.sqlite'} g/"
    program = f"""
        source {tmp_path / 'zstores.bash'}
        COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9
        read -ra COMP_WORDS <<< "$COMP_LINE"; COMP_CWORD=3
        _python_argcomplete zstores g/ '{sample / 'exp.sqlite'}'
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    path = f"{Path(_program('zstores')[0]).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([bash, "-c", program], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": path}, timeout=120)
    assert (done.returncode, done.stdout.split()) == (0, ["g/.zattrs", "g/.zgroup", "g/temp/"])


def test_fish_runs_the_generated_script(tmp_path: Path, sample: Path) -> None:
    """fish's own ``complete -C`` with the script ``register-python-argcomplete`` writes."""
    fish = shutil.which("fish")
    if fish is None:
        pytest.skip("no fish shell installed")
    script = subprocess.run([*_REGISTER,
                             "--shell", "fish", "zstores"],
                            capture_output=True, text=True, check=True).stdout
    (tmp_path / "zstores.fish").write_text(script)
    path = f"{Path(_program('zstores')[0]).parent}{os.pathsep}{os.environ['PATH']}"
    line = f"zstores ls {sample / 'exp.sqlite'} g/"
    done = subprocess.run([fish, "--no-config", "-c", (f"source {tmp_path / 'zstores.fish'}; "
                           f"complete -C '{line}'")], capture_output=True, text=True,
                          check=False, env={**os.environ, "PATH": path}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [row.split("\t")[0] for row in done.stdout.splitlines()] == [
        "g/.zattrs", "g/.zgroup", "g/temp/"]
