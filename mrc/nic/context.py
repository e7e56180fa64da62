"""What a NIC driver keeps for each QP it drives (:class:`QpContext`) and how the QPs of one
port take turns (:func:`poll_round_robin`): the driver's per-QP record, apart from the
driver (:mod:`mrc.nic.driver`) so that the transport's QP stores none of it."""

from __future__ import annotations

from typing import Any, cast

from mrc.nic.runtime import PortSink, RecorderSink
from mrc.transport.base import QueuePair
from mrc.transport.qp_base import QpBase

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]


@cython.final
@cython.cclass
class QpContext:
    """What the NIC keeps for one QP it drives: the ports it sends on (``ports``), the
    soonest deadline a poll can create (``floor``: ``poll_timer_floor_ps``), the time of the
    wake-up armed for it (``timer``, -1: none) and the recorder its goodput and
    retransmissions go to. A QP destroyed and registered again keeps its context (and the
    wake-ups armed for it)."""

    qp: QpBase
    floor: cython.longlong
    timer: cython.longlong
    recorder: RecorderSink
    ports: list[PortSink]
    registered: cython.bint
    last_placed: cython.longlong
    gaps: list[tuple[int, int]]
    last_retx: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QueuePair, recorder: RecorderSink) -> None:
        self.qp = cast(QpBase, qp)  # (every transport's QP is one)
        self.recorder = recorder
        self.ports = []
        self.floor = 0
        self.timer = -1
        self.registered = False
        #: when the QP last placed new bytes (-1: never); every (start, end) between two
        #: placements longer than the driver's ``gap_floor_ps`` that a retransmitted packet
        #: ended (the sender had lost data outstanding: not idleness); when it last sent a
        #: retransmission (-1: never). What a lab's stall metric reads (mrc.stack.stalls).
        self.last_placed = -1
        self.gaps = []
        self.last_retx = -1


@cython.ccall
@cython.annotation_typing(True)
def poll_round_robin(senders: list, rr: list, now: cython.longlong, plane: cython.longlong
                     ) -> Any:  # list[QpContext], list[int] -> tuple[QpContext, Packet] | None
    """How a driver fills an idle port of ``plane``: ask the QPs that send on it in turn,
    starting after the last one served (``rr[plane]``), and return the first (QP, packet)."""
    ctx: QpContext
    i: cython.Py_ssize_t
    n: cython.Py_ssize_t = len(senders)
    if n == 1:
        ctx = senders[0]
        pkt = ctx.qp.poll(now, plane)
        return None if pkt is None else (ctx, pkt)
    start: cython.Py_ssize_t = rr[plane]
    for i in range(n):
        ctx = senders[(start + i) % n]
        pkt = ctx.qp.poll(now, plane)
        if pkt is not None:
            rr[plane] = (start + i + 1) % n
            return ctx, pkt
    return None
