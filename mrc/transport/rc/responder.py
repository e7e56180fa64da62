"""The responder half of an RC endpoint: places the peer's WRITEs in order and acknowledges them.

* **In-order delivery, go-back-N.** The responder accepts only the expected PSN. The first
  out-of-sequence packet of a gap gets ONE sequence-error NAK (``FLAG_SEQ_ERR``, psn = the
  expected PSN); later out-of-sequence packets of the same gap are dropped silently. A gap
  "episode" ends when the expected packet arrives, or when the PSNs of arriving packets go
  backwards (the requester rewound and its resent copy of the expected packet was lost
  again): only then is a new NAK due. Old (duplicate) packets are re-ACKed.
* **ACK coalescing.** The responder ACKs every ``ack_every`` accepted packets, at once on a
  packet with the ACK-request bit (the requester sets it where waiting would stall it), and
  when its coalescing timer runs out: ``ack_timer_us`` after the first packet it has not yet
  acknowledged, as RoCE NICs bound the delay of a coalesced ACK. The timer is what keeps a
  requester whose window was cut below the batch *after* its last packets left (none of them
  asked) from waiting for its local ACK timeout on a fabric that delivered everything.
* **ECN.** ``cc = "dcqcn"``: the responder is DCQCN's notification point: a CE-marked DATA
  packet (in sequence or not) makes it send a CNP to the sender, at most one per QP per
  ``min_time_between_cnps``. ``cc = "window"``: a CE mark is echoed on the next ACK or NAK;
  it may also trigger an immediate ACK, which acts as the CNP, at most one per
  ``cnp_interval_us`` unless an ACK is due anyway.
* **Replies follow the data.** ACK/NAK go back along the reverse of the path the
  acknowledged packet took: the T1 named by its EV. They are RoCEv2's own (``FLAG_ROCE``:
  68 bytes, BTH + AETH) and ride the QP's own priority, queued with its DATA as a RoCE NIC
  sends them (``mrc.packet.data_class``); CNPs keep the high-priority class (priority 0 and
  the switches' header queue).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mrc.packet import (
    ACK,
    CNP,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_FIRST,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    NACK,
    PSN_MASK,
    RC_ACK_BYTES,
    Packet,
)
from mrc.transport.base import MessageCompleted
from mrc.transport.memory import ReceiveBuffer
from mrc.transport.rc.config import RcStats

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C function, not its Python wrapper
    from cython.cimports.mrc.packet import psn_diff  # type: ignore[import-not-found]
else:
    from mrc.packet import psn_diff

if TYPE_CHECKING:
    from mrc.transport.rc.endpoint import RcEndpoint
    from mrc.transport.rc.requester import RcRequester

# typed copies (compiled, C integers)
_ACK = cython.declare(cython.longlong, ACK)
_CNP = cython.declare(cython.longlong, CNP)
_ECN_CE = cython.declare(cython.longlong, ECN_CE)
_FLAG_ACK_REQ = cython.declare(cython.longlong, FLAG_ACK_REQ)
_FLAG_ECN_ECHO = cython.declare(cython.longlong, FLAG_ECN_ECHO)
_FLAG_ROCE = cython.declare(cython.longlong, FLAG_ROCE)
_FLAG_FIRST = cython.declare(cython.longlong, FLAG_FIRST)
_FLAG_SEQ_ERR = cython.declare(cython.longlong, FLAG_SEQ_ERR)
_RC_ACK_BYTES = cython.declare(cython.longlong, RC_ACK_BYTES)
_NACK = cython.declare(cython.longlong, NACK)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)


@cython.cclass
class RcResponder:
    """The receive side of one ``RcQp``: expected PSN, the message being placed, ACK state.

    Its ACKs and NAKs wait in the endpoint's control queue for the driver. Reply addresses
    come from the requester's path table (``requester``), as both halves share one path.
    """

    qp: Any  # the RcQp, an RcEndpoint (an object in C: the QP's module imports this one)
    requester: RcRequester
    stats: RcStats
    qpn: cython.longlong
    host: cython.longlong
    peer: cython.longlong
    plane: cython.longlong
    _mtu: cython.longlong
    _ack_every: cython.longlong
    _cnp_ps: int
    _epsn: cython.longlong
    _rx: ReceiveBuffer | None
    _rx_posted: cython.longlong
    _unacked: cython.longlong
    _in_gap: cython.bint
    _gap_last: cython.longlong
    _dup_last: int | None
    _ce_pending: cython.bint
    _last_cnp: int | None
    _ack_timer_ps: int | None  # None: no coalescing timer
    #: when the coalescing timer fires (None: nothing waits for an ACK)
    ack_due: int | None
    _last_ev: cython.longlong
    #: DCQCN notification point: least time between CNPs (None: cc = "window")
    _np_ps: int | None
    _prio: cython.longlong  # ACKs and NAKs ride the QP's DATA priority
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: RcEndpoint, requester: RcRequester) -> None:
        cfg = qp.config
        self.qp = qp
        self.requester = requester
        self.stats = qp.stats
        self.qpn = qp.qpn
        self.host = qp.host
        self.peer = qp.peer
        self.plane = qp.plane
        self._mtu = cfg.mtu
        self._ack_every = cfg.ack_every
        self._cnp_ps = cfg.cnp_interval_ps
        self._epsn = cfg.initial_psn
        self._rx = None
        self._rx_posted = 0
        self._unacked = 0
        self._in_gap = False
        self._gap_last = 0
        self._dup_last = None
        self._ce_pending = False
        self._last_cnp = None
        self._ack_timer_ps = cfg.ack_timer_ps
        self.ack_due = None
        self._last_ev = 0
        self._np_ps = cfg.dcqcn.cnp_interval_ps if cfg.cc == "dcqcn" else None
        self._prio = cfg.priority

    @cython.ccall
    @cython.annotation_typing(True)
    def on_data(self, now: cython.longlong, pkt: Packet) -> None:
        stats = self.stats
        if pkt.ecn == _ECN_CE and self._np_ps is not None:
            stats.ce_received += 1
            last = self._last_cnp
            if last is None or now - last >= self._np_ps:
                self._send_cnp(now, pkt.ev)
        d: cython.longlong = psn_diff(pkt.psn, self._epsn)
        if d == 0:
            # in PSN order, as RC places: the first packet of a WRITE (its RETH) opens the
            # message, every later one goes where the previous ended (a middle packet does
            # not carry its message or offset on the wire: mrc.wire.roce)
            rx: ReceiveBuffer | None = self._rx
            first: cython.bint = (pkt.flags & _FLAG_FIRST) != 0
            if rx is None:
                if not first or pkt.offset != 0:
                    raise ValueError(f"QP {self.qpn}: in-order packet psn={pkt.psn} starts "
                                     f"message {pkt.msg_id} at offset {pkt.offset}")
                rx = self._rx = ReceiveBuffer(pkt.msg_id, pkt.msg_len, self._mtu,
                                              real_bytes=pkt.payload is not None)
                self._rx_posted = pkt.ts
            elif first:
                raise ValueError(f"QP {self.qpn}: message {pkt.msg_id} interleaved with "
                                 f"unfinished message {rx.msg_id}")
            qp = self.qp
            qp.bytes_placed += rx.place(rx.placed if not first else 0, pkt.length, pkt.digest,
                                        pkt.payload)
            self._epsn = (self._epsn + 1) & _PSN_MASK
            self._in_gap = False
            self._dup_last = None
            self._unacked += 1
            if rx.placed == rx.length:  # complete
                self._rx = None
                qp._emit(MessageCompleted(now, self.qpn, rx.msg_id, rx.length, rx.checksum(),
                                          self._rx_posted, data=rx.data()))
            cnp: cython.bint = False
            if pkt.ecn == _ECN_CE and self._np_ps is None:
                stats.ce_received += 1
                self._ce_pending = True
                last = self._last_cnp
                cnp = last is None or now - last >= self._cnp_ps
            if self._unacked >= self._ack_every or pkt.flags & _FLAG_ACK_REQ or cnp:
                self._send_ack(now, _ACK, (self._epsn - 1) & _PSN_MASK, pkt.ev)
            else:
                self._last_ev = pkt.ev
                if self.ack_due is None and self._ack_timer_ps is not None:
                    self.ack_due = now + self._ack_timer_ps
        elif d > 0:
            stats.dropped_oos += 1
            if not self._in_gap or psn_diff(pkt.psn, self._gap_last) <= 0:
                # first packet past a gap, or the requester restarted and lost it again
                self._in_gap = True
                self._send_ack(now, _NACK, self._epsn, pkt.ev)
            self._gap_last = pkt.psn
        else:
            stats.duplicates += 1
            last = self._dup_last
            if last is None or psn_diff(pkt.psn, last) <= 0 or pkt.flags & _FLAG_ACK_REQ:
                # re-ACK once per resent run (and when asked): the first ACK was lost
                self._send_ack(now, _ACK, (self._epsn - 1) & _PSN_MASK, pkt.ev)
            self._dup_last = pkt.psn

    @cython.ccall
    @cython.annotation_typing(True)
    def on_timer(self, now: cython.longlong) -> None:
        """The coalescing timer: acknowledge what has waited since ``ack_due`` was armed."""
        due = self.ack_due
        if due is None or now < due:
            return
        if self._unacked:
            self.stats.acks_on_timer += 1
            self._send_ack(now, _ACK, (self._epsn - 1) & _PSN_MASK, self._last_ev)
        self.ack_due = None

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_cnp(self, now: cython.longlong, ev: cython.longlong) -> None:
        self._last_cnp = now
        self.stats.cnps_sent += 1
        req = self.requester
        da = req.addr  # the peer's routed address: the fabric hashes the way back
        self.qp._ctrl.append(Packet(_CNP, self.host, self.peer, self.qpn, 0, ev=ev, da=da,
                                    plane=self.plane))

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_ack(self, now: cython.longlong, kind: cython.longlong, psn: cython.longlong,
                  ev: cython.longlong) -> None:
        flags: cython.longlong = _FLAG_ROCE | (_FLAG_SEQ_ERR if kind == _NACK else 0)
        if self._ce_pending:
            flags |= _FLAG_ECN_ECHO
            self._ce_pending = False
            self._last_cnp = now
        if kind == _NACK:
            self.stats.naks_sent += 1
        else:
            self.stats.acks_sent += 1
        self._unacked = 0
        self.ack_due = None
        # reply along the reverse of the path the acknowledged packet took
        req: RcRequester = self.requester
        da = req.addr  # the peer's routed address: the fabric hashes the way back
        self.qp._ctrl.append(Packet(kind, self.host, self.peer, self.qpn, psn, ev=ev,
                                    flags=flags, da=da, plane=self.plane, size=_RC_ACK_BYTES,
                                    prio=self._prio))
