"""Closed-form fabric counts: the numbers ``mrc-lab fabric`` prints, without building anything.

Fairwater has 2,097,152 links; counting them must not cost a graph. Every number here is
arithmetic on the spec, so any size answers instantly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topology.spec import FabricSpec

#: The JSON keys of ``mrc-lab fabric --json``, in order. Part of the CLI contract.
COUNT_KEYS = ("planes", "hosts", "t0_per_plane", "t1_per_plane", "switches", "links",
              "paths_same_t0", "paths_between_t0s", "nic_gbps", "bisection_tbps")


@dataclass(frozen=True, slots=True)
class Counts:
    """Headline numbers of a fabric (see :func:`counts` for the definitions)."""

    planes: int
    hosts: int
    t0_per_plane: int
    t1_per_plane: int
    switches: int
    links: int
    paths_same_t0: int
    paths_between_t0s: int
    nic_gbps: float
    bisection_tbps: float

    def as_dict(self) -> dict[str, Any]:
        """Exactly :data:`COUNT_KEYS`, in that order."""
        return {key: getattr(self, key) for key in COUNT_KEYS}


def counts(spec: FabricSpec) -> Counts:
    """The counts of ``spec``.

    - ``links``: host links (hosts x planes) plus T0-T1 links (planes x T0 x T1).
    - ``paths_same_t0`` / ``paths_between_t0s``: paths between two hosts under the same T0
      (one per plane) / under different T0s (one per plane and T1); 0 when the fabric has no
      such pair of hosts (one host per T0 / a single T0).
    - ``bisection_tbps``: the smallest capacity across a cut that splits the hosts in half:
      the smaller of the host side (half the hosts' NIC bandwidth) and the T0-T1 cut (half the
      T0s' uplinks), so an oversubscribed fabric reports its uplink bottleneck. With a single
      T0 no traffic crosses a T0-T1 link and only the host side counts.
    """
    planes, hosts, t0, t1 = spec.planes, spec.hosts, spec.t0_per_plane, spec.t1
    nic_gbps = float(spec.nic_gbps)
    host_side_gbps = hosts * nic_gbps / 2
    uplink_cut_gbps = planes * t0 * t1 * spec.link_gbps / 2
    bisection_gbps = host_side_gbps if t0 == 1 else min(host_side_gbps, uplink_cut_gbps)
    return Counts(
        planes=planes,
        hosts=hosts,
        t0_per_plane=t0,
        t1_per_plane=t1,
        switches=planes * (t0 + t1),
        links=hosts * planes + planes * t0 * t1,
        paths_same_t0=planes if spec.hosts_per_t0 > 1 else 0,
        paths_between_t0s=planes * t1 if t0 > 1 else 0,
        nic_gbps=nic_gbps,
        bisection_tbps=round(bisection_gbps / 1000, 6),
    )


def graph_edges(spec: FabricSpec) -> int:
    """Edges of :func:`topology.graph.build_graph`: every link plus one host-to-NIC-port edge
    per NIC port."""
    return counts(spec).links + spec.hosts * spec.planes
