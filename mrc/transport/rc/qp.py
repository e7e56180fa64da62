"""``RcQp``: one endpoint of a RoCE RC QP behind the sans-IO contract of ``transport.base``.

The endpoint owns what its two halves share (identity, config, counters, events, the control
queue, the error state) and hands each driver call to the half it concerns: ``post_write``,
``poll`` and the timers to the requester (:mod:`.requester`), DATA to the responder
(:mod:`.responder`), ACK and sequence-error NAK back to the requester.

* **No trimming.** RC does not know trimmed packets: a trimmed packet is unusable (its ICRC
  no longer verifies) and is dropped like a loss, without a NAK of its own.
* **Error state.** Once failed (retries exhausted, or ``abort``), the endpoint ignores
  packets and timers, sends nothing, and flushes new work requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from mrc.packet import ACK, CNP, DATA, FLAG_SEQ_ERR, NACK, Packet
from mrc.transport.base import QpError, TransportEvent
from mrc.transport.qp_base import QpBase
from mrc.transport.rc.config import RcConfig, RcStats
from mrc.transport.rc.requester import RcRequester
from mrc.transport.rc.responder import RcResponder

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# typed copies (compiled, C integers)
_ACK = cython.declare(cython.longlong, ACK)
_CNP = cython.declare(cython.longlong, CNP)
_DATA = cython.declare(cython.longlong, DATA)
_FLAG_SEQ_ERR = cython.declare(cython.longlong, FLAG_SEQ_ERR)
_NACK = cython.declare(cython.longlong, NACK)

Listener = Callable[[TransportEvent], None]


@cython.cclass
class RcQp(QpBase):
    """One endpoint of a RoCE RC QP (sans-IO; satisfies ``transport.base.QueuePair``).

    ``paths`` maps a key -> destination address from ``host`` to ``peer`` in ``plane`` (the
    routed fabric gives one: the peer's routed address); the QP sends to ``t1``'s (default:
    the first key). ``listener``,
    when set, is called with every event as it is raised (``StripedConnection`` uses it,
    because drivers drain ``events`` themselves).
    """

    # (qpn, events, bytes_placed, failed: QpBase's)
    host: cython.longlong
    peer: cython.longlong
    plane: cython.longlong
    config: RcConfig
    error_reason: Any  # str | None
    error_time_ps: int | None
    stats: RcStats
    listener: Listener | None
    requester: RcRequester
    responder: RcResponder
    _ctrl: list[Packet]  # ACKs and NAKs of the responder, not yet taken
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qpn: int, host: int, peer: int, plane: int, paths: Mapping[int, int],
                 *, t1: int | None = None, config: RcConfig | None = None) -> None:
        if not paths:
            raise ValueError("an RC QP needs at least one path")
        self.qpn = qpn
        self.host = host
        self.peer = peer
        self.plane = plane
        self.config = config or RcConfig()
        self.events: deque[TransportEvent] = deque()
        self.bytes_placed = 0
        self.failed = False
        self.error_reason = None
        self.error_time_ps = None
        self.stats = RcStats()
        self.listener = None
        self._ctrl = []
        self.requester = RcRequester(self, paths, t1)
        self.responder = RcResponder(self, self.requester)

    # ================================================================ driver API
    def post_write(self, now: int, msg_id: int, length: int, *,
                   payload: bytes | None = None) -> None:
        """Queue an RDMA WRITE of ``length`` bytes; it is segmented lazily as the port pulls."""
        self.requester.post_write(now, msg_id, length, payload)

    @cython.ccall
    @cython.annotation_typing(True)
    def poll(self, now: cython.longlong, plane: cython.longlong) -> Any:  # Packet | None
        """The next DATA packet for ``plane``'s port: only this QP's plane, within the window."""
        if self.failed:
            return None
        return self.requester.poll(now, plane)

    @cython.ccall
    @cython.annotation_typing(True)
    def receive(self, now: cython.longlong, pkt: Packet) -> None:
        """A packet for this QP arrived (DATA for the responder, ACK/NAK for the requester)."""
        if self.failed:
            return
        if pkt.trimmed:
            self.stats.dropped_trimmed += 1  # ICRC fails on a cut packet: unusable, dropped
            return
        kind = pkt.kind
        if kind == _DATA:
            self.responder.on_data(now, pkt)
        elif kind == _ACK or (kind == _NACK and pkt.flags & _FLAG_SEQ_ERR):
            self.requester.on_ack(now, pkt)
        elif kind == _CNP:
            self.requester.on_cnp(now)
        # PROBE / trim NACKs are MRC's; an RC QP ignores them

    @cython.ccall
    @cython.annotation_typing(True)
    def handle_timer(self, now: cython.longlong) -> None:
        """Local ACK timer, DCQCN's timers, ACK coalescing timer."""
        if not self.failed:
            self.requester.handle_timer(now)
            if not self.failed:
                self.responder.on_timer(now)

    @cython.ccall
    @cython.annotation_typing(True)
    def take_control(self) -> list:  # list[Packet]
        """ACKs and NAKs produced since the last call (each names its plane)."""
        ctrl = self._ctrl
        if not ctrl:
            return []
        self._ctrl = []
        return ctrl

    @cython.ccall
    @cython.annotation_typing(True)
    def next_timer(self) -> Any:  # int | None
        if self.failed:
            return None
        deadline = self.requester.next_timer()
        due = self.responder.ack_due
        if due is not None and (deadline is None or due < deadline):
            return due
        return deadline

    # ================================================================ other API
    def abort(self, now: int, reason: str) -> None:
        """Move to the error state because the application gave up (NCCL aborting the job
        after another QP failed). Raises no event: only real QP errors do."""
        if self.failed:
            return
        self.failed = True
        self.error_reason = reason
        self.error_time_ps = now
        self._ctrl = []

    @property
    def priority(self) -> int:
        """The 802.1p priority of this QP's DATA (a NIC port paused on it skips the QP)."""
        return self.config.priority

    @property
    def poll_timer_floor_ps(self) -> int:
        """The soonest deadline a ``poll`` can create, relative to its ``now``: a first send
        after idle starts the local ACK timer (and the re-convergence clock); under DCQCN a
        poll may set the pacing deadline at once (0). Drivers need not re-read
        ``next_timer`` after a poll while a wake-up is armed before that."""
        req = self.requester
        if req.rp is not None:
            return 0
        return req.timeout_ps if req.timeout_ps is not None else 1 << 62

    @property
    def outstanding(self) -> int:
        """Packets sent and not yet acknowledged."""
        return self.requester.max_sent - self.requester.una

    @property
    def window(self) -> float:
        """Current congestion window in packets."""
        return self.requester.cwnd

    @property
    def last_progress_ps(self) -> int:
        """When the local ACK timer last restarted: progress, the first send after idle, or
        a sequence-error NAK."""
        return self.requester.anchor

    @property
    def t1(self) -> int:
        """The key of this endpoint's destination address (0 on the routed fabric)."""
        return self.requester.t1

    @property
    def address(self) -> int:
        """Destination address of this endpoint's current path."""
        return self.requester.addr

    @property
    def ev(self) -> int:
        return self.requester.ev

    @property
    def pending_messages(self) -> int:
        """Posted WRITEs not yet fully acknowledged."""
        return len(self.requester.msgs)

    # ================================================================ for the halves
    def _error(self, now: int, reason: str, psn: int, last_progress_ps: int) -> None:
        self.failed = True
        self.error_reason = reason
        self.error_time_ps = now
        self._ctrl = []
        self._emit(QpError(now, self.qpn, reason, psn, last_progress_ps))

    @cython.ccall
    @cython.annotation_typing(True)
    def _emit(self, event: TransportEvent) -> None:
        self.events.append(event)
        if self.listener is not None:
            self.listener(event)
