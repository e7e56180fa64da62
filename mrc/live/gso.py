"""Linux UDP generic segmentation offload (GSO) for the live runtime's senders.

One ``sendmsg`` with the ``UDP_SEGMENT`` option hands the kernel a run of equal-size
datagrams in one buffer; the kernel cuts it back into exactly those datagrams, in order, for a
fraction of a syscall each. The receiver sees ordinary datagrams. Hosts send the DATA a port
kick pulls this way, and the fabric what it delivers to one host in one pass; where GSO is
missing (not Linux >= 4.18) or refused (a route whose MTU is below the segment), each
datagram goes out on its own.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Sequence

#: Linux's UDP_SEGMENT socket option (Python 3.11's socket module does not name it).
UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)
#: One GSO send carries at most 64 segments and one UDP datagram's worth of bytes.
MAX_SEGMENTS = 64
MAX_BYTES = 65_000
_SEGMENT = struct.Struct("=H")  # the option's value: a native u16


class Refused(OSError):
    """The kernel refused GSO on this socket for good (not a full buffer)."""


def supported(sock: socket.socket) -> bool:
    """Whether ``sock`` accepts ``UDP_SEGMENT`` (Linux >= 4.18, UDP)."""
    try:
        sock.getsockopt(socket.IPPROTO_UDP, UDP_SEGMENT)
    except OSError:
        return False
    return True


def max_run(size: int) -> int:
    """How many datagrams of ``size`` bytes one send may carry."""
    return max(1, min(MAX_SEGMENTS, MAX_BYTES // max(size, 1)))


def send_run(sock: socket.socket, datagrams: Sequence[bytes | bytearray], size: int,
             address: tuple[str, int]) -> bool:
    """Send ``datagrams`` (each ``size`` bytes, at most :func:`max_run`) in one call.

    True when the kernel took them all; False when the socket buffer is full (send them one
    by one: what fits still goes out). Raises :class:`Refused` when the kernel will not do
    GSO here at all."""
    try:
        sock.sendmsg(datagrams, [(socket.IPPROTO_UDP, UDP_SEGMENT, _SEGMENT.pack(size))], 0,
                     address)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.ENOBUFS):
            return False
        raise Refused(exc.errno, f"UDP GSO refused: {exc}") from exc
    return True


def runs(datagrams: Sequence[bytes | bytearray]) -> list[list[bytes | bytearray]]:
    """Split ``datagrams`` into consecutive runs of equal size that one send may carry
    (order kept: concatenating the runs gives ``datagrams`` back)."""
    out: list[list[bytes | bytearray]] = []
    run: list[bytes | bytearray] = []
    size = -1
    limit = 0
    for data in datagrams:
        n = len(data)
        if n != size or len(run) >= limit:
            if run:
                out.append(run)
            run = []
            size = n
            limit = max_run(n)
        run.append(data)
    if run:
        out.append(run)
    return out
