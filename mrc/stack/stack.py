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
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from mrc.nic.driver import NicDriver
from mrc.sim.arena import use_huge_page_arenas
from mrc.sim.engine import Simulator
from mrc.sim.fabric import build_network
from mrc.sim.network import Network
from mrc.sim.nic import Nic
from mrc.sim.routing import RoutingConfig
from mrc.stack.connections import Completion, Connection, MrcConnection, RcConnectionAdapter
from mrc.stack.qpn import first_qpn
from mrc.stack.recorder import DROP_SERIES, Recorder
from mrc.stack.stalls import placement_gaps, stall_threshold_ps
from mrc.transport.base import (
    EvStateChanged,
    MessageCompleted,
    QueuePair,
    SendCompleted,
    TransportEvent,
)
from mrc.transport.mrc import MrcQueuePair as MrcQp
from mrc.units import PS_PER_US
from topology import names
from topology.spec import FabricSpec

if TYPE_CHECKING:  # pandas is imported where tables are made: a run that makes none
    import pandas as pd  # (a benchmark, a sweep worker) starts 0.3 s sooner

__all__ = ["FIRST_QPN", "Clockwork", "Completion", "Connection", "ConnectionFactory",
           "MrcConnection", "RcConnectionAdapter", "SimStack"]
#: The first QPN handed out: QPs 0 and 1 are InfiniBand's SMI and GSI (management), never
#: data (tshark dissects QP1 traffic as MAD).
FIRST_QPN = 2
#: Per-QP completions are summarised by the workload's own rows; logging them would flood.
_UNLOGGED = (MessageCompleted, SendCompleted)
#: Drop reasons that mean "the fabric lost it" (not a receiver's own discard).
_DROP_EVENTS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered", "lossless_overflow", "pfc_watchdog", "rx_stalled",
                "blackhole")
#: Per-connection goodput series are kept for jobs of at most this many connections.
MAX_FLOW_SERIES = 16


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
    _series = False  # enable_series() was called

    def __init__(self, spec: FabricSpec, seed: int, transport_name: str, *, sim: Clockwork,
                 net: Network | None, recorder: Recorder) -> None:
        self.spec = spec
        self.seed = seed
        self.transport_name = transport_name
        self.sim = sim
        self.net = net
        self.recorder = recorder
        self.nics: Sequence[NicDriver] = ()
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
        nic = self.nics[host]
        nic.add(qp, planes, self._recorder_of_qp(conn))
        nic.gap_floor_ps = stall_threshold_ps(self.spec)  # (mrc.stack.stalls)

    def _recorder_of_qp(self, conn: Connection) -> Recorder | None:
        """Where a QP of ``conn`` records its goodput (None: its NIC's recorder)."""
        return None

    def abort(self, now: int, reason: str = "job aborted") -> None:
        """Abort every connection (the whole job stops, as NCCL aborts the communicator)."""
        for conn in self.connections:
            if not conn.failed:
                conn.abort(now, reason)

    # ----------------------------------------------------------------- operator
    def deny(self, now: int, plane: int | None = None, t1: int | None = None, *,
             t0: int | None = None) -> int:
        """Drain: mark DENIED every MRC EV on (plane, t1) (None = any), or with ``t0`` only
        those of connections with an end under that T0 (a drained T0-T1 link); returns EVs
        changed."""
        return self._drain(now, plane, t1, deny=True, t0=t0)

    def allow(self, now: int, plane: int | None = None, t1: int | None = None, *,
              t0: int | None = None) -> int:
        return self._drain(now, plane, t1, deny=False, t0=t0)

    def deny_by_mask(self, now: int, mask: int, value: int, *,
                     pair: tuple[int, int] | None = None, allow: bool = False) -> int:
        """The controller's EV deny (``mrc_ev_deny``: RTS -> RTS): every EV with
        ``ev & mask == value`` of every MRC QP (or of the connection ``pair`` = (src, dst))
        goes DENIED, or back to GOOD with ``allow``; returns the EVs changed."""
        def match(choice: Any) -> bool:
            return choice.ev & mask == value

        changed = 0
        for conn in self.connections:
            if isinstance(conn, MrcConnection) and (pair is None or (conn.src, conn.dst) == pair):
                for qp in conn.qps():
                    done = qp.allow(now, match) if allow else qp.deny(now, match)
                    changed += len(done)
                    self.nics[qp.host].poke(qp)
        return changed

    def _drain(self, now: int, plane: int | None, t1: int | None, deny: bool,
               t0: int | None = None) -> int:
        def match(choice: Any) -> bool:
            return (plane is None or choice.plane == plane) and (
                t1 is None or choice.t1 is None or choice.t1 == t1)

        changed = 0
        for conn in self.connections:
            if t0 is not None and t0 not in (self.spec.t0_of(conn.src),
                                             self.spec.t0_of(conn.dst)):
                continue
            if isinstance(conn, MrcConnection):
                for qp in conn.qps():
                    done = qp.deny(now, match) if deny else qp.allow(now, match)
                    changed += len(done)
                    self.nics[qp.host].poke(qp)
        return changed

    # ----------------------------------------------------------------- events
    def _on_qp_event(self, event: TransportEvent, qp: QueuePair) -> None:
        if isinstance(event, EvStateChanged):  # gauges of ASSUMED_BAD and DENIED EVs
            self.recorder.ev_state_changed(event.time_ps, event.old, event.new)
        target = f"h{qp.host}.qp{qp.qpn}"
        if not isinstance(event, _UNLOGGED):  # completions are logged by the workload
            row_detail = {k: v for k, v in event.detail().items() if k != "data"}
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

    def _paused_ports(self, now: int, delta: int) -> None:
        self.recorder.paused_ports_changed(now, delta)

    # ----------------------------------------------------------------- series
    def enable_series(self) -> None:
        """Sample, at every bin's end, the deepest data queue of any switch port and (for
        jobs of at most ``MAX_FLOW_SERIES`` connections) each connection's bytes placed: the
        ``max_queue_bytes`` and ``flow_gbps:<src>-><dst>`` series. Sampling stops while
        nothing else is scheduled, so a quiet simulator still runs dry."""
        if self._series or not isinstance(self.sim, Simulator) or self.net is None:
            return  # already on, or a live/kernel run (no simulator of its own, or no network)
        self._series = True
        self._switch_ports = [self.net.ports[p.name] for sw in self.net.switches.values()
                              for p in sw.ports]
        self.sim.at(self.recorder.bin_ps, self._sample, None)

    def _flow_labels(self) -> list[tuple[str, Connection]]:
        out: list[tuple[str, Connection]] = []
        seen: dict[str, int] = {}
        for conn in self.connections:
            label = f"h{conn.src}->h{conn.dst}"
            n = seen.get(label, 0)
            seen[label] = n + 1
            out.append((label if not n else f"{label}#{n}", conn))
        return out

    def _recorders_of(self, conn: Connection) -> Recorder:
        return self.recorder

    def _sample(self, _: Any) -> None:
        now = self.sim.now
        deepest = 0
        for port in self._switch_ports:
            depth = port._qb + getattr(port, "_lqb", 0)
            if depth > deepest:
                deepest = depth
        for rec in self._all_recorders():
            rec.sample("max_queue_bytes", now, deepest)
        if len(self.connections) <= MAX_FLOW_SERIES:
            for label, conn in self._flow_labels():
                self._recorders_of(conn).sample("flow_bytes:" + label, now,
                                                conn.bytes_placed)
        if isinstance(self.sim, Simulator) and self.sim.pending():  # else: run dry
            self.sim.at(now + self.recorder.bin_ps, self._sample, None)

    def _all_recorders(self) -> list[Recorder]:
        return [self.recorder]

    # ----------------------------------------------------------------- results
    def events(self) -> pd.DataFrame:
        import pandas as pd

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
        out = {
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
            "cnps_sent": stat("cnps_sent"),
            "cnps_received": stat("cnps_received"),
            # each receiving QP's gaps between placements (mrc.stack.stalls)
            "placement_gaps": placement_gaps(self.nics, self._qp_keys()),
        }
        out.update(self.fabric_pfc())
        return out

    def _qp_keys(self) -> list[tuple[int, int]]:
        """(qpn, host) of this stack's QPs, in registration order."""
        mine = set(map(id, self.connections))
        return [key for key, conn in self._owner.items() if id(conn) in mine]

    def fabric_pfc(self) -> dict[str, Any]:
        """PFC counters of the whole fabric and the lossless-class drops (empty without PFC):
        see ``mrc.sim.network.pfc_totals`` and ``mrc.sim.pfc``."""
        if not self.spec.pfc or self.net is None:
            return {}
        net = self.net.totals()
        paused = [(p.pfc_counters()[2], p.name)  # type: ignore[union-attr, attr-defined]
                  for p in self.net.ports.values()]
        # every port that was ever paused, longest first (a port never paused is left out)
        ranked = sorted((row for row in paused if row[0] > 0), key=lambda r: (-r[0], r[1]))
        return {
            "pause_frames_sent": net["pause_frames_sent"],
            "pause_frames_received": net["pause_frames_received"],
            "paused_us": net["paused_ps"] / PS_PER_US,
            "ports_paused": net["ports_paused"],
            "watchdog_storms": net["watchdog_storms"],
            "lossless_overflow_drops": net["drop_lossless_overflow"],
            "watchdog_drops": net["drop_pfc_watchdog"],
            "stalled_host_drops": net["drop_rx_stalled"],
            "paused_by_port": [{"port": name, "paused_us": ps / PS_PER_US}
                               for ps, name in ranked],
        }

    def goodput_ceiling_gbps(self, ports: int | None = None) -> float:
        return self.spec.goodput_ceiling_gbps(ports)

    def element(self, name: str) -> Any:
        """Resolve a fabric element name or selector (see topology.names)."""
        return names.resolve(self.spec, name)


class SimStack(Stack):
    """Simulator + network + NICs + recorder for one transport of one lab run."""

    def __init__(self, spec: FabricSpec, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc", *, routing: RoutingConfig | None = None) -> None:
        use_huge_page_arenas()  # the fabric on huge pages (unless MRC_HUGE_PAGES=0)
        sim = Simulator(seed)
        net = build_network(sim, spec, routing=routing)
        super().__init__(spec, seed, transport_name, sim=sim, net=net,
                         recorder=Recorder(spec.planes, bin_ps))
        self.net: Network = net
        self.nics = [Nic(sim, host, self.recorder, self._on_qp_event) for host in net.hosts]
        net.observer = self._observe
        if spec.pfc:
            self.recorder.pfc = True
            net.pause_hook = self._paused_ports
