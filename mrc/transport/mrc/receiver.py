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

from collections.abc import Sequence

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
    make_packet,
    psn_diff,
    split_address,
)
from mrc.transport.base import MessageCompleted, PathChoice
from mrc.transport.memory import ReceiveBuffer
from mrc.transport.mrc.config import MPR_UNIT_PSNS, QpCore
from mrc.transport.mrc.evmap import EvMap
from mrc.transport.mrc.records import Ev

_SACK_MASK = (1 << SACK_BITS) - 1
#: Arrival bitmaps below this (almost all: the reorder spraying makes is tens of PSNs) take
#: C integer arithmetic in the compiled build; wider ones stay Python ints.
_SMALL = 1 << 62
_BIT0 = 1  # a C u64 when compiled
_ONE = 1  # a Python int, compiled too


class Receiver:
    """The receiving half of one QP (see the module docstring).

    ``evs``: the QP's own EVs (a reply for an EV missing from the reply map falls back to
    one of them); ``reply_evs``: the path back for each EV the peer sprays with;
    ``peer_psn``: the first PSN expected."""

    __slots__ = ("qp", "stats", "events", "qpn", "host", "peer", "peer_qpn", "mtu",
                 "_ack_every", "_ack_delay", "_evs", "_reply", "_rcv_next", "_rcv_bits",
                 "_rx", "_rx_imm", "_cur", "_unrep", "ack_due", "_max_ahead")

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
        self._rcv_next = peer_psn & PSN_MASK  # unwrapped: equals the PSN modulo 2^24
        self._rcv_bits = 0  # bit i: seq _rcv_next + i arrived
        self._rx: dict[int, ReceiveBuffer] = {}
        self._rx_imm: dict[int, int] = {}
        #: the buffer of the message the last DATA placed into (most arrivals continue it:
        #: one comparison instead of a lookup)
        self._cur: ReceiveBuffer | None = None
        self._unrep: list[tuple[int, int, int]] = []  # arrivals not yet in an ACK: (seq, ev, ts)
        #: when the delayed ACK for a tail is due (None: nothing waits); read by the QP's timers
        self.ack_due: int | None = None

    def on_data(self, now: int, pkt: Packet) -> int:
        """Place, acknowledge or NACK one DATA packet; returns the new payload bytes placed
        (the QP adds them to its ``bytes_placed``)."""
        stats = self.stats
        nxt = self._rcv_next
        seq = nxt + psn_diff(pkt.psn, nxt & PSN_MASK)
        rel = seq - nxt
        bits = self._rcv_bits
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
            placed = buf.place(pkt.offset, pkt.length, pkt.digest, pkt.payload)
        except ValueError:
            stats.bad_packets += 1  # does not fit its message: never acknowledge it
            return 0
        stats.data_received += 1
        self._arrived(nxt, rel, bits)
        if pkt.flags & FLAG_IMM:
            self._rx_imm[pkt.msg_id] = pkt.imm
        if buf.placed == buf.length:
            self._complete(now, buf)
        unrep = self._unrep
        item = (seq, pkt.ev, pkt.ts)
        unrep.append(item)
        ecn = pkt.ecn == ECN_CE
        if ecn or pkt.flags & FLAG_ACK_REQ or len(unrep) >= self._ack_every:
            self._send_acks(now, item, ecn)
        elif self.ack_due is None:
            self.ack_due = now + self._ack_delay
        return placed

    def _arrived(self, nxt: int, rel: int, bits: int) -> None:
        """Record the arrival of seq ``nxt + rel`` in the bitmap ``bits`` (``_rcv_bits``)
        and move the cumulative point past the run of arrivals it now heads."""
        if rel < 62 and bits < _SMALL:
            small = bits
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

    def _complete(self, now: int, buf: ReceiveBuffer) -> None:
        """Every byte of ``buf``'s message is placed: the completion goes to the driver.
        Its ``posted_ps`` is the earliest send time among the message's packets (the
        receiver cannot know the post time; the sender's driver does)."""
        msg_id = buf.msg_id
        del self._rx[msg_id]
        self._cur = None
        self.stats.messages_received += 1
        self.events.append(MessageCompleted(
            now, self.qpn, msg_id, buf.length, buf.checksum(), buf.first_ts, self.peer,
            self.peer_qpn, self._rx_imm.pop(msg_id, None), buf.data()))

    def ack_timeout(self, now: int) -> None:
        """The delayed ACK is due: report the tail that waited for it."""
        if self._unrep:
            self._send_acks(now, self._unrep[-1], False)
        self.ack_due = None

    def _send_acks(self, now: int, trigger: tuple[int, int, int], ecn: bool) -> None:
        """ACK(s) covering every unreported arrival; the first echoes ``trigger``."""
        nxt = self._rcv_next
        bits = self._rcv_bits
        items = [u for u in self._unrep if u[0] >= nxt]
        self._unrep = []  # (a new list costs less than a method call on the old)
        self.ack_due = None
        if len(items) > 1:
            items.sort()
        if not items:
            top = nxt + bits.bit_length() - 1 if bits else nxt
            base = max(nxt, top - SACK_BITS + 1)
            self._emit_ack(nxt, base, bits, trigger, ecn)
            return
        first = True
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

    def _emit_ack(self, nxt: int, base: int, bits: int, echo: tuple[int, int, int],
                  ecn: bool) -> None:
        seq, ev, ts = echo
        path = self._reply_path(ev)
        shift = base - nxt  # (never negative)
        if bits < _SMALL:
            small = bits
            sack = small >> shift if shift < 62 else 0
        else:
            sack = (bits >> shift) & _SACK_MASK
        self.qp.control.append(make_packet(
            ACK, self.host, self.peer, self.peer_qpn, nxt & PSN_MASK, ev, 0, 0, 0, 0,
            FLAG_ECN_ECHO if ecn else 0, ts, 0, seq & PSN_MASK, base & PSN_MASK, sack, path.b,
            path.c, ACK_BYTES, None, 0, path.a))
        self.stats.acks_sent += 1

    def _send_nack(self, pkt: Packet) -> None:
        nxt = self._rcv_next
        bits = self._rcv_bits
        top = nxt + bits.bit_length() - 1 if bits else nxt
        base = max(nxt, top - SACK_BITS + 1)
        path = self._reply_path(pkt.ev)
        self.qp.control.append(make_packet(
            NACK, self.host, self.peer, self.peer_qpn, nxt & PSN_MASK, pkt.ev, 0, 0, 0, 0,
            FLAG_TRIM, pkt.ts, 0, pkt.psn, base & PSN_MASK, (bits >> (base - nxt)) & _SACK_MASK,
            path.b, path.c, ACK_BYTES, None, 0, path.a))
        self.stats.nacks_sent += 1

    def reply_probe(self, pkt: Packet) -> None:
        path = self._reply_path(pkt.ev)
        self.qp.control.append(make_packet(
            PROBE_REPLY, self.host, self.peer, self.peer_qpn, pkt.psn, pkt.ev, 0, 0, 0, 0, 0,
            pkt.ts, 0, 0, 0, 0, path.b, path.c, PROBE_BYTES, None, 0, path.a))
        self.stats.probe_replies_sent += 1

    def _reply_path(self, ev: int) -> EvMap:
        """The way back to the peer along the path of the peer's EV ``ev``: the reply map,
        holding (plane, address high, address low) in its ``a``, ``b``, ``c``."""
        reply = self._reply
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
