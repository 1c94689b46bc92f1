"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel considers free right now.

    All sockets stay bound until every port is picked, so the kernel cannot hand out one port twice;
    a tiny window remains between closing them and the components binding, which is acceptable here.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
