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
alpha and g in 1/1024); the defaults (:class:`DcqcnConfig`) say where they come from. The sender paces DATA at the current rate (the requester: wire bytes x 8 / rate
between packet starts), so a rate cut empties queues even where PFC keeps everything.
"""

from __future__ import annotations

from dataclasses import dataclass

_PS_PER_US = 1_000_000


@dataclass(frozen=True, slots=True)
class DcqcnConfig:
    """DCQCN knobs under NVIDIA's names and units.

    Defaults: the rate steps, cut shape and floors are NVIDIA's firmware defaults; the timing
    of feedback and recovery is the DCQCN paper's (Zhu et al. 2015: N = 50 us between CNPs,
    K = 55 us alpha period, g = 1/256, T = 55 us timer, B = 10 MB byte counter, F = 5, and
    the target clamped on every cut), because with NVIDIA's timing (4 us between CNPs and
    cuts, 1 us alpha period, a 32 KB byte counter recovering toward an unclamped target) the
    rate climbs back within microseconds of each cut and, on the lab's shallow fabrics, PFC
    rather than DCQCN ends up holding the queue. NVIDIA's value is given per field; a lab
    sets them all to run the firmware's defaults.
    """

    # reaction point (the sender)
    rpg_time_reset: float = 55.0  # us between timer-driven rate increases (NVIDIA: 300)
    rpg_byte_reset: int = 10 << 20  # bytes between byte-counter increases (NVIDIA: 32767)
    rpg_threshold: int = 5  # increase events of a counter spent in fast recovery (NVIDIA: 1)
    rpg_ai_rate: float = 5.0  # Mb/s, additive increase of the target rate (NVIDIA: 5)
    rpg_hai_rate: float = 50.0  # Mb/s, hyper increase of the target rate (NVIDIA: 50)
    rpg_gd: int = 11  # rate cut = alpha x 2^(10 - rpg_gd): 11 is alpha / 2 (NVIDIA: 11)
    rpg_min_dec_fac: int = 50  # %: one cut keeps at least this share of the rate (NVIDIA: 50)
    rpg_min_rate: float = 1.0  # Mb/s, the rate never goes below (NVIDIA: 1)
    rpg_max_rate: float = 0.0  # Mb/s, the rate never goes above; 0: the line (NVIDIA: 0)
    rate_to_set_on_first_cnp: float = 0.0  # Mb/s, both rates on a first CNP; 0: cut (NVIDIA: 0)
    rate_reduce_monitor_period: float = 50.0  # us, least time between two cuts (NVIDIA: 4)
    clamp_tgt_rate: bool = True  # every cut sets the target to the current rate (NVIDIA: off)
    clamp_tgt_rate_after_time_inc: bool = True  # ...or only after a timer increase (NVIDIA: on)
    dce_tcp_g: int = 1020  # alpha weight g, in 1/1024: 1020 is 1 - 1/256 (NVIDIA: 1019)
    dce_tcp_rtt: float = 55.0  # us, alpha update period (NVIDIA: 1)
    initial_alpha_value: int = 1023  # alpha on a flow's first CNP, in 1/1024 (NVIDIA: 1023)
    # notification point (the receiver)
    min_time_between_cnps: float = 50.0  # us, least time between two CNPs of one QP (NVIDIA: 4)

    def __post_init__(self) -> None:
        checks = (
            (self.rpg_time_reset > 0, "rpg_time_reset must be positive"),
            (self.rpg_byte_reset >= 1, "rpg_byte_reset must be at least 1"),
            (self.rpg_threshold >= 1, "rpg_threshold must be at least 1"),
            (self.rpg_ai_rate >= 0, "rpg_ai_rate must not be negative"),
            (self.rpg_hai_rate >= 0, "rpg_hai_rate must not be negative"),
            (10 <= self.rpg_gd <= 11, "rpg_gd must be 10 or 11"),
            (0 <= self.rpg_min_dec_fac <= 100, "rpg_min_dec_fac must be in 0..100"),
            (self.rpg_min_rate > 0, "rpg_min_rate must be positive"),
            (self.rpg_max_rate >= 0, "rpg_max_rate must not be negative"),
            (self.rate_to_set_on_first_cnp >= 0,
             "rate_to_set_on_first_cnp must not be negative"),
            (self.rate_reduce_monitor_period >= 0,
             "rate_reduce_monitor_period must not be negative"),
            (0 <= self.dce_tcp_g <= 1023, "dce_tcp_g must be in 0..1023"),
            (self.dce_tcp_rtt > 0, "dce_tcp_rtt must be positive"),
            (0 <= self.initial_alpha_value <= 1023, "initial_alpha_value must be in 0..1023"),
            (self.min_time_between_cnps >= 0, "min_time_between_cnps must not be negative"),
        )
        for ok, why in checks:
            if not ok:
                raise ValueError(f"DcqcnConfig: {why}")

    @property
    def cnp_interval_ps(self) -> int:
        return int(round(self.min_time_between_cnps * _PS_PER_US))


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
        self._last_cut = now
        self._t_stage = self._b_stage = 0
        self._bytes = 0
        self._timer_inc = False
        self.next_increase = now + self._time_reset
        self._update()
        return True

    def settle(self, now: int, rate_bps: float) -> None:
        """Put the reaction point where DCQCN holds a QP at a lasting bottleneck: rate and
        target at ``rate_bps`` (what its cuts converge to), the increase counters and the
        timer restarted at ``now`` as by a cut. The flow-level model (:mod:`mrc.flow`)
        calls this when a bottleneck goes away, then asks this object how the rate climbs
        back (``on_timer``, ``on_sent``): the recovery is DCQCN's own, not a copy."""
        rate = min(self.max_bps, max(self.min_bps, float(rate_bps)))
        self._seen = True
        self.rate = self.target = rate
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
