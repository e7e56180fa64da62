"""Loss recovery of an MRC QP: ACK processing, loss evidence, retransmission and timers.

ACKs and NACKs
    A cumulative PSN and a 64-bit SACK window report what arrived; each newly acknowledged
    segment leaves the sender's ring (``Sender.take_acked``) and the pipe, its message may
    complete, and its delivery (age, CE mark) is the spray's feedback (:mod:`.spray`). The
    RTT an ACK echoes feeds the congestion control and the reorder windows
    (:mod:`.reorder`); a CE-marked ACK goes to the congestion control with the spray's bound
    of a slow round trip (:meth:`.cc.CongestionControl.on_marked_ack` decides whose it is).

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

from enum import IntEnum

from mrc.packet import FLAG_ECN_ECHO, FLAG_TRIM, NACK, PSN_MASK, Packet, psn_diff
from mrc.transport.base import GOOD
from mrc.transport.mrc.cc import CongestionControl
from mrc.transport.mrc.config import QpCore
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.receiver import Receiver
from mrc.transport.mrc.records import (
    ACKED,
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
from mrc.transport.mrc.watchdog import Watchdog


class Timer(IntEnum):
    """The QP's timers other than the watchdog, in the order ``handle_timer`` serves them
    (``Recovery._due`` says when each is due, ``Recovery._serve`` serves it)."""

    ACK = 0  # the receiver's delayed ACK
    GRACE = 1  # the loss grace of the oldest suspect
    RTO = 2  # the path timer of the oldest live transmission
    PROBE = 3  # the next probe of an ASSUMED_BAD EV


TIMERS = len(Timer)
#: no deadline (every deadline but the watchdog's fits in 63 bits; the watchdog's backoff
#: doubles, so it is compared apart, as a Python int)
NEVER = (1 << 63) - 1
_ACK, _GRACE, _RTO, _PROBE = Timer.ACK, Timer.GRACE, Timer.RTO, Timer.PROBE  # (C copies)


class Recovery:
    """Loss recovery and the timers of one QP (see the module docstring). It works in place
    on the sender's segments, pipe and queues, and on the path manager's EVs."""

    __slots__ = ("qp", "stats", "cc", "sender", "paths", "receiver", "watchdog", "rto",
                 "_grace", "_overdue", "_fixed_window", "_hold", "_margin", "_gain", "_strikes",
                 "_psn0", "_spray", "_gq", "_ev_index", "_mark_bad", "_suspects", "scopes",
                 "qscope", "_touched", "_touched_last")

    def __init__(self, qp: QpCore, paths: PathManager, sender: Sender, receiver: Receiver,
                 cc: CongestionControl, watchdog: Watchdog) -> None:
        self.qp = qp
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
        self.scopes: list[Reorder] = [Reorder(first, dq) for dq in sender.sent_on_plane]
        self.qscope = Reorder(first, sender.sent_on_qp)
        #: the plane scopes an ACK moved, linked (see ``_delivered``); None between ACKs
        self._touched: Reorder | None = None
        self._touched_last: Reorder | None = None

    # ================================================================== ACK / NACK
    def on_ack(self, now: int, pkt: Packet) -> None:
        stats = self.stats
        nack = pkt.kind == NACK
        if nack:
            stats.nacks_received += 1
        else:
            stats.acks_received += 1
        snd = self.sender
        una = snd.una
        psn0 = self._psn0
        cum = una + psn_diff(pkt.psn, (psn0 + una) & PSN_MASK)
        if cum > snd.snd_nxt:
            stats.bad_packets += 1
            return
        newly = snd.take_acked(cum, pkt.sack, pkt.sack_base)
        una = snd.una
        una_psn = (psn0 + una) & PSN_MASK
        ts = pkt.ts
        rtt = now - ts if not nack and 0 < ts <= now else None
        if rtt is not None and self._overdue and self._fixed_window is None:
            # the reorder windows learn from ACKs only: a trim NACK skips the queues
            index = self._ev_index
            if index.find(pkt.ev):
                sc = self.scopes[index.a]
                sc.sample(now, rtt, self._hold)
            self.qscope.sample(now, rtt, self._hold)
        acked_bytes = 0
        progress = False
        if newly:
            progress = True
            acked_bytes = self._delivered(now, pkt, newly, una, una_psn, nack)
        if nack:
            if pkt.flags & FLAG_TRIM:
                progress = self._on_trim(now, pkt, una, una_psn) or progress
        elif pkt.flags & FLAG_ECN_ECHO:
            stats.ecn_echoes += 1
            self.cc.on_marked_ack(now, acked_bytes, rtt, pkt.ev, self._spray.slow_after())
        else:
            self.cc.on_ack(now, acked_bytes, rtt, False, pkt.ev)
        if progress:
            self.watchdog.progress(now)

    def _delivered(self, now: int, pkt: Packet, newly: list[Seg], una: int, una_psn: int,
                   nack: bool) -> int:
        """The newly acknowledged segments leave the pipe, complete their messages, feed
        the spray (unless ``pkt`` is a NACK) and the loss evidence; returns their bytes."""
        snd = self.sender
        stats = self.stats
        ts = pkt.ts
        ecn = bool(pkt.flags & FLAG_ECN_ECHO)
        echo_seq = una + psn_diff(pkt.echo_psn, una_psn)
        scan: list[Seg] = []
        spray = None if nack else self._spray
        overdue = self._overdue
        acked_bytes = 0
        for seg in newly:
            state = seg.state
            seg.state = ACKED
            e = seg.ev
            # loss evidence needs to know *which* transmission arrived: certain for a
            # packet sent once, or for the very one this ACK echoes
            certain = seg.sends == 1 or (seg.seq == echo_seq and seg.sent_ps == ts)
            if certain:
                e.strikes = 0  # the EV delivered: its path works
                if overdue:
                    self._newest(now, seg.sent_ps, self.scopes[e.plane])
            if state != LOST:
                snd.pipe -= seg.length
                e.acked += 1
                if state == INFLIGHT and certain:
                    scan.append(seg)
                if spray is not None:
                    spray.feedback(now, e, now - seg.sent_ps if certain else -1,
                                   ecn and seg.seq == echo_seq)
            else:
                stats.spurious_losses += 1
            acked_bytes += seg.length
            msg = seg.msg
            msg.unacked -= 1
            if msg.segmented and not msg.unacked:
                snd.completed(now, msg)
        for seg in scan:
            self._infer_losses(now, seg)
        if overdue:
            # the plane scopes whose newest moved, in the order touched (linked through
            # ``Reorder.next_touched``, flagged by ``Reorder.touched``), then the QP's
            touched = self._touched
            self._touched = self._touched_last = None
            while touched is not None:
                sc = touched
                touched = sc.next_touched
                sc.next_touched = None
                sc.touched = False
                self._scan_overdue(now, sc)
            self._scan_overdue(now, self.qscope)
        return acked_bytes

    def _newest(self, now: int, sent: int, sc: Reorder) -> None:
        """A transmission sent at ``sent`` on ``sc``'s plane certainly arrived: its age is a
        delay sample of the plane's and the QP's scopes (every packet an ACK reports, not
        only the one it echoes: slow paths are rarely the echoed one), and it may be the
        newest send time either has seen delivered."""
        qscope = self.qscope
        if self._fixed_window is None:
            age = now - sent
            if age > sc.cur_max:
                sc.cur_max = age
            if age > qscope.cur_max:
                qscope.cur_max = age
        if sent > sc.newest:
            if not sc.touched:
                sc.touched = True
                last = self._touched_last
                if last is None:
                    self._touched = sc
                else:
                    last.next_touched = sc
                self._touched_last = sc
            sc.newest = sent
        if sent > qscope.newest:
            qscope.newest = sent

    def _on_trim(self, now: int, pkt: Packet, una: int, una_psn: int) -> bool:
        """NACK(trim): resend that transmission at once; congestion, never loss."""
        snd = self.sender
        seq = una + psn_diff(pkt.echo_psn, una_psn)
        if not una <= seq < snd.snd_nxt:
            return False  # not outstanding (acknowledged, or never sent)
        out = snd.outstanding
        seg = out[seq & (len(out) - 1)]
        if seg is None or seg.state == LOST or seg.state == ACKED or seg.sent_ps != pkt.ts:
            return False  # already acked, already queued, or an older transmission's NACK
        seg.state = LOST
        snd.pipe -= seg.length
        snd.retx.appendleft(seg)
        snd.sendable = True
        e = seg.ev
        e.trims += 1
        self.stats.trims += 1
        self.cc.on_trim(now, e.ev)
        return True

    # ================================================================== loss evidence
    def _infer_losses(self, now: int, acked: Seg) -> None:
        """``acked`` came back: every live packet sent before it on its EV is lost (FIFO)."""
        fifo = acked.ev  # (an EV is its own FIFO)
        tx = acked.tx
        t = fifo.head
        # transmissions up to and including ``acked``'s leave the FIFO
        while t is not None and t.tx <= tx:
            fifo.pop()
            seg = t.seg
            if seg is acked:
                break
            if seg.state == INFLIGHT and seg.tx == t.tx:
                if self._grace:
                    seg.state = SUSPECT
                    self._suspect(now, t, False)
                else:
                    self._fifo_lost(now, seg)
            t = fifo.head

    def _suspect(self, now: int, t: Tx, overdue: bool) -> None:
        """``t`` waits out the grace (its segment was just made SUSPECT on it)."""
        t.due = now + self._grace
        t.overdue = overdue
        self._suspects.push(t)

    def _scan_overdue(self, now: int, sc: Reorder) -> None:
        """Walk the scope's transmissions in send order up to the newest delivered send
        time minus the reorder window: every one still in flight there is overdue.
        Amortised O(1) per packet: each entry is looked at once, then dropped."""
        window = sc.window if self._fixed_window else sc.refresh(
            self.rto, self._margin, self._gain)
        bound = sc.newest - window
        q = sc.dq
        t = q.head
        while t is not None and t.sent_ps < bound:
            q.pop()
            seg = t.seg
            if seg.tx == t.tx and seg.state == INFLIGHT:
                if self._grace:
                    seg.state = SUSPECT  # a trim NACK may still be on its way back
                    self._suspect(now, t, True)
                else:
                    self._overdue_lost(now, seg)
            t = q.head

    def _overdue_bound(self, plane: int) -> int:
        """Transmissions sent before this time are overdue on ``plane``."""
        sc = self.scopes[plane]
        q = self.qscope
        a = sc.newest - sc.window
        b = q.newest - q.window
        return a if a > b else b

    def _overdue_lost(self, now: int, seg: Seg) -> None:
        """An overdue packet's grace ran out: it is lost and its EV gets a strike. The EV
        goes ASSUMED_BAD when all it carries is overdue (it has delivered nothing sent
        since) or after ``overdue_strikes`` strikes without a delivery in between."""
        self._lose(seg)
        stats = self.stats
        stats.losses += 1
        stats.overdue_losses += 1
        e = seg.ev
        e.strikes += 1
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD and (e.strikes >= self._strikes
                                or e.last_sent < self._overdue_bound(e.plane)):
            self._mark_bad(now, e, f"overdue psn={self._psn(seg)} strikes={e.strikes}")
            self.evict(e)

    # ================================================================== retransmission
    def evict(self, e: Ev) -> None:
        """Resend elsewhere everything still in flight on ``e`` (its path is presumed dead)."""
        self.stats.evicted += self._lose_fifo(e)

    def _lose_fifo(self, e: Ev) -> int:
        """Declare lost every transmission still in flight on ``e`` (its latest, not yet
        acknowledged or lost); empties the FIFO and returns how many."""
        n = 0
        t = e.head
        while t is not None:
            e.pop()
            seg = t.seg
            if seg.tx == t.tx and (seg.state == INFLIGHT or seg.state == SUSPECT):
                self._lose(seg)
                n += 1
            t = e.head
        return n

    def _lose(self, seg: Seg) -> None:
        seg.state = LOST
        snd = self.sender
        snd.pipe -= seg.length
        snd.retx.append(seg)
        snd.sendable = not self.qp.failed
        seg.ev.lost += 1

    def _fifo_lost(self, now: int, seg: Seg) -> None:
        """Same-EV (FIFO) evidence made ``seg`` lost: resend it; its EV goes ASSUMED_BAD."""
        self._lose(seg)
        self.stats.losses += 1
        e = seg.ev
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"loss psn={self._psn(seg)}")

    def _psn(self, seg: Seg) -> int:
        return (self._psn0 + seg.seq) & PSN_MASK

    # ================================================================== timers
    def next_timer(self) -> int | None:
        """The earliest deadline of the timer table and the watchdog, or None."""
        if self.qp.failed:
            return None
        best = NEVER
        for timer in range(TIMERS):
            at = self._due(timer)
            if at < best:
                best = at
        watchdog = self.watchdog.at
        if best == NEVER:
            return watchdog
        if watchdog is not None and watchdog < best:
            return watchdog
        return best

    def handle_timer(self, now: int) -> None:
        """Serve every timer of the table that is due, in the table's order, then the
        watchdog (consecutive timeouts with no progress anywhere)."""
        if self.qp.failed:
            return
        for timer in range(TIMERS):
            self._serve(timer, now)
        watchdog = self.watchdog
        if watchdog.at is not None and watchdog.at <= now:
            watchdog.expire(now)

    def _due(self, timer: int) -> int:
        """When ``timer`` (a :class:`Timer`) is due, or NEVER (dropping stale entries)."""
        if timer == _ACK:
            due = self.receiver.ack_due
            return NEVER if due is None else due
        if timer == _PROBE:
            if self.paths.bad_count:  # (else no probe is live: see PathManager.bad_count)
                due = self.paths.next_probe()
                if due is not None:
                    return due
            return NEVER
        if timer == _GRACE:
            q = self._suspects
            t = q.head
            while t is not None:
                seg = t.seg
                if seg.tx == t.tx and seg.state == SUSPECT:
                    return t.due
                q.pop()
                t = q.head
            return NEVER
        q = self._gq
        t = q.head
        while t is not None:
            seg = t.seg
            if seg.tx == t.tx and (seg.state == INFLIGHT or seg.state == SUSPECT):
                return t.sent_ps + self.rto
            q.pop()
            t = q.head
        return NEVER

    def _serve(self, timer: int, now: int) -> None:
        """Whatever of ``timer`` (a :class:`Timer`) is due at ``now``."""
        if timer == _ACK:
            receiver = self.receiver
            if receiver.ack_due is not None and receiver.ack_due <= now:
                receiver.ack_timeout(now)
        elif timer == _GRACE:
            # suspected losses whose grace ran out without a NACK
            q = self._suspects
            t = q.head
            while t is not None and t.due <= now:
                q.pop()
                seg = t.seg
                if seg.tx == t.tx and seg.state == SUSPECT:
                    if t.overdue:
                        self._overdue_lost(now, seg)
                    else:
                        self._fifo_lost(now, seg)
                t = q.head
        elif timer == _RTO:
            # the oldest live transmission bounds every EV's deadline
            q = self._gq
            limit = now - self.rto
            t = q.head
            while t is not None:
                seg = t.seg
                live = seg.tx == t.tx and (seg.state == INFLIGHT or seg.state == SUSPECT)
                if live and t.sent_ps > limit:
                    break
                q.pop()
                if live:
                    self._ev_timeout(now, seg)
                t = q.head
        elif self.paths.bad_count:  # probes of ASSUMED_BAD EVs
            self.paths.send_due_probes(now)

    def _ev_timeout(self, now: int, seg: Seg) -> None:
        """``seg``'s transmission went unanswered for an RTO: its EV is presumed broken and
        everything still in flight on it is resent elsewhere."""
        e = seg.ev
        self.stats.timeouts += 1
        e.timeouts += 1
        lost = 0
        if seg.state == INFLIGHT or seg.state == SUSPECT:
            self._lose(seg)
            lost += 1
        lost += self._lose_fifo(e)
        self.stats.packets_timed_out += lost
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"timeout psn={self._psn(seg)}")
