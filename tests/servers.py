"""Private servers for one test: redis-server and nx-27017 (MongoDB's wire protocol)
on free loopback ports, never the shared ones of scripts/services (other tests
may be using those at the same time).

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

or, outside pytest::

    with redis_server(folder) as server:
        ...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import missing_peer

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
                                            stdin=subprocess.DEVNULL)
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
