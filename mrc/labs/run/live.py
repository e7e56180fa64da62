"""What only a live run of a lab has: its options, its stacks and its summary section.

``mrc-lab run LAB --runtime live`` (``mrc.labs.run.runner.run_lab(..., runtime="live")``, or
``run_live``) runs each transport through the same runner as a simulated run, one at a time
on a fresh :class:`~mrc.live.stack.LiveStack` so they do not compete for the CPU. This module
supplies what differs: the time dilation (chosen from the workload's offered load unless
given), captures, the bind address, closing every stack, and the ``live`` parts of the
summary. Bad options raise :class:`LabError` before anything runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.lab import Lab, TransportSpec, sending_hosts
from mrc.live.stack import LiveStack
from mrc.live.udp import check_bind_address
from mrc.packet import data_bytes
from mrc.pcap import CaptureOptions, capture_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

RUNTIME = "live"
#: Full-size DATA datagrams per wall second that one Python process moves comfortably while
#: keeping its own latency small against the modelled one (what ``auto`` dilation aims at).
AUTO_BUDGET_PPS = 1_500
DILATION_STEPS = (1, 2, 5)
MIN_AUTO_DILATION = 1_000


# ====================================================================== dilation
def workload_hosts(lab: Lab) -> int:
    """How many NICs the workload can make send at once (bounds the datagram rate)."""
    return max(1, len(sending_hosts(lab.workload)))


def auto_dilation(lab: Lab, budget_pps: float = AUTO_BUDGET_PPS) -> float:
    """The smallest 1-2-5 factor (>= 1000) that keeps full-rate DATA of every sending NIC
    port within ``budget_pps`` datagrams per wall second."""
    spec = lab.fabric
    wire_bits = (data_bytes(spec.mtu_bytes) + ETHERNET_OVERHEAD_BYTES) * 8
    pps = workload_hosts(lab) * spec.planes * spec.link_bps / wire_bits
    need = max(pps / budget_pps, MIN_AUTO_DILATION)
    exp = math.floor(math.log10(need))
    for e in (exp, exp + 1):
        for step in DILATION_STEPS:
            if step * 10 ** e >= need:
                return float(step * 10 ** e)
    return float(10 ** (exp + 1))


# ====================================================================== one live run
def _make_stack(fabric: FabricSpec, seed: int, bin_ps: int, name: str, *,
                made: list[LiveStack], **options: Any) -> LiveStack:
    """The labs runner's stack factory for live runs (remembers what it made, to close it)."""
    stack = LiveStack(fabric, seed, bin_ps, name, **options)
    made.append(stack)
    return stack


class LiveRun:
    """The live options of one lab run, checked. ``capture``: what to capture
    (:class:`mrc.pcap.CaptureOptions`; the file is ``NAME.<transport>.pcapng`` when several
    transports run); ``keep_stacks``: a list that receives the (closed) stacks, for tests to
    inspect."""

    def __init__(self, lab: Lab, specs: Sequence[TransportSpec], *,
                 dilation: float | None = None, capture: CaptureOptions | None = None,
                 bind_host: str = "127.0.0.1",
                 allow_non_loopback: bool = False, trace: int = 0,
                 keep_stacks: list[LiveStack] | None = None) -> None:
        if dilation is None:
            factor = auto_dilation(lab)
        else:
            if isinstance(dilation, bool) or not isinstance(dilation, int | float) or not (
                    math.isfinite(dilation) and dilation > 0):
                raise LabError(f"must be a positive number, got {dilation!r}", "--dilation")
            factor = float(dilation)
        try:
            check_bind_address(bind_host, allow_non_loopback)
        except PermissionError as exc:
            raise LabError(str(exc), "--bind") from None
        self.lab = lab
        self.names = [spec.name for spec in specs]
        self.dilation = factor
        self.capture = capture
        self.keep_stacks = keep_stacks
        self._options: dict[str, Any] = {"dilation": factor,
                         "bind_host": bind_host, "allow_non_loopback": allow_non_loopback,
                         "trace": trace}

    def capture_of(self, name: str) -> CaptureOptions | None:
        return capture_for(self.capture, name, len(self.names) > 1)

    @contextmanager
    def stacks(self, name: str) -> Iterator[Any]:
        """The stack factory for transport ``name``; every stack it made is closed after."""
        made: list[LiveStack] = []
        try:
            yield functools.partial(_make_stack, made=made, capture=self.capture_of(name),
                                    **self._options)
        finally:
            for stack in made:
                stack.close()
                if self.keep_stacks is not None:
                    self.keep_stacks.append(stack)

    def annotate(self, summary: dict[str, Any],
                 totals: Mapping[str, Mapping[str, Any]]) -> None:
        """Add the live parts to a run's summary: per transport the verified and corrupt
        messages and the live counters (``totals``: each transport's), and the scaling."""
        for name, total in totals.items():
            entry = summary["transports"][name]
            entry["messages_verified"] = int(total.get("messages_verified", 0))
            entry["messages_corrupt"] = int(total.get("messages_corrupt", 0))
            entry["live"] = total.get("live")
        lab = self.lab
        summary["live"] = {
            "dilation": self.dilation,
            "wall_s_per_model_us": self.dilation / 1e6,
            "link_gbps_model": lab.fabric.link_gbps,
            "link_gbps_wall": lab.fabric.link_gbps / self.dilation,
            "wall_s_per_transport": round(lab.run.duration_us * self.dilation / 1e6, 3),
            "bind": self._options["bind_host"],
            "pcap": None if self.capture is None else [
                str(self.capture_of(n).path) for n in self.names],  # type: ignore[union-attr]
        }
