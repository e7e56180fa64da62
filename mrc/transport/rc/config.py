"""What configures an RC QP (``RcConfig``) and what it counts (``RcStats``)."""

from __future__ import annotations

from dataclasses import dataclass

from mrc.knobs import check_knobs, knob
from mrc.packet import PSN_MASK, PSN_MOD
from mrc.transport.rc.dcqcn import DcqcnConfig

#: The verbs local ACK timeout unit: 4.096 us, in picoseconds.
LOCAL_ACK_UNIT_PS = 4_096_000
#: Congestion controls: ``dcqcn`` (a rate limiter driven by CNPs, as deployed) or ``window``
#: (AIMD of the outstanding window on ECN echoes, the lab's earlier model).
CC_KINDS = ("dcqcn", "window")


@dataclass(frozen=True, slots=True)
class RcConfig:
    """Lab parameters of an RC QP. Both ends of a QP must use the same config. Each knob
    (:func:`~mrc.knobs.knob`) says what it is and which values it takes: the config checks
    them, and a lab's ``[transport.NAME]`` key is derived from them; the fields without one
    are filled in from the fabric."""

    #: how this config's messages start (:func:`mrc.knobs.knob_problem`)
    KNOB_PREFIX = "RcConfig: "

    mtu: int = 4096  # payload bytes per DATA packet
    cc: str = knob("dcqcn", "congestion control: dcqcn (rate limiter driven by CNPs, as "
                   "deployed) or window (AIMD of the window on ECN echoes)", choices=CC_KINDS)
    dcqcn: DcqcnConfig = DcqcnConfig()  # cc = "dcqcn": its knobs (mrc.transport.rc.dcqcn)
    # ACK coalescing comes before the window, whose default (rc_config_for) depends on it
    ack_every: int = knob(8, "responder ACK coalescing: one ACK per this many packets",
                          minimum=1, problem="ack_every must be at least 1")
    ack_timer_us: float | None = knob(4.0, "responder ACK coalescing timer: an accepted "
                                      "packet waits at most this long for its ACK", gt=0,
                                      problem="ack_timer_us must be positive or None")
    window_pkts: int = knob(64, "packets in flight at most", lt=PSN_MOD // 4,  # ~ one BDP
                            problem="window_pkts must stay far below 2^24 PSNs")
    min_window_pkts: int = knob(2, "smallest window")
    timeout_exp: int = knob(20, "local ACK timeout 4.096 us x 2^n (NCCL_IB_TIMEOUT); 0: never",
                            minimum=0, maximum=31,
                            problem="timeout_exp is a 5-bit verbs field (0..31)")
    retry_cnt: int = knob(7, "timeouts before the QP errors (NCCL_IB_RETRY_CNT)", minimum=0,
                          maximum=7, problem="retry_cnt is a 3-bit verbs field (0..7)")
    priority: int = 0  # 802.1p priority of the DATA packets (the fabric's lossless one for PFC)
    line_rate_gbps: float = 100.0  # the port's rate: DCQCN's ceiling (the fabric fills it)
    frame_overhead_bytes: int = 38  # wire bytes per packet beyond the IPv6 ones (pacing)
    ecn_decrease: float = knob(0.5, "window multiplier on an ECN echo", gt=0, maximum=1,
                               problem="ecn_decrease must be in (0, 1]")
    additive_increase_pkts: float = knob(1.0, "window growth per window acknowledged",
                                         minimum=0)
    cnp_interval_us: float = knob(4.0, "least time between immediate CE-triggered ACKs",
                                  minimum=0)
    initial_psn: int = knob(0, "first packet sequence number", minimum=0, maximum=PSN_MASK,
                            problem="initial_psn must be a 24-bit PSN")
    key_seed: int = knob(0, "seed of the verifiable-payload keys")  # memory.message_key

    def __post_init__(self) -> None:
        check_knobs(self)  # each knob's range, in field order
        checks = (
            (self.mtu > 0, "mtu must be positive"),
            (1 <= self.min_window_pkts <= self.window_pkts,
             "need 1 <= min_window_pkts <= window_pkts"),
            (0 <= self.priority <= 7, "priority is an 802.1p priority (0..7)"),
            (self.line_rate_gbps > 0, "line_rate_gbps must be positive"),
            (self.frame_overhead_bytes >= 0, "frame_overhead_bytes must not be negative"),
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
    def ack_timer_ps(self) -> int | None:
        """The responder's ACK coalescing timer in ps (None: ACK only by count or request)."""
        a = self.ack_timer_us
        return None if a is None else max(1, int(round(a * 1_000_000)))

    @property
    def cnp_interval_ps(self) -> int:
        return int(round(self.cnp_interval_us * 1_000_000))


@dataclass(slots=True)
class RcStats:
    """Counters of one endpoint (requester and responder halves share one)."""

    data_sent: int = 0  # DATA packets sent, first copies and resends
    retx_sent: int = 0  # resent DATA packets (go-back-N and timeout resends)
    payload_bytes_sent: int = 0
    acks_sent: int = 0
    acks_on_timer: int = 0  # ACKs the coalescing timer sent (the batch did not fill)
    naks_sent: int = 0
    acks_received: int = 0
    naks_received: int = 0
    timeouts: int = 0  # local ACK timer expiries without progress (retries + fatal one)
    retries: int = 0
    ecn_cuts: int = 0  # window cuts (cc = "window") or DCQCN rate cuts
    ce_received: int = 0
    cnps_sent: int = 0  # DCQCN notification point
    cnps_received: int = 0
    dropped_oos: int = 0  # out-of-sequence DATA dropped by the responder
    dropped_trimmed: int = 0  # trimmed packets dropped (RC cannot use them)
    duplicates: int = 0  # DATA below the expected PSN (already placed)
