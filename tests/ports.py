"""A TCP port on 127.0.0.1 that nothing listens on, for the tests' servers and for the
"unreachable server" cases."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
