"""Element names: build/parse round-trips, selectors, and clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import names
from topology.names import Element, UnknownElementError, parse, resolve
from topology.spec import FabricSpec, preset

FAIRWATER = preset("fairwater")
SMALL = FabricSpec(planes=4, hosts=12, hosts_per_t0=4, t1_per_plane=3)


@st.composite
def specs(draw: st.DrawFn) -> FabricSpec:
    hosts_per_t0 = draw(st.integers(1, 8))
    return FabricSpec(planes=draw(st.integers(1, 8)),
                      hosts=hosts_per_t0 * draw(st.integers(1, 8)),
                      hosts_per_t0=hosts_per_t0, t1_per_plane=draw(st.integers(1, 8)))


@st.composite
def spec_and_name(draw: st.DrawFn) -> tuple[FabricSpec, str]:
    spec = draw(st.one_of(specs(), st.just(FAIRWATER)))
    plane = draw(st.integers(0, spec.planes - 1))
    host = draw(st.integers(0, spec.hosts - 1))
    t0 = draw(st.integers(0, spec.t0_per_plane - 1))
    t1 = draw(st.integers(0, spec.t1 - 1))
    name = draw(st.sampled_from([
        names.host_name(host), names.nic_port_name(host, plane), names.t0_name(plane, t0),
        names.t1_name(plane, t1), names.uplink_name(spec, host, plane),
        names.fabric_link_name(plane, t0, t1)]))
    return spec, name


@given(spec_and_name())
def test_names_round_trip(case: tuple[FabricSpec, str]) -> None:
    spec, name = case
    element = parse(spec, name)
    assert element.name == name
    assert resolve(spec, name) == element
    assert element.kind in names.KINDS
    if element.kind == names.LINK:
        assert element.ends is not None
        assert names.LINK_SEPARATOR.join(element.ends) == name
        assert names.link_name(*reversed(element.ends)) == name
        assert resolve(spec, f"{element.ends[1]}--{element.ends[0]}") == element
        assert [parse(spec, end).plane for end in element.ends] == [element.plane] * 2


@given(specs(), st.data())
def test_fields_match_builders(spec: FabricSpec, data: st.DataObject) -> None:
    host = data.draw(st.integers(0, spec.hosts - 1))
    plane = data.draw(st.integers(0, spec.planes - 1))
    t0, port = spec.t0_of(host), spec.port_of(host)
    assert parse(spec, f"h{host}") == Element(names.HOST, f"h{host}", index=host, host=host,
                                              t0=t0, port=port)
    nic = parse(spec, f"h{host}.p{plane}")
    assert (nic.kind, nic.plane, nic.host, nic.t0, nic.port) == (
        names.NIC_PORT, plane, host, t0, port)
    assert nic.usid == 0xE000 + port
    sw = parse(spec, f"p{plane}.t1.{spec.t1 - 1}")
    assert (sw.kind, sw.tier, sw.index, sw.usid) == (names.T1, 1, spec.t1 - 1,
                                                     0x2000 + spec.t1 - 1)
    link = parse(spec, names.uplink_name(spec, host, plane))
    assert (link.link_kind, link.host, link.t0, link.plane) == (names.HOST_LINK, host, t0, plane)
    fabric = parse(spec, names.fabric_link_name(plane, t0, 0))
    assert (fabric.link_kind, fabric.t0, fabric.t1) == (names.FABRIC_LINK, t0, 0)


def test_selectors() -> None:
    # h3 hangs under T0 0 of every plane (4 hosts per T0); h9 under T0 2.
    assert resolve(SMALL, "h3.p2.t0").name == "p2.t0.0"
    assert resolve(SMALL, "h9.p1.t0").name == "p1.t0.2"
    uplink = resolve(SMALL, "h9.p1.uplink")
    assert uplink.name == "h9.p1--p1.t0.2"
    assert uplink.ends == ("h9.p1", "p1.t0.2")
    # Selectors also work as link ends, and at Fairwater scale without a graph.
    assert resolve(SMALL, "h9.p1.t0--p1.t1.2").name == "p1.t0.2--p1.t1.2"
    assert resolve(FAIRWATER, "h131071.p7.uplink").name == "h131071.p7--p7.t0.511"
    with pytest.raises(UnknownElementError, match="canonical"):
        parse(SMALL, "h3.p2.t0")
    with pytest.raises(UnknownElementError, match="canonical.*'p1.t0.2--p1.t1.0'"):
        parse(SMALL, "p1.t1.0--p1.t0.2")


@pytest.mark.parametrize(("text", "reason"), [
    ("h12", r"host index 12 outside 0..11"),
    ("h3.p4", r"plane 4 outside 0..3"),
    ("p0.t0.3", r"T0 index 3 outside 0..2"),
    ("p0.t1.3", r"T1 index 3 outside 0..2"),
    ("p0.t2.0", r"not an element name"),
    ("h007", r"leading zeros"),
    ("p1.t0.01", r"leading zeros"),
    ("switch", r"not an element name"),
    ("", r"not an element name"),
    ("H3", r"not an element name"),
    ("h5.p1--p1.t0.0", r"h5 hangs under p1.t0.1, not p1.t0.0"),
    ("h5.p1--p2.t0.1", r"plane 1 but p2.t0.1 in plane 2"),
    ("p0.t0.1--p1.t1.0", r"plane 0 but p1.t1.0 in plane 1"),
    ("p0.t1.0--p0.t1.1", r"no link joins a t1 and a t1"),
    ("p0.t0.0--p0.t0.1", r"no link joins a t0 and a t0"),
    ("h1--p0.t0.0", r"no link joins a host and a t0"),
    ("h1.p0--p0.t0.0--p0.t1.0", r"two element names joined by '--'"),
    ("h1.p0--", r"two element names"),
    ("h1.p0.t1", r"not an element name"),
    ("h5.p1--p1.t0.9", r"end 'p1.t0.9': T0 index 9 outside 0..2"),
    ("h3.p2.uplink--p2.t0.0", r"no link joins a t0 and a link"),
])
def test_refusals_name_the_element(text: str, reason: str) -> None:
    with pytest.raises(UnknownElementError, match=reason) as info:
        resolve(SMALL, text)
    assert isinstance(info.value, ValueError)
    assert info.value.element == text
    assert repr(text) in str(info.value)


def test_non_string_refused() -> None:
    with pytest.raises(UnknownElementError):
        resolve(SMALL, 3)  # type: ignore[arg-type]


def test_builders() -> None:
    assert names.switch_name(3, 0, 12) == "p3.t0.12"
    assert names.switch_name(3, 1, 5) == "p3.t1.5"
    assert names.host_link_name(17, 3, 4) == "h17.p3--p3.t0.4"
    assert names.fabric_link_name(3, 12, 5) == "p3.t0.12--p3.t1.5"
    assert names.link_name("p3.t1.5", "p3.t0.12") == "p3.t0.12--p3.t1.5"
    assert names.link_name("p3.t0.4", "h17.p3") == "h17.p3--p3.t0.4"
    with pytest.raises(ValueError):
        names.switch_name(0, 2, 0)
    with pytest.raises(UnknownElementError):
        names.link_name("h17", "p3.t0.4")
