"""What zfuse has mounted on this machine: the mount table plus a small record per mount.

The kernel's mount table (``/proc/self/mountinfo``, read by ``zfuse.mounttable``) says
where zfuse mounts are (filesystem type ``fuse.zfuse``) and, for mounts made by the ``zfuse``
command, the serving process (the source is ``zfuse-PID``).  It cannot say
which store a mount shows, so the serving process also writes a record, a
small JSON file per mount point, in the runtime folder (``runtime_dir``) and
removes it at unmount.  ``mounts()`` joins the two and drops records whose
mount or process is gone (a daemon killed with ``kill -9`` cannot remove its own).

Only the standard library is used here: ``zfuse list`` works without mfusepy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass

from .mounttable import FSTYPE, zfuse_mount_table

__all__ = ["FSTYPE", "MountInfo", "forget", "mounts", "process_alive", "record", "runtime_dir",
           "zfuse_mount_table"]

_SOURCE_PID = re.compile(r"zfuse-(\d+)\Z")

# Seconds a live process's record is kept before its mount shows in the table.
_GRACE = 30.0


@dataclass(frozen=True)
class MountInfo:
    """One zfuse mount: where, which store, and which process serves it.

    Attributes
    ----------
    mountpoint : str
        The mounted folder.
    url : str or None
        The store URL with passwords redacted (or the store's repr for a
        mount made from Python); None when no record was found.
    pid : int or None
        The process serving the mount; None if unknown or no longer running.
    read_only : bool or None
        Whether the mount refuses changes; None if unknown.
    status : str
        ``"running"``, or ``"daemon gone"`` for a mount whose process has
        exited (it answers "Transport endpoint is not connected";
        ``zfuse unmount`` clears it).
    """

    mountpoint: str
    url: str | None
    pid: int | None
    read_only: bool | None
    status: str

    def as_dict(self) -> dict[str, object]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def runtime_dir() -> str:
    """The folder of mount records: ``$ZFUSE_RUNTIME_DIR``, ``$XDG_RUNTIME_DIR/zfuse``,
    ``/run/zfuse`` for root, else ``/tmp/zfuse-UID``.

    Examples
    --------
    >>> os.path.basename(runtime_dir()).startswith("zfuse")
    True
    """
    explicit = os.environ.get("ZFUSE_RUNTIME_DIR")
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "zfuse")
    if os.geteuid() == 0:
        return "/run/zfuse"
    return os.path.join(tempfile.gettempdir(), f"zfuse-{os.geteuid()}")


def _record_path(mountpoint: str) -> str:
    # One record per mount point, named by a digest: mount points may hold any character.
    digest = hashlib.sha256(os.fsencode(mountpoint)).hexdigest()[:24]
    return os.path.join(runtime_dir(), f"{digest}.json")


def record(mountpoint: str, url: str, *, pid: int | None = None, read_only: bool = False) -> None:
    """Note that process ``pid`` (this one by default) serves ``url`` at ``mountpoint``.

    ``url`` must already be redacted.  Failing to write the record (a
    read-only runtime folder) only makes ``zfuse list`` show less; it never
    stops a mount, so errors are ignored.
    """
    entry = {"mountpoint": mountpoint, "url": url, "pid": os.getpid() if pid is None else pid,
             "read_only": bool(read_only), "since": time.time()}
    folder = runtime_dir()
    temp = None
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".record.", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(entry, out)
        os.replace(temp, _record_path(mountpoint))  # readers never see half a record
    except OSError:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def forget(mountpoint: str, *, pid: int | None = None) -> None:
    """Remove the record of ``mountpoint`` (only if it is ``pid``'s, when given)."""
    path = _record_path(mountpoint)
    if pid is not None:
        entry = _read(path)
        if entry is not None and entry.get("pid") != pid:
            return  # a newer mount at the same place: not ours to remove
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as source:
            entry = json.load(source)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs: it exists and has not ended as a zombie.

    Examples
    --------
    >>> process_alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process exists; /proc says whether it has ended
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as info:
            return info.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def mounts() -> list[MountInfo]:
    """Every zfuse mount on this machine (this mount namespace), with its store and process.

    Records of mounts that are gone, or whose process has exited, are removed.

    Examples
    --------
    >>> all(os.path.isabs(info.mountpoint) for info in mounts())
    True
    """
    found: dict[str, MountInfo] = {}
    for mountpoint, source in zfuse_mount_table():
        found[mountpoint] = _describe(mountpoint, source)  # the mount on top wins
    _clean(set(found))
    return sorted(found.values(), key=lambda info: info.mountpoint)


def _describe(mountpoint: str, source: str) -> MountInfo:
    entry = _read(_record_path(mountpoint)) or {}
    pid = entry.get("pid")
    from_source = _SOURCE_PID.match(source)
    if from_source:
        pid = int(from_source.group(1))  # the mount table is the authority on who serves
    if not isinstance(pid, int):
        pid = None
    if pid is not None and entry.get("pid") not in (None, pid):
        entry = {}  # a record left by an earlier mount at the same place
    alive = pid is None or process_alive(pid)
    url = entry.get("url")
    read_only = entry.get("read_only")
    return MountInfo(
        mountpoint=mountpoint,
        url=url if isinstance(url, str) else None,
        pid=pid if alive else None,
        read_only=read_only if isinstance(read_only, bool) else None,
        status="running" if alive else "daemon gone",
    )


def _clean(mounted: set[str]) -> None:
    """Remove records of mount points no longer mounted or whose process has exited."""
    folder = runtime_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        entry = _read(path)
        if entry is None:
            continue
        pid = entry.get("pid")
        since = entry.get("since")
        if not isinstance(pid, int) or not process_alive(pid):
            stale = True
        else:
            # A live process's record of a mount not in the table yet: written
            # just after this listing read the table, keep it a while.
            fresh = isinstance(since, int | float) and time.time() - since < _GRACE
            stale = entry.get("mountpoint") not in mounted and not fresh
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(path)
