"""Paths between hosts: counts, hop/link lists, EVs, and that every address walks to its hops."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import names, usid
from topology.names import UnknownElementError
from topology.paths import (
    PathError,
    address_for,
    addresses_for,
    ev_address,
    path,
    path_for_ev,
    paths_between,
)
from topology.spec import FabricSpec, preset
from topology.tables import walk

FAIRWATER = preset("fairwater")
MID = FabricSpec(planes=3, hosts=24, hosts_per_t0=4, t1_per_plane=5)


def test_counts_same_and_different_t0() -> None:
    assert len(paths_between(MID, 0, 3)) == 3
    assert len(paths_between(MID, 0, 4)) == 3 * 5
    assert len(paths_between(FAIRWATER, "h0", "h255")) == 8
    fw = paths_between(FAIRWATER, "h0", "h300")
    assert len(fw) == 2_048
    assert len({p.address for p in fw}) == 2_048
    assert len({p.ev for p in fw}) == 2_048
    assert [(p.plane, p.t1) for p in fw[:3]] == [(0, 0), (0, 1), (0, 2)]


def test_path_record_fields() -> None:
    p = path(MID, "h1", "h22", plane=2, t1=4)
    assert (p.src, p.dst, p.plane, p.t1) == (1, 22, 2, 4)
    assert p.hops == ("h1.p2", "p2.t0.0", "p2.t1.4", "p2.t0.5", "h22.p2")
    assert p.links == ("h1.p2--p2.t0.0", "p2.t0.0--p2.t1.4", "p2.t0.5--p2.t1.4",
                       "h22.p2--p2.t0.5")
    assert p.address_text == "fcbb:2:1000:2004:1005:e002::"
    assert usid.parse_address(p.address_text) == p.address
    assert p.ev == usid.make_ev(2, 4)
    assert p.to_dict() == {"src": "h1", "dst": "h22", "plane": 2, "t1": 4, "ev": p.ev,
                           "address": p.address_text, "hops": list(p.hops),
                           "links": list(p.links)}
    local = path(MID, 0, 3, plane=1, t1=4)  # t1 ignored under a shared T0
    assert (local.t1, local.hops, local.address_text) == (
        None, ("h0.p1", "p1.t0.0", "h3.p1"), "fcbb:1:1000:e003::")
    assert local.ev == usid.make_ev(1, 0)


def test_ev_round_trip_and_instances() -> None:
    for p in paths_between(MID, 5, 17):
        assert path_for_ev(MID, 5, 17, p.ev) == p
        assert path_for_ev(MID, 5, 17, p.ev | (7 << 24)) == p
        assert ev_address(MID, 5, 17, p.ev) == p.address
        assert address_for(MID, 5, 17, p.plane, p.t1) == p.address  # type: ignore[arg-type]


def test_every_path_walks_to_its_hops_mid_size() -> None:
    """Exhaustive over all ordered host pairs of a mid-size fabric (24 x 23 pairs)."""
    for src in range(MID.hosts):
        for dst in range(MID.hosts):
            if src == dst:
                continue
            found = paths_between(MID, src, dst)
            assert len(found) == (MID.planes if MID.t0_of(src) == MID.t0_of(dst)
                                  else MID.planes * MID.t1)
            for p in found:
                result = walk(MID, p.address, src)
                assert (result.hops, result.links, result.host) == (p.hops, p.links, dst)


@given(st.integers(0, FAIRWATER.hosts - 1), st.integers(0, FAIRWATER.hosts - 1),
       st.integers(0, 7), st.integers(0, 255))
def test_fairwater_paths_walk_and_name_real_elements(src: int, dst: int, plane: int,
                                                     t1: int) -> None:
    if src == dst:
        return
    p = path(FAIRWATER, src, dst, plane, t1)
    result = walk(FAIRWATER, p.address, src)
    assert (result.hops, result.links, result.host) == (p.hops, p.links, dst)
    for name in p.hops + p.links:
        assert names.parse(FAIRWATER, name).name == name


def test_refusals() -> None:
    with pytest.raises(PathError, match="itself"):
        paths_between(MID, "h3", 3)
    with pytest.raises(UnknownElementError, match="h24"):
        paths_between(MID, 0, 24)
    with pytest.raises(UnknownElementError, match="not a host"):
        paths_between(MID, "h0.p1", 3)
    with pytest.raises(UnknownElementError):
        paths_between(MID, True, 3)  # type: ignore[arg-type]
    with pytest.raises(PathError, match="T1 in 0..4"):
        path(MID, 0, 4, plane=0)
    with pytest.raises(PathError, match="T1 in 0..4"):
        path(MID, 0, 4, plane=0, t1=5)
    with pytest.raises(PathError, match="plane 3"):
        path(MID, 0, 4, plane=3, t1=0)
    assert issubclass(PathError, ValueError)


@given(st.integers(0, MID.hosts - 1), st.integers(0, MID.hosts - 1), st.integers(0, MID.planes - 1),
       st.lists(st.integers(0, MID.t1 - 1), max_size=8))
def test_addresses_for_a_plane_are_address_for_each_t1(src: int, dst: int, plane: int,
                                                       t1s: list[int]) -> None:
    """The batch form (an RC QP's addresses, one per T1 of its plane) is the one-by-one one."""
    assert addresses_for(MID, src, dst, plane, t1s) == [address_for(MID, src, dst, plane, t1)
                                                         for t1 in t1s]


def test_addresses_for_refuses_a_t1_outside_the_plan() -> None:
    with pytest.raises(usid.UsidError):
        addresses_for(MID, 0, 4, 0, [0, usid.MAX_T1])
