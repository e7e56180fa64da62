"""What configures an RC QP (``RcConfig``) and what it counts (``RcStats``), and the
retransmission ladder its requester walks (:func:`retry_schedule`).

**Retransmission** (``retransmission``). ``fixed``: the IBA local ACK timer, 4.096 us x
2^timeout_exp, ``retry_cnt`` retries, error one timeout after the last
(``(retry_cnt + 1) x timeout`` after the last progress). ``adaptive`` (the default): NVIDIA's
adaptive retransmission (ADP), on by default on ConnectX NICs: the first timeout is short
(``adp_initial_timeout_us``, tried once), then the timeout runs through one doubling range
from ``adp_range_low_us``, each value ``adp_retries_per_step`` times, capped by the QP's own
timeout (4.096 us x 2^timeout_exp, as the firmware caps it); progress lowers the next
episode's first timeout by ``adp_dec_steps`` doublings. The QP errors
(IBV_WC_RETRY_EXC_ERR) when no progress came within the total budget, the QP's timeout x
retry_cnt (the firmware's ``qp_total_timeout`` mode). Sources and which values are
mrc-lab's own: docs/transport-notes.md, "RC retransmission".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mrc.knobs import check_knobs, knob, scaled_ps
from mrc.packet import PSN_MASK, PSN_MOD
from mrc.transport.rc.dcqcn import DcqcnConfig

#: The verbs local ACK timeout unit: 4.096 us, in picoseconds.
LOCAL_ACK_UNIT_PS = 4_096_000
#: Congestion controls: ``dcqcn`` (a rate limiter driven by CNPs, as deployed) or ``window``
#: (AIMD of the outstanding window on ECN echoes, the lab's earlier model).
CC_KINDS = ("dcqcn", "window")
#: Retransmission timers: NVIDIA's adaptive ladder (as shipped) or the fixed IBA timer.
RETRANSMISSIONS = ("adaptive", "fixed")


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
                            minimum=0, maximum=31, real_timer=True,
                            problem="timeout_exp is a 5-bit verbs field (0..31)")
    retransmission: str = knob("adaptive", "local ACK timer: adaptive (ConnectX adaptive "
                               "retransmission, on by default) or fixed (the IBA timer)",
                               choices=RETRANSMISSIONS)
    adp_initial_timeout_us: float = knob(131.072, "adaptive: the first timeout of an episode "
                                         "without progress (tried once); own choice: 4.096 "
                                         "us x 2^5, the least with no spurious resend in a "
                                         "lossless incast", gt=0, maximum=1e9)
    adp_range_low_us: float = knob(262.144, "adaptive: where the doubling range starts after "
                                   "the first timeout; own choice: 4.096 us x 2^6", gt=0,
                                   maximum=1e9)
    adp_retries_per_step: int = knob(1, "adaptive: timeouts at each value before it doubles",
                                     minimum=1, maximum=16)
    adp_dec_steps: int = knob(1, "adaptive: doublings progress takes off the next first "
                              "timeout (0: none; large: back to the initial one)", minimum=0,
                              maximum=64)
    slow_restart: bool = knob(False, "after a timeout, restart slowly: DCQCN's rate cut by "
                              "rpg_min_dec_fac (its largest cut), or the window to its minimum")
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
    #: a lab's run.time_scale for the encoded timers (timeout_exp): mrc.knobs.scale_timers
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        check_knobs(self)  # each knob's range, in field order
        checks = (
            (self.mtu > 0, "mtu must be positive"),
            (1 <= self.min_window_pkts <= self.window_pkts,
             "need 1 <= min_window_pkts <= window_pkts"),
            (0 <= self.priority <= 7, "priority is an 802.1p priority (0..7)"),
            (self.line_rate_gbps > 0, "line_rate_gbps must be positive"),
            (self.frame_overhead_bytes >= 0, "frame_overhead_bytes must not be negative"),
            (0 < self.time_scale <= 1, "time_scale must be in (0, 1]"),
        )
        for ok, why in checks:
            if not ok:
                raise ValueError(f"RcConfig: {why}")

    @property
    def timeout_ps(self) -> int | None:
        """Local ACK timeout in ps, None for exponent 0 (verbs: infinite, never retries)."""
        if not self.timeout_exp:
            return None
        return scaled_ps(LOCAL_ACK_UNIT_PS << self.timeout_exp, self.time_scale)

    @property
    def error_after_ps(self) -> int | None:
        """Time from the last progress to the error state on a dead path (either timer)."""
        return None if self.timeout_ps is None else retry_schedule(self)[2]

    @property
    def ack_timer_ps(self) -> int | None:
        """The responder's ACK coalescing timer in ps (None: ACK only by count or request)."""
        a = self.ack_timer_us
        return None if a is None else max(1, int(round(a * 1_000_000)))

    @property
    def cnp_interval_ps(self) -> int:
        return int(round(self.cnp_interval_us * 1_000_000))


def _us_ps(value: float) -> int:
    return max(1, int(round(value * 1_000_000)))


@functools.lru_cache(maxsize=64)
def retry_schedule(cfg: RcConfig) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], int]:
    """``(ladder, offsets, error_after)`` of a config with a timeout (picoseconds).

    ``ladder[i]``: the timeout at level i (the last level repeats). ``offsets[l][k]``: when
    the k-th expiry of an episode that starts at level l falls, after the episode's last
    progress (each expiry one more level up); ``error_after``: when the QP errors instead.
    ``fixed``: one level, ``retry_cnt`` expiries at multiples of the timeout, the error one
    timeout later. ``adaptive``: the ladder of the module doc; expiries until the budget,
    the error at the budget (timeout x retry_cnt, at least one timeout)."""
    cap = cfg.timeout_ps
    if cap is None:
        raise ValueError("RcConfig: timeout_exp 0 waits forever: no retry schedule")
    if cfg.retransmission == "fixed":
        offsets = tuple((k + 1) * cap for k in range(cfg.retry_cnt))
        return (cap,), (offsets,), (cfg.retry_cnt + 1) * cap
    ladder = [min(_us_ps(cfg.adp_initial_timeout_us), cap)]
    step = _us_ps(cfg.adp_range_low_us)
    while step < cap:
        ladder += [step] * cfg.adp_retries_per_step
        step *= 2
    ladder.append(cap)
    budget = cap * max(1, cfg.retry_cnt)
    top = len(ladder) - 1
    table = []
    for start in range(len(ladder)):
        at, k, out = 0, 0, []
        while True:
            at += ladder[min(start + k, top)]
            if at >= budget:
                break
            out.append(at)
            k += 1
        table.append(tuple(out))
    return tuple(ladder), tuple(table), budget


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
