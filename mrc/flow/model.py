"""The flow model's entry point: a fabric, a workload, transports and a fault schedule in;
one trace per transport out (see the package docstring for what is modelled).

Before anything is allocated, :func:`estimate_bytes` sizes the problem and :func:`run`
refuses one that would not fit (:class:`TooLarge`, with the estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.detection import DetectParams
from mrc.flow.engine import simulate
from mrc.flow.fabric import Layout, touched
from mrc.flow.paths import (
    HASH_BUDGET,
    Entries,
    Groups,
    ev_counts_per_plane,
    mrc_entries,
    rc_entries,
    rc_pins,
)
from mrc.flow.routing import epochs
from mrc.flow.transport_model import Trace, TransportModel
from mrc.flow.workload import (
    Collective,
    Progress,
    Transfers,
    Workload,
    build,
    class_index,
    connections,
)
from mrc.packet import ACK_BYTES, RC_ACK_BYTES, rc_data_bytes
from mrc.sim.routing import RoutingConfig
from mrc.stack import transport_params
from mrc.stack.rc_connection import bdp_packets
from mrc.transport.mrc.config import MrcConfig
from mrc.transport.rc.config import retry_schedule
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

#: Crossing connections above which round-robin MRC's EVs are spread by expectation, not
#: enumerated (``build_ev_set`` costs ~0.5 ms per pair at 256 T1s).
EXACT_EV_LIMIT = 10_000
#: Refuse a run whose estimated peak memory exceeds this (the issue's bar: 8 GB).
MAX_BYTES = 8 * 1024**3
#: Bytes of working memory per path entry and per group-plane (measured, with margin).
_BYTES_PER_ENTRY = 420
_BYTES_PER_GROUP_PLANE = 120


class TooLarge(ValueError):
    """The run would not fit in memory; the message has the estimate."""


def ack_ratio(spec: FabricSpec, ack_every: int) -> float:
    """Wire bytes of one ACK per ``ack_every`` full DATA packets (both with Ethernet)."""
    data = spec.packet_bytes(spec.mtu_bytes) + ETHERNET_OVERHEAD_BYTES
    return (ACK_BYTES + ETHERNET_OVERHEAD_BYTES) / (ack_every * data)


def transport_model(spec: FabricSpec, name: str, kind: str, params: dict[str, Any],
                    routing: RoutingConfig | None = None) -> TransportModel:
    """The flow-level facts of a lab transport, from its configs (``transport.params``);
    ``routing``: RC's routed fabric (the lab's ``[routing]``, time-scaled; None: RC's QPs
    keep the healthy fabric's T1 whatever happens)."""
    if kind == "mrc":
        conn = transport_params.mrc_connection(spec, params, f"transport.{name}")
        cfg = conn.config
        return TransportModel(name, kind, reps=cfg.spray == "reps",
                              reintegrate_ps=cfg.probes_to_reintegrate * cfg.probe_interval_ps,
                              error_after_ps=cfg.error_after_ps(), qps=1,
                              ack_ratio=ack_ratio(spec, cfg.ack_every),
                              ev_count=conn.profile.ev_count, profile=conn.profile,
                              detect=detect_params(spec, cfg))
    rc, per_plane, split = transport_params.rc_connection(spec, params, f"transport.{name}")
    if not split and per_plane > 1:
        raise ValueError(f"transport.{name}.split_data_on_qps: whole messages taking turns "
                         "over a plane's QPs are not modelled at flow level (the default, "
                         "split = true, is)")
    # RC as deployed (issue 15): DATA on the lossless class when the fabric runs PFC, paced
    # by DCQCN; what the flow model needs of it (mrc.flow.engine, mrc.flow.rates.gbn_cost).
    # RoCEv2's own packet (mrc.packet: BTH and ICRC on a middle packet of a WRITE; the RETH
    # of its first packet is left out, one in a message), not MRC's 144-byte header
    wire = rc_data_bytes(spec.mtu_bytes, False) + ETHERNET_OVERHEAD_BYTES
    wire_bits = wire * 8
    line_bps = rc.line_rate_gbps * 1e9
    pkt_ps = wire_bits / line_bps * 1e12
    rtt = spec.base_rtt_ps()
    offsets = () if rc.timeout_ps is None else retry_schedule(rc)[1][0]
    return TransportModel(name, kind, error_after_ps=rc.error_after_ps,
                          timeout_ps=rc.timeout_ps, retry_cnt=rc.retry_cnt,
                          retry_offsets=offsets, routing=routing,
                          qps=per_plane * spec.planes,
                          # sent after a lost packet until its NAK is back: a round trip at
                          # the line and the packet that showed the gap (at most a window)
                          resend_packets=min(float(rc.window_pkts), bdp_packets(spec) + 1.0),
                          # a lost NAK waits for the first expiry of the ladder (adaptive:
                          # 131 us, not the QP's timeout; fixed: the timeout)
                          timeout_packets=0.0 if not offsets else offsets[0] / pkt_ps,
                          # the first packet after a path is back: one way to the responder,
                          # its NAK back, the rewound packet one way again
                          resume_ps=int(round(1.5 * rtt)),
                          fill_ps=rc.window_pkts * pkt_ps, pkt_ps=pkt_ps,
                          ack_ratio=(RC_ACK_BYTES + ETHERNET_OVERHEAD_BYTES) / (rc.ack_every
                                                                                * wire),
                          pfc=spec.pfc and rc.priority == spec.pfc_priority,
                          dcqcn=rc.dcqcn if rc.cc == "dcqcn" else None, line_bps=line_bps,
                          goodput_fraction=spec.mtu_bytes / wire,
                          wire_per_payload=wire / (spec.packet_bytes(spec.mtu_bytes)
                                                   + ETHERNET_OVERHEAD_BYTES))


def detect_params(spec: FabricSpec, cfg: MrcConfig) -> DetectParams:
    """MRC's loss-recovery parameters that set its detection delay (mrc.flow.detection):
    the per-EV timer, and the overdue evidence's window (fixed, or the adaptive window's
    floor: ``reorder_margin_rtts`` base round trips, capped by the timer), grace and
    strikes."""
    rtt = float(spec.base_rtt_ps())
    window = float(cfg.reorder_window_ps) if cfg.reorder_window_ps is not None \
        else min(float(cfg.ev_timeout_ps), cfg.reorder_margin_rtts * rtt)
    return DetectParams(ev_timeout_ps=cfg.ev_timeout_ps, overdue=cfg.overdue_loss,
                        window_ps=window, rtt_ps=rtt, grace_ps=float(cfg.loss_grace_ps),
                        strikes=cfg.overdue_strikes, mtu_bytes=spec.mtu_bytes,
                        reps=cfg.spray == "reps")


@dataclass
class FlowRun:
    """One transport's result, with how it was modelled."""

    trace: Trace
    progress: Progress
    info: dict[str, Any] = field(default_factory=dict)


def _sizes(spec: FabricSpec, work: Workload, changes: list[cond.Change]) -> tuple[int, int]:
    """(groups, crossing groups) of a workload, before building anything big."""
    if isinstance(work, Collective) and work.aggregated():
        hosts = np.asarray(work.hosts)
        host_faults, _, t0_faults = touched(spec, changes)
        ranks = np.bincount(hosts // spec.hosts_per_t0, minlength=spec.t0_per_plane)
        groups = len(set(ranks.tolist())) + len(t0_faults)
        classes = groups + len(set(host_faults) & set(hosts.tolist()))
        return 2 * classes * classes, classes * classes
    src, dst = connections(work)
    crossing = int((src // spec.hosts_per_t0 != dst // spec.hosts_per_t0).sum())
    return len(src), crossing


def plan(spec: FabricSpec, work: Workload, models: list[TransportModel],
         changes: list[cond.Change], ev_count: int | None = None) -> dict[str, Any]:
    """How each transport will be modelled, and the memory estimate (bytes)."""
    groups, crossing = _sizes(spec, work, changes)
    aggregated = isinstance(work, Collective) and work.aggregated()
    t1_faults = len(touched(spec, changes)[1])
    out: dict[str, Any] = {"groups": groups, "aggregated": aggregated, "transports": {}}
    peak = 0
    local = groups - crossing
    for m in models:
        if m.kind == "mrc":
            per_plane = max(1, -(-(ev_count or m.ev_count) // spec.planes))
            exact = not m.reps and not aggregated and crossing <= EXACT_EV_LIMIT
            spread = min(per_plane, spec.t1) if exact else 1 + t1_faults
            entries = local * spec.planes + crossing * spec.planes * spread
            mode = "exact" if exact else "symmetric"
        else:
            mode = "multinomial" if aggregated else (
                "exact" if crossing * m.qps * spec.t1 <= HASH_BUDGET else "sampled")
            # enumerated: each crossing QP's DATA and ACK entries (and their hashes)
            entries = (local * spec.planes + crossing * spec.planes * (1 + t1_faults)
                       if aggregated else local * spec.planes + 2 * crossing * m.qps)
        estimate = entries * _BYTES_PER_ENTRY + groups * spec.planes * _BYTES_PER_GROUP_PLANE
        out["transports"][m.name] = {"path_model": mode, "entries": entries,
                                     "estimate_bytes": estimate}
        peak = max(peak, estimate)
    out["estimate_bytes"] = peak
    return out


def check_size(spec: FabricSpec, work: Workload, models: list[TransportModel],
               changes: list[cond.Change], *, ev_count: int | None = None,
               max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The plan, or :class:`TooLarge` with the estimate when it would not fit (nothing big is
    allocated before this answers)."""
    cond.check_actions(changes)
    layout_plan = plan(spec, work, models, changes, ev_count)
    if layout_plan["estimate_bytes"] > max_bytes:
        raise TooLarge(f"the flow model needs about {layout_plan['estimate_bytes'] / 2**30:.1f} "
                       f"GiB for {layout_plan['groups']:,} connection groups (limit "
                       f"{max_bytes / 2**30:.1f} GiB); use fewer hosts or a smaller fabric")
    return layout_plan


def estimate_bytes(spec: FabricSpec, work: Workload, models: list[TransportModel],
                   changes: list[cond.Change], ev_count: int | None = None) -> int:
    return int(plan(spec, work, models, changes, ev_count)["estimate_bytes"])


def run(spec: FabricSpec, work: Workload, models: list[TransportModel],
        changes: list[cond.Change], *, seed: int, end_ps: float, ev_count: int | None = None,
        max_bytes: int = MAX_BYTES, batch_ps: float = 0.0) -> list[FlowRun]:
    """Every transport through the schedule (each on its own, as the packet runs are)."""
    layout_plan = check_size(spec, work, models, changes, ev_count=ev_count,
                             max_bytes=max_bytes)
    out = []
    for m in models:
        mode = layout_plan["transports"][m.name]["path_model"]
        symmetric = mode in ("symmetric", "multinomial")
        layout, groups = build(spec, work, changes, symmetric_t1s=symmetric)
        pins, acks, routes = None, None, None
        if m.kind == "rc" and mode != "multinomial":  # QP by QP: DATA and ACK pins
            pins = rc_pins(spec, groups, m.qps // spec.planes, seed, mode)
            entries = pins.entries(layout, pins.healthy(spec.t1))
            acks = pins.entries(layout, pins.healthy(spec.t1, acks=True))
        else:
            entries = _entries(spec, layout, groups, m, mode, seed, ev_count or m.ev_count)
        hosts = sorted(touched(spec, changes)[0])
        index = class_index(layout, work, hosts)
        if m.kind == "rc" and m.routing is not None:
            routes = epochs(spec, layout, groups, entries, pins, changes, m.routing)
        trace, progress = simulate(layout, groups, entries, work, m, changes, end_ps=end_ps,
                                   class_index=index, batch_ps=batch_ps, routes=routes,
                                   acks=acks)
        info = {"path_model": mode, "groups": len(groups),
                "connections": int(groups.mult.sum()), "host_classes": layout.classes,
                "t0_groups": layout.t0_groups, "t1_types": layout.types, "path_entries": len(entries.group),
                "solves": trace.solves, "filling_rounds": trace.rounds,
                "estimate_bytes": layout_plan["transports"][m.name]["estimate_bytes"]}
        if routes is not None:
            info["routing"] = {"ecmp": m.routing.ecmp, "changes": len(routes),
                               "ack_paths": acks is not None}
        if m.kind == "mrc":
            info["ev_per_plane"] = ev_counts_per_plane(spec, ev_count or m.ev_count, seed,
                                                       m.profile).tolist()
        out.append(FlowRun(trace, progress, info))
    return out


def _entries(spec: FabricSpec, layout: Layout, groups: Groups, m: TransportModel, mode: str,
             seed: int, ev_count: int) -> Entries:
    if m.kind == "mrc":
        return mrc_entries(spec, layout, groups, ev_count, seed, exact=mode == "exact",
                           profile=m.profile if ev_count == m.ev_count else None)
    return rc_entries(spec, layout, groups, m.qps // spec.planes, seed, mode)


def ceiling_nics(work: Workload) -> int:
    """How many NICs' worth of goodput the workload can use (as the packet drivers say)."""
    if isinstance(work, Collective):
        return work.ranks
    return min(len(set(np.asarray(work.src).tolist())), len(set(np.asarray(work.dst).tolist())))


__all__ = ["EXACT_EV_LIMIT", "FlowRun", "MAX_BYTES", "TooLarge", "Transfers", "ceiling_nics",
           "check_size", "estimate_bytes", "plan", "run", "transport_model"]
