"""Run a lab on the Linux kernel's SRv6 data plane: ``mrc-lab run LAB --runtime kernel``.

The fabric is built for each transport from the lab's ``[fabric]`` as network namespaces,
veth pairs and seg6local routes (:mod:`mrc.kernel`), the hosts run the unchanged QPs on real
veths, and the lab's fault schedule is applied to real interfaces on time. Everything else is
the labs runner's own code (workload, fault schedule, summary, CSVs, plot), so the tables
compare line by line with a simulated run of the same lab.

What changes on the kernel fabric, and is written into every result (``kernel.limits``):
no trimming and no ECN (MRC works from loss alone: a full queue costs it a retransmission
timeout where a trim would cost a NACK), no modelled propagation or switch latency, and no
random loss faults. The one scale factor (modelled time = wall time / scale; a 100 Gb/s link
runs at 100 Gb/s / scale) is stated too, as for the live runtime.

A run always tears its fabric down, after an error, Ctrl-C or SIGTERM too (SIGTERM and SIGHUP
are turned into ``KeyboardInterrupt`` for the run's duration); a fabric left by a killed run
is removed by the next one.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mrc.kernel import netns
from mrc.kernel.capture import Capture
from mrc.kernel.fabric import KernelFabric, KernelUnavailable, probe_seg6
from mrc.kernel.faults import KernelFaults, Unsupported
from mrc.kernel.shaping import LIMITS, Shaping
from mrc.kernel.stack import RUNTIME, KernelStack
from mrc.labs import faults as lab_faults
from mrc.labs import runner as labs_runner
from mrc.labs.errors import LabError
from mrc.labs.schema import Collective, ConnectionMatrix, Lab, Permutation, WriteBw, schedule
from mrc.live.runner import auto_dilation
from topology.counts import counts

#: Full-size DATA packets per wall second that the one Python process hosting every NIC
#: keeps up with while the kernel forwards them (the kernel fabric costs Python nothing, so
#: this is twice the live runtime's budget).
AUTO_BUDGET_PPS = 3_000


def unavailable() -> str | None:
    """Why the kernel runtime cannot run here (None when it can): privileges first, then
    SRv6 support, checked by installing a seg6local route in a scratch namespace."""
    return netns.missing_privileges() or probe_seg6()


def check_faults(lab: Lab) -> None:
    """Refuse, before anything runs, a schedule with a fault the kernel cannot apply."""
    for action in schedule(lab.faults):
        if action.action in lab_faults.DRAIN_ACTIONS:
            continue
        name, _ = lab_faults.primitive(action.action, action.params)
        try:
            KernelFaults.check(name)
        except Unsupported as exc:
            raise LabError(str(exc), f"fault.{action.fault}", lab.source) from None


def auto_scale(lab: Lab) -> float:
    """The smallest 1-2-5 scale (>= 1000) that keeps the NICs' full-rate DATA within the
    hosts' packet budget."""
    return auto_dilation(lab, AUTO_BUDGET_PPS)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt while the block runs, so ``finally`` tears the
    fabric down as it does on Ctrl-C (only in the main thread, where signals are handled)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    saved = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def workload_hosts(lab: Lab) -> list[int]:
    """The hosts a lab's workload uses (the default capture is on their links)."""
    w = lab.workload
    if isinstance(w, WriteBw):
        return sorted({h for pair in w.pairs for h in pair})
    if isinstance(w, Collective | Permutation):
        return sorted(w.hosts)
    if isinstance(w, ConnectionMatrix):
        return sorted({h for f in w.flows for h in (f.src, f.dst)})
    return list(range(lab.fabric.hosts))


def _stack_factory(fabric: KernelFabric, made: list[KernelStack], *, scale: float,
                   trace: int, capture: Capture | None) -> Any:
    def factory(spec: Any, seed: int, bin_ps: int, name: str) -> KernelStack:
        stack = KernelStack(fabric, seed, bin_ps, name, scale=scale, trace=trace,
                            capture=capture)
        made.append(stack)
        return stack
    return factory


def _pcap_path(pcap: str | Path | None, name: str, several: bool) -> Path | None:
    if pcap is None:
        return None
    path = Path(pcap)
    return path.with_name(f"{path.stem}.{name}{path.suffix or '.pcap'}") if several else path


def run_kernel(path_or_spec: Any, *, out: str | Path | None = None, seed: int | None = None,
               transports: str | Sequence[str] | None = None, bin_us: float | None = None,
               progress: bool = True, overrides: Mapping[str, Any] | None = None,
               scale: float | None = None, pcap: str | Path | None = None,
               capture: Sequence[str] | None = None, trace: int = 0,
               keep_stacks: list[KernelStack] | None = None) -> labs_runner.LabResult:
    """Run a lab on the kernel fabric; same tables and files as a simulated run, with
    ``runtime: "kernel"`` and a ``kernel`` section (scale, limits, build and teardown times,
    fault timing, kernel counters). ``pcap``: capture file (``NAME.<transport>.pcap`` when
    several run), written from packet sockets on the ``capture`` links (default: every host
    link of the workload's hosts). ``keep_stacks`` receives the (closed) stacks, for tests."""
    wall0 = time.perf_counter()
    lab = labs_runner.prepare(path_or_spec, seed=seed, bin_us=bin_us, overrides=overrides)
    specs = labs_runner.select_transports(lab, transports)
    if scale is None:
        factor = auto_scale(lab)
    elif isinstance(scale, bool) or not isinstance(scale, int | float) or not (
            math.isfinite(scale) and scale > 0):
        raise LabError(f"must be a positive number, got {scale!r}", "--scale")
    else:
        factor = float(scale)
    check_faults(lab)
    reason = unavailable()
    if reason:
        raise LabError(reason, "--runtime kernel")
    runs = []
    info: dict[str, Any] = {}
    with _signals_interrupt():
        for spec in specs:
            made: list[KernelStack] = []
            t0 = time.perf_counter()
            try:
                fabric = KernelFabric.build(lab.fabric, Shaping(lab.fabric, factor))
            except KernelUnavailable as exc:
                raise LabError(str(exc), "--runtime kernel") from None
            build_s = time.perf_counter() - t0
            ua_shifted = fabric.ua_program is not None
            try:
                with Capture.maybe(fabric, _pcap_path(pcap, spec.name, len(specs) > 1),
                                   capture, workload_hosts(lab)) as cap:
                    factory = _stack_factory(fabric, made, scale=factor, trace=trace,
                                             capture=cap)
                    run = labs_runner.run_transport(lab, spec, factory, progress=progress)
                    for stack in made:  # before the capture closes: it reads to the end
                        stack.close()
            finally:
                for stack in made:
                    stack.close()
                    if keep_stacks is not None:
                        keep_stacks.append(stack)
                t1 = time.perf_counter()
                fabric.close()
                teardown_s = time.perf_counter() - t1
            runs.append(run)
            info[spec.name] = {**run.totals.get("kernel", {}),
                               "build_s": round(build_s, 3),
                               "build_steps_s": dict(fabric.times.steps),
                               "teardown_s": round(teardown_s, 3),
                               "pcap_packets": cap.count if cap is not None else None}
    result = labs_runner.assemble(lab, runs, wall_s=time.perf_counter() - wall0,
                                  runtime=RUNTIME)
    for run in runs:
        entry = result.summary["transports"][run.name]
        entry["messages_verified"] = int(run.totals.get("messages_verified", 0))
        entry["messages_corrupt"] = int(run.totals.get("messages_corrupt", 0))
        entry["kernel"] = info[run.name]
    shaping = Shaping(lab.fabric, factor)
    result.summary["kernel"] = {
        **shaping.describe(),
        "wall_s_per_model_us": factor / 1e6,
        "wall_s_per_transport": round(lab.run.duration_us * factor / 1e6, 3),
        "namespaces": counts(lab.fabric).switches + lab.fabric.hosts,
        "veth_pairs": counts(lab.fabric).links,
        "ua": "ebpf shift" if ua_shifted else "plain route (the NIC consumes its port uSID)",
        "limits": list(LIMITS),
        "pcap": None if pcap is None else [str(_pcap_path(pcap, s.name, len(specs) > 1))
                                           for s in specs],
    }
    if out is not None:
        result.write(out)
    return result
