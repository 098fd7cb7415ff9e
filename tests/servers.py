"""Private servers for one test: redis-server, nx-27017 (MongoDB's wire protocol)
and the object-store emulators (moto's S3, fake-gcs-server, Azurite's blob
service, a static HTTP file server) on free loopback ports, never the shared ones
of scripts/services (other tests may be using those at the same time).

Each server can be stopped (SIGTERM), killed (SIGKILL, nothing flushed) and
started again on the same port, so a test can take the network away in the
middle of a call and give it back.  ``start`` returns only once the server
answers a real command (PING / ``ping``), not merely once its port accepts.

Examples
--------
In a test module (tests/conftest.py registers this module as a plugin, so its
fixtures need no import)::

    def test_restart(private_redis):
        server = private_redis("--requirepass", "pw")
        url = server.url("pw")
        server.kill()
        server.start()             # same port

    def test_dead_s3(private_s3):
        server = private_s3()      # server.endpoint: http://127.0.0.1:PORT
        create_s3_bucket(server.endpoint, "bucket")
        server.kill()              # an emulator keeps its objects in memory:
        server.start()             # started again, it is empty

or, outside pytest::

    with redis_server(folder) as server:
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import http_answers, missing_peer

#: The repository (scripts/http_range_server.py lives below it).
REPO = Path(__file__).resolve().parents[1]

#: How long a server may take to answer after it was started.
START_SECONDS = 60


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Server:
    """A server process on 127.0.0.1:``port`` that can stop, be killed and start again."""

    name = "server"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = folder / "server.out"

    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        """True when the server answers a real command."""
        raise NotImplementedError

    def start(self) -> None:
        """Start (again, on the same port) and wait until the server answers."""
        assert self.process is None or self.process.poll() is not None, "already running"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.folder)
        deadline = time.monotonic() + START_SECONDS
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{self.name} on port {self.port} did not start:\n"
                                     + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 30 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: the server dies at once, flushing nothing."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


class RedisServer(_Server):
    """A private redis-server; ``options`` are redis-server's command-line options.

    No persistence unless the options ask for it (``--appendonly yes``).
    With ``tls`` the port speaks TLS (``--tls-port``) and the URL is ``rediss://``.
    """

    name = "redis-server"

    def __init__(self, folder: Path, *options: str, tls: bool = False,
                 password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_peer("redis-server is not installed (apt-get install redis-server)")
        super().__init__(folder)
        self.binary, self.options, self.tls = binary, list(options), tls
        self.password = password
        if password is not None:
            self.options += ["--requirepass", password]
        self.log = folder / "redis.log"

    def url(self, password: str = "") -> str:
        scheme = "rediss" if self.tls else "redis"
        auth = f":{password}@" if password else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port)]
        else:
            ports = ["--port", str(self.port)]
        return [self.binary, "--bind", "127.0.0.1", *ports, "--save", "", "--appendonly", "no",
                "--dir", str(self.folder), *self.options]

    def answers(self) -> bool:
        if self.tls:  # a TLS handshake needs the test's CA: an accepting port will do
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", self.port), 1):
                return True
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                reply = conn.recv(1024)
        except OSError:
            return False
        # PONG, or NOAUTH from a server with a password: either way it answers
        # (a server still loading its data says LOADING).
        return reply.startswith((b"+PONG", b"-NOAUTH"))


class RedisClusterNodes:
    """A private Redis Cluster: ``masters`` primaries (and ``replicas`` per primary).

    Each node is a ``RedisServer`` in its own folder with its own data and
    cluster-bus ports (``--cluster-port``), so a test can kill one and start
    it again on the same ports; its ``nodes.conf`` survives, so it rejoins.
    ``url`` is the ``redis+cluster://`` URL naming every node.
    """

    def __init__(self, folder: Path, masters: int = 3, replicas: int = 0,
                 node_timeout_ms: int = 2000) -> None:
        self.nodes: list[RedisServer] = []
        for index in range(masters * (1 + replicas)):
            node = RedisServer(folder / f"node{index}")
            node.options += ["--cluster-enabled", "yes", "--cluster-port", str(free_port()),
                             "--cluster-config-file", "nodes.conf",
                             "--cluster-node-timeout", str(node_timeout_ms)]
            self.nodes.append(node)
        self.replicas = replicas

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/"

    def start(self) -> None:
        """Start every node, join them (redis-cli --cluster create), wait for cluster_state:ok."""
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas",
                        str(self.replicas), "--cluster-yes"], check=True,
                       capture_output=True, timeout=START_SECONDS)
        self.wait_ok()

    def state(self, node: RedisServer) -> str:
        """A node's ``cluster_state`` (``ok``, ``fail``), or ``down`` if it does not answer."""
        try:
            done = subprocess.run(["redis-cli", "-p", str(node.port), "cluster", "info"],
                                  capture_output=True, text=True, timeout=5, check=False)
        except subprocess.TimeoutExpired:
            return "down"
        for line in done.stdout.splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return "down"

    def synced(self, node: RedisServer) -> bool:
        """True for a primary, and for a replica whose link to its primary is up."""
        import redis

        with contextlib.closing(redis.Redis(port=node.port, socket_timeout=5)) as client:
            info = client.info("replication")
        return info.get("role") == "master" or info.get("master_link_status") == "up"

    def wait_ok(self) -> None:
        """Wait until every running node reports cluster_state:ok and every replica is
        in sync with its primary (one that never synced may not take over)."""
        deadline = time.monotonic() + START_SECONDS
        running = [n for n in self.nodes if n.process is not None]
        while any(self.state(node) != "ok" or not self.synced(node) for node in running):
            if time.monotonic() > deadline:
                raise AssertionError("the private Redis Cluster did not reach cluster_state:ok: "
                                     + str({n.port: self.state(n) for n in running}))
            time.sleep(0.1)

    def role(self, node: RedisServer) -> tuple[str, int | None]:
        """``("master", None)`` or ``("slave", port of its primary)`` from ``ROLE``."""
        import redis

        with contextlib.closing(redis.Redis(port=node.port, socket_timeout=5)) as client:
            answer = client.execute_command("ROLE")
        role = answer[0].decode() if isinstance(answer[0], bytes) else answer[0]
        return (role, int(answer[2])) if role == "slave" else (role, None)

    def primaries(self) -> list[RedisServer]:
        return [node for node in self.nodes
                if node.process is not None and self.role(node)[0] == "master"]

    def replicas_of(self, primary: RedisServer) -> list[RedisServer]:
        return [node for node in self.nodes if node is not primary and node.process is not None
                and self.role(node) == ("slave", primary.port)]

    def wait_promoted(self, replica: RedisServer) -> None:
        """Wait until ``replica`` has taken over as a primary and the cluster is ok again."""
        deadline = time.monotonic() + START_SECONDS
        while self.role(replica)[0] != "master":
            if time.monotonic() > deadline:
                raise AssertionError(f"the replica on port {replica.port} was not promoted")
            time.sleep(0.1)
        self.wait_ok()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()


def nx_27017() -> str:
    """The nx-27017 command (``$ZSTORES_NX_27017``, beside this Python, or on PATH)."""
    for candidate in (os.environ.get("ZSTORES_NX_27017"),
                      str(Path(sys.executable).parent / "nx-27017"), shutil.which("nx-27017")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    missing_peer("nx-27017 is not installed (pip install nx-27017)")
    raise AssertionError("unreachable")


class MongoServer(_Server):
    """A private nx-27017, its data in a file (kept across restarts)."""

    name = "nx-27017"

    def __init__(self, folder: Path) -> None:
        self.binary = nx_27017()
        super().__init__(folder)
        self.url = f"mongodb://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [self.binary, "--db", str(self.folder / "data.db"), "--host", "127.0.0.1",
                "-p", str(self.port), "--pid-file", str(self.folder / "server.pid"),
                "--log-file", str(self.folder / "server.log")]

    def answers(self) -> bool:
        import pymongo

        client = pymongo.MongoClient(self.url, serverSelectionTimeoutMS=300)
        try:
            client.admin.command("ping")
            return True
        except pymongo.errors.PyMongoError:
            return False
        finally:
            client.close()


# ------------------------------------------------------- object-store emulators
#: moto and fake-gcs-server take any credentials; these are what the tests
#: pass where a client insists on some.
S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION = "testing", "testing", "us-east-1"
#: Azurite's public development account and its well-known key (Microsoft
#: publishes both; Azurite checks request signatures against them).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")


def _installed(override: str | None, relative: tuple[str, ...], hint: str) -> str:
    """An emulator's executable: ``override`` (from an environment variable), else
    below this repository, else below the repository whose ``.venv`` runs the
    tests (a git worktree has no emulators of its own)."""
    candidates = [override] + [str(root.joinpath(*relative))
                               for root in (REPO, Path(sys.prefix).parent)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    missing_peer(f"{relative[-1]} is not installed ({hint})")
    raise AssertionError("unreachable")


def emulators_bin(name: str) -> str:
    """An executable of .venv-emulators (``$ZSTORES_EMULATORS_VENV``): moto_server ..."""
    venv = os.environ.get("ZSTORES_EMULATORS_VENV")
    return _installed(str(Path(venv) / "bin" / name) if venv else None,
                      (".venv-emulators", "bin", name),
                      "scripts/setup-env installs it in .venv-emulators, "
                      "or set ZSTORES_EMULATORS_VENV")


def unique_name(prefix: str = "zst") -> str:
    """A fresh bucket or container name: lower case, digits, hyphens, 3 to 63 long."""
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


class _HttpServer(_Server):
    """An emulator speaking HTTP on ``endpoint``; it answers once ``probe`` does."""

    probe = "/"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        return http_answers(self.endpoint + self.probe)


class MotoS3Server(_HttpServer):
    """A private moto_server (S3 and the rest of AWS), in memory."""

    name = "moto_server"

    def command(self) -> list[str]:
        return [emulators_bin("moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]


class GcsEmulator(_HttpServer):
    """A private fake-gcs-server (GCS's JSON API), in memory, plain HTTP."""

    name = "fake-gcs-server"
    probe = "/storage/v1/b"

    def command(self) -> list[str]:
        address = f"127.0.0.1:{self.port}"
        # The same options as scripts/services (which says why).
        return [emulators_bin("fake-gcs-server"), "-backend", "memory", "-scheme", "http",
                "-host", "127.0.0.1", "-port", str(self.port),
                "-external-url", f"http://{address}", "-public-host", address,
                "-log-level", "warn"]


class AzuriteServer(_HttpServer):
    """A private Azurite blob service, in memory; ``endpoint`` ends in the account."""

    name = "azurite-blob"
    probe = "?comp=list"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def command(self) -> list[str]:
        azurite = _installed(os.environ.get("ZSTORES_AZURITE_BLOB"),
                             (".node", "node_modules", ".bin", "azurite-blob"),
                             "scripts/setup-env installs it in .node/, or set ZSTORES_AZURITE_BLOB")
        # The same options as scripts/services (which says why).
        return [azurite, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry",
                "--silent"]


class HttpFileServer(_HttpServer):
    """A private scripts/http_range_server.py serving ``root`` (``folder/www``) read-only."""

    name = "http_range_server"

    def __init__(self, folder: Path, delay_ms: float = 0.0) -> None:
        super().__init__(folder)
        self.root = folder / "www"
        self.root.mkdir(exist_ok=True)
        self.delay_ms = delay_ms

    def requests(self, reset: bool = False) -> dict[str, int]:
        """``{"total", "peak"}``: requests served, and the most in flight at once."""
        with urllib.request.urlopen(self.endpoint + "/.requests" + ("?reset=1" if reset else ""),
                                    timeout=30) as answer:
            return json.load(answer)

    @property
    def url(self) -> str:
        return self.endpoint + "/"

    def command(self) -> list[str]:
        return [emulators_bin("python"), str(REPO / "scripts" / "http_range_server.py"),
                "--port", str(self.port), "--root", str(self.root),
                "--delay-ms", str(self.delay_ms)]


def create_s3_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on an S3 emulator (an unsigned PUT: moto checks no signature)."""
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/{bucket}", method="PUT")
    urllib.request.urlopen(request, timeout=30).close()


def create_gcs_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the GCS emulator (its JSON API, no credentials)."""
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/storage/v1/b?project=zstores-tests", method="POST",
        data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()


def create_azure_container(endpoint: str, container: str) -> None:
    """Create ``container`` on Azurite (azure-storage-blob, signed with the dev account key)."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient(endpoint, credential={"account_name": AZURITE_ACCOUNT,
                                                      "account_key": AZURITE_KEY})
    with service:
        try:
            service.create_container(container)
        except ResourceExistsError:
            pass  # a retry after a slow answer (the name is new: the first try made it)


@contextlib.contextmanager
def redis_server(folder: Path, *options: str, **kwargs: object) -> Iterator[RedisServer]:
    """A started private redis-server, stopped (killed if need be) on exit."""
    server = RedisServer(folder, *options, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.kill()


@contextlib.contextmanager
def mongo_server(folder: Path) -> Iterator[MongoServer]:
    """A started private nx-27017, stopped on exit."""
    server = MongoServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers: the port yielded.

    The kernel completes the TCP handshake for the listening socket's backlog,
    so a client connects at once and then waits for a reply that never comes:
    only the client's own timeouts end the wait.
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """``start(*options, tls=False, password=None)``: a started private redis-server."""
    servers: list[RedisServer] = []

    def start(*options: str, tls: bool = False, password: str | None = None) -> RedisServer:
        server = RedisServer(tmp_path / f"redis{len(servers)}", *options, tls=tls,
                             password=password)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def private_redis_cluster(tmp_path: Path) -> Iterator[Callable[..., RedisClusterNodes]]:
    """``start(masters=3, replicas=0)``: a started private Redis Cluster (``.url``, ``.nodes``)."""
    clusters: list[RedisClusterNodes] = []

    def start(masters: int = 3, replicas: int = 0) -> RedisClusterNodes:
        cluster = RedisClusterNodes(tmp_path / f"redis-cluster{len(clusters)}", masters, replicas)
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in clusters:
        cluster.kill()


@pytest.fixture
def private_mongodb(tmp_path: Path) -> Iterator[Callable[[], MongoServer]]:
    """``start()``: a started private nx-27017 keeping its data in a file."""
    servers: list[MongoServer] = []

    def start() -> MongoServer:
        server = MongoServer(tmp_path / f"mongodb{len(servers)}")
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


def _private_servers(tmp_path: Path, kind: type[_Server]) -> Iterator[Callable[..., _Server]]:
    """A fixture's ``start()`` for ``kind``; every server started is killed afterwards."""
    servers: list[_Server] = []

    def start(**options: Any) -> _Server:
        server = kind(tmp_path / f"{kind.name}{len(servers)}", **options)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def private_s3(tmp_path: Path) -> Iterator[Callable[[], MotoS3Server]]:
    """``start()``: a started private moto_server (``.endpoint``), killable and restartable."""
    yield from _private_servers(tmp_path, MotoS3Server)  # type: ignore[misc]


@pytest.fixture
def private_gcs(tmp_path: Path) -> Iterator[Callable[[], GcsEmulator]]:
    """``start()``: a started private fake-gcs-server (``.endpoint``)."""
    yield from _private_servers(tmp_path, GcsEmulator)  # type: ignore[misc]


@pytest.fixture
def private_azure(tmp_path: Path) -> Iterator[Callable[[], AzuriteServer]]:
    """``start()``: a started private Azurite blob service (``.endpoint`` ends in the account)."""
    yield from _private_servers(tmp_path, AzuriteServer)  # type: ignore[misc]


@pytest.fixture
def private_http(tmp_path: Path) -> Iterator[Callable[..., HttpFileServer]]:
    """``start(delay_ms=0)``: a started private HTTP file server (``.url`` serves ``.root``;
    ``.requests()`` counts requests and the most in flight at once)."""
    yield from _private_servers(tmp_path, HttpFileServer)  # type: ignore[misc]


def chain_text(error: BaseException) -> str:
    """str and repr of an error and of everything chained to it, and its traceback.

    What a password must never appear in: the network stores' tests search it.
    """
    shown, seen, current = [], set(), [error]
    while current:
        item = current.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        shown += [str(item), repr(item)]
        current += [item.__cause__, item.__context__]
    return "\n".join(shown) + "".join(traceback.format_exception(error))
