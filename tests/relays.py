"""TCP relays on loopback between a client and a server the tests started: a network
the test controls, so a partition or a dead link happens where the test puts it.

``FreezingRelay`` holds every byte while frozen (a partition that heals),
``CountingRelay`` also tells which held requests were answered after it healed;
``CuttingRelay`` forwards a fixed number of the client's bytes and then none
(a link that dies midway, at a point fixed by construction, not by timing).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit


class FreezingRelay:
    """A TCP relay on loopback to a server's port: ``freeze()`` holds every byte until ``heal()``.

    As a network partition does: what a client sends while frozen is neither
    lost nor delivered; it arrives when the link heals, however late.
    """

    def __init__(self, port: int) -> None:
        self._target = port
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[Any] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()  # no server (killed): the client's connection ends at once
                continue
            self._sockets += [client, server]
            for source, target, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(source, target, upstream),
                                 daemon=True).start()

    def _pump(self, source: Any, target: Any, upstream: bool) -> None:
        """Copies ``source`` to ``target`` (``upstream``: from the client to the server)."""
        link = id(source if upstream else target)  # the client's socket names the connection
        try:
            while data := source.recv(1 << 16):
                self._seen(link, upstream)
                self._open.wait()
                target.sendall(data)
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _seen(self, link: int, upstream: bool) -> None:
        """Called as each chunk of connection ``link`` arrives, before it may pass."""

    def freeze(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()


class CountingRelay(FreezingRelay):
    """A ``FreezingRelay`` that also tells which connections had bytes held while frozen
    (``held``) and which got an answer from the server after it healed (``answered``), so
    a test knows when every request held by the cut has reached the server and been
    answered: the held requests of a client that gave up (a short timeout) too."""

    def __init__(self, port: int) -> None:
        self.held: set[int] = set()
        self.answered: set[int] = set()
        self.frozen = False
        super().__init__(port)

    def freeze(self) -> None:
        self.frozen = True
        super().freeze()

    def heal(self) -> None:
        self.frozen = False
        super().heal()

    def _seen(self, link: int, upstream: bool) -> None:
        if upstream and self.frozen:
            self.held.add(link)
        elif not upstream and not self.frozen:
            self.answered.add(link)

    def delivered(self) -> bool:
        """Whether every connection that had bytes held has had an answer since."""
        return self.held <= self.answered


class CuttingRelay(FreezingRelay):
    """A relay that passes the first ``budget`` bytes its clients send (all connections
    together) and then nothing: the byte that would exceed it, and every later one, is
    held until ``close()``, which drops them.  Answers to what got through still flow.

    A client writing more than ``budget`` bytes therefore stops midway by construction:
    its last requests reach the server cut short (an HTTP body missing its end, a
    command missing its last bytes, which the server never completes), and it waits
    for answers that never come.  ``cut`` is set at that moment; the test then kills
    the client, as a crash would, or the server.  When the server's side of a
    connection ends after the cut, the client's side is reset, as a dead server's
    kernel would answer: a client blocked sending sees the error at once.

    Examples
    --------
    >>> import socket
    >>> server = socket.create_server(("127.0.0.1", 0))
    >>> relay = CuttingRelay(server.getsockname()[1], budget=3)
    >>> client = socket.create_connection(("127.0.0.1", relay.port))
    >>> accepted, _ = server.accept()
    >>> client.sendall(b"abcdef")
    >>> relay.cut.wait(10), accepted.recv(10)
    (True, b'abc')
    >>> relay.close(); client.close(); accepted.close(); server.close()
    """

    def __init__(self, port: int, budget: int) -> None:
        self.cut = threading.Event()
        self._closed = threading.Event()
        self._budget = budget
        self._spent = threading.Lock()
        super().__init__(port)

    def _pump(self, source: Any, target: Any, upstream: bool) -> None:
        if not upstream:
            super()._pump(source, target, upstream)  # the server's answers pass
            if self.cut.is_set():
                _reset(target)  # the server is gone (killed, or it dropped the connection)
            return
        try:
            while data := source.recv(1 << 16):
                target.sendall(self._allowed(data))
                if self.cut.is_set():
                    self._closed.wait()  # the rest stays unread until close()
                    return
        except OSError:
            pass

    def _allowed(self, data: bytes) -> bytes:
        """The part of ``data`` within the budget; the cut made when it runs out."""
        with self._spent:
            passed = data[: self._budget]
            self._budget -= len(passed)
            if len(passed) < len(data):
                self.cut.set()
            return passed

    def close(self) -> None:
        self._closed.set()
        super().close()


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST), not an orderly end: its peer's next send fails."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


def through(url: str, relay: FreezingRelay) -> str:
    """``url`` of a server on loopback, reaching it through ``relay`` instead (its port).

    Examples
    --------
    >>> class Relay: port = 4242
    >>> through("redis://127.0.0.1:6379/0", Relay())
    'redis://127.0.0.1:4242/0'
    """
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.port}",
                                                                 f":{relay.port}")))
