"""What only a kernel run of a lab has: its options, its fabric and its summary section.

``mrc-lab run LAB --runtime kernel`` (``mrc.labs.run.runner.run_lab(..., runtime="kernel")``, or
``run_kernel``) runs each transport through the same runner as a simulated run, one at a time
on a fresh :class:`~mrc.kernel.stack.KernelStack`, so the tables compare line by line with a
simulated run of the same lab. This module supplies what differs, as ``run.live`` does for
the live runtime: the scale factor (chosen from the workload's offered load unless given),
the refusals before anything runs (privileges, SRv6 support, faults the kernel cannot apply),
a fresh kernel fabric per transport built from the lab's ``[fabric]`` (namespaces, veth
pairs, seg6local routes: :mod:`mrc.kernel`) and torn down after it, captures, and the
``kernel`` parts of the summary.

What changes on the kernel fabric, and is written into every result (``kernel.limits``):
no trimming and no ECN (MRC works from loss alone: a full queue costs it a retransmission
timeout where a trim would cost a NACK), no modelled propagation or switch latency, and
unseeded random loss. The one scale factor (modelled time = wall time / scale; a 100 Gb/s
link runs at 100 Gb/s / scale) is stated too, as the live runtime's dilation is.

A run always tears its fabric down, after an error, Ctrl-C or SIGTERM too (SIGTERM and SIGHUP
are turned into ``KeyboardInterrupt`` while a fabric exists); a fabric left by a killed run
is removed by the next one.
"""

from __future__ import annotations

import contextlib
import functools
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
from mrc.kernel.stack import KernelStack
from mrc.labs.errors import LabError
from mrc.labs.run.faults import DRAIN_ACTIONS
from mrc.labs.run.live import auto_dilation
from mrc.labs.schema.lab import Lab, TransportSpec, workload_hosts
from mrc.labs.schema.schedule import schedule
from mrc.sim import faults as sim_faults
from topology.counts import counts

RUNTIME = "kernel"
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
        if action.action in DRAIN_ACTIONS:
            continue
        name, _ = sim_faults.primitive(action.action, action.params)
        try:
            KernelFaults.check(name)
        except Unsupported as exc:
            raise LabError(str(exc), f"fault.{action.fault}", lab.source) from None


def auto_scale(lab: Lab) -> float:
    """The smallest 1-2-5 scale (>= 1000) that keeps the NICs' full-rate DATA within the
    hosts' packet budget."""
    return auto_dilation(lab, AUTO_BUDGET_PPS)


def capture_hosts(lab: Lab) -> list[int]:
    """The hosts a lab's workload uses (the default capture is on their links)."""
    return sorted(workload_hosts(lab.workload))


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt while the block runs, so ``finally`` tears the
    fabric down as it does on Ctrl-C (only in the main thread, where signals are handled)."""
    def interrupt(signum: int, frame: Any) -> None:
        before = saved.get(signum)
        if callable(before):  # the CLI's own (SIGTERM: its interrupt, exit 143) goes first
            before(signum, frame)
        raise KeyboardInterrupt(f"signal {signum}")

    saved: dict[int, Any] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def _make_stack(spec: Any, seed: int, bin_ps: int, name: str, *, fabric: KernelFabric,
                made: list[KernelStack], **options: Any) -> KernelStack:
    """The labs runner's stack factory for kernel runs (on the transport's fabric; it
    remembers what it made, to close it before the fabric goes)."""
    stack = KernelStack(fabric, seed, bin_ps, name, **options)
    made.append(stack)
    return stack


class KernelRun:
    """The kernel options of one lab run, checked, and everything refused that cannot run
    here. ``scale``: modelled time runs this many times slower than the wall clock (default:
    from the workload); ``pcap``: capture file (``NAME.<transport>.pcap`` when several
    transports run), written from packet sockets on the ``capture`` links (default: every
    host link of the workload's hosts); ``keep_stacks``: a list that receives the (closed)
    stacks, for tests to inspect."""

    def __init__(self, lab: Lab, specs: Sequence[TransportSpec], *,
                 scale: float | None = None, pcap: str | Path | None = None,
                 capture: Sequence[str] | None = None, trace: int = 0,
                 keep_stacks: list[KernelStack] | None = None) -> None:
        if scale is None:
            factor = auto_scale(lab)
        elif isinstance(scale, bool) or not isinstance(scale, int | float) or not (
                math.isfinite(scale) and scale > 0):
            raise LabError(f"must be a positive number, got {scale!r}", "--dilation")
        else:
            factor = float(scale)
        check_faults(lab)
        reason = unavailable()
        if reason:
            raise LabError(reason, "--runtime kernel")
        self.lab = lab
        self.names = [spec.name for spec in specs]
        self.scale = factor
        self.pcap = pcap
        self.capture = capture
        self.trace = trace
        self.keep_stacks = keep_stacks
        #: Per transport: build and teardown times, capture count (``annotate`` adds them).
        self.fabric_info: dict[str, dict[str, Any]] = {}
        self.ua_shifted = False

    def pcap_path(self, name: str) -> Path | None:
        if self.pcap is None:
            return None
        path = Path(self.pcap)
        if len(self.names) <= 1:
            return path
        return path.with_name(f"{path.stem}.{name}{path.suffix or '.pcap'}")

    @contextlib.contextmanager
    def stacks(self, name: str) -> Iterator[Any]:
        """The stack factory for transport ``name``, on a kernel fabric built for it; after
        the block every stack it made is closed and the fabric torn down (also on an error,
        Ctrl-C, SIGTERM or SIGHUP)."""
        made: list[KernelStack] = []
        with _signals_interrupt():
            t0 = time.perf_counter()
            try:
                fabric = KernelFabric.build(self.lab.fabric, Shaping(self.lab.fabric, self.scale))
            except KernelUnavailable as exc:
                raise LabError(str(exc), "--runtime kernel") from None
            build_s = time.perf_counter() - t0
            self.ua_shifted = fabric.ua_program is not None
            cap: Capture | None = None
            try:
                with Capture.maybe(fabric, self.pcap_path(name), self.capture,
                                   capture_hosts(self.lab)) as cap:
                    yield functools.partial(_make_stack, fabric=fabric, made=made,
                                            scale=self.scale, trace=self.trace, capture=cap)
                    for stack in made:  # before the capture closes: it reads to the end
                        stack.close()
            finally:
                for stack in made:
                    stack.close()
                    if self.keep_stacks is not None:
                        self.keep_stacks.append(stack)
                t1 = time.perf_counter()
                fabric.close()
                teardown_s = time.perf_counter() - t1
            self.fabric_info[name] = {
                "build_s": round(build_s, 3), "build_steps_s": dict(fabric.times.steps),
                "teardown_s": round(teardown_s, 3),
                "pcap_packets": cap.count if cap is not None else None}

    def annotate(self, summary: dict[str, Any],
                 totals: Mapping[str, Mapping[str, Any]]) -> None:
        """Add the kernel parts to a run's summary: per transport the verified and corrupt
        messages, the kernel counters and fault timing (``totals``: each transport's) with
        the fabric's build and teardown times; and the scaling and limits."""
        for name, total in totals.items():
            entry = summary["transports"][name]
            entry["messages_verified"] = int(total.get("messages_verified", 0))
            entry["messages_corrupt"] = int(total.get("messages_corrupt", 0))
            entry["kernel"] = {**total.get("kernel", {}), **self.fabric_info.get(name, {})}
        fabric = self.lab.fabric
        summary["kernel"] = {
            **Shaping(fabric, self.scale).describe(),
            "wall_s_per_model_us": self.scale / 1e6,
            "wall_s_per_transport": round(self.lab.run.duration_us * self.scale / 1e6, 3),
            "namespaces": counts(fabric).switches + fabric.hosts,
            "veth_pairs": counts(fabric).links,
            "ua": "ebpf shift" if self.ua_shifted
            else "plain route (the NIC consumes its port uSID)",
            "limits": list(LIMITS),
            "pcap": None if self.pcap is None else [str(self.pcap_path(n))
                                                    for n in self.names],
        }
