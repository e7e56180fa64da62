"""Loss recovery of an MRC QP: ACK processing, loss evidence, retransmission, timers, QP error.

ACKs and NACKs
    A cumulative PSN and a 64-bit SACK window report what arrived; each newly acknowledged
    segment leaves the sender's ``outstanding`` ring, its bytes leave the pipe, its message
    may complete, and its delivery (age, CE mark) goes to the spray policy, which recycles
    the EV or steers around it (:mod:`.spray`). The RTT an ACK echoes feeds the congestion
    control and the reorder windows (:mod:`.reorder`); a CE mark on a packet that came back
    slower than the QP's usual is the spray's business, not the window's.

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
    (``ev_timeout_ps``, mrc-lab's own model, 65.5 us by default), moves the EV to
    ASSUMED_BAD (:mod:`.paths`), unless the ``ev_min_active`` floor forbids it. An overdue loss
    gives its EV a *strike* (cleared whenever the EV delivers a packet); the EV goes
    ASSUMED_BAD when all it carries is overdue (its newest transmission is) or after
    ``overdue_strikes`` strikes, and what it still has in flight is resent at once. So a dead
    T1 is found ``W`` + one RTT + the grace after the fault (~23 us on lab-8plane), not after
    the RTO. Lost packets wait in the sender's retransmission queue for a GOOD EV.

QP error
    A watchdog runs the published retry rule on the local ACK timeout T (``timeout``):
    the first expiry comes T after the last progress on any EV (new data acknowledged, a
    trim NACK or an answered probe all prove a live path); ``retry_linear_cnt`` retries
    wait T each, then ``retry_exp_cnt`` retries wait 2T, 4T, ...; the next expiry is the
    error, at ``last progress + T (1 + linear) + T (2^(exp + 1) - 2)``
    (:func:`.config.error_delay_ps`); ``retry_exp_cnt = 25`` never errors. While any path
    answers, the QP never errors; with every EV ASSUMED_BAD it keeps probing and resumes
    when one answers.

Timers
    The QP has one deadline (``next_timer``), the earliest of the delayed ACK (receiver),
    the path timer of the oldest live transmission, the grace of the oldest suspect, the next probe
    (path manager) and the watchdog. Recovery keeps it because all but two of those are its
    own; ``handle_timer`` serves them in that order. Every queue here is in time order and
    lazily purged: an entry whose segment was resent (``tx`` moved on) or resolved is
    dropped when it reaches the front. The entries are the transmissions themselves (one
    :class:`.records.Tx` per packet sent, with a link per queue: each EV's FIFO, the RTO
    queue, the overdue scopes' queues and the suspects), so queueing and popping allocate
    nothing (:mod:`.records` says why).
"""

from __future__ import annotations

from mrc.packet import FLAG_ECN_ECHO, FLAG_TRIM, NACK, PSN_MASK, SACK_BITS, Packet, psn_diff
from mrc.transport.base import ASSUMED_BAD, DENIED, EVENT_QP_ERROR, GOOD, TransportEvent
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


class Recovery:
    """Loss recovery and the timers of one QP (see the module docstring). It works in place
    on the sender's segments, pipe and queues, and on the path manager's EVs."""

    __slots__ = ("qp", "config", "stats", "events", "qpn", "cc", "sender", "paths",
                 "receiver", "rto", "_grace", "_overdue", "_fixed_window", "_hold",
                 "_margin", "_gain", "_strikes", "_psn0", "_spray", "_gq", "_ev_index", "_mark_bad",
                 "_snd_una", "_sacked", "_suspects", "scopes", "qscope",
                 "watchdog_at", "_retries", "_last_progress", "_timeout", "_linear",
                 "_error_after")

    def __init__(self, qp: QpCore, paths: PathManager, sender: Sender, receiver: Receiver,
                 cc: CongestionControl) -> None:
        self.qp = qp
        cfg = self.config = qp.config
        self.stats = qp.stats
        self.events = qp.events
        self.qpn = qp.qpn
        self.cc = cc
        self.sender = sender
        self.paths = paths
        self.receiver = receiver
        self.rto = cfg.ev_timeout_ps  # the per-EV path timer (own model)
        self._timeout = cfg.timeout_ps  # the published local ACK timeout T (retries)
        self._linear = cfg.retry_linear_cnt
        self._error_after = cfg.retry_linear_cnt + cfg.retry_exp_cnt  # retries, then error
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

        self._snd_una = 0  # every seq below this is acknowledged
        self._sacked = 0  # bit i: seq _snd_una + i known acknowledged
        #: suspected losses waiting out the grace, in the order suspected (deadline order):
        #: transmissions linked by ``Tx.next_suspect``, each with its ``due`` and whether
        #: the evidence was ``overdue`` (cross-EV) or the same EV's FIFO
        self._suspects = TxQueue(LINK_SUSPECT)
        # overdue-loss scopes: one per plane, and one for the whole QP
        first = cfg.reorder_window_ps or self.rto
        self.scopes: list[Reorder] = [Reorder(first, dq) for dq in sender.sent_on_plane]
        self.qscope = Reorder(first, sender.sent_on_qp)
        self.watchdog_at: int | None = None
        self._retries = 0
        self._last_progress = 0

    # ================================================================== ACK / NACK
    def on_ack(self, now: int, pkt: Packet) -> None:
        stats = self.stats
        nack = pkt.kind == NACK
        if nack:
            stats.nacks_received += 1
        else:
            stats.acks_received += 1
        snd = self.sender
        una = self._snd_una
        psn0 = self._psn0
        una_psn = (psn0 + una) & PSN_MASK
        cum = una + psn_diff(pkt.psn, una_psn)
        nxt = snd.snd_nxt
        if cum > nxt:
            stats.bad_packets += 1
            return
        # the newly acknowledged segments leave the sender's ring (see Sender.outstanding:
        # every number from una to nxt has a slot of its own)
        out = snd.outstanding
        mask = len(out) - 1
        newly: list[Seg] = []
        if cum > una:
            for seq in range(una, cum):
                seg = out[seq & mask]
                if seg is not None:
                    out[seq & mask] = None
                    snd.outstanding_count -= 1
                    newly.append(seg)
            self._sacked >>= cum - una
            una = self._snd_una = snd.una = cum
            una_psn = (psn0 + una) & PSN_MASK
        sack = pkt.sack
        if sack and nxt > una:
            rel = psn_diff(pkt.sack_base, una_psn)
            if -SACK_BITS < rel < nxt - una:
                window = sack << rel if rel >= 0 else sack >> -rel
                span = nxt - una  # a Python int (compiled too): the mask may exceed 64 bits
                new = window & ~self._sacked & ((1 << span) - 1)
            else:
                new = 0  # entirely acknowledged already, or bogus
            if new:
                self._sacked |= new
                while new:
                    low = new & -new
                    new ^= low
                    seq = una + low.bit_length() - 1
                    seg = out[seq & mask]
                    if seg is not None:
                        out[seq & mask] = None
                        snd.outstanding_count -= 1
                        newly.append(seg)
        acked_bytes = 0
        progress = False
        ts = pkt.ts
        rtt = now - ts if not nack and 0 < ts <= now else None
        overdue = self._overdue
        learn = overdue and self._fixed_window is None
        if rtt is not None and learn:
            # the reorder windows learn from ACKs only: a trim NACK skips the queues
            index = self._ev_index
            hold = self._hold
            if index.find(pkt.ev):
                sc = self.scopes[index.a]
                sc.sample(now, rtt, hold)
            self.qscope.sample(now, rtt, hold)
        if newly:
            progress = True
            ecn = bool(pkt.flags & FLAG_ECN_ECHO)
            echo_seq = una + psn_diff(pkt.echo_psn, una_psn)
            scan: list[Seg] = []
            spray = None if nack else self._spray
            scopes = self.scopes
            qscope = self.qscope
            # the plane scopes whose newest moved, in the order touched: linked through
            # ``Reorder.next_touched`` (no list per ACK), flagged by ``Reorder.touched``
            touched: Reorder | None = None
            last: Reorder | None = None
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
                        sent = seg.sent_ps
                        sc = scopes[e.plane]
                        if learn:
                            # every packet this ACK reports is a delay sample, not only
                            # the one it echoes: slow paths are rarely the echoed one
                            age = now - sent
                            if age > sc.cur_max:
                                sc.cur_max = age
                            if age > qscope.cur_max:
                                qscope.cur_max = age
                        if sent > sc.newest:
                            if not sc.touched:
                                sc.touched = True
                                if last is None:
                                    touched = sc
                                else:
                                    last.next_touched = sc
                                last = sc
                            sc.newest = sent
                        if sent > qscope.newest:
                            qscope.newest = sent
                if state != LOST:
                    snd.pipe -= seg.length
                    e.acked += 1
                    if state == INFLIGHT and certain:
                        scan.append(seg)
                    if spray is not None:
                        spray.delivered(now, e, now - seg.sent_ps if certain else -1,
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
                while touched is not None:
                    sc = touched
                    touched = sc.next_touched
                    sc.next_touched = None
                    sc.touched = False
                    self._scan_overdue(now, sc)
                self._scan_overdue(now, qscope)
        if nack:
            if pkt.flags & FLAG_TRIM:
                progress = self._on_trim(now, pkt, una, una_psn) or progress
        else:
            ecn = bool(pkt.flags & FLAG_ECN_ECHO)
            if ecn:
                stats.ecn_echoes += 1
                slow = self._spray.slow_after()
                if rtt is not None and rtt > slow:
                    # NSCC's "ECN with low delay", judged against the QP's own paths: a mark
                    # that came back slower than the QP's usual is its path's news. The spray
                    # does not recycle that EV; the window sees the QP's delay, unmarked.
                    ecn = False
                    rtt = slow
            self.cc.on_ack(now, acked_bytes, rtt, ecn, pkt.ev)
        if progress:
            self.progress(now)

    def _on_trim(self, now: int, pkt: Packet, una: int, una_psn: int) -> bool:
        """NACK(trim): resend that transmission at once; congestion, never loss."""
        snd = self.sender
        seq = una + psn_diff(pkt.echo_psn, una_psn)
        if not una <= seq < snd.snd_nxt:
            return False  # not outstanding (acknowledged, or never sent)
        out = snd.outstanding
        seg = out[seq & (len(out) - 1)]
        if seg is None or seg.state > SUSPECT or seg.sent_ps != pkt.ts:
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
            if seg.tx == t.tx and seg.state <= SUSPECT:
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

    # ================================================================== watchdog
    def arm_watchdog(self, now: int) -> None:
        """Work was posted: start counting from now unless the watchdog already runs."""
        if self.watchdog_at is None:
            self._last_progress = now
            self._retries = 0
            self.watchdog_at = now + self._timeout

    def progress(self, now: int) -> None:
        """A path proved alive: the retry count starts over."""
        self._retries = 0
        self._last_progress = now
        self.watchdog_at = now + self._timeout if self.sender.has_work() else None

    # ================================================================== timers
    def next_timer(self) -> int | None:
        """The earliest deadline (see the module docstring), or None. The deadlines below
        fit in 64 bits and are compared as such (compiled: C integers; ``found`` keeps the
        Python int when the earliest came as one, so it is not boxed again); the
        watchdog's may not (its backoff doubles), so it is compared last, as a Python int."""
        if self.qp.failed:
            return None
        have = False  # whether ``best`` holds a deadline yet
        best = 0
        found: int | None = None  # ``best`` as a Python int, when it came as one
        due = self.receiver.ack_due
        if due is not None:
            best = due
            have = True
            found = due
        q = self._gq
        t = q.head
        while t is not None:
            seg = t.seg
            if seg.tx == t.tx and seg.state <= SUSPECT:
                at = t.sent_ps + self.rto
                if not have or at < best:
                    best = at
                    have = True
                    found = None
                break
            q.pop()
            t = q.head
        q = self._suspects
        t = q.head
        while t is not None:
            seg = t.seg
            if seg.tx == t.tx and seg.state == SUSPECT:
                if not have or t.due < best:
                    best = t.due
                    have = True
                    found = None
                break
            q.pop()
            t = q.head
        if self.paths.bad_count:  # (else no probe is live: see PathManager.bad_count)
            due = self.paths.next_probe()
            if due is not None:
                at = due
                if not have or at < best:
                    best = at
                    have = True
                    found = due
        watchdog = self.watchdog_at
        if not have:
            return watchdog
        if found is None:
            found = best
        if watchdog is not None and watchdog < found:
            return watchdog
        return found

    def handle_timer(self, now: int) -> None:
        if self.qp.failed:
            return
        receiver = self.receiver
        if receiver.ack_due is not None and receiver.ack_due <= now:
            receiver.ack_timeout(now)
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
        # RTO: the oldest live transmission bounds every EV's deadline
        q = self._gq
        limit = now - self.rto
        t = q.head
        while t is not None:
            seg = t.seg
            live = seg.tx == t.tx and seg.state <= SUSPECT
            if live and t.sent_ps > limit:
                break
            q.pop()
            if live:
                self._ev_timeout(now, seg)
            t = q.head
        # probes of ASSUMED_BAD EVs
        if self.paths.bad_count:
            self.paths.send_due_probes(now)
        # watchdog: consecutive timeouts with no progress anywhere
        if self.watchdog_at is not None and self.watchdog_at <= now:
            self._watchdog(now)

    def _ev_timeout(self, now: int, seg: Seg) -> None:
        """``seg``'s transmission went unanswered for an RTO: its EV is presumed broken and
        everything still in flight on it is resent elsewhere."""
        e = seg.ev
        self.stats.timeouts += 1
        e.timeouts += 1
        lost = 0
        if seg.state <= SUSPECT:
            self._lose(seg)
            lost += 1
        lost += self._lose_fifo(e)
        self.stats.packets_timed_out += lost
        self.cc.on_loss(now, e.ev)
        if e.state == GOOD:
            self._mark_bad(now, e, f"timeout psn={self._psn(seg)}")

    def _watchdog(self, now: int) -> None:
        """One expiry of the local ACK timer without progress: a retry, or the error."""
        if not self.sender.has_work():
            self.watchdog_at = None
            return
        deadline = self.watchdog_at
        assert deadline is not None
        self._retries += 1
        self.stats.qp_timeouts += 1
        cfg = self.config
        if not cfg.retries_forever and self._retries > self._error_after:
            counts = {GOOD: 0, ASSUMED_BAD: 0, DENIED: 0}
            for e in self.paths.evs:
                counts[e.state] += 1
            self._fail(now, (
                f"retries exhausted (retry_linear_cnt={cfg.retry_linear_cnt}, "
                f"retry_exp_cnt={cfg.retry_exp_cnt}): {self._retries - 1} retries of the "
                f"{self._timeout} ps local ACK timeout without progress on any EV since "
                f"t={self._last_progress} ps; EVs good={counts[GOOD]} "
                f"assumed_bad={counts[ASSUMED_BAD]} denied={counts[DENIED]}; "
                f"{self.sender.outstanding_count} packets unacknowledged"))
            return
        # retry k waits T while k <= retry_linear_cnt, then 2T, 4T, ... (exponential range);
        # counted from the deadline, so a late timer call does not stretch the rule
        over = self._retries - self._linear
        timeout = self._timeout  # (a Python int, compiled too: the backoff passes 64 bits)
        self.watchdog_at = deadline + (timeout if over <= 0 else timeout << min(over, 40))

    def _fail(self, now: int, reason: str) -> None:
        qp = self.qp
        qp.failed = True
        self.sender.sendable = False
        qp.error_reason = reason
        self.watchdog_at = None
        self.receiver.ack_due = None
        self.events.append(TransportEvent(now, EVENT_QP_ERROR, self.qpn, {"reason": reason}))
