"""The receiver of an MRC QP: placement, ACK/SACK/NACK, probe replies.

Places each segment exactly once (``ReceiveBuffer``) and acknowledges with a cumulative PSN
(``psn`` = next expected: every PSN before it arrived) plus a 64-bit SACK window
``[sack_base, sack_base + 64)`` ending at the newest arrival being reported. ACKs are
coalesced every ``ack_every`` packets, sent at once on ECN, ack-request or a duplicate, and
after ``ack_delay_ps`` for a tail; every arrival is reported by at least one ACK (a burst
that does not fit one window gets several ACKs). A trimmed DATA gets an immediate
NACK(FLAG_TRIM). Each reply (ACK, NACK, PROBE_REPLY) travels back along the plane/T1 of the
EV it echoes: the reply map names the path back for each of the peer's EVs.

PSNs are unwrapped to unbounded sequence numbers (``rcv_next`` equals the PSN modulo 2^24),
so the 24-bit wrap is a conversion at the edges.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from mrc.ev import ev_path_bits, ev_plane
from mrc.packet import (
    ACK,
    ACK_BYTES,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_IMM,
    FLAG_TRIM,
    NACK,
    PROBE_BYTES,
    PROBE_REPLY,
    PSN_MASK,
    SACK_BITS,
    Packet,
    split_address,
)
from mrc.transport.base import MessageCompleted, PathChoice, TransportEvent
from mrc.transport.memory import ReceiveBuffer
from mrc.transport.mrc.config import MPR_UNIT_PSNS, MrcStats, QpCore
from mrc.transport.mrc.evmap import EvMap
from mrc.transport.mrc.records import Ev

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C functions, not their Python wrappers
    from cython.cimports.mrc.packet import make_packet, psn_diff  # type: ignore[import-not-found]
else:
    from mrc.packet import make_packet, psn_diff

# typed copies (compiled, C integers; not SACK_BITS: 1 << SACK_BITS needs 65 bits)
_ACK = cython.declare(cython.longlong, ACK)
_ACK_BYTES = cython.declare(cython.longlong, ACK_BYTES)
_ECN_CE = cython.declare(cython.longlong, ECN_CE)
_FLAG_ACK_REQ = cython.declare(cython.longlong, FLAG_ACK_REQ)
_FLAG_ECN_ECHO = cython.declare(cython.longlong, FLAG_ECN_ECHO)
_FLAG_IMM = cython.declare(cython.longlong, FLAG_IMM)
_FLAG_TRIM = cython.declare(cython.longlong, FLAG_TRIM)
_NACK = cython.declare(cython.longlong, NACK)
_PROBE_BYTES = cython.declare(cython.longlong, PROBE_BYTES)
_PROBE_REPLY = cython.declare(cython.longlong, PROBE_REPLY)
_PSN_MASK = cython.declare(cython.longlong, PSN_MASK)
_SACK_MASK = (1 << SACK_BITS) - 1
#: Arrival bitmaps below this (almost all: the reorder spraying makes is tens of PSNs) take
#: C integer arithmetic in the compiled build; wider ones stay Python ints.
_SMALL = cython.declare(object, 1 << 62)  # (a Python int: compared with the bitmap)
_BIT0 = cython.declare(cython.ulonglong, 1)
_ONE = cython.declare(object, 1)  # a Python int, compiled too


@cython.cclass
class Receiver:
    """The receiving half of one QP (see the module docstring).

    ``evs``: the QP's own EVs (a reply for an EV missing from the reply map falls back to
    one of them); ``reply_evs``: the path back for each EV the peer sprays with;
    ``peer_psn``: the first PSN expected."""

    # What a data packet and its ACK read first, in the C struct's first cache lines; what a
    # message's start or a probe reads after.
    qp: QpCore
    stats: MrcStats
    host: cython.longlong
    peer: cython.longlong
    peer_qpn: cython.longlong
    _ack_every: cython.longlong
    _ack_delay: cython.longlong
    _reply: EvMap
    _rcv_next: cython.longlong
    _rcv_bits: int
    _cur: ReceiveBuffer | None
    _unrep: list[tuple[int, int, int]]  # arrivals not yet in an ACK: (seq, ev, ts)
    ack_due: int | None
    _max_ahead: cython.longlong
    events: deque[TransportEvent]
    qpn: cython.longlong
    mtu: cython.longlong
    _evs: list[Ev]
    _rx: dict[int, ReceiveBuffer]
    _rx_imm: dict[int, int]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, evs: list[Ev], reply_evs: Sequence[PathChoice],
                 peer_psn: int) -> None:
        self.qp = qp
        cfg = qp.config
        self.stats = qp.stats
        self.events = qp.events
        self.qpn = qp.qpn
        self.host = qp.host
        self.peer = qp.peer
        self.peer_qpn = qp.peer_qpn
        self.mtu = qp.mtu
        self._ack_every = cfg.ack_every
        self._ack_delay = cfg.ack_delay_ps
        #: mpr_dest: the PSN range tracked beyond the cumulative point; DATA further ahead is
        #: dropped (and counted), never acknowledged
        self._max_ahead = cfg.mpr_dest * MPR_UNIT_PSNS
        self._evs = evs
        #: the peer's EV -> (plane, address halves) back along that EV's path (the halves as
        #: a packet carries its destination: no 128-bit arithmetic per reply)
        self._reply = EvMap(len(reply_evs))
        for c in reply_evs:
            hi, lo = split_address(c.address)
            self._reply.put(c.ev, c.plane, hi, lo)
        self._rcv_next = peer_psn & _PSN_MASK  # unwrapped: equals the PSN modulo 2^24
        self._rcv_bits = 0  # bit i: seq _rcv_next + i arrived
        self._rx = {}
        self._rx_imm = {}
        #: the buffer of the message the last DATA placed into (most arrivals continue it:
        #: one comparison instead of a lookup)
        self._cur = None
        self._unrep = []
        #: when the delayed ACK for a tail is due (None: nothing waits); read by the QP's timers
        self.ack_due = None

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def on_data(self, now: cython.longlong, pkt: Packet) -> cython.longlong:
        """Place, acknowledge or NACK one DATA packet; returns the new payload bytes placed
        (the QP adds them to its ``bytes_placed``)."""
        seen: cython.bint
        small: cython.ulonglong
        buf: ReceiveBuffer | None
        stats: MrcStats = self.stats
        nxt: cython.longlong = self._rcv_next
        seq: cython.longlong = nxt + psn_diff(pkt.psn, nxt & _PSN_MASK)
        rel: cython.longlong = seq - nxt
        bits: object = self._rcv_bits
        if rel < 0:
            seen = True
        elif bits < _SMALL:
            small = bits
            seen = rel < 62 and (small >> rel) & 1 != 0
        else:
            seen = (bits >> rel) & 1 != 0
        if pkt.trimmed:
            stats.trimmed_received += 1
            if seen:  # an earlier copy was placed: an ACK says so
                self._send_acks(now, (seq, pkt.ev, pkt.ts), False)
            else:
                self._send_nack(pkt)
            return 0
        if seen:
            stats.duplicates += 1
            self._send_acks(now, (seq, pkt.ev, pkt.ts), False)
            return 0
        if rel >= self._max_ahead:
            stats.beyond_mpr += 1
            return 0
        buf = self._cur
        if buf is None or buf.msg_id != pkt.msg_id:
            buf = self._rx.get(pkt.msg_id)
            if buf is None:
                if pkt.msg_len <= 0:
                    stats.bad_packets += 1
                    return 0
                buf = ReceiveBuffer(pkt.msg_id, pkt.msg_len, self.mtu, pkt.payload is not None,
                                    pkt.ts)
                self._rx[pkt.msg_id] = buf
            self._cur = buf
        if pkt.ts < buf.first_ts:
            buf.first_ts = pkt.ts
        try:
            placed: cython.longlong = buf.place(pkt.offset, pkt.length, pkt.digest, pkt.payload)
        except ValueError:
            stats.bad_packets += 1  # does not fit its message: never acknowledge it
            return 0
        stats.data_received += 1
        self._arrived(nxt, rel, bits)
        if pkt.flags & _FLAG_IMM:
            self._rx_imm[pkt.msg_id] = pkt.imm
        if buf.placed == buf.length:
            self._complete(now, buf)
        unrep: list = self._unrep
        item: tuple = (seq, pkt.ev, pkt.ts)
        unrep.append(item)
        ecn: cython.bint = pkt.ecn == _ECN_CE
        if ecn or pkt.flags & _FLAG_ACK_REQ or len(unrep) >= self._ack_every:
            self._send_acks(now, item, ecn)
        elif self.ack_due is None:
            self.ack_due = now + self._ack_delay
        return placed

    @cython.ccall
    @cython.annotation_typing(True)
    def _arrived(self, nxt: cython.longlong, rel: cython.longlong, bits: Any) -> None:
        """Record the arrival of seq ``nxt + rel`` in the bitmap ``bits`` (``_rcv_bits``)
        and move the cumulative point past the run of arrivals it now heads."""
        run: cython.longlong
        if rel < 62 and bits < _SMALL:
            small: cython.ulonglong = bits
            small |= _BIT0 << rel  # (a 64-bit one: a C literal 1 is 32 bits wide)
            if rel == 0:
                run = 0
                while small & 1:
                    small >>= 1
                    run += 1
                self._rcv_next = nxt + run
            self._rcv_bits = small
        else:
            bits |= _ONE << rel  # (Python ints: the bitmap may be wider than 64 bits)
            if rel == 0:
                run = (~bits & (bits + 1)).bit_length() - 1
                bits >>= run
                self._rcv_next = nxt + run
            self._rcv_bits = bits

    @cython.ccall
    @cython.annotation_typing(True)
    def _complete(self, now: cython.longlong, buf: ReceiveBuffer) -> None:
        """Every byte of ``buf``'s message is placed: the completion goes to the driver.
        Its ``posted_ps`` is the earliest send time among the message's packets (the
        receiver cannot know the post time; the sender's driver does)."""
        msg_id: Any = buf.msg_id
        del self._rx[msg_id]
        self._cur = None
        self.stats.messages_received += 1
        self.events.append(MessageCompleted(
            now, self.qpn, msg_id, buf.length, buf.checksum(), buf.first_ts, self.peer,
            self.peer_qpn, self._rx_imm.pop(msg_id, None), buf.data()))

    @cython.ccall
    @cython.annotation_typing(True)
    def ack_timeout(self, now: cython.longlong) -> None:
        """The delayed ACK is due: report the tail that waited for it."""
        if self._unrep:
            self._send_acks(now, self._unrep[-1], False)
        self.ack_due = None

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_acks(self, now: cython.longlong, trigger: tuple, ecn: cython.bint) -> None:
        """ACK(s) covering every unreported arrival; the first echoes ``trigger``."""
        top: cython.longlong
        base: cython.longlong
        k: cython.Py_ssize_t
        echo: tuple
        nxt: cython.longlong = self._rcv_next
        bits = self._rcv_bits
        items: list = [u for u in self._unrep if u[0] >= nxt]
        self._unrep = []  # (a new list costs less than a method call on the old)
        self.ack_due = None
        if len(items) > 1:
            items.sort()
        if not items:
            top = nxt + bits.bit_length() - 1 if bits else nxt
            base = max(nxt, top - SACK_BITS + 1)
            self._emit_ack(nxt, base, bits, trigger, ecn)
            return
        first: cython.bint = True
        while items:
            base = max(nxt, items[-1][0] - SACK_BITS + 1)
            k = len(items)
            while k and items[k - 1][0] >= base:
                k -= 1
            # the first ACK echoes the trigger; extra ones echo the newest packet they cover
            echo = trigger if first else items[-1]
            del items[k:]
            self._emit_ack(nxt, base, bits, echo, ecn and first)
            first = False

    @cython.ccall
    @cython.annotation_typing(True)
    def _emit_ack(self, nxt: cython.longlong, base: cython.longlong, bits: Any, echo: tuple,
                  ecn: cython.bint) -> None:
        seq: cython.longlong
        ev: cython.longlong
        ts: cython.longlong
        seq, ev, ts = echo
        path: EvMap = self._reply_path(ev)
        shift: cython.longlong = base - nxt  # (never negative)
        if bits < _SMALL:
            small: cython.ulonglong = bits
            sack = small >> shift if shift < 62 else 0
        else:
            sack = (bits >> shift) & _SACK_MASK
        self.qp.control.append(make_packet(
            _ACK, self.host, self.peer, self.peer_qpn, nxt & _PSN_MASK, ev, 0, 0, 0, 0,
            _FLAG_ECN_ECHO if ecn else 0, ts, 0, seq & _PSN_MASK, base & _PSN_MASK, sack, path.b,
            path.c, _ACK_BYTES, None, 0, path.a))
        self.stats.acks_sent += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_nack(self, pkt: Packet) -> None:
        nxt: cython.longlong = self._rcv_next
        bits = self._rcv_bits
        top: cython.longlong = nxt + bits.bit_length() - 1 if bits else nxt
        base: cython.longlong = max(nxt, top - SACK_BITS + 1)
        path: EvMap = self._reply_path(pkt.ev)
        self.qp.control.append(make_packet(
            _NACK, self.host, self.peer, self.peer_qpn, nxt & _PSN_MASK, pkt.ev, 0, 0, 0, 0,
            _FLAG_TRIM, pkt.ts, 0, pkt.psn, base & _PSN_MASK, (bits >> (base - nxt)) & _SACK_MASK,
            path.b, path.c, _ACK_BYTES, None, 0, path.a))
        self.stats.nacks_sent += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def reply_probe(self, pkt: Packet) -> None:
        path: EvMap = self._reply_path(pkt.ev)
        self.qp.control.append(make_packet(
            _PROBE_REPLY, self.host, self.peer, self.peer_qpn, pkt.psn, pkt.ev, 0, 0, 0, 0, 0,
            pkt.ts, 0, 0, 0, 0, path.b, path.c, _PROBE_BYTES, None, 0, path.a))
        self.stats.probe_replies_sent += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _reply_path(self, ev: cython.longlong) -> EvMap:
        """The way back to the peer along the path of the peer's EV ``ev``: the reply map,
        holding (plane, address high, address low) in its ``a``, ``b``, ``c``."""
        reply: EvMap = self._reply
        if not reply.find(ev):
            self._reply_fallback(ev)
        return reply

    def _reply_fallback(self, ev: int) -> None:
        """Not in the map: same plane and T1 from our own set, else any EV of that plane
        (added to the map, whose values are then that path)."""
        self.stats.reply_fallbacks += 1
        low = ev_path_bits(ev)
        plane = ev_plane(ev)
        match = next((e for e in self._evs if ev_path_bits(e.ev) == low), None)
        if match is None:
            match = next((e for e in self._evs if e.plane == plane), self._evs[0])
        hi, lo = split_address(match.address)
        self._reply.put(ev, match.plane, hi, lo)
