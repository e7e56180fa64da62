"""MRC's detection delay at flow level: what a path's death costs before MRC notices.

When a T1, a link or a far NIC port dies, a sending MRC QP does not know (its own NIC port
is another matter: ``port_down`` marks that plane's EVs ASSUMED_BAD at once, as
``mrc.nic.driver`` tells it). It keeps spraying over its GOOD EVs, and the packets it
sprays on the EVs whose paths now cross the dead element are lost until its loss recovery
(:mod:`mrc.transport.mrc.loss`) marks those EVs ASSUMED_BAD and resends what they carried
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
* *The per-EV timer* (``ev_timeout_ps``, 65.5 us): an EV's oldest unacknowledged packet
  unanswered that long; it resends everything the EV still carried. A collective's step
  sends one message per connection and then waits for the step before (a ring's chain
  forwards what it just received): when the message's burst ends less than ``W`` after its
  loss, nothing is sent late enough to prove it, and the message ends at the timer, not at
  its burst's end: a stall of ``ev_timeout`` less what the burst still had to send. The
  ring's chains stall on their messages that lost packets and the iteration waits for the
  slowest: measured in the packet model (allreduce-t1-reboot), every chain stalls 62-65 us
  on the first wave, every EV marked with reason ``timeout``.

Why there can be a second wave (and more): each message sprays ``P`` packets per plane round
robin over the plane's ``N`` GOOD EVs, a share ``cover = P / N`` of the EV cycle. If the fault
lands a fraction ``x`` into a step's burst, the message in flight reaches only the EVs its
remaining ``(1 - x) P`` packets cover; the dead EVs it had already passed are still GOOD when
the ring resumes after the timer, and the next message on that connection loses packets on
them: another stall (:meth:`Detection.collective_waves`). With ``P >= N`` (the bundled
all-reduce: 16 packets on 16 EVs per plane) one more wave covers the rest; a smaller message
needs one per ``cover`` of the cycle left, at most one per dead EV left (they are hit one at
a time). A wave happens while at least half a dead EV (expected, over every affected
connection) is left. A burst that goes on past its loss by more than ``W`` is found by the
evidence and its end is delayed by what is left of that (a long all-to-all message: not at
all). The stalls are taken at once, at the fault (the levels compared are over windows).

Where in a step the fault lands decides how much of the cycle the message in flight had
already passed. The flow model does not read that off its own step clock: its healthy steps
are 4% shorter than the packet model's, and the packet model's ring chains drift apart by
microseconds within an iteration (queueing at shared T0 uplinks), so a fault "between bursts"
by the nominal clock still catches some connection's tail in flight, its chain stalls, and
the connections that chain feeds idle with dead EVs unused. It takes the message in flight at
the middle of its burst (:data:`MID_BURST`, the mean of a uniform position): with ``P >= N``
that is two waves, 265 us for allreduce-t1-reboot's hit iteration (142 healthy). Measured in
the packet model (``benchmarks/flow_crosscheck.py --at``, the reboot moved to 560, 580, 600,
603, 605, 607, 609, 620, 650 and 680 us): 207-322 us, mean 272, a draw of where the fault
lands (before path-aware spraying: 262-303 us, and 216 at 560, the last step of an
iteration, whose second wave falls in the next one).

A stream loses the dead EVs' share of its traffic until the evidence fires with round-robin
spraying; with REPS (the default) only for one round of the EV cycle, since REPS reuses only
the EVs whose packets came back, so each dead EV takes one packet and is left alone (measured:
the packet model's t0-t1-link-flap loses about a third of what share x 20 us would cost, one
cycle's worth). Either way, the loss ends when the path is back if that comes first (a short
flap), and what was lost is resent (the line is spent twice). The steady windows the cross-check compares start 50 us after a fault, after that transient
(about 25 us on lab-8plane; the packet model marks the EVs 20-32 us after the fault, reason
``overdue ... strikes=2``). An operator drain is told to MRC (no loss), and so is a QP's own
NIC port going down (``port_down``).

Not modelled (what makes the packet model's hit iteration vary around the flow model's): congestion control's reaction to the losses (windows cut after the first wave
slow the next messages), and the overdue strikes inside the second wave: once the ring
resumes, other chains' messages on a connection prove a lost packet overdue, which resends
it but leaves its EV GOOD while a newer packet on it is in flight (one strike of two), so
later messages lose there again and wait for that newer packet's own timer. Both depend on
when each chain reaches each connection, which a flow model does not follow. Nor is the tail
of a finite transfer (permutation, connection matrix): a flow whose last packets die waits
for the per-EV timer to finish; here transfers follow the stream rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mrc.flow.fabric import View
from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive

#: Where in its burst a collective's message in flight is taken to be when a path dies: the
#: expectation of a uniform position (module docstring: why not the flow model's own clock).
MID_BURST = 0.5


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
    reps: bool = True  # spray = "reps": an EV whose packet is lost is not reused


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
              running: np.ndarray, collective: tuple[float, float] | None
              ) -> list[tuple[float, str, str, dict[str, object]]]:
        """The view changed at ``t``: EVs that were GOOD and whose path died without the
        sender's own port going down start a detection transient. ``collective``: (burst ps,
        packets per message) when the workload is a collective in an iteration, else None;
        the fault is taken at the middle of the burst (:data:`MID_BURST`). Returns event
        rows."""
        e = self.entries
        if share_before is None or conn_before is None:
            return []
        src = self.groups.src[e.group]
        own = ~view.host_ok[src, e.plane] | ~view.t0_ok[e.plane, alive.src_t0]
        lost_path = good_before & ~alive.up & (e.count > 0) & running[e.group]
        died = lost_path & ~own
        rows: list[tuple[float, str, str, dict[str, object]]] = []
        told = lost_path & own
        if told.any():  # the QP's own NIC port went down: port_down, at once
            rows.append((t, "ev_state", "mrc", {
                "new": "ASSUMED_BAD", "old": "GOOD", "reason": "port down",
                "evs": round(float((e.count * self.groups.mult[e.group])[told].sum())),
                "model": "flow"}))
        if not died.any():
            return rows
        n_good = self._per_plane(good_before)
        k_dead = self._per_plane(died)
        frac = np.divide(k_dead, n_good, out=np.zeros_like(k_dead), where=n_good > 0)
        lost = (share_before * frac).sum(axis=1)
        hit = lost > 0
        evs = round(float((e.count * self.groups.mult[e.group])[died].sum()))
        if collective is None:
            # a stream keeps sending: overdue evidence, one EV cycle (a full packet on each
            # of the plane's GOOD EVs, at the plane's goodput) per further strike
            plane_bps = conn_before[:, None] * share_before * 1e9 / 1e12  # bits per ps
            cycle = np.divide(n_good * self.p.mtu_bytes * 8.0, plane_bps,
                              out=np.full_like(n_good, np.inf), where=plane_bps > 0)
            found = np.asarray(evidence_ps(self.p, cycle))
            delay = np.where(k_dead > 0, found, 0.0).max(axis=1)
            # REPS sprays on the EVs whose packets came back: a dead EV takes the packet
            # it is due next and is not reused, so the share is lost for one round of the
            # cycle, not until the evidence (round robin keeps spraying on it until then)
            losing = np.minimum(found, cycle) if self.p.reps else found
            until = t + np.where(k_dead > 0, losing, 0.0).max(axis=1)
            self.lost_share[hit] = np.where(self.lossy_until[hit] > t,
                                            np.maximum(self.lost_share[hit], lost[hit]),
                                            lost[hit])
            self.lossy_until[hit] = np.maximum(self.lossy_until[hit], until[hit])
            self.dead |= died
            first = float(delay[hit].min())
            by = "overdue" if self.p.overdue and first < self.p.ev_timeout_ps else "timeout"
            rows.append((t + first, "ev_state", "mrc", {
                "new": "ASSUMED_BAD", "old": "GOOD", "reason": by, "evs": evs,
                "model": "flow"}))
            rows.append((t, "detection", "mrc", {
                "connections": int(self.groups.mult[hit].sum()),
                "lost_share_max": round(float(lost[hit].max()), 4),
                "detected_after_us": round(float(delay[hit].max()) / 1e6, 3),
                "by": "overdue evidence" if self.p.overdue and
                      float(delay[hit].max()) < self.p.ev_timeout_ps else "per-EV timer",
                "model": "flow"}))
            return rows
        burst_ps, packets = collective
        waves, hold, first = self.collective_waves(MID_BURST, burst_ps, packets, n_good, k_dead,
                                                   share_before, hit)
        self.waves = waves
        self.hold_until = max(self.hold_until, t + hold)
        if waves:
            by = "timeout" if first >= self.p.ev_timeout_ps else "overdue"
            rows.append((t + first, "ev_state", "mrc", {
                "new": "ASSUMED_BAD", "old": "GOOD", "reason": by, "evs": evs,
                "model": "flow"}))
        rows.append((t, "detection", "mrc", {
            "connections": int(self.groups.mult[hit].sum()), "waves": waves,
            "held_us": round(hold / 1e6, 3), "model": "flow"}))
        return rows

    def collective_waves(self, x: float, burst_ps: float, packets: float, n_good: np.ndarray,
                         k_dead: np.ndarray, share: np.ndarray, hit: np.ndarray
                         ) -> tuple[int, float, float]:
        """(stalls, total hold in ps, when the first EVs are found) for a collective whose step burst is ``burst_ps`` long
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
            return 0, 0.0, 0.0
        c = float(cover[dead].min())  # the slowest to go round its cycle
        weight = float((k_dead * self.groups.mult[:, None])[dead].sum())  # dead EVs in all
        left_burst = (1.0 - x) * burst_ps if x < 1.0 else burst_ps
        reach = min(1.0, left_burst / burst_ps * c)  # share of the cycle wave 1 covers
        hold, first = self._stall(min(left_burst, reach / c * burst_ps), left_burst, burst_ps,
                                  c)
        stalls = 1 if hold > 0 else 0
        left = 1.0 - reach
        budget = max(1, int(round(left * weight)))  # at most one stall per dead EV left
        while left * weight >= 0.5 and budget > 0:
            step = min(left, c)
            extra, _ = self._stall(step / c * burst_ps, burst_ps, burst_ps, c)
            if extra <= 0:
                break  # long bursts recover within themselves: later ones will too
            hold += extra
            stalls += 1
            budget -= 1
            left -= step
        return stalls, hold, first

    def _stall(self, first_hit_ps: float, burst_left_ps: float, burst_ps: float,
               cover: float) -> tuple[float, float]:
        """How much later than its burst's end a message completes when its last dead EV's
        first loss is sent ``first_hit_ps`` into the ``burst_left_ps`` it still sends: the
        evidence when a packet goes out ``W`` after that loss (and, if the EV carries
        another packet before, one more strike's cycle), else the per-EV timer. Returns
        (the stall, the detection delay from the first loss)."""
        p = self.p
        after = max(0.0, burst_left_ps - first_hit_ps)
        cycle = burst_ps / cover
        if p.overdue and after > p.window_ps:
            detect = float(np.asarray(evidence_ps(p, cycle if cycle < after else 0.0)))
        else:
            detect = float(p.ev_timeout_ps)
        return max(0.0, detect - after), detect

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
