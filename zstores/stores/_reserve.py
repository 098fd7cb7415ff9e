"""Room set aside next to a store's data file, so that deletes work on a full disk.

A transactional engine never overwrites data in place: deleting a key writes
new pages (LMDB's copy-on-write B+tree) or new frames (SQLite's WAL) before
the old ones are freed.  On a full disk even a delete then fails, and the
store can no longer be shrunk from within.  A store that keeps a
:class:`SpaceReserve` deletes the reserve file when a delete meets a full disk,
retries the delete in the room that freed, and sets the reserve aside again
once the file system has room.

The reserve is a plain file, ``<data file>.zstores-reserve``; deleting it by
hand is always safe (it holds no data) and is one way to make room.
"""

from __future__ import annotations

import errno
import os

__all__ = ["RESERVE_SUFFIX", "SpaceReserve", "free_bytes"]

#: Appended to a data file's name to name its reserve.
RESERVE_SUFFIX = ".zstores-reserve"

# The reserve is allocated in steps of this size, so that a nearly full disk
# still gets as much of it as fits.
_STEP = 64 << 10


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still allocate on the file system of ``path``.

    Examples
    --------
    >>> free_bytes(".") >= 0
    True
    """
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


class SpaceReserve:
    """A file of up to ``size`` allocated bytes, released to let a delete commit.

    Parameters
    ----------
    data_file : str
        The store's data file; the reserve is ``data_file + RESERVE_SUFFIX``.
    size : int
        Bytes to set aside.

    Examples
    --------
    >>> import os, tempfile
    >>> reserve = SpaceReserve(os.path.join(tempfile.mkdtemp(), "data"), 1 << 20)
    >>> reserve.ensure(), os.path.getsize(reserve.path)
    (True, 1048576)
    >>> reserve.release(), os.path.exists(reserve.path)
    (True, False)
    """

    def __init__(self, data_file: str, size: int) -> None:
        self.path = data_file + RESERVE_SUFFIX
        self.size = size

    def ensure(self, keep_free: int = 0) -> bool:
        """Allocate the reserve (or what is missing of it); True if it is whole.

        Never raises for lack of room: on a full disk the reserve stays as
        large as it could be made, and the next call grows it.  It never
        takes the last ``keep_free`` bytes of the file system (room the
        store's own files may need first).  Other failures (a read-only
        folder) leave the store without a reserve.
        """
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return False
        try:
            have = os.fstat(fd).st_size
            goal = self.size
            if keep_free and have < goal:
                goal = min(goal, have + max(free_bytes(self.path) - keep_free, 0))
            while have < goal:
                step = min(_STEP, goal - have)
                _allocate(fd, have, step)
                have += step
            return have >= self.size
        except OSError:
            # No room (ENOSPC, EDQUOT) or the file system failed: the reserve
            # is a safety margin, never a reason for the store's own call to fail.
            return False
        finally:
            os.close(fd)

    def release(self) -> bool:
        """Delete the reserve, freeing its room; True if there was one."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True


def _allocate(fd: int, offset: int, length: int) -> None:
    """Allocate real blocks (not a sparse hole) for ``length`` bytes at ``offset``."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # A file system without fallocate: write bytes.  Not zeros, which a
        # compressing file system would store in no room at all.
        os.pwrite(fd, os.urandom(length), offset)
