"""RoCE RC used the way NCCL drives a P-port NIC: QPs pinned to paths, messages striped.

* ``ecmp_t1`` / ``t1_ranking``: which T1 a QP's single path crosses. A stable hash of
  (src, dst, qpn), as an ECMP switch hashes a RoCE flow (whose UDP source port derives from
  the QPN). Rendezvous (highest-random-weight) hashing over blake2b: as uniform as
  ``hash % n``, reproducible across processes (never Python's salted ``hash()``), and the
  ranking doubles as the re-convergence order of ``RcConfig.reroute_after_us``: when a T1
  goes away only the flows on it move, each to its own next choice.
* ``stripe``: NCCL spreads a transfer over all of a NIC's ports; each QP gets one contiguous
  chunk, chunk sizes as equal as possible, each chunk one RDMA WRITE.
* ``RcConnection``: the QPs of one direction of a host pair, ``qps_per_plane`` per plane. A
  message is complete only when every chunk is placed, and verified; any QP error fails the
  connection and every unfinished message, and (``abort_on_error``) stops the other QPs,
  as NCCL aborts the communicator on any QP error.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mrc.packet import data_bytes
from mrc.transport.base import EVENT_MESSAGE_COMPLETED, EVENT_QP_ERROR, TransportEvent
from mrc.transport.memory import expected_checksum, message_key, payload_sha256
from mrc.transport.rc_qp import RcConfig, RcQp
from topology.paths import address_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

#: Connection-level event: the connection failed because one of its QPs errored (detail:
#: reason, failed_qpn, failed_messages, aborted_qpns = the other QPs the abort stopped). Kept apart from EVENT_QP_ERROR so that
#: a driver logging both QP and connection events does not count one QP error twice.
EVENT_CONNECTION_FAILED = "connection_failed"

_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------- path hashing
def _weight(src: int, dst: int, qpn: int, t1: int) -> int:
    digest = hashlib.blake2b(struct.pack("<QQQQ", src, dst, qpn, t1), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def t1_ranking(spec: FabricSpec, src: int, dst: int, qpn: int) -> list[int]:
    """All T1s of a plane, most preferred first, for the flow (src, dst, qpn)."""
    return sorted(range(spec.t1), key=lambda t1: (-_weight(src, dst, qpn, t1), t1))


def ecmp_t1(spec: FabricSpec, src: int, dst: int, qpn: int) -> int:
    """The T1 an RC QP's path crosses: stable, deterministic, spread evenly over the T1s."""
    return max(range(spec.t1), key=lambda t1: (_weight(src, dst, qpn, t1), -t1))


def stripe(length: int, parts: int) -> list[tuple[int, int]]:
    """Split ``length`` bytes into ``parts`` contiguous (offset, size) chunks whose sizes
    differ by at most one byte; with fewer bytes than parts the last chunks are empty."""
    if parts <= 0:
        raise ValueError(f"parts must be positive, got {parts}")
    if length < 0:
        raise ValueError(f"length must not be negative, got {length}")
    base, extra = divmod(length, parts)
    out = []
    offset = 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((offset, size))
        offset += size
    return out


# ---------------------------------------------------------------------- building QPs
def rc_qp_pair(spec: FabricSpec, src: int, dst: int, qpn: int, plane: int,
               config: RcConfig | None = None, *, t1: int | None = None) -> tuple[RcQp, RcQp]:
    """Both endpoints of one RC QP from ``src`` to ``dst`` pinned to ``plane``.

    The T1 is ``ecmp_t1`` unless ``t1`` is given; each end gets the addresses towards the
    other for every T1 of the plane, in ``t1_ranking`` order (the re-convergence order), so
    ACKs return over the same plane and T1 as the data. Hosts under one T0 have a single path
    per plane (no T1): its EV uses T1 0, as in ``topology.paths``.
    """
    if src == dst:
        raise ValueError("an RC QP needs two different hosts")
    if not 0 <= plane < spec.planes:
        raise ValueError(f"plane {plane} outside 0..{spec.planes - 1}")
    if spec.t0_of(src) == spec.t0_of(dst):
        order = [0]
        t1 = 0
    else:
        order = t1_ranking(spec, src, dst, qpn)
        if t1 is not None:
            if not 0 <= t1 < spec.t1:
                raise ValueError(f"t1 {t1} outside 0..{spec.t1 - 1}")
            order.remove(t1)
            order.insert(0, t1)
    fwd = {k: address_for(spec, src, dst, plane, k) for k in order}
    rev = {k: address_for(spec, dst, src, plane, k) for k in order}
    return (RcQp(qpn, src, dst, plane, fwd, config=config),
            RcQp(qpn, dst, src, plane, rev, config=config))


def bdp_packets(spec: FabricSpec) -> float:
    """Bandwidth-delay product of one port in full DATA packets (the go-back-N cost unit)."""
    wire_bits = (data_bytes(spec.mtu_bytes) + ETHERNET_OVERHEAD_BYTES) * 8
    return spec.base_rtt_ps() * spec.link_bps / 1e12 / wire_bits


def rc_config_for(spec: FabricSpec, **overrides: Any) -> RcConfig:
    """An ``RcConfig`` for ``spec``: its MTU and a window of one BDP plus the ACK coalescing
    slack (so a healthy QP runs at line rate without queueing). Overrides win."""
    ack_every = int(overrides.get("ack_every", RcConfig().ack_every))
    window = math.ceil(bdp_packets(spec)) + ack_every + 2
    params: dict[str, Any] = {"mtu": spec.mtu_bytes, "window_pkts": window}
    params.update(overrides)
    return RcConfig(**params)


# ---------------------------------------------------------------------- the connection
@dataclass(slots=True)
class _Chunk:
    qpn: int
    offset: int
    length: int
    done: bool = False
    checksum: int = 0
    data: bytes | None = None


@dataclass(slots=True)
class _ConnMsg:
    msg_id: int
    length: int
    posted_ps: int
    chunks: dict[int, _Chunk]
    expected: int
    real_bytes: bool
    remaining: int = field(default=0)


class RcConnection:
    """One direction (``src`` -> ``dst``) of an NCCL-style RC connection (sans-IO).

    QPs are numbered ``qpn_base`` + i, ordered round by round over ``planes`` (default: all):
    QP i sits on plane ``planes[i % len(planes)]``; both ends of a QP use its number, so the
    two directions of a host pair need disjoint QPN ranges. Register ``endpoints()`` with the
    NICs;
    post with ``post_write``; drain ``events`` for EVENT_MESSAGE_COMPLETED (detail: msg_id,
    bytes, checksum, expected_checksum, ok, posted_ps, chunks[, data]) and
    EVENT_CONNECTION_FAILED. The QPs' own events still go to whoever drains their deques.
    """

    __slots__ = ("spec", "src", "dst", "qpn_base", "config", "planes", "requesters",
                 "responders", "events", "failed", "failure_reason", "abort_on_error",
                 "completed", "failed_messages", "_msgs", "_by_qpn")

    def __init__(self, spec: FabricSpec, src: int, dst: int, qpn_base: int, *,
                 qps_per_plane: int = 1, config: RcConfig | None = None,
                 planes: Sequence[int] | None = None, abort_on_error: bool = True) -> None:
        if qps_per_plane < 1:
            raise ValueError(f"qps_per_plane must be at least 1, got {qps_per_plane}")
        self.spec = spec
        self.src = src
        self.dst = dst
        self.qpn_base = qpn_base
        self.config = config or rc_config_for(spec)
        self.planes = list(range(spec.planes) if planes is None else planes)
        if not self.planes:
            raise ValueError("a connection needs at least one plane")
        self.abort_on_error = abort_on_error
        self.requesters: list[RcQp] = []
        self.responders: list[RcQp] = []
        self._by_qpn: dict[int, int] = {}
        for i in range(qps_per_plane * len(self.planes)):
            qpn = qpn_base + i
            req, resp = rc_qp_pair(spec, src, dst, qpn, self.planes[i % len(self.planes)],
                                   self.config)
            req.listener = self._on_qp_event
            resp.listener = self._on_qp_event
            self._by_qpn[qpn] = i
            self.requesters.append(req)
            self.responders.append(resp)
        self.events: deque[TransportEvent] = deque()
        self.failed = False
        self.failure_reason: str | None = None
        self.completed: dict[int, int] = {}  # msg_id -> completion time (ps)
        self.failed_messages: list[int] = []
        self._msgs: dict[int, _ConnMsg] = {}

    # ----------------------------------------------------------------- API
    def endpoints(self) -> list[tuple[int, RcQp]]:
        """(host, endpoint) for every QP end: requesters on ``src``, responders on ``dst``."""
        return ([(self.src, qp) for qp in self.requesters]
                + [(self.dst, qp) for qp in self.responders])

    @property
    def bytes_placed(self) -> int:
        """Unique payload bytes placed at ``dst`` over all QPs."""
        return sum(qp.bytes_placed for qp in self.responders)

    @property
    def pending(self) -> int:
        """Messages posted and neither complete nor failed."""
        return len(self._msgs)

    def post_write(self, now: int, msg_id: int, length: int, *,
                   payload: bytes | None = None) -> list[tuple[int, int, int]]:
        """Stripe one WRITE over the QPs; returns its chunks as (qpn, offset, length).

        On a failed connection nothing is posted and the message is recorded as failed
        (NCCL would have aborted already).
        """
        if length <= 0:
            raise ValueError(f"message {msg_id}: length must be positive, got {length}")
        if payload is not None and len(payload) != length:
            raise ValueError(f"message {msg_id}: payload has {len(payload)} bytes, not {length}")
        if msg_id in self._msgs or msg_id in self.completed:
            raise ValueError(f"message {msg_id} was already posted on this connection")
        if self.failed:
            self.failed_messages.append(msg_id)
            return []
        chunks: dict[int, _Chunk] = {}
        total = 0
        for qp, (offset, size) in zip(self.requesters, stripe(length, len(self.requesters)),
                                      strict=True):
            if size:
                chunks[qp.qpn] = _Chunk(qp.qpn, offset, size)
                if payload is None:
                    key = message_key(self.src, qp.qpn, msg_id, self.config.key_seed)
                    total = (total + expected_checksum(key, size, self.config.mtu)) & _MASK64
        expected = payload_sha256(payload) if payload is not None else total
        self._msgs[msg_id] = _ConnMsg(msg_id, length, now, chunks, expected,
                                      payload is not None, remaining=len(chunks))
        for qp in self.requesters:
            chunk = chunks.get(qp.qpn)
            if chunk is not None:
                part = None if payload is None else payload[chunk.offset:chunk.offset
                                                            + chunk.length]
                qp.post_write(now, msg_id, chunk.length, payload=part)
        return [(c.qpn, c.offset, c.length) for c in chunks.values()]

    # ----------------------------------------------------------------- QP events
    def _on_qp_event(self, event: TransportEvent) -> None:
        if event.kind == EVENT_MESSAGE_COMPLETED:
            self._chunk_done(event)
        elif event.kind == EVENT_QP_ERROR:
            self._fail(event)

    def _chunk_done(self, event: TransportEvent) -> None:
        detail = event.detail
        msg = self._msgs.get(int(detail["msg_id"]))  # type: ignore[call-overload]
        if msg is None or self.failed:
            return
        chunk = msg.chunks.get(event.qpn)
        if chunk is None or chunk.done:
            raise ValueError(f"QP {event.qpn} completed message {msg.msg_id} twice or "
                             f"without a chunk of it")
        chunk.done = True
        chunk.checksum = int(detail["checksum"])  # type: ignore[call-overload]
        chunk.data = detail.get("data")  # type: ignore[assignment]
        msg.remaining -= 1
        if msg.remaining:
            return
        del self._msgs[msg.msg_id]
        ordered = sorted(msg.chunks.values(), key=lambda c: c.offset)
        out: dict[str, object] = {"msg_id": msg.msg_id, "bytes": msg.length,
                                  "posted_ps": msg.posted_ps,
                                  "chunks": [(c.qpn, c.offset, c.length) for c in ordered]}
        if msg.real_bytes:
            data = b"".join(c.data or b"" for c in ordered)
            checksum = payload_sha256(data)
            out["data"] = data
        else:
            checksum = 0
            for c in ordered:
                checksum = (checksum + c.checksum) & _MASK64
        out["checksum"] = checksum
        out["expected_checksum"] = msg.expected
        out["ok"] = checksum == msg.expected
        self.completed[msg.msg_id] = event.time_ps
        self.events.append(TransportEvent(event.time_ps, EVENT_MESSAGE_COMPLETED,
                                          self.qpn_base, out))

    def _fail(self, event: TransportEvent) -> None:
        if self.failed:
            return
        now = event.time_ps
        self.failed = True
        reason = f"QP {event.qpn} error: {event.detail.get('reason', 'unknown')}"
        self.failure_reason = reason
        failed = sorted(self._msgs)
        self.failed_messages.extend(failed)
        self._msgs.clear()
        aborted = []
        if self.abort_on_error:
            for qp in self.requesters + self.responders:
                if not qp.failed:
                    qp.abort(now, f"connection aborted after {reason}")
                    if qp.qpn != event.qpn and qp.qpn not in aborted:
                        aborted.append(qp.qpn)
        self.events.append(TransportEvent(now, EVENT_CONNECTION_FAILED, event.qpn, {
            "reason": reason, "failed_qpn": event.qpn, "failed_messages": failed,
            "aborted_qpns": aborted}))
