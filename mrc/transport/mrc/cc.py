"""Congestion control for the MRC queue pair: a small window interface and two algorithms.

MRC's own algorithm is not public; the default here follows the published Ultra Ethernet
NSCC design (brief, section 1). The signals are ECN echoes and queueing delay (RTT minus the
base RTT), combined in four quadrants:

=============  =====================  ===========================================
ECN            delay vs target        response
=============  =====================  ===========================================
not marked     low                    proportional increase (fast, ~doubling/RTT at 0 delay)
not marked     high                   fair (additive) increase: ``fi_bytes`` per RTT
marked         high                   multiplicative decrease, at most once per RTT, >= x0.5
marked         low                    nothing: a hot spot on one path, load balancing moves
                                      traffic off that EV (the QP does, REPS-style)
=============  =====================  ===========================================

A trim (NACK) is the strongest congestion signal (a buffer overflowed): it halves the window
once per RTT and arms *quick adapt*, which at the end of the current measurement interval
sets the window to what was actually delivered in it. That is what brings an incast's
initial overload down within a few RTTs instead of a slow walk of halvings. A silent loss is
a broken path, not congestion: by default it does not touch the window.

The QP calls the algorithm per ACK (not per packet) and reads ``window`` (bytes of payload
allowed in flight) on every poll, so ``window`` is a plain attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from mrc.units import PS_PER_S, PS_PER_US

ALGORITHMS = ("nscc", "fixed")


@dataclass(frozen=True)
class CcConfig:
    """Every congestion-control knob. Byte sizes are payload bytes; times are picoseconds.

    ``None`` sizes derive from the bandwidth-delay product ``bdp`` = line rate x base RTT:
    initial window = bdp, maximum = 1.5 x bdp (the headroom absorbs ACK coalescing and
    jitter; a NIC port only pulls at line rate, so headroom alone does not build queues).
    """

    algorithm: str = "nscc"
    line_rate_gbps: float = 800.0
    base_rtt_ps: int = 12 * PS_PER_US
    target_qdelay_ps: int | None = None  # None: 3/4 of base_rtt_ps
    init_window_bytes: int | None = None  # None: bdp
    max_window_bytes: int | None = None  # None: 1.5 x bdp
    min_window_bytes: int = 4096
    fixed_window_bytes: int | None = None  # "fixed": None means bdp
    md_gain: float = 0.8  # decrease = md_gain x (delay - target) / delay, capped at 1/2
    pi_gain: float = 1.0  # proportional increase per acked byte at zero queueing delay
    fi_bytes: int = 4096  # fair increase per RTT
    quick_adapt: bool = True
    qa_delay_factor: float = 4.0  # delay above this x target also arms quick adapt
    learn_base_rtt: bool = True  # lower base RTT to the smallest sample seen
    loss_md_factor: float = 1.0  # window x this on a silent loss (1.0: loss is not congestion)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown cc algorithm {self.algorithm!r}; known: {ALGORITHMS}")
        if self.line_rate_gbps <= 0 or self.base_rtt_ps <= 0:
            raise ValueError("line_rate_gbps and base_rtt_ps must be positive")
        if self.min_window_bytes <= 0:
            raise ValueError("min_window_bytes must be positive")
        if not 0 < self.md_gain <= 1:
            raise ValueError("md_gain must be in (0, 1]")
        if not 0.5 <= self.loss_md_factor <= 1:
            raise ValueError("loss_md_factor must be in [0.5, 1] (never below half)")
        for name in ("target_qdelay_ps", "init_window_bytes", "max_window_bytes",
                     "fixed_window_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")

    @property
    def bdp_bytes(self) -> int:
        return int(self.line_rate_gbps * 1e9 / 8 * self.base_rtt_ps / PS_PER_S)

    @property
    def target_ps(self) -> int:
        return self.target_qdelay_ps if self.target_qdelay_ps is not None else (
            self.base_rtt_ps * 3 // 4)


class CongestionControl(Protocol):
    """What the QP needs from an algorithm. ``ev`` lets an algorithm keep per-path state."""

    window: int

    def on_ack(self, now: int, acked_bytes: int, rtt_ps: int | None, ecn: bool,
               ev: int) -> None: ...

    def on_trim(self, now: int, ev: int) -> None: ...

    def on_loss(self, now: int, ev: int) -> None: ...

    def stats(self) -> dict[str, Any]: ...


class FixedWindow:
    """A constant window: deterministic tests and a no-CC baseline."""

    def __init__(self, window: int) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.window = window

    def on_ack(self, now: int, acked_bytes: int, rtt_ps: int | None, ecn: bool,
               ev: int) -> None:
        pass

    def on_trim(self, now: int, ev: int) -> None:
        pass

    def on_loss(self, now: int, ev: int) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"window": self.window}


class Nscc:
    """NSCC-like window (see the module docstring for the quadrants)."""

    __slots__ = ("window", "min_window", "max_window", "base_rtt", "target", "md_gain",
                 "pi_gain", "fi_bytes", "quick_adapt", "qa_delay", "learn_base_rtt",
                 "loss_md", "_rtt", "_hold_until", "_qa_start", "_qa_interval", "_qa_acked",
                 "_qa_armed", "_wfrac", "decreases", "quick_adapts", "trims", "ecn_acks")

    def __init__(self, cfg: CcConfig) -> None:
        bdp = max(cfg.bdp_bytes, cfg.min_window_bytes)
        self.min_window = cfg.min_window_bytes
        self.max_window = max(cfg.max_window_bytes or bdp * 3 // 2, self.min_window)
        init = cfg.init_window_bytes or bdp
        self.window = min(max(init, self.min_window), self.max_window)
        self.base_rtt = cfg.base_rtt_ps
        self.target = cfg.target_ps
        self.md_gain = cfg.md_gain
        self.pi_gain = cfg.pi_gain
        self.fi_bytes = cfg.fi_bytes
        self.quick_adapt = cfg.quick_adapt
        self.qa_delay = int(cfg.qa_delay_factor * self.target)
        self.learn_base_rtt = cfg.learn_base_rtt
        self.loss_md = cfg.loss_md_factor
        self._rtt = cfg.base_rtt_ps  # latest sample: "once per RTT" means this long
        self._hold_until = 0  # no multiplicative decrease before this time
        self._qa_interval = cfg.base_rtt_ps + self.target
        self._qa_start = 0
        self._qa_acked = 0
        self._qa_armed = False
        self._wfrac = 0.0  # fractional bytes of increase not yet applied
        self.decreases = 0
        self.quick_adapts = 0
        self.trims = 0
        self.ecn_acks = 0

    # ------------------------------------------------------------------ signals
    def on_ack(self, now: int, acked_bytes: int, rtt_ps: int | None, ecn: bool,
               ev: int) -> None:
        if rtt_ps is not None and rtt_ps > 0:
            if self.learn_base_rtt and rtt_ps < self.base_rtt:
                self.base_rtt = rtt_ps
            self._rtt = rtt_ps
        delay = self._rtt - self.base_rtt
        target = self.target
        if self.quick_adapt and self._quick_adapt(now, acked_bytes, delay):
            return
        window = self.window
        if ecn:
            self.ecn_acks += 1
            if delay > target:
                if now >= self._hold_until:
                    factor = max(0.5, 1.0 - self.md_gain * (delay - target) / delay)
                    self._decrease(now, factor)
            # ECN with low delay: a hot path, not a full bottleneck; load balancing reacts
            return
        if delay < target:
            inc = self.pi_gain * acked_bytes * (target - delay) / target
        else:
            inc = self.fi_bytes * acked_bytes / window
        inc += self._wfrac
        whole = int(inc)
        self._wfrac = inc - whole
        if whole:
            self.window = min(window + whole, self.max_window)

    def on_trim(self, now: int, ev: int) -> None:
        self.trims += 1
        self._qa_armed = True
        if now >= self._hold_until:
            self._decrease(now, 0.5)

    def on_loss(self, now: int, ev: int) -> None:
        if self.loss_md < 1.0 and now >= self._hold_until:
            self._decrease(now, self.loss_md)

    # ------------------------------------------------------------------ internals
    def _decrease(self, now: int, factor: float) -> None:
        self.window = max(self.min_window, int(self.window * factor))
        self._wfrac = 0.0
        self._hold_until = now + self._rtt
        self.decreases += 1

    def _quick_adapt(self, now: int, acked_bytes: int, delay: int) -> bool:
        """Track delivered bytes per interval; when the interval saw a trim or a very long
        queue, jump the window to what was delivered. True when it acted."""
        if delay > self.qa_delay:
            self._qa_armed = True
        if now - self._qa_start < self._qa_interval:
            self._qa_acked += acked_bytes
            return False
        acted = False
        achieved = self._qa_acked
        if self._qa_armed and achieved < self.window:
            self.window = max(self.min_window, achieved)
            self._wfrac = 0.0
            self._hold_until = now + self._rtt
            self.quick_adapts += 1
            acted = True
        self._qa_start = now
        self._qa_acked = acked_bytes
        self._qa_armed = False
        return acted

    def stats(self) -> dict[str, Any]:
        return {"window": self.window, "base_rtt_ps": self.base_rtt, "rtt_ps": self._rtt,
                "decreases": self.decreases, "quick_adapts": self.quick_adapts,
                "trims": self.trims, "ecn_acks": self.ecn_acks}


def make_cc(cfg: CcConfig) -> CongestionControl:
    """The algorithm ``cfg.algorithm`` names."""
    if cfg.algorithm == "fixed":
        return FixedWindow(cfg.fixed_window_bytes or max(cfg.bdp_bytes, cfg.min_window_bytes))
    return Nscc(cfg)
