"""The live runtime's UDP sockets: where they may bind, how a wake-up reads a burst, and
what the kernel dropped.

The fabric server and every host read what waits on their socket after each wake-up (one
loop iteration per datagram is what costs most in asyncio), bounded so timers still run; they
bind the loopback only unless the user allows otherwise; and they report the datagrams the
kernel dropped on full buffers, losses the model did not make.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

#: Largest datagram accepted (an IPv6 packet cannot be longer without jumbograms).
MAX_DATAGRAM = 65_535
#: Datagrams read per wake-up beyond the first (then the loop gets its turn).
RX_BATCH = 64


def read_more(sock: socket.socket, burst: list[tuple[bytes, Any]]) -> int:
    """Append to ``burst`` what else waits on ``sock`` now (at most ``RX_BATCH``); returns how
    many reads failed instead (an ICMP error queued on the socket)."""
    errors = 0
    for _ in range(RX_BATCH):
        try:
            burst.append(sock.recvfrom(MAX_DATAGRAM))
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            errors += 1
    return errors


def udp_kernel_drops(sock: socket.socket | None) -> int | None:
    """Datagrams the kernel dropped on ``sock`` (full receive buffer): losses outside the
    model, so runs report them. Linux only (``/proc/net/udp*``); None elsewhere."""
    if sock is None or sock.fileno() < 0:
        return None
    try:
        inode = str(os.fstat(sock.fileno()).st_ino)
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 12 and cols[9] == inode:
                        return int(cols[-1])
    except (OSError, ValueError):
        return None
    return None


def check_bind_address(host: str, allow_non_loopback: bool) -> None:
    """Refuse to listen beyond this machine unless the user said so explicitly."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_non_loopback:
        raise PermissionError(
            f"refusing to bind {host!r}: the live runtime uses loopback only unless "
            "allow_non_loopback (--allow-non-loopback) is given")
