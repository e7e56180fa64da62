"""The MRC queue pair: one sans-IO state machine per QP, spraying over many EVs.

Everything is driven through the :mod:`mrc.transport.base` contract (``post_write``,
``receive``, ``handle_timer``, ``poll``, ``take_control``, ``next_timer``, ``events``); the QP
never reads a clock and never sees fabric state, only the EV set it was given
(:mod:`mrc.transport.evset`). Each QP is both a sender (of its own WRITEs) and a receiver
(of its peer's).

Sender, per packet
    Messages are segmented at the MTU lazily, one PSN per packet, when a port pulls
    (``poll``): retransmissions first, then new data, on a GOOD EV of the pulling plane
    (round robin, or REPS: reuse EVs whose packets came back unmarked). Internally PSNs are
    unwrapped to unbounded sequence numbers, so the 24-bit wrap is a conversion at the edges.

Receiver
    Places each segment exactly once (``ReceiveBuffer``) and acknowledges with a cumulative
    PSN (``psn`` = next expected: every PSN before it arrived) plus a 64-bit SACK window
    ``[sack_base, sack_base + 64)`` ending at the newest arrival being reported. ACKs are
    coalesced every ``ack_every`` packets, sent at once on ECN, ack-request or a duplicate,
    and after ``ack_delay_ps`` for a tail; every arrival is reported by at least one ACK (a
    burst that does not fit one window gets several ACKs). A trimmed DATA gets an immediate
    NACK(FLAG_TRIM). Each reply travels back along the plane/T1 of the EV it echoes.

Loss evidence (spraying makes global PSN gaps normal)
    *Same EV (FIFO)*: paths are FIFO, so a packet is lost when a packet sent *after* it on
    the same EV has been acknowledged.

    *Other EVs (overdue)*, in the spirit of RACK (RFC 8985) and UEC's out-of-order loss
    detection: a silently dropped packet (a dead T1 or link) leaves no later packet on its
    EV to prove the loss, so time stands in for order. A packet is *overdue* when a packet
    sent more than the reorder window ``W`` after it, on any other EV of the same plane or
    of the QP, has been acknowledged while it has not. ``W`` is kept per scope (each plane,
    and the whole QP) from what that scope's ACKs show (a trim NACK skips the queues and is
    not used)::

        W = min(RTO, reorder_margin_rtts x min_rtt
                     + reorder_spread_gain x (recent max delay - min_rtt))

    where ``min_rtt`` comes from the RTTs ACKs echo and a *delay* is the age (send to ACK)
    of every packet an ACK newly reports, not only the echoed one (slow paths are seldom
    the echoed one). Paths of a scope differ only in queueing, so the spread of delays
    bounds how far a packet can fall behind one sent later on another path; the margin
    (one min RTT by default) covers a queue that grows while nothing of its path is being
    acknowledged. "Recent" is a two-bucket windowed max over about ``reorder_hold_rtts``
    smoothed RTTs: queueing widens ``W`` at once (an 8-to-1 incast with 40 us queues gets
    ``W`` of ~46 us and no false loss) and it narrows only after the spread has been
    gone a while. A scope that has not yet seen half a hold period of samples is cold:
    ``W`` is the RTO, nothing is declared on unknown reordering. Planes share their first
    and last hop, so a plane's ``W`` is the tight one; the QP's also covers the skew between
    planes and catches a whole plane going silent (a dead T0). A path whose queue grows by
    more than ``W`` while unobserved still looks like a loss: a spurious retransmission,
    and its late ACK widens ``W``.

    Each scope keeps its transmissions in send order; when its newest acknowledged send
    time advances, the front is popped up to that time minus ``W``: amortised O(1) per
    packet. ``reorder_window_ps`` fixes ``W`` instead; ``overdue_loss=False`` turns it off.

    Either evidence only makes the packet *suspected* for ``loss_grace_ps``, because the
    proof and a trim NACK may come back on different reverse paths; a NACK in that time
    turns it into a trim. A trim is congestion: retransmit at once, tell the congestion
    control, the EV stays GOOD.

EV states
    A FIFO loss, or the EV's oldest packet being unacknowledged for RTO =
    max(floor, 1.024 us x 2^n), moves the EV to ASSUMED_BAD. An overdue loss gives its EV
    a *strike* (cleared whenever the EV delivers a packet); the EV goes ASSUMED_BAD when
    all it carries is overdue (its newest transmission is) or after ``overdue_strikes``
    strikes, and what it still has in flight is resent at once. So a dead T1 is found
    ``W`` + one RTT + the grace after the fault (~23 us on lab-8plane), not after the RTO.
    ASSUMED_BAD EVs stop carrying data at once, their missing packets are resent on other
    GOOD EVs, and they are probed every ``probe_interval_ps`` (PROBE/PROBE_REPLY along the
    same path) until K consecutive probes are answered, then they are GOOD again. DENIED
    EVs (``deny``/``allow``) are never used or probed. ``port_down(now, plane)`` is local
    knowledge the driver may pass on (its NIC port lost signal): that plane's EVs go
    ASSUMED_BAD at once, without waiting for evidence, and the probes bring them back.

QP error
    A watchdog counts consecutive RTO periods (doubling, like an exponential retry range)
    without progress on any EV (new data acknowledged, a trim NACK or an answered probe all
    prove a live path). More than ``retry_cnt_exp`` of them is an error, at
    ``last progress + rto x (2^(retry_cnt_exp + 1) - 1)``. While any path answers, the QP
    never errors; with every EV ASSUMED_BAD it keeps probing and resumes when one answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrc.ev import ev_path_bits, ev_plane
from mrc.packet import (
    ACK,
    ACK_BYTES,
    DATA,
    DATA_HEADER_BYTES,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_IMM,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_TRIM,
    IMMDT_BYTES,
    NACK,
    PROBE,
    PROBE_REPLY,
    PSN_MASK,
    SACK_BITS,
    Packet,
    psn_diff,
)
from mrc.transport.base import (
    ASSUMED_BAD,
    DENIED,
    EVENT_EV_STATE,
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
    EVENT_SEND_COMPLETED,
    GOOD,
    PathChoice,
    TransportEvent,
)
from mrc.transport.cc import CcConfig, CongestionControl, make_cc
from mrc.transport.memory import (
    ReceiveBuffer,
    expected_checksum,
    message_key,
    payload_sha256,
    segment_digest,
)
from mrc.units import PS_PER_US

#: The unit of the MRC local ACK timeout: 1.024 us.
RTO_UNIT_PS = 1_024_000
SPRAY_POLICIES = ("round_robin", "reps")
#: ``retry_cnt_exp`` at or above this retries forever (NCCL_MRC_RETRY_CNT_EXP's convention).
RETRY_INFINITE = 25
_SACK_MASK = (1 << SACK_BITS) - 1
#: Receiver: a DATA PSN further than this ahead of the cumulative point is refused as bogus
#: (it would otherwise make the arrival bitmap huge).
_MAX_AHEAD = 1 << 20

# sender-side state of one packet (a segment)
_INFLIGHT = 0  # sent, counted in flight
_SUSPECT = 1  # a later packet on its EV was acked; waiting loss_grace_ps for a NACK
_LOST = 2  # waiting for retransmission
_ACKED = 3


@dataclass(frozen=True)
class MrcConfig:
    """Every knob of the MRC QP. Times are integer picoseconds."""

    ev_count: int = 128  # EVs per QP (used by drivers with evset.build_ev_set)
    spray: str = "reps"  # "round_robin" | "reps"
    reps_explore_every: int = 8  # REPS: every n-th packet of a plane explores (round robin)
    ack_every: int = 4  # coalesce: one ACK per this many new packets
    ack_delay_ps: int = 1 * PS_PER_US  # delayed ACK for a tail
    probe_interval_ps: int = 10 * PS_PER_US
    probes_to_reintegrate: int = 3  # K consecutive answered probes -> GOOD
    probe_timeout_ps: int | None = None  # a probe unanswered this long breaks the run; None: rto
    rto_floor_ps: int = 16 * PS_PER_US
    rto_exp: int = 6  # RTO = max(floor, 1.024 us x 2^rto_exp): 65.5 us
    retry_cnt_exp: int | None = 7  # None or >= 25: never error
    loss_grace_ps: int = 4 * PS_PER_US  # suspected loss waits this long for a trim NACK
    overdue_loss: bool = True  # time-based loss evidence from packets sent later on other EVs
    reorder_window_ps: int | None = None  # None: adaptive (module docstring); else fixed
    reorder_margin_rtts: float = 1.0  # window = this x min RTT + gain x RTT spread, <= RTO
    reorder_spread_gain: float = 1.0
    reorder_hold_rtts: int = 8  # the RTT spread is the max over about this many RTTs
    overdue_strikes: int = 2  # overdue losses with no delivery between that make an EV bad
    cc: CcConfig = field(default_factory=CcConfig)
    ack_req_on_last: bool = True  # ask for an immediate ACK on a message's last packet
    sender_completions: bool = True  # raise EVENT_SEND_COMPLETED when a send is fully acked

    def __post_init__(self) -> None:
        if self.spray not in SPRAY_POLICIES:
            raise ValueError(f"unknown spray policy {self.spray!r}; known: {SPRAY_POLICIES}")
        if not 0 <= self.rto_exp <= 24:
            raise ValueError(f"rto_exp must be in 0..24, got {self.rto_exp}")
        if self.retry_cnt_exp is not None and self.retry_cnt_exp < 0:
            raise ValueError("retry_cnt_exp must be >= 0 or None")
        for name in ("ev_count", "reps_explore_every", "ack_every", "probes_to_reintegrate",
                     "reorder_hold_rtts", "overdue_strikes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("ack_delay_ps", "probe_interval_ps", "rto_floor_ps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.loss_grace_ps < 0:
            raise ValueError("loss_grace_ps must not be negative")
        if self.probe_timeout_ps is not None and self.probe_timeout_ps <= 0:
            raise ValueError("probe_timeout_ps must be positive")
        if self.reorder_window_ps is not None and self.reorder_window_ps <= 0:
            raise ValueError("reorder_window_ps must be positive")
        if self.reorder_spread_gain < 0 or self.reorder_margin_rtts < 0:
            raise ValueError("reorder_margin_rtts and reorder_spread_gain must not be negative")

    @property
    def rto_ps(self) -> int:
        return max(self.rto_floor_ps, RTO_UNIT_PS << self.rto_exp)

    @property
    def retries_forever(self) -> bool:
        return self.retry_cnt_exp is None or self.retry_cnt_exp >= RETRY_INFINITE

    def error_after_ps(self) -> int | None:
        """How long after the last progress a QP with no live path errors (None: never)."""
        if self.retries_forever:
            return None
        return self.rto_ps * ((1 << (self.retry_cnt_exp + 1)) - 1)  # type: ignore[operator]


class MrcStats:
    """Counters of one QP (sender and receiver side). Plain ints: bumped on hot paths."""

    FIELDS = (
        "data_sent", "bytes_sent", "retransmissions", "acks_sent", "nacks_sent", "acks_received",
        "nacks_received", "trims", "ecn_echoes", "losses", "overdue_losses", "evicted",
        "timeouts", "packets_timed_out",
        "qp_timeouts", "probes_sent", "probes_answered", "probe_replies_sent", "paths_marked_bad",
        "reintegrated", "spurious_losses", "data_received", "duplicates", "trimmed_received",
        "bad_packets", "messages_sent", "messages_received", "reply_fallbacks",
        "dropped_after_error",
    )
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.data_sent = 0  # DATA packets sent, retransmissions included
        self.bytes_sent = 0  # payload bytes in them
        self.retransmissions = 0  # DATA packets that were retransmissions
        self.acks_sent = 0  # ACKs sent (receiver side)
        self.nacks_sent = 0  # trim NACKs sent (receiver side)
        self.acks_received = 0  # ACKs received
        self.nacks_received = 0  # NACKs received
        self.trims = 0  # trim NACKs that triggered a retransmission (congestion)
        self.ecn_echoes = 0  # ACKs echoing a CE mark
        self.losses = 0  # packets declared lost by evidence (per-EV FIFO or overdue)
        self.overdue_losses = 0  # of which: packets sent later on other EVs were acked
        self.evicted = 0  # in-flight packets resent because their EV went silent or port down
        self.timeouts = 0  # EV RTO expiries
        self.packets_timed_out = 0  # packets resent because their EV timed out
        self.qp_timeouts = 0  # watchdog expiries without progress (retry count)
        self.probes_sent = 0  # PROBEs sent
        self.probes_answered = 0  # PROBE_REPLYs that counted
        self.probe_replies_sent = 0  # PROBE_REPLYs sent (receiver side)
        self.paths_marked_bad = 0  # EV transitions to ASSUMED_BAD
        self.reintegrated = 0  # EV transitions ASSUMED_BAD -> GOOD
        self.spurious_losses = 0  # packets declared lost that were acknowledged after all
        self.data_received = 0  # new DATA placed (receiver side)
        self.duplicates = 0  # DATA that was already placed
        self.trimmed_received = 0  # trimmed DATA received
        self.bad_packets = 0  # malformed or impossible packets ignored
        self.messages_sent = 0  # WRITEs fully acknowledged
        self.messages_received = 0  # WRITEs fully placed
        self.reply_fallbacks = 0  # replies for an EV missing from the reply map
        self.dropped_after_error = 0  # posts and packets ignored after the QP error

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}


class _Ev:
    """Sender-side state of one EV."""

    __slots__ = ("ev", "plane", "t1", "address", "state", "usable", "fifo", "epoch",
                 "probe_seq", "probe_ok", "probes_out", "sent", "acked", "lost", "trims",
                 "timeouts", "strikes", "last_sent")

    def __init__(self, choice: PathChoice) -> None:
        self.ev = choice.ev
        self.plane = choice.plane
        self.t1 = choice.t1
        self.address = choice.address
        self.state = GOOD
        self.usable = True
        #: (segment, tx) in send order: the FIFO that loss inference walks. Lists, not
        #: deques: an EV carries a few packets at a time, and a QP has 128+ EVs (an empty
        #: deque costs 600 bytes, a list 56: 0.35 GB on a 1024-host permutation)
        self.fifo: list[tuple[_Seg, int]] = []
        self.epoch = 0  # bumped on every state change: stale probe timers die
        self.probe_seq = 0
        self.probe_ok = 0
        self.probes_out: list[tuple[int, int]] = []  # (probe seq, sent ps), oldest first
        self.sent = 0
        self.acked = 0
        self.lost = 0
        self.trims = 0
        self.timeouts = 0
        self.strikes = 0  # overdue losses since the EV last delivered a packet
        self.last_sent = -1  # send time of its newest transmission

    @property
    def choice(self) -> PathChoice:
        return PathChoice(self.ev, self.plane, self.t1, self.address)


class _Reorder:
    """Overdue-loss state of one scope (one plane, or the whole QP): its transmissions in
    send order, the send time of the newest one known delivered, and the reorder window
    learnt from the delays seen in that scope (see the module docstring)."""

    __slots__ = ("dq", "newest", "min_rtt", "srtt", "cur_max", "cur_start", "prev_max",
                 "window")

    def __init__(self, window: int) -> None:
        self.dq: deque[tuple[int, _Seg, int]] = deque()  # (sent, seg, tx)
        self.newest = -1  # send time of the newest transmission certainly acknowledged
        self.min_rtt = 0  # 0: no sample yet
        self.srtt = 0
        self.cur_max = 0  # longest delay in the current half of the hold period
        self.cur_start = -1  # when the current half began (-1: no sample yet)
        self.prev_max = -1  # longest delay in the previous half; -1: cold (window = RTO)
        self.window = window

    def sample(self, now: int, rtt: int, hold_rtts: int) -> None:
        """The RTT an ACK echoes (exact): min and smoothed RTT, and the clock of the
        two-bucket windowed max (each bucket half of ``hold_rtts`` smoothed RTTs)."""
        if not self.min_rtt or rtt < self.min_rtt:
            self.min_rtt = rtt
        srtt = self.srtt = rtt if not self.srtt else self.srtt + ((rtt - self.srtt) >> 3)
        if self.cur_start < 0:
            self.cur_start = now
        elif now - self.cur_start >= (hold_rtts * srtt) >> 1:
            self.prev_max = self.cur_max
            self.cur_max = 0
            self.cur_start = now
        if rtt > self.cur_max:
            self.cur_max = rtt

    def refresh(self, rto: int, margin: float, gain: float) -> int:
        """window = min(RTO, margin x min RTT + gain x (recent max delay - min RTT)); the
        RTO while the scope is cold (no evidence before the spread is known)."""
        prev = self.prev_max
        if prev >= 0:
            hi = prev if prev > self.cur_max else self.cur_max
            window = int(margin * self.min_rtt + gain * (hi - self.min_rtt))
            self.window = window if window < rto else rto
        return self.window


class _Msg:
    """A posted WRITE on the sender side."""

    __slots__ = ("msg_id", "length", "key", "payload", "imm", "posted_ps", "next_offset",
                 "unacked", "segmented")

    def __init__(self, msg_id: int, length: int, key: int, payload: bytes | None,
                 imm: int | None, posted_ps: int) -> None:
        self.msg_id = msg_id
        self.length = length
        self.key = key
        self.payload = payload
        self.imm = imm
        self.posted_ps = posted_ps
        self.next_offset = 0
        self.unacked = 0  # segments created and not yet acknowledged
        self.segmented = False


class _Seg:
    """One packet (PSN) on the sender side, across all its transmissions."""

    __slots__ = ("seq", "msg", "offset", "length", "ev", "tx", "sent_ps", "state", "sends")

    def __init__(self, seq: int, msg: _Msg, offset: int, length: int) -> None:
        self.seq = seq
        self.msg = msg
        self.offset = offset
        self.length = length
        self.ev: _Ev = None  # type: ignore[assignment]  # set by the first transmission
        self.tx = 0  # id of the current transmission (global, increasing)
        self.sent_ps = 0
        self.state = _INFLIGHT
        self.sends = 0


EvSelector = Callable[[PathChoice], bool] | Iterable[int]


class MrcQueuePair:
    """An MRC QP between ``host`` and ``peer`` (see the module docstring).

    ``evs``: this QP's EVs toward the peer (``evset.build_ev_set``). ``reply_evs``: the path
    back to the peer for each EV the *peer* sprays with; None when both sides' sets were
    built as a symmetric pair (then the own set answers). ``psn``/``peer_psn``: first PSN
    this side sends / expects. ``key_seed`` feeds ``memory.message_key``.
    """

    def __init__(self, qpn: int, host: int, peer: int, peer_qpn: int, mtu: int,
                 evs: Sequence[PathChoice], *, reply_evs: Sequence[PathChoice] | None = None,
                 config: MrcConfig | None = None, cc: CongestionControl | None = None,
                 psn: int = 0, peer_psn: int = 0, key_seed: int = 0) -> None:
        if mtu <= 0:
            raise ValueError("mtu must be positive")
        if not evs:
            raise ValueError("an MRC QP needs at least one EV")
        self.qpn = qpn
        self.host = host
        self.peer = peer
        self.peer_qpn = peer_qpn
        self.mtu = mtu
        self.config = cfg = config or MrcConfig()
        self.key_seed = key_seed
        self.events: deque[TransportEvent] = deque()
        self.bytes_placed = 0
        self.failed = False
        self.error_reason: str | None = None
        self.stats = MrcStats()
        self.cc: CongestionControl = cc if cc is not None else make_cc(cfg.cc)
        self._rto = cfg.rto_ps
        self._grace = cfg.loss_grace_ps
        self._probe_timeout = cfg.probe_timeout_ps or self._rto
        self._reps = cfg.spray == "reps"

        # ---- EVs
        self._evs: list[_Ev] = []
        self._by_ev: dict[int, _Ev] = {}
        for choice in evs:
            if choice.ev in self._by_ev:
                raise ValueError(f"EV {choice.ev:#x} given twice")
            e = _Ev(choice)
            self._evs.append(e)
            self._by_ev[choice.ev] = e
        planes = max(e.plane for e in self._evs) + 1
        self._plane_evs: list[list[_Ev]] = [[] for _ in range(planes)]
        for e in self._evs:
            self._plane_evs[e.plane].append(e)
        self._good: list[list[_Ev]] = [list(p) for p in self._plane_evs]
        self._rr = [0] * planes
        self._explore = [0] * planes
        self._recycle: list[deque[_Ev]] = [
            deque(maxlen=max(16, 4 * len(p))) for p in self._plane_evs]
        source = reply_evs if reply_evs is not None else evs
        self._reply: dict[int, tuple[int, int]] = {c.ev: (c.plane, c.address) for c in source}

        # ---- sender
        self._psn0 = psn & PSN_MASK
        self._queue: deque[_Msg] = deque()  # posted, not yet fully segmented (after _cur)
        self._cur: _Msg | None = None
        self._snd_nxt = 0  # next sequence number to assign
        self._snd_una = 0  # every seq below this is acknowledged
        self._sacked = 0  # bit i: seq _snd_una + i known acknowledged
        self._outstanding: dict[int, _Seg] = {}
        self._retx: deque[_Seg] = deque()
        #: False when poll() certainly has nothing (no new data, no retransmission, or
        #: failed): the driver polls idle QPs on every port kick, so that answer must be one
        #: attribute test.
        self._sendable = False
        self._tx = 0
        self._pipe = 0  # payload bytes in flight (INFLIGHT + SUSPECT)
        self._gq: deque[tuple[int, _Seg, int]] = deque()  # (sent, seg, tx): RTO in send order
        #: (deadline, seg, tx, overdue): suspected losses waiting out the grace; overdue
        #: tells the cross-EV evidence from the same-EV (FIFO) one
        self._suspects: deque[tuple[int, _Seg, int, bool]] = deque()
        # overdue-loss scopes: one per plane, and one for the whole QP
        self._overdue = cfg.overdue_loss
        self._fixed_window = cfg.reorder_window_ps
        first = cfg.reorder_window_ps or self._rto
        self._scopes: list[_Reorder] = [_Reorder(first) for _ in range(planes)]
        self._qscope = _Reorder(first)
        self._probe_q: deque[tuple[int, _Ev, int]] = deque()  # (due, ev, epoch)
        self._watchdog_at: int | None = None
        self._retries = 0
        self._last_progress = 0

        # ---- receiver
        self._rcv_next = peer_psn & PSN_MASK  # unwrapped: equals the PSN modulo 2^24
        self._rcv_bits = 0  # bit i: seq _rcv_next + i arrived
        self._rx: dict[int, ReceiveBuffer] = {}
        self._rx_imm: dict[int, int] = {}
        self._rx_first: dict[int, int] = {}  # earliest send time seen per message
        self._unrep: list[tuple[int, int, int]] = []  # arrivals not yet in an ACK: (seq, ev, ts)
        self._ack_due: int | None = None
        self._control: list[Packet] = []

    # ================================================================== public API
    @property
    def window(self) -> int:
        return self.cc.window

    @property
    def inflight_bytes(self) -> int:
        return self._pipe

    @property
    def rto_ps(self) -> int:
        return self._rto

    @property
    def poll_timer_floor_ps(self) -> int:
        """The soonest deadline a ``poll`` can create, relative to its ``now`` (the RTO of
        the packet it sends). Drivers need not re-read ``next_timer`` after a poll while a
        wake-up is armed before that."""
        return self._rto

    @property
    def paths(self) -> list[PathChoice]:
        return [e.choice for e in self._evs]

    def ev_state(self, ev: int) -> str:
        return self._by_ev[ev].state

    def ev_states(self) -> dict[int, str]:
        return {e.ev: e.state for e in self._evs}

    def ev_stats(self) -> list[dict[str, Any]]:
        """Per-EV counters (tables, not hot paths)."""
        return [{"ev": e.ev, "plane": e.plane, "t1": e.t1, "state": e.state, "sent": e.sent,
                 "acked": e.acked, "lost": e.lost, "trims": e.trims, "timeouts": e.timeouts,
                 "strikes": e.strikes}
                for e in self._evs]

    def message_key(self, msg_id: int) -> int:
        return message_key(self.host, self.qpn, msg_id, self.key_seed)

    def expected_checksum(self, msg_id: int, length: int, payload: bytes | None = None) -> int:
        """The checksum the peer must report for this QP's message ``msg_id``."""
        if payload is not None:
            return payload_sha256(payload)
        return expected_checksum(self.message_key(msg_id), length, self.mtu)

    def post_write(self, now: int, msg_id: int, length: int, *, payload: bytes | None = None,
                   imm: int | None = None) -> None:
        """Queue an RDMA WRITE (with immediate when ``imm`` is given) of ``length`` bytes."""
        if length <= 0:
            raise ValueError(f"a WRITE needs at least one byte, got {length}")
        if payload is not None and len(payload) != length:
            raise ValueError(f"payload has {len(payload)} bytes, length says {length}")
        if self.failed:
            self.stats.dropped_after_error += 1
            return
        msg = _Msg(msg_id, length, self.message_key(msg_id), payload, imm, now)
        if self._cur is None:
            self._cur = msg
        else:
            self._queue.append(msg)
        self._sendable = True
        if self._watchdog_at is None:
            self._last_progress = now
            self._retries = 0
            self._watchdog_at = now + self._rto

    def deny(self, now: int, which: EvSelector, reason: str = "denied") -> list[int]:
        """Operator drain: the selected EVs go DENIED (never used nor probed until allowed).
        ``which``: EV numbers, or a predicate on ``PathChoice`` (e.g. by plane and T1)."""
        changed = []
        for e in self._select(which):
            if e.state != DENIED:
                self._set_state(now, e, DENIED, reason)
                changed.append(e.ev)
        return changed

    def allow(self, now: int, which: EvSelector, *, validate: bool = False,
              reason: str = "allowed") -> list[int]:
        """Clear DENIED on the selected EVs: GOOD at once, or ASSUMED_BAD and probed first
        when ``validate``."""
        changed = []
        for e in self._select(which):
            if e.state == DENIED:
                if validate:
                    self._mark_bad(now, e, reason)
                else:
                    self._set_state(now, e, GOOD, reason)
                changed.append(e.ev)
        return changed

    def port_down(self, now: int, plane: int) -> list[int]:
        """The NIC's own port of ``plane`` lost signal (local knowledge, no evidence needed):
        every GOOD EV of that plane goes ASSUMED_BAD at once and whatever was in flight on
        the plane is resent on the others. Returns the EVs that changed. Nothing is needed
        when the port comes back: the probes get answered and reintegrate the EVs."""
        if self.failed or not 0 <= plane < len(self._plane_evs):
            return []
        changed = []
        for e in self._plane_evs[plane]:
            if e.state == GOOD:
                self._mark_bad(now, e, "port down")
                changed.append(e.ev)
            self._evict(e)
        return changed

    def take_control(self) -> list[Packet]:
        out = self._control
        if out:
            self._control = []
        return out

    # ================================================================== sender: data
    def poll(self, now: int, plane: int) -> Packet | None:
        """The next DATA for the idle port of ``plane``, or None (cheap when nothing can go)."""
        if not self._sendable or plane >= len(self._good):
            return None
        good = self._good[plane]
        if not good:
            return None
        pipe = self._pipe
        if pipe and pipe >= self.cc.window:
            return None
        retx = self._retx
        while retx:
            seg = retx.popleft()
            if seg.state == _LOST:
                if not retx and self._cur is None:
                    self._sendable = False
                return self._transmit(now, seg, plane, good, True)
        msg = self._cur
        if msg is None:
            self._sendable = False
            return None
        offset = msg.next_offset
        length = msg.length - offset
        if length > self.mtu:
            length = self.mtu
        seg = _Seg(self._snd_nxt, msg, offset, length)
        self._snd_nxt += 1
        msg.next_offset = offset + length
        msg.unacked += 1
        if msg.next_offset >= msg.length:
            msg.segmented = True
            if self._queue:
                self._cur = self._queue.popleft()
            else:
                self._cur = None
                self._sendable = bool(retx)
        self._outstanding[seg.seq] = seg
        return self._transmit(now, seg, plane, good, False)

    def _pick_ev(self, plane: int, good: list[_Ev], avoid: _Ev | None) -> _Ev:
        if self._reps:
            n = self._explore[plane] + 1
            if n >= self.config.reps_explore_every:
                self._explore[plane] = 0
            else:
                self._explore[plane] = n
                recycled = self._recycle[plane]
                while recycled:
                    e = recycled.popleft()
                    if e.usable and e is not avoid:
                        return e
        count = len(good)
        i = self._rr[plane] % count
        e = good[i]
        if e is avoid and count > 1:
            i = (i + 1) % count
            e = good[i]
        self._rr[plane] = i + 1
        return e

    def _transmit(self, now: int, seg: _Seg, plane: int, good: list[_Ev], retx: bool) -> Packet:
        e = self._pick_ev(plane, good, seg.ev if retx else None)
        self._tx += 1
        tx = self._tx
        seg.ev = e
        seg.tx = tx
        seg.sent_ps = now
        seg.state = _INFLIGHT
        seg.sends += 1
        e.fifo.append((seg, tx))
        e.sent += 1
        e.last_sent = now
        item = (now, seg, tx)
        self._gq.append(item)
        if self._overdue:
            self._scopes[plane].dq.append(item)
            self._qscope.dq.append(item)
        length = seg.length
        self._pipe += length
        stats = self.stats
        stats.data_sent += 1
        stats.bytes_sent += length
        msg = seg.msg
        offset = seg.offset
        flags = 0
        if offset + length == msg.length:
            flags = FLAG_LAST | FLAG_ACK_REQ if self.config.ack_req_on_last else FLAG_LAST
        if retx:
            flags |= FLAG_RETX | FLAG_ACK_REQ
            stats.retransmissions += 1
        elif self._cur is None and not self._retx:
            flags |= FLAG_ACK_REQ  # nothing queued behind it: do not wait for coalescing
        imm = 0
        if msg.imm is not None and flags & FLAG_LAST:
            flags |= FLAG_IMM  # immediate data rides on the last packet only, as in RoCE
            imm = msg.imm
        payload = msg.payload
        if payload is not None:
            data = payload[offset:offset + length]
            digest = 0
        else:
            data = None
            digest = segment_digest(msg.key, offset, length)
        size = DATA_HEADER_BYTES + length + (IMMDT_BYTES if flags & FLAG_IMM else 0)
        return Packet(DATA, self.host, self.peer, self.peer_qpn,
                      (self._psn0 + seg.seq) & PSN_MASK, ev=e.ev, msg_id=msg.msg_id,
                      offset=offset, length=length, msg_len=msg.length, flags=flags, ts=now,
                      imm=imm, da=e.address, size=size, payload=data, digest=digest,
                      plane=plane)

    # ================================================================== receive
    def receive(self, now: int, pkt: Packet) -> None:
        if self.failed:
            self.stats.dropped_after_error += 1
            return
        kind = pkt.kind
        if kind == DATA:
            self._on_data(now, pkt)
        elif kind == ACK or kind == NACK:
            self._on_ack(now, pkt)
        elif kind == PROBE:
            self._reply_probe(pkt)
        elif kind == PROBE_REPLY:
            self._on_probe_reply(now, pkt)
        else:
            self.stats.bad_packets += 1

    # ---------------------------------------------------------------- receiver side
    def _on_data(self, now: int, pkt: Packet) -> None:
        stats = self.stats
        nxt = self._rcv_next
        seq = nxt + psn_diff(pkt.psn, nxt & PSN_MASK)
        rel = seq - nxt
        seen = rel < 0 or (self._rcv_bits >> rel) & 1
        if pkt.trimmed:
            stats.trimmed_received += 1
            if seen:  # an earlier copy was placed: an ACK says so
                self._send_acks(now, (seq, pkt.ev, pkt.ts), False)
            else:
                self._send_nack(pkt)
            return
        if seen:
            stats.duplicates += 1
            self._send_acks(now, (seq, pkt.ev, pkt.ts), False)
            return
        if rel >= _MAX_AHEAD:
            stats.bad_packets += 1
            return
        buf = self._rx.get(pkt.msg_id)
        if buf is None:
            if pkt.msg_len <= 0:
                stats.bad_packets += 1
                return
            buf = ReceiveBuffer(pkt.msg_id, pkt.msg_len, self.mtu, pkt.payload is not None)
            self._rx[pkt.msg_id] = buf
            self._rx_first[pkt.msg_id] = pkt.ts
        elif pkt.ts < self._rx_first[pkt.msg_id]:
            self._rx_first[pkt.msg_id] = pkt.ts
        try:
            placed = buf.place(pkt.offset, pkt.length, pkt.digest, pkt.payload)
        except ValueError:
            stats.bad_packets += 1  # does not fit its message: never acknowledge it
            return
        stats.data_received += 1
        bits = self._rcv_bits | (1 << rel)
        if rel == 0:
            run = (~bits & (bits + 1)).bit_length() - 1
            bits >>= run
            self._rcv_next = nxt + run
        self._rcv_bits = bits
        self.bytes_placed += placed
        if pkt.flags & FLAG_IMM:
            self._rx_imm[pkt.msg_id] = pkt.imm
        if buf.complete:
            msg_id = buf.msg_id
            del self._rx[msg_id]
            stats.messages_received += 1
            # posted_ps: the earliest send time among the message's packets (the receiver
            # cannot know the post time; the sender's driver does)
            detail: dict[str, object] = {
                "msg_id": msg_id, "bytes": buf.length, "checksum": buf.checksum(),
                "posted_ps": self._rx_first.pop(msg_id), "src": self.peer,
                "src_qpn": self.peer_qpn, "imm": self._rx_imm.pop(msg_id, None)}
            data = buf.data()
            if data is not None:
                detail["data"] = data
            self.events.append(TransportEvent(now, EVENT_MESSAGE_COMPLETED, self.qpn, detail))
        unrep = self._unrep
        item = (seq, pkt.ev, pkt.ts)
        unrep.append(item)
        ecn = pkt.ecn == ECN_CE
        if ecn or pkt.flags & FLAG_ACK_REQ or len(unrep) >= self.config.ack_every:
            self._send_acks(now, item, ecn)
        elif self._ack_due is None:
            self._ack_due = now + self.config.ack_delay_ps

    def _send_acks(self, now: int, trigger: tuple[int, int, int], ecn: bool) -> None:
        """ACK(s) covering every unreported arrival; the first echoes ``trigger``."""
        nxt = self._rcv_next
        bits = self._rcv_bits
        items = [u for u in self._unrep if u[0] >= nxt]
        self._unrep.clear()
        self._ack_due = None
        if len(items) > 1:
            items.sort()
        if not items:
            top = nxt + bits.bit_length() - 1 if bits else nxt
            base = max(nxt, top - SACK_BITS + 1)
            self._emit_ack(nxt, base, bits, trigger, ecn)
            return
        first = True
        while items:
            base = max(nxt, items[-1][0] - SACK_BITS + 1)
            k = len(items)
            while k and items[k - 1][0] >= base:
                k -= 1
            # the first ACK echoes the trigger; extra ones echo the newest packet they cover
            echo = trigger if first else items[-1]
            del items[k:]
            self._emit_ack(nxt, base, bits, echo, ecn and first)
            first = False

    def _emit_ack(self, nxt: int, base: int, bits: int, echo: tuple[int, int, int],
                  ecn: bool) -> None:
        seq, ev, ts = echo
        plane, da = self._reply_path(ev)
        self._control.append(Packet(
            ACK, self.host, self.peer, self.peer_qpn, nxt & PSN_MASK, ev=ev,
            echo_psn=seq & PSN_MASK, sack_base=base & PSN_MASK,
            sack=(bits >> (base - nxt)) & _SACK_MASK, flags=FLAG_ECN_ECHO if ecn else 0,
            ts=ts, da=da, size=ACK_BYTES, plane=plane))
        self.stats.acks_sent += 1

    def _send_nack(self, pkt: Packet) -> None:
        nxt = self._rcv_next
        bits = self._rcv_bits
        top = nxt + bits.bit_length() - 1 if bits else nxt
        base = max(nxt, top - SACK_BITS + 1)
        plane, da = self._reply_path(pkt.ev)
        self._control.append(Packet(
            NACK, self.host, self.peer, self.peer_qpn, nxt & PSN_MASK, ev=pkt.ev,
            echo_psn=pkt.psn, sack_base=base & PSN_MASK,
            sack=(bits >> (base - nxt)) & _SACK_MASK, flags=FLAG_TRIM, ts=pkt.ts, da=da,
            plane=plane))
        self.stats.nacks_sent += 1

    def _reply_probe(self, pkt: Packet) -> None:
        plane, da = self._reply_path(pkt.ev)
        self._control.append(Packet(
            PROBE_REPLY, self.host, self.peer, self.peer_qpn, pkt.psn, ev=pkt.ev, ts=pkt.ts,
            da=da, plane=plane))
        self.stats.probe_replies_sent += 1

    def _reply_path(self, ev: int) -> tuple[int, int]:
        """(plane, address) back to the peer along the path of the peer's EV ``ev``."""
        found = self._reply.get(ev)
        if found is None:
            # Not in the map: same plane and T1 from our own set, else any EV of that plane.
            self.stats.reply_fallbacks += 1
            low = ev_path_bits(ev)
            plane = ev_plane(ev)
            match = next((e for e in self._evs if ev_path_bits(e.ev) == low), None)
            if match is None:
                match = next((e for e in self._evs if e.plane == plane), self._evs[0])
            found = (match.plane, match.address)
            self._reply[ev] = found
        return found

    # ---------------------------------------------------------------- sender: ACK / NACK
    def _on_ack(self, now: int, pkt: Packet) -> None:
        stats = self.stats
        nack = pkt.kind == NACK
        if nack:
            stats.nacks_received += 1
        else:
            stats.acks_received += 1
        una = self._snd_una
        psn0 = self._psn0
        una_psn = (psn0 + una) & PSN_MASK
        cum = una + psn_diff(pkt.psn, una_psn)
        nxt = self._snd_nxt
        if cum > nxt:
            stats.bad_packets += 1
            return
        out = self._outstanding
        newly: list[_Seg] = []
        if cum > una:
            pop = out.pop
            for seq in range(una, cum):
                seg = pop(seq, None)
                if seg is not None:
                    newly.append(seg)
            self._sacked >>= cum - una
            una = self._snd_una = cum
            una_psn = (psn0 + una) & PSN_MASK
        sack = pkt.sack
        if sack and nxt > una:
            rel = psn_diff(pkt.sack_base, una_psn)
            if -SACK_BITS < rel < nxt - una:
                window = sack << rel if rel >= 0 else sack >> -rel
                new = window & ~self._sacked & ((1 << (nxt - una)) - 1)
            else:
                new = 0  # entirely acknowledged already, or bogus
            if new:
                self._sacked |= new
                pop = out.pop
                while new:
                    low = new & -new
                    new ^= low
                    seg = pop(una + low.bit_length() - 1, None)
                    if seg is not None:
                        newly.append(seg)
        acked_bytes = 0
        progress = False
        ts = pkt.ts
        rtt = now - ts if not nack and 0 < ts <= now else None
        overdue = self._overdue
        learn = overdue and self._fixed_window is None
        if rtt is not None and learn:
            # the reorder windows learn from ACKs only: a trim NACK skips the queues
            e = self._by_ev.get(pkt.ev)
            hold = self.config.reorder_hold_rtts
            if e is not None:
                self._scopes[e.plane].sample(now, rtt, hold)
            self._qscope.sample(now, rtt, hold)
        if newly:
            progress = True
            ecn = bool(pkt.flags & FLAG_ECN_ECHO)
            echo_seq = una + psn_diff(pkt.echo_psn, una_psn)
            scan: list[_Seg] = []
            reps = self._reps and not nack
            recycle = self._recycle
            scopes = self._scopes
            qscope = self._qscope
            touched: list[_Reorder] = []
            for seg in newly:
                state = seg.state
                seg.state = _ACKED
                e = seg.ev
                # loss evidence needs to know *which* transmission arrived: certain for a
                # packet sent once, or for the very one this ACK echoes
                certain = seg.sends == 1 or (seg.seq == echo_seq and seg.sent_ps == ts)
                if certain:
                    e.strikes = 0  # the EV delivered: its path works
                    if overdue:
                        sent = seg.sent_ps
                        sc = scopes[e.plane]
                        if learn:
                            # every packet this ACK reports is a delay sample, not only
                            # the one it echoes: slow paths are rarely the echoed one
                            age = now - sent
                            if age > sc.cur_max:
                                sc.cur_max = age
                            if age > qscope.cur_max:
                                qscope.cur_max = age
                        if sent > sc.newest:
                            if sc not in touched:
                                touched.append(sc)
                            sc.newest = sent
                        if sent > qscope.newest:
                            qscope.newest = sent
                if state != _LOST:
                    self._pipe -= seg.length
                    e.acked += 1
                    if state == _INFLIGHT and certain:
                        scan.append(seg)
                    if reps and not (ecn and seg.seq == echo_seq):
                        recycle[e.plane].append(e)
                else:
                    stats.spurious_losses += 1
                acked_bytes += seg.length
                msg = seg.msg
                msg.unacked -= 1
                if msg.segmented and not msg.unacked:
                    self._sender_done(now, msg)
            for seg in scan:
                self._infer_losses(now, seg)
            if overdue:
                for sc in touched:
                    self._scan_overdue(now, sc)
                self._scan_overdue(now, qscope)
        if nack:
            if pkt.flags & FLAG_TRIM:
                progress = self._on_trim(now, pkt, una, una_psn) or progress
        else:
            ecn = bool(pkt.flags & FLAG_ECN_ECHO)
            if ecn:
                stats.ecn_echoes += 1
            self.cc.on_ack(now, acked_bytes, rtt, ecn, pkt.ev)
        if progress:
            self._progress(now)

    def _on_trim(self, now: int, pkt: Packet, una: int, una_psn: int) -> bool:
        """NACK(trim): resend that transmission at once; congestion, never loss."""
        seg = self._outstanding.get(una + psn_diff(pkt.echo_psn, una_psn))
        if seg is None or seg.state > _SUSPECT or seg.sent_ps != pkt.ts:
            return False  # already acked, already queued, or an older transmission's NACK
        seg.state = _LOST
        self._pipe -= seg.length
        self._retx.appendleft(seg)
        self._sendable = True
        e = seg.ev
        e.trims += 1
        self.stats.trims += 1
        self.cc.on_trim(now, e.ev)
        return True

    def _infer_losses(self, now: int, acked: _Seg) -> None:
        """``acked`` came back: every live packet sent before it on its EV is lost (FIFO)."""
        fifo = acked.ev.fifo
        tx = acked.tx
        done = 0  # entries up to and including ``acked`` leave the FIFO
        for seg, stx in fifo:
            if stx > tx:
                break
            done += 1
            if seg is acked:
                break
            if seg.state == _INFLIGHT and seg.tx == stx:
                if self._grace:
                    seg.state = _SUSPECT
                    self._suspects.append((now + self._grace, seg, stx, False))
                else:
                    self._lose(seg)
                    self.stats.losses += 1
                    self._loss_on(now, seg.ev, f"loss psn={self._psn(seg)}")
        if done:
            del fifo[:done]

    def _scan_overdue(self, now: int, sc: _Reorder) -> None:
        """Walk the scope's transmissions in send order up to the newest delivered send
        time minus the reorder window: every one still in flight there is overdue.
        Amortised O(1) per packet: each entry is looked at once, then dropped."""
        cfg = self.config
        window = sc.window if self._fixed_window else sc.refresh(
            self._rto, cfg.reorder_margin_rtts, cfg.reorder_spread_gain)
        bound = sc.newest - window
        dq = sc.dq
        while dq:
            item = dq[0]
            if item[0] >= bound:
                break
            dq.popleft()
            seg = item[1]
            if seg.tx == item[2] and seg.state == _INFLIGHT:
                if self._grace:
                    seg.state = _SUSPECT  # a trim NACK may still be on its way back
                    self._suspects.append((now + self._grace, seg, item[2], True))
                else:
                    self._overdue_lost(now, seg)

    def _overdue_bound(self, plane: int) -> int:
        """Transmissions sent before this time are overdue on ``plane``."""
        sc = self._scopes[plane]
        q = self._qscope
        a = sc.newest - sc.window
        b = q.newest - q.window
        return a if a > b else b

    def _overdue_lost(self, now: int, seg: _Seg) -> None:
        """An overdue packet's grace ran out: it is lost and its EV gets a strike. The EV
        goes ASSUMED_BAD when all it carries is overdue (it has delivered nothing sent
        since) or after ``overdue_strikes`` strikes without a delivery in between."""
        self._lose(seg)
        stats = self.stats
        stats.losses += 1
        stats.overdue_losses += 1
        e = seg.ev
        e.strikes += 1
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD and (e.strikes >= self.config.overdue_strikes
                                or e.last_sent < self._overdue_bound(e.plane)):
            self._mark_bad(now, e, f"overdue psn={self._psn(seg)} strikes={e.strikes}")
            self._evict(e)

    def _evict(self, e: _Ev) -> None:
        """Resend elsewhere everything still in flight on ``e`` (its path is presumed dead)."""
        self.stats.evicted += self._lose_fifo(e)

    def _lose_fifo(self, e: _Ev) -> int:
        """Declare lost every transmission still in flight on ``e`` (its latest, not yet
        acknowledged or lost); empties the FIFO and returns how many."""
        n = 0
        for seg, tx in e.fifo:
            if seg.tx == tx and seg.state <= _SUSPECT:
                self._lose(seg)
                n += 1
        e.fifo.clear()
        return n

    def _lose(self, seg: _Seg) -> None:
        seg.state = _LOST
        self._pipe -= seg.length
        self._retx.append(seg)
        self._sendable = not self.failed
        seg.ev.lost += 1

    def _loss_on(self, now: int, e: _Ev, reason: str) -> None:
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, reason)

    def _sender_done(self, now: int, msg: _Msg) -> None:
        self.stats.messages_sent += 1
        if self.config.sender_completions:
            self.events.append(TransportEvent(now, EVENT_SEND_COMPLETED, self.qpn, {
                "msg_id": msg.msg_id, "bytes": msg.length, "posted_ps": msg.posted_ps,
                "dst": self.peer}))

    def _psn(self, seg: _Seg) -> int:
        return (self._psn0 + seg.seq) & PSN_MASK

    def _has_work(self) -> bool:
        return bool(self._outstanding) or self._cur is not None

    def _progress(self, now: int) -> None:
        self._retries = 0
        self._last_progress = now
        self._watchdog_at = now + self._rto if self._has_work() else None

    # ---------------------------------------------------------------- EV states, probes
    def _select(self, which: EvSelector) -> list[_Ev]:
        if callable(which):
            return [e for e in self._evs if which(e.choice)]
        out = []
        for ev in which:
            e = self._by_ev.get(ev)
            if e is None:
                raise KeyError(f"EV {ev:#x} is not one of QP {self.qpn}'s EVs")
            out.append(e)
        return out

    def _set_state(self, now: int, e: _Ev, new: str, reason: str) -> None:
        old = e.state
        e.state = new
        e.usable = new == GOOD
        e.epoch += 1
        plane = e.plane
        self._good[plane] = [x for x in self._plane_evs[plane] if x.usable]
        if new == ASSUMED_BAD:
            self.stats.paths_marked_bad += 1
        elif new == GOOD:
            e.strikes = 0  # a fresh start: old strikes say nothing about the path now
            if old == ASSUMED_BAD:
                self.stats.reintegrated += 1
        self.events.append(TransportEvent(now, EVENT_EV_STATE, self.qpn, {
            "ev": e.ev, "plane": plane, "t1": e.t1, "old": old, "new": new, "reason": reason}))

    def _mark_bad(self, now: int, e: _Ev, reason: str) -> None:
        self._set_state(now, e, ASSUMED_BAD, reason)
        e.probe_ok = 0
        e.probes_out.clear()
        self._probe_q.append((now + self.config.probe_interval_ps, e, e.epoch))

    def _send_probe(self, now: int, e: _Ev) -> None:
        outq = e.probes_out
        limit = now - self._probe_timeout
        while outq and outq[0][1] <= limit:
            del outq[0]  # never answered: the run of answered probes is broken
            e.probe_ok = 0
        e.probe_seq = (e.probe_seq + 1) & PSN_MASK
        outq.append((e.probe_seq, now))
        self._control.append(Packet(
            PROBE, self.host, self.peer, self.peer_qpn, e.probe_seq, ev=e.ev, ts=now,
            da=e.address, plane=e.plane))
        self.stats.probes_sent += 1

    def _on_probe_reply(self, now: int, pkt: Packet) -> None:
        e = self._by_ev.get(pkt.ev)
        if e is None or e.state != ASSUMED_BAD:
            return
        outq = e.probes_out
        s = pkt.psn
        if not outq or psn_diff(s, outq[0][0]) < 0 or psn_diff(s, outq[-1][0]) > 0:
            return  # a reply to a probe from before the EV's latest state change
        while outq:
            seq, _ = outq.pop(0)
            if seq == s:
                e.probe_ok += 1
                break
            e.probe_ok = 0  # an earlier probe on this FIFO path never came back
        self.stats.probes_answered += 1
        self._progress(now)
        if e.probe_ok >= self.config.probes_to_reintegrate:
            outq.clear()
            self._set_state(now, e, GOOD, f"{e.probe_ok} probes answered")

    # ================================================================== timers
    def next_timer(self) -> int | None:
        if self.failed:
            return None
        best = self._watchdog_at
        due = self._ack_due
        if due is not None and (best is None or due < best):
            best = due
        gq = self._gq
        while gq:
            _, seg, tx = gq[0]
            if seg.tx == tx and seg.state <= _SUSPECT:
                due = gq[0][0] + self._rto
                if best is None or due < best:
                    best = due
                break
            gq.popleft()
        sq = self._suspects
        while sq:
            due, seg, tx, _ = sq[0]
            if seg.tx == tx and seg.state == _SUSPECT:
                if best is None or due < best:
                    best = due
                break
            sq.popleft()
        pq = self._probe_q
        while pq:
            due, e, epoch = pq[0]
            if e.epoch == epoch and e.state == ASSUMED_BAD:
                if best is None or due < best:
                    best = due
                break
            pq.popleft()
        return best

    def handle_timer(self, now: int) -> None:
        if self.failed:
            return
        if self._ack_due is not None and self._ack_due <= now:
            if self._unrep:
                self._send_acks(now, self._unrep[-1], False)
            self._ack_due = None
        # suspected losses whose grace ran out without a NACK
        sq = self._suspects
        while sq and sq[0][0] <= now:
            _, seg, tx, overdue = sq.popleft()
            if seg.tx == tx and seg.state == _SUSPECT:
                if overdue:
                    self._overdue_lost(now, seg)
                    continue
                self._lose(seg)
                self.stats.losses += 1
                self._loss_on(now, seg.ev, f"loss psn={self._psn(seg)}")
        # RTO: the oldest live transmission bounds every EV's deadline
        gq = self._gq
        limit = now - self._rto
        while gq:
            sent, seg, tx = gq[0]
            if seg.tx != tx or seg.state > _SUSPECT:
                gq.popleft()
                continue
            if sent > limit:
                break
            gq.popleft()
            self._ev_timeout(now, seg)
        # probes of ASSUMED_BAD EVs
        pq = self._probe_q
        interval = self.config.probe_interval_ps
        while pq and pq[0][0] <= now:
            _, e, epoch = pq.popleft()
            if e.epoch != epoch or e.state != ASSUMED_BAD:
                continue
            self._send_probe(now, e)
            pq.append((now + interval, e, epoch))
        # watchdog: consecutive timeouts with no progress anywhere
        if self._watchdog_at is not None and self._watchdog_at <= now:
            self._watchdog(now)

    def _ev_timeout(self, now: int, seg: _Seg) -> None:
        """``seg``'s transmission went unanswered for an RTO: its EV is presumed broken and
        everything still in flight on it is resent elsewhere."""
        e = seg.ev
        self.stats.timeouts += 1
        e.timeouts += 1
        lost = 0
        if seg.state <= _SUSPECT:
            self._lose(seg)
            lost += 1
        lost += self._lose_fifo(e)
        self.stats.packets_timed_out += lost
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"timeout psn={self._psn(seg)}")

    def _watchdog(self, now: int) -> None:
        if not self._has_work():
            self._watchdog_at = None
            return
        self._retries += 1
        self.stats.qp_timeouts += 1
        cfg = self.config
        if not cfg.retries_forever and self._retries > cfg.retry_cnt_exp:  # type: ignore[operator]
            counts = {GOOD: 0, ASSUMED_BAD: 0, DENIED: 0}
            for e in self._evs:
                counts[e.state] += 1
            self._fail(now, (
                f"retry_cnt_exp={cfg.retry_cnt_exp} exhausted: {self._retries} consecutive "
                f"timeouts (rto {self._rto} ps, doubling) without progress on any EV since "
                f"t={self._last_progress} ps; EVs good={counts[GOOD]} "
                f"assumed_bad={counts[ASSUMED_BAD]} denied={counts[DENIED]}; "
                f"{len(self._outstanding)} packets unacknowledged"))
            return
        self._watchdog_at = now + (self._rto << min(self._retries, 24))

    def _fail(self, now: int, reason: str) -> None:
        self.failed = True
        self._sendable = False
        self.error_reason = reason
        self._watchdog_at = None
        self._ack_due = None
        self.events.append(TransportEvent(now, EVENT_QP_ERROR, self.qpn, {"reason": reason}))


