"""MongoDBStore: one document per key, values over the BSON limit split into parts."""

from __future__ import annotations

import errno
import functools
import logging
import re
import secrets
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._concurrency import ADAPTER_THREADS
from ..base import Buffer, Mode, Store
from ..errors import (
    CorruptValueError,
    StoreConnectionError,
    StoreFullError,
    StoreIOError,
    StoreURLError,
    UnsupportedOperationError,
)
from ..secrets import redact_url, scrub, secrets_of
from ._network import (
    DEFAULT_CONNECT_TIMEOUT,
    SharedClient,
    backend_error,
    call_translating,
    check_connect_timeout,
    check_url_options,
    network_errors_as,
    reopen_unpickled,
    unpickling,
)

if TYPE_CHECKING:
    from ..base import Version
    from ..transactions import Transaction

__all__ = ["MongoDBStore", "client_url_options"]


def _close_client(client: Any) -> None:
    client.close()


def _unpickle(cls: type[MongoDBStore], params: dict[str, Any], mode: str) -> MongoDBStore:
    """A pickled store reopened: no connection now, one client per URL and options."""
    return reopen_unpickled(cls, params, mode)  # type: ignore[no-any-return]

_log = logging.getLogger(__name__)

DEFAULT_URL = "mongodb://127.0.0.1:27017"

# Field names.  "key" and "value" are zarr-python 2.18's; a value too large for
# one document has "parts" (the id of its version) and "size" instead of "value".
KEY, VALUE, PARTS, SIZE = "key", "value", "parts", "size"
# A random id each write of an inline value sets (a split value's "parts" id
# serves as one): what replace_if's update filters on, so that the server
# needs no comparison of binary values (which MongoDB emulators lack).
REV = "rev"

#: The BSON document limit of every MongoDB server.
MAX_DOCUMENT = 16 << 20

# A value is stored inline while value and key fit in a document with room to
# spare for the field names and the BSON framing.
_INLINE_MAX = MAX_DOCUMENT - (16 << 10)

# A large value is split into parts of this size, each a document.
PART_SIZE = 8 << 20

# Keys per query in batched reads: far below the 16 MiB limit of a query.
_BATCH = 10_000

# How often a reader re-reads a large value that writers keep replacing.
_READ_ATTEMPTS = 20

_FIELDS = {"_id": 0, VALUE: 1, PARTS: 1, SIZE: 1}
_PARTS_ONLY = {"_id": 0, PARTS: 1}

_BAD_DATABASE_CHARS = set('/\\. "$*<>:|?\x00')


def _import_pymongo() -> Any:
    try:
        import pymongo
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "MongoDBStore needs the pymongo package: pip install 'zstores[mongodb]'"
        ) from None
    return pymongo


# Server error codes: AuthenticationFailed, Unauthorized, OutOfDiskSpace.
_AUTH_FAILED, _UNAUTHORIZED, _OUT_OF_DISK = 18, 13, 14031

# How a full disk shows in a server's message when it gives no code for it
# (nx-27017 passes SQLite's message on).
_FULL = re.compile(r"disk is full|no space left|out of disk space|SQLITE_FULL", re.IGNORECASE)


def client_url_options() -> frozenset[str]:
    """The URI options pymongo accepts (lower case: pymongo matches them case-insensitively).

    Examples
    --------
    >>> {"serverselectiontimeoutms", "authsource", "tls"} <= client_url_options()
    True
    """
    common = _import_pymongo().common
    return frozenset(common.URI_OPTIONS_VALIDATOR_MAP) | frozenset(common.URI_OPTIONS_ALIAS_MAP)


def _client_keywords() -> frozenset[str]:
    """The keywords ``MongoClient`` accepts besides the URL (lower case)."""
    common = _import_pymongo().common
    return client_url_options() | frozenset(name.lower() for name in common.VALIDATORS)


def _short(error: BaseException) -> str:
    """pymongo's message without the topology description it appends (one
    description per server, hundreds of characters)."""
    text = str(error)
    for marker in (", Timeout:", ", Topology Description:"):
        text = text.split(marker, 1)[0]
    return text


def _import_bson_errors() -> Any:
    import bson.errors  # pymongo's own BSON package

    return bson.errors


def _codes(error: BaseException) -> set[int]:
    """The server error codes an exception carries (a bulk write's too)."""
    codes = {getattr(error, "code", None)}
    details = getattr(error, "details", None)
    if isinstance(details, dict):
        codes.add(details.get("code"))
        for item in details.get("writeErrors") or []:
            codes.add(item.get("code"))
        concern = details.get("writeConcernError")
        if isinstance(concern, dict):
            codes.add(concern.get("code"))
    return {code for code in codes if isinstance(code, int)}


def _check_names(database: str, collection: str) -> None:
    if not isinstance(database, str) or not database or _BAD_DATABASE_CHARS & set(database) \
            or len(database.encode("utf-8")) > 63:
        raise ValueError(
            f"invalid database {database!r}: the database option must be 1 to 63 bytes "
            "without any of / \\ . space \" $ * < > : | ? or NUL"
        )
    if not isinstance(collection, str) or not collection or "$" in collection \
            or "\x00" in collection or collection.startswith("system."):
        raise ValueError(
            f"invalid collection {collection!r}: the collection option must be a non-empty "
            "name without '$' or NUL, not starting with 'system.'"
        )


def _bson_bytes(value: Buffer) -> bytes:
    """BSON encodes ``bytes``; a memoryview has to become one (a copy)."""
    return value if type(value) is bytes else bytes(value)


def _plain(value: Any) -> bytes:
    """A stored binary as ``bytes`` (pymongo gives ``Binary`` for subtypes other than 0)."""
    return value if type(value) is bytes else bytes(value)


def _new_rev() -> str:
    """A fresh ``rev`` for a write of an inline value."""
    return secrets.token_hex(8)


def _state_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A filter matching ``doc``'s key only while it holds the value it held when read.

    A split value's parts id and an inline value's ``rev`` are unique to the
    write that made them; a document written before ``rev`` existed (by
    zarr-python 2) is matched by its value, which the server compares.
    """
    if PARTS in doc:
        return {PARTS: doc[PARTS]}
    if REV in doc:
        return {REV: doc[REV]}
    return {REV: {"$exists": False}, VALUE: doc[VALUE]}


def _why_no_transactions(hello: dict[str, Any], build: dict[str, Any]) -> str:
    """The reason, from the server's ``hello`` and ``buildInfo`` answers, that a
    ``MongoDBStore`` runs no transactions or snapshots on it.

    Examples
    --------
    >>> why = _why_no_transactions({"isWritablePrimary": True}, {"version": "7.0.2"})
    >>> why.startswith("the server answered hello without setName and is no mongos")
    True
    >>> _why_no_transactions({"setName": "rs0"}, {"version": "7.0.2"})[:43]
    "the server is a member of replica set 'rs0'"
    """
    version = build.get("version", "unknown")
    process = build.get("process")
    if hello.get("setName") or hello.get("msg") == "isdbgrid":
        kind = (f"a member of replica set {hello['setName']!r}" if hello.get("setName")
                else "a mongos")
        return (f"the server is {kind} (version {version}), which runs multi-document "
                "transactions, but MongoDBStore does not use them yet: they are not proven "
                "here (zstores' tests have no replica set), and a commit would also have to "
                "make MongoDB detect conflicts on keys it only read")
    reason = (f"the server answered hello without setName and is no mongos: a standalone "
              f"server (version {version}")
    if process == "nx_27017":
        # Measured with nx-27017 0.8.1: another client saw a transaction's
        # uncommitted insert, and its abort rolled back that client's insert.
        reason += (", process 'nx_27017', whose transactions run on the connection every "
                   "client shares: others would see uncommitted writes")
    return (reason + "); MongoDB runs multi-document transactions and snapshot reads only "
            "on replica-set members and through mongos")


class MongoDBStore(Store):
    """Keys and values as documents ``{"key": key, "value": <binary>}`` of one collection.

    The layout of zarr-python 2.18's ``MongoDBStore``, so either library reads
    what the other wrote, plus what zarr-python 2 lacks:

    - a unique index on ``key``; membership tests, ``listdir``, ``rmdir``,
      iteration and ``len`` filter on the index (prefixes as an anchored,
      escaped regular expression ``^prefix``, which MongoDB turns into an index
      range) and project the key only, never fetching values;
    - ``getitems`` is one ``$in`` query, ``setitems`` one ``bulk_write`` of
      upserts, ``delitems`` one ``delete_many``; ``getsize`` is summed on the
      server;
    - values above the 16 MiB BSON document limit are split into 8 MiB part
      documents in the collection ``<collection>_parts`` and read back whole.
      Their document holds ``parts`` (a version id) and ``size`` instead of
      ``value``.  A writer stores the parts under a fresh version id first,
      then switches the key's document to that version in one atomic update,
      then deletes the parts of the version it replaced, so a reader sees the
      old value or the new one, whole, never a mixture; a reader that finds
      its version's parts gone re-reads the key.  Such values are invisible to
      zarr-python 2, which cannot store them at all.

    Parameters
    ----------
    url : str or pymongo.MongoClient
        A ``mongodb://`` or ``mongodb+srv://`` URL, credentials included; or a
        ready ``MongoClient``, which the store uses but never closes.
    database, collection : str
        Where the documents live (zarr-python 2's defaults were
        ``"mongodb_zarr"`` and ``"zarr_collection"``).
    mode : {"a", "r", "r+", "w", "w-"}
        The store *exists* when its collection exists, empty or not (a
        writable store creates it with its index when opened): ``"r"`` and
        ``"r+"`` require it, ``"w-"`` refuses it, ``"w"`` deletes every
        document in it.  Mode ``"r"`` creates nothing and refuses writes
        before any round trip.
    connect_timeout : float
        Seconds the check at open may take: the store runs one ``ping``
        command, server selection included, and refuses to open with
        ``StoreConnectionError`` when no server answers in time or the
        credentials are refused.  Later calls keep the client's own timeouts
        (``serverSelectionTimeoutMS``, 30 s by default).  A URL option of
        ``open_store`` too (``mongodb://host/?connect_timeout=2``).
    **client_kwargs
        Passed to ``pymongo.MongoClient`` (``serverSelectionTimeoutMS``,
        ``tls`` ...); only with a URL.  Unknown names, here or in the URL's
        query (matched case-insensitively, as pymongo does), are refused
        (``StoreURLError``) with the list of those pymongo takes, instead of
        pymongo's warning.

    Notes
    -----
    Writes to several documents (``setitems``, ``delitems``, ``rmdir``,
    ``rename`` of a prefix) are not one transaction: MongoDB offers those only
    on replica sets, and ``transaction()`` and ``snapshot()`` are refused
    (``UnsupportedOperationError`` saying what the server answered; see
    ``docs/transactions.md``).  Each value is replaced atomically, so a reader sees
    every key's old or new value, whole.  A writer interrupted between
    storing parts and switching to them, or two writers racing on the same
    large value, can leave unreferenced part documents behind: wasted space,
    never a wrong value.

    A store pickles its URL, names and options, never a connection, so it can
    be sent to worker processes (``supports_process_writers``); a store built
    from a ready client cannot be pickled (``TypeError``).

    No pymongo exception reaches the caller: when the server is down or
    restarting, the call raises ``StoreConnectionError`` (a
    ``ConnectionError``) naming the URL without its password, after the
    client's ``serverSelectionTimeoutMS`` (pymongo's default is 30 s), and
    the next call after the server is back works; refused credentials are
    ``StoreConnectionError`` too; a full disk on the server is
    ``StoreFullError``; a command the user may not run is ``StoreIOError``
    with ``EACCES``, any other refusal ``StoreIOError``.  Messages leave out
    pymongo's topology description; pymongo's exception is chained unless
    its text shows a password.

    Examples
    --------
    >>> from zstores import MongoDBStore                   # doctest: +SKIP
    >>> store = MongoDBStore("mongodb://127.0.0.1:27017", database="demo")  # doctest: +SKIP
    >>> store.setitems({"a/.zarray": b"{}", "a/0.0": b"chunk"})            # doctest: +SKIP
    >>> store.listdir("a")                                 # doctest: +SKIP
    ['.zarray', '0.0']
    """

    supports_range_reads = False
    supports_process_writers = True
    # Refused, whatever the server: transaction() and snapshot() say why,
    # from what the server answers (_server_answer).
    supports_transactions = False
    supports_snapshots = False
    supports_create_if_absent = True  # an insert: the unique index on "key" decides
    supports_compare_and_swap = True  # an update whose filter is the state compared
    max_value_size = None

    def __init__(
        self,
        url: str | Any = DEFAULT_URL,
        *,
        database: str = "zarr",
        collection: str = "zarr",
        mode: Mode = "a",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        pymongo = _import_pymongo()
        _check_names(database, collection)
        self._connect_timeout = check_connect_timeout(connect_timeout)
        self._database_name, self._collection_name = database, collection
        self._client_kwargs = client_kwargs
        self._driver_errors = (pymongo.errors.PyMongoError, _import_bson_errors().BSONError)
        self._UpdateOne = pymongo.UpdateOne
        self._url: str | None = None
        self._why_no_transactions: str | None = None  # the server's answer, asked once
        self._client_now: Any = None  # see the _client property
        self._shared: SharedClient | None = None
        self._collections: tuple[Any, Any] | None = None  # (documents, parts), on first use
        self._seeds_now: tuple[Any, ...] | None = None
        if isinstance(url, str):
            self._url = url
            self._owns_client = True
            self._where = redact_url(url)
            if unpickling():
                # Checked when the original store opened: share this process's
                # client for the URL and options, made on first use.
                self._owns_client = False
                self._shared = SharedClient.acquire(
                    (MongoDBStore, url, repr(sorted(client_kwargs.items()))),
                    functools.partial(self._client_from_url, pymongo, url, client_kwargs),
                    _close_client)
                return
            self._client_now = self._client_from_url(pymongo, url, client_kwargs)
        elif isinstance(url, pymongo.MongoClient):
            if client_kwargs:
                raise ValueError(
                    f"client options {sorted(client_kwargs)} apply only when the store "
                    "is built from a URL, not from a ready MongoClient"
                )
            self._owns_client = False
            self._client_now = url
        else:
            raise TypeError(f"url must be a str or a pymongo.MongoClient, not {type(url).__name__}")
        if self._url is None:
            self._where = "mongodb://" + ",".join(f"{host}:{port}" for host, port in self._seeds)
        try:
            self._check_pool_size()
            self._ping()
            self._open()
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise

    @property
    def _client(self) -> Any:
        """The pymongo client; a store unpickled in this process gets the shared one
        (``SharedClient``) on first use."""
        client = self._client_now
        if client is None and self._shared is not None:
            client = self._client_now = self._shared.client()
        return client

    @property
    def _docs(self) -> Any:
        """The collection of one document per key."""
        if self._collections is None:
            db = self._client[self._database_name]
            self._collections = (db[self._collection_name], db[self._collection_name + "_parts"])
        return self._collections[0]

    @property
    def _parts(self) -> Any:
        """The collection of the parts of large values."""
        self._docs  # noqa: B018 - makes both
        assert self._collections is not None
        return self._collections[1]

    @property
    def _seeds(self) -> tuple[Any, ...]:
        if self._seeds_now is None:
            described = self._client.topology_description.server_descriptions()
            self._seeds_now = tuple(sorted(described))
        return self._seeds_now

    def __reduce__(self) -> tuple[Any, ...]:
        # Reopened through _unpickle: no connection, one client per process.
        return (_unpickle, (type(self), self._params(), self._mode_after_pickle()))

    # ------------------------------------------------------------- opening
    def _check_pool_size(self) -> None:
        """Refuse a pool smaller than the threads the adapters call the store from:
        the surplus calls would wait (or fail after ``waitQueueTimeoutMS``)."""
        limit = self._client.options.pool_options.max_pool_size
        if limit and limit < ADAPTER_THREADS:
            raise StoreURLError(
                f"{self._store_name()}: maxPoolSize={limit} is below {ADAPTER_THREADS}, the "
                "threads zstores' zarr adapter calls a store from at once here (min(32, cores + "
                f"4)), whose calls beyond the pool would wait: give maxPoolSize={ADAPTER_THREADS}"
                " or more, or leave it out")

    def _client_from_url(self, pymongo: Any, url: str, client_kwargs: dict[str, Any]) -> Any:
        """A client for ``url``, its options checked; pymongo's warnings become errors."""
        own = ("collection", "connect_timeout", "database")
        check_url_options(url, client_url_options(), own, "pymongo", "MongoDBStore",
                          case_insensitive=True)
        known = _client_keywords()
        for name in client_kwargs:
            if name.lower() not in known:
                raise StoreURLError(
                    f"unknown option {name!r} for MongoDBStore at {self._where}; known options: "
                    f"{', '.join(own)} (zstores) and {', '.join(sorted(known))} (pymongo, "
                    "case-insensitive)"
                )
        # pymongo warns (UserWarning, with a source line) about options it
        # ignores; here they are errors, and nothing reaches the terminal.
        # catch_warnings swaps the process's filters for the moment of the
        # constructor: a warning another thread raises meanwhile is caught too.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client = call_translating(
                functools.partial(pymongo.MongoClient, url, **client_kwargs),
                (pymongo.errors.ConfigurationError, TypeError, ValueError),
                lambda error: backend_error(StoreURLError, f"MongoDBStore {self._where}",
                                            "the client refused the URL or an option",
                                            secrets_of(url), error),
                lambda: secrets_of(url))
        for warning in caught:
            text = scrub(str(warning.message), secrets_of(url))
            # A UserWarning here is the URI parser ignoring an option or its
            # value ("The value of w must be a non negative integer").
            if issubclass(warning.category, UserWarning):
                client.close()
                raise StoreURLError(f"MongoDBStore {self._where}: the client refused an option: "
                                    f"{' '.join(text.split())}")
            _log.info("pymongo warned while opening %s: %s", self._where, text)
        return client

    def _ping(self) -> None:
        """One ``ping`` command within ``connect_timeout`` seconds (server selection included)."""
        pymongo = _import_pymongo()
        # pymongo.timeout() replaces the client's serverSelectionTimeoutMS
        # rather than capping it: keep the lower of the two.
        timeout, option = self._connect_timeout, "connect_timeout"
        if self._client.options.server_selection_timeout < timeout:
            timeout = self._client.options.server_selection_timeout
            option = "serverSelectionTimeoutMS"
        timeouts = (pymongo.errors.ServerSelectionTimeoutError, pymongo.errors.NetworkTimeout)

        def translate(error: BaseException) -> Exception:
            if isinstance(error, timeouts):
                return backend_error(StoreConnectionError, self._store_name(),
                                     f"no server answered within {timeout:g} s ({option})",
                                     self._secrets(), error, detail=_short(error))
            if isinstance(error, self._driver_errors):
                return self._typed_error(error)
            # pymongo's authentication code reading a reply it did not expect:
            # a server that does not implement authentication (nx-27017
            # answers saslStart without a payload) or a broken proxy.
            return backend_error(
                StoreConnectionError, self._store_name(),
                "the authentication handshake failed (does the server support authentication?)",
                self._secrets(), error)

        def ping() -> None:
            with pymongo.timeout(timeout):
                self._client.admin.command("ping")

        call_translating(ping, (*self._driver_errors, KeyError, TypeError, ValueError),
                         translate, self._secrets)

    @network_errors_as
    def _open(self) -> None:
        if self._mode != "a":
            names = self._docs.database.list_collection_names()
            self._check_existence(self._collection_name in names)
        if self._mode != "r":
            self._docs.create_index(KEY, unique=True)
            self._parts.create_index([("version", 1), ("n", 1)], unique=True)
        self._clear_if_mode_w()

    # ------------------------------------------------------------- helpers
    def _store_name(self) -> str:
        return f"{type(self).__name__} {self._describe()}"

    def _secrets(self) -> list[str]:
        """Every password this store knows of, to keep out of messages."""
        found = secrets_of(self._url) if self._url else []
        password = self._client_kwargs.get("password")
        if isinstance(password, str) and password:
            found.append(password)
        return found

    def _typed_error(self, error: BaseException) -> Exception:
        """The zstores error a pymongo (or bson) exception becomes.

        Network failures and refused credentials are ``StoreConnectionError``
        (pymongo's topology description left out); a full disk on the server
        is ``StoreFullError``; a command the user may not run is
        ``StoreIOError`` with ``EACCES``; any other refusal is ``StoreIOError``.
        """
        pymongo = _import_pymongo()
        name, secrets = self._store_name(), self._secrets()
        if isinstance(error, pymongo.errors.ConnectionFailure):
            return backend_error(StoreConnectionError, name, "could not talk to the server",
                                 secrets, error, detail=_short(error))
        codes = _codes(error)
        if _AUTH_FAILED in codes:
            return backend_error(StoreConnectionError, name, "the server refused the credentials",
                                 secrets, error)
        if _OUT_OF_DISK in codes or _FULL.search(str(error)):
            return backend_error(StoreFullError, name, "the server's disk is full", secrets, error)
        if _UNAUTHORIZED in codes:
            return backend_error(StoreIOError, name, "the server denied the command", secrets,
                                 error, errno.EACCES)
        return backend_error(StoreIOError, name, "the server refused the command", secrets, error)

    @staticmethod
    def _under(prefix: str) -> dict[str, Any]:
        """Keys starting with ``prefix``: an anchored literal that uses the index."""
        return {KEY: {"$regex": "^" + re.escape(prefix)}}

    def _versions(self, query: dict[str, Any]) -> list[str]:
        """The part versions of the split values that ``query`` matches."""
        return [doc[PARTS] for doc in self._docs.find({**query, PARTS: {"$exists": True}},
                                                      _PARTS_ONLY)]

    def _drop_parts(self, versions: Iterable[str | None]) -> None:
        versions = [version for version in versions if version is not None]
        if versions:
            self._parts.delete_many({"version": {"$in": versions}})

    def _write_parts(self, value: Buffer) -> str:
        """Store a large value's parts under a fresh version id; return the id."""
        version = secrets.token_hex(12)
        view = memoryview(value)
        self._parts.insert_many(
            {"version": version, "n": n, "data": bytes(view[start:start + PART_SIZE])}
            for n, start in enumerate(range(0, len(view), PART_SIZE))
        )
        return version

    def _update_for(self, key: str, value: Buffer) -> dict[str, Any]:
        """The update that stores ``value`` (writing its parts first if it is large)."""
        if len(value) + 4 * len(key) <= _INLINE_MAX:  # 4: the most bytes a character takes
            # "size" on every document we write: getsize then never asks the
            # server to measure a binary ($binarySize is only a fallback for
            # documents written by zarr-python 2).
            return {"$set": {VALUE: _bson_bytes(value), SIZE: len(value), REV: _new_rev()},
                    "$unset": {PARTS: ""}}
        version = self._write_parts(value)
        return {"$set": {PARTS: version, SIZE: len(value)}, "$unset": {VALUE: "", REV: ""}}

    def _value_of(self, key: str, doc: dict[str, Any]) -> bytes:
        if PARTS not in doc:
            return _plain(doc[VALUE])
        for _ in range(_READ_ATTEMPTS):
            version = doc[PARTS]
            found = {part["n"]: part["data"]
                     for part in self._parts.find({"version": version},
                                                  {"_id": 0, "n": 1, "data": 1})}
            if found and sorted(found) == list(range(len(found))):
                value = b"".join(found[n] for n in range(len(found)))
                if len(value) == doc[SIZE]:
                    return value
            # A writer replaced the value and deleted these parts after the
            # key was read: read the key again.
            doc = self._docs.find_one({KEY: key}, _FIELDS)
            if doc is None:
                raise KeyError(key)
            if PARTS not in doc:
                return _plain(doc[VALUE])
            if doc[PARTS] == version:
                raise CorruptValueError(
                    f"the value of key {key!r} in {self._describe()} is damaged: "
                    f"parts of version {version} are missing"
                )
        raise StoreIOError(
            f"the value of key {key!r} in {self._describe()} kept changing while being read "
            f"({_READ_ATTEMPTS} attempts)"
        )

    # ------------------------------------------------------------ primitives
    @network_errors_as
    def _get(self, key: str) -> bytes:
        doc = self._docs.find_one({KEY: key}, _FIELDS)
        if doc is None:
            raise KeyError(key)
        return self._value_of(key, doc)

    @network_errors_as
    def _set(self, key: str, value: Buffer) -> None:
        update = self._update_for(key, value)
        old = self._docs.find_one_and_update({KEY: key}, update, projection=_PARTS_ONLY,
                                             upsert=True)
        if old:
            self._drop_parts([old.get(PARTS)])

    @network_errors_as
    def _delete(self, key: str) -> None:
        old = self._docs.find_one_and_delete({KEY: key}, projection=_PARTS_ONLY)
        if old is None:
            raise KeyError(key)
        self._drop_parts([old.get(PARTS)])

    @network_errors_as
    def _contains(self, key: str) -> bool:
        return self._docs.find_one({KEY: key}, {"_id": 0, KEY: 1}) is not None

    @network_errors_as
    def _list_prefix(self, prefix: str) -> list[str]:
        return [doc[KEY] for doc in self._docs.find(self._under(prefix), {"_id": 0, KEY: 1})]

    # -------------------------------------------------------------- fast paths
    @network_errors_as
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for i in range(0, len(keys), _BATCH):
            batch = keys[i:i + _BATCH]
            # All the documents in the first reply, as far as 16 MiB allows.
            cursor = self._docs.find({KEY: {"$in": batch}}, {**_FIELDS, KEY: 1},
                                     batch_size=len(batch))
            for doc in cursor:
                found[doc[KEY]] = self._value_of(doc[KEY], doc)
        return found

    @network_errors_as
    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if not items:
            return
        updates = [self._UpdateOne({KEY: key}, self._update_for(key, value), upsert=True)
                   for key, value in items]
        replaced = self._versions({KEY: {"$in": [key for key, _ in items]}})
        self._docs.bulk_write(updates, ordered=False)
        self._drop_parts(replaced)

    @network_errors_as
    def _delete_many(self, keys: list[str]) -> None:
        if keys:
            replaced = self._versions({KEY: {"$in": keys}})
            self._docs.delete_many({KEY: {"$in": keys}})
            self._drop_parts(replaced)

    @network_errors_as
    def _rmdir(self, prefix: str) -> None:
        under = self._under(prefix)
        replaced = self._versions(under)
        self._docs.delete_many(under)
        self._drop_parts(replaced)

    @network_errors_as
    def _getsize_key(self, key: str) -> int:
        doc = self._docs.find_one({KEY: key}, {"_id": 0, SIZE: 1})
        if doc is None:
            raise KeyError(key)
        return doc[SIZE] if SIZE in doc else len(self._get(key))

    @network_errors_as
    def _stat(self, key: str) -> int | None:
        # One find_one of the size field: no document is no key, so an empty
        # value needs no second query (the fallback's _contains).
        doc = self._docs.find_one({KEY: key}, {"_id": 0, SIZE: 1})
        if doc is None:
            return None
        return doc[SIZE] if SIZE in doc else len(self._get(key))

    @network_errors_as
    def _getsize_prefix(self, prefix: str) -> int:
        total = 0
        for doc in self._docs.find(self._under(prefix), {"_id": 0, KEY: 1, SIZE: 1}):
            # Documents written by zarr-python 2 carry no size: measure those
            # values rather than trust every server's $binarySize.
            total += doc[SIZE] if SIZE in doc else self._getsize_key(doc[KEY])
        return total

    @network_errors_as
    def _rename_key(self, src: str, dst: str) -> None:
        doc = self._docs.find_one({KEY: src}, _FIELDS)
        if doc is None:
            raise KeyError(src)
        if PARTS in doc:  # the destination shares the parts: no data moves
            update = {"$set": {PARTS: doc[PARTS], SIZE: doc[SIZE]}, "$unset": {VALUE: "", REV: ""}}
        else:
            update = {"$set": {VALUE: doc[VALUE], SIZE: len(doc[VALUE]), REV: _new_rev()},
                      "$unset": {PARTS: ""}}
        # The destination holds a whole value throughout; the source goes last.
        old = self._docs.find_one_and_update({KEY: dst}, update, projection=_PARTS_ONLY,
                                             upsert=True)
        gone = self._docs.find_one_and_delete({KEY: src}, projection=_PARTS_ONLY)
        moved = doc.get(PARTS)
        self._drop_parts(d.get(PARTS) for d in (old, gone) if d and d.get(PARTS) != moved)

    @network_errors_as
    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        ids = {doc[KEY]: doc["_id"] for doc in self._docs.find(self._under(src_prefix), {KEY: 1})}
        moves = {key: dst_prefix + key[len(src_prefix):] for key in ids}
        overwritten = [target for target in moves.values() if target not in ids]
        replaced = self._versions({KEY: {"$in": overwritten}})
        self._docs.delete_many({KEY: {"$in": overwritten}})
        # A target can be another source key only when the source lies inside
        # the destination; its target is then shorter, so renaming shorter
        # keys first frees every name before it is taken (the index is unique).
        if moves:
            self._docs.bulk_write(
                [self._UpdateOne({"_id": ids[key]}, {"$set": {KEY: moves[key]}})
                 for key in sorted(moves, key=len)],
                ordered=True,
            )
        self._drop_parts(replaced)

    @network_errors_as
    def _len(self) -> int:
        return self._docs.count_documents({})

    # ------------------------------------------------------ conditional writes
    # A large value's parts are stored first under a fresh version id; the one
    # write that decides (an insert, a filtered update) then points the key
    # at them or not, and parts left unused are deleted.
    @network_errors_as
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        update = self._update_for(key, value)
        try:
            self._docs.insert_one({KEY: key, **update["$set"]})
        except _import_pymongo().errors.DuplicateKeyError:
            self._drop_parts([update["$set"].get(PARTS)])
            return False
        except BaseException:
            self._drop_parts([update["$set"].get(PARTS)])
            raise
        return True

    @network_errors_as
    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        update: dict[str, Any] | None = None
        missed: dict[str, Any] | None = None  # a document the last filter did not match
        try:
            for _ in range(_READ_ATTEMPTS):
                doc = self._docs.find_one({KEY: key}, {**_FIELDS, REV: 1})
                if doc is None or not self._holds(self._value_of(key, doc), expected):
                    return False
                if doc == missed:
                    raise StoreIOError(
                        f"{self._store_name()}: the server matched no document for key {key!r} "
                        "although it is unchanged: it was written without a 'rev' (by "
                        "zarr-python 2), so it is compared by value, which this server cannot "
                        "do (MongoDB can; an emulator may not).  Write it through zstores once")
                seen = _state_of(doc)
                if update is None:
                    update = self._update_for(key, value)
                old = self._docs.find_one_and_update({KEY: key, **seen}, update,
                                                     projection=_PARTS_ONLY)
                if old is not None:
                    self._drop_parts([old.get(PARTS)])
                    update = None  # applied: its parts are the key's now
                    return True
                # Written by another writer between the read and the update:
                # compare again with what it holds now.
                missed = doc
        finally:
            if update is not None:
                self._drop_parts([update["$set"].get(PARTS)])
        raise StoreIOError(
            f"the value of key {key!r} in {self._describe()} kept changing during "
            f"{_READ_ATTEMPTS} attempts to compare and replace it"
        )

    # ------------------------------------------------ transactions, snapshots
    def transaction(self, *, bind_thread: bool = True) -> Transaction:
        """Refused, with ``UnsupportedOperationError`` saying what the server is.

        MongoDB runs multi-document transactions only on replica-set members
        and through ``mongos``; the store asks the server (``hello`` and
        ``buildInfo``, once per store) so that the error says which kind it
        is.  ``MongoDBStore`` does not run them on replica sets either yet
        (see ``docs/transactions.md``).

        Raises
        ------
        UnsupportedOperationError
            Always, naming the store and the server's answer.
        StoreConnectionError
            If the server cannot be asked.
        """
        self._check_open()
        raise UnsupportedOperationError(
            f"{self!r} cannot run transactions (supports_transactions=False): "
            f"{self._server_answer()}")

    def snapshot(self) -> Store:
        """Refused, with ``UnsupportedOperationError`` saying what the server is.

        Snapshot reads (``readConcern: snapshot``) exist only on replica-set
        members and through ``mongos``, as transactions do (``transaction``).

        Raises
        ------
        UnsupportedOperationError
            Always, naming the store and the server's answer.
        StoreConnectionError
            If the server cannot be asked.
        """
        self._check_open()
        raise UnsupportedOperationError(
            f"{self!r} cannot take snapshots (supports_snapshots=False): "
            f"{self._server_answer()}")

    @network_errors_as
    def _server_answer(self) -> str:
        """Why the server gives this store no transactions: what ``hello`` said."""
        if self._why_no_transactions is None:
            hello = self._client.admin.command("hello")
            try:
                build = self._client.admin.command("buildInfo")
            except _import_pymongo().errors.OperationFailure:
                build = {}  # not allowed for this user: hello is enough
            self._why_no_transactions = _why_no_transactions(hello, build)
        return self._why_no_transactions

    # ------------------------------------------------------------- lifecycle
    @network_errors_as
    def _close(self) -> None:
        if self._shared is not None:
            self._shared.release()
        elif self._owns_client:
            self._client.close()

    @property
    def client(self) -> Any:
        """The ``pymongo.MongoClient`` the store talks through."""
        return self._client

    @property
    def collection(self) -> Any:
        """The ``pymongo`` collection holding one document per key."""
        return self._docs

    def _location(self) -> Any:
        return ("mongodb", self._seeds, self._database_name, self._collection_name)

    def _describe(self) -> str:
        return f"{self._where} {self._database_name}.{self._collection_name}"

    def _params(self) -> dict[str, Any]:
        if self._url is None:
            raise TypeError(
                f"cannot pickle {self!r}: it was built from a ready MongoClient, whose "
                "credentials and options cannot be recovered; build the store from a URL "
                "(MongoDBStore(url, database=..., collection=..., **client_kwargs)) to pickle it"
            )
        return {"url": self._url, "database": self._database_name,
                "collection": self._collection_name, "connect_timeout": self._connect_timeout,
                **self._client_kwargs}
