"""The path manager of an MRC QP: its EV set, each EV's state, probing and reintegration.

EV states
    Every EV starts GOOD. Loss recovery (:mod:`.loss`) moves an EV to ASSUMED_BAD on
    evidence: a FIFO loss, an RTO, or overdue strikes. ASSUMED_BAD EVs stop carrying data
    at once (the sender sprays over each plane's GOOD list, rebuilt on every change), their
    missing packets are resent on other GOOD EVs, and they are probed every
    ``probe_interval_ps`` (PROBE/PROBE_REPLY along the same path) until K consecutive
    probes are answered, then they are GOOD again. A probe unanswered for
    ``probe_timeout_ps`` (default: the RTO) breaks the run. DENIED EVs (``deny``/``allow``)
    are never used or probed. ``port_down(now, plane)`` is local knowledge the driver may
    pass on (its NIC port lost signal): that plane's EVs go ASSUMED_BAD at once, without
    waiting for evidence, and the probes bring them back.

The floor (``ev_min_active``)
    The NIC never marks an EV ASSUMED_BAD when that would leave fewer than
    ``ev_min_active`` GOOD EVs (``mrc_ctl.h``: "min number of EVs that must remain active to
    avoid marking too many EVs as ASSUMED_BAD"). Such an EV stays GOOD and keeps carrying
    data; what it had in flight is still resent elsewhere. Refusals are counted
    (``bad_refused_min_active``). An operator's DENIED is not subject to the floor.

Each state change bumps the EV's ``epoch``, so probe timers queued under an older state
die when they come up, and raises an :class:`~mrc.transport.base.EvStateChanged` for the
driver.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mrc.packet import PROBE, PSN_MASK, Packet
from mrc.transport.base import (
    ASSUMED_BAD,
    DENIED,
    GOOD,
    EvState,
    EvStateChanged,
    PathChoice,
    TransportEvent,
)
from mrc.transport.mrc.config import MrcConfig, MrcStats, QpCore
from mrc.transport.mrc.evmap import EvMap
from mrc.transport.mrc.records import Ev

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C function, not its Python wrapper
    from cython.cimports.mrc.packet import psn_diff  # type: ignore[import-not-found]
else:
    from mrc.packet import psn_diff

# typed copies (compiled, C integers)
_PROBE = cython.declare(cython.longlong, PROBE)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)

EvSelector = Callable[[PathChoice], bool] | Iterable[int]


@cython.cclass
class PathManager:
    """The EVs of one QP, by plane, with their states and probes (see the module docstring).

    ``good[plane]`` is the list the sender sprays over; it is rebuilt (never edited in
    place) on every state change of an EV of that plane."""

    qp: QpCore
    config: MrcConfig
    stats: MrcStats
    events: deque[TransportEvent]
    evs: list[Ev]
    index: EvMap
    plane_evs: list[list[Ev]]
    good: list[list[Ev]]
    probe_q: deque[tuple[int, Ev, int]]  # (due, ev, epoch)
    _probe_timeout: cython.longlong
    #: Wired by the QP to its loss recovery: an answered probe is progress (the watchdog
    #: restarts), and a port down resends what was in flight on the plane's EVs.
    progress: Callable[[int], None]
    evict: Callable[[Ev], None]
    good_count: cython.longlong
    bad_count: cython.longlong
    min_active: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, evs: Sequence[PathChoice]) -> None:
        self.qp = qp
        cfg = self.config = qp.config
        self.stats = qp.stats
        self.events = qp.events
        self.evs = []
        #: EV value -> (its plane, its place in ``evs``) in ``a``, ``b``: every ACK asks
        #: for its EV's plane (:class:`.evmap.EvMap`; :meth:`find` for the EV itself)
        self.index = EvMap(len(evs))
        for choice in evs:
            if self.index.find(choice.ev):
                raise ValueError(f"EV {choice.ev:#x} given twice")
            self.index.put(choice.ev, choice.plane, len(self.evs), 0)
            self.evs.append(Ev(choice))
        planes = max(e.plane for e in self.evs) + 1
        self.plane_evs = [[] for _ in range(planes)]
        for e in self.evs:
            self.plane_evs[e.plane].append(e)
        self.good = [list(p) for p in self.plane_evs]
        self.good_count = len(self.evs)
        #: EVs ASSUMED_BAD. Each has exactly one live entry in ``probe_q`` (queued by
        #: ``mark_bad``, requeued by ``send_due_probes``), so while this is 0 there is no
        #: probe to time or send: the QP's timer asks this C integer, not the deque
        self.bad_count = 0
        self.min_active = cfg.min_active_for(len(self.evs))
        self.probe_q = deque()
        self._probe_timeout = cfg.probe_timeout_ps or cfg.ev_timeout_ps

    # ------------------------------------------------------------------ views
    def choices(self) -> list[PathChoice]:
        return [e.choice for e in self.evs]

    def ev_states(self) -> dict[int, EvState]:
        return {e.ev: e.state for e in self.evs}

    def ev_stats(self) -> list[dict[str, Any]]:
        """Per-EV counters (tables, not hot paths)."""
        return [{"ev": e.ev, "plane": e.plane, "t1": e.t1, "state": e.state, "sent": e.sent,
                 "acked": e.acked, "lost": e.lost, "trims": e.trims, "timeouts": e.timeouts,
                 "strikes": e.strikes}
                for e in self.evs]

    # ------------------------------------------------------------------ operator and NIC
    def deny(self, now: int, which: EvSelector, reason: str) -> list[int]:
        changed = []
        for e in self.select(which):
            if e.state != DENIED:
                self.set_state(now, e, DENIED, reason)
                changed.append(e.ev)
        return changed

    def allow(self, now: int, which: EvSelector, validate: bool, reason: str) -> list[int]:
        changed = []
        for e in self.select(which):
            if e.state == DENIED:
                if validate:
                    self.mark_bad(now, e, reason)
                else:
                    self.set_state(now, e, GOOD, reason)
                changed.append(e.ev)
        return changed

    def port_down(self, now: int, plane: int) -> list[int]:
        if self.qp.failed or not 0 <= plane < len(self.plane_evs):
            return []
        changed = []
        for e in self.plane_evs[plane]:
            if e.state == GOOD and self.mark_bad(now, e, "port down"):
                changed.append(e.ev)
            self.evict(e)
        return changed

    def find(self, ev: int) -> Ev | None:
        """The EV record of EV value ``ev``, or None."""
        index = self.index
        return self.evs[index.b] if index.find(ev) else None

    def select(self, which: EvSelector) -> list[Ev]:
        if callable(which):
            return [e for e in self.evs if which(e.choice)]
        out = []
        for ev in which:
            e = self.find(ev)
            if e is None:
                raise KeyError(f"EV {ev:#x} is not one of QP {self.qp.qpn}'s EVs")
            out.append(e)
        return out

    # ------------------------------------------------------------------ states
    @cython.ccall
    @cython.annotation_typing(True)
    def set_state(self, now: cython.longlong, e: Ev, new: EvState, reason: str) -> None:
        old = e.state
        if old == GOOD:
            self.good_count -= 1
        elif old == ASSUMED_BAD:
            self.bad_count -= 1
        if new == GOOD:
            self.good_count += 1
        elif new == ASSUMED_BAD:
            self.bad_count += 1
        e.state = new
        e.usable = new == GOOD
        e.epoch += 1
        plane = e.plane
        self.good[plane] = [x for x in self.plane_evs[plane] if x.usable]
        if new == ASSUMED_BAD:
            self.stats.paths_marked_bad += 1
        elif new == GOOD:
            e.strikes = 0  # a fresh start: old strikes say nothing about the path now
            if old == ASSUMED_BAD:
                self.stats.reintegrated += 1
        self.events.append(EvStateChanged(now, self.qp.qpn, e.ev, plane + 1, plane, e.t1, old,
                                          new, reason))

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def mark_bad(self, now: cython.longlong, e: Ev, reason: str) -> cython.bint:
        """ASSUMED_BAD and probed, unless the ``ev_min_active`` floor keeps a GOOD EV GOOD;
        True when the EV changed."""
        if e.state == GOOD and self.good_count <= self.min_active:
            self.stats.bad_refused_min_active += 1
            return False
        self.set_state(now, e, ASSUMED_BAD, reason)
        e.probe_ok = 0
        e.probes_out = None
        self.probe_q.append((now + self.config.probe_interval_ps, e, e.epoch))
        return True

    # ------------------------------------------------------------------ probes
    @cython.ccall
    @cython.annotation_typing(True)
    def next_probe(self) -> Any:  # int | None
        """When the next live probe is due (stale entries at the front are dropped)."""
        e: Ev
        epoch: cython.longlong
        pq = self.probe_q
        while pq:
            due, e, epoch = pq[0]
            if e.epoch == epoch and e.state == ASSUMED_BAD:
                return due
            pq.popleft()
        return None

    @cython.ccall
    @cython.annotation_typing(True)
    def send_due_probes(self, now: cython.longlong) -> None:
        """Probe every ASSUMED_BAD EV whose probe is due, and queue its next one."""
        e: Ev
        epoch: cython.longlong
        pq = self.probe_q
        interval: cython.longlong = self.config.probe_interval_ps
        while pq and pq[0][0] <= now:
            _, e, epoch = pq.popleft()
            if e.epoch != epoch or e.state != ASSUMED_BAD:
                continue
            self._send_probe(now, e)
            pq.append((now + interval, e, epoch))

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_probe(self, now: cython.longlong, e: Ev) -> None:
        outq = e.probes_out
        if outq is None:
            outq = e.probes_out = []
        limit: cython.longlong = now - self._probe_timeout
        while outq and outq[0][1] <= limit:
            del outq[0]  # never answered: the run of answered probes is broken
            e.probe_ok = 0
        e.probe_seq = (e.probe_seq + 1) & _PSN_MASK
        outq.append((e.probe_seq, now))
        qp = self.qp
        qp.control.append(Packet(
            _PROBE, qp.host, qp.peer, qp.peer_qpn, e.probe_seq, ev=e.ev, ts=now,
            da=e.address, plane=e.plane))
        self.stats.probes_sent += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def on_probe_reply(self, now: cython.longlong, pkt: Packet) -> None:
        e: Ev | None = self.find(pkt.ev)
        if e is None or e.state != ASSUMED_BAD:
            return
        outq = e.probes_out
        s: cython.longlong = pkt.psn
        if not outq or psn_diff(s, outq[0][0]) < 0 or psn_diff(s, outq[-1][0]) > 0:
            return  # a reply to a probe from before the EV's latest state change
        while outq:
            seq, _ = outq.pop(0)
            if seq == s:
                e.probe_ok += 1
                break
            e.probe_ok = 0  # an earlier probe on this FIFO path never came back
        self.stats.probes_answered += 1
        self.progress(now)
        if e.probe_ok >= self.config.probes_to_reintegrate:
            outq.clear()
            self.set_state(now, e, GOOD, f"{e.probe_ok} probes answered")
