"""The reorder window of one overdue-loss scope (one plane, or the whole QP).

A packet is *overdue* when a packet sent more than the reorder window ``W`` after it, on any
other EV of its scope, has been acknowledged while it has not (:mod:`.loss`). ``W`` is
kept per scope from what that scope's ACKs show (a trim NACK skips the queues and is not
used)::

    W = min(RTO, reorder_margin_rtts x min_rtt
                 + reorder_spread_gain x (recent max delay - min_rtt))

where ``min_rtt`` comes from the RTTs ACKs echo and a *delay* is the age (send to ACK) of
every packet an ACK newly reports, not only the echoed one (slow paths are seldom the echoed
one). Paths of a scope differ only in queueing, so the spread of delays bounds how far a
packet can fall behind one sent later on another path; the margin (one min RTT by default)
covers a queue that grows while nothing of its path is being acknowledged. "Recent" is a
two-bucket windowed max over about ``reorder_hold_rtts`` smoothed RTTs: queueing widens
``W`` at once (an 8-to-1 incast with 40 us queues gets ``W`` of ~46 us and no false loss)
and it narrows only after the spread has been gone a while. A scope that has not yet seen
half a hold period of samples is cold: ``W`` is the RTO, nothing is declared on unknown
reordering. Planes share their first and last hop, so a plane's ``W`` is the tight one; the
QP's also covers the skew between planes and catches a whole plane going silent (a dead
T0). A path whose queue grows by more than ``W`` while unobserved still looks like a loss: a
spurious retransmission, and its late ACK widens ``W``. ``reorder_window_ps`` fixes ``W``
instead.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.transport.mrc.records import LINK_QP, TxQueue


@cython.cclass
class Reorder:
    """Overdue-loss state of one scope (one plane, or the whole QP): its transmissions in
    send order, the send time of the newest one known delivered, and the reorder window
    learnt from the delays seen in that scope (see the module docstring).

    ``dq`` is the scope's queue of transmissions; the sender appends to it as it sends
    (see :class:`.sender.Sender`: a plane's scope through ``Tx.next_plane``, the QP's
    through ``Tx.next_qp``), loss recovery pops it."""

    dq: TxQueue
    newest: cython.longlong
    min_rtt: cython.longlong
    srtt: cython.longlong
    cur_max: cython.longlong
    cur_start: cython.longlong
    prev_max: cython.longlong
    window: cython.longlong
    touched: cython.bint
    next_touched: Reorder | None
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, window: int, dq: TxQueue | None = None) -> None:
        #: transmissions in send order
        self.dq = TxQueue(LINK_QP) if dq is None else dq
        self.newest = -1  # send time of the newest transmission certainly acknowledged
        self.min_rtt = 0  # 0: no sample yet
        self.srtt = 0
        self.cur_max = 0  # longest delay in the current half of the hold period
        self.cur_start = -1  # when the current half began (-1: no sample yet)
        self.prev_max = -1  # longest delay in the previous half; -1: cold (window = RTO)
        self.window = window
        #: set while an ACK being processed has moved ``newest``: recovery scans the scopes
        #: it touched, in the order touched (linked by ``next_touched``), once the ACK's
        #: segments are all counted
        self.touched = False
        self.next_touched = None

    @cython.ccall
    @cython.annotation_typing(True)
    def sample(self, now: cython.longlong, rtt: cython.longlong,
               hold_rtts: cython.longlong) -> None:
        """The RTT an ACK echoes (exact): min and smoothed RTT, and the clock of the
        two-bucket windowed max (each bucket half of ``hold_rtts`` smoothed RTTs)."""
        if not self.min_rtt or rtt < self.min_rtt:
            self.min_rtt = rtt
        srtt: cython.longlong = rtt if not self.srtt else self.srtt + ((rtt - self.srtt) >> 3)
        self.srtt = srtt
        if self.cur_start < 0:
            self.cur_start = now
        elif now - self.cur_start >= (hold_rtts * srtt) >> 1:
            self.prev_max = self.cur_max
            self.cur_max = 0
            self.cur_start = now
        if rtt > self.cur_max:
            self.cur_max = rtt

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def refresh(self, rto: cython.longlong, margin: cython.double,
                gain: cython.double) -> cython.longlong:
        """window = min(RTO, margin x min RTT + gain x (recent max delay - min RTT)); the
        RTO while the scope is cold (no evidence before the spread is known)."""
        prev = self.prev_max
        if prev >= 0:
            hi = prev if prev > self.cur_max else self.cur_max
            window = int(margin * self.min_rtt + gain * (hi - self.min_rtt))
            self.window = window if window < rto else rto
        return self.window
