"""Local ports for the servers the tests (and the benchmarks) start: the one place that picks them.

Listening ports come from below Linux's ephemeral range (32768-60999): a port the kernel handed
out for a moment (bind to 0) is soon the local end of one of the suite's thousands of outgoing
connections, and a gateway then started on it failed with "Address already in use". Each port is
bind-checked when it is picked and never handed out twice in one process; two processes (xdist
workers, other suites on the machine) are kept apart by the bind check and the size of the range.
"""

from __future__ import annotations

import random
import socket

#: where listening ports are drawn from: above the well-known and common service ports, below the
#: ephemeral range
LISTEN_PORTS = (10000, 32000)
#: a Redis Cluster node also listens on its port + 10000 (the cluster bus): both below the range
BUS_OFFSET = 10000
_ATTEMPTS = 500
_handed_out: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A port nothing listens on now, never handed out twice in this process; ``with_bus``: its
    Redis Cluster bus port (+10000) is free too. Also what a test connects to for "refused"."""
    low, high = LISTEN_PORTS
    if with_bus:
        high -= BUS_OFFSET
    for _ in range(_ATTEMPTS):
        port = random.randint(low, high)
        if port in _handed_out or not _bindable(port):
            continue
        if with_bus and (port + BUS_OFFSET in _handed_out or not _bindable(port + BUS_OFFSET)):
            continue
        _handed_out.add(port)
        if with_bus:
            _handed_out.add(port + BUS_OFFSET)
        return port
    raise RuntimeError("no free local port below the ephemeral range")
