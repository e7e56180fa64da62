"""Shared by the live runtime's tests: whether this kernel reads a GSO run in one read."""

from __future__ import annotations

import socket
import sys


def kernel_has_gro() -> bool:
    """UDP GRO (``setsockopt(SOL_UDP, UDP_GRO)``, Linux 5.0+), probed on a fresh socket."""
    if not sys.platform.startswith("linux") or not hasattr(socket, "CMSG_SPACE"):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.setsockopt(socket.IPPROTO_UDP, 104, 1)  # UDP_GRO
        except OSError:
            return False
    return True
