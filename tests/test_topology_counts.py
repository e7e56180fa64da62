"""Closed-form counts (the Fairwater oracle) and refusal of impossible specs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.counts import COUNT_KEYS, counts, graph_edges
from topology.spec import FabricError, FabricSpec, preset


def test_fairwater_oracle() -> None:
    c = counts(preset("fairwater"))
    assert c.as_dict() == {
        "planes": 8, "hosts": 131_072, "t0_per_plane": 512, "t1_per_plane": 256,
        "switches": 6_144, "links": 2_097_152, "paths_same_t0": 8, "paths_between_t0s": 2_048,
        "nic_gbps": 800.0, "bisection_tbps": 52_428.8,
    }
    assert c.bisection_tbps == 131_072 * 800 / 2000
    assert list(c.as_dict()) == list(COUNT_KEYS)


def test_oversubscribed_bisection_is_the_uplink_cut() -> None:
    # 2:1 oversubscribed: 256 hosts but only 128 T1 uplinks per T0 and plane.
    spec = preset("fairwater", t1_per_plane=128, switch_radix=None)
    c = counts(spec)
    assert c.bisection_tbps == 8 * 512 * 128 * 100 / 2 / 1000 == 26_214.4
    # Over-provisioned uplinks do not raise bisection above the hosts' own bandwidth.
    wide = counts(FabricSpec(planes=2, hosts=8, hosts_per_t0=2, t1_per_plane=6))
    assert wide.bisection_tbps == 8 * 200 / 2 / 1000
    # A single T0: nothing crosses a T0-T1 link.
    single = counts(FabricSpec(planes=4, hosts=4, hosts_per_t0=4, t1_per_plane=1))
    assert (single.bisection_tbps, single.paths_between_t0s, single.paths_same_t0) == (
        0.8, 0, 4)
    assert counts(FabricSpec(planes=2, hosts=3, hosts_per_t0=1)).paths_same_t0 == 0


@given(st.integers(1, 8), st.integers(1, 6), st.integers(1, 6), st.integers(1, 6))
def test_counts_match_enumeration(planes: int, per_t0: int, t0s: int, t1s: int) -> None:
    spec = FabricSpec(planes=planes, hosts=per_t0 * t0s, hosts_per_t0=per_t0,
                      t1_per_plane=t1s)
    c = counts(spec)
    switches = {(p, tier, i) for p in range(planes) for tier, n in ((0, t0s), (1, t1s))
                for i in range(n)}
    host_links = {(h, p) for h in range(spec.hosts) for p in range(planes)}
    fabric_links = {(p, i, k) for p in range(planes) for i in range(t0s) for k in range(t1s)}
    assert c.switches == len(switches)
    assert c.links == len(host_links) + len(fabric_links)
    assert graph_edges(spec) == c.links + spec.hosts * planes


@pytest.mark.parametrize(("fields", "reason"), [
    (dict(hosts=10, hosts_per_t0=4), r"hosts \(10\) must be a multiple of hosts_per_t0 \(4\)"),
    (dict(hosts=16, hosts_per_t0=4, switch_radix=6),
     r"a T0 needs 8 ports \(4 hosts \+ 4 T1 uplinks\) but switch_radix is 6"),
    (dict(hosts=64, hosts_per_t0=2, t1_per_plane=2, switch_radix=16),
     r"a T1 needs 32 ports .* switch_radix is 16"),
    (dict(planes=0), r"planes must be a positive number"),
    (dict(planes=300), r"planes \(300\) exceeds"),
    (dict(hosts=8, hosts_per_t0=8, t1_per_plane=5000), r"t1_per_plane \(5000\) exceeds"),
    (dict(hosts=2.5), r"hosts must be an integer"),
    (dict(link_gbps=-1), r"link_gbps must be a positive number"),
])
def test_impossible_specs_refused_with_reason(fields: dict, reason: str) -> None:
    with pytest.raises(FabricError, match=reason):
        FabricSpec(**fields)


def test_fairwater_radix_is_exactly_enough() -> None:
    with pytest.raises(FabricError, match="switch_radix is 511"):
        preset("fairwater", switch_radix=511)
    with pytest.raises(FabricError, match="unknown fabric preset 'nope'"):
        preset("nope")
