"""Loss evidence, retransmission and the timers of an MRC QP: the part of loss recovery
that ACKs feed (:mod:`.recovery` processes the ACKs, in a subclass of this room's class).

Loss evidence (spraying makes global PSN gaps normal)
    *Same EV (FIFO)*: paths are FIFO, so a packet is lost when a packet sent *after* it on
    the same EV has been acknowledged.

    *Other EVs (overdue)*, in the spirit of RACK (RFC 8985) and UEC's out-of-order loss
    detection: a silently dropped packet (a dead T1 or link) leaves no later packet on its
    EV to prove the loss, so time stands in for order. A packet is *overdue* when a packet
    sent more than the reorder window ``W`` after it, on any other EV of the same plane or
    of the QP, has been acknowledged while it has not (how ``W`` is learnt: :mod:`.reorder`).
    Each scope keeps its transmissions in send order; when its newest acknowledged send
    time advances, the front is popped up to that time minus ``W``: amortised O(1) per
    packet. ``overdue_loss=False`` turns it off.

    Either evidence only makes the packet *suspected* for ``loss_grace_ps``, because the
    proof and a trim NACK may come back on different reverse paths; a NACK in that time
    turns it into a trim. A trim is congestion: retransmit at once, tell the congestion
    control, the EV stays GOOD.

What evidence does to an EV
    A FIFO loss, or the EV's oldest packet being unacknowledged for the per-EV path timer
    (``ev_timeout_ps``, mrc-lab's own model), moves the EV to ASSUMED_BAD (:mod:`.paths`),
    unless the ``ev_min_active`` floor forbids it. An overdue loss gives its EV a *strike*
    (cleared whenever the EV delivers a packet); the EV goes ASSUMED_BAD when all it
    carries is overdue (its newest transmission is) or after ``overdue_strikes`` strikes,
    and what it still has in flight is resent at once. So a dead T1 is found ``W`` + one
    RTT + the grace after the fault, not after the RTO. Lost packets wait in the sender's
    retransmission queue for a GOOD EV.

Timers
    The QP's deadline (``next_timer``) is the earliest of the :class:`Timer` table's (in
    the order ``handle_timer`` serves them) and the watchdog's (:mod:`.watchdog`: the retry
    rule and the QP error; every ACK that acknowledges something, trim NACK or answered
    probe is progress for it). Every queue here is in time order and lazily purged: an entry
    whose segment was resent (``tx`` moved on) or resolved is dropped when it reaches the
    front. The entries are the transmissions themselves (:class:`.records.Tx`, a link per
    queue), so queueing and popping allocate nothing (:mod:`.records` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

from mrc.packet import PSN_MASK
from mrc.transport.base import GOOD
from mrc.transport.mrc.cc import CongestionControl
from mrc.transport.mrc.config import MrcStats, QpCore
from mrc.transport.mrc.evmap import EvMap
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.receiver import Receiver
from mrc.transport.mrc.records import (
    INFLIGHT,
    LINK_SUSPECT,
    LOST,
    SUSPECT,
    Ev,
    Seg,
    Tx,
    TxQueue,
)
from mrc.transport.mrc.reorder import Reorder
from mrc.transport.mrc.sender import Sender
from mrc.transport.mrc.spray import Spray
from mrc.transport.mrc.watchdog import Watchdog
from mrc.transport.qp_base import QpBase

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# typed copies (compiled, C integers)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)
_INFLIGHT = cython.declare(cython.longlong, INFLIGHT)
_LOST = cython.declare(cython.longlong, LOST)
_SUSPECT = cython.declare(cython.longlong, SUSPECT)


class Timer(IntEnum):
    """The QP's timers other than the watchdog, in the order ``handle_timer`` serves them:
    ``LossRecovery._due_<name>`` says when each is due, ``LossRecovery._serve_<name>``
    serves it (``tests/test_mrc_qp.py`` holds the table to these names)."""

    ACK = 0  # the receiver's delayed ACK
    GRACE = 1  # the loss grace of the oldest suspect
    RTO = 2  # the path timer of the oldest live transmission
    PROBE = 3  # the next probe of an ASSUMED_BAD EV


#: no deadline (every deadline but the watchdog's fits in 63 bits; the watchdog's backoff
#: doubles, so it is compared apart, as a Python int)
NEVER = cython.declare(cython.longlong, (1 << 63) - 1)


@cython.cclass
class LossRecovery:
    """Loss evidence, retransmission and the timers of one QP (see the module docstring): the
    state of its loss recovery, which :class:`.recovery.Recovery` feeds with ACKs. It works in
    place on the sender's segments, pipe and queues, and on the path manager's EVs."""

    # What an ACK (on_ack) and the timer query after it (next_timer) read first, in the C
    # struct's first cache lines (the watchdog too: an ACK that advances resets it);
    # settings after.
    _psn0: cython.longlong
    _overdue: cython.bint
    _hold: cython.longlong
    _fixed_window: int | None
    scopes: list[Reorder]
    qscope: Reorder
    _touched: Reorder | None
    _touched_last: Reorder | None
    _spray: Spray
    stats: MrcStats
    sender: Sender
    cc: CongestionControl
    _ev_index: EvMap
    qp: QpBase  # the QP (a QpCore too)
    receiver: Receiver
    _gq: TxQueue
    _suspects: TxQueue
    rto: cython.longlong
    paths: PathManager
    watchdog: Watchdog
    _margin: cython.double
    _gain: cython.double
    _grace: cython.longlong
    _strikes: cython.longlong
    _mark_bad: Callable[[int, Ev, str], bool]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, paths: PathManager, sender: Sender, receiver: Receiver,
                 cc: CongestionControl, watchdog: Watchdog) -> None:
        self.qp = qp  # type: ignore[assignment]
        cfg = qp.config
        self.stats = qp.stats
        self.cc = cc
        self.sender = sender
        self.paths = paths
        self.receiver = receiver
        self.watchdog = watchdog
        self.rto = cfg.ev_timeout_ps  # the per-EV path timer (own model)
        self._grace = cfg.loss_grace_ps
        self._overdue = cfg.overdue_loss
        self._fixed_window = cfg.reorder_window_ps
        self._hold = cfg.reorder_hold_rtts
        self._margin = cfg.reorder_margin_rtts
        self._gain = cfg.reorder_spread_gain
        self._strikes = cfg.overdue_strikes
        # the other rooms' state this one works on, referenced directly
        self._psn0 = sender.psn0
        self._spray = sender.spray  # per-EV evidence for the EV choice goes there
        self._gq = sender.sent  # every transmission in send order (``Tx.next_sent``): RTO
        self._ev_index = paths.index  # the plane of an ACK's EV
        self._mark_bad = paths.mark_bad

        #: suspected losses waiting out the grace, in the order suspected (deadline order):
        #: transmissions linked by ``Tx.next_suspect``, each with its ``due`` and whether
        #: the evidence was ``overdue`` (cross-EV) or the same EV's FIFO
        self._suspects = TxQueue(LINK_SUSPECT)
        # overdue-loss scopes: one per plane, and one for the whole QP
        first = cfg.reorder_window_ps or self.rto
        self.scopes = [Reorder(first, dq) for dq in sender.sent_on_plane]
        self.qscope = Reorder(first, sender.sent_on_qp)
        #: the plane scopes an ACK moved, linked (see ``_delivered``); None between ACKs
        self._touched = None
        self._touched_last = None

    # ================================================================== loss evidence
    @cython.cfunc
    @cython.annotation_typing(True)
    def _infer_losses(self, now: cython.longlong, acked: Seg) -> None:
        """``acked`` came back: every live packet sent before it on its EV is lost (FIFO)."""
        seg: Seg
        fifo: TxQueue = acked.ev  # (an EV is its own FIFO)
        tx: cython.longlong = acked.tx
        t: Tx | None = fifo.head
        # transmissions up to and including ``acked``'s leave the FIFO
        while t is not None and t.tx <= tx:
            fifo.pop()
            seg = t.seg
            if seg is acked:
                break
            if seg.state == _INFLIGHT and seg.tx == t.tx:
                if self._grace:
                    seg.state = _SUSPECT
                    self._suspect(now, t, False)
                else:
                    self._fifo_lost(now, seg)
            t = fifo.head

    @cython.cfunc
    @cython.annotation_typing(True)
    def _suspect(self, now: cython.longlong, t: Tx, overdue: cython.bint) -> None:
        """``t`` waits out the grace (its segment was just made SUSPECT on it)."""
        t.due = now + self._grace
        t.overdue = overdue
        self._suspects.push(t)

    @cython.cfunc
    @cython.annotation_typing(True)
    def _scan_overdue(self, now: cython.longlong, sc: Reorder) -> None:
        """Walk the scope's transmissions in send order up to the newest delivered send
        time minus the reorder window: every one still in flight there is overdue.
        Amortised O(1) per packet: each entry is looked at once, then dropped."""
        seg: Seg
        window: cython.longlong = sc.window if self._fixed_window else sc.refresh(
            self.rto, self._margin, self._gain)
        bound: cython.longlong = sc.newest - window
        q: TxQueue = sc.dq
        t: Tx | None = q.head
        while t is not None and t.sent_ps < bound:
            q.pop()
            seg = t.seg
            if seg.tx == t.tx and seg.state == _INFLIGHT:
                if self._grace:
                    seg.state = _SUSPECT  # a trim NACK may still be on its way back
                    self._suspect(now, t, True)
                else:
                    self._overdue_lost(now, seg)
            t = q.head

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _overdue_bound(self, plane: cython.longlong) -> cython.longlong:
        """Transmissions sent before this time are overdue on ``plane``."""
        sc: Reorder = self.scopes[plane]
        q: Reorder = self.qscope
        a: cython.longlong = sc.newest - sc.window
        b: cython.longlong = q.newest - q.window
        return a if a > b else b

    @cython.cfunc
    @cython.annotation_typing(True)
    def _overdue_lost(self, now: cython.longlong, seg: Seg) -> None:
        """An overdue packet's grace ran out: it is lost and its EV gets a strike. The EV
        goes ASSUMED_BAD when all it carries is overdue (it has delivered nothing sent
        since) or after ``overdue_strikes`` strikes without a delivery in between."""
        self._lose(seg)
        stats: MrcStats = self.stats
        stats.losses += 1
        stats.overdue_losses += 1
        e: Ev = seg.ev
        e.strikes += 1
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD and (e.strikes >= self._strikes
                                or e.last_sent < self._overdue_bound(e.plane)):
            self._mark_bad(now, e, f"overdue psn={self._psn(seg)} strikes={e.strikes}")
            self.evict(e)

    # ================================================================== retransmission
    @cython.ccall
    @cython.annotation_typing(True)
    def evict(self, e: Ev) -> None:
        """Resend elsewhere everything still in flight on ``e`` (its path is presumed dead)."""
        self.stats.evicted += self._lose_fifo(e)

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _lose_fifo(self, e: Ev) -> cython.longlong:
        """Declare lost every transmission still in flight on ``e`` (its latest, not yet
        acknowledged or lost); empties the FIFO and returns how many."""
        seg: Seg
        n: cython.longlong = 0
        t: Tx | None = e.head
        while t is not None:
            e.pop()
            seg = t.seg
            if seg.tx == t.tx and (seg.state == _INFLIGHT or seg.state == _SUSPECT):
                self._lose(seg)
                n += 1
            t = e.head
        return n

    @cython.cfunc
    @cython.annotation_typing(True)
    def _lose(self, seg: Seg) -> None:
        seg.state = _LOST
        snd: Sender = self.sender
        snd.pipe -= seg.length
        snd.retx.append(seg)
        snd.sendable = not self.qp.failed
        seg.ev.lost += 1

    @cython.cfunc
    @cython.annotation_typing(True)
    def _fifo_lost(self, now: cython.longlong, seg: Seg) -> None:
        """Same-EV (FIFO) evidence made ``seg`` lost: resend it; its EV goes ASSUMED_BAD."""
        self._lose(seg)
        self.stats.losses += 1
        e: Ev = seg.ev
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"loss psn={self._psn(seg)}")

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _psn(self, seg: Seg) -> cython.longlong:
        return (self._psn0 + seg.seq) & _PSN_MASK

    # ================================================================== timers
    # The table (:class:`Timer`): one ``_due_*`` (when it is due, or NEVER, dropping stale
    # entries) and one ``_serve_*`` (whatever of it is due at ``now``) per timer, each small
    # and final, so the compiled build inlines them into the two table walks below.
    @cython.cfunc
    @cython.annotation_typing(True)
    def next_timer(self) -> Any:  # int | None
        """The earliest deadline of the timer table and the watchdog, or None."""
        if self.qp.failed:
            return None
        best: cython.longlong = self._due_ack()  # (the table's order)
        at: cython.longlong = self._due_grace()
        if at < best:
            best = at
        at = self._due_rto()
        if at < best:
            best = at
        at = self._due_probe()
        if at < best:
            best = at
        watchdog = self.watchdog.at
        if best == NEVER:
            return watchdog
        if watchdog is not None and watchdog < best:
            return watchdog
        return best

    @cython.cfunc
    @cython.annotation_typing(True)
    def handle_timer(self, now: cython.longlong) -> None:
        """Serve every timer of the table that is due, in the table's order, then the
        watchdog (consecutive timeouts with no progress anywhere)."""
        if self.qp.failed:
            return
        self._serve_ack(now)
        self._serve_grace(now)
        self._serve_rto(now)
        self._serve_probe(now)
        watchdog: Watchdog = self.watchdog
        if watchdog.at is not None and watchdog.at <= now:
            watchdog.expire(now)

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _due_ack(self) -> cython.longlong:
        """Timer.ACK: the receiver's delayed ACK."""
        due = self.receiver.ack_due
        return NEVER if due is None else due

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _due_grace(self) -> cython.longlong:
        """Timer.GRACE: the loss grace of the oldest live suspect."""
        q: TxQueue = self._suspects
        t: Tx | None = q.head
        seg: Seg
        while t is not None:
            seg = t.seg
            if seg.tx == t.tx and seg.state == _SUSPECT:
                return t.due
            q.pop()
            t = q.head
        return NEVER

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _due_rto(self) -> cython.longlong:
        """Timer.RTO: the path timer of the oldest live transmission."""
        q: TxQueue = self._gq
        t: Tx | None = q.head
        seg: Seg
        while t is not None:
            seg = t.seg
            if seg.tx == t.tx and (seg.state == _INFLIGHT or seg.state == _SUSPECT):
                return t.sent_ps + self.rto
            q.pop()
            t = q.head
        return NEVER

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _due_probe(self) -> cython.longlong:
        """Timer.PROBE: the next probe of an ASSUMED_BAD EV."""
        if self.paths.bad_count:  # (else no probe is live: see PathManager.bad_count)
            due = self.paths.next_probe()
            if due is not None:
                return due
        return NEVER

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    def _serve_ack(self, now: cython.longlong) -> None:
        receiver: Receiver = self.receiver
        if receiver.ack_due is not None and receiver.ack_due <= now:
            receiver.ack_timeout(now)

    @cython.final
    @cython.cfunc
    @cython.annotation_typing(True)
    def _serve_grace(self, now: cython.longlong) -> None:
        """Suspected losses whose grace ran out without a NACK."""
        q: TxQueue = self._suspects
        t: Tx | None = q.head
        seg: Seg
        while t is not None and t.due <= now:
            q.pop()
            seg = t.seg
            if seg.tx == t.tx and seg.state == _SUSPECT:
                if t.overdue:
                    self._overdue_lost(now, seg)
                else:
                    self._fifo_lost(now, seg)
            t = q.head

    @cython.final
    @cython.cfunc
    @cython.annotation_typing(True)
    def _serve_rto(self, now: cython.longlong) -> None:
        """The oldest live transmission bounds every EV's deadline."""
        q: TxQueue = self._gq
        limit: cython.longlong = now - self.rto
        t: Tx | None = q.head
        seg: Seg
        while t is not None:
            seg = t.seg
            live: cython.bint = seg.tx == t.tx and (seg.state == _INFLIGHT or seg.state == _SUSPECT)
            if live and t.sent_ps > limit:
                break
            q.pop()
            if live:
                self._ev_timeout(now, seg)
            t = q.head

    @cython.final
    @cython.inline
    @cython.cfunc
    @cython.annotation_typing(True)
    def _serve_probe(self, now: cython.longlong) -> None:
        if self.paths.bad_count:  # probes of ASSUMED_BAD EVs
            self.paths.send_due_probes(now)

    @cython.cfunc
    @cython.annotation_typing(True)
    def _ev_timeout(self, now: cython.longlong, seg: Seg) -> None:
        """``seg``'s transmission went unanswered for an RTO: its EV is presumed broken and
        everything still in flight on it is resent elsewhere."""
        e: Ev = seg.ev
        self.stats.timeouts += 1
        e.timeouts += 1
        lost: cython.longlong = 0
        if seg.state == _INFLIGHT or seg.state == _SUSPECT:
            self._lose(seg)
            lost += 1
        lost += self._lose_fifo(e)
        self.stats.packets_timed_out += lost
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"timeout psn={self._psn(seg)}")
