"""RoCE v2 Reliable Connection (RC) queue pair: the single-path baseline MRC is compared with.

One ``RcQp`` is one *endpoint* of an RC QP, as on a real NIC: the requester half sends the
RDMA WRITEs posted on it, the responder half places the WRITEs of the peer and acknowledges
them. The driver registers each endpoint with its host's NIC under the QP's number; both ends
of a QP use the same ``qpn`` (``rc_connection.rc_qp_pair`` builds matching ends).

Faithful to RC, not to MRC:

* **One path for life.** The plane is fixed and so is the T1 (an ECMP-like hash picks it), so
  every packet follows one FIFO path. ACK/NAK go back over the same plane and T1: the
  responder answers along the T1 named by the EV of the packet it acknowledges.
* **In-order delivery, go-back-N.** The responder accepts only the expected PSN. The first
  out-of-sequence packet of a gap gets ONE sequence-error NAK (``FLAG_SEQ_ERR``, psn = the
  expected PSN); later out-of-sequence packets of the same gap are dropped silently. A gap
  "episode" ends when the expected packet arrives, or when the PSNs of arriving packets go
  backwards (the requester rewound and its resent copy of the expected packet was lost
  again): only then is a new NAK due. Old (duplicate) packets are re-ACKed.
* **No trimming.** RC does not know trimmed packets: a trimmed packet is unusable (its ICRC
  no longer verifies) and is dropped like a loss, without a NAK of its own.
* **Local ACK timeout** = 4.096 us x 2^timeout_exp (verbs: exponent 0 = wait forever). The
  timer counts from the last *progress* (oldest unacknowledged PSN advanced, or the first
  packet sent after idle); each expiry without progress is a retry that resends everything
  from the oldest unacknowledged PSN (a sequence-error NAK restarts the timer too, as it
  triggers a resend, but does not reset the retry count). After ``retry_cnt`` retries the next
  expiry moves the QP
  to the error state, i.e. exactly at ``last_progress + (retry_cnt + 1) x timeout``
  (IBV_WC_RETRY_EXC_ERR). Nothing is sent after that; NCCL aborts the job.
* **Congestion response (documented simplification).** Real RoCE NICs run DCQCN (a rate
  limiter driven by CNPs). Here: a window of at most ``window_pkts`` outstanding packets
  (set it to about one bandwidth-delay product) and AIMD on ECN: the responder echoes a
  CE mark on its next ACK (an immediate ACK acts as the CNP, at most one per
  ``cnp_interval_us`` unless an ACK is due anyway); the requester cuts the window by
  ``ecn_decrease`` at most once per window of data (no new cut until the data sent before
  the previous cut is acknowledged) and grows it by ``additive_increase_pkts`` per window
  acknowledged, never above ``window_pkts`` nor below ``min_window_pkts``.
* **ACK coalescing.** The responder ACKs every ``ack_every`` accepted packets and at once on
  a packet with the ACK-request bit; the requester sets that bit on the last packet of every
  message and on the packet that fills the window, so a tail never waits for a timeout.
* **Optional re-convergence model** (``reroute_after_us``, off by default). Static SRv6
  source routing, the post's fabric, never moves a path, so RC stays on a broken one. With a
  dynamic routing protocol the network would re-hash a flow whose T1 died; the QP models
  that by moving to the next T1 of its candidate list after that long without progress (an
  ``EVENT_REROUTE``). It still never sees fabric state: the candidates are given at
  construction and the order is fixed, and recovery still waits for the next retry.

Internally sequence numbers are unbounded integers; the 24-bit wire PSN is derived from them
(``initial_psn`` + sequence, modulo 2^24), so wrap-around needs no special case.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mrc.ev import ev_t1, make_ev
from mrc.packet import (
    ACK,
    DATA,
    DATA_HEADER_BYTES,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_SEQ_ERR,
    NACK,
    PSN_MASK,
    PSN_MOD,
    Packet,
    psn_diff,
)
from mrc.transport.base import (
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
    EVENT_REROUTE,
    EVENT_RETRY,
    EVENT_SEND_COMPLETED,
    TransportEvent,
)
from mrc.transport.memory import ReceiveBuffer, message_key, segment_digest

#: The verbs local ACK timeout unit: 4.096 us, in picoseconds.
LOCAL_ACK_UNIT_PS = 4_096_000


Listener = Callable[[TransportEvent], None]


@dataclass(frozen=True, slots=True)
class RcConfig:
    """Lab parameters of an RC QP. Both ends of a QP must use the same config."""

    mtu: int = 4096  # payload bytes per DATA packet
    window_pkts: int = 64  # max outstanding packets; ~ one BDP (see rc_config_for)
    min_window_pkts: int = 2
    ack_every: int = 8  # responder ACK coalescing
    timeout_exp: int = 20  # local ACK timeout 4.096 us x 2^n; NCCL_IB_TIMEOUT default 20
    retry_cnt: int = 7  # NCCL_IB_RETRY_CNT default 7
    reroute_after_us: float | None = None  # dynamic-routing model; None = static SRv6 routing
    ecn_decrease: float = 0.5  # window multiplier on an ECN echo
    additive_increase_pkts: float = 1.0  # window growth per window acknowledged
    cnp_interval_us: float = 4.0  # least time between immediate CE-triggered ACKs
    initial_psn: int = 0
    key_seed: int = 0  # seed of the verifiable-payload keys (memory.message_key)

    def __post_init__(self) -> None:
        checks = (
            (self.mtu > 0, "mtu must be positive"),
            (1 <= self.min_window_pkts <= self.window_pkts,
             "need 1 <= min_window_pkts <= window_pkts"),
            (self.window_pkts < PSN_MOD // 4, "window_pkts must stay far below 2^24 PSNs"),
            (self.ack_every >= 1, "ack_every must be at least 1"),
            (0 <= self.timeout_exp <= 31, "timeout_exp is a 5-bit verbs field (0..31)"),
            (0 <= self.retry_cnt <= 7, "retry_cnt is a 3-bit verbs field (0..7)"),
            (self.reroute_after_us is None or self.reroute_after_us > 0,
             "reroute_after_us must be positive or None"),
            (0 < self.ecn_decrease <= 1, "ecn_decrease must be in (0, 1]"),
            (self.additive_increase_pkts >= 0, "additive_increase_pkts must not be negative"),
            (self.cnp_interval_us >= 0, "cnp_interval_us must not be negative"),
            (0 <= self.initial_psn <= PSN_MASK, "initial_psn must be a 24-bit PSN"),
        )
        for ok, why in checks:
            if not ok:
                raise ValueError(f"RcConfig: {why}")

    @property
    def timeout_ps(self) -> int | None:
        """Local ACK timeout in ps, None for exponent 0 (verbs: infinite, never retries)."""
        return LOCAL_ACK_UNIT_PS << self.timeout_exp if self.timeout_exp else None

    @property
    def error_after_ps(self) -> int | None:
        """Time from the last progress to the error state on a dead path."""
        t = self.timeout_ps
        return None if t is None else (self.retry_cnt + 1) * t

    @property
    def reroute_after_ps(self) -> int | None:
        r = self.reroute_after_us
        return None if r is None else int(round(r * 1_000_000))

    @property
    def cnp_interval_ps(self) -> int:
        return int(round(self.cnp_interval_us * 1_000_000))


@dataclass(slots=True)
class RcStats:
    """Counters of one endpoint (requester and responder halves)."""

    data_sent: int = 0  # DATA packets sent, first copies and resends
    retx_sent: int = 0  # resent DATA packets (go-back-N and timeout resends)
    payload_bytes_sent: int = 0
    acks_sent: int = 0
    naks_sent: int = 0
    acks_received: int = 0
    naks_received: int = 0
    timeouts: int = 0  # local ACK timer expiries without progress (retries + fatal one)
    retries: int = 0
    reroutes: int = 0
    ecn_cuts: int = 0
    ce_received: int = 0
    dropped_oos: int = 0  # out-of-sequence DATA dropped by the responder
    dropped_trimmed: int = 0  # trimmed packets dropped (RC cannot use them)
    duplicates: int = 0  # DATA below the expected PSN (already placed)


class _SendMsg:
    """A posted WRITE: its sequence range [start, end) and how to make its segments."""

    __slots__ = ("msg_id", "length", "start", "end", "key", "posted_ps", "payload")

    def __init__(self, msg_id: int, length: int, start: int, end: int, key: int,
                 posted_ps: int, payload: bytes | None) -> None:
        self.msg_id = msg_id
        self.length = length
        self.start = start
        self.end = end
        self.key = key
        self.posted_ps = posted_ps
        self.payload = payload


class RcQp:
    """One endpoint of a RoCE RC QP (sans-IO; satisfies ``transport.base.QueuePair``).

    ``paths`` maps T1 index -> destination address from ``host`` to ``peer`` in ``plane``,
    in re-convergence order; the QP starts on ``t1`` (default: the first key). ``listener``,
    when set, is called with every event as it is raised (``RcConnection`` uses it, because
    drivers drain ``events`` themselves).
    """

    __slots__ = (
        "qpn", "host", "peer", "plane", "t1", "config", "events", "bytes_placed", "failed",
        "error_reason", "error_time_ps", "stats", "listener",
        # requester
        "_paths", "_order", "_addr", "_ev", "_mtu", "_msgs", "_cur", "_una", "_nxt",
        "_max_sent", "_tail", "_cwnd", "_wnd", "_cut_guard", "_anchor", "_retries",
        "_reroute_anchor", "_timeout_ps", "_reroute_ps", "_psn0", "_msg_ids",
        # responder
        "_epsn", "_rx", "_rx_posted", "_unacked", "_in_gap", "_gap_last", "_dup_last",
        "_ce_pending", "_last_cnp", "_cnp_ps", "_ctrl",
    )

    def __init__(self, qpn: int, host: int, peer: int, plane: int, paths: Mapping[int, int],
                 *, t1: int | None = None, config: RcConfig | None = None) -> None:
        if not paths:
            raise ValueError("an RC QP needs at least one path")
        cfg = config or RcConfig()
        self.qpn = qpn
        self.host = host
        self.peer = peer
        self.plane = plane
        self.config = cfg
        self._paths = dict(paths)
        self._order = list(self._paths)
        self.t1 = self._order[0] if t1 is None else t1
        if self.t1 not in self._paths:
            raise ValueError(f"t1 {self.t1} is not among the QP's paths {self._order}")
        self._addr = self._paths[self.t1]
        self._ev = make_ev(plane, self.t1)
        self.events: deque[TransportEvent] = deque()
        self.bytes_placed = 0
        self.failed = False
        self.error_reason: str | None = None
        self.error_time_ps: int | None = None
        self.stats = RcStats()
        self.listener: Listener | None = None
        self._mtu = cfg.mtu
        self._psn0 = cfg.initial_psn
        self._timeout_ps = cfg.timeout_ps
        self._reroute_ps = cfg.reroute_after_ps
        self._cnp_ps = cfg.cnp_interval_ps
        # requester: sequence numbers [una, max_sent) are outstanding, nxt is the next to send
        self._msgs: deque[_SendMsg] = deque()
        self._msg_ids: set[int] = set()
        self._cur = 0  # index in _msgs of the message holding _nxt (advanced lazily)
        self._una = 0
        self._nxt = 0
        self._max_sent = 0
        self._tail = 0
        self._cwnd = float(cfg.window_pkts)
        self._wnd = cfg.window_pkts
        self._cut_guard = 0
        self._anchor = 0
        self._retries = 0
        self._reroute_anchor = 0
        # responder
        self._epsn = cfg.initial_psn
        self._rx: ReceiveBuffer | None = None
        self._rx_posted = 0
        self._unacked = 0
        self._in_gap = False
        self._gap_last = 0
        self._dup_last: int | None = None
        self._ce_pending = False
        self._last_cnp: int | None = None
        self._ctrl: list[Packet] = []

    # ================================================================ driver API
    def post_write(self, now: int, msg_id: int, length: int, *,
                   payload: bytes | None = None) -> None:
        """Queue an RDMA WRITE of ``length`` bytes; it is segmented lazily as the port pulls."""
        if length <= 0:
            raise ValueError(f"message {msg_id}: length must be positive, got {length}")
        if payload is not None and len(payload) != length:
            raise ValueError(f"message {msg_id}: payload has {len(payload)} bytes, not {length}")
        if msg_id in self._msg_ids:
            raise ValueError(f"message {msg_id} is already posted on QP {self.qpn}")
        if self.failed:
            return  # a QP in the error state flushes new work requests
        npkts = (length + self._mtu - 1) // self._mtu
        key = message_key(self.host, self.qpn, msg_id, self.config.key_seed)
        start = self._tail
        self._tail = start + npkts
        self._msgs.append(_SendMsg(msg_id, length, start, self._tail, key, now, payload))
        self._msg_ids.add(msg_id)

    def poll(self, now: int, plane: int) -> Packet | None:
        """The next DATA packet for ``plane``'s port: only this QP's plane, within the window."""
        seq = self._nxt
        if (plane != self.plane or seq >= self._tail or seq - self._una >= self._wnd
                or self.failed):
            return None
        msgs = self._msgs
        m = msgs[self._cur]
        while seq >= m.end:
            self._cur += 1
            m = msgs[self._cur]
        mtu = self._mtu
        offset = (seq - m.start) * mtu
        length = m.length - offset
        if length > mtu:
            length = mtu
        flags = 0
        if offset + length == m.length:
            flags = FLAG_LAST | FLAG_ACK_REQ
        elif seq + 1 - self._una >= self._wnd:
            flags = FLAG_ACK_REQ  # this packet fills the window: ask for an ACK now
        stats = self.stats
        if seq < self._max_sent:
            flags |= FLAG_RETX
            stats.retx_sent += 1
        else:
            if self._max_sent <= self._una:
                # first packet after idle: the local ACK timer starts now
                self._anchor = now
                self._reroute_anchor = now
                self._retries = 0
            self._max_sent = seq + 1
        self._nxt = seq + 1
        stats.data_sent += 1
        stats.payload_bytes_sent += length
        payload = m.payload
        return Packet(
            DATA, self.host, self.peer, self.qpn, (self._psn0 + seq) & PSN_MASK,
            ev=self._ev, msg_id=m.msg_id, offset=offset, length=length, msg_len=m.length,
            flags=flags, ts=m.posted_ps, da=self._addr, plane=self.plane,
            size=DATA_HEADER_BYTES + length,
            digest=segment_digest(m.key, offset, length),
            payload=None if payload is None else payload[offset:offset + length],
        )

    def receive(self, now: int, pkt: Packet) -> None:
        """A packet for this QP arrived (DATA for the responder, ACK/NAK for the requester)."""
        if self.failed:
            return
        if pkt.trimmed:
            self.stats.dropped_trimmed += 1  # ICRC fails on a cut packet: unusable, dropped
            return
        kind = pkt.kind
        if kind == DATA:
            self._on_data(now, pkt)
        elif kind == ACK:
            self.stats.acks_received += 1
            self._on_ack(now, (pkt.psn + 1) & PSN_MASK, pkt.flags, False)
        elif kind == NACK and pkt.flags & FLAG_SEQ_ERR:
            self.stats.naks_received += 1
            self._on_ack(now, pkt.psn, pkt.flags, True)
        # PROBE / trim NACKs are MRC's; an RC QP ignores them

    def handle_timer(self, now: int) -> None:
        """Local ACK timer and (optional) re-convergence deadline."""
        if self.failed or self._max_sent <= self._una:
            return
        rr = self._reroute_ps
        if rr is not None and now >= self._reroute_anchor + rr and len(self._order) > 1:
            self._reroute(now)
        t = self._timeout_ps
        if t is None or now < self._anchor + (self._retries + 1) * t:
            return
        self._retries += 1
        self.stats.timeouts += 1
        una_psn = (self._psn0 + self._una) & PSN_MASK
        if self._retries > self.config.retry_cnt:
            self._error(now, (
                f"retry count exceeded (IBV_WC_RETRY_EXC_ERR): {self.config.retry_cnt} retries "
                f"of the {t / 1e6:g} us local ACK timeout without progress"),
                psn=una_psn, last_progress_ps=self._anchor)
            return
        self.stats.retries += 1
        self._emit(now, EVENT_RETRY, {"retry": self._retries, "psn": una_psn,
                                      "timeout_ps": t})
        self._rewind(self._una)

    def take_control(self) -> list[Packet]:
        """ACKs and NAKs produced since the last call (each names its plane)."""
        ctrl = self._ctrl
        if not ctrl:
            return []
        self._ctrl = []
        return ctrl

    def next_timer(self) -> int | None:
        if self.failed or self._max_sent <= self._una:
            return None
        t = self._timeout_ps
        deadline = None if t is None else self._anchor + (self._retries + 1) * t
        rr = self._reroute_ps
        if rr is not None and len(self._order) > 1:
            r = self._reroute_anchor + rr
            if deadline is None or r < deadline:
                deadline = r
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
    def poll_timer_floor_ps(self) -> int:
        """The soonest deadline a ``poll`` can create, relative to its ``now``: a first send
        after idle starts the local ACK timer (and the re-convergence clock). Drivers need
        not re-read ``next_timer`` after a poll while a wake-up is armed before that."""
        spans = [t for t in (self._timeout_ps, self._reroute_ps) if t is not None]
        return min(spans) if spans else 1 << 62

    @property
    def outstanding(self) -> int:
        """Packets sent and not yet acknowledged."""
        return self._max_sent - self._una

    @property
    def window(self) -> float:
        """Current congestion window in packets."""
        return self._cwnd

    @property
    def last_progress_ps(self) -> int:
        """When the local ACK timer last restarted: progress, the first send after idle, or
        a sequence-error NAK."""
        return self._anchor

    @property
    def address(self) -> int:
        """Destination address of this endpoint's current path."""
        return self._addr

    @property
    def ev(self) -> int:
        return self._ev

    @property
    def pending_messages(self) -> int:
        """Posted WRITEs not yet fully acknowledged."""
        return len(self._msgs)

    # ================================================================ responder
    def _on_data(self, now: int, pkt: Packet) -> None:
        stats = self.stats
        d = psn_diff(pkt.psn, self._epsn)
        if d == 0:
            rx = self._rx
            if rx is None:
                if pkt.offset != 0:
                    raise ValueError(f"QP {self.qpn}: in-order packet psn={pkt.psn} starts "
                                     f"message {pkt.msg_id} at offset {pkt.offset}")
                rx = self._rx = ReceiveBuffer(pkt.msg_id, pkt.msg_len, self._mtu,
                                              real_bytes=pkt.payload is not None)
                self._rx_posted = pkt.ts
            elif rx.msg_id != pkt.msg_id:
                raise ValueError(f"QP {self.qpn}: message {pkt.msg_id} interleaved with "
                                 f"unfinished message {rx.msg_id}")
            self.bytes_placed += rx.place(pkt.offset, pkt.length, pkt.digest, pkt.payload)
            self._epsn = (self._epsn + 1) & PSN_MASK
            self._in_gap = False
            self._dup_last = None
            self._unacked += 1
            if rx.complete:
                self._rx = None
                detail: dict[str, object] = {"msg_id": rx.msg_id, "bytes": rx.length,
                                             "checksum": rx.checksum(),
                                             "posted_ps": self._rx_posted}
                data = rx.data()
                if data is not None:
                    detail["data"] = data
                self._emit(now, EVENT_MESSAGE_COMPLETED, detail)
            cnp = False
            if pkt.ecn == ECN_CE:
                stats.ce_received += 1
                self._ce_pending = True
                last = self._last_cnp
                cnp = last is None or now - last >= self._cnp_ps
            if self._unacked >= self.config.ack_every or pkt.flags & FLAG_ACK_REQ or cnp:
                self._send_ack(now, ACK, (self._epsn - 1) & PSN_MASK, pkt.ev)
        elif d > 0:
            stats.dropped_oos += 1
            if not self._in_gap or psn_diff(pkt.psn, self._gap_last) <= 0:
                # first packet past a gap, or the requester restarted and lost it again
                self._in_gap = True
                self._send_ack(now, NACK, self._epsn, pkt.ev)
            self._gap_last = pkt.psn
        else:
            stats.duplicates += 1
            last = self._dup_last
            if last is None or psn_diff(pkt.psn, last) <= 0 or pkt.flags & FLAG_ACK_REQ:
                # re-ACK once per resent run (and when asked): the first ACK was lost
                self._send_ack(now, ACK, (self._epsn - 1) & PSN_MASK, pkt.ev)
            self._dup_last = pkt.psn

    def _send_ack(self, now: int, kind: int, psn: int, ev: int) -> None:
        flags = FLAG_SEQ_ERR if kind == NACK else 0
        if self._ce_pending:
            flags |= FLAG_ECN_ECHO
            self._ce_pending = False
            self._last_cnp = now
        if kind == NACK:
            self.stats.naks_sent += 1
        else:
            self.stats.acks_sent += 1
        self._unacked = 0
        # reply along the reverse of the path the acknowledged packet took
        da = self._paths.get(ev_t1(ev), self._addr)
        self._ctrl.append(Packet(kind, self.host, self.peer, self.qpn, psn, ev=ev,
                                 flags=flags, da=da, plane=self.plane))

    # ================================================================ requester
    def _on_ack(self, now: int, next_psn: int, flags: int, nak: bool) -> None:
        """Everything before ``next_psn`` is acknowledged; a NAK also rewinds to it."""
        una = self._una
        upto = una + psn_diff(next_psn, (self._psn0 + una) & PSN_MASK)
        if upto < una or upto > self._max_sent:
            return  # stale (older than una) or acknowledging what was never sent
        if upto > una:
            self._progress(now, upto)
        if flags & FLAG_ECN_ECHO:
            self._on_ecn()
        if nak:
            # the responder is alive and the rewind resends now: restart the local ACK timer
            # (the retry count only resets on real progress)
            self._anchor = now
            self._reroute_anchor = now
            self._rewind(upto)
        elif self._nxt < upto:
            self._nxt = upto  # a late ACK covers packets queued for resending

    def _progress(self, now: int, upto: int) -> None:
        acked = upto - self._una
        self._una = upto
        self._anchor = now
        self._reroute_anchor = now
        self._retries = 0
        cfg = self.config
        if self._cwnd < cfg.window_pkts:
            self._cwnd = min(float(cfg.window_pkts),
                             self._cwnd + cfg.additive_increase_pkts * acked / self._cwnd)
            self._wnd = max(1, int(self._cwnd))
        msgs = self._msgs
        popped = 0
        while msgs and msgs[0].end <= upto:
            m = msgs.popleft()
            popped += 1
            self._msg_ids.discard(m.msg_id)
            self._emit(now, EVENT_SEND_COMPLETED, {"msg_id": m.msg_id, "bytes": m.length,
                                                   "posted_ps": m.posted_ps})
        if popped:
            self._cur = max(0, self._cur - popped)

    def _on_ecn(self) -> None:
        if self._una < self._cut_guard:
            return  # already cut for data sent before the last cut: once per window
        cfg = self.config
        self._cwnd = max(float(cfg.min_window_pkts), self._cwnd * cfg.ecn_decrease)
        self._wnd = max(1, int(self._cwnd))
        self._cut_guard = self._max_sent
        self.stats.ecn_cuts += 1

    def _rewind(self, seq: int) -> None:
        """Go-back-N: resend everything from ``seq``."""
        self._nxt = seq
        self._cur = 0  # poll walks forward to the message holding seq

    def _reroute(self, now: int) -> None:
        order = self._order
        old_t1, old_da = self.t1, self._addr
        new_t1 = order[(order.index(old_t1) + 1) % len(order)]
        self.t1 = new_t1
        self._addr = self._paths[new_t1]
        self._ev = make_ev(self.plane, new_t1)
        self._reroute_anchor = now
        self.stats.reroutes += 1
        self._emit(now, EVENT_REROUTE, {"plane": self.plane, "old_t1": old_t1,
                                        "new_t1": new_t1, "old_da": old_da,
                                        "new_da": self._addr})

    def _error(self, now: int, reason: str, **detail: object) -> None:
        self.failed = True
        self.error_reason = reason
        self.error_time_ps = now
        self._ctrl = []
        self._emit(now, EVENT_QP_ERROR, {"reason": reason, **detail})

    def _emit(self, now: int, kind: str, detail: dict[str, object]) -> None:
        event = TransportEvent(now, kind, self.qpn, detail)
        self.events.append(event)
        if self.listener is not None:
            self.listener(event)
