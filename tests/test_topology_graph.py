"""The networkx view: names, attributes, agreement with counts and paths, size guard."""

from __future__ import annotations

import networkx as nx
import pytest

from topology import build_graph as lazy_build_graph
from topology.counts import counts
from topology.graph import build_graph
from topology.names import parse
from topology.paths import paths_between
from topology.spec import FabricError, FabricSpec, preset

SPEC = FabricSpec(planes=3, hosts=12, hosts_per_t0=3, t1_per_plane=2, link_gbps=400.0,
                  link_delay_ns=250.0)


def test_graph_matches_counts_names_and_paths() -> None:
    g = build_graph(SPEC)
    c = counts(SPEC)
    kinds = nx.get_node_attributes(g, "kind")
    assert sum(k in ("t0", "t1") for k in kinds.values()) == c.switches
    links = [d for _, _, d in g.edges(data=True) if d["kind"] != "nic"]
    assert len(links) == c.links
    assert g.number_of_edges() == c.links + SPEC.hosts * SPEC.planes
    for node, data in g.nodes(data=True):
        element = parse(SPEC, node)
        assert (data["kind"], data["plane"], data["index"], data["usid"]) == (
            element.kind, element.plane, element.index, element.usid)
    for u, v, data in g.edges(data=True):
        assert data["rate_gbps"] == 400.0
        if data["kind"] == "nic":
            assert data["delay_ns"] == 0.0 and data["name"] in (u, v)
            continue
        assert data["delay_ns"] == 250.0
        link = parse(SPEC, data["name"])
        assert link.link_kind == data["kind"] and set(link.ends) == {u, v}  # type: ignore[arg-type]
    by_name = {d["name"]: (u, v) for u, v, d in g.edges(data=True)}
    for p in paths_between(SPEC, 0, 11):
        assert nx.is_path(g, list(p.hops))
        assert [set(by_name[name]) for name in p.links] == [
            {a, b} for a, b in zip(p.hops, p.hops[1:], strict=False)]
    # Every host pair under different T0s has planes x T1 shortest NIC-to-NIC paths.
    assert len(list(nx.all_shortest_paths(g, "h0.p1", "h11.p1"))) == SPEC.t1


def test_large_fabric_refused() -> None:
    with pytest.raises(FabricError, match=r"3,145,728 graph edges.*counts"):
        build_graph(preset("fairwater"))
    with pytest.raises(FabricError, match="limit 10"):
        build_graph(SPEC, max_edges=10)
    assert lazy_build_graph is build_graph
