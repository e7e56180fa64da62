"""The MRC QP's knobs (:class:`MrcConfig`), its counters (:class:`MrcStats`), and the face of
the QP its rooms share (:class:`QpCore`).

Times are integer picoseconds. The knobs come in two kinds, and the config says which:

**Published** (OCP ``mrc.h`` ``mrc_qp_attr`` and the NCCL plugin's variables, with the
plugin's defaults):

* ``timeout``: the local ACK timeout, 1.024 us x 2^timeout (0..24; NCCL_MRC_TIMEOUT=20,
  1.07 s). It is the QP's retry clock: the QP errors only after retrying without progress.
* ``retry_linear_cnt`` (0..7, NCCL_MRC_RETRY_CNT_LINEAR=7) and ``retry_exp_cnt`` (0..25,
  NCCL_MRC_RETRY_CNT_EXP=25; 25 = retry forever). The rule they imply here: with T the
  timeout, the first expiry comes T after the last progress; the first ``retry_linear_cnt``
  retries wait T each (fixed interval), the next ``retry_exp_cnt`` wait 2T, 4T, ...,
  2^retry_exp_cnt T (exponential backoff); the expiry after the last retry errors the QP::

      error at  last progress + T x (1 + retry_linear_cnt) + T x (2^(retry_exp_cnt+1) - 2)

  (``retry_exp_cnt = 0`` is the verbs rule, (retry_cnt + 1) x timeout.) Progress is any
  proof that a path works: new data acknowledged, a trim NACK, an answered probe.
* ``mpr`` / ``mpr_dest``: the PSN range the requester may have outstanding / the responder
  tracks, in units of 128 PSNs (the examples use 8: 1024 PSNs).
* ``max_wimm`` / ``max_wimm_dest``: WRITEs with immediate outstanding as requester / as
  responder (the examples use 128). RNR does not exist in MRC: the sender never has more
  immediates in flight than the responder has receive WRs for.
* ``ev_min_active``: the floor of usable EVs (``ev_min_active`` of the EV profile,
  ``min_active_ev_per_qp`` of the older QP API): the NIC marks no EV ASSUMED_BAD when that
  would leave fewer GOOD ones (None: a quarter of the QP's EVs, as the OCP examples set it).

**mrc-lab's own model** (the published interfaces say a NIC detects bad paths, not how; each
is named ``own`` in docs/fidelity.md with why its default is what it is): ``ev_timeout_ps``
(per-EV path timer), ``loss_grace_ps``, ``overdue_loss`` and ``overdue_strikes``, the reorder
window (``reorder_*``), ``probe_interval_ps``, ``probe_timeout_ps``,
``probes_to_reintegrate``, the spray policy (``spray``, ``reps_explore_every``, and
path-aware spraying: ``path_aware``, ``slow_margin_rtts``, :mod:`.spray`) and ACK
coalescing (``ack_every``, ``ack_delay_ps``, ``ack_req_on_last``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from mrc.knobs import check_knobs, knob, scaled_ps
from mrc.packet import Packet
from mrc.transport.base import TransportEvent
from mrc.transport.mrc.cc import CcConfig
from mrc.units import PS_PER_US

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

#: The unit of the MRC local ACK timeout: 1.024 us.
TIMEOUT_UNIT_PS = 1_024_000
SPRAY_POLICIES = ("round_robin", "reps")
#: ``retry_exp_cnt`` at this value retries forever (mrc.h: "25 = infinite").
RETRY_INFINITE = 25
#: Largest values the header's fields take.
MAX_TIMEOUT = 24
MAX_RETRY_LINEAR = 7
#: PSNs per unit of ``mpr`` / ``mpr_dest``.
MPR_UNIT_PSNS = 128


def error_delay_ps(timeout_ps: int, linear: int, exponential: int) -> int | None:
    """Time from the last progress to the QP error under the retry rule (None: never)."""
    if exponential >= RETRY_INFINITE:
        return None
    return timeout_ps * (1 + linear) + timeout_ps * ((1 << (exponential + 1)) - 2)


@dataclass(frozen=True)
class MrcConfig:
    """Every knob of the MRC QP (see the module docstring: published, then own model). Each
    field's :func:`~mrc.knobs.knob` says what it is and which values it takes: the config
    checks them, and a lab's ``[transport.NAME]`` key is derived from them."""

    # ---- published (mrc.h mrc_qp_attr; NCCL plugin defaults)
    timeout: int = knob(20, "published (NCCL_MRC_TIMEOUT): local ACK timeout 1.024 us x "
                        "2^timeout, the retry clock", minimum=0, maximum=MAX_TIMEOUT,
                        real_timer=True)
    retry_linear_cnt: int = knob(7, "published (NCCL_MRC_RETRY_CNT_LINEAR): retries at a "
                                 "fixed interval of one timeout", minimum=0,
                                 maximum=MAX_RETRY_LINEAR)
    retry_exp_cnt: int = knob(25, "published (NCCL_MRC_RETRY_CNT_EXP): retries with "
                              "exponential backoff after the linear ones; 25 = retry forever",
                              minimum=0, maximum=RETRY_INFINITE,
                              problem=f"retry_exp_cnt must be in 0..{RETRY_INFINITE} "
                                      f"({RETRY_INFINITE} = infinite), got {{value}}")
    mpr: int = knob(8, "published: PSN range the requester may have outstanding, units of "
                    "128 PSNs", minimum=1, maximum=255)
    mpr_dest: int = knob(8, "published: PSN range the responder tracks, units of 128 PSNs",
                         minimum=1, maximum=255)
    max_wimm: int = knob(128, "published: WRITEs with immediate outstanding as requester",
                         minimum=1, maximum=65535)
    max_wimm_dest: int = knob(128, "published: WRITEs with immediate outstanding as "
                              "responder", minimum=1, maximum=65535)
    ev_count: int = knob(128, "published (max_ev_per_qp / the EV profile's ev_count): EVs per "
                         "QP, the 'EVs per QP' shorthand for a generated profile", minimum=1)
    ev_min_active: int | None = knob(
        None, "published (ev_min_active / min_active_ev_per_qp): the NIC marks no EV "
        "ASSUMED_BAD below this many GOOD ones", minimum=0,
        problem="ev_min_active must be in 0..ev_count", none="ev_count / 4, as the OCP examples")
    # ---- mrc-lab's own model
    ev_timeout_ps: int = knob(64 * TIMEOUT_UNIT_PS, "own model: per-EV path timer (an EV whose "
                              "oldest packet waits this long is assumed bad)", gt=0)
    spray: str = knob("reps", "own model: how packets pick an EV: round_robin or reps "
                      "(recycle EVs that delivered)", choices=SPRAY_POLICIES,
                      problem=f"unknown spray policy {{value!r}}; known: {SPRAY_POLICIES}")
    reps_explore_every: int = knob(8, "own model: REPS: every n-th packet of a plane explores "
                                   "(round robin)", minimum=1)
    path_aware: bool = knob(True, "own model: path-aware spraying: REPS recycles an EV only "
                            "when its packet came back without a CE mark and not slower than "
                            "the QP's usual delivery time plus slow_margin_rtts; a CE mark on "
                            "a slow packet steers the spray, not the window")
    slow_margin_rtts: float = knob(0.3, "own model: path-aware spraying: a packet is slow when "
                                   "it took this many unloaded RTTs longer than the QP's usual "
                                   "(its running median)", minimum=0, maximum=1000,
                                   problem="slow_margin_rtts must be in 0..1000")
    ack_every: int = knob(4, "own model: one ACK per this many new packets", minimum=1)
    ack_delay_ps: int = knob(1 * PS_PER_US, "own model: delayed ACK for a message's tail",
                             gt=0)
    probe_interval_ps: int = knob(10 * PS_PER_US, "own model: probes of a bad EV are this far "
                                  "apart", gt=0)
    probes_to_reintegrate: int = knob(3, "own model: answered probes in a row that bring a bad "
                                      "EV back", minimum=1)
    probe_timeout_ps: int | None = knob(None, "own model: a probe unanswered this long breaks "
                                        "the run of answers", gt=0, none="ev_timeout_us")
    loss_grace_ps: int = knob(4 * PS_PER_US, "own model: a suspected loss waits this long for "
                              "a trim NACK", minimum=0)
    overdue_loss: bool = knob(True, "own model: time-based loss evidence from packets sent "
                              "later on other EVs")
    reorder_window_ps: int | None = knob(
        None, "own model: how long a gap may be reordering before it is loss", gt=0,
        none="adaptive: margin x min RTT + gain x RTT spread, at most the EV timer")
    reorder_margin_rtts: float = knob(1.0, "own model: adaptive reorder window: min RTTs of "
                                      "margin")
    reorder_spread_gain: float = knob(1.0, "own model: adaptive reorder window: weight of the "
                                      "RTT spread")
    reorder_hold_rtts: int = knob(8, "own model: the RTT spread is the largest over about this "
                                  "many RTTs", minimum=1)
    overdue_strikes: int = knob(2, "own model: overdue losses with no delivery between that "
                                "make an EV bad", minimum=1)
    cc: CcConfig = field(default_factory=CcConfig)
    ack_req_on_last: bool = knob(True, "own model: ask for an immediate ACK on a message's "
                                 "last packet")
    sender_completions: bool = knob(True, "raise a send completion (the sender's CQE) when a "
                                    "WRITE is fully acknowledged")
    #: a lab's run.time_scale for the encoded timer (``timeout``): mrc.knobs.scale_timers
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        check_knobs(self)  # each knob's range, in field order
        if self.ev_min_active is not None and self.ev_min_active > self.ev_count:
            raise ValueError(f"ev_min_active must be in 0..ev_count ({self.ev_count})")
        if self.reorder_spread_gain < 0 or self.reorder_margin_rtts < 0:
            raise ValueError("reorder_margin_rtts and reorder_spread_gain must not be negative")
        if not 0 < self.time_scale <= 1:
            raise ValueError("time_scale must be in (0, 1]")

    @property
    def timeout_ps(self) -> int:
        """The local ACK timeout T = 1.024 us x 2^timeout (x the lab's time scale)."""
        return scaled_ps(TIMEOUT_UNIT_PS << self.timeout, self.time_scale)

    @property
    def retries_forever(self) -> bool:
        return self.retry_exp_cnt >= RETRY_INFINITE

    def error_after_ps(self) -> int | None:
        """How long after the last progress a QP with no live path errors (None: never)."""
        return error_delay_ps(self.timeout_ps, self.retry_linear_cnt, self.retry_exp_cnt)

    def min_active_for(self, evs: int) -> int:
        """The EV floor for a QP with ``evs`` EVs."""
        floor = evs // 4 if self.ev_min_active is None else self.ev_min_active
        return min(floor, evs)


@cython.cclass
class MrcStats:
    """Counters of one QP (sender and receiver side). Plain ints: bumped on hot paths."""

    FIELDS = (
        "data_sent", "bytes_sent", "retransmissions", "acks_sent", "nacks_sent", "acks_received",
        "nacks_received", "trims", "ecn_echoes", "losses", "overdue_losses", "evicted",
        "timeouts", "packets_timed_out",
        "qp_timeouts", "probes_sent", "probes_answered", "probe_replies_sent", "paths_marked_bad",
        "reintegrated", "spurious_losses", "data_received", "duplicates", "trimmed_received",
        "bad_packets", "messages_sent", "messages_received", "reply_fallbacks",
        "dropped_after_error", "bad_refused_min_active", "wimm_waits", "beyond_mpr",
        "slow_deliveries",
    )  # (the order of :meth:`as_dict`)
    # The counters every packet moves first (sender, receiver, ACK), so they share the C
    # struct's first cache line; the rest in the order of FIELDS.
    data_sent: cython.longlong
    bytes_sent: cython.longlong
    acks_received: cython.longlong
    data_received: cython.longlong
    acks_sent: cython.longlong
    retransmissions: cython.longlong
    nacks_sent: cython.longlong
    nacks_received: cython.longlong
    trims: cython.longlong
    ecn_echoes: cython.longlong
    losses: cython.longlong
    overdue_losses: cython.longlong
    evicted: cython.longlong
    timeouts: cython.longlong
    packets_timed_out: cython.longlong
    qp_timeouts: cython.longlong
    probes_sent: cython.longlong
    probes_answered: cython.longlong
    probe_replies_sent: cython.longlong
    paths_marked_bad: cython.longlong
    reintegrated: cython.longlong
    spurious_losses: cython.longlong
    duplicates: cython.longlong
    trimmed_received: cython.longlong
    bad_packets: cython.longlong
    messages_sent: cython.longlong
    messages_received: cython.longlong
    reply_fallbacks: cython.longlong
    dropped_after_error: cython.longlong
    bad_refused_min_active: cython.longlong
    wimm_waits: cython.longlong
    beyond_mpr: cython.longlong
    slow_deliveries: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

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
        self.bad_refused_min_active = 0  # EVs kept GOOD because of the ev_min_active floor
        self.wimm_waits = 0  # WRITEs with immediate held back by max_wimm
        self.beyond_mpr = 0  # DATA dropped: further ahead than mpr_dest x 128 PSNs
        self.slow_deliveries = 0  # packets acked slow or hot: their EV not recycled (spray)

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
