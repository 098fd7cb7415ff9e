"""mount(), mounted() and unmount(): a store as a folder, in the foreground or a thread.

``mount(..., foreground=True)`` serves the mount in the calling thread until
it is unmounted (from the main thread, Ctrl-C and SIGTERM unmount cleanly).
``mount(..., foreground=False)`` serves it from a thread of this process and
returns a ``Mount`` once the mount answers; ``mounted()`` wraps that in a
context manager that always unmounts.  The ``zfuse`` command runs the mount
in a daemon process instead (``zfuse.cli``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self

from zstores import Store, ZStoresError

from . import registry
from ._libfuse import MISSING_MFUSEPY, require_mfusepy
from .mounttable import is_mounted, mount_entry
from .options import SUBTYPE, fuse_options, parse_fuse_options

if TYPE_CHECKING:
    from .operations import StoreOperations

# .operations and ._fuse (and with them mfusepy) are imported by the functions
# that mount: unmounting and listing mounts work without mfusepy installed.
# The mount table is .mounttable, libfuse's options .options, the FUSE class
# with zfuse's hot paths ._fuse; their public names are re-exported here.

log = logging.getLogger("zfuse")

__all__ = [
    "MISSING_MFUSEPY",
    "SUBTYPE",
    "Mount",
    "MountError",
    "check_mountpoint",
    "fuse_options",
    "is_mounted",
    "mount",
    "mounted",
    "parse_fuse_options",
    "raise_read_ahead",
    "require_mfusepy",
    "unmount",
]

# Seconds to wait for a mount to answer, and for a busy mount to become free.
_READY_TIMEOUT = 30.0
_BUSY_TIMEOUT = 5.0

#: Read-ahead asked of the kernel for a mount, in KiB.  The kernel's default
#: for FUSE is 128 KiB, which splits a sequential read into 128 KiB requests
#: (a daemon round trip each); libfuse 3 takes requests of up to 1 MiB.
READ_AHEAD_KIB = 1024

_DAEMON_FSNAME = re.compile(r"zfuse-(\d+)\Z")


class MountError(ZStoresError, OSError):
    """A mount point is unusable, or mounting or unmounting failed; the message says why."""


# ------------------------------------------------------------ mount points
def raise_read_ahead(path: str | os.PathLike[str], kib: int = READ_AHEAD_KIB) -> bool:
    """Let the kernel read ahead ``kib`` KiB at a time on the mount at ``path``.

    Sets the mount's ``/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`` (never
    lowers it), which takes root; returns whether the read-ahead is now at
    least ``kib``.  A cold sequential read of a large value then costs a
    quarter to an eighth of the daemon round trips.
    """
    try:
        device = os.stat(path).st_dev
        knob = f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb"
        with open(knob, encoding="ascii") as current:
            if int(current.read()) >= kib:
                return True
        with open(knob, "w", encoding="ascii") as setting:
            setting.write(str(kib))
        return True
    except (OSError, ValueError) as error:
        log.debug("read-ahead of %s left as it is: %s", path, error)
        return False


def check_mountpoint(path: str | os.PathLike[str]) -> str:
    """Return the absolute mount point if it is an empty, unmounted directory.

    Raises
    ------
    MountError
        If it is missing, not a directory, not empty or already mounted.
    """
    path = os.path.abspath(os.fspath(path))
    entry = mount_entry(path)
    if entry is not None:
        raise MountError(
            f"{path} is already a mount point ({entry[1]}); unmount it first "
            f"(zfuse unmount {path})"
        )
    try:
        os.stat(path)
    except FileNotFoundError:
        raise MountError(f"mount point {path} does not exist; create it first (mkdir)") from None
    except OSError as error:
        raise MountError(f"mount point {path} is not usable: {error.strerror}") from None
    if not os.path.isdir(path):
        raise MountError(f"mount point {path} is not a directory")
    if os.listdir(path):
        raise MountError(f"mount point {path} is not empty; mount on an empty directory")
    return path


# ------------------------------------------------------------ mounting
class Mount(os.PathLike[str]):
    """A mount served by a thread of this process; ``os.fspath(m)`` is the mount point.

    Examples
    --------
    >>> import tempfile, zstores                                  # doctest: +SKIP
    >>> m = mount(zstores.MemoryStore(), tempfile.mkdtemp(), foreground=False)  # doctest: +SKIP
    >>> os.listdir(m)                                             # doctest: +SKIP
    []
    >>> m.unmount()                                               # doctest: +SKIP
    """

    def __init__(self, path: str, operations: StoreOperations, thread: threading.Thread
                 ) -> None:
        self.path = path
        self.operations = operations
        self._thread = thread

    @property
    def store(self) -> Store:
        """The mounted store."""
        return self.operations.store

    @property
    def active(self) -> bool:
        """True while the serving thread runs."""
        return self._thread.is_alive()

    def unmount(self, *, lazy: bool = False, timeout: float = _BUSY_TIMEOUT) -> None:
        """Unmount and wait for the serving thread to end.

        A busy mount is retried for ``timeout`` seconds.  ``lazy`` detaches
        it at once; the thread then serves the files still open until they
        close, and this returns without waiting for them.

        Raises
        ------
        MountError
            If the mount stays busy (and ``lazy`` is False), or the thread
            does not end after a complete unmount.
        """
        if self._thread.is_alive() and is_mounted(self.path):
            unmount(self.path, lazy=lazy, timeout=timeout)
        if lazy:
            self._thread.join(0.5)
            return
        self._thread.join(30)
        if self._thread.is_alive():
            raise MountError(f"the mount at {self.path} was unmounted but its thread "
                             "did not stop within 30 s")

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unmount()

    def __repr__(self) -> str:
        return f"Mount({self.path!r}, store={self.store!r})"


def mount(
    store: Store,
    mountpoint: str | os.PathLike[str],
    *,
    read_only: bool = False,
    foreground: bool = True,
    attr_timeout: float = 1.0,
    allow_other: bool = False,
    fuse_options_extra: Mapping[str, Any] | None = None,
    fsname: str = SUBTYPE,
    on_ready: Callable[[], None] | None = None,
    label: str | None = None,
    snapshot: bool = False,
) -> Mount | None:
    """Show ``store`` as a folder at ``mountpoint``.

    Parameters
    ----------
    store : Store
        Any open zstores store.  It is not closed at unmount.
    mountpoint : str or os.PathLike
        An existing, empty directory.
    read_only : bool
        Refuse every change (EROFS); implied by a store opened with mode ``"r"``.
    foreground : bool
        ``True``: serve in this thread and return after the unmount.
        ``False``: serve from a thread and return a ``Mount`` once the mount
        answers.
    attr_timeout : float
        Seconds the kernel and the mount may serve metadata (and contents of
        unchanged files) from cache; changes made to the store by others
        than the mount show after at most this long.
    allow_other : bool
        Let other users see the mount (non-root users need
        ``user_allow_other`` in /etc/fuse.conf).
    fuse_options_extra : mapping, optional
        More libfuse ``-o`` options (``{"name": value}``, ``True`` for flags).
        With ``kernel_cache`` (or ``auto_cache``) on a read-only mount, libfuse
        alone answers ``open`` and ``close``: warm files are served by the
        kernel without the daemon, but changes made to the store by others may
        not show while the file stays in the page cache.
    fsname : str
        What ``df`` and /proc/mounts show as the mount's source.
    on_ready : callable, optional
        Called once the kernel has connected the mount.
    label : str, optional
        What ``zfuse list`` shows as the mounted store (a URL with its
        password redacted); the store's repr by default.
    snapshot : bool
        Serve ``store.snapshot()`` instead of the store: every tool reading
        the folder sees one version of the data for as long as the mount
        lives, whatever writers do to the store meanwhile.  Implies
        ``read_only``; the snapshot is closed at unmount.

    Returns
    -------
    Mount or None
        The running mount when ``foreground`` is False, else None.

    Raises
    ------
    MountError
        If the mount point is unusable or the mount fails, or with
        ``snapshot`` if the store cannot take snapshots.

    Examples
    --------
    >>> import tempfile, zstores                                  # doctest: +SKIP
    >>> store = zstores.MemoryStore()                             # doctest: +SKIP
    >>> m = mount(store, tempfile.mkdtemp(), foreground=False)    # doctest: +SKIP
    >>> with open(os.path.join(m, "a.txt"), "w") as f:            # doctest: +SKIP
    ...     _ = f.write("hi")
    >>> m.unmount(); store["a.txt"]                               # doctest: +SKIP
    b'hi'
    """
    require_mfusepy()
    path = check_mountpoint(mountpoint)
    if store.closed:
        raise MountError(f"cannot mount {store!r}: the store is closed")
    if snapshot:
        store, read_only = snapshot_of(store), True
    try:
        return _mount_checked(store, path, read_only=read_only, foreground=foreground,
                              attr_timeout=attr_timeout, allow_other=allow_other,
                              extra=dict(fuse_options_extra or {}), fsname=fsname,
                              on_ready=on_ready, label=label, owned=snapshot,
                              immutable=snapshot)
    except BaseException:
        if snapshot:
            store.close()
        raise


def snapshot_of(store: Store) -> Store:
    """``store.snapshot()``, or a ``MountError`` saying why there is none.

    Raises
    ------
    MountError
        If the store cannot take snapshots (``supports_snapshots`` is False).
    """
    if not store.supports_snapshots:
        raise MountError(
            f"cannot mount a snapshot of {store!r}: it cannot take snapshots "
            "(supports_snapshots=False); LMDB, SQLite and Memory stores can"
        )
    return store.snapshot()


def _mount_checked(store: Store, path: str, *, read_only: bool, foreground: bool,
                   attr_timeout: float, allow_other: bool, extra: dict[str, Any], fsname: str,
                   on_ready: Callable[[], None] | None, label: str | None,
                   owned: bool, immutable: bool = False) -> Mount | None:
    """``mount`` after its checks; ``owned``: close ``store`` when the mount ends;
    ``immutable``: nobody changes it while mounted (a snapshot)."""
    from ._fuse import fuse_class
    from .operations import operations_for

    shown = label if label is not None else repr(store)
    ro = read_only or store.read_only
    # libfuse 3 changes the process's working directory to / when it starts
    # serving, even in the foreground: give the caller's back once it has.
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def ready() -> None:
        _return_to(cwd)
        registry.record(path, shown, read_only=ro)  # for `zfuse list`
        if on_ready is not None:
            on_ready()

    operations = operations_for(store, read_only=read_only, attr_timeout=attr_timeout,
                                kernel_cache=bool(extra.get("kernel_cache") or
                                                  extra.get("auto_cache")),
                                immutable=immutable, on_ready=ready)
    options = fuse_options(read_only=operations.read_only, attr_timeout=attr_timeout,
                           allow_other=allow_other, fsname=fsname, extra=extra)

    def serve() -> None:
        try:
            fuse_class()(operations, path, raw_fi=True, foreground=True, **options)
        except RuntimeError as error:
            if not _ended_by_signal(error, operations):
                raise
        finally:
            registry.forget(path, pid=os.getpid())
            _restore_sigpipe()
            _return_to(cwd, close=True)
            if owned:
                store.close()

    if foreground:
        threading.Thread(target=_raise_read_ahead_when_ready, args=(path, operations),
                         name="zfuse read-ahead", daemon=True).start()
        try:
            serve()
        except RuntimeError as error:
            raise MountError(f"libfuse could not mount {path} (status {error})") from None
        return None

    errors: list[BaseException] = []

    def run() -> None:
        try:
            serve()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting caller
            errors.append(error)

    thread = threading.Thread(target=run, name=f"zfuse {path}", daemon=True)
    thread.start()
    _wait_until_answering(path, operations, thread, errors)
    return Mount(path, operations, thread)


def _return_to(cwd: int, *, close: bool = False) -> None:
    """Make the open folder ``cwd`` the working directory again (if it still exists)."""
    try:
        os.fchdir(cwd)
    except OSError:
        pass  # the folder was removed meanwhile: nothing to return to
    if close:
        os.close(cwd)


def _raise_read_ahead_when_ready(path: str, operations: StoreOperations) -> None:
    # Not from init itself: the stat it takes waits for init's reply.
    if operations.ready.wait(_READY_TIMEOUT):
        raise_read_ahead(path)


def _ended_by_signal(error: RuntimeError, operations: StoreOperations) -> bool:
    """True if libfuse 3 reports the end of a mount it served as a failure.

    libfuse 3 stops its loop on SIGINT, SIGTERM or SIGHUP as libfuse 2 does,
    but then returns status 8 (loop failed) where libfuse 2 returns 0.
    """
    import mfusepy

    return (mfusepy.fuse_version_major >= 3 and operations.ready.is_set()
            and error.args == (8,))


def _restore_sigpipe() -> None:
    """Ignore SIGPIPE again, as Python does, after libfuse has let go of its signals.

    libfuse ignores SIGPIPE while it serves and on exit sets it to the
    default action, which kills the process; Python had it ignored, so that a
    write to a closed pipe raises BrokenPipeError instead.  ``signal.signal``
    works only in the main thread, and a mount may run in another, hence libc.
    """
    if signal.getsignal(signal.SIGPIPE) != signal.SIG_IGN:
        return  # the program chose its own SIGPIPE handling: leave it alone
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGPIPE, int(signal.SIG_IGN))


def _wait_until_answering(path: str, operations: StoreOperations, thread: threading.Thread,
                          errors: list[BaseException]) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while not operations.ready.wait(0.02):
        if not thread.is_alive():
            reason = f": {errors[0]}" if errors else ""
            raise MountError(f"libfuse could not mount {path}{reason}")
        if time.monotonic() > deadline:
            break
    # The kernel queues requests until the INIT reply: a stat answers once it is done.
    while time.monotonic() < deadline:
        if is_mounted(path):
            try:
                os.stat(path)
            except OSError:
                pass
            else:
                raise_read_ahead(path)
                return
        if not thread.is_alive():
            break
        time.sleep(0.02)
    if is_mounted(path):
        unmount(path, lazy=True)
    thread.join(5)
    raise MountError(f"the mount at {path} did not answer within {_READY_TIMEOUT} s")


@contextmanager
def mounted(store: Store, mountpoint: str | os.PathLike[str], **options: Any) -> Iterator[Mount]:
    """Mount in a thread, yield once the mount answers, and always unmount on exit.

    ``options`` are those of ``mount`` (``read_only``, ``attr_timeout`` ...).
    If the mount is still busy at exit (a process has a file open in it), it
    is unmounted lazily: it disappears now and is released when the last
    file closes.

    Do not ``mmap`` files of an in-process mount from the same process: a page
    fault would wait for this process's own FUSE threads while holding the
    interpreter lock.  Use the ``zfuse`` command (a separate process) for that.

    Examples
    --------
    >>> import tempfile, zstores                                  # doctest: +SKIP
    >>> store = zstores.MemoryStore()                             # doctest: +SKIP
    >>> store["arr/.zarray"] = b"{}"                              # doctest: +SKIP
    >>> with mounted(store, tempfile.mkdtemp()) as m:             # doctest: +SKIP
    ...     os.listdir(os.path.join(m, "arr"))
    ['.zarray']
    """
    options.pop("foreground", None)
    handle = mount(store, mountpoint, foreground=False, **options)
    assert handle is not None
    try:
        yield handle
    finally:
        try:
            handle.unmount(timeout=2.0)
        except MountError:
            handle.unmount(lazy=True)


# ------------------------------------------------------------ unmounting
def _fusermount() -> list[str]:
    for name in ("fusermount", "fusermount3"):
        found = shutil.which(name)
        if found:
            return [found, "-u"]
    if os.geteuid() == 0 and shutil.which("umount"):
        return ["umount"]
    raise MountError("cannot unmount: neither fusermount nor umount is installed")


def unmount(mountpoint: str | os.PathLike[str], *, lazy: bool = False,
            timeout: float = _BUSY_TIMEOUT) -> None:
    """Unmount a zfuse mount (also one whose daemon was killed).

    A busy mount is retried for ``timeout`` seconds; ``lazy`` detaches it at
    once and releases it when the last open file closes.  For a mount served
    by a ``zfuse`` daemon, waits for the daemon to close the store (not after
    ``lazy``: the daemon ends when the last file closes).

    Raises
    ------
    MountError
        If nothing is mounted there, it is not a FUSE mount, or it stays busy.
    """
    path = os.path.abspath(os.fspath(mountpoint))
    entry = mount_entry(path)
    if entry is None:
        raise MountError(f"{path} is not mounted")
    source, kind = entry
    if not kind.startswith("fuse"):
        raise MountError(f"{path} is a {kind} mount, not a FUSE mount")
    base = _fusermount()
    command = base + ([("-z" if "fusermount" in os.path.basename(base[0]) else "-l")]
                      if lazy else []) + [path]
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 0 or mount_entry(path) is None:
            break
        message = (done.stderr or done.stdout).strip().splitlines()
        reason = message[-1] if message else f"exit status {done.returncode}"
        if "busy" not in reason.lower() or time.monotonic() > deadline:
            if "busy" in reason.lower():
                reason = (f"{path} is busy (a process has a file or its working "
                          "directory in it); close what uses it or run "
                          f"`zfuse unmount --lazy {path}`")
            raise MountError(f"cannot unmount {path}: {reason}")
        time.sleep(0.1)
    daemon = _DAEMON_FSNAME.match(source)
    # A lazy unmount leaves the daemon serving the files still open: no wait.
    if daemon and not lazy and int(daemon.group(1)) != os.getpid():
        _wait_for_exit(int(daemon.group(1)), 60.0)
        registry.forget(path, pid=int(daemon.group(1)))  # a killed daemon left its record


def _wait_for_exit(pid: int, timeout: float) -> None:
    """Wait until process ``pid`` has exited (it closes its store first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and registry.process_alive(pid):
        time.sleep(0.05)
