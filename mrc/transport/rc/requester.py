"""The requester half of an RC endpoint: sends the WRITEs posted on it and recovers their loss.

* **Segmentation, pulled.** A posted WRITE is only a sequence range; ``poll`` cuts the next
  MTU-sized segment when the port asks, so nothing is queued per packet.
* **ACK requests** on the last packet of every message, on the packet that fills the window,
  and on every packet while the window is below the responder's ACK batch (``ack_every``),
  which could never fill; a tail stranded by a later window cut is acknowledged by the
  responder's coalescing timer (:mod:`.responder`).
* **Go-back-N.** A sequence-error NAK acknowledges everything before its PSN and rewinds the
  send point to it: everything from there is resent.
* **Local ACK timeout**: the QP's is 4.096 us x 2^timeout_exp (0: wait forever). The timer
  counts from the last *progress* (una advanced, or the first packet after idle); an expiry
  without progress resends from una (a sequence-error NAK restarts the timer too, keeping the
  retry count). When expiries and the error (IBV_WC_RETRY_EXC_ERR; NCCL aborts) fall:
  :func:`~mrc.transport.rc.config.retry_schedule` (``fixed`` or ConnectX's ``adaptive``
  ladder); ``slow_restart``: a timeout also cuts the rate (DCQCN) or the window.
* **Congestion response.** At most ``window_pkts`` packets are outstanding. ``cc = "dcqcn"``
  (the default, as RoCE NICs run): :mod:`.dcqcn`'s reaction point sets a rate, CNPs cut it,
  and DATA is paced at it (packet starts wire bytes x 8 / rate apart). ``cc = "window"``:
  AIMD on ECN echoes (:mod:`.responder`): a cut by ``ecn_decrease`` at most once per window
  of data, growth by ``additive_increase_pkts`` per window acknowledged, never
  above ``window_pkts`` nor below ``min_window_pkts``.
* **One routed destination.** The QP sends to its peer's plain IPv6 address on its plane
  and never chooses a path: the fabric's ECMP hashes the 5-tuple, whose only entropy is the
  UDP source port the NIC derives from the QPNs (``ev`` carries it,
  :mod:`.entropy`), and routing repairs the groups (``mrc.sim.routing``). A QP whose path
  broke recovers on its next retransmission once routing has moved it.

Sequence numbers [una, max_sent) are outstanding and nxt is the next to send; all are
unbounded integers (the wire PSN is ``initial_psn`` + sequence, modulo 2^24).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mrc.packet import (
    ACK,
    DATA,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_FIRST,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_ROCE,
    PSN_MASK,
    Packet,
)
from mrc.transport.base import Retry, SendCompleted
from mrc.transport.memory import message_key
from mrc.transport.rc.config import RcConfig, RcStats, retry_schedule
from mrc.transport.rc.dcqcn import DcqcnRp
from mrc.transport.rc.entropy import udp_source_port

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C functions, not their Python wrappers
    from cython.cimports.mrc.packet import (  # type: ignore[import-not-found]
        psn_diff,
        rc_data_bytes,
    )
    from cython.cimports.mrc.transport.memory import (  # type: ignore[import-not-found]
        segment_digest,
    )
else:
    from mrc.packet import psn_diff, rc_data_bytes
    from mrc.transport.memory import segment_digest

if TYPE_CHECKING:
    from mrc.transport.rc.endpoint import RcEndpoint

# typed copies (compiled, C integers)
_ACK = cython.declare(cython.longlong, ACK)
_DATA = cython.declare(cython.longlong, DATA)
_FLAG_ACK_REQ = cython.declare(cython.longlong, FLAG_ACK_REQ)
_FLAG_ECN_ECHO = cython.declare(cython.longlong, FLAG_ECN_ECHO)
_FLAG_LAST = cython.declare(cython.longlong, FLAG_LAST)
_FLAG_RETX = cython.declare(cython.longlong, FLAG_RETX)
_FLAG_ROCE = cython.declare(cython.longlong, FLAG_ROCE)
_FLAG_FIRST = cython.declare(cython.longlong, FLAG_FIRST)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)


@cython.cclass
class _SendMsg:
    """A posted WRITE: its sequence range [start, end) and how to make its segments."""

    msg_id: int
    length: cython.longlong
    start: cython.longlong
    end: cython.longlong
    key: int
    posted_ps: cython.longlong
    payload: Any  # bytes | None (any buffer: an object, as before)
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, msg_id: int, length: int, start: int, end: int, key: int,
                 posted_ps: int, payload: bytes | None) -> None:
        self.msg_id = msg_id
        self.length = length
        self.start = start
        self.end = end
        self.key = key
        self.posted_ps = posted_ps
        self.payload = payload


@cython.cclass
class RcRequester:
    """The send side of one ``RcQp``: its path, its posted WRITEs, window and timers.

    ``paths`` maps a key -> destination address toward the peer (the routed fabric gives one:
    the peer's address on the plane); the requester sends to ``t1``'s (default: the first
    key). The endpoint ``qp`` owns what
    both halves share (stats, events, the error state); the requester reads and raises
    through it, and the endpoint checks ``failed`` before calling in.
    """

    qp: Any  # the RcQp, an RcEndpoint (an object in C: the QP's module imports this one)
    stats: RcStats
    config: RcConfig
    qpn: cython.longlong
    host: cython.longlong
    peer: cython.longlong
    plane: cython.longlong
    paths: dict[int, int]
    order: list[int]
    t1: int
    addr: int
    ev: cython.longlong
    msgs: deque[_SendMsg]
    _msg_ids: set[int]
    _cur: cython.longlong
    una: cython.longlong
    _nxt: cython.longlong
    max_sent: cython.longlong
    _tail: cython.longlong
    cwnd: cython.double
    _wnd: cython.longlong
    _cut_guard: cython.longlong
    anchor: cython.longlong
    _retries: cython.longlong
    timeout_ps: int | None
    _mtu: cython.longlong
    _psn0: cython.longlong
    _ack_every: cython.longlong
    rp: DcqcnRp | None  # the DCQCN reaction point (mrc.transport.rc.dcqcn), or None
    _next_tx: cython.longlong
    _paced: cython.bint
    _tx_start: cython.longlong
    _tx_wire: cython.longlong
    _ovh: cython.longlong
    _prio: cython.longlong
    #: the retransmission ladder (config.retry_schedule): timeouts per level, expiry
    #: offsets per starting level, the error's offset; the episode's starting level
    _ladder: tuple
    _sched: tuple
    _err_ps: cython.longlong
    _lvl: cython.longlong
    _dec: cython.longlong
    _slow: cython.bint
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: RcEndpoint, paths: Mapping[int, int], t1: int | None) -> None:
        cfg = qp.config
        self.qp = qp
        self.stats = qp.stats
        self.config = cfg
        self.qpn = qp.qpn
        self.host = qp.host
        self.peer = qp.peer
        self.plane = qp.plane
        self.paths = dict(paths)
        self.order = list(self.paths)
        self.t1 = self.order[0] if t1 is None else t1
        if self.t1 not in self.paths:
            raise ValueError(f"t1 {self.t1} is not among the QP's paths {self.order}")
        self.addr = self.paths[self.t1]
        self.ev = udp_source_port(self.qpn, self.qpn)  # both ends use one QPN
        self._mtu = cfg.mtu
        self._psn0 = cfg.initial_psn
        self._ack_every = cfg.ack_every
        self.timeout_ps = cfg.timeout_ps
        self.msgs = deque()
        self._msg_ids = set()
        self._cur = 0  # index in msgs of the message holding _nxt (advanced lazily)
        self.una = 0
        self._nxt = 0
        self.max_sent = 0
        self._tail = 0
        self.cwnd = float(cfg.window_pkts)
        self._wnd = cfg.window_pkts
        self._cut_guard = 0
        self.anchor = 0  # when the local ACK timer last restarted
        self._retries = 0
        #: DCQCN's reaction point (None for cc = "window"); DATA starts no earlier than
        #: ``_next_tx`` while its rate is below the line
        self.rp = (DcqcnRp(cfg.dcqcn, cfg.line_rate_gbps * 1e9) if cfg.cc == "dcqcn"
                   else None)
        self._next_tx = 0
        self._paced = False  # the rate limiter is closed until _next_tx: a wake-up is due
        self._tx_start = 0  # start and wire bytes of the last paced packet: the next may
        self._tx_wire = 0  # go wire bytes x 8 / rate later, at whatever the rate is by then
        self._ovh = cfg.frame_overhead_bytes
        self._prio = cfg.priority
        self._ladder, self._sched, self._err_ps = ((0,), ((),), 0) if cfg.timeout_ps is None \
            else retry_schedule(cfg)
        self._lvl = 0
        self._dec = cfg.adp_dec_steps if cfg.retransmission == "adaptive" else 0
        self._slow = cfg.slow_restart

    # ------------------------------------------------------------------ posting and sending
    def post_write(self, now: int, msg_id: int, length: int, payload: bytes | None) -> None:
        if length <= 0:
            raise ValueError(f"message {msg_id}: length must be positive, got {length}")
        if payload is not None and len(payload) != length:
            raise ValueError(f"message {msg_id}: payload has {len(payload)} bytes, not {length}")
        if msg_id in self._msg_ids:
            raise ValueError(f"message {msg_id} is already posted on QP {self.qpn}")
        if self.qp.failed:
            return  # a QP in the error state flushes new work requests
        npkts = (length + self._mtu - 1) // self._mtu
        key = message_key(self.host, self.qpn, msg_id, self.config.key_seed)
        start = self._tail
        self._tail = start + npkts
        self.msgs.append(_SendMsg(msg_id, length, start, self._tail, key, now, payload))
        self._msg_ids.add(msg_id)

    @cython.ccall
    @cython.annotation_typing(True)
    def poll(self, now: cython.longlong, plane: cython.longlong) -> Any:  # Packet | None
        wire: cython.longlong
        seq: cython.longlong = self._nxt
        if plane != self.plane or seq >= self._tail or seq - self.una >= self._wnd:
            return None
        if now < self._next_tx:
            self._paced = True  # the rate limiter holds it back (next_timer says until when)
            return None
        msgs = self.msgs
        m: _SendMsg = msgs[self._cur]
        while seq >= m.end:
            self._cur += 1
            m = msgs[self._cur]
        mtu: cython.longlong = self._mtu
        offset: cython.longlong = (seq - m.start) * mtu
        length: cython.longlong = m.length - offset
        if length > mtu:
            length = mtu
        flags: cython.longlong = _FLAG_ROCE | (_FLAG_FIRST if offset == 0 else 0)  # RoCEv2's
        if offset + length == m.length:
            flags |= _FLAG_LAST | _FLAG_ACK_REQ
        elif seq + 1 - self.una >= self._wnd or self._wnd < self._ack_every:
            # this packet fills the window, or the window cannot fill an ACK batch
            flags |= _FLAG_ACK_REQ
        stats = self.stats
        if seq < self.max_sent:
            flags |= _FLAG_RETX
            stats.retx_sent += 1
        else:
            if self.max_sent <= self.una:
                # first packet after idle: the local ACK timer starts now
                self.anchor = now
                self._retries = 0
            self.max_sent = seq + 1
        self._nxt = seq + 1
        stats.data_sent += 1
        stats.payload_bytes_sent += length
        payload = m.payload
        size: cython.longlong = rc_data_bytes(length, offset == 0)  # RETH on the first only
        rp = self.rp
        if rp is not None and rp.limited:
            self._tx_start = self._next_tx if self._next_tx > now else now
            self._tx_wire = wire = size + self._ovh
            self._paced = True  # the driver must wake us when the limiter reopens
            rp.on_sent(wire)
            self._repace()
        return Packet(
            _DATA, self.host, self.peer, self.qpn, (self._psn0 + seq) & _PSN_MASK,
            ev=self.ev, msg_id=m.msg_id, offset=offset, length=length, msg_len=m.length,
            flags=flags, ts=m.posted_ps, da=self.addr, plane=self.plane, size=size,
            digest=segment_digest(m.key, offset, length),
            payload=None if payload is None else payload[offset:offset + length],
            prio=self._prio,
        )

    # ------------------------------------------------------------------ acknowledgements
    @cython.ccall
    @cython.annotation_typing(True)
    def on_ack(self, now: cython.longlong, pkt: Packet) -> None:
        """An ACK (everything up to its PSN arrived) or a sequence-error NAK (everything
        before its PSN arrived; resend from there)."""
        next_psn: cython.longlong
        nak: cython.bint = pkt.kind != _ACK
        if nak:
            self.stats.naks_received += 1
            next_psn = pkt.psn
        else:
            self.stats.acks_received += 1
            next_psn = (pkt.psn + 1) & _PSN_MASK
        una: cython.longlong = self.una
        upto: cython.longlong = una + psn_diff(next_psn, (self._psn0 + una) & _PSN_MASK)
        if upto < una or upto > self.max_sent:
            return  # stale (older than una) or acknowledging what was never sent
        if upto > una:
            self._progress(now, upto)
        if pkt.flags & _FLAG_ECN_ECHO:
            self._on_ecn()
        if nak:
            # the responder is alive and the rewind resends now: restart the local ACK timer
            # (the retry count only resets on real progress)
            self.anchor = now
            self._rewind(upto)
        elif self._nxt < upto:
            self._nxt = upto  # a late ACK covers packets queued for resending

    @cython.ccall
    @cython.annotation_typing(True)
    def _progress(self, now: cython.longlong, upto: cython.longlong) -> None:
        m: _SendMsg
        # adaptive: the episode ends at the level its expiries reached, less the decrement
        lvl: cython.longlong = self._lvl + self._retries - self._dec
        top: cython.longlong = len(self._ladder) - 1
        self._lvl = 0 if lvl < 0 else (top if lvl > top else lvl)
        acked: cython.longlong = upto - self.una
        self.una = upto
        self.anchor = now
        self._retries = 0
        cfg = self.config
        if self.cwnd < cfg.window_pkts:
            self.cwnd = min(float(cfg.window_pkts),
                            self.cwnd + cfg.additive_increase_pkts * acked / self.cwnd)
            self._wnd = max(1, int(self.cwnd))
        msgs = self.msgs
        popped: cython.longlong = 0
        while msgs and msgs[0].end <= upto:
            m = msgs.popleft()
            popped += 1
            self._msg_ids.discard(m.msg_id)
            self.qp._emit(SendCompleted(now, self.qpn, m.msg_id, m.length, m.posted_ps))
        if popped:
            self._cur = max(0, self._cur - popped)

    @cython.ccall
    @cython.annotation_typing(True)
    def on_cnp(self, now: cython.longlong) -> None:
        """A CNP (DCQCN's congestion notification) for this QP arrived."""
        self.stats.cnps_received += 1
        rp = self.rp
        if rp is None:
            return  # cc = "window" reacts to ECN echoes on ACKs instead
        was_limited = rp.limited
        if rp.on_cnp(now):
            self.stats.ecn_cuts += 1
            if not was_limited:  # pacing starts now
                self._tx_start = now
                self._tx_wire = 0
            self._repace()

    @cython.ccall
    @cython.annotation_typing(True)
    def _repace(self) -> None:
        """The rate changed: the next packet may start one packet time (at the new rate)
        after the last one started."""
        rp = self.rp
        assert rp is not None
        if rp.limited:
            self._next_tx = self._tx_start + int(self._tx_wire * rp.ps_per_byte)
        else:
            self._next_tx = 0

    @cython.ccall
    @cython.annotation_typing(True)
    def _on_ecn(self) -> None:
        if self.una < self._cut_guard:
            return  # already cut for data sent before the last cut: once per window
        cfg = self.config
        self.cwnd = max(float(cfg.min_window_pkts), self.cwnd * cfg.ecn_decrease)
        self._wnd = max(1, int(self.cwnd))
        self._cut_guard = self.max_sent
        self.stats.ecn_cuts += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _rewind(self, seq: cython.longlong) -> None:
        """Go-back-N: resend everything from ``seq``."""
        self._nxt = seq
        self._cur = 0  # poll walks forward to the message holding seq

    # ------------------------------------------------------------------ timers
    @cython.ccall
    @cython.annotation_typing(True)
    def handle_timer(self, now: cython.longlong) -> None:
        rp = self.rp
        if rp is not None:
            if rp.next_increase is not None and now >= rp.next_increase:
                rp.on_timer(now)
                self._repace()
            if self._paced and now >= self._next_tx:
                self._paced = False  # the limiter opened: the driver polls when its port is free
        if self.max_sent <= self.una:
            return
        t = self.timeout_ps
        if t is None or now < self.anchor + self._expiry():
            return
        self._retries += 1
        self.stats.timeouts += 1
        una_psn = (self._psn0 + self.una) & _PSN_MASK
        if self._retries > len(self._sched[self._lvl]):
            self.qp._error(now, (
                f"retry count exceeded (IBV_WC_RETRY_EXC_ERR): no progress in "
                f"{self._err_ps / 1e6:g} us ({self.config.retransmission} retransmission, "
                f"{self._retries - 1} retries, local ACK timeout {t / 1e6:g} us)"),
                psn=una_psn, last_progress_ps=self.anchor)
            return
        self.stats.retries += 1
        ladder = self._ladder
        step: cython.longlong = self._lvl + self._retries - 1
        self.qp._emit(Retry(now, self.qpn, self._retries, una_psn,
                            ladder[min(step, len(ladder) - 1)]))
        if self._slow:
            self._slow_restart(now)
        self._rewind(self.una)

    @cython.ccall
    @cython.annotation_typing(True)
    def _expiry(self) -> cython.longlong:
        """The next expiry's (or the error's) offset from the episode's last progress."""
        offsets: tuple = self._sched[self._lvl]
        k: cython.longlong = self._retries
        return offsets[k] if k < len(offsets) else self._err_ps

    @cython.ccall
    @cython.annotation_typing(True)
    def _slow_restart(self, now: cython.longlong) -> None:
        """``slow_restart``: DCQCN's largest cut (:meth:`DcqcnRp.restart`) or the least window."""
        rp = self.rp
        if rp is None:
            self.cwnd, self._wnd = float(self.config.min_window_pkts), self.config.min_window_pkts
            return
        was_limited = rp.limited
        rp.restart(now)
        if not was_limited:  # pacing starts now
            self._tx_start, self._tx_wire = now, 0
        self._repace()

    @cython.ccall
    @cython.annotation_typing(True)
    def next_timer(self) -> Any:  # int | None
        deadline: Any = None  # (int | None)
        rp = self.rp
        if rp is not None:
            deadline = rp.next_increase
            if self._paced:  # held back by the rate: wake the driver when it may send
                nxt = self._next_tx
                if deadline is None or nxt < deadline:
                    deadline = nxt
        if self.max_sent <= self.una:
            return deadline
        t = self.timeout_ps
        if t is not None:
            a = self.anchor + self._expiry()
            if deadline is None or a < deadline:
                deadline = a
        return deadline
