"""Loss recovery of an MRC QP: ACK processing (loss evidence, retransmission and the timers:
:mod:`.loss`, whose class :class:`Recovery` extends).

ACKs and NACKs
    A cumulative PSN and a 64-bit SACK window report what arrived; each newly acknowledged
    segment leaves the sender's ring (``Sender.take_acked``) and the pipe, its message may
    complete, and its delivery (age, CE mark) is the spray's feedback (:mod:`.spray`). The
    RTT an ACK echoes feeds the congestion control and the reorder windows
    (:mod:`.reorder`); a CE-marked ACK goes to the congestion control with the spray's bound
    of a slow round trip (:meth:`.cc.CongestionControl.on_marked_ack` decides whose it is).
"""

from __future__ import annotations

from mrc.packet import FLAG_ECN_ECHO, FLAG_TRIM, NACK, PSN_MASK, Packet
from mrc.transport.mrc.config import MrcStats
from mrc.transport.mrc.evmap import EvMap
from mrc.transport.mrc.loss import LossRecovery
from mrc.transport.mrc.records import ACKED, INFLIGHT, LOST, Ev, Msg, Seg
from mrc.transport.mrc.reorder import Reorder
from mrc.transport.mrc.sender import Sender
from mrc.transport.mrc.spray import Spray

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C function, not its Python wrapper
    from cython.cimports.mrc.packet import psn_diff  # type: ignore[import-not-found]
else:
    from mrc.packet import psn_diff

# typed copies (compiled, C integers)
_FLAG_ECN_ECHO = cython.declare(cython.longlong, FLAG_ECN_ECHO)
_FLAG_TRIM = cython.declare(cython.longlong, FLAG_TRIM)
_NACK = cython.declare(cython.longlong, NACK)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)
_ACKED = cython.declare(cython.longlong, ACKED)
_INFLIGHT = cython.declare(cython.longlong, INFLIGHT)
_LOST = cython.declare(cython.longlong, LOST)


@cython.cclass
class Recovery(LossRecovery):
    """Loss recovery of one QP: its ACKs and NACKs (see the module docstring), on the state
    and the loss evidence of :class:`.loss.LossRecovery`."""

    if not cython.compiled:
        __slots__ = ()

    # ================================================================== ACK / NACK
    @cython.ccall
    @cython.annotation_typing(True)
    def on_ack(self, now: cython.longlong, pkt: Packet) -> None:
        stats: MrcStats = self.stats
        nack: cython.bint = pkt.kind == _NACK
        if nack:
            stats.nacks_received += 1
        else:
            stats.acks_received += 1
        snd: Sender = self.sender
        una: cython.longlong = snd.una
        psn0: cython.longlong = self._psn0
        cum: cython.longlong = una + psn_diff(pkt.psn, (psn0 + una) & _PSN_MASK)
        if cum > snd.snd_nxt:
            stats.bad_packets += 1
            return
        newly: list = snd.take_acked(cum, pkt.sack, pkt.sack_base)
        una = snd.una
        una_psn: cython.longlong = (psn0 + una) & _PSN_MASK
        ts: cython.longlong = pkt.ts
        rtt = now - ts if not nack and 0 < ts <= now else None
        if rtt is not None and self._overdue and self._fixed_window is None:
            # the reorder windows learn from ACKs only: a trim NACK skips the queues
            index: EvMap = self._ev_index
            if index.find(pkt.ev):
                sc: Reorder = self.scopes[index.a]
                sc.sample(now, rtt, self._hold)
            self.qscope.sample(now, rtt, self._hold)
        acked_bytes: cython.longlong = 0
        progress: cython.bint = False
        if newly:
            progress = True
            acked_bytes = self._delivered(now, pkt, newly, una, una_psn, nack)
        if nack:
            if pkt.flags & _FLAG_TRIM:
                progress = self._on_trim(now, pkt, una, una_psn) or progress
        elif pkt.flags & _FLAG_ECN_ECHO:
            stats.ecn_echoes += 1
            self.cc.on_marked_ack(now, acked_bytes, rtt, pkt.ev, self._spray.slow_after())
        else:
            self.cc.on_ack(now, acked_bytes, rtt, False, pkt.ev)
        if progress:
            self.watchdog.progress(now)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _delivered(self, now: cython.longlong, pkt: Packet, newly: list, una: cython.longlong,
                   una_psn: cython.longlong, nack: cython.bint) -> cython.longlong:
        """The newly acknowledged segments leave the pipe, complete their messages, feed
        the spray (unless ``pkt`` is a NACK) and the loss evidence; returns their bytes."""
        seg: Seg
        sc: Reorder
        snd: Sender = self.sender
        stats: MrcStats = self.stats
        ts: cython.longlong = pkt.ts
        ecn: cython.bint = bool(pkt.flags & _FLAG_ECN_ECHO)
        echo_seq: cython.longlong = una + psn_diff(pkt.echo_psn, una_psn)
        scan: list = []
        spray: Spray | None = None if nack else self._spray
        overdue: cython.bint = self._overdue
        acked_bytes: cython.longlong = 0
        for seg in newly:
            state: cython.longlong = seg.state
            seg.state = _ACKED
            e: Ev = seg.ev
            # loss evidence needs to know *which* transmission arrived: certain for a
            # packet sent once, or for the very one this ACK echoes
            certain: cython.bint = seg.sends == 1 or (seg.seq == echo_seq and seg.sent_ps == ts)
            if certain:
                e.strikes = 0  # the EV delivered: its path works
                if overdue:
                    self._newest(now, seg.sent_ps, self.scopes[e.plane])
            if state != _LOST:
                snd.pipe -= seg.length
                e.acked += 1
                if state == _INFLIGHT and certain:
                    scan.append(seg)
                if spray is not None:
                    spray.feedback(now, e, now - seg.sent_ps if certain else -1,
                                   ecn and seg.seq == echo_seq)
            else:
                stats.spurious_losses += 1
            acked_bytes += seg.length
            msg: Msg = seg.msg
            msg.unacked -= 1
            if msg.segmented and not msg.unacked:
                snd.completed(now, msg)
        for seg in scan:
            self._infer_losses(now, seg)
        if overdue:
            # the plane scopes whose newest moved, in the order touched (linked through
            # ``Reorder.next_touched``, flagged by ``Reorder.touched``), then the QP's
            touched: Reorder | None = self._touched
            self._touched = self._touched_last = None
            while touched is not None:
                sc = touched
                touched = sc.next_touched
                sc.next_touched = None
                sc.touched = False
                self._scan_overdue(now, sc)
            self._scan_overdue(now, self.qscope)
        return acked_bytes

    @cython.ccall
    @cython.annotation_typing(True)
    def _newest(self, now: cython.longlong, sent: cython.longlong, sc: Reorder) -> None:
        """A transmission sent at ``sent`` on ``sc``'s plane certainly arrived: its age is a
        delay sample of the plane's and the QP's scopes (every packet an ACK reports, not
        only the one it echoes: slow paths are rarely the echoed one), and it may be the
        newest send time either has seen delivered."""
        qscope: Reorder = self.qscope
        if self._fixed_window is None:
            age: cython.longlong = now - sent
            if age > sc.cur_max:
                sc.cur_max = age
            if age > qscope.cur_max:
                qscope.cur_max = age
        if sent > sc.newest:
            if not sc.touched:
                sc.touched = True
                last: Reorder | None = self._touched_last
                if last is None:
                    self._touched = sc
                else:
                    last.next_touched = sc
                self._touched_last = sc
            sc.newest = sent
        if sent > qscope.newest:
            qscope.newest = sent

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _on_trim(self, now: cython.longlong, pkt: Packet, una: cython.longlong,
                 una_psn: cython.longlong) -> cython.bint:
        """NACK(trim): resend that transmission at once; congestion, never loss."""
        snd: Sender = self.sender
        seq: cython.longlong = una + psn_diff(pkt.echo_psn, una_psn)
        if not una <= seq < snd.snd_nxt:
            return False  # not outstanding (acknowledged, or never sent)
        out: list = snd.outstanding
        seg: Seg | None = out[seq & (len(out) - 1)]
        if seg is None or seg.state == _LOST or seg.state == _ACKED or seg.sent_ps != pkt.ts:
            return False  # already acked, already queued, or an older transmission's NACK
        seg.state = _LOST
        snd.pipe -= seg.length
        snd.retx.appendleft(seg)
        snd.sendable = True
        e: Ev = seg.ev
        e.trims += 1
        self.stats.trims += 1
        self.cc.on_trim(now, e.ev)
        return True
