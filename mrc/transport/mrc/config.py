"""The MRC QP's knobs (:class:`MrcConfig`, and :class:`CcConfig`, the congestion control's,
which it nests: :mod:`.cc` says what the algorithm does with them), its counters
(:class:`MrcStats`), and the face of the QP its rooms share (:class:`QpCore`).

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
from typing import Any, Protocol

from mrc.knobs import check_knobs, knob, scaled_ps
from mrc.packet import Packet
from mrc.transport.base import TransportEvent
from mrc.units import PS_PER_S, PS_PER_US

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


NSCC = "uet-1.0-nscc"
ALGORITHMS = (NSCC, "nscc", "fixed")  # "nscc": the short name mrc-lab used before
#: UEC's reference network: 100 Gb/s x 12 us = 150,000 bytes in flight.
REFERENCE_BDP_BYTES = 150_000
PS_PER_NS = 1000


_NSCC_CFG = "uet-1.0-nscc (mrc_ctl_cc_nscc_cfg): "
_POSITIVE = "{name} must be positive, got {{value!r}}"
_NOT_NEGATIVE = "{name} must not be negative, got {{value!r}}"


def _nscc(default: Any, doc: str, **described: Any) -> Any:
    """A knob of mrc_ctl.h's ``mrc_ctl_cc_nscc_cfg``, in the header's unit."""
    return knob(default, _NSCC_CFG + doc, **described)


@dataclass(frozen=True)
class CcConfig:
    """The NSCC profile's configuration (``mrc_ctl_cc_nscc_cfg``, names and units of the
    header; None: the default the module docstring derives) and mrc-lab's own knobs. Each
    field's :func:`~mrc.knobs.knob` says what it is and which values it takes: the config
    checks them, and a lab's ``[transport.NAME.cc]`` key is derived from them."""

    algorithm: str = knob(
        NSCC, "the CC profile's algorithm: uet-1.0-nscc (mrc_ctl.h's one common name), nscc "
        "(the same), or fixed (a constant window, mrc-lab's baseline)", choices=ALGORITHMS,
        problem=f"unknown cc algorithm {{value!r}}; known: {ALGORITHMS}")
    # ---- mrc_ctl_cc_nscc_cfg
    disable_qa: bool = _nscc(False, "quick adapt off")
    adjust_bytes_threshold: int | None = _nscc(
        None, "increases apply after this many acked bytes", unit="bytes", minimum=0,
        problem=_NOT_NEGATIVE.format(name="adjust_bytes_threshold"), none="8 x MTU (UEC)")
    adjust_period_threshold: int | None = _nscc(
        None, "... or after this long", unit="ns", gt=0,
        problem=_POSITIVE.format(name="adjust_period_threshold"), none="base_rtt (UEC)")
    base_rtt: int = _nscc(12_000, "unloaded round trip the window is sized for", unit="ns")
    eta: float | None = _nscc(
        None, "added at each adjustment while the delay is below target", unit="bytes",
        minimum=0, problem=_NOT_NEGATIVE.format(name="eta"),
        none="0.15 x MTU x BDP / 150000 (UEC)")
    fi: float | None = _nscc(
        None, "fair increase per RTT while the delay is above target", unit="bytes",
        minimum=0, problem=_NOT_NEGATIVE.format(name="fi"),
        none="5 x MTU x BDP / 150000 (UEC)")
    fi_scale: float | None = _nscc(
        None, "fast increase per acked byte while the delay stays ~0 for a window",
        minimum=0, problem=_NOT_NEGATIVE.format(name="fi_scale"),
        none="0.25 x BDP / 150000 (UEC)")
    gamma: float = _nscc(0.8, "multiplicative decrease = gamma x (delay - target) / delay",
                         gt=0, maximum=1, problem="gamma must be in (0, 1]")
    max_md_jump: float = _nscc(0.5, "one decrease never takes the window below this factor",
                               gt=0, lt=1, problem="max_md_jump must be in (0, 1)")
    max_cwnd: int | None = _nscc(None, "largest window", unit="bytes", gt=0,
                                 problem=_POSITIVE.format(name="max_cwnd"),
                                 none="1.5 bandwidth-delay products")
    qa_gate: int = _nscc(3, "quick adapt only when an interval delivered < max_cwnd >> "
                         "qa_gate", minimum=0, maximum=16, problem="qa_gate must be in 0..16")
    qa_threshold: int | None = _nscc(None, "queueing delay that arms quick adapt", unit="ns",
                                     gt=0, problem=_POSITIVE.format(name="qa_threshold"),
                                     none="4 x target_delay")
    target_delay: int | None = _nscc(None, "queueing delay aimed at", unit="ns", gt=0,
                                     problem=_POSITIVE.format(name="target_delay"),
                                     none="3/4 of base_rtt")
    # ---- rate hints (NCCL plugin QP hint); 0: none
    init_rate_mbps: int = knob(
        0, "rate hint NCCL_MRC_CC_INIT_RATE (unit not published; Mb/s): the initial window is "
        "rate x base RTT (0: none)", minimum=0,
        problem=_NOT_NEGATIVE.format(name="init_rate_mbps"))
    min_rate_mbps: int = knob(
        0, "rate hint NCCL_MRC_CC_MIN_RATE: the smallest window (0: none)", minimum=0,
        problem=_NOT_NEGATIVE.format(name="min_rate_mbps"))
    max_rate_mbps: int = knob(
        0, "rate hint NCCL_MRC_CC_MAX_RATE: the largest window (0: none)", minimum=0,
        problem=_NOT_NEGATIVE.format(name="max_rate_mbps"))
    # ---- mrc-lab's own
    line_rate_gbps: float = knob(800.0, "own: the NIC rate the window is sized for")
    mtu_bytes: int = knob(4096, "own: payload per packet (the lab fills in its fabric's)",
                          gt=0)
    pi_gain: float = knob(1.0, "own: proportional increase per acked byte at zero queueing "
                          "delay (UEC's alpha is not a header field)")
    min_window_bytes: int = knob(4096, "own: smallest window (UEC: one MTU)", gt=0)
    init_window_bytes: int | None = knob(
        None, "own: initial window", gt=0, problem=_POSITIVE.format(name="init_window_bytes"),
        none="one bandwidth-delay product (or the init rate hint)")
    fixed_window_bytes: int | None = knob(
        None, "own: the window of algorithm = \"fixed\"", gt=0,
        problem=_POSITIVE.format(name="fixed_window_bytes"), none="one bandwidth-delay product")
    learn_base_rtt: bool = knob(True, "own: lower the base RTT to the smallest sample seen")
    loss_md_factor: float = knob(
        1.0, "own: window x this on a silent loss (1.0: loss is not congestion)", minimum=0.5,
        maximum=1, problem="loss_md_factor must be in [0.5, 1] (never below half)")

    def __post_init__(self) -> None:
        check_knobs(self)  # each knob's range, in field order
        if self.line_rate_gbps <= 0 or self.base_rtt <= 0:
            raise ValueError("line_rate_gbps and base_rtt must be positive")

    # ---- derived values (the module docstring's table), in bytes and picoseconds
    @property
    def base_rtt_ps(self) -> int:
        return self.base_rtt * PS_PER_NS

    @property
    def bdp_bytes(self) -> int:
        return int(self.line_rate_gbps * 1e9 / 8 * self.base_rtt_ps / PS_PER_S)

    @property
    def scaling_a(self) -> float:
        return self.bdp_bytes / REFERENCE_BDP_BYTES

    @property
    def target_ps(self) -> int:
        if self.target_delay is not None:
            return self.target_delay * PS_PER_NS
        return self.base_rtt_ps * 3 // 4

    @property
    def qa_threshold_ps(self) -> int:
        return (self.qa_threshold * PS_PER_NS if self.qa_threshold is not None
                else 4 * self.target_ps)

    @property
    def fi_bytes(self) -> float:
        return self.fi if self.fi is not None else 5 * self.mtu_bytes * self.scaling_a

    @property
    def fi_scale_value(self) -> float:
        return self.fi_scale if self.fi_scale is not None else 0.25 * self.scaling_a

    @property
    def eta_bytes(self) -> float:
        return self.eta if self.eta is not None else 0.15 * self.mtu_bytes * self.scaling_a

    @property
    def adjust_bytes(self) -> int:
        return (self.adjust_bytes_threshold if self.adjust_bytes_threshold is not None
                else 8 * self.mtu_bytes)

    @property
    def adjust_period_ps(self) -> int:
        return (self.adjust_period_threshold * PS_PER_NS
                if self.adjust_period_threshold is not None else self.base_rtt_ps)

    def rate_window(self, rate_mbps: int) -> int:
        """The window that carries ``rate_mbps`` over one base RTT."""
        return int(rate_mbps * 1e6 / 8 * self.base_rtt_ps / PS_PER_S)


@dataclass(frozen=True)
class MrcConfig:
    """Every knob of the MRC QP (see the module docstring: published, then own model). Each
    field's :func:`~mrc.knobs.knob` says what it is and which values it takes: the config
    checks them, and a lab's ``[transport.NAME]`` key is derived from them."""

    # ---- published (mrc.h mrc_qp_attr; NCCL plugin defaults)
    timeout: int = knob(20, "published (NCCL_MRC_TIMEOUT): local ACK timeout 1.024 us x "
                        "2^timeout, the retry clock", minimum=0, maximum=MAX_TIMEOUT)
    # (not a lab's time-scaled timer: MRC reacts on its own microsecond evidence, so this
    # watchdog, 1.07 s at full scale, must stay far above it, as it is at full scale)
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
