"""The ideal flow completion time of a flow workload, healthy or on a degraded fabric.

A flow of ``S`` payload bytes alone on a healthy fabric finishes, at best, when its last
byte is placed: ``S`` at the NIC's wire rate (every header and the Ethernet framing of
full-MTU packets counted, :meth:`~topology.spec.FabricSpec.goodput_ceiling_fraction`) plus
one unloaded one-way trip (half the base RTT). For htsim's 128-node runs (100 Gb/s, 1 us
links, no switch latency, 4 KB MTU) and 2,000,000-byte flows that is 171.8 us.

When links are slowed (``degrade`` faults), a permutation can at best share the capacity that
is left between two T0s, so the ideal is the healthy one divided by the *capacity share* of
the fabric tier: for each T0, the rate left on its T0-T1 links (a lab's ``degrade`` slows
both directions) over their nominal rate, the smallest over the T0s. Every link of one T1 of
eight at 25% leaves 7.25/8 of every T0's capacity (ideal 189.6 us), four such T1s 5/8
(274.9 us). It is the fluid bound: flows finish together, nobody waits for a straggler.

Only degradations active when the flows start count (a fault later in the run, or a link
taken down, is the experiment, not the yardstick), and only workloads whose flows all have
one size and one start time get an ideal: a connection matrix of mixed sizes (or of flows
started by triggers) has no single number to compare with.
"""

from __future__ import annotations

from mrc.labs.schema.lab import ConnectionMatrix, Lab, Permutation
from topology import names
from topology.spec import FabricSpec


def healthy_fct_us(spec: FabricSpec, size_bytes: int) -> float:
    """``size_bytes`` at the NIC's wire rate plus one unloaded one-way trip, in us."""
    wire_us = size_bytes * 8 / (spec.nic_gbps * 1e3) / spec.goodput_ceiling_fraction()
    return wire_us + spec.base_rtt_ps() / 2 / 1e6


def capacity_share(lab: Lab, at_us: float = 0.0) -> float:
    """The smallest share of a T0's T0-T1 capacity left by the ``degrade`` faults active at
    ``at_us`` (1.0: healthy), over every T0 (see the module docstring)."""
    spec = lab.fabric
    t0s, t1s = spec.t0_per_plane, spec.t1
    # rate[(plane, t0, t1)] = fraction of the link's nominal rate left
    rate: dict[tuple[int, int, int], float] = {}
    for fault in lab.faults:
        if fault.kind != "degrade" or fault.at_us > at_us:
            continue
        if fault.until_us is not None and fault.until_us <= at_us:
            continue
        element = fault.element
        if element is None or element.plane is None:
            continue
        plane = element.plane
        fraction = float(fault.params["rate_fraction"])
        links: list[tuple[int, int, int]] = []
        if element.kind == names.T1 and element.t1 is not None:
            links = [(plane, t0, element.t1) for t0 in range(t0s)]
        elif element.kind == names.T0 and element.t0 is not None:
            links = [(plane, element.t0, t1) for t1 in range(t1s)]
        elif element.kind == names.LINK and element.t0 is not None and element.t1 is not None:
            links = [(plane, element.t0, element.t1)]  # a host link slows one host only
        for link in links:
            rate[link] = min(rate.get(link, 1.0), fraction)
    if not rate:
        return 1.0
    share = 1.0
    for t0 in range(t0s):
        left = 0.0
        for plane in range(spec.planes):
            left += sum(rate.get((plane, t0, t1), 1.0) for t1 in range(t1s))
        share = min(share, left / (spec.planes * t1s))
    return share


def flow_ideal_us(lab: Lab) -> float | None:
    """The ideal FCT of the lab's flows (None: not a flow workload of one size and start)."""
    workload = lab.workload
    if isinstance(workload, Permutation):
        size, start = workload.size_bytes, workload.start_us
    elif isinstance(workload, ConnectionMatrix):
        sizes = {f.size_bytes for f in workload.flows}
        starts = {f.start_us for f in workload.flows}
        if len(sizes) != 1 or len(starts) != 1:
            return None
        size, first = sizes.pop(), starts.pop()
        if first is None:  # started by triggers: no common start to measure from
            return None
        start = first
    else:
        return None
    return healthy_fct_us(lab.fabric, size) / capacity_share(lab, start)
