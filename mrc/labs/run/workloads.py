"""Workload drivers: they post RDMA WRITEs on a SimStack's connections and time what completes.

Completions follow verbs (:mod:`mrc.stack.connections`): a WRITE completes at the sender (its
CQE) when it is acknowledged, and at the receiver when it is placed. ``write_bw`` behaves
like perftest's ``ib_write_bw``: ``tx_depth`` WRITEs in flight per direction, each reposted
on its sender CQE, so ``tx_depth`` bounds the sender's outstanding work requests; every
completion row carries its post -> CQE latency. Collectives chain their steps on placement
(the data a rank forwards must have arrived), as NCCL waits for the receive.

A driver is the "application" above one transport: it opens the connections its traffic
pattern needs, posts messages at the right simulated times, chains dependent steps (a ring
all-reduce step waits for the chunk from the previous rank), and records iterations and flow
completions. Like NCCL, a job fails as soon as any of its connections fails: the driver stops
posting and reports the first failure; that is a result, not an error.

Only the SimStack facade is used (``sim``, ``open``, ``note_event``), so the same drivers can
later run over the live runtime's stack.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mrc.labs.errors import LabError
from mrc.labs.run.triggers import Triggers
from mrc.labs.schema.lab import (
    Collective,
    ConnectionMatrix,
    Flow,
    Permutation,
    TriggerSpec,
    Workload,
    WriteBw,
)
from mrc.transport.base import EVENT_MESSAGE_COMPLETED
from mrc.units import PS_PER_US


def us_to_ps(value: float) -> int:
    return int(round(value * PS_PER_US))


def ps_to_us(value: int | None) -> float | None:
    return None if value is None else value / PS_PER_US


# ====================================================================== the stack seen by drivers
class Connection(Protocol):
    failed: bool
    failed_at_ps: int | None
    failure_reason: str | None

    def write(self, now: int, size: int,
              on_complete: Callable[[int, bool], None] | None = None, *,
              on_placed: Callable[[int, bool], None] | None = None) -> int: ...


class Stack(Protocol):
    sim: Any

    def open(self, kind: str, src: int, dst: int, params: dict[str, Any]) -> Connection: ...

    def note_event(self, now_ps: int, kind: str, target: str, **detail: Any) -> None: ...


def derangement(hosts: tuple[int, ...] | list[int], seed: int) -> dict[int, int]:
    """A peer for every host, never itself, all peers distinct; a pure function of the seed."""
    hosts = list(hosts)
    if len(hosts) < 2:
        raise LabError("a permutation needs at least 2 hosts", "workload.hosts")
    rng = random.Random(seed)
    while True:
        peers = hosts[:]
        rng.shuffle(peers)
        if all(a != b for a, b in zip(hosts, peers, strict=True)):
            return dict(zip(hosts, peers, strict=True))


@dataclass
class IterationRecord:
    size_bytes: int
    iteration: int
    warmup: bool
    start_ps: int
    end_ps: int | None = None
    ok: bool | None = None


@dataclass
class FlowRecord:
    flow_id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: int | None  # None: a triggered flow whose trigger has not fired
    end_ps: int | None = None
    ok: bool | None = None


# ====================================================================== drivers
class Job:
    """One workload running over one transport on one stack."""

    #: finite jobs end the run when they finish; write_bw runs for the whole lab
    finite = True

    def __init__(self, stack: Stack, kind: str, params: dict[str, Any], seed: int) -> None:
        self.stack = stack
        self.sim = stack.sim
        self.kind = kind
        self.params = params
        self.seed = seed
        self.posting = True
        self.finished = False
        self.failed = False
        self.failed_at_ps: int | None = None
        self.failure_reason: str | None = None
        self.outstanding = 0
        self.conns: dict[tuple[int, int], Connection] = {}
        self._conn_list: list[tuple[str, Connection]] = []

    # -- plumbing
    def open(self, src: int, dst: int, label: str | None = None) -> Connection:
        conn = self.stack.open(self.kind, src, dst, dict(self.params))
        self._conn_list.append((label or f"h{src}->h{dst}", conn))
        return conn

    def conn(self, src: int, dst: int) -> Connection:
        """The one connection per ordered host pair (collectives reuse it)."""
        key = (src, dst)
        if key not in self.conns:
            self.conns[key] = self.open(src, dst)
        return self.conns[key]

    def write(self, conn: Connection, now: int, size: int,
              done: Callable[[int, bool], None], *, on_placement: bool = False) -> None:
        """Post one WRITE; ``done`` runs at its sender CQE, or (``on_placement``) when it
        is placed at the receiver. ``outstanding`` counts WRITEs until their CQE."""
        self.outstanding += 1

        def complete(t: int, ok: bool) -> None:
            self.outstanding -= 1
            if not ok:
                self.fail(t, conn, None if conn.failed else "a message failed verification")
            if not on_placement:
                done(t, ok)

        if on_placement:
            conn.write(now, size, complete, on_placed=done)
        else:
            conn.write(now, size, complete)

    def fail(self, now: int, conn: Connection | None = None, reason: str | None = None) -> None:
        """The job aborts on the first connection error, as NCCL does."""
        if self.failed:
            return
        self.failed = True
        self.posting = False
        at = conn.failed_at_ps if conn is not None and conn.failed_at_ps is not None else now
        self.failed_at_ps = at
        self.failure_reason = (reason or (conn.failure_reason if conn is not None else None)
                               or "connection error")
        label = next((lbl for lbl, c in self._conn_list if c is conn), "job")
        self.stack.note_event(at, "job_failed", label, reason=self.failure_reason)
        if self.finite:
            self.sim.stop()

    def poll(self, now: int) -> None:
        """Notice connections that failed without a message callback (e.g. while idle)."""
        if self.failed:
            return
        failed = [(c.failed_at_ps if c.failed_at_ps is not None else now, i, c)
                  for i, (_, c) in enumerate(self._conn_list) if c.failed]
        if failed:
            at, _, conn = min(failed, key=lambda x: (x[0], x[1]))
            self.fail(at, conn)

    def finish(self, now: int) -> None:
        self.finished = True
        self.posting = False
        if self.finite:
            self.sim.stop()

    # -- per workload
    def start(self) -> None:
        raise NotImplementedError

    def stop_posting(self) -> None:
        self.posting = False

    @property
    def ceiling_nics(self) -> int:
        """How many NICs' worth of goodput this workload can use at most."""
        raise NotImplementedError

    def outcome(self) -> str:
        if self.failed:
            return "failed"
        if self.finite:
            return "completed" if self.finished else "running"
        return "completed" if self.outstanding == 0 else "running"

    def iterations(self) -> list[IterationRecord]:
        return []

    def flows(self) -> list[FlowRecord]:
        return []


class WriteBwJob(Job):
    """perftest ``ib_write_bw``: ``tx_depth`` WRITEs in flight per direction, each reposted on
    its sender CQE, all run long. ``max_in_flight`` records the most WRITEs a direction ever
    had posted and not completed (never more than ``tx_depth``)."""

    finite = False

    def __init__(self, stack: Stack, kind: str, params: dict[str, Any], seed: int,
                 spec: WriteBw) -> None:
        super().__init__(stack, kind, params, seed)
        self.spec = spec
        self.directions: list[tuple[int, int]] = []
        for src, dst in spec.pairs:
            self.directions.append((src, dst))
            if spec.bidirectional:
                self.directions.append((dst, src))
        self.messages_completed = 0
        self.draining = False
        self.in_flight: dict[str, int] = {}
        self.max_in_flight = 0
        self.latencies_ps: list[int] = []

    def stop_posting(self) -> None:
        """The run is over: post nothing more and let the messages in flight finish."""
        self.posting = False
        self.draining = True

    @property
    def ceiling_nics(self) -> int:
        senders = {s for s, _ in self.directions}
        receivers = {d for _, d in self.directions}
        return min(len(senders), len(receivers))

    def start(self) -> None:
        conns = [self.open(s, d) for s, d in self.directions]
        self.sim.at(us_to_ps(self.spec.start_us), self._begin, conns)

    def _begin(self, conns: list[Connection]) -> None:
        now = self.sim.now
        for conn, (src, dst) in zip(conns, self.directions, strict=True):
            for _ in range(self.spec.tx_depth):
                self._post(conn, now, f"h{src}->h{dst}")

    def _post(self, conn: Connection, now: int, label: str) -> None:
        size = self.spec.message_bytes
        n = self.in_flight[label] = self.in_flight.get(label, 0) + 1
        if n > self.max_in_flight:
            self.max_in_flight = n

        def done(t: int, ok: bool) -> None:
            self.in_flight[label] -= 1
            if ok:
                self.messages_completed += 1
                self.latencies_ps.append(t - now)
                self.stack.note_event(t, EVENT_MESSAGE_COMPLETED, label, bytes=size,
                                      latency_us=(t - now) / PS_PER_US)
                if self.posting:
                    self._post(conn, t, label)
            if self.draining and self.outstanding == 0:
                self.sim.stop()  # the last message after the end of the run: done

        self.write(conn, now, size, done)

    def cqe_latency_us(self) -> dict[str, float | None]:
        """Post -> sender CQE latency of the completed WRITEs (p50, p99, max)."""
        lat = sorted(self.latencies_ps)
        if not lat:
            return {"p50": None, "p99": None, "max": None}

        def pick(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] / PS_PER_US

        return {"p50": pick(0.5), "p99": pick(0.99), "max": lat[-1] / PS_PER_US}


class CollectiveJob(Job):
    """nccl-tests style: ``warmup_iters`` + ``iters`` back-to-back iterations per size."""

    def __init__(self, stack: Stack, kind: str, params: dict[str, Any], seed: int,
                 spec: Collective) -> None:
        super().__init__(stack, kind, params, seed)
        self.spec = spec
        self.n = len(spec.hosts)
        self.records: list[IterationRecord] = []
        self._plan = [(size, i, i < spec.warmup_iters) for size in spec.sizes_bytes
                      for i in range(spec.warmup_iters + spec.iters)]
        self._next = 0
        self._pending = 0
        self._current: IterationRecord | None = None

    @property
    def ceiling_nics(self) -> int:
        return self.n

    def start(self) -> None:
        hosts = self.spec.hosts
        for r, src in enumerate(hosts):  # open every connection up front, in a fixed order
            for dst in self._peers(r):
                self.conn(src, dst)
        self.sim.at(us_to_ps(self.spec.start_us), self._launch, None)

    def _peers(self, rank: int) -> list[int]:
        hosts = self.spec.hosts
        if self.spec.kind == "all_to_all":
            return [h for j, h in enumerate(hosts) if j != rank]
        return [hosts[(rank + 1) % self.n]]

    def _launch(self, _: Any) -> None:
        now = self.sim.now
        if not self.posting:
            return
        if self._next >= len(self._plan):
            self.finish(now)
            return
        size, i, warm = self._plan[self._next]
        self._next += 1
        record = IterationRecord(size_bytes=size, iteration=i, warmup=warm, start_ps=now)
        self.records.append(record)
        self._current = record
        hosts = self.spec.hosts
        if self.spec.kind == "sendrecv":
            self._pending = self.n
            for r, src in enumerate(hosts):
                self.write(self.conn(src, hosts[(r + 1) % self.n]), now, size, self._step_done,
                           on_placement=True)
        elif self.spec.kind == "all_to_all":
            chunk = max(1, -(-size // self.n))
            self._pending = self.n * (self.n - 1)
            for r, src in enumerate(hosts):
                for dst in self._peers(r):
                    self.write(self.conn(src, dst), now, chunk, self._step_done,
                               on_placement=True)
        else:  # ring all-reduce: 2(n-1) steps, each rank forwards what it just received
            chunk = max(1, -(-size // self.n))
            steps = 2 * (self.n - 1)
            self._pending = self.n * steps
            for r in range(self.n):
                self._ring_send(r, 0, steps, chunk, now)

    def _ring_send(self, rank: int, step: int, steps: int, chunk: int, now: int) -> None:
        hosts = self.spec.hosts
        nxt = (rank + 1) % self.n

        def done(t: int, ok: bool) -> None:
            if ok and step + 1 < steps and self.posting:
                self._ring_send(nxt, step + 1, steps, chunk, t)
            self._step_done(t, ok)

        self.write(self.conn(hosts[rank], hosts[nxt]), now, chunk, done, on_placement=True)

    def _step_done(self, now: int, ok: bool) -> None:
        record = self._current
        if record is None or record.ok is False:
            return
        if not ok:
            record.ok = False
            record.end_ps = now
            return
        self._pending -= 1
        if self._pending == 0:
            record.end_ps = now
            record.ok = True
            self.stack.note_event(
                now, "iteration_completed", self.spec.kind, size_bytes=record.size_bytes,
                iteration=record.iteration, warmup=record.warmup,
                time_us=(now - record.start_ps) / PS_PER_US)
            self.sim.at(now, self._launch, None)

    def iterations(self) -> list[IterationRecord]:
        return list(self.records)


class FlowJob(Job):
    """Independent flows, one connection each (permutation, htsim connection matrix)."""

    def __init__(self, stack: Stack, kind: str, params: dict[str, Any], seed: int,
                 flows: list[Flow], triggers: Sequence[TriggerSpec] = ()) -> None:
        super().__init__(stack, kind, params, seed)
        self.flow_specs = flows
        self.records: list[FlowRecord] = []
        self._remaining = len(flows)
        # htsim's triggers: a flow that is done may start others (mrc.labs.run.triggers)
        self._triggers = Triggers(triggers, flows) if triggers else None
        self._by_id: dict[int, tuple[Flow, Connection, FlowRecord]] = {}

    @property
    def ceiling_nics(self) -> int:
        return min(len({f.src for f in self.flow_specs}), len({f.dst for f in self.flow_specs}))

    def start(self) -> None:
        for flow in self.flow_specs:
            conn = self.open(flow.src, flow.dst, f"flow {flow.flow_id}")
            start = None if flow.start_us is None else us_to_ps(flow.start_us)
            record = FlowRecord(flow_id=flow.flow_id, src=flow.src, dst=flow.dst,
                                size_bytes=flow.size_bytes, start_ps=start)
            self.records.append(record)
            self._by_id[flow.flow_id] = (flow, conn, record)
            if start is not None:  # a triggered flow waits for its trigger
                self.sim.at(start, self._post, (conn, record))

    def _post(self, arg: tuple[Connection, FlowRecord]) -> None:
        conn, record = arg
        if not self.posting:
            return
        if record.start_ps is None:
            record.start_ps = self.sim.now  # started by its trigger, now
        started = record.start_ps

        def done(t: int, ok: bool) -> None:
            record.end_ps = t
            record.ok = ok
            if ok:
                self._remaining -= 1
                self.stack.note_event(t, "flow_completed", f"flow {record.flow_id}",
                                      src=record.src, dst=record.dst,
                                      size_bytes=record.size_bytes,
                                      fct_us=(t - started) / PS_PER_US)
                if self._triggers is not None:
                    flow = self._by_id[record.flow_id][0]
                    for fid in self._triggers.flow_done(flow):
                        _, nxt_conn, nxt = self._by_id[fid]
                        self.sim.at(t, self._post, (nxt_conn, nxt))
                if self._remaining == 0:
                    self.finish(t)

        self.write(conn, self.sim.now, record.size_bytes, done, on_placement=True)

    def flows(self) -> list[FlowRecord]:
        return list(self.records)


def make_job(stack: Stack, workload: Workload, kind: str, params: dict[str, Any],
             seed: int) -> Job:
    """The driver for a lab's workload, bound to one transport on one stack."""
    if isinstance(workload, WriteBw):
        return WriteBwJob(stack, kind, params, seed, workload)
    if isinstance(workload, Collective):
        return CollectiveJob(stack, kind, params, seed, workload)
    if isinstance(workload, Permutation):
        peers = derangement(workload.hosts, seed)
        flows = [Flow(src=h, dst=peers[h], size_bytes=workload.size_bytes,
                      start_us=workload.start_us, flow_id=i + 1)
                 for i, h in enumerate(workload.hosts)]
        return FlowJob(stack, kind, params, seed, flows)
    if isinstance(workload, ConnectionMatrix):
        return FlowJob(stack, kind, params, seed, list(workload.flows), workload.triggers)
    raise TypeError(f"unknown workload {workload!r}")
