"""Loopback ports for the servers deltaport starts (the Spark Connect server, the embedded broker),
and how to tell that a port is served by *our* process.

What flows through: a host goes in, a port number comes out; a (pid, port) goes in, whether
that process listens there comes out.

What this module guarantees:

* `free_port()` picks a port below the kernel's ephemeral range (``ip_local_port_range``).
  A port inside it can be taken, before our server binds it, by the local end of any outgoing
  connection; worse, a client polling ``127.0.0.1:P`` for a server not yet up can be given P as
  its own local port and connect to itself (a TCP self-connect), so "the port answers" becomes
  true with nobody listening. Both happened in CI: a Spark server lost its port, the readiness
  poll saw an answer, and every test then waited on an address nobody served.
* `listens(pid, port)` reads ``/proc``: True only for a socket in LISTEN state on `port` held
  by process `pid`; None where ``/proc`` cannot tell (not Linux). `serves(pid, port)` is the
  check a starter waits on: `listens`, or where it cannot tell, that the port answers.
* `clients(port)` counts the connections a server on `port` holds open (how the embedded Spark
  server's keeper tells that nobody uses it), also from ``/proc``; None where it cannot tell.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

__all__ = ["answers", "clients", "free_port", "listens", "serves"]

_FALLBACK_EPHEMERAL_LOW = 32768  # Linux's default low end
_LOWEST = 10000  # below this: well-known services and what users configure by hand


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_LOW


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now, outside the ephemeral range when the kernel leaves room
    below it (else any free port). Still only free *now*: a starter must verify that its own
    process bound it (`listens`) and retry on another port when it lost it."""
    low = _ephemeral_low()
    candidates = range(_LOWEST, low) if low - _LOWEST >= 1000 else range(0)
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _sockets(port: int, state: str) -> set[str]:
    """Inodes of the TCP sockets whose local end is `port`, in `state` (0A: LISTEN, 01: ESTABLISHED)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT
            if len(fields) > 9 and fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def clients(port: int) -> int | None:
    """How many established connections a server on local `port` has (None: no ``/proc``)."""
    if not Path("/proc/net/tcp").exists():
        return None
    return len(_sockets(port, "01"))


def listens(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a listening TCP socket on `port` (any address); None when
    this system has no ``/proc`` to tell."""
    if not Path("/proc/net/tcp").exists():
        return None
    inodes = _sockets(port, "0A")
    if not inodes:
        return False
    try:
        fds = list(os.scandir(f"/proc/{pid}/fd"))
    except PermissionError:  # another user's process: /proc cannot tell
        return None
    except OSError:  # gone
        return False
    for fd in fds:
        try:
            link = os.readlink(fd.path)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def answers(port: int, timeout: float = 1.0, host: str = "127.0.0.1") -> bool:
    """Whether anything accepts a connection at host:port (not who: see `serves`)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def serves(pid: int, port: int) -> bool:
    """Whether process `pid` listens on loopback `port`; where ``/proc`` cannot tell, whether the
    port answers at all."""
    held = listens(pid, port)
    return answers(port) if held is None else held
