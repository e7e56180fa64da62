"""MRC's detection delay at flow level: what a path's death costs before MRC notices.

When a T1, a link or a far NIC port dies, a sending MRC QP does not know (its own NIC port
is another matter: ``port_down`` marks that plane's EVs ASSUMED_BAD at once, as
``mrc.sim.nic_driver`` tells it). It keeps spraying over its GOOD EVs, and the packets it
sprays on the EVs whose paths now cross the dead element are lost until its loss recovery
(:mod:`mrc.transport.mrc.recovery`) marks those EVs ASSUMED_BAD and resends what they carried
on the others. Two pieces of evidence do that, and which one fires depends on whether the
connection is still sending:

* *Overdue evidence*: a packet sent more than the reorder window ``W`` after the lost one,
  on another EV of the plane, is acknowledged; after ``loss_grace`` the lost packet is
  declared lost and its EV gets a strike; the EV goes ASSUMED_BAD at ``overdue_strikes``
  strikes, one per packet it carried (an EV carries one packet per round of the plane's EV
  cycle). A connection that keeps sending (a write_bw stream, a bulk transfer) is found
  ``W + RTT + grace + (strikes - 1) x cycle`` after the fault (:func:`evidence_ps`), capped
  by the per-EV timer. ``W`` is the adaptive window's floor, ``reorder_margin_rtts`` base
  round trips (the flow model has no queueing spread), or ``reorder_window_ps`` when fixed.
* *The per-EV timer* (``ev_timeout_ps``, 65.5 us): the oldest unacknowledged packet of an EV
  unanswered that long. A collective's step sends one message per connection and then waits
  for the step before: when its burst is shorter than the evidence needs (``W`` plus the
  strikes' cycles), nothing is sent late enough to prove the loss, and the step in flight
  waits for the timer. Every chain of the ring then stalls on the message that lost packets,
  and the iteration waits for the slowest chain: ``ev_timeout`` per *wave*.

Why there can be a second wave: each message sprays ``P`` packets per plane round robin over
the plane's ``N`` GOOD EVs. If the fault lands a fraction ``x`` into a step's burst, the
message in flight reaches only the EVs its remaining ``(1 - x) P`` packets cover; the dead EVs
it had already passed are still GOOD when the ring resumes after the timer, and the next
message on that connection loses packets on them again: another ``ev_timeout``. With
``P >= N`` (the bundled all-reduce: 16 packets and 16 EVs per plane) a second wave is all
it takes; a smaller message needs ``ceil(left / (P / N))`` more. Where in a step the fault
lands comes from the flow model's own step clock (alpha-beta: burst, then the path latency),
which is not the packet model's clock (its steps are a few percent longer): for one fault the
two models can disagree on the wave count, for a fault at a random time both give a second
wave with probability about burst / step. The expected count of passed dead EVs (``x`` times
the dead EVs of every affected connection) decides whether the second wave happens (at least
one half, rounded to one).

A stream loses the dead EVs' share of its traffic until the evidence fires (resent later, the
line is spent twice); the steady windows the cross-check compares start 50 us after a fault,
after that transient (about 25 us on lab-8plane). What is not modelled: the packet model's
own cascade inside the ring's second wave (an overdue strike resends a lost packet but keeps
its EV GOOD while a newer packet on it is in flight, so a later message on that connection
can lose again and wait for that packet's own timer: a third, partial stall that depends on
when each chain reaches each connection), and congestion control's reaction to the losses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mrc.flow.fabric import View
from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive


@dataclass(frozen=True)
class DetectParams:
    """The packet model's parameters that set MRC's detection delay (``MrcConfig``)."""

    ev_timeout_ps: int
    overdue: bool  # overdue_loss
    window_ps: float  # the reorder window W (fixed, or the adaptive one's floor)
    rtt_ps: float  # the fabric's base round trip
    grace_ps: float  # loss_grace_ps
    strikes: int  # overdue_strikes
    mtu_bytes: int  # payload of a full packet
    wire_bits: float  # one full packet on the wire


def evidence_ps(p: DetectParams, cycle_ps: float | np.ndarray) -> float | np.ndarray:
    """When a connection that keeps sending finds a dead EV: overdue evidence (``W`` + a
    round trip for the later packet's ACK + the grace), one EV cycle per further strike,
    never later than the per-EV timer (module docstring)."""
    if not p.overdue:
        return float(p.ev_timeout_ps)
    found = p.window_ps + p.rtt_ps + p.grace_ps + (p.strikes - 1) * np.asarray(cycle_ps)
    return np.minimum(found, float(p.ev_timeout_ps))


class Detection:
    """The detection transient of one MRC transport (module docstring): per group, the
    share of its traffic lost until ``lossy_until``; for a collective, the hold of the whole
    job until ``hold_until``. The engine calls :meth:`fault` at each change of MRC's view,
    :meth:`due` for the next end, and :meth:`apply` to what a segment places."""

    def __init__(self, params: DetectParams, groups: Groups, entries: Entries,
                 planes: int) -> None:
        self.p = params
        self.groups = groups
        self.entries = entries
        self.planes = planes
        n = len(groups)
        self.lossy_until = np.full(n, -np.inf)
        self.lost_share = np.zeros(n)
        self.hold_until = -np.inf
        self.waves = 0  # of the last hold (reported)
        self.dead = np.zeros(len(entries.group), dtype=bool)  # lost, not yet found

    # ------------------------------------------------------------------ what died
    def _per_plane(self, mask: np.ndarray) -> np.ndarray:
        e = self.entries
        n = len(self.groups)
        flat = np.bincount(e.group * self.planes + e.plane, weights=e.count * mask,
                           minlength=n * self.planes)
        return flat.reshape(n, self.planes)

    def fault(self, t: float, good_before: np.ndarray, alive: Alive, view: View,
              share_before: np.ndarray | None, conn_before: np.ndarray | None,
              running: np.ndarray, collective: tuple[float, float, float] | None
              ) -> list[tuple[float, str, str, dict[str, object]]]:
        """The view changed at ``t``: EVs that were GOOD and whose path died without the
        sender's own port going down start a detection transient. ``collective``: (fault's
        position in the step's burst as a fraction, burst ps, packets per message) when the
        workload is a collective in an iteration, else None. Returns event rows."""
        e = self.entries
        if share_before is None or conn_before is None:
            return []
        src = self.groups.src[e.group]
        own = ~view.host_ok[src, e.plane] | ~view.t0_ok[e.plane, alive.src_t0]
        died = good_before & ~alive.up & ~own & (e.count > 0) & running[e.group]
        if not died.any():
            return []
        n_good = self._per_plane(good_before)
        k_dead = self._per_plane(died)
        frac = np.divide(k_dead, n_good, out=np.zeros_like(k_dead), where=n_good > 0)
        lost = (share_before * frac).sum(axis=1)
        hit = lost > 0
        rows: list[tuple[float, str, str, dict[str, object]]] = []
        if collective is None:
            # a stream keeps sending: overdue evidence, one EV cycle per further strike
            plane_bps = conn_before[:, None] * share_before * 1e9 / 1e12  # bits per ps
            cycle = np.divide(n_good * self.p.wire_bits, plane_bps,
                              out=np.full_like(n_good, np.inf), where=plane_bps > 0)
            found = np.asarray(evidence_ps(self.p, cycle))
            delay = np.where(k_dead > 0, found, 0.0).max(axis=1)
            until = t + delay
            self.lost_share[hit] = np.where(self.lossy_until[hit] > t,
                                            np.maximum(self.lost_share[hit], lost[hit]),
                                            lost[hit])
            self.lossy_until[hit] = np.maximum(self.lossy_until[hit], until[hit])
            self.dead |= died
            rows.append((t, "detection", "mrc", {
                "connections": int(self.groups.mult[hit].sum()),
                "lost_share_max": round(float(lost[hit].max()), 4),
                "detected_after_us": round(float(delay[hit].max()) / 1e6, 3),
                "by": "overdue evidence" if self.p.overdue and
                      float(delay[hit].max()) < self.p.ev_timeout_ps else "per-EV timer",
                "model": "flow"}))
            return rows
        x, burst_ps, packets = collective
        waves, hold = self.collective_waves(x, burst_ps, packets, n_good, k_dead, share_before,
                                            hit)
        self.waves = waves
        self.hold_until = max(self.hold_until, t + hold)
        rows.append((t, "detection", "mrc", {
            "connections": int(self.groups.mult[hit].sum()), "waves": waves,
            "held_us": round(hold / 1e6, 3), "model": "flow"}))
        return rows

    def collective_waves(self, x: float, burst_ps: float, packets: float, n_good: np.ndarray,
                         k_dead: np.ndarray, share: np.ndarray, hit: np.ndarray
                         ) -> tuple[int, float]:
        """(stalls, total hold in ps) for a collective whose step burst is ``burst_ps`` long
        and whose fault landed ``x`` of the way into it (``x >= 1``: between bursts).

        Each message sprays ``packets x share`` packets on a plane, a fraction ``cover`` of
        the plane's EV cycle (``cycle = burst / cover`` to go once round). A dead EV's first
        lost packet starts its timer; the timer (or the evidence) resends everything it
        carried, so the message ends ``detect`` after that first loss instead of at its burst's
        end: a stall of ``max(0, detect - (burst left after the first loss))``. Wave 1 is
        what the message in flight still sends; the dead EVs it does not reach are first hit
        by the next messages, ``cover`` of the cycle each, until fewer than half a dead EV
        (expected, over every affected connection) is left; each such message stalls the
        job again, at most once per dead EV left."""
        per_plane = packets * share
        cover = np.divide(per_plane, n_good, out=np.zeros_like(per_plane), where=n_good > 0)
        dead = (k_dead > 0) & hit[:, None] & (cover > 0)
        if not dead.any():
            return 0, 0.0
        c = float(cover[dead].min())  # the slowest to go round its cycle
        weight = float((k_dead * self.groups.mult[:, None])[dead].sum())  # dead EVs in all
        left_burst = (1.0 - x) * burst_ps if x < 1.0 else burst_ps
        reach = min(1.0, left_burst / burst_ps * c)  # share of the cycle wave 1 covers
        hold = self._stall(min(left_burst, reach / c * burst_ps), left_burst, burst_ps, c)
        stalls = 1 if hold > 0 else 0
        left = 1.0 - reach
        budget = max(1, int(round(left * weight)))  # at most one stall per dead EV left
        while left * weight >= 0.5 and budget > 0:
            step = min(left, c)
            extra = self._stall(step / c * burst_ps, burst_ps, burst_ps, c)
            if extra <= 0:
                break  # long bursts recover within themselves: later ones will too
            hold += extra
            stalls += 1
            budget -= 1
            left -= step
        return stalls, hold

    def _stall(self, first_hit_ps: float, burst_left_ps: float, burst_ps: float,
               cover: float) -> float:
        """How much later than its burst's end a message completes when its last dead EV's
        first loss is sent ``first_hit_ps`` into the ``burst_left_ps`` it still sends: the
        evidence when a packet goes out ``W`` after that loss (and, if the EV carries
        another packet before, one more strike's cycle), else the per-EV timer."""
        p = self.p
        after = max(0.0, burst_left_ps - first_hit_ps)
        cycle = burst_ps / cover
        if p.overdue and after > p.window_ps:
            detect = float(np.asarray(evidence_ps(p, cycle if cycle < after else 0.0)))
        else:
            detect = float(p.ev_timeout_ps)
        return max(0.0, detect - after)

    # ------------------------------------------------------------------ the engine's side
    def recover(self, t: float, alive: Alive) -> None:
        """Paths back before MRC found them dead (a short flap) carry again: a group whose
        lost EVs' paths are all up again stops losing (its EVs may still go ASSUMED_BAD on
        the evidence of what was lost, which the flow model's view already has)."""
        if not self.dead.any():
            return
        self.dead &= ~alive.up
        e = self.entries
        still = np.bincount(e.group, weights=self.dead, minlength=len(self.groups)) > 0
        ended = (self.lossy_until > t) & ~still
        self.lossy_until[ended] = t
        self.dead[self.lossy_until[e.group] <= t] = False

    def held(self, t: float) -> bool:
        return t < self.hold_until - 1e-6

    def due(self, t: float) -> float:
        """The next end of a transient after ``t``."""
        nxt = self.hold_until if self.hold_until > t + 1e-6 else np.inf
        later = self.lossy_until[self.lossy_until > t + 1e-6]
        if later.size:
            nxt = min(nxt, float(later.min()))
        return nxt

    def placed(self, t: float, conn: np.ndarray) -> np.ndarray:
        """What a stream's connections place while their dead EVs' share is still lost."""
        lossy = self.lossy_until > t + 1e-6
        if not lossy.any():
            return conn
        return np.where(lossy, conn * (1.0 - self.lost_share), conn)
