"""One transport's run as the labs layer sees it: :class:`Stack`, and :class:`SimStack` for
the packet simulator.

A ``Stack`` opens connections of either transport between hosts and registers their QPs on
the hosts' NIC drivers, turns transport events into tidy event rows and the goodput
``Recorder``'s bins, and answers the operator's drain (deny/allow EVs). Everything a lab
needs and nothing it must know about QPs. It is built from a runtime's parts (a clockwork,
the network, one NIC driver per host): ``SimStack`` builds the simulator's (engine, network,
``Nic``), the live runtime's ``LiveStack`` (``mrc.live.stack``) and the kernel runtime's
``KernelStack`` (``mrc.kernel.stack``, whose fabric is Linux itself: no network) their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import pandas as pd

from mrc.sim import transport_params
from mrc.sim.engine import Simulator
from mrc.sim.evset import build_ev_set
from mrc.sim.fabric import build_network
from mrc.sim.network import Network
from mrc.sim.nic import Nic
from mrc.sim.nic_driver import NicDriver
from mrc.sim.qpn import first_qpn
from mrc.sim.rc_connection import RcConnection
from mrc.sim.recorder import DROP_SERIES, Recorder
from mrc.transport.base import (
    EVENT_CONNECTION_FAILED,
    EVENT_EV_STATE,
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
    EVENT_SEND_COMPLETED,
    QueuePair,
    TransportEvent,
)
from mrc.transport.mrc import MrcQueuePair as MrcQp
from mrc.units import PS_PER_US
from topology import names
from topology.spec import FabricSpec

Completion = Callable[[int, bool], None]
#: Per-QP completions are summarised by the workload's own rows; logging them would flood.
_UNLOGGED = (EVENT_MESSAGE_COMPLETED, EVENT_SEND_COMPLETED)
#: Drop reasons that mean "the fabric lost it" (not a receiver's own discard).
_DROP_EVENTS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered")


class Connection:
    """Writes from ``src`` to ``dst`` over one transport; completions verified end to end."""

    def __init__(self, stack: Stack, kind: str, src: int, dst: int) -> None:
        self.stack = stack
        self.kind = kind
        self.src = src
        self.dst = dst
        self.failed = False
        self.failed_at_ps: int | None = None
        self.failure_reason: str | None = None
        self.messages_ok = 0
        self.messages_corrupt = 0
        self._next_msg = 1
        self._pending: dict[int, tuple[Completion | None, int]] = {}

    # subclasses: _post(now, msg_id, size) and the event plumbing
    def write(self, now: int, size: int, on_complete: Completion | None = None) -> int:
        """Post an RDMA WRITE of ``size`` bytes; ``on_complete(now_ps, ok)`` when it is placed
        and verified (ok False on a checksum mismatch or a connection error)."""
        msg_id = self._next_msg
        self._next_msg += 1
        if self.failed:
            if on_complete is not None:
                self.stack.sim.at(now, lambda _: on_complete(now, False))
            return msg_id
        self._pending[msg_id] = (on_complete, size)
        self._post(now, msg_id, size)
        return msg_id

    def _post(self, now: int, msg_id: int, size: int) -> None:
        raise NotImplementedError

    def on_event(self, event: TransportEvent, qp: Any) -> None:
        raise NotImplementedError

    def qps(self) -> list[Any]:
        raise NotImplementedError

    def _completed(self, now: int, msg_id: int, ok: bool) -> None:
        entry = self._pending.pop(msg_id, None)
        if entry is None:
            return
        if ok:
            self.messages_ok += 1
        else:
            self.messages_corrupt += 1
        callback = entry[0]
        if callback is not None:
            callback(now, ok)

    def _failed(self, now: int, reason: str) -> None:
        if self.failed:
            return
        self.failed = True
        self.failed_at_ps = now
        self.failure_reason = reason
        pending, self._pending = self._pending, {}
        for callback, _ in pending.values():
            if callback is not None:
                callback(now, False)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def abort(self, now: int, reason: str = "aborted") -> None:
        """Tear the connection down (the application gave up, as NCCL does on any QP error):
        its QPs leave the NICs at once and unfinished messages complete with ok=False."""
        for qp in self.qps():
            for nic in self.stack.nics:
                if nic.qps.get(qp.qpn) is qp:
                    nic.remove(qp)  # type: ignore[arg-type]
        self._failed(now, reason)


class MrcConnection(Connection):
    """One MRC QP at each end; the source sprays over its EV set."""

    def __init__(self, stack: Stack, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, "mrc", src, dst)
        spec = stack.spec
        cfg = transport_params.mrc_config(spec, params, f"transport.{stack.transport_name}")
        fwd = build_ev_set(spec, src, dst, cfg.ev_count, stack.seed)
        rev = build_ev_set(spec, dst, src, cfg.ev_count, stack.seed)
        qa, qb = stack.allocate_qpn(), stack.allocate_qpn()
        self.sender = MrcQp(qa, src, dst, qb, spec.mtu_bytes, fwd, config=cfg,
                            key_seed=stack.seed)
        self.receiver = MrcQp(qb, dst, src, qa, spec.mtu_bytes, rev, config=cfg,
                              key_seed=stack.seed)
        self._expected: dict[int, int] = {}
        stack.register(self, self.sender, range(spec.planes))
        # the far end only answers (ACK/NACK/PROBE_REPLY go out as control packets), so its
        # ports never need to poll it for data
        stack.register(self, self.receiver, ())

    def _post(self, now: int, msg_id: int, size: int) -> None:
        self._expected[msg_id] = self.sender.expected_checksum(msg_id, size)
        self.stack.nics[self.src].post(self.sender, msg_id, size)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        if event.kind == EVENT_MESSAGE_COMPLETED and qp is self.receiver:
            msg_id = int(event.detail["msg_id"])  # type: ignore[call-overload]
            expected = self._expected.pop(msg_id, None)
            self._completed(event.time_ps, msg_id, event.detail.get("checksum") == expected)
        elif event.kind == EVENT_QP_ERROR:
            self._failed(event.time_ps, f"QP {qp.qpn} error: {event.detail.get('reason')}")

    def qps(self) -> list[MrcQp]:
        return [self.sender, self.receiver]


class RcConnectionAdapter(Connection):
    """NCCL-style RC: ``qps_per_plane`` QPs on every plane, each pinned to one ECMP path."""

    def __init__(self, stack: Stack, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, "rc", src, dst)
        spec = stack.spec
        cfg, per_plane = transport_params.rc_config(spec, params,
                                                    f"transport.{stack.transport_name}")
        base = stack.allocate_qpn(per_plane * spec.planes)
        self.conn = RcConnection(spec, src, dst, base, qps_per_plane=per_plane, config=cfg)
        for host, qp in self.conn.endpoints():
            # responders only answer (ACK/NAK are control packets): no port polls them
            stack.register(self, qp, [qp.plane] if host == src else (), host=host)

    def _post(self, now: int, msg_id: int, size: int) -> None:
        self.conn.post_write(now, msg_id, size)
        for qp in self.conn.requesters:
            self.stack.nics[self.src].poke(qp)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        events = self.conn.events
        while events:
            ev = events.popleft()
            if ev.kind == EVENT_MESSAGE_COMPLETED:
                self._completed(ev.time_ps, int(ev.detail["msg_id"]),  # type: ignore[call-overload]
                                bool(ev.detail.get("ok")))
            elif ev.kind == EVENT_CONNECTION_FAILED:
                self.stack.note_event(ev.time_ps, "connection_failed",
                                      f"h{self.src}->h{self.dst}",
                                      reason=ev.detail.get("reason"))
                self._failed(ev.time_ps, str(ev.detail.get("reason")))
        if self.conn.failed and not self.failed:
            self._failed(event.time_ps, self.conn.failure_reason or "connection failed")

    def qps(self) -> list[Any]:
        return [*self.conn.requesters, *self.conn.responders]


#: How a stack makes a connection of one kind: ``factory(stack, src, dst, params)``.
ConnectionFactory = Callable[[Any, int, int, dict[str, Any]], Connection]


class Clockwork(Protocol):
    """What a stack's ``sim`` offers the labs layer: the simulator's engine, or the live
    runtime's engine run against the wall clock (``mrc.live.stack.LiveSim``)."""

    @property
    def now(self) -> int: ...

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None: ...

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None: ...

    def stop(self) -> None: ...

    def run(self, until_ps: int | None = None) -> int: ...


class Stack:
    """Connections, drains, event log and goodput of one transport's run, over the parts a
    runtime built: ``sim`` (its clockwork), ``net`` (the simulator's network, which faults
    act on; None when the fabric is not the simulator's, and the runtime then applies faults
    and counts drops itself) and, added by the runtime once it has made them (their event
    sink is ``_on_qp_event``), ``nics``: one NIC driver per host."""

    #: The connection class of each transport kind (the live stack's carry real bytes).
    connection_kinds: ClassVar[dict[str, ConnectionFactory]] = {
        "mrc": MrcConnection, "rc": RcConnectionAdapter}

    def __init__(self, spec: FabricSpec, seed: int, transport_name: str, *, sim: Clockwork,
                 net: Network | None, recorder: Recorder) -> None:
        self.spec = spec
        self.seed = seed
        self.transport_name = transport_name
        self.sim = sim
        self.net = net
        self.recorder = recorder
        self.nics: Sequence[NicDriver[Any]] = ()
        self.connections: list[Connection] = []
        self._owner: dict[tuple[int, int], Connection] = {}
        self._rows: list[tuple[float, str, str, str]] = []
        self._next_qpn = first_qpn(seed)  # seeded, as a NIC's allocation is arbitrary

    # ----------------------------------------------------------------- connections
    def open(self, kind: str, src: int, dst: int, params: dict[str, Any] | None = None
             ) -> Connection:
        """A connection from host ``src`` to host ``dst`` (indices) of transport ``kind``."""
        for h in (src, dst):
            if not 0 <= h < self.spec.hosts:
                raise ValueError(f"host {h} is not in this fabric (0..{self.spec.hosts - 1})")
        if src == dst:
            raise ValueError("a connection needs two different hosts")
        params = dict(params or {})
        kind_class = self.connection_kinds.get(kind)
        if kind_class is None:
            raise ValueError(f"unknown transport kind {kind!r}; known: "
                             f"{', '.join(self.connection_kinds)}")
        conn = kind_class(self, src, dst, params)
        self.connections.append(conn)
        return conn

    def allocate_qpn(self, count: int = 1) -> int:
        """QPNs are unique across the whole stack, so both directions of a pair never clash."""
        base = self._next_qpn
        self._next_qpn += count
        return base

    def register(self, conn: Connection, qp: Any, planes: Any, host: int | None = None) -> None:
        """Attach ``qp`` to its host's NIC (``host`` overrides ``qp.host``)."""
        host = qp.host if host is None else host
        self._owner[(qp.qpn, host)] = conn
        self.nics[host].add(qp, planes)

    def abort(self, now: int, reason: str = "job aborted") -> None:
        """Abort every connection (the whole job stops, as NCCL aborts the communicator)."""
        for conn in self.connections:
            if not conn.failed:
                conn.abort(now, reason)

    # ----------------------------------------------------------------- operator
    def deny(self, now: int, plane: int | None = None, t1: int | None = None) -> int:
        """Drain: mark DENIED every MRC EV on (plane, t1) (None = any); returns EVs changed."""
        return self._drain(now, plane, t1, deny=True)

    def allow(self, now: int, plane: int | None = None, t1: int | None = None) -> int:
        return self._drain(now, plane, t1, deny=False)

    def _drain(self, now: int, plane: int | None, t1: int | None, deny: bool) -> int:
        def match(choice: Any) -> bool:
            return (plane is None or choice.plane == plane) and (
                t1 is None or choice.t1 is None or choice.t1 == t1)

        changed = 0
        for conn in self.connections:
            if isinstance(conn, MrcConnection):
                for qp in conn.qps():
                    done = qp.deny(now, match) if deny else qp.allow(now, match)
                    changed += len(done)
                    self.nics[qp.host].poke(qp)
        return changed

    # ----------------------------------------------------------------- events
    def _on_qp_event(self, event: TransportEvent, qp: QueuePair) -> None:
        detail = event.detail
        if event.kind == EVENT_EV_STATE:  # gauges of ASSUMED_BAD and DENIED EVs
            self.recorder.ev_state_changed(event.time_ps, detail.get("old"), detail.get("new"))
        target = f"h{qp.host}.qp{qp.qpn}"
        if event.kind not in _UNLOGGED:  # completions are logged by the workload
            row_detail = {k: v for k, v in detail.items() if k != "data"}
            self._rows.append((event.time_ps / PS_PER_US, event.kind, target,
                               json.dumps(row_detail, sort_keys=True, default=str)))
        conn = self._owner.get((qp.qpn, qp.host))
        if conn is not None:
            conn.on_event(event, qp)

    def note_event(self, now_ps: int, kind: str, target: str, **detail: Any) -> None:
        """Add a row to the event log (faults, completions, job outcomes)."""
        self._rows.append((now_ps / PS_PER_US, kind, target,
                           json.dumps(detail, sort_keys=True, default=str)))

    def _observe(self, now: int, where: str, pkt: Any, event: str) -> None:
        if event == "trim":
            self.recorder.count("trims", now)
        elif event in _DROP_EVENTS:  # split by what was lost: data, control, probe
            self.recorder.dropped(now, pkt.kind if pkt is not None else None)

    # ----------------------------------------------------------------- results
    def events(self) -> pd.DataFrame:
        rows = sorted(self._rows, key=lambda r: r[0])  # stable: same-time rows keep order
        frame = pd.DataFrame(rows, columns=["time_us", "kind", "target", "detail"])
        frame.insert(1, "transport", self.transport_name)
        return frame

    def timeseries(self, end_ps: int | None = None) -> pd.DataFrame:
        return self.recorder.timeseries(self.transport_name,
                                        self.sim.now if end_ps is None else end_ps)

    def fabric_counts(self) -> tuple[int, int]:
        """(trimmed, dropped) packets over the whole fabric (a runtime without the simulator's
        network overrides this)."""
        if self.net is None:
            raise NotImplementedError("this runtime's stack counts its fabric's drops itself")
        net = self.net.totals()
        return net["trims"], net["drops"]

    def totals(self) -> dict[str, Any]:
        qps = [qp for conn in self.connections for qp in conn.qps()]

        def stat(name: str) -> int:
            return sum(getattr(qp.stats, name, 0) for qp in qps)

        trims, drops = self.fabric_counts()
        mrc = [qp for qp in qps if isinstance(qp, MrcQp)]
        return {
            "bytes_delivered": self.recorder.bytes_delivered,
            "retransmitted_packets": stat("retransmissions") + stat("retx_sent"),
            "trimmed_packets": trims,
            "dropped_packets": drops,
            # what was lost, as the network reported each drop (a runtime whose fabric is
            # not the simulator's network cannot say: None)
            "dropped_by_kind": None if self.net is None else {
                series.removeprefix("drops_"): self.recorder.total(series)
                for series in DROP_SERIES},
            "probes_sent": stat("probes_sent"),
            "paths_marked_bad": sum(qp.stats.paths_marked_bad for qp in mrc),
            "paths_reintegrated": sum(qp.stats.reintegrated for qp in mrc),
            "messages_verified": sum(c.messages_ok for c in self.connections),
            "messages_corrupt": sum(c.messages_corrupt for c in self.connections),
        }

    def goodput_ceiling_gbps(self, ports: int | None = None) -> float:
        return self.spec.goodput_ceiling_gbps(ports)

    def element(self, name: str) -> Any:
        """Resolve a fabric element name or selector (see topology.names)."""
        return names.resolve(self.spec, name)


class SimStack(Stack):
    """Simulator + network + NICs + recorder for one transport of one lab run."""

    def __init__(self, spec: FabricSpec, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc") -> None:
        sim = Simulator(seed)
        net = build_network(sim, spec)
        super().__init__(spec, seed, transport_name, sim=sim, net=net,
                         recorder=Recorder(spec.planes, bin_ps))
        self.net: Network = net
        self.nics = [Nic(sim, host, self.recorder, self._on_qp_event) for host in net.hosts]
        net.observer = self._observe
