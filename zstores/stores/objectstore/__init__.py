"""Object storage as zstores Stores: S3, Google Cloud Storage, Azure Blob, HTTP.

``ObjectStore`` (``store.py``) is the one Store; ``services.py`` configures a
client for each service; ``_obstore.py`` and ``_fsspec.py`` send the
requests through obstore or fsspec (``via="fsspec"``); obstore is the
default, except for GCS, where gcsfs (fsspec) is: the engine tested against
its emulator.
Importing this package imports neither library: a store does on opening,
and names the extra to install when it is missing.
"""

from .services import AzureStore, GCSStore, HTTPStore, S3Store
from .store import ObjectStore

__all__ = ["AzureStore", "GCSStore", "HTTPStore", "ObjectStore", "S3Store"]
