"""zfuse: any zstores store as a folder, through FUSE.

The ``zfuse`` command mounts a store URL in a daemon; from Python,
``mounted`` mounts in a thread for the length of a ``with`` block:

>>> import os, tempfile, zfuse, zstores                      # doctest: +SKIP
>>> store = zstores.MemoryStore()                            # doctest: +SKIP
>>> with zfuse.mounted(store, tempfile.mkdtemp()) as m:      # doctest: +SKIP
...     os.mkdir(f"{m}/group")
...     with open(f"{m}/group/.zgroup", "w") as f:
...         _ = f.write('{"zarr_format": 2}')
>>> store["group/.zgroup"]                                   # doctest: +SKIP
b'{"zarr_format": 2}'

``zfuse.registry.mounts()`` lists every zfuse mount on the machine (``zfuse list``).
Mounting needs mfusepy (``pip install 'zstores[fuse]'``); importing zfuse,
listing and unmounting do not.

See docs/zfuse.md for what the mount shows and how it maps errors.
"""

from __future__ import annotations

from ._libfuse import libfuse_version, load_mfusepy

load_mfusepy()  # before any module of ours imports it: it picks the libfuse

from .mount import (  # noqa: E402 - after load_mfusepy(), as said above
    Mount,
    MountError,
    check_mountpoint,
    is_mounted,
    mount,
    mounted,
    unmount,
)

__all__ = ["Mount", "MountError", "check_mountpoint", "is_mounted", "libfuse_version", "mount",
           "mounted", "unmount"]
