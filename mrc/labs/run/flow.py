"""``mrc-lab run LAB --model flow``: a lab through the flow-level model (:mod:`mrc.flow`).

The lab is read through the labs layer's own objects (``prepare``, the workload dataclasses,
``schedule`` for the fault primitives, ``derangement`` for a permutation's peers), turned into
the flow model's plain inputs, and the traces come back as the packet runner's
``TransportRun`` objects, so ``assemble`` builds the same tables, summary and plot. The result
is marked flow-level: ``summary["runtime"] == "flow"``, a ``flow`` section with how each
transport was modelled, and the plot's title says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mrc import flow
from mrc.flow.conditions import Change
from mrc.flow.model import ceiling_nics
from mrc.flow.tables import events, timeseries
from mrc.flow.transport_model import TransportModel
from mrc.flow.workload import Collective as FlowCollective
from mrc.flow.workload import Stream, Transfers, Workload
from mrc.labs.errors import LabError
from mrc.labs.run.results import LabResult, TransportRun, assemble
from mrc.labs.run.runner import prepare, select_transports
from mrc.labs.run.time_scale import scaled
from mrc.labs.run.workloads import derangement
from mrc.labs.schema.lab import Collective, ConnectionMatrix, Lab, Permutation, WriteBw
from mrc.labs.schema.schedule import schedule
from mrc.stack.transport_params import ParamError
from mrc.units import PS_PER_US, us

RUNTIME = "flow"
#: Counters only packets have: 0 in a flow run's summary, and listed as such.
NOT_MODELLED = ("retransmitted_packets", "trimmed_packets", "dropped_packets", "probes_sent")


class FlowLabResult(LabResult):
    """A :class:`LabResult` whose plot says it comes from the flow-level model."""

    def plot(self, path: str | Path | None = None) -> Any:
        from mrc.labs.report.plot import plot_bandwidth

        return plot_bandwidth(self.timeseries, self.summary, faults=self.fault_spans,
                              bin_us=self.lab.run.bin_us,
                              title=f"{self.lab.name} [flow-level model]",
                              subtitle=self.lab.description, overrides=self.lab.overrides,
                              iterations=self.iterations, path=path)


def prepare_flow(lab_or_path: str | Path | Mapping[str, Any] | Lab, *,
                 seed: int | None = None, bin_us: float | None = None,
                 overrides: Mapping[str, Any] | None = None) -> Lab:
    """``prepare`` without the packet simulator's size limit (the flow model checks memory
    itself, before allocating), then what the flow model refuses (:func:`refusals`)."""
    lab = prepare(lab_or_path, seed=seed, bin_us=bin_us, overrides=overrides,
                  max_nic_ports=None)
    refusals(lab)
    return lab


def refusals(lab: Lab) -> None:
    """What a lab may ask that the flow model does not model: one line each, naming the key
    (exit 2), never a silently different answer."""
    if lab.run.mixed:
        raise LabError("the flow model runs each transport on its own fabric (mixed runs share "
                       "queues packet by packet: --model packet)", "run.mixed", lab.source)
    w = lab.workload
    if isinstance(w, ConnectionMatrix) and w.triggers:
        raise LabError("htsim triggers (flows started by other flows' completion) are not "
                       "modelled at flow level: --model packet", "workload.triggers",
                       lab.source)
    for f in lab.faults:
        why = UNMODELLED_FAULTS.get(f.kind)
        if why:
            raise LabError(f"{f.kind} is not modelled at flow level: {why}",
                           f"fault.{f.index}.kind", lab.source)


#: Fault kinds the flow model refuses, and why (every other kind of
#: ``mrc.labs.schema.faults.FAULT_KINDS`` is modelled: :mod:`mrc.flow.conditions`).
UNMODELLED_FAULTS = {
    "ev_deny": "a deny mask selects EVs by their bits, and the flow model keeps EV counts per "
               "path, not EV values (to deny every EV through a T1, use kind = \"drain\"); "
               "--model packet",
}


def workload(lab: Lab) -> Workload:
    """The lab's workload in the flow model's terms (same connections, same order)."""
    w = lab.workload
    if isinstance(w, WriteBw):
        pairs = [(s, d) for s, d in w.pairs for s, d in ([(s, d), (d, s)] if w.bidirectional
                                                          else [(s, d)])]
        src, dst = (np.array(x, dtype=np.int64) for x in zip(*pairs, strict=True))
        return Stream(src, dst, us(w.start_us),
                      drain_bytes=(w.tx_depth - 0.5) * w.message_bytes)
    if isinstance(w, Collective):
        plan = tuple((size, i, i < w.warmup_iters) for size in w.sizes_bytes
                     for i in range(w.warmup_iters + w.iters))
        return FlowCollective(w.kind, np.array(w.hosts, dtype=np.int64), plan, us(w.start_us))
    if isinstance(w, Permutation):
        peers = derangement(w.hosts, lab.run.seed)
        n = len(w.hosts)
        return Transfers(np.array(w.hosts, dtype=np.int64),
                         np.array([peers[h] for h in w.hosts], dtype=np.int64),
                         np.full(n, w.size_bytes, dtype=np.int64),
                         np.full(n, us(w.start_us), dtype=np.int64), np.arange(1, n + 1))
    assert isinstance(w, ConnectionMatrix)
    flows = w.flows
    return Transfers(np.array([f.src for f in flows], dtype=np.int64),
                     np.array([f.dst for f in flows], dtype=np.int64),
                     np.array([f.size_bytes for f in flows], dtype=np.int64),
                     # a flow without a start waits for a trigger: refused by refusals()
                     np.array([us(f.start_us or 0.0) for f in flows], dtype=np.int64),
                     np.array([f.flow_id for f in flows], dtype=np.int64))


def check_flow(lab: Lab, specs: Sequence[Any], *, max_bytes: int = flow.MAX_BYTES
               ) -> tuple[Workload, list[Change], list[TransportModel]]:
    """Everything short of running: the flow model's inputs, each transport's model (what a
    transport table asks that the flow model does not model is refused here, naming its
    key) and the memory estimate, refused with the estimate when over ``max_bytes``
    (before anything big is allocated). Sweeps call it for every grid point."""
    spec = lab.fabric
    try:
        routing = scaled(lab, lab.routing)
        models = [flow.transport_model(spec, t.name, t.kind, dict(t.params), routing)
                  for t in specs]
    except (ParamError, ValueError) as exc:
        message = str(exc)
        key, _, rest = message.partition(": ")
        raise LabError(rest or message, key if rest else None, lab.source) from None
    stalls = [f for f in lab.faults if f.kind == "nic_stall"]
    for m in models:
        if m.kind == "rc" and m.pfc and stalls:
            raise LabError(
                f"a stuck NIC on a PFC fabric spreads pause frames switch by switch (a PFC "
                f"storm), which the flow model does not model; run transport {m.name!r} "
                "with --model packet, without PFC (fabric.pfc = false, or "
                f"transport.{m.name}.pfc = false), or pick --transport mrc",
                f"fault.{stalls[0].index}.kind", lab.source)
    work = workload(lab)
    sched = changes(lab)
    try:
        flow.check_size(spec, work, models, sched, max_bytes=max_bytes)
    except flow.TooLarge as exc:
        raise LabError(str(exc), "fabric", lab.source) from None
    return work, sched, models


def changes(lab: Lab) -> list[Change]:
    """The lab's fault primitives (``schedule``) in integer picoseconds."""
    return [Change(us(a.time_us), a.action, a.target, a.fault, dict(a.params))
            for a in schedule(lab.faults)]


def run_flow_lab(path_or_spec: str | Path | Mapping[str, Any] | Lab, *,
                 out: str | Path | None = None, seed: int | None = None,
                 transports: str | Sequence[str] | None = None, bin_us: float | None = None,
                 overrides: Mapping[str, Any] | None = None,
                 max_bytes: int = flow.MAX_BYTES) -> FlowLabResult:
    """Run a lab through the flow model; the result reads like :func:`run_lab`'s."""
    wall0 = time.perf_counter()
    lab = prepare_flow(path_or_spec, seed=seed, bin_us=bin_us, overrides=overrides)
    specs = select_transports(lab, transports)
    spec = lab.fabric
    work, sched, models = check_flow(lab, specs, max_bytes=max_bytes)
    duration_ps = us(lab.run.duration_us)
    bin_ps = us(lab.run.bin_us)
    try:
        results = flow.run(spec, work, models, sched, seed=lab.run.seed, end_ps=duration_ps,
                           max_bytes=max_bytes, batch_ps=bin_ps)
    except flow.TooLarge as exc:
        raise LabError(str(exc), "fabric", lab.source) from None
    runs = [_transport_run(lab, spec_t, r, work, bin_ps)
            for spec_t, r in zip(specs, results, strict=True)]
    result = assemble(lab, runs, wall_s=time.perf_counter() - wall0, runtime=RUNTIME)
    summary = result.summary
    summary["model"] = "flow"
    summary["flow"] = {"not_modelled": list(NOT_MODELLED),
                       **{t.name: r.info for t, r in zip(specs, results, strict=True)}}
    out_result = FlowLabResult(**{f: getattr(result, f) for f in (
        "lab", "summary", "timeseries", "events", "collective", "iterations", "flows",
        "fault_spans", "out_dir")})
    if out is not None:
        out_result.write(out)
    return out_result


def _transport_run(lab: Lab, spec_t: Any, r: flow.FlowRun, work: Workload,
                   bin_ps: int) -> TransportRun:
    trace, progress = r.trace, r.progress
    planes = lab.fabric.planes
    end_ps = trace.end_ps
    ts = timeseries(trace.name, trace.times, trace.total, trace.planes, trace.bad_evs,
                    bin_ps=bin_ps, end_ps=end_ps, plane_count=planes)
    delivered = float(np.sum(np.asarray(trace.total) * np.diff(trace.times))) / 8 / 1000
    failed = trace.failed_at_ps is not None
    if failed:
        outcome = "failed"
    elif isinstance(work, Stream) or progress.finished:
        outcome = "completed"
    else:
        outcome = "running"
    iterations = [{"transport": trace.name, "size_bytes": i.size_bytes,
                   "iteration": i.iteration, "warmup": i.warmup,
                   "start_us": i.start_ps / PS_PER_US,
                   "time_us": None if i.end_ps is None or not i.ok
                   else (i.end_ps - i.start_ps) / PS_PER_US, "ok": i.ok}
                  for i in progress.iterations]
    flows = [{"transport": trace.name, "flow_id": f.flow_id, "src": f.src, "dst": f.dst,
              "size_bytes": f.size_bytes, "start_us": f.start_ps / PS_PER_US,
              "end_us": None if f.end_ps is None else f.end_ps / PS_PER_US,
              "fct_us": None if f.end_ps is None or not f.ok
              else (f.end_ps - f.start_ps) / PS_PER_US, "ok": f.ok}
             for f in progress.flows]
    return TransportRun(
        name=trace.name, kind=spec_t.kind, outcome=outcome,
        failed_at_us=None if not failed else trace.failed_at_ps / PS_PER_US,  # type: ignore[operator]
        failure_reason=trace.failure_reason, end_us=min(end_ps, us(lab.run.duration_us))
        / PS_PER_US, sim_end_us=end_ps / PS_PER_US,
        totals={"bytes_delivered": int(round(delivered)),
                "paths_marked_bad": int(round(trace.marked_bad)),
                "paths_reintegrated": int(round(trace.reintegrated))},
        timeseries=ts, events=events(trace.name, trace.rows),
        nic_ceiling_gbps=float(lab.fabric.goodput_ceiling_gbps()),
        ceiling_nics=ceiling_nics(work), iterations=iterations, flows=flows)
