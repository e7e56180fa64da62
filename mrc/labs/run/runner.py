"""Run a lab: every transport on the same fabric, workload, fault schedule and seed.

``run_lab`` is the Python API behind ``mrc-lab run`` (and notebooks): it validates the lab
completely first (a :class:`LabError` before anything runs), then drives one stack per
transport through the run, and returns a :class:`~mrc.labs.run.results.LabResult` of
pandas tables plus the summary dict; with ``out`` it also writes the files. The stack is built by a factory
(``SimStack`` by default); a live run (``runtime="live"``, or ``run_live``) plugs in the live
runtime's stacks (``mrc.labs.run.live``), a kernel run (``runtime="kernel"``, or
``run_kernel``) the kernel runtime's (``mrc.labs.run.kernel``), and each is otherwise this
same runner.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from mrc.labs.errors import LabError
from mrc.labs.output.folder import OutputFolder
from mrc.labs.run import time_scale
from mrc.labs.run.faults import install
from mrc.labs.run.results import RUNTIME, LabResult, TransportRun, assemble
from mrc.labs.run.time_scale import scaled_specs
from mrc.labs.run.workloads import Job, WriteBwJob, make_job
from mrc.labs.schema import faults as fault_section
from mrc.labs.schema.checks import check_float, check_int
from mrc.labs.schema.keys import materialize, set_keys
from mrc.labs.schema.lab import TRANSPORT_KINDS, Lab, TransportSpec
from mrc.labs.schema.lab_file import load_lab, validate
from mrc.labs.schema.run import check_bin
from mrc.pcap import CaptureOptions, capture_for
from mrc.sim.collector import collection_paused
from mrc.sim.routing import RoutingConfig
from mrc.units import PS_PER_US
from topology.spec import FabricSpec

#: The packet simulator is meant for lab-sized fabrics; refuse what would not fit in memory.
MAX_SIM_NIC_PORTS = 16_384
PROGRESS_DELAY_S = 2.0

StackFactory = Callable[[FabricSpec, int, int, str], Any]


class RuntimeSession(Protocol):
    """What a run on real time supplies (``live.LiveRun``, ``kernel.KernelRun``):
    a stack factory per transport, closed after it, and its parts of the summary."""

    def stacks(self, name: str) -> AbstractContextManager[StackFactory]: ...

    def annotate(self, summary: dict[str, Any],
                 totals: Mapping[str, Mapping[str, Any]]) -> None: ...


def sim_stack_factory(spec: FabricSpec, seed: int, bin_ps: int, transport_name: str, *,
                      routing: RoutingConfig | None = None) -> Any:
    from mrc.stack.stack import SimStack

    return SimStack(spec, seed, bin_ps, transport_name, routing=routing)


def _capturing(factory: StackFactory, options: CaptureOptions, out: list[Any]) -> StackFactory:
    """``factory``, with a capture attached to each simulated network it makes."""
    def make(spec: FabricSpec, seed: int, bin_ps: int, name: str) -> Any:
        from mrc.sim.capture import attach

        stack = factory(spec, seed, bin_ps, name)
        Path(options.path).parent.mkdir(parents=True, exist_ok=True)
        out.append(attach(stack.net, options))
        return stack
    return make


# ====================================================================== preparing a run
def prepare(lab_or_path: str | Path | Mapping[str, Any] | Lab, *, seed: int | None = None,
            bin_us: float | None = None,
            overrides: Mapping[str, Any] | None = None,
            max_nic_ports: int | None = MAX_SIM_NIC_PORTS) -> Lab:
    """Load and validate, applying command-line style overrides (all before any run).
    ``max_nic_ports``: the packet simulator's size limit (None: no limit, the flow model)."""
    lab = load_lab(lab_or_path)
    if overrides:
        lab = validate(set_keys(materialize(lab), overrides), name=lab.name, source=lab.source,
                       base_dir=lab.base_dir)
        lab = dataclasses.replace(lab, overrides=tuple(overrides.items()))
    run = lab.run
    if seed is not None:
        run = dataclasses.replace(run, seed=check_int(seed, "--seed", minimum=0,
                                                      maximum=2**63 - 1))
    if bin_us is not None:
        width = check_float(bin_us, "--bin-us", gt=0)
        check_bin(width, run.duration_us, "--bin-us")
        run = dataclasses.replace(run, bin_us=width)
    if run is not lab.run:
        lab = dataclasses.replace(lab, run=run)
        if any(f.drawn_from for f in lab.faults):  # classes draw again from the new seed
            lab = dataclasses.replace(lab, faults=fault_section.faults(
                lab.raw.get("fault", []), lab.fabric, run))
    ports = lab.fabric.hosts * lab.fabric.planes
    if max_nic_ports is not None and ports > max_nic_ports:
        raise LabError(f"{ports:,} NIC ports is more than the packet simulator runs "
                       f"(at most {max_nic_ports:,}); use a smaller fabric or --model flow",
                       "fabric", lab.source)
    return lab


def select_transports(lab: Lab, wanted: str | Sequence[str] | None) -> list[TransportSpec]:
    """The lab's transports, or the named subset (a bare kind name gets default params), with
    the lab's time scale in their parameters (:mod:`mrc.labs.run.time_scale`)."""
    return scaled_specs(lab, _selected(lab, wanted))


def _selected(lab: Lab, wanted: str | Sequence[str] | None) -> list[TransportSpec]:
    if wanted is None:
        return list(lab.transports.values())
    if isinstance(wanted, str):
        wanted = [w.strip() for w in wanted.split(",")]
    out: list[TransportSpec] = []
    for name in dict.fromkeys(wanted):
        if not name:
            raise LabError("empty transport name", "--transport")
        if name in lab.transports:
            out.append(lab.transports[name])
        elif name in TRANSPORT_KINDS:
            out.append(TransportSpec(name, name, {}))
        else:
            known = ", ".join(lab.transports)
            raise LabError(f"unknown transport {name!r}; the lab defines: {known} "
                           f"(mrc and rc are always available)", "--transport")
    if not out:
        raise LabError("no transport selected", "--transport")
    return out


# ====================================================================== running
def run_lab(path_or_spec: str | Path | Mapping[str, Any] | Lab, *,
            out: str | Path | OutputFolder | None = None, seed: int | None = None,
            transports: str | Sequence[str] | None = None, bin_us: float | None = None,
            progress: bool = True, overrides: Mapping[str, Any] | None = None,
            stack_factory: StackFactory | None = None, runtime: str = RUNTIME,
            live: Mapping[str, Any] | None = None,
            capture: CaptureOptions | None = None) -> LabResult:
    """Run a lab (path, bundled name, dict or :class:`Lab`) and return its tables.

    ``out``: folder to write the result files into (nothing is written when None); it is
    checked and locked before anything runs, and filled as a whole or not at all
    (:mod:`mrc.labs.output.folder`).
    ``overrides``: ``{dotted.key: value}`` applied to the lab before validation.
    ``runtime``: ``"sim"`` (the packet simulator), ``"live"`` (real UDP datagrams through
    the user-space fabric in dilated wall-clock time), which takes the ``live`` options
    (:class:`mrc.labs.run.live.LiveRun`'s: dilation, bind_host, allow_non_loopback...),
    or ``"kernel"`` (real IPv6 packets through Linux seg6local switches in network
    namespaces, as root), whose options come in the same dict
    (:class:`mrc.labs.run.kernel.KernelRun`'s: scale, pcap, capture...).
    ``capture``: a packet capture of a sim or live run (:class:`mrc.pcap.CaptureOptions`;
    the file is ``NAME.<transport>.pcapng`` when several transports run).
    A transport whose job fails is a result (``outcome == "failed"``), not an exception;
    bad input raises :class:`LabError` before anything runs.
    """
    folder = None
    if out is not None:
        folder = out if isinstance(out, OutputFolder) else OutputFolder(out)
        folder.open()  # checked and locked before anything runs
    try:
        if folder is not None:
            folder.refuse_inside((live or {}).get("pcap"), "pcap")
        result = _run(path_or_spec, seed=seed, transports=transports, bin_us=bin_us,
                      progress=progress, overrides=overrides, stack_factory=stack_factory,
                      runtime=runtime, live=live, capture=capture)
        if folder is not None:
            result.write(folder)
    finally:
        if folder is not None:
            folder.close()
    return result


def _run(path_or_spec: str | Path | Mapping[str, Any] | Lab, *, seed: int | None,
         transports: str | Sequence[str] | None, bin_us: float | None, progress: bool,
         overrides: Mapping[str, Any] | None, stack_factory: StackFactory | None,
         runtime: str, live: Mapping[str, Any] | None,
         capture: CaptureOptions | None = None) -> LabResult:
    if runtime not in (RUNTIME, "live", "kernel"):
        raise LabError(f"unknown runtime {runtime!r}; known: sim, live, kernel", "--runtime")
    if live and runtime == RUNTIME:
        raise LabError("live options need --runtime live", "--runtime")
    wall0 = time.perf_counter()
    lab = prepare(path_or_spec, seed=seed, bin_us=bin_us, overrides=overrides)
    specs = select_transports(lab, transports)
    if runtime != RUNTIME:
        if lab.run.mixed:
            raise LabError("mixed runs need the simulator (--runtime sim)", "run.mixed")
        session: RuntimeSession
        if runtime == "live":
            from mrc.labs.run.live import LiveRun
            from mrc.labs.run.pace import check_live_lab

            check_live_lab(lab, dict(live or {}).get("bind_host", "127.0.0.1"))
            session = LiveRun(lab, specs, capture=capture, **dict(live or {}))
        else:
            from mrc.labs.run.kernel import KernelRun

            session = KernelRun(lab, specs, **dict(live or {}))
        runs = []
        for spec in specs:
            with session.stacks(spec.name) as runtime_factory:
                runs.append(run_transport(lab, spec, runtime_factory, progress=progress))
        result = assemble(lab, runs, wall_s=time.perf_counter() - wall0, runtime=runtime)
        session.annotate(result.summary, {run.name: run.totals for run in runs})
        from mrc.labs.run.pace import judge_pace

        judge_pace(result, runtime)  # lag distorts modelled rates: say so, loudly
        return result
    if lab.run.mixed:
        runs = run_mixed(lab, specs, progress=progress)
        return assemble(lab, runs, wall_s=time.perf_counter() - wall0)
    factory = stack_factory or functools.partial(sim_stack_factory,
                                                 routing=time_scale.scaled(lab, lab.routing))
    runs = []
    for spec in specs:
        captures: list[Any] = []
        each = capture_for(capture, spec.name, len(specs) > 1)
        made = factory if each is None else _capturing(factory, each, captures)
        try:
            runs.append(run_transport(lab, spec, made, progress=progress))
        finally:
            for c in captures:
                c.close()
    return assemble(lab, runs, wall_s=time.perf_counter() - wall0)


def run_live(path_or_spec: str | Path | Mapping[str, Any] | Lab, *,
             out: str | Path | None = None, seed: int | None = None,
             transports: str | Sequence[str] | None = None, bin_us: float | None = None,
             progress: bool = True, overrides: Mapping[str, Any] | None = None,
             capture: CaptureOptions | None = None, **live: Any) -> LabResult:
    """Run a lab in the live runtime (``run_lab(..., runtime="live", live=live)``): the same
    tables and files as a simulated run, with ``runtime: "live"`` and a ``live`` section
    (dilation, wall and modelled units, fabric and host counters)."""
    return run_lab(path_or_spec, out=out, seed=seed, transports=transports, bin_us=bin_us,
                   progress=progress, overrides=overrides, runtime="live", live=live,
                   capture=capture)


def run_kernel(path_or_spec: str | Path | Mapping[str, Any] | Lab, *,
               out: str | Path | None = None, seed: int | None = None,
               transports: str | Sequence[str] | None = None, bin_us: float | None = None,
               progress: bool = True, overrides: Mapping[str, Any] | None = None,
               **kernel: Any) -> LabResult:
    """Run a lab on the Linux kernel's SRv6 data plane (``run_lab(..., runtime="kernel",
    live=kernel)``): the same tables and files as a simulated run, with ``runtime:
    "kernel"`` and a ``kernel`` section (scale, limits, build and teardown times, fault
    timing, kernel counters)."""
    return run_lab(path_or_spec, out=out, seed=seed, transports=transports, bin_us=bin_us,
                   progress=progress, overrides=overrides, runtime="kernel", live=kernel)


def run_transport(lab: Lab, spec: TransportSpec, factory: StackFactory, *,
                  progress: bool = False) -> TransportRun:
    """One transport through the whole lab on a fresh stack."""
    bin_ps = int(round(lab.run.bin_us * PS_PER_US))
    duration_ps = int(round(lab.run.duration_us * PS_PER_US))
    with collection_paused(building=True):  # the fabric and the job (collector.py says why)
        stack = factory(lab.fabric, lab.run.seed, bin_ps, spec.name)
        if hasattr(stack, "enable_series"):  # queue depth and per-connection goodput series
            stack.enable_series()
        sim = stack.sim
        job = make_job(stack, lab.workload, spec.kind, dict(spec.params), lab.run.seed)
        for variable, why in spec.ignored_env:  # from [transport.NAME.env], not modelled
            stack.note_event(0, "env_ignored", spec.name, variable=variable, why=why)
        job.start()
        install(stack, lab)
    _advance(sim, job, duration_ps, bin_ps, progress, f"{lab.name} [{spec.name}]")
    if not job.finite:
        job.stop_posting()
        grace_end = duration_ps + int(round(lab.run.grace_us * PS_PER_US))
        while job.outstanding and not job.failed and sim.now < grace_end:
            sim.run(grace_end)  # stops early when the last message completes
            job.poll(sim.now)
    job.poll(sim.now)
    sim_end_ps = sim.now
    end_ps = min(sim_end_ps, duration_ps)
    return _collect(lab, spec, stack, job, end_ps, sim_end_ps)


def run_mixed(lab: Lab, specs: Sequence[TransportSpec], *,
              progress: bool = False) -> list[TransportRun]:
    """Every transport through the lab at once on one fabric (``[run] mixed = true``, see
    :mod:`mrc.stack.mixed`): a job per transport on its view of one stack, the faults once."""
    from mrc.stack.mixed import MixedStack

    bin_ps = int(round(lab.run.bin_us * PS_PER_US))
    duration_ps = int(round(lab.run.duration_us * PS_PER_US))
    with collection_paused(building=True):  # the fabric and the jobs (collector.py says why)
        stack = MixedStack(lab.fabric, lab.run.seed, bin_ps, [s.name for s in specs],
                           routing=time_scale.scaled(lab, lab.routing))
        stack.enable_series()
        views = [stack.view(spec.name) for spec in specs]
        jobs = [make_job(view, lab.workload, spec.kind, dict(spec.params), lab.run.seed)
                for view, spec in zip(views, specs, strict=True)]
        for job in jobs:
            job.start()
        install(stack, lab)
    sim = stack.sim
    desc = f"{lab.name} [{'+'.join(s.name for s in specs)}]"
    _advance(sim, _AllJobs(jobs), duration_ps, bin_ps, progress, desc)  # type: ignore[arg-type]
    if not all(job.finite for job in jobs):
        for job in jobs:
            job.stop_posting()
        grace_end = duration_ps + int(round(lab.run.grace_us * PS_PER_US))
        while any(j.outstanding and not j.failed for j in jobs) and sim.now < grace_end:
            sim.run(grace_end)
            for job in jobs:
                job.poll(sim.now)
    for job in jobs:
        job.poll(sim.now)
    end_ps = min(sim.now, duration_ps)
    return [_collect(lab, spec, view, job, end_ps, sim.now)
            for spec, view, job in zip(specs, views, jobs, strict=True)]


class _AllJobs:
    """Several jobs advanced as one: finished (or failed) when every one is."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)
        self.finite = all(job.finite for job in jobs)

    @property
    def finished(self) -> bool:
        return all(job.finished or job.failed for job in self.jobs)

    @property
    def failed(self) -> bool:
        return False

    def poll(self, now: int) -> None:
        for job in self.jobs:
            job.poll(now)


def _advance(sim: Any, job: Job, duration_ps: int, bin_ps: int, progress: bool,
             desc: str) -> None:
    """Run to the end of the lab (or until a finite job is done), with a progress bar that
    only appears when the run takes more than a couple of seconds."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(duration_ps / PS_PER_US), unit="us", desc=desc, leave=False,
                   delay=PROGRESS_DELAY_S, file=sys.stderr, dynamic_ncols=True)
    chunk = max(bin_ps, duration_ps // 400, 1)
    shown = 0
    try:
        while sim.now < duration_ps:
            target = min(sim.now + chunk, duration_ps)
            sim.run(target)
            job.poll(sim.now)
            if bar is not None:
                now_us = round(sim.now / PS_PER_US)
                bar.update(now_us - shown)
                shown = now_us
            if job.finite and (job.finished or job.failed):
                break
            if sim.now < target:  # stopped early by something other than the job
                break
    finally:
        if bar is not None:
            bar.close()


def _frame_with_transport(frame: pd.DataFrame | None, name: str) -> pd.DataFrame:
    if frame is None:
        return pd.DataFrame(columns=["time_us", "transport", "kind", "target"])
    frame = frame.copy()
    if "transport" not in frame.columns:
        frame.insert(1 if "time_us" in frame.columns else 0, "transport", name)
    return frame


def _collect(lab: Lab, spec: TransportSpec, stack: Any, job: Job, end_ps: int,
             sim_end_ps: int) -> TransportRun:
    ts = _frame_with_transport(stack.timeseries(), spec.name)
    ts = ts[ts["time_us"] < end_ps / PS_PER_US - 1e-9].reset_index(drop=True)
    events = _frame_with_transport(stack.events(), spec.name)
    if not events.empty:
        events = events.sort_values("time_us", kind="mergesort").reset_index(drop=True)
    iterations = [{"transport": spec.name, "size_bytes": r.size_bytes, "iteration": r.iteration,
                   "warmup": r.warmup, "start_us": r.start_ps / PS_PER_US,
                   "time_us": None if r.end_ps is None or not r.ok
                   else (r.end_ps - r.start_ps) / PS_PER_US, "ok": r.ok}
                  for r in job.iterations()]
    flows = [{"transport": spec.name, "flow_id": f.flow_id, "src": f.src, "dst": f.dst,
              "size_bytes": f.size_bytes,
              "start_us": None if f.start_ps is None else f.start_ps / PS_PER_US,
              "end_us": None if f.end_ps is None else f.end_ps / PS_PER_US,
              "fct_us": None if f.end_ps is None or not f.ok or f.start_ps is None
              else (f.end_ps - f.start_ps) / PS_PER_US, "ok": f.ok}
             for f in job.flows()]
    return TransportRun(
        name=spec.name, kind=spec.kind, outcome=job.outcome(),
        failed_at_us=None if job.failed_at_ps is None else job.failed_at_ps / PS_PER_US,
        failure_reason=job.failure_reason, end_us=end_ps / PS_PER_US,
        sim_end_us=sim_end_ps / PS_PER_US, totals=dict(stack.totals()), timeseries=ts,
        events=events, nic_ceiling_gbps=float(stack.goodput_ceiling_gbps()),
        ceiling_nics=job.ceiling_nics, iterations=iterations, flows=flows,
        cqe_latency_us=job.cqe_latency_us() if isinstance(job, WriteBwJob) else None)


