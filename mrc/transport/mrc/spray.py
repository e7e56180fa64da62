"""Path-aware spraying: the EV choice of an MRC QP, steered by what each EV's packets say.

Why
    A sprayed QP handles a *dead* path well (loss evidence retires the EV, :mod:`.loss`)
    but a *slow* one poorly if every GOOD EV is used alike: a slow T1 gets its equal share
    of the traffic, its queues grow, every flow's tail waits for the packets parked there,
    and the late ACKs look like losses (spurious retransmissions, EVs marked bad for
    nothing). Steering per EV, as REPS does, needs no topology and no control law: an EV
    carries traffic at the rate its packets come back clean.

The interface (htsim's ``UecMultipath`` has ``next_entropy`` and ``processEv``)
    :meth:`Spray.choose` (the sender: an EV for the next packet of a plane) and
    :meth:`Spray.feedback` (loss recovery: a packet sent on an EV was acknowledged), plus
    two questions: :meth:`Spray.declines` (the sender, in a QP's last window: not this plane
    now) and :meth:`Spray.slow_after` (the congestion control's "ECN with low delay",
    :meth:`.cc.CongestionControl.on_marked_ack`). Nothing else reads its state.

The rules
    * REPS (Recycled Entropy Packet Spraying, Bonato et al., EuroSys '25; ``spray =
      "reps"``): an EV whose packet came back clean is recycled (reused for a later packet
      of its plane); every ``reps_explore_every``-th packet, or when none is recycled,
      explores by round robin over the plane's GOOD EVs. ``round_robin``: always the latter.
    * Delay decides a recycle too (``path_aware``). Per acknowledged packet whose
      transmission is known, ``age`` = now - sent; ``ref`` is the QP's usual age, a running
      median (one step of 1/64 of the unloaded RTT per packet, so a slow minority cannot
      drag it as it would an average), ``floor`` the smallest age seen (the unloaded RTT).
      A CE-marked packet is not recycled (REPS), nor a slow one, ``age > ref + margin``
      (``margin = slow_margin_rtts x floor``): its path holds packets longer than the QP's
      others. So a slow path carries packets for as long as its delay stays within the
      margin of the QP's usual, and exploration still reaches every GOOD EV.
    * Slow, for the window: above the larger of ``ref`` and ``recent`` (the smallest age
      delivered in the last one to two eighths of the unloaded RTT), plus the margin. In
      an incast every path's queue grows at once and the median trails it, but what the
      fastest paths deliver now rises with it, so those marks stay the window's.
    * The last window (mrc-lab's own rule): the NIC fills each plane's port from the QPs
      that send on it, so a packet's plane is the port that asked first. In a QP's last
      window (bytes left below the window) a plane whose latest delivery took longer than
      the fastest plane's, by more than the margin plus the time the rest needs at one
      window per usual RTT, is declined: a packet sent there now would arrive after the
      QP's last one. Only ages from the last unloaded RTT count, and the fastest plane with
      a GOOD EV is never declined.

Measurements behind the rules and the margin, and the alternatives tried and not kept:
``docs/transport-notes.md`` (spraying).
"""

from __future__ import annotations

from collections import deque

from mrc.transport.mrc.config import MrcStats, QpCore
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.records import Ev

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]


@cython.cclass
class SprayPlane:
    """What the spray keeps per plane: the round-robin position (``rr``), the REPS explore
    count (``explore``), the recycled EVs (``recycle``, oldest first) and the age and time
    of the plane's latest delivery (``age``, ``at``: the tail rule). One record per plane
    rather than a list per field: per packet, these are typed field updates, not boxed
    integers stored into lists."""

    rr: cython.longlong
    explore: cython.longlong
    recycle: deque[Ev]
    age: cython.longlong
    at: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, recycle_len: int) -> None:
        self.rr = 0
        self.explore = 0
        self.recycle = deque(maxlen=recycle_len)
        self.age = -1  # -1: nothing delivered yet
        self.at = 0


@cython.cclass
class Spray:
    """The EV choice of one QP (round robin or REPS) and the evidence that steers it (see the
    module docstring for its four methods); its state is its own."""

    # What every choice and feedback reads first (the C struct's order); the rest after.
    _planes: list[SprayPlane]
    _reps: cython.bint
    _aware: cython.bint
    _every: cython.longlong
    _ref: cython.longlong
    _floor: cython.longlong
    _margin: cython.longlong
    _step: cython.longlong
    _horizon: cython.longlong
    _now_min: cython.longlong
    _old_min: cython.longlong
    _min_until: cython.longlong
    _stats: MrcStats
    _good: list[list[Ev]]
    _margin_f: cython.double
    _tail: cython.bint
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, paths: PathManager) -> None:
        cfg = qp.config
        self._stats = qp.stats
        planes = len(paths.plane_evs)
        self._reps = cfg.spray == "reps"
        self._every = cfg.reps_explore_every
        self._aware = cfg.path_aware
        self._planes = [SprayPlane(max(16, 4 * len(p))) for p in paths.plane_evs]
        #: the path manager's GOOD EVs per plane (the list is kept, its entries replaced)
        self._good = paths.good
        self._ref = -1  # the running median of delivered packets' ages (ps); -1: no sample yet
        self._floor = -1  # smallest age seen: the unloaded round trip
        self._margin_f = cfg.slow_margin_rtts
        self._margin = 0
        self._step = 1
        # the smallest age delivered in this and the previous stretch of ``_horizon`` (1/8 of
        # the unloaded RTT): what the QP's fastest paths take *now*
        self._horizon = 1
        self._now_min = 1 << 62
        self._old_min = 1 << 62
        self._min_until = 0
        # the last-window rule (``declines``): per plane, the age of its latest delivery and
        # when (``SprayPlane.age``, ``at``)
        self._tail = cfg.path_aware and planes > 1

    # ------------------------------------------------------------------ evidence
    @cython.ccall
    @cython.annotation_typing(True)
    def feedback(self, now: cython.longlong, e: Ev, age: cython.longlong,
                 marked: cython.bint) -> None:
        """A packet sent on ``e`` ``age`` ps ago was newly acknowledged (``age`` < 0: which
        transmission arrived is unknown); ``marked``: its ACK echoes a CE mark."""
        p: SprayPlane = self._planes[e.plane]
        if age < 0:
            if self._reps and not marked:
                p.recycle.append(e)
            return
        p.age = age
        p.at = now
        ref: cython.longlong = self._ref
        if ref < 0:
            ref = age
            self._set_floor(age)
        elif age < self._floor:
            self._set_floor(age)
        # the running median of delivery ages: a step up or down per packet, so slow
        # outliers do not drag it (an average would follow them)
        self._ref = ref + self._step if age > ref else ref - self._step
        if now >= self._min_until:
            self._old_min = self._now_min
            self._now_min = age
            self._min_until = now + self._horizon
        elif age < self._now_min:
            self._now_min = age
        if marked:
            return  # REPS: a CE mark is never recycled
        if self._aware and age > ref + self._margin:
            e.slow += 1  # its path holds packets longer than the QP's others: go elsewhere
            self._stats.slow_deliveries += 1
        elif self._reps:
            p.recycle.append(e)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def slow_after(self) -> cython.longlong:
        """An RTT above this is slow for this QP: its usual delivery age, or what its fastest
        paths deliver in right now when that is more (a queue every path shares), plus the
        margin; no bound before the first sample or with path awareness off."""
        if not self._aware or self._ref < 0:
            return 1 << 62
        recent: cython.longlong = self._now_min if self._now_min < self._old_min else self._old_min
        return (recent if recent > self._ref else self._ref) + self._margin

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def declines(self, now: cython.longlong, plane: cython.longlong, unsent: cython.longlong,
                 window: cython.longlong) -> cython.bint:
        """In a QP's last window (``unsent`` bytes left to send, less than ``window``; the
        sender asks only then): True when a packet sent on ``plane`` now would arrive after
        what is left could go on the QP's fastest plane, i.e. its latest delivery took
        longer than the fastest plane's by more than the margin plus the time the QP needs
        to send the rest at one window per usual RTT (``ref`` x unsent / window). Only
        planes heard from within the last unloaded RTT count (an older age says nothing of
        the queue there now), so a plane left alone is tried again, and the fastest plane
        with a GOOD EV is never declined. Never with one plane or path awareness off."""
        if not self._tail:
            return False
        k: cython.Py_ssize_t
        b: cython.longlong
        planes: list = self._planes
        p: SprayPlane = planes[plane]
        a: cython.longlong = p.age
        fresh: cython.longlong = now - self._floor
        if a < 0 or p.at < fresh or self._ref < 0:
            return False
        good: list = self._good
        best: cython.longlong = a
        for k in range(len(planes)):
            p = planes[k]
            b = p.age
            if b < best and p.at >= fresh and good[k]:
                best = b
        return a > best + self._margin + self._ref * unsent // window

    @cython.ccall
    @cython.annotation_typing(True)
    def _set_floor(self, age: cython.longlong) -> None:
        self._floor = age
        self._margin = int(self._margin_f * age)
        self._step = max(1, age >> 6)  # the median moves 1/64 of the unloaded RTT a packet
        self._horizon = max(1, age >> 3)

    # ------------------------------------------------------------------ choice
    @cython.ccall
    @cython.annotation_typing(True)
    def choose(self, plane: cython.longlong, good: list, avoid: Ev | None) -> Ev:
        """The EV for the next packet of ``plane``, one of ``good`` (the plane's GOOD EVs,
        not empty; ``avoid``: the EV a retransmission was lost on): REPS reuses a recycled
        EV, except every ``reps_explore_every``-th packet and when none is at hand, which go
        round robin over the GOOD EVs."""
        e: Ev
        i: cython.Py_ssize_t
        p: SprayPlane = self._planes[plane]
        if self._reps:
            n: cython.longlong = p.explore + 1
            if n >= self._every:
                p.explore = 0
            else:
                p.explore = n
                recycled = p.recycle
                while recycled:
                    e = recycled.popleft()
                    if e.usable and e is not avoid:
                        return e
        count: cython.Py_ssize_t = len(good)
        i = p.rr % count
        e = good[i]
        if e is avoid and count > 1:
            i = (i + 1) % count
            e = good[i]
        p.rr = i + 1
        return e
