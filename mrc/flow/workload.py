"""Workloads at flow level: which connections exist, and how their rates become progress.

Three shapes cover every lab workload (the labs adapter translates them):

* :class:`Stream` (``write_bw``): long-running connections, each at its own rate; goodput is
  the sum. perftest keeps ``tx_depth`` messages in flight, which matters for how a stalled
  RC connection drains: its other QPs still place their chunks of the posted messages
  (:class:`mrc.flow.rc_rate.Backlog`).
* :class:`Transfers` (``permutation``, ``connection_matrix``): one finite flow per
  connection, from its start time until its bytes are placed; a finished flow leaves the
  fabric to the others (the rates are solved again).
* :class:`Collective` (``sendrecv``, ``all_reduce`` ring, ``all_to_all``): as nccl-tests runs
  them, every connection of the job carries the same bytes per iteration and the iteration
  ends with the slowest, so the job moves at one *pace*, the lowest connection rate, and a
  single stalled connection stalls it. Each iteration is an alpha-beta cost: ``volume / pace``
  plus one path latency per dependent step (a ring all-reduce has 2(n-1) steps, each
  waiting for the chunk the previous rank just received; see :func:`step_latency_ps`).

An all-to-all over many hosts is aggregated by symmetry (:mod:`mrc.flow.fabric`): hosts that
no fault tells apart form a class per T0, and a group stands for every connection between two
classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mrc.flow.conditions import Change
from mrc.flow.fabric import Layout, make_layout
from mrc.flow.paths import Groups
from topology.spec import FabricSpec

#: An all-to-all of more connections than this is aggregated by host classes.
ENUMERATE_LIMIT = 20_000
#: Gb/s per bit per picosecond (and picoseconds per bit at 1 Gb/s)
GBPS = 1000.0


@dataclass(frozen=True)
class Stream:
    src: np.ndarray
    dst: np.ndarray
    start_ps: int = 0
    #: bytes a striped RC connection's other QPs still place when one QP stalls: perftest's
    #: ``tx_depth`` posted messages less half of one (on average under way)
    drain_bytes: float = 0.0


@dataclass(frozen=True)
class Transfers:
    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray
    start_ps: np.ndarray
    flow_id: np.ndarray


@dataclass(frozen=True)
class Collective:
    kind: str  # sendrecv | all_reduce | all_to_all
    hosts: np.ndarray  # ranks
    plan: tuple[tuple[int, int, bool], ...]  # (size_bytes, iteration, warmup)
    start_ps: int = 0

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    def aggregated(self) -> bool:
        n = self.ranks
        return self.kind == "all_to_all" and n * (n - 1) > ENUMERATE_LIMIT


Workload = Stream | Transfers | Collective


def connections(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every connection in the order the packet model's driver opens them."""
    if isinstance(work, Stream | Transfers):
        return np.asarray(work.src, dtype=np.int64), np.asarray(work.dst, dtype=np.int64)
    hosts = np.asarray(work.hosts, dtype=np.int64)
    n = len(hosts)
    if work.kind == "all_to_all":
        r, j = np.divmod(np.arange(n * (n - 1)), n - 1)
        j = j + (j >= r)
        return hosts[r], hosts[j]
    return hosts, np.roll(hosts, -1)


def build(spec: FabricSpec, work: Workload, changes: list[Change], *, symmetric_t1s: bool
          ) -> tuple[Layout, Groups]:
    """The layout (host classes, T1 types) and the connection groups of a workload."""
    if isinstance(work, Collective) and work.aggregated():
        hosts = np.asarray(work.hosts, dtype=np.int64)
        layout, _ = make_layout(spec, hosts, changes, group_hosts=True,
                                group_t1s=symmetric_t1s)
        c = layout.classes
        a, b = np.divmod(np.arange(c * c), c)
        ga, gb = layout.class_group[a], layout.class_group[b]
        size_a, size_b = layout.class_size[a], layout.class_size[b]
        t0s = layout.group_size[ga]
        same = ga == gb
        per_a, per_b = size_a // t0s, size_b // t0s  # hosts of the class under each T0
        local = np.where(same, t0s * per_a * (per_b - (a == b)), 0)
        cross = np.where(same, t0s * (t0s - 1) * per_a * per_b, size_a * size_b)
        src = np.concatenate([a, a])
        dst = np.concatenate([b, b])
        mult = np.concatenate([local, cross])
        is_local = np.concatenate([np.ones(c * c, dtype=bool), np.zeros(c * c, dtype=bool)])
        keep = mult > 0
        return layout, Groups(src[keep], dst[keep], mult[keep], is_local[keep])
    src, dst = connections(work)
    hosts, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    layout, cls = make_layout(spec, hosts, changes, group_hosts=False, group_t1s=symmetric_t1s)
    s, d = cls[inverse[:len(src)]], cls[inverse[len(src):]]
    local = (src // spec.hosts_per_t0) == (dst // spec.hosts_per_t0)
    return layout, Groups(s, d, np.ones(len(src), dtype=np.int64), local, src, dst,
                          np.arange(len(src)))


def class_index(layout: Layout, work: Workload, hosts: list[int]) -> dict[int, int]:
    """The class of each of ``hosts`` (hosts a fault names) that the workload uses."""
    if isinstance(work, Collective) and work.aggregated():
        # a host a fault names is alone in its class (the fault names it), so it is its
        # class's representative
        ranked = set(np.asarray(work.hosts).tolist())
        rep = {int(h): c for c, h in enumerate(layout.class_host.tolist())}
        return {h: rep[h] for h in hosts if h in ranked and h in rep}
    index = {int(h): i for i, h in enumerate(layout.class_host.tolist())}
    return {h: index[h] for h in hosts if h in index}


def step_latency_ps(spec: FabricSpec, crossing: bool) -> int:
    """Path latency one dependent step adds after its last byte leaves the NIC: propagation
    over every link, each switch's latency, and store-and-forward of a full packet at every
    hop after the first (hosts under one T0: 2 links, 1 switch; otherwise 4 and 3)."""
    links, switches = (4, 3) if crossing else (2, 1)
    packet = spec.serialization_ps(spec.packet_bytes(spec.mtu_bytes))
    return links * spec.link_delay_ps + switches * (spec.switch_latency_ps + packet)


# ====================================================================== progress
@dataclass
class IterationRecord:
    size_bytes: int
    iteration: int
    warmup: bool
    start_ps: float
    end_ps: float | None = None
    ok: bool | None = None


@dataclass
class FlowRecord:
    flow_id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: float
    end_ps: float | None = None
    ok: bool | None = None


@dataclass
class Progress:
    """What a workload has done so far; the engine drives it segment by segment."""

    work: Workload
    groups: Groups
    spec: FabricSpec
    planes: int
    finished: bool = False
    iterations: list[IterationRecord] = field(default_factory=list)
    flows: list[FlowRecord] = field(default_factory=list)
    _frac: float = 0.0
    _next: int = 0
    _remaining: np.ndarray | None = None
    _done: np.ndarray | None = None

    def __post_init__(self) -> None:
        if isinstance(self.work, Transfers):
            w = self.work
            self._remaining = w.size_bytes.astype(float)
            self._done = np.zeros(len(w.src), dtype=bool)
            self.flows = [FlowRecord(int(i), int(s), int(d), int(z), float(t)) for i, s, d, z, t
                          in zip(w.flow_id, w.src, w.dst, w.size_bytes, w.start_ps, strict=True)]
        self._latency = step_latency_ps(self.spec, bool((~self.groups.local).any()))

    # ------------------------------------------------------------------ which groups send
    def running(self, t: float) -> np.ndarray:
        n = len(self.groups)
        if self.finished:
            return np.zeros(n, dtype=bool)
        if isinstance(self.work, Transfers):
            assert self._done is not None
            return (self.work.start_ps <= t) & ~self._done
        start = self.work.start_ps
        return np.full(n, t >= start)

    # ------------------------------------------------------------------ collectives
    def _iteration(self) -> tuple[float, float, float]:
        """(volume bytes per connection, latency ps, bytes placed) of the current iteration."""
        assert isinstance(self.work, Collective)
        size = self.work.plan[self._next][0]
        n = self.work.ranks
        if self.work.kind == "sendrecv":
            return float(size), float(self._latency), float(n * size)
        chunk = max(1, -(-size // n))
        if self.work.kind == "all_to_all":
            return float(chunk), float(self._latency), float(n * (n - 1) * chunk)
        steps = 2 * (n - 1)
        return float(steps * chunk), float(steps * self._latency), float(n * steps * chunk)

    def pace(self, conn: np.ndarray, dead: np.ndarray) -> float:
        """The job's pace: the slowest connection (0 if one is stalled)."""
        if dead.any():
            return 0.0
        return float(conn.min()) if conn.size else 0.0

    def step_burst(self, t: float, conn: np.ndarray, mtu_bytes: int
                   ) -> tuple[float, float] | None:
        """A collective's message per connection and step at ``t``, by the alpha-beta clock
        of :meth:`iteration_ps` (each step: its message's burst at the pace, then one path
        latency): (the burst in ps, packets per message). None when no iteration is under
        way."""
        work = self.work
        if not isinstance(work, Collective) or self.finished or t < work.start_ps:
            return None
        pace = float(conn.min()) if conn.size else 0.0
        if pace <= 0:
            return None
        size = work.plan[self._next][0]
        chunk = size if work.kind == "sendrecv" else max(1, -(-size // work.ranks))
        return chunk * 8 / pace * GBPS, float(-(-chunk // mtu_bytes))

    def iteration_ps(self, pace: float) -> float:
        volume, latency, _ = self._iteration()
        if pace <= 0:
            return np.inf
        return volume * 8 / pace * GBPS + latency

    # ------------------------------------------------------------------ goodput
    def goodput(self, t: float, conn: np.ndarray, share: np.ndarray, dead: np.ndarray,
                run: np.ndarray) -> tuple[float, np.ndarray]:
        """(total Gb/s, per-plane Gb/s) placed while this segment lasts."""
        mult = self.groups.mult
        if self.finished or not run.any():
            return 0.0, np.zeros(self.planes)
        if isinstance(self.work, Collective):
            if t < self.work.start_ps:
                return 0.0, np.zeros(self.planes)
            period = self.iteration_ps(self.pace(conn, dead))
            if not np.isfinite(period):
                return 0.0, np.zeros(self.planes)
            total = self._iteration()[2] * 8 / period * GBPS
            weights = (mult[:, None] * share).sum(axis=0)
            return total, total * weights / max(weights.sum(), 1e-300)
        flow = np.where(run, conn, 0.0) * mult
        return float(flow.sum()), (flow[:, None] * share).sum(axis=0)

    def next_event(self, t: float, conn: np.ndarray, dead: np.ndarray, run: np.ndarray,
                   batch_ps: float) -> float:
        if self.finished:
            return np.inf
        work = self.work
        if isinstance(work, Transfers):
            assert self._remaining is not None and self._done is not None
            starts = work.start_ps[work.start_ps > t]
            nxt = float(starts.min()) if starts.size else np.inf
            moving = run & (conn > 0)
            if moving.any():
                ends = t + self._remaining[moving] * 8 / conn[moving] * GBPS
                nxt = min(nxt, float(ends.min()) + batch_ps)
            return nxt
        if t < work.start_ps:
            return float(work.start_ps)
        if isinstance(work, Stream):
            return np.inf
        period = self.iteration_ps(self.pace(conn, dead))
        return t + (1.0 - self._frac) * period

    def advance(self, t0: float, t1: float, conn: np.ndarray, dead: np.ndarray,
                run: np.ndarray) -> list[tuple[float, str, str, dict[str, object]]]:
        """Move from ``t0`` to ``t1`` at these rates; returns the event rows it produced."""
        rows: list[tuple[float, str, str, dict[str, object]]] = []
        work = self.work
        if self.finished or t1 <= t0:
            return rows
        if isinstance(work, Transfers):
            assert self._remaining is not None and self._done is not None
            moving = np.flatnonzero(run & (conn > 0))
            need = self._remaining[moving] * 8 / conn[moving] * GBPS
            ends = t0 + need
            done = ends <= t1 + 1e-6
            for k, at in zip(moving[done].tolist(), ends[done].tolist(), strict=True):
                self._done[k] = True
                rec = self.flows[k]
                rec.end_ps, rec.ok = at, True
                rows.append((at, "flow_completed", f"flow {rec.flow_id}",
                             {"src": rec.src, "dst": rec.dst, "size_bytes": rec.size_bytes,
                              "fct_us": (at - rec.start_ps) / 1e6}))
            self._remaining[moving] -= conn[moving] * (t1 - t0) / GBPS / 8
            self._remaining[moving[done]] = 0.0
            if self._done.all():
                self.finished = True
            return rows
        if isinstance(work, Stream) or t1 <= work.start_ps:
            return rows
        begin = max(t0, float(work.start_ps))
        period = self.iteration_ps(self.pace(conn, dead))
        if not self.iterations or self.iterations[-1].end_ps is not None:
            self._open(begin)
        self._frac += (t1 - begin) / period
        if self._frac >= 1.0 - 1e-9:
            rec = self.iterations[-1]
            rec.end_ps, rec.ok = t1, True
            rows.append((t1, "iteration_completed", work.kind, {
                "size_bytes": rec.size_bytes, "iteration": rec.iteration,
                "warmup": rec.warmup, "time_us": (t1 - rec.start_ps) / 1e6}))
            self._frac = 0.0
            self._next += 1
            if self._next >= len(work.plan):
                self.finished = True
            else:
                self._open(t1)
        return rows

    def _open(self, t: float) -> None:
        assert isinstance(self.work, Collective)
        size, iteration, warm = self.work.plan[self._next]
        self.iterations.append(IterationRecord(size, iteration, warm, t))

    def fail(self, t: float) -> None:
        """The job aborted: unfinished iterations and flows failed at ``t``."""
        for rec in self.iterations:
            if rec.end_ps is None:
                rec.end_ps, rec.ok = t, False
        for flow in self.flows:
            if flow.end_ps is None and flow.start_ps <= t:
                flow.end_ps, flow.ok = t, False
        self.finished = True
