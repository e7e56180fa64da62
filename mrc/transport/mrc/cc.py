"""Congestion control for the MRC queue pair: the ``uet-1.0-nscc`` profile of ``mrc_ctl.h``.

The controller API names one common algorithm, ``"uet-1.0-nscc"`` (Ultra Ethernet NSCC), and
its configuration ``mrc_ctl_cc_nscc_cfg``: :class:`~mrc.transport.mrc.config.CcConfig` has
those fields under those names and units (bytes, nanoseconds), each a knob that says what it
does and what stands for a None default: the UEC 1.0 values where the public UEC material
states them, scaled as it scales them (``a`` = the BDP over the 150,000-byte reference BDP of
100 Gb/s x 12 us; MTU the payload per packet).

The quadrants (chosen per ACK by its mark and its own delay): no ECN and low delay:
proportional increase (``pi_gain`` x acked x (target - delay)/target: mrc-lab's own gain;
UEC's ``alpha`` is not a header field); no ECN and high delay: fair increase (``fi`` per
RTT); ECN with high delay: multiplicative decrease at most once per window of data (below),
never below ``max_md_jump``; ECN with low delay: nothing, a hot spot that load balancing
moves off. A trim (NACK) is the strongest congestion signal: it halves the window once per
RTT and arms quick adapt, which at the end of the measurement interval sets the window to
what that interval delivered. A silent loss is a broken path, not congestion: by default it does not
touch the window (``loss_md_factor``).

The decrease is sized by the *smoothed* queueing delay, as UEC's reference code sizes it
(htsim ``uec.cpp``: ``multiplicative_decrease`` reads ``avg_delay``, an EWMA of every ACK's
delay with gain ``delay_alpha`` = 0.0125, and decreases only while it is above the target):
``window x max(max_md_jump, 1 - gamma (avg - target)/avg)``. Why: on a sprayed QP one
marked ACK's delay is one path's, and the paths of a QP differ by tens of microseconds when
some are slow; sizing the cut by that one sample halves the window of whichever flow drew a
slow path's mark, and many flows cut at once leave the fast links idle. A trim counts as a
delay sample of one unloaded RTT, as the reference code's NACK does. One departure: the
reference code feeds an *unmarked* ACK whose delay is above the target into the average as
a quarter of the base RTT instead of its delay; under a fabric that marks above the target
delay most ACKs of a loaded fabric are such, the average never reaches the target, no
decrease happens, and the queues grow until sprayed packets look lost. Here every ACK's
delay counts.

Once per window of data, not once per time: a decrease (or a quick adapt) answers the
window that was in flight, so a mark echoed on a packet sent *before* the last decrease is
old news and cuts nothing, however late it comes back; and a quick-adapt interval counts only
ACKs of packets sent after it (the first such ACK opens the interval). That is TCP's rule for
ECN (RFC 3168 section 6.1.2: react at most once per window of data); the reference code holds
the decrease for one base RTT after the last one (``_last_dec_time``). Why: with a queue of
several base RTTs (an incast's start-up), a time hold expires while marks from before the
cut are still coming back, and they cut again; and the cut itself makes the sender pause,
which shows an RTT later as a gap in its ACKs that a quick-adapt interval spanning it would
take for the path's capacity.

The increase is at least the reference's in every quadrant: the proportional term is
``pi_gain`` x acked (the window doubles per RTT at zero delay), ``eta`` comes at every
adjustment below target, and the fast increase (``fi_scale`` x acked while the delay stays
near zero) is added on top.

The measurements behind these choices, and what was tried and not kept:
``docs/transport-notes.md`` (congestion control).

Rate hints: the NCCL plugin passes ``NCCL_MRC_CC_INIT_RATE`` / ``MIN_RATE`` / ``MAX_RATE``
in the QP hint (vendor data; the unit is not published, read here as Mb/s). A window
algorithm turns a rate into a window of rate x base RTT: the initial, smallest and largest
window.

``"fixed"`` (a constant window) is mrc-lab's own baseline for tests. The QP calls the
algorithm per ACK and reads ``window`` on every poll, so ``window`` is a plain attribute.
"""

from __future__ import annotations

from typing import Any

from mrc.transport.mrc.config import CcConfig
from mrc.units import PS_PER_US

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

#: Gain of the queueing-delay EWMA the decrease reads (UEC reference code's ``delay_alpha``).
DELAY_EWMA_GAIN = 0.0125


@cython.cclass
class CongestionControl:
    """What the QP needs from an algorithm: a window, and the signals it may react to.

    The base class is the window that reacts to nothing (each signal is ignored);
    an algorithm overrides the signals it uses. ``ev`` lets an algorithm keep per-path
    state. One common base (not a protocol) so that the compiled build calls the signals
    through a C method table rather than as Python calls, once per ACK.
    """

    window: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, window: int) -> None:
        self.window = window

    # (``rtt_ps``: the echoed round trip in ps, or None; an object in C)
    @cython.ccall
    @cython.annotation_typing(True)
    def on_ack(self, now: cython.longlong, acked_bytes: cython.longlong, rtt_ps: Any,
               ecn: cython.bint, ev: cython.longlong) -> None:
        pass

    @cython.ccall
    @cython.annotation_typing(True)
    def on_marked_ack(self, now: cython.longlong, acked_bytes: cython.longlong, rtt_ps: Any,
                      ev: cython.longlong, slow_ps: cython.longlong) -> None:
        """An ACK that echoes a CE mark; ``slow_ps``: a round trip above this is slow for
        this QP (its spray's judgement, :meth:`.spray.Spray.slow_after`).

        NSCC's "ECN with low delay" quadrant (switch paths, do not slow down), with "low"
        judged against the QP's own paths rather than the marked packet's delay (a slow
        path's packet always carries a high delay): a mark that came back slow is its
        path's news, which the spray answers by not recycling that EV, so the window sees
        the ACK unmarked, with the QP's usual delay. Any other mark is the window's."""
        if rtt_ps is not None and rtt_ps > slow_ps:
            self.on_ack(now, acked_bytes, slow_ps, False, ev)
        else:
            self.on_ack(now, acked_bytes, rtt_ps, True, ev)

    @cython.ccall
    @cython.annotation_typing(True)
    def on_trim(self, now: cython.longlong, ev: cython.longlong) -> None:
        pass

    @cython.ccall
    @cython.annotation_typing(True)
    def on_loss(self, now: cython.longlong, ev: cython.longlong) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"window": self.window}


@cython.cclass
class FixedWindow(CongestionControl):
    """A constant window: deterministic tests and a no-CC baseline."""

    if not cython.compiled:
        __slots__ = ()

    def __init__(self, window: int) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.window = window


@cython.cclass
class Nscc(CongestionControl):
    """The ``uet-1.0-nscc`` window (see the module docstring)."""

    # What every ACK reads or writes first (after the window), in the C struct's first
    # cache lines; the decrease and quick-adapt state and the settings read rarely after.
    base_rtt: cython.longlong
    target: cython.longlong
    _rtt: cython.longlong
    _fast_bytes: cython.longlong
    avg_delay: cython.double
    _inc: cython.double
    _adj_bytes: cython.longlong
    _adj_start: cython.longlong
    adjust_bytes: cython.longlong
    adjust_period: cython.longlong
    _dec_at: cython.longlong
    quick_adapt: cython.bint
    learn_base_rtt: cython.bint
    ecn_acks: cython.longlong
    min_window: cython.longlong
    max_window: cython.longlong
    gamma: cython.double
    max_md_jump: cython.double
    pi_gain: cython.double
    fi: cython.double
    fi_scale: cython.double
    eta: cython.double
    qa_delay: cython.longlong
    qa_floor: cython.longlong
    loss_md: cython.double
    _hold_until: cython.longlong
    _qa_interval: cython.longlong
    _qa_start: cython.longlong
    _qa_acked: cython.longlong
    _qa_armed: cython.bint
    decreases: cython.longlong
    quick_adapts: cython.longlong
    trims: cython.longlong
    adjustments: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, cfg: CcConfig) -> None:
        bdp = max(cfg.bdp_bytes, cfg.min_window_bytes)
        self.min_window = max(cfg.min_window_bytes, cfg.rate_window(cfg.min_rate_mbps))
        top = cfg.max_cwnd or bdp * 3 // 2
        if cfg.max_rate_mbps:
            top = min(top, cfg.rate_window(cfg.max_rate_mbps))
        self.max_window = max(top, self.min_window)
        init = cfg.init_window_bytes or (cfg.rate_window(cfg.init_rate_mbps)
                                         if cfg.init_rate_mbps else bdp)
        self.window = min(max(init, self.min_window), self.max_window)
        self.base_rtt = cfg.base_rtt_ps
        self.target = cfg.target_ps
        self.gamma = cfg.gamma
        self.max_md_jump = cfg.max_md_jump
        self.pi_gain = cfg.pi_gain
        self.fi = cfg.fi_bytes
        self.fi_scale = cfg.fi_scale_value
        self.eta = cfg.eta_bytes
        self.quick_adapt = not cfg.disable_qa
        self.qa_delay = cfg.qa_threshold_ps
        self.qa_floor = self.max_window >> cfg.qa_gate
        self.learn_base_rtt = cfg.learn_base_rtt
        self.loss_md = cfg.loss_md_factor
        self.adjust_bytes = cfg.adjust_bytes
        self.adjust_period = cfg.adjust_period_ps
        self._rtt = cfg.base_rtt_ps  # latest sample: "once per RTT" means this long
        self._hold_until = 0  # no multiplicative decrease before this time
        #: time of the last decrease (or quick adapt): an ACK of a packet sent before it
        #: reports on the window that decrease already answered
        self._dec_at = -(1 << 62)
        self._qa_interval = cfg.base_rtt_ps + self.target
        self._qa_start = 0
        self._qa_acked = 0
        self._qa_armed = False
        self._inc = 0.0  # increase accumulated since the last adjustment
        self._adj_bytes = 0  # bytes acknowledged since the last adjustment
        self._adj_start = 0
        self._fast_bytes = 0  # bytes acknowledged at ~zero delay in a row
        self.decreases = 0
        self.quick_adapts = 0
        self.trims = 0
        self.ecn_acks = 0
        self.adjustments = 0
        self.avg_delay = 0.0  # ps: EWMA of the queueing delay (sizes the decrease)

    # ------------------------------------------------------------------ signals
    @cython.ccall
    @cython.annotation_typing(True)
    def on_ack(self, now: cython.longlong, acked_bytes: cython.longlong, rtt_ps: Any,
               ecn: cython.bint, ev: cython.longlong) -> None:
        if rtt_ps is not None and rtt_ps > 0:
            if self.learn_base_rtt and rtt_ps < self.base_rtt:
                self.base_rtt = rtt_ps
            self._rtt = rtt_ps
        delay: cython.longlong = self._rtt - self.base_rtt
        target: cython.longlong = self.target
        self.avg_delay += DELAY_EWMA_GAIN * (delay - self.avg_delay)
        if self.quick_adapt and self._quick_adapt(now, acked_bytes, delay):
            return
        window: cython.longlong = self.window
        if ecn:
            self.ecn_acks += 1
            self._fast_bytes = 0
            avg: cython.double = self.avg_delay
            if delay > target and avg > target and now - self._rtt >= self._dec_at:
                self._decrease(now, max(self.max_md_jump, 1.0 - self.gamma * (avg - target) / avg))
            # ECN with low delay: a hot path, not a full bottleneck; load balancing reacts
            return
        if delay < target:
            self._inc += self.pi_gain * acked_bytes * (target - delay) / target
            if delay <= PS_PER_US:  # ~zero delay: after a window of it, fast increase
                self._fast_bytes += acked_bytes
                if self._fast_bytes > window:
                    self._inc += self.fi_scale * acked_bytes
            else:
                self._fast_bytes = 0
        else:
            self._fast_bytes = 0
            self._inc += self.fi * acked_bytes / window
        self._adj_bytes += acked_bytes
        if self._adj_bytes >= self.adjust_bytes or now - self._adj_start >= self.adjust_period:
            self._adjust(now, delay < target)

    @cython.ccall
    @cython.annotation_typing(True)
    def on_trim(self, now: cython.longlong, ev: cython.longlong) -> None:
        self.trims += 1
        self._qa_armed = True
        # the reference code's NACK: a delay sample of one unloaded round trip
        self.avg_delay += DELAY_EWMA_GAIN * (self.base_rtt - self.avg_delay)
        if now >= self._hold_until:
            self._decrease(now, 0.5)

    @cython.ccall
    @cython.annotation_typing(True)
    def on_loss(self, now: cython.longlong, ev: cython.longlong) -> None:
        if self.loss_md < 1.0 and now >= self._hold_until:
            self._decrease(now, self.loss_md)

    # ------------------------------------------------------------------ internals
    @cython.ccall
    @cython.annotation_typing(True)
    def _adjust(self, now: cython.longlong, below_target: cython.bint) -> None:
        """Apply the increase accumulated since the last adjustment (and ``eta`` while the
        delay is below target)."""
        inc: cython.double = self._inc + (self.eta if below_target else 0.0)
        whole: cython.longlong = int(inc)
        self._inc = inc - whole
        if whole:
            self.window = min(self.window + whole, self.max_window)
        self._adj_bytes = 0
        self._adj_start = now
        self.adjustments += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _decrease(self, now: cython.longlong, factor: cython.double) -> None:
        self.window = max(self.min_window, int(self.window * factor))
        self._inc = 0.0
        self._adj_bytes = 0
        self._adj_start = now
        self._hold_until = now + self._rtt
        self._dec_at = now
        self.decreases += 1

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _quick_adapt(self, now: cython.longlong, acked_bytes: cython.longlong,
                     delay: cython.longlong) -> cython.bint:
        """Track delivered bytes per interval; when the interval saw a trim or a very long
        queue and delivered less than the window and than ``max_cwnd >> qa_gate``, jump the
        window to what was delivered. True when it acted."""
        if delay > self.qa_delay:
            self._qa_armed = True
        if now - self._rtt < self._dec_at:
            # the ACK of a packet sent before the last decrease: it measures the old window,
            # and the pause the decrease makes shows up as a gap an RTT later; measure anew
            self._qa_start = -1
            return False
        if self._qa_start < 0:  # the first ACK of a packet sent since: a new interval
            self._qa_start = now
            self._qa_acked = acked_bytes
            return False
        if now - self._qa_start < self._qa_interval:
            self._qa_acked += acked_bytes
            return False
        acted: cython.bint = False
        achieved: cython.longlong = self._qa_acked
        if self._qa_armed and achieved < self.window and achieved < self.qa_floor:
            self.window = max(self.min_window, achieved)
            self._inc = 0.0
            self._hold_until = now + self._rtt
            self._dec_at = now
            self.quick_adapts += 1
            acted = True
        self._qa_start = now
        self._qa_acked = acked_bytes
        self._qa_armed = False
        return acted

    def stats(self) -> dict[str, Any]:
        return {"window": self.window, "base_rtt_ps": self.base_rtt, "rtt_ps": self._rtt,
                "decreases": self.decreases, "quick_adapts": self.quick_adapts,
                "trims": self.trims, "ecn_acks": self.ecn_acks,
                "adjustments": self.adjustments, "avg_delay_ps": round(self.avg_delay)}


def make_cc(cfg: CcConfig) -> CongestionControl:
    """The algorithm ``cfg.algorithm`` names."""
    if cfg.algorithm == "fixed":
        return FixedWindow(cfg.fixed_window_bytes or max(cfg.bdp_bytes, cfg.min_window_bytes))
    return Nscc(cfg)
