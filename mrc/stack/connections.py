"""Connections: an application's WRITEs from one host to another, over one transport, with
verbs completion semantics.

A :class:`Connection` is what a workload writes on (``write``). Like ``ib_write_bw`` and
NCCL see a verbs QP, a WRITE has two completions:

* the **sender's CQE** (``on_complete``): every byte was *acknowledged* by the responder.
  That is when a send work request leaves the send queue, so ``tx_depth`` bounds what a
  sender has posted and not yet seen complete, and ``ib_write_bw`` reposts on it;
* the **receiver's completion** (``on_placed``): every byte was *placed* in the
  responder's memory and verified (a WRITE with immediate completes there; the lab uses
  it to chain data dependencies, e.g. a ring all-reduce step).

The placement comes first (the ACK that completes the sender is sent after the data is
placed); the sender's CQE carries the placement's verdict (``ok``: the bytes were verified,
False on a checksum mismatch or a connection error, when both callbacks get False).

Several QPs per connection (``NCCL_IB_QPS_PER_CONNECTION``) work the same way for both
transports: with ``NCCL_IB_SPLIT_DATA_ON_QPS=1`` each message is split into one chunk per
QP (per QP of each plane for RC, which NCCL drives as one device per NIC port), otherwise
each message goes whole to the next QP in turn (RC: the next QP of every plane). A message
completes when all its chunks have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mrc.nic.driver import NicDriver
from mrc.stack import transport_params
from mrc.stack.evset import build_ev_set
from mrc.stack.rc_connection import RcConnection
from mrc.transport.base import (
    ConnectionFailed,
    MessageCompleted,
    QpError,
    QueuePair,
    SendCompleted,
    StripedMessageCompleted,
    TransportEvent,
)
from mrc.transport.mrc import MrcQueuePair as MrcQp
from mrc.transport.rc.striping import stripe
from topology.spec import FabricSpec

Completion = Callable[[int, bool], None]


class _Clock(Protocol):
    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None: ...


class StackApi(Protocol):
    """What a connection uses of the stack that opened it (:class:`mrc.stack.stack.Stack`)."""

    @property
    def spec(self) -> FabricSpec: ...

    @property
    def seed(self) -> int: ...

    @property
    def transport_name(self) -> str: ...

    @property
    def sim(self) -> _Clock: ...

    @property
    def nics(self) -> Sequence[NicDriver]: ...

    def allocate_qpn(self, count: int = 1) -> int: ...

    def register(self, conn: Connection, qp: Any, planes: Iterable[int],
                 host: int | None = None) -> None: ...

    def note_event(self, now_ps: int, kind: str, target: str, **detail: Any) -> None: ...


@dataclass(slots=True)
class _Pending:
    """One posted WRITE until its sender CQE."""

    size: int
    posted_ps: int
    on_complete: Completion | None
    on_placed: Completion | None
    placed: bool | None = None  # the placement's verdict once every chunk is placed
    chunks_placed: int = 0
    chunks_acked: int = 0
    chunks: int = 1
    ok: bool = True
    expected: dict[int, int] = field(default_factory=dict)  # qpn -> checksum of its chunk


def _fail_later(arg: tuple[Completion, int]) -> None:
    callback, now = arg
    callback(now, False)


class Connection:
    """Writes from ``src`` to ``dst`` over one transport; completions verified end to end
    (see the module docstring)."""

    def __init__(self, stack: StackApi, kind: str, src: int, dst: int) -> None:
        self.stack = stack
        self.kind = kind
        #: the lab transport it belongs to (several share one stack in a mixed run)
        self.transport = getattr(stack, "opening_transport", None) or stack.transport_name
        self.src = src
        self.dst = dst
        self.failed = False
        self.failed_at_ps: int | None = None
        self.failure_reason: str | None = None
        self.messages_ok = 0
        self.messages_corrupt = 0
        self._next_msg = 1
        self._pending: dict[int, _Pending] = {}

    # subclasses: _post(now, msg_id, size) and the event plumbing
    def write(self, now: int, size: int, on_complete: Completion | None = None, *,
              on_placed: Completion | None = None) -> int:
        """Post an RDMA WRITE of ``size`` bytes. ``on_complete(now_ps, ok)``: the sender's
        CQE (acknowledged); ``on_placed(now_ps, ok)``: placed and verified at ``dst``."""
        msg_id = self._next_msg
        self._next_msg += 1
        if self.failed:
            for callback in (on_placed, on_complete):
                if callback is not None:
                    self.stack.sim.at(now, _fail_later, (callback, now))
            return msg_id
        self._pending[msg_id] = _Pending(size, now, on_complete, on_placed)
        self._post(now, msg_id, size)
        return msg_id

    def _post(self, now: int, msg_id: int, size: int) -> None:
        raise NotImplementedError

    def on_event(self, event: TransportEvent, qp: Any) -> None:
        raise NotImplementedError

    def qps(self) -> list[Any]:
        raise NotImplementedError

    @property
    def bytes_placed(self) -> int:
        """Unique payload bytes placed at the destination so far."""
        raise NotImplementedError

    def _chunk_placed(self, now: int, msg_id: int, ok: bool) -> None:
        """One chunk of ``msg_id`` was placed (``ok``: verified)."""
        entry = self._pending.get(msg_id)
        if entry is None or entry.placed is not None:
            return
        entry.ok = entry.ok and ok
        entry.chunks_placed += 1
        if entry.chunks_placed == entry.chunks:
            entry.placed = entry.ok
            if entry.on_placed is not None:
                entry.on_placed(now, entry.ok)

    def _chunk_acked(self, now: int, msg_id: int) -> None:
        """One chunk of ``msg_id`` was acknowledged; the last one is the sender's CQE."""
        entry = self._pending.get(msg_id)
        if entry is None:
            return
        entry.chunks_acked += 1
        if entry.chunks_acked < entry.chunks:
            return
        del self._pending[msg_id]
        ok = entry.placed is True  # acknowledged but never seen placed: not verified
        if ok:
            self.messages_ok += 1
        else:
            self.messages_corrupt += 1
        if entry.on_complete is not None:
            entry.on_complete(now, ok)

    def _failed(self, now: int, reason: str) -> None:
        if self.failed:
            return
        self.failed = True
        self.failed_at_ps = now
        self.failure_reason = reason
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if entry.placed is None and entry.on_placed is not None:
                entry.on_placed(now, False)
            if entry.on_complete is not None:
                entry.on_complete(now, False)

    @property
    def pending(self) -> int:
        """WRITEs posted whose sender CQE has not come yet."""
        return len(self._pending)

    def abort(self, now: int, reason: str = "aborted") -> None:
        """Tear the connection down (the application gave up, as NCCL does on any QP error):
        its QPs leave the NICs at once and unfinished messages complete with ok=False."""
        for qp in self.qps():
            for nic in self.stack.nics:
                if nic.holds(qp):
                    nic.remove(qp)
        self._failed(now, reason)


class MrcConnection(Connection):
    """``qps_per_connection`` MRC QP pairs; each source QP sprays over its EV profile."""

    def __init__(self, stack: StackApi, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, "mrc", src, dst)
        spec = stack.spec
        conn = transport_params.mrc_connection(spec, params,
                                               f"transport.{stack.transport_name}")
        cfg = self.config = conn.config
        self.split = conn.split
        self.profile = conn.profile
        fwd = build_ev_set(spec, src, dst, cfg.ev_count, stack.seed, conn.profile)
        rev = build_ev_set(spec, dst, src, cfg.ev_count, stack.seed, conn.profile)
        self.pairs: list[tuple[MrcQp, MrcQp]] = []
        for _ in range(conn.qps):
            qa, qb = stack.allocate_qpn(), stack.allocate_qpn()
            sender = MrcQp(qa, src, dst, qb, spec.mtu_bytes, fwd, config=cfg,
                           key_seed=stack.seed)
            receiver = MrcQp(qb, dst, src, qa, spec.mtu_bytes, rev, config=cfg,
                             key_seed=stack.seed)
            self.pairs.append((sender, receiver))
            stack.register(self, sender, range(spec.planes))
            # the far end only answers (ACK/NACK/PROBE_REPLY go out as control packets), so
            # its ports never need to poll it for data
            stack.register(self, receiver, ())
        self.sender, self.receiver = self.pairs[0]
        self._senders = {s.qpn: s for s, _ in self.pairs}
        self._receivers = {r.qpn: (r, s) for s, r in self.pairs}
        self._turn = 0

    def _payload(self, qp: MrcQp, msg_id: int, size: int) -> bytes | None:
        """The bytes of one chunk (None in simulation; the live runtime sends real ones)."""
        return None

    def _post(self, now: int, msg_id: int, size: int) -> None:
        entry = self._pending[msg_id]
        if self.split and len(self.pairs) > 1:
            chunks = [(s, n) for (s, _), (_, n) in zip(self.pairs, stripe(size, len(self.pairs)),
                                                      strict=True) if n]
        else:
            chunks = [(self.pairs[self._turn][0], size)]
            self._turn = (self._turn + 1) % len(self.pairs)
        entry.chunks = len(chunks)
        nic = self.stack.nics[self.src]
        for qp, n in chunks:
            payload = self._payload(qp, msg_id, n)
            entry.expected[qp.qpn] = qp.expected_checksum(msg_id, n, payload)
            nic.post(qp, msg_id, n, payload)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        if isinstance(event, MessageCompleted):
            pair = self._receivers.get(qp.qpn)
            if pair is None or pair[0] is not qp:
                return
            msg_id = event.msg_id
            entry = self._pending.get(msg_id)
            if entry is None:
                return
            expected = entry.expected.get(pair[1].qpn)
            ok = expected is not None and event.checksum == expected
            if ok and self._needs_bytes(entry):
                ok = isinstance(event.data, bytes | bytearray)
            self._chunk_placed(event.time_ps, msg_id, ok)
        elif isinstance(event, SendCompleted):
            if self._senders.get(qp.qpn) is qp:
                self._chunk_acked(event.time_ps, event.msg_id)
        elif isinstance(event, QpError):
            self._failed(event.time_ps, f"QP {qp.qpn} error: {event.reason}")

    def _needs_bytes(self, entry: _Pending) -> bool:
        """Whether the chunks carried real bytes (then the receiver must hand them over)."""
        return False

    def qps(self) -> list[MrcQp]:
        return [qp for pair in self.pairs for qp in pair]

    @property
    def bytes_placed(self) -> int:
        return sum(int(receiver.bytes_placed) for _, receiver in self.pairs)


class RcConnectionAdapter(Connection):
    """NCCL-style RC: ``qps_per_plane`` QPs on every plane, each pinned to one ECMP path."""

    def __init__(self, stack: StackApi, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, "rc", src, dst)
        spec = stack.spec
        cfg, per_plane, split = transport_params.rc_connection(
            spec, params, f"transport.{stack.transport_name}")
        base = stack.allocate_qpn(per_plane * spec.planes)
        self.conn = RcConnection(spec, src, dst, base, qps_per_plane=per_plane, config=cfg)
        self.split = split
        self.per_plane = per_plane
        self._turn = 0
        for host, qp in self.conn.endpoints():
            # responders only answer (ACK/NAK are control packets): no port polls them
            stack.register(self, qp, [qp.plane] if host == src else (), host=host)

    def _rc_qps(self) -> list[int] | None:
        """The QPs a message is striped over: all (split), or the next QP of every plane."""
        if self.split or self.per_plane == 1:
            return None
        planes = len(self.conn.planes)
        turn = self._turn
        self._turn = (turn + 1) % self.per_plane
        return [qp.qpn for i, qp in enumerate(self.conn.requesters) if i // planes == turn]

    def _post(self, now: int, msg_id: int, size: int) -> None:
        self.conn.post_write(now, msg_id, size, qps=self._rc_qps())
        for qp in self.conn.requesters:
            self.stack.nics[self.src].poke(qp)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        events = self.conn.events
        while events:
            ev = events.popleft()
            if isinstance(ev, StripedMessageCompleted):
                self._chunk_placed(ev.time_ps, ev.msg_id, ev.ok)
            elif isinstance(ev, SendCompleted):
                self._chunk_acked(ev.time_ps, ev.msg_id)
            elif isinstance(ev, ConnectionFailed):
                self.stack.note_event(ev.time_ps, ev.kind, f"h{self.src}->h{self.dst}",
                                      reason=ev.reason)
                self._failed(ev.time_ps, ev.reason)
        if self.conn.failed and not self.failed:
            self._failed(event.time_ps, self.conn.failure_reason or "connection failed")

    def qps(self) -> list[Any]:
        return [*self.conn.requesters, *self.conn.responders]

    @property
    def bytes_placed(self) -> int:
        return self.conn.bytes_placed
