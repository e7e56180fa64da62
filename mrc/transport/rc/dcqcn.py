"""DCQCN: the congestion control RoCE RC runs with in production (Zhu et al., SIGCOMM 2015),
as NVIDIA ConnectX NICs expose it. Sans-IO: the reaction point is a rate calculator the
requester asks; the notification point is a few lines in the responder (:mod:`.responder`).

* **Congestion point** (a switch): ECN-marks packets of a queue above its threshold
  (``mrc.sim.ports``; step marking at ``ecn_threshold_bytes``).
* **Notification point** (the responder): on a CE-marked arrival it sends a CNP to the QP's
  sender, at most one per QP per ``min_time_between_cnps``.
* **Reaction point** (:class:`DcqcnRp`, the requester): a rate limiter.

  - *alpha*: every ``dce_tcp_rtt`` alpha = g x alpha + (1 - g) if a CNP arrived in that
    period, else g x alpha, with g = ``dce_tcp_g`` / 1024 (NVIDIA's form: its g is the
    weight of the old alpha, 1 minus the paper's g); it starts at
    ``initial_alpha_value`` / 1024 on the flow's first CNP. (Kept lazily: the periods between
    two looks are applied at once, which is the same arithmetic.)
  - *decrease*, on a CNP, at most once per ``rate_reduce_monitor_period``: the target rate
    becomes the current rate (``clamp_tgt_rate``; or, with ``clamp_tgt_rate_after_time_inc``,
    only if the timer raised the rate since the last cut; always on the first cut), then
    rate x= 1 - alpha x 2^(10 - ``rpg_gd``) (``rpg_gd`` 11: 1 - alpha/2), never below
    ``rpg_min_dec_fac`` % of the rate nor below ``rpg_min_rate``. A non-zero
    ``rate_to_set_on_first_cnp`` sets both rates to it on the first CNP instead. The
    increase counters and the timer restart.
  - *increase events*: the timer (every ``rpg_time_reset``) and the byte counter (every
    ``rpg_byte_reset`` bytes sent) each count stages. While both counts are at most
    ``rpg_threshold``: *fast recovery*, rate = (rate + target) / 2. When one count has passed
    it: *additive increase*, target += ``rpg_ai_rate`` first. When both have: *hyper
    increase*, target += ``rpg_hai_rate`` first. Never above ``rpg_max_rate`` (0: the line).

Names and units are those of the MLNX_OFED sysfs/NVConfig tables (rates in Mb/s, times in us,
alpha and g in 1/1024). The sender paces DATA at the current rate (the requester: wire bytes
x 8 / rate between packet starts), so a rate cut empties queues even where PFC keeps
everything.

**Profiles** (:data:`DCQCN_PROFILES`), each a complete, coherent set; a lab picks one by
name (``dcqcn_profile``) and may still set any key:

* ``nvidia`` (the default, :class:`DcqcnConfig`'s own defaults): the ConnectX firmware
  defaults of every parameter, as NVIDIA's DCQCN parameter table lists them (DOCA "DCQCN CC
  Parameters", https://networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters;
  the same values in MLNX_OFED's ECN pages and the older community "DCQCN Parameters" post).
* ``paper``: the DCQCN paper's set (Zhu et al., "Congestion Control for Large-Scale RDMA
  Deployments", SIGCOMM 2015): g = 1/256, K = 55 us alpha period, N = 50 us between CNPs
  (so at most one cut per 50 us), T = 55 us timer, B = 10 MB byte counter, F = 5, the target
  clamped on every cut (rate = R_C, R_T = R_C), R_AI = 40 Mb/s. Its hyper-increase step is
  mrc-lab's reading: R_HAI = 10 x R_AI = 400 Mb/s (the ratio of QCN's and NVIDIA's 5 and
  50 Mb/s); the paper's cut is alpha/2 with no further floor (``rpg_min_dec_fac`` 50 is the
  same: alpha <= 1) and no rate on a first CNP.

The mixed set mrc-lab ran before issue 36 (the paper's timers with NVIDIA's 5/50 Mb/s steps)
is neither: docs/transport-notes.md has its numbers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mrc.knobs import check_knobs, knob

_PS_PER_US = 1_000_000


@dataclass(frozen=True, slots=True)
class DcqcnConfig:
    """DCQCN knobs under NVIDIA's names and units; the defaults are NVIDIA's firmware
    defaults (the ``nvidia`` profile; the module doc says where each comes from)."""

    #: how this config's messages start (:func:`mrc.knobs.knob_problem`)
    KNOB_PREFIX = "DcqcnConfig: "

    # reaction point (the sender)
    rpg_time_reset: float = knob(300.0, "time between timer-driven rate increases", unit="us",
                                 gt=0, maximum=1e9)
    rpg_byte_reset: int = knob(32767, "bytes sent between byte-counter rate increases",
                               unit="bytes", minimum=1, maximum=1 << 40)
    rpg_threshold: int = knob(1, "increase events of a counter spent in fast recovery",
                              minimum=1, maximum=1 << 20)
    rpg_ai_rate: float = knob(5.0, "additive increase of the target rate", unit="Mb/s",
                              minimum=0, maximum=1e9)
    rpg_hai_rate: float = knob(50.0, "hyper increase of the target rate", unit="Mb/s",
                               minimum=0, maximum=1e9)
    rpg_gd: int = knob(11, "rate cut = alpha x 2^(10 - rpg_gd) of the rate (11: alpha/2)",
                       minimum=10, maximum=11, problem="rpg_gd must be 10 or 11")
    rpg_min_dec_fac: int = knob(50, "one cut keeps at least this share of the rate",
                                unit="%", minimum=0, maximum=100)
    rpg_min_rate: float = knob(1.0, "the rate never goes below this", unit="Mb/s", gt=0,
                               maximum=1e9)
    rpg_max_rate: float = knob(0.0, "the rate never goes above this; 0: the line rate",
                               unit="Mb/s", minimum=0, maximum=1e9)
    rate_to_set_on_first_cnp: float = knob(0.0, "both rates on a flow's first CNP; 0: cut "
                                           "from the line rate as usual", unit="Mb/s",
                                           minimum=0, maximum=1e9)
    rate_reduce_monitor_period: float = knob(4.0, "least time between two rate cuts",
                                             unit="us", minimum=0, maximum=1e9)
    clamp_tgt_rate: bool = knob(False, "every cut sets the target rate to the current rate")
    clamp_tgt_rate_after_time_inc: bool = knob(True, "a cut sets the target rate to the "
                                               "current rate if the timer raised the rate "
                                               "since the last cut")
    dce_tcp_g: int = knob(1019, "alpha's weight g: alpha = g x alpha (+ 1 - g after a CNP)",
                          unit="1/1024", minimum=0, maximum=1023)
    dce_tcp_rtt: float = knob(1.0, "alpha update period", unit="us", gt=0, maximum=1e9)
    initial_alpha_value: int = knob(1023, "alpha on a flow's first CNP", unit="1/1024",
                                    minimum=0, maximum=1023)
    # notification point (the receiver)
    min_time_between_cnps: float = knob(4.0, "notification point: least time between two "
                                        "CNPs of one QP", unit="us", minimum=0, maximum=1e9)

    def __post_init__(self) -> None:
        check_knobs(self)  # each knob's range, in field order

    @property
    def cnp_interval_ps(self) -> int:
        return int(round(self.min_time_between_cnps * _PS_PER_US))


#: The named profiles (module doc): ``nvidia`` is the default.
DCQCN_PROFILES: dict[str, DcqcnConfig] = {
    "nvidia": DcqcnConfig(),
    "paper": DcqcnConfig(rpg_time_reset=55.0, rpg_byte_reset=10 << 20, rpg_threshold=5,
                         rpg_ai_rate=40.0, rpg_hai_rate=400.0, rpg_gd=11, rpg_min_dec_fac=50,
                         rpg_min_rate=1.0, rpg_max_rate=0.0, rate_to_set_on_first_cnp=0.0,
                         rate_reduce_monitor_period=50.0, clamp_tgt_rate=True,
                         clamp_tgt_rate_after_time_inc=True, dce_tcp_g=1020,
                         dce_tcp_rtt=55.0, initial_alpha_value=1023,
                         min_time_between_cnps=50.0),
}
DEFAULT_DCQCN_PROFILE = "nvidia"


def dcqcn_profile(name: str, **overrides: object) -> DcqcnConfig:
    """Profile ``name`` with ``overrides`` (DcqcnConfig field -> value) applied."""
    if name not in DCQCN_PROFILES:
        raise ValueError(f"DcqcnConfig: unknown profile {name!r}; known: "
                         f"{', '.join(DCQCN_PROFILES)}")
    return dataclasses.replace(DCQCN_PROFILES[name], **overrides)  # type: ignore[arg-type]


class DcqcnRp:
    """The reaction point of one QP: its current and target rates (bits per second).

    The requester calls ``on_cnp`` for each CNP, ``on_sent`` for each DATA packet while the
    rate is below the line (``limited``), and ``on_timer`` at ``next_increase``. ``rate`` and
    ``ps_per_byte`` (pacing) are read after each call.
    """

    __slots__ = ("cfg", "max_bps", "min_bps", "rate", "target", "alpha", "limited",
                 "ps_per_byte", "next_increase", "cuts", "increases", "_g", "_period",
                 "_alpha_t", "_alpha_cnp", "_seen", "_last_cut", "_monitor", "_t_stage",
                 "_b_stage", "_bytes", "_time_reset", "_timer_inc", "_ai", "_hai",
                 "_gd_scale", "_min_dec", "_snap")

    def __init__(self, cfg: DcqcnConfig, line_bps: float) -> None:
        self.cfg = cfg
        cap = cfg.rpg_max_rate * 1e6
        self.max_bps = min(cap, line_bps) if cap > 0 else float(line_bps)
        self.min_bps = min(cfg.rpg_min_rate * 1e6, self.max_bps)
        self.rate = self.max_bps
        self.target = self.max_bps
        self.alpha = cfg.initial_alpha_value / 1024
        self.limited = False
        self.ps_per_byte = 8e12 / self.rate
        self.next_increase: int | None = None
        self.cuts = 0
        self.increases = 0
        self._g = cfg.dce_tcp_g / 1024
        self._period = max(1, int(round(cfg.dce_tcp_rtt * _PS_PER_US)))
        self._alpha_t = 0
        self._alpha_cnp = False
        self._seen = False  # a CNP has arrived for this flow
        self._last_cut: int | None = None
        self._monitor = int(round(cfg.rate_reduce_monitor_period * _PS_PER_US))
        self._t_stage = 0
        self._b_stage = 0
        self._bytes = 0
        self._time_reset = max(1, int(round(cfg.rpg_time_reset * _PS_PER_US)))
        self._timer_inc = False
        self._ai = cfg.rpg_ai_rate * 1e6
        self._hai = cfg.rpg_hai_rate * 1e6
        self._gd_scale = 2.0 ** (10 - cfg.rpg_gd)
        self._min_dec = cfg.rpg_min_dec_fac / 100
        # back at the line when within a hundredth of a percent of it (the halving
        # approach never gets there exactly)
        self._snap = self.max_bps * 1e-4

    # ------------------------------------------------------------------ alpha
    def _advance_alpha(self, now: int) -> None:
        """Apply the alpha updates of every period that ended by ``now``."""
        n = (now - self._alpha_t) // self._period
        if n <= 0:
            return
        g = self._g
        a = self.alpha
        a = g * a + (1 - g) if self._alpha_cnp else g * a
        if n > 1:
            a *= g ** (n - 1)
        self.alpha = a
        self._alpha_t += n * self._period
        self._alpha_cnp = False

    # ------------------------------------------------------------------ decrease
    def on_cnp(self, now: int) -> bool:
        """A CNP arrived; True when the rate was cut."""
        cfg = self.cfg
        first = not self._seen
        if first:
            self._seen = True
            self._alpha_t = now
            self.alpha = cfg.initial_alpha_value / 1024
        else:
            self._advance_alpha(now)
        self._alpha_cnp = True
        last = self._last_cut
        if last is not None and now - last < self._monitor:
            return False
        if first and cfg.rate_to_set_on_first_cnp > 0:
            rate = min(self.max_bps, max(self.min_bps, cfg.rate_to_set_on_first_cnp * 1e6))
            self.rate = self.target = rate
        else:
            if first or cfg.clamp_tgt_rate or (cfg.clamp_tgt_rate_after_time_inc
                                               and self._timer_inc):
                self.target = self.rate
            cut = self.rate * (1 - self.alpha * self._gd_scale)
            floor = max(self.rate * self._min_dec, self.min_bps)
            self.rate = cut if cut > floor else floor
        self.cuts += 1
        self._recover_from(now)
        return True

    def restart(self, now: int) -> None:
        """Slow restart after a retransmission timeout (``RcConfig.slow_restart``): the
        largest cut one event may make (the rate to ``rpg_min_dec_fac`` % of itself, never
        below the floor), the target clamped to it, recovery restarted as after a cut."""
        self._seen = True
        self.target = self.rate = max(self.rate * self._min_dec, self.min_bps)
        self._recover_from(now)

    def settle(self, now: int, rate_bps: float) -> None:
        """Put the reaction point where DCQCN holds a QP at a lasting bottleneck: rate and
        target at ``rate_bps`` (what its cuts converge to), the increase counters and the
        timer restarted at ``now`` as by a cut. The flow-level model (:mod:`mrc.flow`)
        calls this when a bottleneck goes away, then asks this object how the rate climbs
        back (``on_timer``, ``on_sent``): the recovery is DCQCN's own, not a copy."""
        rate = min(self.max_bps, max(self.min_bps, float(rate_bps)))
        self._seen = True
        self.rate = self.target = rate
        self._recover_from(now)

    def _recover_from(self, now: int) -> None:
        """What follows a cut at ``now`` (and a slow restart, and a settled bottleneck): the
        increase stages and the byte counter start over, and the timer from ``now``."""
        self._last_cut = now
        self._t_stage = self._b_stage = 0
        self._bytes = 0
        self._timer_inc = False
        self.next_increase = now + self._time_reset
        self._update()

    # ------------------------------------------------------------------ increase
    def on_sent(self, nbytes: int) -> None:
        """The byte counter: ``nbytes`` more sent while below the line rate."""
        b = self._bytes + nbytes
        reset = self.cfg.rpg_byte_reset
        while b >= reset and self.limited:
            b -= reset
            self._increase(False)
        self._bytes = b

    def on_timer(self, now: int) -> None:
        """Timer-driven increases due by ``now``."""
        due = self.next_increase
        while due is not None and now >= due:
            self._increase(True)
            due = self.next_increase = due + self._time_reset if self.limited else None

    def _increase(self, by_timer: bool) -> None:
        if by_timer:
            self._t_stage += 1
            self._timer_inc = True
        else:
            self._b_stage += 1
        t, b, f = self._t_stage, self._b_stage, self.cfg.rpg_threshold
        if t > f and b > f:
            self.target += self._hai  # hyper increase
        elif t > f or b > f:
            self.target += self._ai  # additive increase
        if self.target > self.max_bps:
            self.target = self.max_bps
        self.rate = (self.rate + self.target) / 2
        self.increases += 1
        self._update()

    def _update(self) -> None:
        if self.max_bps - self.rate <= self._snap:
            self.rate = self.target = self.max_bps
        self.limited = self.rate < self.max_bps
        if not self.limited:
            self.next_increase = None
            self._bytes = 0
        self.ps_per_byte = 8e12 / self.rate
