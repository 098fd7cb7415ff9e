"""POSIX file-system machinery under DirectoryStore: descriptor-relative calls, no links.

Everything here works on folder descriptors and names and knows nothing of
``Store`` (an engine module never imports it): the name rules (``NAME_MAX``,
temporary names), opening a folder or file below a descriptor without
following a link (``O_NOFOLLOW``, one folder at a time), listing and
classifying folder entries, removing trees without following links, whole
reads and writes, and the link rules of a create-if-absent (a hard link, or
``renameat2(RENAME_NOREPLACE)`` where there are none).  The C library calls
(``openat2``, ``renameat2``) are ``_libc.py``'s.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from itertools import compress
from operator import attrgetter

from ...errors import InvalidKeyError, UnsupportedOperationError
from .._libc import find_renameat2

#: The longest file name, in bytes of UTF-8, that common file systems accept.
NAME_MAX = 255
#: Temporary files are ``TEMP_PREFIX`` followed by 32 lowercase hex digits.
TEMP_PREFIX = ".zstores-tmp."
_TEMP_NAME = re.compile(r"\.zstores-tmp\.[0-9a-f]{32}")

# A concurrent prune can remove a folder between our creating it and writing
# into it; each retry makes progress unless another thread keeps emptying it.
_RETRIES = 100
_LONGEST_SAFE_SEGMENT = NAME_MAX // 4  # a UTF-8 character takes at most 4 bytes

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # all three are missing on Windows, where
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)  # DirectoryStore refuses to open (no dir_fd)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# A folder opened only to reach what lies below it.  O_PATH (Linux) skips the
# read-permission check and file setup: a cheaper open, usable as a dir_fd.
_O_PATH = getattr(os, "O_PATH", 0)
_WALK = (_O_PATH or os.O_RDONLY) | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# A folder opened to read its entries (scandir) or to fsync it.
_LIST = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# A value opened for reading.  O_NONBLOCK: a FIFO planted in the store must
# not hang the reader (it is then refused as not a regular file).
_READ = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
# A new temporary file: O_EXCL never follows a link either.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
# Errors that mean "no room left" on a local file system.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# openat(O_DIRECTORY | O_NOFOLLOW) answers ENOTDIR for a link on Linux, ELOOP
# on some other systems: either way, look at what the name is before deciding.
_NOT_A_FOLDER = frozenset({errno.ENOTDIR, errno.ELOOP})


class _FileInTheWay(KeyError):
    """A folder on a key's path is a file (a key): the key cannot exist below it."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(key)
        self.path = path


def _is_temp(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and _TEMP_NAME.fullmatch(name) is not None


def _is_utf8(name: str) -> bool:
    """False for a folder entry whose name is not valid UTF-8.

    ``scandir`` decodes such bytes to lone surrogates (``surrogateescape``);
    a key must be valid Unicode, so these entries can never be keys.
    """
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _split(path: str) -> tuple[list[str], str]:
    """``"a/b/c"`` -> ``(["a", "b"], "c")``: the folders of a path and its last name."""
    folder, _, name = path.rpartition("/")
    return (folder.split("/") if folder else []), name


def _lstat_mode(name: str, parent: int) -> int | None:
    """The ``st_mode`` of ``name`` in folder ``parent`` (links not followed); None if absent."""
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return None
        raise


def _open_folder_at(parent: int, name: str, flags: int = _LIST) -> int | None:
    """Open sub-folder ``name`` of ``parent`` without following a link; None if it is not one."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno in _NOT_A_FOLDER or error.errno == errno.ENAMETOOLONG:
            return None
        raise


def _entries(folder: int) -> Iterator[os.DirEntry[str]]:
    """The entries of the folder open as ``folder``, lazily.

    ``folder`` must be a descriptor of the caller's own, opened for this
    listing: ``scandir`` reads through a duplicate of it, and duplicates share
    their read position, so two listings through one descriptor (the root's,
    shared by threads and forked processes) would garble each other.  It
    must stay open while the entries are used: on a file system without
    entry types, ``DirEntry.is_dir`` looks the name up through it.
    """
    with os.scandir(folder) as found:
        yield from found


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


_NAME = attrgetter("name")
# The unbound methods, mapped over a folder's entries at C level.  Called
# without ``follow_symlinks=False`` (a keyword argument would cost a bound
# method and a call with keywords per entry, eight times the time), so they
# are used only on a folder shown to hold no link (``_classify``).
_IS_LINK, _IS_FILE, _IS_FOLDER = os.DirEntry.is_symlink, os.DirEntry.is_file, os.DirEntry.is_dir


def _classify(entries: list[os.DirEntry[str]], names: list[str]) -> tuple[list[str], list[str]]:
    """The names of the regular files and of the folders among ``entries`` (links are neither).

    The common cases run as C-level passes over the entries, ``map`` of the
    unbound ``DirEntry`` methods, which read the types ``scandir`` already
    has: a Python loop calling a method per entry cost as much as a quarter
    of a whole listing.  A folder of chunks (every entry a file) and an
    array's folder of chunk folders (every entry a folder) take two passes
    each, one looking for links and one proving every entry the same kind;
    a folder of both kinds takes one more for each kind.  Without links,
    following them (the methods' default) changes nothing.  A folder with a
    link, or a file system that reports no types (each method then calls
    ``lstat``, which may raise ``OSError``), takes the loop with
    ``follow_symlinks=False``.
    """
    if any(map(_IS_LINK, entries)):
        files = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
        folders = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        return files, folders
    if all(map(_IS_FILE, entries)):  # a folder of chunks
        return names, []
    if all(map(_IS_FOLDER, entries)):  # a folder of chunk folders
        return [], names
    return list(compress(names, map(_IS_FILE, entries))), list(
        compress(names, map(_IS_FOLDER, entries))
    )


def _scan(folder: int, relative: str = "") -> tuple[list[str], list[str], list[str]]:
    """The key files and sub-folders of the open ``folder``, and the names skipped.

    Returns ``(files, folders, skipped)``: ``files`` are the regular files
    that can be keys (not temporary files), ``folders`` the sub-folders (links
    are neither), ``skipped`` the paths (``relative`` + name) of entries whose
    names are not valid UTF-8.  Names come in the folder's own order.

    Listings are the hot path of ``listdir`` and of walks over many keys, so
    the entry types come from C-level passes over ``scandir``'s entries
    (``_classify``: the types the kernel reports, no system call per entry), and the rare names
    (non-ASCII, temporary) are looked for once in the joined names instead of
    name by name.  ``folder`` is the caller's own descriptor (see ``_entries``).
    """
    with os.scandir(folder) as found:
        entries = list(found)
    names = list(map(_NAME, entries))
    try:
        files, folders = _classify(entries, names)
    except OSError:
        # No entry types from this file system, and an entry vanished before
        # its lstat: classify entry by entry, leaving out what cannot be looked at.
        files = [entry.name for entry in entries if _is_file(entry)]
        folders = [entry.name for entry in entries if _is_folder(entry)]
    skipped: list[str] = []
    # Every entry's name, links and other kinds too: only a sign that a rare
    # name may be among the files and folders, which are then looked at.
    joined = "/".join(names)  # "/" never occurs in a name
    if not joined.isascii():
        skipped = [relative + name for name in files + folders if not _is_utf8(name)]
        if skipped:
            files = [name for name in files if _is_utf8(name)]
            folders = [name for name in folders if _is_utf8(name)]
    if TEMP_PREFIX in joined:
        files = [name for name in files if not _is_temp(name)]
    return files, folders, skipped


def _names_read_as_they_come(folder: int) -> list[str] | None:
    """``_listing``'s names of the regular files and folders in ``folder``, temporary files kept.

    None if an entry vanished before its ``lstat`` (a file system that
    reports no types): the caller looks again with ``_scan``.
    """
    try:
        with os.scandir(folder) as found:
            first = next(found, None)
            if first is None:
                return []
            names = [first.name] if _is_file(first) or _is_folder(first) else []
            if first.is_dir(follow_symlinks=False):  # chunk folders, likely
                names += [entry.name for entry in found
                          if not entry.is_symlink() and (entry.is_dir() or entry.is_file())]
            else:
                names += [entry.name for entry in found
                          if not entry.is_symlink() and (entry.is_file() or entry.is_dir())]
            return names
    except OSError:
        return None


def _listing(folder: int, relative: str = "") -> tuple[list[str], list[str]]:
    """The names ``listdir`` shows of the open ``folder``, and the names skipped.

    Returns ``(names, skipped)``: ``names`` are what ``_scan`` returns as
    files and folders together (regular files that are not temporary files,
    and sub-folders; links and other kinds left out), in the folder's own
    order; ``skipped`` the paths (``relative`` + name) of those whose names
    are not valid UTF-8.

    ``listdir`` needs no split into files and folders, so the names are taken
    in one comprehension over ``scandir`` as it reads, the type tests written
    inline: about as many instructions as ``_scan``'s C-level passes over a
    list of entries, but each entry is tested while it is in the CPU's cache
    and dropped (at 100,000 names, 0.81x of the CPU time of zarr-python
    2.18's ``sorted(os.listdir(path))`` became 0.88x).  The entry's kind is
    tested in the order of the first entry's (chunk files, or chunk folders),
    so a folder of one kind costs two tests per entry.  Links are tested
    first: the methods, called without ``follow_symlinks=False`` (a keyword
    argument costs more than the test), would follow one.  The rare cases
    take ``_scan``: an entry that vanished before its ``lstat`` on a file
    system that reports no types (``OSError``), and a temporary file's name
    (only files named so are left out).  ``folder`` is the caller's own
    descriptor (see ``_entries``).
    """
    names = _names_read_as_they_come(folder)
    joined = "" if names is None else "/".join(names)  # "/" never occurs in a name
    if names is None or TEMP_PREFIX in joined:
        files, folders, skipped = _scan(folder, relative)  # scandir rewinds on closing
        return files + folders, skipped
    skipped: list[str] = []
    if not joined.isascii():
        skipped = [relative + name for name in names if not _is_utf8(name)]
        if skipped:
            names = [name for name in names if _is_utf8(name)]
    return names, skipped


def _first_key(folder: int) -> str | None:
    """The path (``/``-separated, below ``folder``) of some key file under it.

    Looks at a folder's files before its sub-folders and stops at the first
    key, so a folder of chunks costs one ``scandir`` (read lazily: a key
    among the first entries ends it).
    """
    subfolders = []
    for entry in _entries(folder):
        name = entry.name
        if not _is_utf8(name):
            continue
        if _is_file(entry):
            if not name.startswith(TEMP_PREFIX) or not _is_temp(name):
                return name
        elif _is_folder(entry):
            subfolders.append(name)
    for name in subfolders:
        below = _first_key_below(folder, name)
        if below is not None:
            return f"{name}/{below}"
    return None


def _first_key_below(parent: int, name: str) -> str | None:
    """``_first_key`` of sub-folder ``name`` of ``parent``; None if it is gone or a link now."""
    child = _open_folder_at(parent, name)
    if child is None:
        return None  # removed, or swapped for a link, since the scan
    try:
        return _first_key(child)
    finally:
        os.close(child)


def _unlink_quietly(name: str, parent: int) -> None:
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass


def _remove_keyless_tree(parent: int, name: str) -> bool:
    """Remove folder ``name`` of ``parent`` if it holds no key (only temporary files and folders).

    Returns True when the folder is gone.  A concurrent writer whose temporary
    file is removed sees its rename fail and writes again, so this never loses
    a value; ``rmdir`` refuses if a key appeared meanwhile.  A link inside
    counts as content: the folder stays.
    """
    folder = _open_folder_at(parent, name)
    if folder is None:
        return _lstat_mode(name, parent) is None
    try:
        for entry in _entries(folder):
            if _is_folder(entry):
                if not _remove_keyless_tree(folder, entry.name):
                    return False
            elif _is_temp(entry.name):
                _unlink_quietly(entry.name, folder)
            else:
                return False
    finally:
        os.close(folder)
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _empty_folder(folder: int) -> None:
    """Remove everything in the open ``folder``; links are unlinked, never followed."""
    for entry in _entries(folder):
        if _is_folder(entry):
            _remove_tree(folder, entry.name)
        else:
            _unlink_quietly(entry.name, folder)


def _remove_tree(parent: int, name: str) -> None:
    """Remove folder ``name`` of ``parent`` and everything in it, tolerating concurrent changes.

    A link in its place is unlinked (the link, not what it points to); a file
    is left alone.
    """
    for attempt in range(_RETRIES):
        folder = _open_folder_at(parent, name)
        if folder is None:
            mode = _lstat_mode(name, parent)
            if mode is not None and stat.S_ISLNK(mode):
                _unlink_quietly(name, parent)
            elif mode is not None and stat.S_ISDIR(mode):
                continue  # a link was swapped back for a folder meanwhile
            return
        try:
            _empty_folder(folder)
        except OSError as error:  # name the file from ``parent`` down, not from ``folder``
            if isinstance(error.filename, str) and not os.path.isabs(error.filename):
                error.filename = f"{name}/{error.filename}"
            raise
        finally:
            os.close(folder)
        try:
            os.rmdir(name, dir_fd=parent)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            # A writer added a file after we had emptied that folder.
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt == _RETRIES - 1:
                raise


def _read_all(fd: int, size: int) -> bytes:
    data = os.read(fd, size)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        part = os.read(fd, size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:  # one pread returns at most ~2 GiB on Linux
        part = os.pread(fd, size - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _write_all(fd: int, value: bytes | memoryview) -> None:
    view = memoryview(value)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def _fsync_folder(folder: int) -> None:
    own = os.open(".", _LIST, dir_fd=folder)  # an O_PATH descriptor cannot fsync
    try:
        os.fsync(own)
    finally:
        os.close(own)


def _release(chain: list[int]) -> None:
    """Close the folder descriptors of a chain but its first (the store's root)."""
    for fd in chain[1:]:
        os.close(fd)


def _file_version(info: os.stat_result) -> tuple[int, int, int, int]:
    # Not st_ctime: replacing the file by rename unlinks the old inode, which
    # changes its ctime although its bytes stay as they were.
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _walk_folder(
    folder: int, relative: str, found: list[tuple[str, int]], skipped: list[str], sizes: bool
) -> None:
    """Add every key under the open ``folder`` to ``found``; links are not followed."""
    files, subfolders, skipped_here = _scan(folder, relative)
    skipped += skipped_here
    if sizes:
        for name in files:
            try:
                size = os.stat(name, dir_fd=folder, follow_symlinks=False).st_size
            except FileNotFoundError:
                continue  # deleted since the scan saw it
            found.append((relative + name, size))
    else:
        found += [(relative + name, 0) for name in files]
    for name in subfolders:
        child = _open_folder_at(folder, name)
        if child is None:
            continue  # removed, or swapped for a link, since the scan
        try:
            _walk_folder(child, f"{relative}{name}/", found, skipped, sizes)
        finally:
            os.close(child)


def _check_segment(key: str, segment: str) -> None:
    try:
        size = len(os.fsencode(segment))
    except UnicodeEncodeError:
        raise InvalidKeyError(
            f"invalid key {key!r}: segment {segment!r} cannot be encoded as a file name"
        ) from None
    if size > NAME_MAX:
        raise InvalidKeyError(
            f"invalid key {key!r}: a path segment may be at most {NAME_MAX} bytes of "
            f"UTF-8 (the file name limit), and segment {segment[:16] + '...'!r} is {size}"
        )
    if _is_temp(segment):
        raise InvalidKeyError(
            f"invalid key {key!r}: segment {segment!r} has the form of a temporary "
            f"file name ({TEMP_PREFIX!r} + 32 hex digits), which is reserved"
        )


# Hard links are missing on some file systems (FAT, exFAT, some FUSE and
# network mounts: EPERM, EOPNOTSUPP); renameat2's RENAME_NOREPLACE (Linux 3.15,
# glibc 2.28) does the same there on the local file systems that have it.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS,
                            errno.EMLINK})
_renameat2 = find_renameat2()


def _link_no_replace(temp: str, name: str, folder: int) -> None:
    """Give the file ``temp`` of ``folder`` the name ``name`` too, or raise
    ``FileExistsError`` if ``name`` exists (whatever it is, a link included)."""
    try:
        os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        return
    except OSError as error:
        if error.errno not in _NO_HARD_LINKS:
            raise
        linking = error
    failed = -1 if _renameat2 is None else -_renameat2(folder, temp, folder, name)
    if failed == 0:
        return
    if failed > 0 and failed not in (errno.EINVAL, errno.ENOSYS):
        raise OSError(failed, os.strerror(failed), name)
    raise UnsupportedOperationError(
        f"cannot create {name!r} only if absent: this file system has neither hard links "
        f"({linking.strerror}) nor renameat2(RENAME_NOREPLACE)"
    ) from linking
