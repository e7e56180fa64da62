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

import builtins
from collections import deque
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import ClassVar, NamedTuple, Protocol

from mrc.packet import Packet


class EvState(StrEnum):
    """The state of an EV, as in NVIDIA's ``mrc.h``. A ``StrEnum``: each member is the
    string it names, so event logs, tables and messages print it as they always did."""

    GOOD = "GOOD"
    ASSUMED_BAD = "ASSUMED_BAD"
    DENIED = "DENIED"


GOOD = EvState.GOOD
ASSUMED_BAD = EvState.ASSUMED_BAD
DENIED = EvState.DENIED

#: The ``kind`` of each event, as event logs print it.
EVENT_MESSAGE_COMPLETED = "message_completed"
EVENT_SEND_COMPLETED = "send_completed"
EVENT_EV_STATE = "ev_state"
EVENT_QP_ERROR = "qp_error"
EVENT_RETRY = "retry"
EVENT_CONNECTION_FAILED = "connection_failed"


@dataclass(slots=True)
class TransportEvent:
    """Something a driver should log: one subclass per ``kind``, its fields the event's
    detail. ``time_ps`` is the ``now`` of the call that raised it."""

    kind: ClassVar[str] = ""
    time_ps: int
    qpn: int

    def detail(self) -> dict[str, object]:
        """The fields after ``time_ps`` and ``qpn``, by name, for an event log row. A field
        whose default is None (an optional extra) is left out while it is None."""
        out: dict[str, object] = {}
        for f in fields(self)[2:]:
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            out[f.name] = value
        return out


@dataclass(slots=True)
class MessageCompleted(TransportEvent):
    """A WRITE was placed whole at the receiver. ``posted_ps``: MRC, the earliest send time
    of its packets (the receiver cannot know the post time); ``src``, ``src_qpn``, ``imm``:
    MRC's receiver says who sent it and its immediate; ``data``: the payload, when real
    bytes were carried."""

    kind: ClassVar[str] = EVENT_MESSAGE_COMPLETED
    msg_id: int
    bytes: int
    checksum: int
    posted_ps: int
    src: int | None = None
    src_qpn: int | None = None
    imm: int | None = None
    data: builtins.bytes | None = None  # (``bytes`` is a field's name here)


@dataclass(slots=True)
class StripedMessageCompleted(MessageCompleted):
    """A striped RC connection's message, every chunk placed (``chunks``: (qpn, offset,
    length) in offset order) and its checksum checked against ``expected_checksum``
    (``ok``; a driver may narrow ``ok`` further, e.g. to messages it posted)."""

    chunks: list[tuple[int, int, int]] | None = None
    expected_checksum: int | None = None
    ok: bool = False


@dataclass(slots=True)
class SendCompleted(TransportEvent):
    """Requester side: every byte of a WRITE was acknowledged (the receiver raises
    :class:`MessageCompleted`). ``dst``: MRC's peer; ``ok``: a striped connection's verdict."""

    kind: ClassVar[str] = EVENT_SEND_COMPLETED
    msg_id: int
    bytes: int
    posted_ps: int
    dst: int | None = None
    ok: bool | None = None


@dataclass(slots=True)
class EvStateChanged(TransportEvent):
    """The EV event record of ``mrc_ctl.h`` (the EV, its port 1-based, the new state) plus
    its plane and T1, the old state and why; drop counts belong to an event CQ that
    overflows (:mod:`mrc.verbs`)."""

    kind: ClassVar[str] = EVENT_EV_STATE
    ev: int
    port: int
    plane: int
    t1: int | None
    old: EvState
    new: EvState
    reason: str


@dataclass(slots=True)
class QpError(TransportEvent):
    """The QP moved to the error state (``reason``); RC adds the PSN it gave up on and the
    time of its last progress."""

    kind: ClassVar[str] = EVENT_QP_ERROR
    reason: str
    psn: int | None = None
    last_progress_ps: int | None = None


@dataclass(slots=True)
class Retry(TransportEvent):
    """RC: the local ACK timeout fired (``retry``: the count) and the requester goes back to
    ``psn``."""

    kind: ClassVar[str] = EVENT_RETRY
    retry: int
    psn: int
    timeout_ps: int


@dataclass(slots=True)
class ConnectionFailed(TransportEvent):
    """A striped RC connection failed because one of its QPs errored (``failed_qpn``; the
    messages it lost, and the other QPs the abort stopped). Kept apart from
    :class:`QpError` so that a driver logging both QP and connection events does not count
    one QP error twice."""

    kind: ClassVar[str] = EVENT_CONNECTION_FAILED
    reason: str
    failed_qpn: int
    failed_messages: list[int]
    aborted_qpns: list[int]


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
