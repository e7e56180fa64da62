"""The sender of an MRC QP: segmentation, EV choice (spraying) and DATA packets.

Messages are segmented at the MTU lazily, one PSN per packet, when a port pulls (``poll``):
retransmissions first, then new data, on a GOOD EV of the pulling plane chosen by the spray
policy (:mod:`.spray`: round robin, or REPS steered by what each EV's packets said). Internally PSNs are unwrapped to unbounded sequence numbers,
so the 24-bit wrap is a conversion at the edges. Nothing is sent beyond the congestion
window (``cc.window`` bytes of payload in flight), no new PSN further than ``mpr`` x 128
beyond the oldest unacknowledged one, and no more than ``max_wimm`` WRITEs with immediate
outstanding (later posts wait behind a held one: the send queue keeps its order).

The sender keeps what loss recovery (:mod:`.recovery`) works on: the segments sent and not
yet acknowledged (``outstanding``, a ring indexed by sequence number), the retransmission
queue (``retx``), the bytes in flight (``pipe``), and every transmission in send order
(``sent`` for the RTO, ``sent_on_plane`` and ``sent_on_qp`` for the overdue scopes, plus
each EV's FIFO: one :class:`.records.Tx` per transmission, linked into those queues,
:mod:`.records`). Recovery updates them in place, and feeds the spray policy the evidence
of the ACKs it processes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mrc.packet import (
    DATA,
    DATA_HEADER_BYTES,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_LAST,
    FLAG_RETX,
    IMMDT_BYTES,
    PSN_MASK,
    SACK_BITS,
    Packet,
)
from mrc.transport.base import SendCompleted, TransportEvent
from mrc.transport.mrc.cc import CongestionControl
from mrc.transport.mrc.config import MPR_UNIT_PSNS, MrcStats, QpCore
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.records import (
    INFLIGHT,
    LINK_PLANE,
    LINK_QP,
    LINK_SENT,
    LOST,
    Ev,
    Msg,
    Seg,
    Tx,
    TxQueue,
)
from mrc.transport.mrc.spray import Spray

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C functions, not their Python wrappers
    from cython.cimports.mrc.packet import make_packet, psn_diff  # type: ignore[import-not-found]
    from cython.cimports.mrc.transport.memory import (  # type: ignore[import-not-found]
        segment_digest,
    )
    from cython.cimports.mrc.transport.mrc.records import (  # type: ignore[import-not-found]
        new_seg,
        new_tx,
    )
else:
    from mrc.packet import make_packet, psn_diff
    from mrc.transport.memory import segment_digest
    from mrc.transport.mrc.records import new_seg, new_tx

# typed copies (compiled, C integers)
_DATA = cython.declare(cython.longlong, DATA)
_DATA_HEADER_BYTES = cython.declare(cython.longlong, DATA_HEADER_BYTES)
_FLAG_ACK_REQ = cython.declare(cython.longlong, FLAG_ACK_REQ)
_FLAG_IMM = cython.declare(cython.longlong, FLAG_IMM)
_FLAG_LAST = cython.declare(cython.longlong, FLAG_LAST)
_FLAG_RETX = cython.declare(cython.longlong, FLAG_RETX)
_IMMDT_BYTES = cython.declare(cython.longlong, IMMDT_BYTES)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)
_SACK_BITS = cython.declare(cython.longlong, SACK_BITS)
_INFLIGHT = cython.declare(cython.longlong, INFLIGHT)
_LOST = cython.declare(cython.longlong, LOST)


@cython.cclass
class Sender:
    """The sending half of one QP (see the module docstring). ``psn``: the first PSN sent."""

    # In the order of the C struct: what every packet sent or acknowledged reads first, so a
    # sender gone cold since its last packet costs three cache lines rather than five; what
    # a message's start or end reads after.
    stats: MrcStats
    host: cython.longlong
    peer: cython.longlong
    peer_qpn: cython.longlong
    mtu: cython.longlong
    cc: CongestionControl
    psn0: cython.longlong
    _overdue: cython.bint
    good: list[list[Ev]]
    cur: Msg | None
    retx: deque[Seg]
    _tx: cython.longlong
    pipe: cython.longlong
    sent: TxQueue
    sent_on_plane: list[TxQueue]
    sent_on_qp: TxQueue
    _mpr_psns: cython.longlong
    unsent: cython.longlong
    outstanding: list[Seg | None]
    snd_nxt: cython.longlong
    una: cython.longlong
    outstanding_count: cython.longlong
    _sacked: int
    spray: Spray
    events: deque[TransportEvent]
    qpn: cython.longlong
    _ack_req_on_last: cython.bint
    _completions: cython.bint
    sendable: cython.bint
    queue: deque[Msg]
    _max_wimm: cython.longlong
    wimm_out: cython.longlong
    held: deque[Msg]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, paths: PathManager, cc: CongestionControl, psn: int) -> None:
        cfg = qp.config
        self.stats = qp.stats
        self.events = qp.events
        self.qpn = qp.qpn
        self.host = qp.host
        self.peer = qp.peer
        self.peer_qpn = qp.peer_qpn
        self.mtu = qp.mtu
        self.cc = cc
        self.psn0 = psn & _PSN_MASK
        self._ack_req_on_last = cfg.ack_req_on_last
        self._completions = cfg.sender_completions
        self._overdue = cfg.overdue_loss

        # ---- EV choice: the path manager's GOOD lists, one per plane, steered by the
        # per-EV evidence recovery feeds to the spray policy
        self.good = paths.good
        planes = len(paths.plane_evs)
        self.spray = Spray(qp, paths)

        # ---- messages and segments
        self.queue = deque()  # posted, not yet fully segmented (after cur)
        self.cur = None
        self.snd_nxt = 0  # next sequence number to assign
        #: the segments sent and not yet acknowledged, by sequence number: a ring, the slot
        #: of ``seq`` being ``seq & (len - 1)`` (the length is a power of two). The numbers
        #: outstanding lie in [una, snd_nxt), fewer than the ring's length (``poll`` doubles
        #: it before they would not), so each has a slot of its own, None once acknowledged.
        #: (A dict cost a boxed key and a hash operation per packet, each way.)
        self.outstanding = [None] * 64
        self.outstanding_count = 0  # segments in ``outstanding``
        self.retx = deque()
        #: False when poll() certainly has nothing (no new data, no retransmission, or
        #: failed): the driver polls idle QPs on every port kick, so that answer must be one
        #: attribute test.
        self.sendable = False
        self._tx = 0
        self.pipe = 0  # payload bytes in flight (INFLIGHT + SUSPECT)
        #: every transmission in send order: the RTO's queue (linked by ``Tx.next_sent``),
        #: and (with overdue evidence on) the queues of the plane's and the QP's overdue
        #: scopes (``next_plane``, ``next_qp``); loss recovery pops them
        self.sent = TxQueue(LINK_SENT)
        self.sent_on_plane = [TxQueue(LINK_PLANE) for _ in range(planes)]
        self.sent_on_qp = TxQueue(LINK_QP)
        #: the oldest unacknowledged sequence number, and bit i: seq ``una + i`` is known
        #: acknowledged (an ACK's ``take_acked`` moves both)
        self.una = 0
        self._sacked = 0
        self._mpr_psns = cfg.mpr * MPR_UNIT_PSNS
        self._max_wimm = cfg.max_wimm
        self.wimm_out = 0  # WRITEs with immediate posted and not yet completed
        self.held = deque()  # posts waiting for a WRITE-with-immediate slot
        #: bytes posted and not yet segmented: under one window, the QP is in its last
        #: window and skips the planes the spray declines (:meth:`.spray.Spray.declines`)
        self.unsent = 0

    @cython.ccall
    @cython.annotation_typing(True)
    def post(self, msg: Msg) -> None:
        """Queue a WRITE behind the ones already posted (held while ``max_wimm`` WRITEs with
        immediate are outstanding and this one, or one before it, has an immediate)."""
        self.unsent += msg.length
        if self.held or (msg.imm is not None and self.wimm_out >= self._max_wimm):
            self.held.append(msg)
            self.stats.wimm_waits += 1
            return
        self._admit(msg)

    def _admit(self, msg: Msg) -> None:
        if msg.imm is not None:
            self.wimm_out += 1
        if self.cur is None:
            self.cur = msg
        else:
            self.queue.append(msg)
        self.sendable = True

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def has_work(self) -> cython.bint:
        """Something is unacknowledged or not yet sent."""
        return self.outstanding_count > 0 or self.cur is not None or bool(self.held)

    @cython.ccall
    @cython.annotation_typing(True)
    def poll(self, now: cython.longlong, plane: cython.longlong) -> Any:  # Packet | None
        """The next DATA for the idle port of ``plane``, or None (cheap when nothing can go)."""
        seg: Seg
        if not self.sendable or plane >= len(self.good):
            return None
        good: list = self.good[plane]
        if not good:
            return None
        pipe: cython.longlong = self.pipe
        window: cython.longlong = self.cc.window
        if pipe and pipe >= window:
            return None
        unsent: cython.longlong = self.unsent
        if unsent < window and self.spray.declines(now, plane, unsent, window):
            return None  # the last window goes on the QP's faster planes
        retx = self.retx
        while retx:
            seg = retx.popleft()
            if seg.state == _LOST:
                if not retx and self.cur is None:
                    self.sendable = False
                return self._transmit(now, seg, plane, good, True)
        msg: Msg | None = self.cur
        if msg is None:
            self.sendable = False
            return None
        if self.snd_nxt - self.una >= self._mpr_psns:
            return None  # the PSN range is used up: wait for the oldest PSNs to be acked
        offset: cython.longlong = msg.next_offset
        length: cython.longlong = msg.length - offset
        if length > self.mtu:
            length = self.mtu
        seq: cython.longlong = self.snd_nxt
        if seq - self.una >= len(self.outstanding):
            self._grow_outstanding()
        seg = new_seg(seq, msg, offset, length)
        self.snd_nxt += 1
        msg.next_offset = offset + length
        self.unsent -= length
        msg.unacked += 1
        if msg.next_offset >= msg.length:
            msg.segmented = True
            if self.queue:
                self.cur = self.queue.popleft()
            else:
                self.cur = None
                self.sendable = bool(retx)
        ring: list = self.outstanding
        ring[seq & (len(ring) - 1)] = seg
        self.outstanding_count += 1
        return self._transmit(now, seg, plane, good, False)

    @cython.ccall
    @cython.annotation_typing(True)
    def take_acked(self, cum: cython.longlong, sack: Any,
                   sack_base: cython.longlong) -> list:  # list[Seg]
        """The segments an ACK newly acknowledges, taken out of ``outstanding``: every seq
        below ``cum`` (its cumulative point, not beyond ``snd_nxt``), and the new bits of its
        SACK window (``sack`` from PSN ``sack_base``); ``una`` moves to ``cum``."""
        seg: Seg
        seq: cython.longlong
        una: cython.longlong = self.una
        nxt: cython.longlong = self.snd_nxt
        out: list = self.outstanding
        mask: cython.longlong = len(out) - 1
        newly: list = []
        if cum > una:
            for seq in range(una, cum):
                seg = out[seq & mask]
                if seg is not None:
                    out[seq & mask] = None
                    self.outstanding_count -= 1
                    newly.append(seg)
            self._sacked >>= cum - una
            una = self.una = cum
        if sack and nxt > una:
            rel: cython.longlong = psn_diff(sack_base, (self.psn0 + una) & _PSN_MASK)
            if -_SACK_BITS < rel < nxt - una:
                window = sack << rel if rel >= 0 else sack >> -rel
                span: Any = nxt - una  # a Python int (compiled too): the mask may exceed 64 bits
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
                        self.outstanding_count -= 1
                        newly.append(seg)
        return newly

    @cython.ccall
    @cython.annotation_typing(True)
    def _grow_outstanding(self) -> None:
        """Double the ring of outstanding segments (each moves to its slot in the new one):
        the numbers in flight, ``una`` to ``snd_nxt``, are about to fill it."""
        seg: Seg | None
        ring: list = [None] * (2 * len(self.outstanding))
        mask: cython.longlong = len(ring) - 1
        for seg in self.outstanding:
            if seg is not None:
                ring[seg.seq & mask] = seg
        self.outstanding = ring

    @cython.ccall
    @cython.annotation_typing(True)
    def _transmit(self, now: cython.longlong, seg: Seg, plane: cython.longlong, good: list,
                  retx: cython.bint) -> Packet:
        e: Ev = self.spray.choose(plane, good, seg.ev if retx else None)
        self._tx += 1
        tx: cython.longlong = self._tx
        seg.ev = e
        seg.tx = tx
        seg.sent_ps = now
        seg.state = _INFLIGHT
        seg.sends += 1
        e.sent += 1
        e.last_sent = now
        # one record, appended to each queue of transmissions (see .records: TxQueue)
        t: Tx = new_tx(now, seg, tx)
        e.push(t)  # (an EV is its own FIFO)
        self.sent.push(t)
        if self._overdue:
            q: TxQueue = self.sent_on_plane[plane]
            q.push(t)
            self.sent_on_qp.push(t)
        length: cython.longlong = seg.length
        self.pipe += length
        stats: MrcStats = self.stats
        stats.data_sent += 1
        stats.bytes_sent += length
        msg: Msg = seg.msg
        offset: cython.longlong = seg.offset
        flags: cython.longlong = 0
        if offset + length == msg.length:
            flags = _FLAG_LAST | _FLAG_ACK_REQ if self._ack_req_on_last else _FLAG_LAST
        if retx:
            flags |= _FLAG_RETX | _FLAG_ACK_REQ
            stats.retransmissions += 1
        elif self.cur is None and not self.retx:
            flags |= _FLAG_ACK_REQ  # nothing queued behind it: do not wait for coalescing
        imm = 0
        if msg.imm is not None and flags & _FLAG_LAST:
            flags |= _FLAG_IMM  # immediate data rides on the last packet only, as in RoCE
            imm = msg.imm
        payload = msg.payload
        if payload is not None:
            data = payload[offset:offset + length]
            digest: cython.ulonglong = 0
        else:
            data = None
            digest = segment_digest(msg.key, offset, length)
        size: cython.longlong = _DATA_HEADER_BYTES + length + (
            _IMMDT_BYTES if flags & _FLAG_IMM else 0)
        return make_packet(_DATA, self.host, self.peer, self.peer_qpn,
                           (self.psn0 + seg.seq) & _PSN_MASK, e.ev, msg.msg_id, offset, length,
                           msg.length, flags, now, imm, 0, 0, 0, e.addr_hi, e.addr_lo, size, data,
                           digest, plane)

    @cython.ccall
    @cython.annotation_typing(True)
    def completed(self, now: cython.longlong, msg: Msg) -> None:
        """Every segment of ``msg`` was acknowledged (recovery tells)."""
        self.stats.messages_sent += 1
        if msg.imm is not None:
            self.wimm_out -= 1
            held = self.held
            while held and (held[0].imm is None or self.wimm_out < self._max_wimm):
                self._admit(held.popleft())
        if self._completions:
            self.events.append(SendCompleted(now, self.qpn, msg.msg_id, msg.length,
                                             msg.posted_ps, self.peer))
