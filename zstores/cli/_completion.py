"""Shell completion for ``zstores`` and ``zfuse`` (bash, zsh, fish) through argcomplete.

argcomplete (``pip install 'zstores[completion]'``) runs the command with
``_ARGCOMPLETE`` set in its environment when the shell asks for
completions; ``complete`` then answers and exits before anything else
runs.  Without argcomplete, or outside completion, it does nothing.

Completers are plain functions set as an argument's ``completer``
attribute (argcomplete's protocol; nothing is imported for that):

- ``url_completer``: scheme names (``sqlite://`` ...) and local files and
  folders, also after a file scheme (``lmdb:///data/r`` -> ``lmdb:///data/run1.lmdb``).
- ``store_path_completer``: the names in the store given earlier on the
  line (``zstores ls data.zip te<TAB>``), read with the store opened
  read-only: completing never creates or changes a store.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Callable
from typing import Any

from ..keys import RESERVED_PREFIX

__all__ = ["complete", "directory_completer", "store_path_completer", "url_completer"]

_RESERVED = RESERVED_PREFIX.rstrip("/")
_MOST = 200  # names offered at once: a chunk folder of 100,000 keys is not listed in full


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell and exit if this run is argcomplete's question; else return.

    Examples
    --------
    >>> complete(argparse.ArgumentParser())  # not asked by a shell: nothing happens
    """
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:  # completion was set up, then argcomplete removed: no answer
        return
    argcomplete.autocomplete(parser, default_completer=_nothing)


def _nothing(**_: Any) -> list[str]:
    return []


def _files(prefix: str, folders_only: bool = False) -> list[str]:
    """Local paths starting with ``prefix``; folders end with ``/`` (completion goes on).

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.mkdir(os.path.join(folder, "run1.zarr"))
    >>> for name in ("run2.zip", "run3.sqlite", "run3.sqlite.zstores-reserve"):
    ...     open(os.path.join(folder, name), "wb").close()
    >>> [os.path.basename(p.rstrip("/")) + ("/" if p.endswith("/") else "")
    ...  for p in _files(folder + "/run")]
    ['run1.zarr/', 'run2.zip', 'run3.sqlite']
    """
    from ..stores._reserve import RESERVE_SUFFIX

    expanded = os.path.expanduser(prefix)
    found = []
    for path in sorted(glob.glob(glob.escape(expanded) + "*"))[:_MOST]:
        if path.endswith(RESERVE_SUFFIX):  # a store's spare space, never a store itself
            continue
        shown = prefix + path[len(expanded):]
        if os.path.isdir(path):
            found.append(shown + "/")
        elif not folders_only:
            found.append(shown)
    return found


def url_completer(prefix: str, **_: Any) -> list[str]:
    """Completions of a store URL: ``scheme://`` names, then local paths.

    Examples
    --------
    >>> url_completer("sq")
    ['sqlite://']
    >>> url_completer("redis://loc")  # a server's URL: nothing to guess
    []
    """
    from ..urls import SCHEMES

    scheme, separator, rest = prefix.partition("://")
    if not separator:
        schemes = [f"{name}://" for name in sorted(SCHEMES) if name.startswith(prefix)]
        return schemes + _files(prefix)
    spec = SCHEMES.get(scheme.lower())
    if spec is None or spec.location != "path" or scheme.lower() in ("s3", "gs", "az"):
        return []
    return [f"{scheme}://{path}" for path in _files(rest)]


def store_path_completer(url_dest: str = "url") -> Callable[..., list[str]]:
    """A completer of PATH inside the store named by the argument ``url_dest``."""

    def completer(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
        url = getattr(parsed_args, url_dest, None)
        if not url:
            return []
        try:
            return _store_names(url, prefix)
        except Exception:  # noqa: BLE001 - a store that cannot be read completes nothing
            return []

    return completer


def _store_names(url: str, prefix: str) -> list[str]:
    """The names under the folder ``prefix`` is in; prefixes end with ``/``."""
    from ..urls import open_store

    parent, _, start = prefix.rpartition("/")
    with open_store(url, mode="r") as store:
        names = [name for name in store.listdir(parent) if name.startswith(start)
                 and (parent or name != _RESERVED)][:_MOST]
        base = f"{parent}/" if parent else ""
        # A name that is no key is a prefix: "/" lets completion go on below it.
        return [base + name + ("" if base + name in store else "/") for name in names]


def directory_completer(prefix: str, **_: Any) -> list[str]:
    """Local folders (a mount point)."""
    return _files(prefix, folders_only=True)
