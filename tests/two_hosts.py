"""Two hosts as network namespaces, and the late-writer choreography played on them.

``two_hosts(subnet)`` makes namespaces R and A joined by a veth pair
(``<subnet>.1`` in R, ``<subnet>.2`` in A) and deletes them afterwards;
nothing changes in the test's own namespace.  ``late_write`` plays the
scene the fencing tests share: the writer on A announces its write and is
cut off (SIGSTOP, or R's end of the link down) as it leaves; the other
writer, on R, takes A's expired locks and adds 1 ten times; then A resumes
and says what became of its late write.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest


def ip(*arguments: str, namespace: str | None = None) -> None:
    """``ip ARGUMENTS``, inside ``namespace`` if given."""
    command = ["ip", *(["netns", "exec", namespace, "ip"] if namespace else []), *arguments]
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def _mac(namespace: str, device: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", namespace, "ip", "-j", "link", "show", "dev",
                           device], check=True, capture_output=True, text=True, timeout=30)
    return json.loads(done.stdout)[0]["address"]


@dataclass(frozen=True)
class Hosts:
    """Namespaces ``r`` and ``a``, R's end of the link (``link``), their addresses."""

    r: str
    a: str
    link: str
    address_r: str
    address_a: str

    def link_down(self) -> None:
        """Cut the link at R's end: A's packets are dropped (not refused) and wait."""
        ip("link", "set", self.link, "down", namespace=self.r)

    def link_up(self) -> None:
        ip("link", "set", self.link, "up", namespace=self.r)


def skip_without_namespaces(*programs: str) -> None:
    """Skip unless this runs as root with iproute2 (and ``programs``) installed."""
    if os.geteuid() != 0 or any(shutil.which(name) is None for name in ("ip", *programs)):
        pytest.skip(f"needs root and {', '.join(('iproute2', *programs))} to make network "
                    "namespaces")


@contextlib.contextmanager
def two_hosts(subnet: str) -> Iterator[Hosts]:
    """Namespaces R (``subnet``.1) and A (``subnet``.2) joined by a veth pair, for a with-block."""
    tag = uuid.uuid4().hex[:6]
    hosts = Hosts(f"zhr-{tag}", f"zha-{tag}", f"zr{tag}", f"{subnet}.1", f"{subnet}.2")
    made: list[str] = []
    try:
        for name in (hosts.r, hosts.a):
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
            made.append(name)
            ip("link", "set", "lo", "up", namespace=name)
        other_end = f"za{tag}"
        ip("link", "add", hosts.link, "netns", hosts.r, "type", "veth", "peer", "name",
           other_end, "netns", hosts.a)
        ip("addr", "add", f"{hosts.address_r}/30", "dev", hosts.link, namespace=hosts.r)
        ip("addr", "add", f"{hosts.address_a}/30", "dev", other_end, namespace=hosts.a)
        ip("link", "set", hosts.link, "up", namespace=hosts.r)
        ip("link", "set", other_end, "up", namespace=hosts.a)
        # Each host knows the other's link address for good: while the link is cut, a
        # reconnect's packets are dropped and wait, as over a real cable, instead of
        # failing with "no route to host" once a neighbour look-up times out (which a
        # cut lasting a few seconds on a loaded machine reached).
        ip("neigh", "replace", hosts.address_r, "lladdr", _mac(hosts.r, hosts.link), "dev",
           other_end, "nud", "permanent", namespace=hosts.a)
        ip("neigh", "replace", hosts.address_a, "lladdr", _mac(hosts.a, other_end), "dev",
           hosts.link, "nud", "permanent", namespace=hosts.r)
        yield hosts
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


@contextlib.contextmanager
def server_in(namespace: str, command: list[str], answers: Callable[[], bool],
              wait: float) -> Iterator[None]:
    """Run ``command`` in ``namespace`` until the block ends, once ``answers()`` is true."""
    server = subprocess.Popen(["ip", "netns", "exec", namespace, *command],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + wait
        while not answers():
            assert server.poll() is None, f"{command[0]} in {namespace} ended"
            assert time.monotonic() < end, f"{command[0]} did not answer in {namespace}"
            time.sleep(0.2)
        yield
    finally:
        server.kill()
        server.wait()


def python_in(namespace: str, module: str, *arguments: str) -> subprocess.Popen:
    """``module.netns_main(*arguments)`` in a Python process inside ``namespace``,
    talking JSON lines on its stdin and stdout."""
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.path.dirname(tests)])}
    code = f"import sys, {module}; {module}.netns_main(*sys.argv[1:])"
    return subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", code,
                             *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=environment)


def message(process: subprocess.Popen, wait: float) -> object:
    """The next JSON line ``process`` writes (it ending without one fails the test)."""
    line = process.stdout.readline()
    assert line, f"the writer ended ({process.wait(wait)}) without a word"
    return json.loads(line)


def late_write(hosts: Hosts, writer: subprocess.Popen, other: subprocess.Popen, cut: str,
               stop: Callable[[int], None], wait: float) -> tuple[str, str]:
    """The writer on A is cut off (``cut``: "sigstop" or "link-down") as its write leaves;
    the other writer adds 1 ten times meanwhile; A resumes.  Returns A's outcome and detail.
    """
    try:
        assert message(writer, wait) == "write"
        if cut == "sigstop":
            stop(writer.pid)  # ip netns exec runs the writer itself
        else:
            hosts.link_down()
        for process in (writer, other):
            process.stdin.write('"go"\n')
            process.stdin.flush()
        done, seen = message(other, wait)
        other.wait(wait)
        assert done == "done" and seen == [10] * 10
        if cut == "sigstop":
            os.kill(writer.pid, signal.SIGCONT)
        else:
            hosts.link_up()
        outcome, detail = message(writer, wait)
    finally:
        hosts.link_up()
        for process in (writer, other):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.stdin.close()
            process.wait(wait)
    return outcome, detail
