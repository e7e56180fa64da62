"""A validated lab as objects: what the runner, the workload drivers and the fault schedule
read. Built only by :func:`mrc.labs.schema.lab_file.validate`, so every value here was checked;
:meth:`Lab.to_dict` gives the resolved form back (defaults filled in, targets canonical),
which is what dotted key paths and sweep run ids address.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrc.sim.routing import RoutingConfig
from topology import names
from topology.spec import FabricSpec

TRANSPORT_KINDS = ("mrc", "rc")


@dataclass(frozen=True)
class WriteBw:
    """perftest-style ``ib_write_bw``: keep ``tx_depth`` messages in flight per direction."""

    pairs: tuple[tuple[int, int], ...]
    bidirectional: bool = True
    message_bytes: int = 1 << 20
    tx_depth: int = 4
    start_us: float = 0.0
    kind: str = "write_bw"


@dataclass(frozen=True)
class Collective:
    """nccl-tests-style ``sendrecv``/``all_reduce`` (ring)/``all_to_all`` over ranked hosts."""

    kind: str
    hosts: tuple[int, ...]
    sizes_bytes: tuple[int, ...]
    iters: int = 5
    warmup_iters: int = 1
    start_us: float = 0.0


@dataclass(frozen=True)
class Permutation:
    """Every host sends ``size_bytes`` to a distinct peer drawn from the run's seed."""

    hosts: tuple[int, ...]
    size_bytes: int = 2 << 20
    start_us: float = 0.0
    kind: str = "permutation"


@dataclass(frozen=True)
class Flow:
    """One connection-matrix line. ``start_us`` is None for a flow that starts on a trigger
    (``trigger``); ``send_done_trigger``/``recv_done_trigger`` are activated when it is done."""

    src: int
    dst: int
    size_bytes: int
    start_us: float | None
    flow_id: int
    line: int = 0
    trigger: int | None = None
    send_done_trigger: int | None = None
    recv_done_trigger: int | None = None


@dataclass(frozen=True)
class TriggerSpec:
    """An htsim trigger: ``oneshot`` starts all its flows when activated, ``multishot`` its
    next flow per activation, ``barrier`` all its flows on its ``count``-th activation."""

    trigger_id: int
    kind: str
    count: int = 0
    line: int = 0


@dataclass(frozen=True)
class ConnectionMatrix:
    """Flows from an htsim connection-matrix file (``file``) or inline text (``text``)."""

    flows: tuple[Flow, ...]
    nodes: int
    file: str | None = None
    text: str | None = None
    kind: str = "connection_matrix"
    triggers: tuple[TriggerSpec, ...] = ()


Workload = WriteBw | Collective | Permutation | ConnectionMatrix


def workload_hosts(w: Workload) -> frozenset[int]:
    """Every host the workload sends from or to."""
    if isinstance(w, WriteBw):
        return frozenset(h for pair in w.pairs for h in pair)
    if isinstance(w, ConnectionMatrix):
        return frozenset(h for f in w.flows for h in (f.src, f.dst))
    return frozenset(w.hosts)


def sending_hosts(w: Workload) -> frozenset[int]:
    """The hosts whose NICs send the workload's DATA."""
    if isinstance(w, WriteBw):
        senders = {s for s, _ in w.pairs}
        if w.bidirectional:
            senders |= {d for _, d in w.pairs}
        return frozenset(senders)
    if isinstance(w, ConnectionMatrix):
        return frozenset(f.src for f in w.flows)
    return frozenset(w.hosts)


@dataclass(frozen=True)
class TransportSpec:
    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    #: ``[transport.NAME.env]`` variables that do not apply to this transport: (name, why)
    ignored_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FaultSpec:
    """One ``[[fault]]`` entry, resolved: canonical ``target`` and the window it covers.

    ``until_us`` is the end of the window (None: lasts to the end of the run, or the fault is
    a down whose matching up is another entry; :func:`mrc.labs.schema.schedule.fault_windows` pairs
    those).
    """

    index: int
    kind: str
    target: str
    element: names.Element | None  # None: ev_deny's "all" or "hA->hB"
    at_us: float
    until_us: float | None
    params: dict[str, Any] = field(default_factory=dict)
    #: the class ``target`` was drawn from (mrc.labs.schema.targets); None: named
    drawn_from: str | None = None


@dataclass(frozen=True)
class RunSpec:
    duration_us: float
    bin_us: float
    seed: int = 1
    grace_us: float = 0.0
    mixed: bool = False  # every transport at once on one fabric (mrc.stack.mixed)
    #: factor on the real-world control timers (mrc.labs.run.time_scale); 1: as configured
    time_scale: float = 1.0


@dataclass(frozen=True)
class Lab:
    """A validated lab. ``raw`` is the file as parsed; :meth:`to_dict` is the resolved form."""

    name: str
    description: str
    fabric: FabricSpec
    fabric_preset: str | None
    workload: Workload
    transports: dict[str, TransportSpec]
    faults: tuple[FaultSpec, ...]
    run: RunSpec
    raw: dict[str, Any]
    source: str | None = None
    base_dir: Path | None = None
    #: ``(dotted.key, value)`` overrides applied on top of the file (``--set``, sweeps)
    overrides: tuple[tuple[str, Any], ...] = ()
    #: ``[routing]``: RC's routed fabric (ECMP mode, detection and convergence times)
    routing: RoutingConfig = RoutingConfig()

    def to_dict(self) -> dict[str, Any]:
        """Every key with its resolved value (defaults filled in, targets canonical)."""
        fabric = {k: v for k, v in self.fabric.to_dict().items()
                  if k != "name" and v is not None}  # TOML has no null
        if self.fabric_preset is not None:
            fabric = {"preset": self.fabric_preset, **fabric}
        workload = {k: _plain(v) for k, v in dataclasses.asdict(self.workload).items()}
        if isinstance(self.workload, ConnectionMatrix):
            workload.pop("flows")
            workload.pop("nodes")
            workload.pop("triggers")
            workload = {k: v for k, v in workload.items() if v is not None}
        workload = {"kind": workload.pop("kind"), **workload}
        faults = []
        for f in self.faults:
            # a drawn target stays its class: the resolved lab draws again from its seed
            entry: dict[str, Any] = {"kind": f.kind, "target": f.drawn_from or f.target,
                                     "at_us": f.at_us}
            entry.update(f.params)
            faults.append(entry)
        return {
            "name": self.name,
            "description": self.description,
            "fabric": fabric,
            "workload": workload,
            "transport": {n: {"kind": t.kind, **t.params} for n, t in self.transports.items()},
            "fault": faults,
            "run": dataclasses.asdict(self.run),
            "routing": {"ecmp": self.routing.ecmp,
                        "link_down_detect_us": self.routing.link_down_detect_us,
                        "routing_convergence_us": self.routing.routing_convergence_us},
        }


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
