"""The live runtime's UDP sockets: where they may bind, how a wake-up reads a burst, and
what the kernel dropped.

The fabric server and every host read what waits on their socket after each wake-up (one
loop iteration per datagram is what costs most in asyncio), bounded so timers still run; they
bind the loopback only unless the user allows otherwise; and they report the datagrams the
kernel dropped on full buffers, losses the model did not make.

Hosts and fabric send equal-size runs of datagrams with UDP GSO (:mod:`mrc.live.gso`). On
Linux their sockets also ask for UDP GRO (:func:`take_reads`): a run then arrives as one read
with its segment size beside it, and :func:`read_more` cuts it back into the very same
datagrams, in order. That saves a system call per datagram and the kernel's segmenting of
the run; asyncio's own reads, which would hand over a run glued together, stop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

#: Largest datagram accepted (an IPv6 packet cannot be longer without jumbograms); a GRO read
#: (a GSO run, at most 64 KB) fits too.
MAX_DATAGRAM = 65_535
#: Datagrams read per wake-up beyond the first (then the loop gets its turn).
RX_BATCH = 64
#: ``SOL_UDP`` / ``UDP_GRO`` of ``<netinet/udp.h>`` (Linux 5.0+), and the ancillary space
#: the segment size takes (an int).
_SOL_UDP = 17
_UDP_GRO = 104
_GRO_SPACE = socket.CMSG_SPACE(4) if hasattr(socket, "CMSG_SPACE") else 0


def read_more(sock: socket.socket, burst: list[tuple[bytes, Any]], gro: bool = False,
              limit: int = RX_BATCH) -> int:
    """Append to ``burst`` what else waits on ``sock`` now (reads stop once ``limit`` more
    datagrams came); returns how many reads failed instead (an ICMP error queued on the
    socket). ``gro``: the socket has UDP GRO on (:func:`take_reads`), and a read that returns
    a run is cut into its datagrams by the segment size the kernel gives with it."""
    errors = 0
    goal = len(burst) + limit
    for _ in range(limit):
        try:
            if not gro:
                burst.append(sock.recvfrom(MAX_DATAGRAM))
                continue
            data, ancillary, _, addr = sock.recvmsg(MAX_DATAGRAM, _GRO_SPACE)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            errors += 1
            continue
        size = 0
        for level, kind, value in ancillary:
            if level == _SOL_UDP and kind == _UDP_GRO and len(value) >= 4:
                size = int.from_bytes(value[:4], sys.byteorder)
        if 0 < size < len(data):
            burst.extend([(data[i:i + size], addr) for i in range(0, len(data), size)])
        else:
            burst.append((data, addr))
        if len(burst) >= goal:
            break
    return errors


def take_reads(sock: socket.socket, loop: asyncio.AbstractEventLoop,
               readable: Callable[[socket.socket], None],
               transport: asyncio.BaseTransport) -> socket.socket | None:
    """Turn UDP GRO on for ``sock`` and read it from now on through a second descriptor of
    it (returned), on which the loop calls ``readable(that socket)``, to read with
    :func:`read_more` (``gro=True``); asyncio's ``transport`` on ``sock`` stops reading (its
    reads would glue a run together) and still sends. None, and nothing changed, where the
    kernel has no UDP GRO: reads stay one datagram each. :func:`release_reads` undoes it."""
    if not sys.platform.startswith("linux") or not _GRO_SPACE:
        return None
    try:
        sock.setsockopt(_SOL_UDP, _UDP_GRO, 1)
    except OSError:
        return None
    transport.pause_reading()  # type: ignore[attr-defined]
    reader = sock.dup()  # (the loop refuses a reader on a descriptor a transport owns)
    loop.add_reader(reader.fileno(), readable, reader)
    return reader


def release_reads(loop: asyncio.AbstractEventLoop, reader: socket.socket | None) -> None:
    """Stop the reads :func:`take_reads` started and close its descriptor (idempotent)."""
    if reader is None or reader.fileno() < 0:
        return
    if not loop.is_closed():
        loop.remove_reader(reader.fileno())
    reader.close()


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
