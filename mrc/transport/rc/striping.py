"""RoCE RC used the way NCCL drives a P-port NIC: one message striped over several QPs.

* ``stripe``: NCCL spreads a transfer over all of a NIC's ports; each QP gets one contiguous
  chunk, chunk sizes as equal as possible, each chunk one RDMA WRITE.
* ``StripedConnection``: the QPs of one direction of a host pair. A message is placed only
  when every chunk is placed, and verified (``StripedMessageCompleted``, the receiver's
  side); it completes at the sender when every chunk is acknowledged (``SendCompleted``, the
  sender's CQE, which comes after the placement). Any QP error fails the connection and
  every unfinished message, and (``abort_on_error``) stops the other QPs, as NCCL aborts
  the communicator on any QP error. ``post_write(..., qps=...)`` stripes a message over a
  subset of the QPs (NCCL_IB_SPLIT_DATA_ON_QPS=0: one QP of each port per message).

Which path each QP takes is the fabric's business: the layer that knows the fabric builds the
QPs (``mrc.stack.rc_connection``) and hands them over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from mrc.transport.base import (
    ConnectionFailed,
    MessageCompleted,
    QpError,
    SendCompleted,
    StripedMessageCompleted,
    TransportEvent,
)
from mrc.transport.memory import expected_checksum, message_key, payload_sha256
from mrc.transport.rc.qp import RcQp

_MASK64 = (1 << 64) - 1


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
    unacked: int = field(default=0)
    placed: bool = field(default=False)


class StripedConnection:
    """One direction (``src`` -> ``dst``) of an NCCL-style RC connection (sans-IO).

    ``pairs`` are the (requester, responder) ends of its QPs, in striping order; all share
    one ``RcConfig``, and the two directions of a host pair need disjoint QPN ranges (events
    of the connection itself carry ``qpn_base``). Register ``endpoints()`` with the NICs;
    post with ``post_write``; drain ``events`` for ``StripedMessageCompleted`` (placed and
    checked), ``SendCompleted`` (acknowledged, with ``ok``) and ``ConnectionFailed``
    (:mod:`mrc.transport.base`). The QPs' own events still go to whoever drains their deques.
    """

    __slots__ = ("src", "dst", "qpn_base", "config", "requesters", "responders", "events",
                 "failed", "failure_reason", "abort_on_error", "completed", "failed_messages",
                 "_msgs")

    def __init__(self, src: int, dst: int, qpn_base: int, pairs: Sequence[tuple[RcQp, RcQp]],
                 *, abort_on_error: bool = True) -> None:
        if not pairs:
            raise ValueError("a connection needs at least one QP")
        self.src = src
        self.dst = dst
        self.qpn_base = qpn_base
        self.config = pairs[0][0].config
        if any(qp.config != self.config for pair in pairs for qp in pair):
            raise ValueError("every QP of a connection must use the same RcConfig")
        self.abort_on_error = abort_on_error
        self.requesters: list[RcQp] = []
        self.responders: list[RcQp] = []
        for req, resp in pairs:
            req.listener = self._on_qp_event
            resp.listener = self._on_qp_event
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
                   payload: bytes | None = None,
                   qps: list[int] | None = None) -> list[tuple[int, int, int]]:
        """Stripe one WRITE over the QPs (``qps``: those QPNs only, in order); returns its
        chunks as (qpn, offset, length).

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
        using = self.requesters if qps is None else [q for q in self.requesters
                                                      if q.qpn in qps]
        if not using:
            raise ValueError(f"message {msg_id}: no QP of this connection among {qps}")
        for qp, (offset, size) in zip(using, stripe(length, len(using)), strict=True):
            if size:
                chunks[qp.qpn] = _Chunk(qp.qpn, offset, size)
                if payload is None:
                    key = message_key(self.src, qp.qpn, msg_id, self.config.key_seed)
                    total = (total + expected_checksum(key, size, self.config.mtu)) & _MASK64
        expected = payload_sha256(payload) if payload is not None else total
        self._msgs[msg_id] = _ConnMsg(msg_id, length, now, chunks, expected,
                                      payload is not None, remaining=len(chunks),
                                      unacked=len(chunks))
        for qp in self.requesters:
            chunk = chunks.get(qp.qpn)
            if chunk is not None:
                part = None if payload is None else payload[chunk.offset:chunk.offset
                                                            + chunk.length]
                qp.post_write(now, msg_id, chunk.length, payload=part)
        return [(c.qpn, c.offset, c.length) for c in chunks.values()]

    # ----------------------------------------------------------------- QP events
    def _on_qp_event(self, event: TransportEvent) -> None:
        if isinstance(event, MessageCompleted):
            self._chunk_done(event)
        elif isinstance(event, SendCompleted):
            self._chunk_acked(event)
        elif isinstance(event, QpError):
            self._fail(event)

    def _chunk_acked(self, event: SendCompleted) -> None:
        """A requester's chunk was acknowledged; the last one is the message's CQE."""
        msg = self._msgs.get(event.msg_id)
        if msg is None or self.failed or event.qpn not in msg.chunks:
            return
        msg.unacked -= 1
        if msg.unacked or not msg.placed:
            return
        del self._msgs[msg.msg_id]
        self.events.append(SendCompleted(event.time_ps, self.qpn_base, msg.msg_id, msg.length,
                                         msg.posted_ps, ok=msg.placed))

    def _chunk_done(self, event: MessageCompleted) -> None:
        msg = self._msgs.get(event.msg_id)
        if msg is None or self.failed:
            return
        chunk = msg.chunks.get(event.qpn)
        if chunk is None or chunk.done:
            raise ValueError(f"QP {event.qpn} completed message {msg.msg_id} twice or "
                             f"without a chunk of it")
        chunk.done = True
        chunk.checksum = event.checksum
        chunk.data = event.data
        msg.remaining -= 1
        if msg.remaining:
            return
        msg.placed = True
        ordered = sorted(msg.chunks.values(), key=lambda c: c.offset)
        data: bytes | None = None
        if msg.real_bytes:
            data = b"".join(c.data or b"" for c in ordered)
            checksum = payload_sha256(data)
        else:
            checksum = 0
            for c in ordered:
                checksum = (checksum + c.checksum) & _MASK64
        self.completed[msg.msg_id] = event.time_ps
        self.events.append(StripedMessageCompleted(
            event.time_ps, self.qpn_base, msg.msg_id, msg.length, checksum, msg.posted_ps,
            data=data, chunks=[(c.qpn, c.offset, c.length) for c in ordered],
            expected_checksum=msg.expected, ok=checksum == msg.expected))
        if not msg.unacked:  # every chunk was acknowledged already (not in order: a stray)
            del self._msgs[msg.msg_id]
            self.events.append(SendCompleted(event.time_ps, self.qpn_base, msg.msg_id,
                                             msg.length, msg.posted_ps, ok=True))

    def _fail(self, event: QpError) -> None:
        if self.failed:
            return
        now = event.time_ps
        self.failed = True
        reason = f"QP {event.qpn} error: {event.reason}"
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
        self.events.append(ConnectionFailed(now, event.qpn, reason, event.qpn, failed, aborted))
