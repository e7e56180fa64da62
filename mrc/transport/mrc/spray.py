"""Path-aware spraying: the EV choice of an MRC QP, steered by what each EV's packets say.

Why
    A sprayed QP handles a *dead* path well (loss evidence retires the EV, :mod:`.recovery`)
    but a *slow* one poorly if every GOOD EV is used alike: a T1 whose links run at a quarter
    of their rate gets an eighth of the traffic when it can carry a thirty-second, its queues
    grow to tens of microseconds, every flow's tail waits for the packets parked there, and
    the late ACKs look like losses (spurious retransmissions, EVs marked bad for nothing).
    The post's claim is the opposite: "multiplane networks work efficiently only when traffic
    is evenly distributed across all planes and paths; this is where MRC's packet spraying
    and path-aware congestion response is essential".

What the published designs do (read, not copied)
    * REPS, Recycled Entropy Packet Spraying (Bonato et al., EuroSys '25; the artifact's
      htsim ``UecMpReps``/``CircularBufferREPS``): an EV whose packet came back *unmarked* is
      put in a small buffer and reused for a later packet; a marked one is not, so traffic
      drifts off congested paths with no per-path table, and a connection explores (a fresh
      EV) only when no recycled one is at hand.
    * UEC's bitmap load balancer (htsim ``UecMpBitmap``): a penalty per EV (ECN +1, NACK +4,
      timeout the maximum), skipped and decremented by the round robin.
    * UEC NSCC (the UE specification's congestion control; htsim ``uec.cpp``; public notes
      such as "Notes on Network Signal Congestion Control"): the window is driven by ECN and
      queueing delay in four quadrants, and "ECN with low delay" changes no window: it is a
      hot spot on one path, and the answer is to move traffic (change the EV), not to slow
      the connection down (:mod:`.cc` has that quadrant).

What this module does
    It keeps REPS (the QP sprays REPS-style, ``spray = "reps"``: every
    ``reps_explore_every``-th packet of a plane explores by round robin, the others reuse a
    recycled EV) and adds *delay* to what decides a recycle. The evidence already comes back
    on every ACK: the receiver acknowledges each arrival in a SACK, echoes a CE mark on an
    ACK of its own (a marked packet is always its ACK's trigger) and a trim on a NACK, each
    naming the EV (:mod:`.receiver`): no new echo is needed. Per newly acknowledged packet
    whose transmission is known (sent once, or the one the ACK echoes), ``age`` = now - sent:

    * ``ref``: the QP's *usual* delivery age, a running median (one step of 1/64 of the
      unloaded RTT up or down per packet): the paths the QP mostly uses set it, and a slow
      minority cannot drag it up as it would drag an average. ``floor``: the smallest age
      seen, the unloaded round trip.
    * A CE-marked packet does not recycle its EV (REPS).
    * A *slow* one, ``age > ref + margin`` (``margin = slow_margin_rtts x floor``), does
      not either: its path holds packets longer than the QP's other paths.
    * Anything else recycles its EV.

    And for the window (:mod:`.recovery` asks :meth:`Spray.slow_after`): a CE mark echoed
    on a packet that came back slow is that path's news. Slow here is judged against the
    larger of ``ref`` and ``recent``, the smallest age delivered in the last one to two
    eighths of the unloaded RTT: in an incast every path's queue grows at once and the
    median trails it, but what the fastest paths deliver right now rises with it, so those
    marks stay the window's. The spray already moves off that
    EV; the congestion control sees the ACK unmarked with the QP's usual delay. That is
    NSCC's "ECN with low delay: switch paths, do not slow down", with "low" judged against
    the QP's own other paths instead of the marked packet's (a slow path's packet always
    carries a high delay). A mark within the usual delay is NSCC's as before: with a high
    QP delay, a multiplicative decrease.

    The result balances delay: a slow path keeps carrying packets for as long as its delay
    stays within ``margin`` of the QP's usual one, so a T1 at 25% carries about its capacity
    share with a queue of a few microseconds; its packets never look lost and its EVs never
    look dead. Exploration still reaches every GOOD EV, so a path that recovers is used
    again within a few RTTs.

The last window: planes
    The NIC fills each plane's port from the QPs that send on it, so the plane a packet takes
    is the port that asked first, not a choice of the QP. That is right while a QP has more
    to send than its window: whichever plane is slower, its packets are not the QP's last.
    In the QP's last window (bytes left to send below the window) it is not: a plane whose
    downlink queue is longer holds the last packets after the others drained (the 8-to-1
    incast, seed 1 before: 3 us at the end with one of the receiver's eight downlinks busy).
    So there (``Sender.poll`` asks :meth:`Spray.late_plane`) the QP declines a plane whose
    latest delivery took longer than its fastest plane's by more than the margin plus the
    time the rest needs to go out at one window per usual RTT (``ref`` x unsent / window):
    a packet sent there now would arrive after the QP's last one on the fast plane. Only
    ages from the last unloaded RTT count (a plane left alone has no newer sample; after
    that it is tried again), and the fastest plane with a GOOD EV is never declined, so a QP
    always has a plane; the declined packet goes out on the next port the NIC asks. It is
    mrc-lab's own rule: UEC's htsim (``uec.cpp``, ``uec_mp.cpp``) and the OCP MRC headers
    have no end-of-message rule (read, nothing taken). One plane: nothing changes. Measured
    (``benchmarks/acceptance_transport.py`` item 5, share of the receiver's NIC to the last
    byte placed, with the NSCC change of :mod:`.cc`): seeds 1-8 92.56 -> 93.39%, seeds
    9-16 92.67 -> 93.41%. Tried and not kept: the same rule for the EVs of a plane (only
    EVs whose latest age is within the QP's median plus the allowance: four slow T1s of
    eight on htsim's matrix 1.128 -> 1.148, the incast unchanged); no allowance (decline
    any plane over the fastest plus the margin: the last flow of an incast needs every
    port of its NIC, 91.3%); a per-plane average age instead of the latest (planes left
    alone keep an old age: no better).

Why this and not the alternatives (measured on ``degraded-t1s``, 128 hosts, 1 and 4 slow
T1s of 8, four permutations: seeds 1-3 and htsim's ``perm_128n_128c_2MB``; first with the
congestion control mrc-lab had before the published ``uet-1.0-nscc`` profile, then again
with it)
    * Per EV, as REPS, not a table per path with weights (CONGA-style): it needs no topology
      (an EV names a path only to the fabric) and no control law; recycling *is* a weight:
      an EV carries traffic at the rate its packets come back clean.
    * A mean (EWMA) for ``ref`` instead of the median: the start-up burst's slow samples
      pull it up, so marks from slow paths still count for the window and halve a few
      windows: the slowest flow at four slow T1s is 2% later on average (1.14 vs 1.12x).
    * No window rule (marks count whatever path they came on): 1.15 vs 1.12x; under the
      published NSCC the rule hides about one mark in ten at four slow T1s and none at one
      (no queue reaches the marking threshold), so it matters less than it did.
    * Keeping a slow packet's mark but with the QP's usual delay (so a high usual delay
      still cuts the window): 1.23 vs 1.22x at four slow T1s; the mark is the path's.
    * Every RTT sample clamped to ``ref + margin`` for the window (not only the marked
      ones): no quick-adapt cut at start-up, windows stay large, the fast paths' ECN then
      cuts a few flows hard: 1.21-1.26x.
    * Resting every EV of a slow path for a while (a shared penalty, bitmap-style): slow
      T1s sit idle at four of eight: 1.16-1.24x. Skipping EVs with a late packet in flight
      never changed a choice (a recycled EV has just delivered, and round robin comes back
      to an EV only after all the others).
    * The margin (``slow_margin_rtts``), slowest flow over the ideal, seeds 1-3 and htsim's
      matrix under the published NSCC: 0.5 RTT 1.10-1.12x at one slow T1 and 1.20-1.22x at
      four; 0.3 RTT 1.09-1.10x and 1.17-1.20x; 0.2 about the same as 0.3; 0.125 collapses
      (1.47-1.57x, hundreds of spurious retransmissions: the slow paths get so few packets
      that the reorder window never learns their spread, and their packets look lost). The
      default, 0.3 of the unloaded RTT (2.8 us on that fabric, some eight full packets of
      serialisation at 100 Gb/s), sits well above that cliff and above the jitter healthy
      sprayed paths show: the healthy permutation recycles all but 54 of some 62,000
      deliveries and its FCTs move by under 0.1%.
    * Where the rest of the slowest flow's time goes at four slow T1s: the window, not the
      path choice. The same spraying under a fixed window of one BDP finishes every flow
      within 1.09x of the ideal (p50 1.05x, seed 1), and so does NSCC with ``max_cwnd`` at
      one BDP (1.08-1.09x, p50 1.00-1.05x, four permutations; no mark, no decrease). With
      the profile's 1.5 BDP, windows grow into the headroom (fair increase above the target
      delay) until the fast paths' queues reach the marking threshold, and the
      multiplicative decreases that follow land on some flows more than on others:
      1.17-1.20x. The headroom is what a healthy fabric needs (one BDP leaves the healthy
      permutation at 1.20x), so it stays as the profile sets it. Measured over time, the
      loss was idle capacity, not one starved flow: a fully loaded T0's flows all finished
      together at 1.16x, its fast uplinks down to 65-75% of their rate for 20-30 us after
      each round of cuts sized by single marked ACKs' path delays. Sizing the decrease by
      the smoothed delay, as UEC's reference code does (:mod:`.cc`): 1.14-1.15x on seeds
      1-3, 1.17x on htsim's matrix (p50 0.97-1.04x); up to two slow T1s nothing changes
      (no window is cut there). And one decrease per window of data (marks on packets sent
      before the last cut cut nothing, :mod:`.cc`): 1.12-1.15x on seeds 1-3, 1.13x on
      htsim's matrix.
    * The window rule against the median alone: in the 8-to-1 incast (acceptance benchmark)
      the median trails the growing queue, a third of the marks were taken for one slow
      path's and the queue ran longer: 91.5% of the NIC over seeds 1-14 against 91.9%
      without path awareness (to the sender's completion; to the placement of the last
      byte, seeds 1-8: 92.3 against 93.0%). Against ``recent`` over 1/8 to 2/8 of the RTT:
      92.0% (93.0% to placement); over 1/4 to 2/4: 92.6% to placement; over one to two
      RTTs: no better than the median. The slow-T1 runs do not change with it up to two
      slow T1s and move within their seed-to-seed spread at four.

Costs
    One call per acknowledged packet (a few comparisons, one step of the median, the
    running minimum, the plane's latest age) and REPS's choice per sent packet, as before;
    a few comparisons per marked ACK; in a QP's last window, one pass over its planes per
    poll; no timers. Measured: about 0.1 us of CPython per delivered packet
    over REPS's plain recycle, against some 45 us the simulator spends per delivered packet
    of the healthy 128-host permutation (lost in its run-to-run spread).
"""

from __future__ import annotations

from collections import deque

from mrc.transport.mrc.config import QpCore
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.records import Ev


class SprayPlane:
    """What the spray keeps per plane: the round-robin position (``rr``), the REPS explore
    count (``explore``), the recycled EVs (``recycle``, oldest first) and the age and time
    of the plane's latest delivery (``age``, ``at``: the tail rule). One record per plane
    rather than a list per field: per packet, these are typed field updates, not boxed
    integers stored into lists."""

    __slots__ = ("rr", "explore", "recycle", "age", "at")

    def __init__(self, recycle_len: int) -> None:
        self.rr = 0
        self.explore = 0
        self.recycle: deque[Ev] = deque(maxlen=recycle_len)
        self.age = -1  # -1: nothing delivered yet
        self.at = 0


class Spray:
    """The EV choice of one QP (round robin or REPS) and the evidence that steers it (see the
    module docstring). ``pick`` is the sender's, ``delivered`` loss recovery's."""

    __slots__ = ("stats", "planes", "recycle", "_reps", "_every", "_aware",
                 "ref", "floor", "margin", "_margin_f", "_step", "_horizon", "_now_min",
                 "_old_min", "_min_until", "tail")

    def __init__(self, qp: QpCore, paths: PathManager) -> None:
        cfg = qp.config
        self.stats = qp.stats
        planes = len(paths.plane_evs)
        self._reps = cfg.spray == "reps"
        self._every = cfg.reps_explore_every
        self._aware = cfg.path_aware
        self.planes = [SprayPlane(max(16, 4 * len(p))) for p in paths.plane_evs]
        #: REPS: EVs whose packets came back clean, per plane, oldest first (the planes'
        #: ``recycle`` queues, listed)
        self.recycle: list[deque[Ev]] = [p.recycle for p in self.planes]
        self.ref = -1  # smoothed age of delivered packets (ps); -1: no sample yet
        self.floor = -1  # smallest age seen: the unloaded round trip
        self._margin_f = cfg.slow_margin_rtts
        self.margin = 0
        self._step = 1
        # the smallest age delivered in this and the previous stretch of ``_horizon`` (1/8 of
        # the unloaded RTT): what the QP's fastest paths take *now*
        self._horizon = 1
        self._now_min = 1 << 62
        self._old_min = 1 << 62
        self._min_until = 0
        # the tail rule (``late_plane``): per plane, the age of its latest delivery and when
        # (``SprayPlane.age``, ``at``)
        self.tail = cfg.path_aware and planes > 1

    # ------------------------------------------------------------------ evidence
    def delivered(self, now: int, e: Ev, age: int, marked: bool) -> None:
        """A packet sent on ``e`` ``age`` ps ago was newly acknowledged (``age`` < 0: which
        transmission arrived is unknown); ``marked``: its ACK echoes a CE mark."""
        p = self.planes[e.plane]
        if age < 0:
            if self._reps and not marked:
                p.recycle.append(e)
            return
        p.age = age
        p.at = now
        ref = self.ref
        if ref < 0:
            ref = age
            self._set_floor(age)
        elif age < self.floor:
            self._set_floor(age)
        # the running median of delivery ages: a step up or down per packet, so slow
        # outliers do not drag it (an average would follow them)
        self.ref = ref + self._step if age > ref else ref - self._step
        if now >= self._min_until:
            self._old_min = self._now_min
            self._now_min = age
            self._min_until = now + self._horizon
        elif age < self._now_min:
            self._now_min = age
        if marked:
            return  # REPS: a CE mark is never recycled
        if self._aware and age > ref + self.margin:
            e.slow += 1  # its path holds packets longer than the QP's others: go elsewhere
            self.stats.slow_deliveries += 1
        elif self._reps:
            p.recycle.append(e)

    def slow_after(self) -> int:
        """An RTT above this is slow for this QP: its usual delivery age, or what its fastest
        paths deliver in right now when that is more (a queue every path shares), plus the
        margin; no bound before the first sample or with path awareness off."""
        if not self._aware or self.ref < 0:
            return 1 << 62
        recent = self._now_min if self._now_min < self._old_min else self._old_min
        return (recent if recent > self.ref else self.ref) + self.margin

    def late_plane(self, now: int, plane: int, unsent: int, window: int,
                   good: list[list[Ev]]) -> bool:
        """In a QP's last window (``unsent`` bytes left to send, less than ``window``): True
        when a packet sent on ``plane`` now would arrive after what is left could go on the
        QP's fastest plane, i.e. its latest delivery took longer than the fastest plane's
        by more than the margin plus the time the QP needs to send the rest at one window
        per usual RTT (``ref`` x unsent / window). Only planes heard from within the last
        unloaded RTT count (an older age says nothing of the queue there now), so a plane
        left alone is tried again, and the fastest plane with a GOOD EV is never late."""
        planes = self.planes
        p = planes[plane]
        a = p.age
        fresh = now - self.floor
        if a < 0 or p.at < fresh or self.ref < 0:
            return False
        best = a
        for k in range(len(planes)):
            p = planes[k]
            b = p.age
            if b < best and p.at >= fresh and good[k]:
                best = b
        return a > best + self.margin + self.ref * unsent // window

    def _set_floor(self, age: int) -> None:
        self.floor = age
        self.margin = int(self._margin_f * age)
        self._step = max(1, age >> 6)  # the median moves 1/64 of the unloaded RTT a packet
        self._horizon = max(1, age >> 3)

    # ------------------------------------------------------------------ choice
    def pick(self, plane: int, good: list[Ev], avoid: Ev | None) -> Ev:
        """The EV for the next packet of ``plane`` (``avoid``: the EV a retransmission was
        lost on): REPS reuses a recycled EV, except every ``reps_explore_every``-th packet
        and when none is at hand, which go round robin over the GOOD EVs."""
        p = self.planes[plane]
        if self._reps:
            n = p.explore + 1
            if n >= self._every:
                p.explore = 0
            else:
                p.explore = n
                recycled = p.recycle
                while recycled:
                    e = recycled.popleft()
                    if e.usable and e is not avoid:
                        return e
        count = len(good)
        i = p.rr % count
        e = good[i]
        if e is avoid and count > 1:
            i = (i + 1) % count
            e = good[i]
        p.rr = i + 1
        return e
