"""The sans-IO contract every transport (MRC, RoCE RC) implements, and the events they raise.

A queue pair never reads a clock or touches a socket. Drivers (the simulator's NIC model,
the live asyncio runtime) call it like this, in the spirit of aioquic's ``QuicConnection``:

* ``post_write(now, ...)``     the application posts an RDMA WRITE;
* ``receive(now, pkt)``        a packet for this QP arrived;
* ``handle_timer(now)``        the deadline from ``next_timer()`` passed;
* ``poll(now, plane)``         the NIC port of ``plane`` is idle: the next packet for it, or None
                               (data is pulled, so line-rate pacing belongs to the port);
* ``take_control()``           control packets (ACK, NACK, PROBE, PROBE_REPLY) to send now;
                               each names its port in ``pkt.plane``;
* ``next_timer()``             earliest deadline in picoseconds, or None;
* ``events``                   a deque of ``TransportEvent`` for the driver to drain.

``bytes_placed`` counts unique payload bytes placed in the receiver's memory (duplicates
excluded); drivers diff it to record goodput.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from mrc.packet import Packet

# EV states, as in NVIDIA's mrc.h
GOOD = "GOOD"
ASSUMED_BAD = "ASSUMED_BAD"
DENIED = "DENIED"


@dataclass(frozen=True, slots=True)
class TransportEvent:
    """Something a driver should log. ``time_ps`` is the ``now`` of the call that raised it."""

    time_ps: int
    kind: str  # see the EVENT_* names below
    qpn: int
    detail: dict[str, object] = field(default_factory=dict)


EVENT_MESSAGE_COMPLETED = "message_completed"  # detail: msg_id, bytes, checksum, posted_ps
#: Requester side: every byte of a WRITE was acknowledged (detail: msg_id, bytes, posted_ps,
#: dst); the receiver raises EVENT_MESSAGE_COMPLETED.
EVENT_SEND_COMPLETED = "send_completed"
EVENT_EV_STATE = "ev_state"  # detail: ev, old, new, reason
EVENT_QP_ERROR = "qp_error"  # detail: reason
EVENT_RETRY = "retry"  # detail: retry count, psn (an RC local ACK timeout fired)
EVENT_REROUTE = "reroute"  # detail: old/new path (RC dynamic-routing model)
#: Connection-level event of a striped RC connection: it failed because one of its QPs
#: errored (detail: reason, failed_qpn, failed_messages, aborted_qpns = the other QPs the
#: abort stopped). Kept apart from EVENT_QP_ERROR so that a driver logging both QP and
#: connection events does not count one QP error twice.
EVENT_CONNECTION_FAILED = "connection_failed"


class PathChoice(NamedTuple):
    """One EV of a QP: its plane, its T1 (None for hosts under the same T0: no T1 on the
    path) and the 128-bit destination address it selects toward the peer. The driver, which
    knows the fabric, builds them; the QP only reads them."""

    ev: int
    plane: int
    t1: int | None
    address: int


class QueuePair(Protocol):
    """What drivers rely on; both transports satisfy it."""

    qpn: int
    host: int
    peer: int
    events: deque[TransportEvent]
    bytes_placed: int
    failed: bool

    def post_write(self, now: int, msg_id: int, length: int, *,
                   payload: bytes | None = None) -> None: ...

    def receive(self, now: int, pkt: Packet) -> None: ...

    def handle_timer(self, now: int) -> None: ...

    def poll(self, now: int, plane: int) -> Packet | None: ...

    def take_control(self) -> list[Packet]: ...

    def next_timer(self) -> int | None: ...
