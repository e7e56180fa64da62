"""The MRC QP's knobs (:class:`MrcConfig`), its counters (:class:`MrcStats`), and the face of
the QP its rooms share (:class:`QpCore`).

Times are integer picoseconds. The RTO follows MRC's local ACK timeout: ``max(floor, 1.024 us
x 2^rto_exp)``; ``retry_cnt_exp`` counts the doubling RTO periods without progress before
the QP errors (NCCL_MRC_RETRY_CNT_EXP's convention: 25 or more retries forever).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from mrc.packet import Packet
from mrc.transport.base import TransportEvent
from mrc.transport.mrc.cc import CcConfig
from mrc.units import PS_PER_US

#: The unit of the MRC local ACK timeout: 1.024 us.
RTO_UNIT_PS = 1_024_000
SPRAY_POLICIES = ("round_robin", "reps")
#: ``retry_cnt_exp`` at or above this retries forever (NCCL_MRC_RETRY_CNT_EXP's convention).
RETRY_INFINITE = 25


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
    reorder_window_ps: int | None = None  # None: adaptive (see reorder.py); else fixed
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


class QpCore(Protocol):
    """The part of an MRC QP its rooms share: identity, knobs, counters and outputs.

    Rooms keep their own references to what never changes (the config, the stats, the
    events deque, the numbers); through this they reach only what the QP rebinds or counts
    in place: ``control`` (``take_control`` hands the list over and starts a new one),
    ``bytes_placed``, ``failed`` and ``error_reason``."""

    qpn: int
    host: int
    peer: int
    peer_qpn: int
    mtu: int
    config: MrcConfig
    stats: MrcStats
    events: deque[TransportEvent]
    control: list[Packet]
    bytes_placed: int
    failed: bool
    error_reason: str | None
