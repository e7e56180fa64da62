"""Static uSID tables and the reference walk; the Fairwater uSID plan is collision-free.

The Fairwater proof never enumerates links or paths. It rests on three facts checked here:

1. the uSID ranges (end-of-carrier, T0, T1, local port) are pairwise disjoint, and the plane
   lives in the block, so uSIDs only need to be unique within a plane;
2. within each plane the 768 switch uSIDs are distinct and classify back to their switch;
3. every one of the 6,144 tables is unambiguous (disjoint rules, each inside one range, none
   matching end-of-carrier) and its rules are exactly the intended ones: own uSID -> uN, the
   T1 range at a T0 maps uSID 0x2000+k to T1 k (every k), the port range maps 0xE000+j to host
   I*256+j, the T0 range at a T1 maps 0x1000+i to T0 i.

A path address ``block(P) : T0src : T1 : T0dst : port`` then decodes, by composing those
rules, to exactly NIC port, T0src, T1, T0dst, NIC port. Hypothesis samples that composition at
Fairwater scale through :func:`walk`, and a mid-size fabric is checked exhaustively.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import names, usid
from topology.names import UnknownElementError
from topology.paths import address_for
from topology.spec import FabricError, FabricSpec, preset
from topology.tables import (
    FORWARD,
    UA,
    UN,
    NoRouteError,
    Rule,
    SwitchTable,
    all_tables,
    switch_table,
    walk,
)

FAIRWATER = preset("fairwater")
MID = FabricSpec(planes=2, hosts=48, hosts_per_t0=6, t1_per_plane=5)


def expected_hops(spec: FabricSpec, plane: int, src: int, t1: int, dst: int) -> tuple[str, ...]:
    s_t0, d_t0 = spec.t0_of(src), spec.t0_of(dst)
    if s_t0 == d_t0:
        return (f"h{src}.p{plane}", f"p{plane}.t0.{s_t0}", f"h{dst}.p{plane}")
    return (f"h{src}.p{plane}", f"p{plane}.t0.{s_t0}", f"p{plane}.t1.{t1}",
            f"p{plane}.t0.{d_t0}", f"h{dst}.p{plane}")


# ------------------------------------------------------------------ the plan, at Fairwater
def test_usid_ranges_disjoint_and_fit_fairwater() -> None:
    ranges = sorted([(usid.EOC, usid.EOC + 1), (usid.T0_BASE, usid.T0_BASE + usid.MAX_T0),
                     (usid.T1_BASE, usid.T1_BASE + usid.MAX_T1),
                     (usid.PORT_BASE, usid.PORT_BASE + usid.MAX_PORTS)])
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert end <= start
    assert ranges[-1][1] <= 0x10000
    assert FAIRWATER.t0_per_plane <= usid.MAX_T0
    assert FAIRWATER.t1 <= usid.MAX_T1
    assert FAIRWATER.hosts_per_t0 <= usid.MAX_PORTS
    # The plane is in the block: addresses of different planes differ before any uSID, and
    # no block collides with the inner host prefix.
    blocks = {usid.block(p) for p in range(FAIRWATER.planes)}
    assert len(blocks) == FAIRWATER.planes
    assert all(b >> 16 != usid.HOST_PREFIX >> 112 for b in blocks)
    assert all(usid.plane_of(usid.block(p) << 96) == p for p in range(FAIRWATER.planes))


def test_switch_usids_unique_per_plane_at_fairwater() -> None:
    spec = FAIRWATER
    for plane in range(spec.planes):
        seen: dict[int, str] = {}
        for tier, count in ((0, spec.t0_per_plane), (1, spec.t1)):
            for index in range(count):
                element = names.parse(spec, names.switch_name(plane, tier, index))
                value = element.usid
                assert value is not None and value not in seen, (element.name, seen.get(value))
                seen[value] = element.name
                assert usid.classify(value) == (element.kind, index)
        assert len(seen) == 768
        assert not any(usid.classify(v).kind in ("eoc", "port") for v in seen)


def test_every_fairwater_table_unambiguous_and_exactly_intended() -> None:
    spec = FAIRWATER
    hpt, t0s, t1s = spec.hosts_per_t0, spec.t0_per_plane, spec.t1
    tables = 0
    for table in all_tables(spec):
        tables += 1
        rules = sorted(table.rules, key=lambda r: r.first)
        for a, b in zip(rules, rules[1:], strict=False):
            assert a.last < b.first, table.name
        assert table.lookup(usid.EOC) is None
        if table.tier == 0:
            assert rules == [
                Rule(usid.T0_BASE + table.index, usid.T0_BASE + table.index, UN),
                Rule(usid.T1_BASE, usid.T1_BASE + t1s - 1, FORWARD, names.T1, 0),
                Rule(usid.PORT_BASE, usid.PORT_BASE + hpt - 1, UA, names.NIC_PORT,
                     table.index * hpt),
            ], table.name
            assert table.routed() == 1 + t1s + hpt
        else:
            assert rules == [
                Rule(usid.T0_BASE, usid.T0_BASE + t0s - 1, FORWARD, names.T0, 0),
                Rule(usid.T1_BASE + table.index, usid.T1_BASE + table.index, UN),
            ], table.name
            assert table.routed() == 1 + t0s
    assert tables == 6_144


@st.composite
def fairwater_tuples(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    spec = FAIRWATER
    plane = draw(st.integers(0, spec.planes - 1))
    src_t0 = draw(st.integers(0, spec.t0_per_plane - 1))
    src = src_t0 * spec.hosts_per_t0 + draw(st.integers(0, spec.hosts_per_t0 - 1))
    t1 = draw(st.integers(0, spec.t1 - 1))
    dst = draw(st.integers(0, spec.hosts - 1).filter(lambda h: h != src)
               | st.sampled_from([0, spec.hosts - 1, src ^ 1]).filter(lambda h: h != src))
    return plane, src_t0, t1, src, dst


@settings(max_examples=300)
@given(fairwater_tuples())
def test_fairwater_addresses_walk_to_exactly_their_hops(case: tuple[int, ...]) -> None:
    plane, src_t0, t1, src, dst = case
    address = address_for(FAIRWATER, src, dst, plane, t1)
    result = walk(FAIRWATER, address, src)
    assert result.hops == expected_hops(FAIRWATER, plane, src, t1, dst)
    assert result.host == dst
    assert result.address == usid.block(plane) << 96  # carrier fully consumed


# ------------------------------------------------------------------ exhaustive, mid-size
def test_mid_size_every_plane_src_t1_dst_walks_exactly() -> None:
    spec = MID
    walked = 0
    for plane in range(spec.planes):
        for src_t0 in range(spec.t0_per_plane):
            src = src_t0 * spec.hosts_per_t0 + (src_t0 % spec.hosts_per_t0)
            for t1 in range(spec.t1):
                for dst in range(spec.hosts):
                    if dst == src:
                        continue
                    result = walk(spec, address_for(spec, src, dst, plane, t1), src)
                    assert result.hops == expected_hops(spec, plane, src, t1, dst)
                    assert result.host == dst
                    walked += 1
    assert walked == 2 * 8 * 5 * 47


def test_mid_size_tables_route_exactly_the_intended_usids() -> None:
    spec = MID
    allocated = [v for v in range(1, 0x10000)
                 if usid.T0_BASE <= v < usid.T0_BASE + 64 or usid.T1_BASE <= v < usid.T1_BASE + 64
                 or usid.PORT_BASE <= v < usid.PORT_BASE + 64 or v in (0xFFFF, 0x0FFF, 0x1)]
    for table in all_tables(spec):
        entries = table.entries()
        routed = {v for v in allocated if table.lookup(v) is not None}
        assert routed == set(entries)
        if table.tier == 0:
            expected = ({usid.t0_usid(table.index)} | {usid.t1_usid(k) for k in range(spec.t1)}
                        | {usid.port_usid(j) for j in range(spec.hosts_per_t0)})
        else:
            expected = ({usid.t1_usid(table.index)}
                        | {usid.t0_usid(i) for i in range(spec.t0_per_plane)})
        assert set(entries) == expected
        # Every next hop is a real neighbour reached over a real link.
        for value, decision in entries.items():
            if decision.action == UN:
                assert value == table.usid and decision.next_hop is None
                continue
            link = names.parse(spec, decision.link)  # type: ignore[arg-type]
            assert table.name in link.ends and decision.next_hop in link.ends  # type: ignore[operator]


@given(st.integers(0, 0xFFFF))
def test_unrouted_usids_drop(value: int) -> None:
    t0 = switch_table(MID, 1, 0, 3)
    t1 = switch_table(MID, 1, 1, 2)
    kind, index = usid.classify(value) if _allocated(value) else ("none", -1)
    d0, d1 = t0.lookup(value), t1.lookup(value)
    assert (d0 is not None) == ((kind, index) == ("t0", 3) or (kind == "t1" and index < MID.t1)
                                or (kind == "port" and index < MID.hosts_per_t0))
    assert (d1 is not None) == ((kind, index) == ("t1", 2)
                                or (kind == "t0" and index < MID.t0_per_plane))


def _allocated(value: int) -> bool:
    try:
        usid.classify(value)
    except usid.UsidError:
        return False
    return True


# ------------------------------------------------------------------ walk dead ends
def test_walk_dead_ends_name_the_switch() -> None:
    spec = MID
    # A T0 uSID that is not the source T0's own, with no T1 in between: the T0 drops it.
    with pytest.raises(NoRouteError, match=r"p0\.t0\.0: no route for active uSID 0x1002"):
        walk(spec, usid.encode(0, [usid.t0_usid(2), usid.port_usid(0)]), 0)
    # T1 out of this fabric's range.
    with pytest.raises(NoRouteError, match=r"p1\.t0\.0: no route for active uSID 0x2009"):
        walk(spec, usid.path_address(1, 0, 9, 2, 0), 0)
    # Destination T0 missing: the T1 sees a port uSID.
    with pytest.raises(NoRouteError, match=r"p0\.t1\.1: no route for active uSID 0xe000"):
        walk(spec, usid.encode(0, [usid.t0_usid(0), usid.t1_usid(1), usid.port_usid(0)]), 0)
    # Port beyond hosts_per_t0.
    with pytest.raises(NoRouteError, match=r"p0\.t0\.1: no route for active uSID 0xe006"):
        walk(spec, usid.path_address(0, 0, 1, 1, 6), 0)
    # Nothing after the T0: the carrier ends at a switch.
    with pytest.raises(NoRouteError, match=r"p0\.t0\.0: no route for active uSID 0x0000"):
        walk(spec, usid.encode(0, [usid.t0_usid(0)]), 0)
    # uSIDs left over at the host.
    with pytest.raises(NoRouteError, match=r"h1\.p0: arrived with uSIDs left over"):
        walk(spec, usid.encode(0, [usid.t0_usid(0), usid.port_usid(1), usid.t1_usid(0)]), 0)
    with pytest.raises(NoRouteError, match="plane 5 but the fabric has 2 planes"):
        walk(spec, usid.local_address(5, 0, 1), 0)
    with pytest.raises(NoRouteError, match="not in the fabric's uSID block"):
        walk(spec, usid.host_address(3), 0)
    with pytest.raises(UnknownElementError):
        walk(spec, usid.local_address(0, 0, 1), 48)


def test_walk_accepts_address_without_source_t0() -> None:
    # The tables, not the path builder, decide: a T0 forwards a T1 uSID up even when its own
    # uSID was left out. The simulator must behave the same way.
    result = walk(MID, usid.encode(0, [usid.t1_usid(2), usid.t0_usid(3), usid.port_usid(4)]), 0)
    assert result.hops == ("h0.p0", "p0.t0.0", "p0.t1.2", "p0.t0.3", "h22.p0")
    assert result.links == ("h0.p0--p0.t0.0", "p0.t0.0--p0.t1.2", "p0.t0.3--p0.t1.2",
                            "h22.p0--p0.t0.3")


# ------------------------------------------------------------------ table construction
def test_ambiguous_table_refused() -> None:
    with pytest.raises(FabricError, match="ambiguous"):
        SwitchTable(0, 0, 0, (Rule(0x2000, 0x2005, FORWARD, names.T1),
                              Rule(0x2005, 0x2005, UN)))
    with pytest.raises(FabricError, match="spans two uSID ranges"):
        SwitchTable(0, 0, 0, (Rule(0x1000, 0x2000, FORWARD, names.T1),))
    with pytest.raises(FabricError, match="not allocated"):
        SwitchTable(0, 0, 0, (Rule(0x3000, 0x3001, FORWARD, names.T1),))
    with pytest.raises(FabricError, match="bad uSID range"):
        SwitchTable(0, 0, 0, (Rule(0, 0, UN),))
    with pytest.raises(FabricError, match="next hop"):
        SwitchTable(0, 0, 0, (Rule(0x1000, 0x1000, UN, names.T1),))


def test_switch_table_refuses_unknown_switch() -> None:
    with pytest.raises(UnknownElementError, match="p2"):
        switch_table(MID, 2, 0, 0)
    with pytest.raises(UnknownElementError, match=r"p0\.t0\.8"):
        switch_table(MID, 0, 0, 8)
    with pytest.raises(UnknownElementError, match=r"p0\.t1\.5"):
        switch_table(MID, 0, 1, 5)
    with pytest.raises(ValueError, match="tier"):
        switch_table(MID, 0, 2, 0)


def test_decision_fields() -> None:
    table = switch_table(MID, 1, 0, 2)
    up = table.lookup(usid.t1_usid(4))
    assert up is not None and (up.action, up.shift, up.next_hop, up.link) == (
        FORWARD, False, "p1.t1.4", "p1.t0.2--p1.t1.4")
    down = table.lookup(usid.port_usid(5))
    assert down is not None and (down.action, down.shift, down.next_hop, down.link) == (
        UA, True, "h17.p1", "h17.p1--p1.t0.2")
    own = table.lookup(usid.t0_usid(2))
    assert own is not None and (own.action, own.shift, own.next_hop, own.link) == (
        UN, True, None, None)
    spine = switch_table(MID, 1, 1, 4).lookup(usid.t0_usid(7))
    assert spine is not None and (spine.next_kind, spine.next_index, spine.link) == (
        names.T0, 7, "p1.t0.7--p1.t1.4")
