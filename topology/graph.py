"""The fabric as a networkx graph, for labs that want graph algorithms or pictures.

Nodes are named as in :mod:`topology.names`: hosts ``h17``, NIC ports ``h17.p3``, switches
``p3.t0.12`` / ``p3.t1.5``. Node attributes: ``kind``, ``plane`` (None for hosts), ``index``
(host index for hosts and NIC ports, switch index for switches) and ``usid`` (a switch's own
uSID; for a NIC port the T0-local port uSID that delivers to it; None for hosts).

Edges: every link (``kind`` ``host_link`` or ``fabric_link``, ``name`` the link name) plus
one ``nic`` edge from each host to each of its NIC ports (named after the port, since failing
the port is what cuts it; zero delay). All edges carry ``rate_gbps`` and ``delay_ns``. A path's
``hops`` are graph nodes and its ``links`` are edge names.

Fairwater would need 3 million edges (gigabytes in networkx), so large fabrics are refused:
use :mod:`topology.counts` for their numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topology import names, usid
from topology.counts import graph_edges
from topology.spec import FabricError, FabricSpec

if TYPE_CHECKING:
    import networkx as nx

#: Largest graph :func:`build_graph` materialises by default.
MAX_GRAPH_EDGES = 250_000


def build_graph(spec: FabricSpec, *, max_edges: int = MAX_GRAPH_EDGES) -> nx.Graph:
    """The fabric graph; raises FabricError when it would exceed ``max_edges`` edges."""
    edges = graph_edges(spec)
    if edges > max_edges:
        raise FabricError(
            f"fabric {spec.name!r} would need {edges:,} graph edges (limit {max_edges:,}); "
            "use topology.counts (or `mrc-lab fabric --json`) for its numbers, or "
            "topology.names/paths/tables, which work at any size without a graph")
    import networkx as nx

    graph = nx.Graph(name=spec.name)
    rate, delay = float(spec.link_gbps), float(spec.link_delay_ns)
    for plane in range(spec.planes):
        for i in range(spec.t0_per_plane):
            graph.add_node(names.t0_name(plane, i), kind=names.T0, plane=plane, index=i,
                           usid=usid.t0_usid(i))
        for k in range(spec.t1):
            graph.add_node(names.t1_name(plane, k), kind=names.T1, plane=plane, index=k,
                           usid=usid.t1_usid(k))
    for host in range(spec.hosts):
        host_node = names.host_name(host)
        t0, port = spec.t0_of(host), spec.port_of(host)
        graph.add_node(host_node, kind=names.HOST, plane=None, index=host, usid=None)
        for plane in range(spec.planes):
            nic = names.nic_port_name(host, plane)
            graph.add_node(nic, kind=names.NIC_PORT, plane=plane, index=host,
                           usid=usid.port_usid(port))
            graph.add_edge(host_node, nic, name=nic, kind="nic", rate_gbps=rate, delay_ns=0.0)
            graph.add_edge(nic, names.t0_name(plane, t0), name=names.host_link_name(host, plane, t0),
                           kind=names.HOST_LINK, rate_gbps=rate, delay_ns=delay)
    for plane in range(spec.planes):
        for i in range(spec.t0_per_plane):
            lower = names.t0_name(plane, i)
            for k in range(spec.t1):
                graph.add_edge(lower, names.t1_name(plane, k),
                               name=names.fabric_link_name(plane, i, k),
                               kind=names.FABRIC_LINK, rate_gbps=rate, delay_ns=delay)
    return graph
