"""RoCE RC's routed fabric (issue 36, items 1 and 2): the ECMP hash, plain and resilient
groups, routing repair timed to the picosecond, drains, black holes, and RC riding it."""

from __future__ import annotations

import ipaddress
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrc.acceptance.workload import Writes, stop_when_all_done
from mrc.packet import DATA, Packet
from mrc.sim import faults
from mrc.sim.engine import Simulator, us
from mrc.sim.fabric import build_network
from mrc.sim.network import Network
from mrc.sim.routing import RoutingConfig, rebalance
from mrc.sim.switch import ecmp_hash, switch_seed
from mrc.stack.rc_connection import ecmp_t1
from mrc.stack.stack import SimStack
from mrc.transport.rc.entropy import ROCE_SPORT_MIN, udp_source_port
from topology import names
from topology.routed import host_address, is_routed, parse
from topology.spec import FabricSpec

#: four T0s of two hosts, four T1s, one plane: small enough to check by hand
SPEC = FabricSpec(planes=1, hosts=8, hosts_per_t0=2, t1_per_plane=4, pfc=False)
DETECT_US, CONV_US = 2.0, 30.0
PS = 1_000_000
LOW64 = (1 << 64) - 1


def network(ecmp: str = "resilient", spec: FabricSpec = SPEC) -> Network:
    cfg = RoutingConfig(ecmp=ecmp, link_down_detect_us=DETECT_US,
                        routing_convergence_us=CONV_US)
    return build_network(Simulator(1), spec, routing=cfg)


def probe(src: int, dst: int, sport: int, plane: int = 0, spec: FabricSpec = SPEC) -> Packet:
    return Packet(DATA, src, dst, 7, ev=sport, da=host_address(spec, dst, plane), plane=plane)


def uplink_of(net: Network, src: int, dst: int, sport: int) -> int | None:
    """The T1 the source T0 sends this flow to now (None: no route)."""
    t0 = net.t0[0][SPEC.t0_of(src)]
    port = t0.forward(probe(src, dst, sport))
    return None if port is None else t0.uplinks.index(port)


def run_to(net: Network, t_ps: int) -> None:
    net.sim.run(until_ps=t_ps)


# ====================================================================== addressing, hash
def test_routed_address_plan_is_disjoint_and_parses() -> None:
    a = host_address(SPEC, 5, 0)
    assert is_routed(a) and parse(a) == (0, 2, 5)
    assert str(ipaddress.IPv6Address(a)) == "fd52:0:2::1:0:5"
    assert not is_routed(0xFCBB << 112)  # the uSID block is not routed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, (1 << 64) - 1), n=st.integers(2, 16), src=st.integers(0, 7),
       dst=st.integers(0, 7))
def test_ecmp_hash_is_uniform_over_source_ports(seed: int, n: int, src: int, dst: int) -> None:
    """Over every RoCE source port (the only field that varies between one host pair's
    QPs), each member's count stays within 5 standard deviations of the binomial mean."""
    sa, da = host_address(SPEC, src, 0), host_address(SPEC, dst, 0)
    counts = [0] * n
    flows = 1 << 14
    for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + flows):
        counts[ecmp_hash(seed, sa >> 64, sa & LOW64, da >> 64, da & LOW64, sport) % n] += 1
    mean = flows / n
    sigma = math.sqrt(flows * (1 / n) * (1 - 1 / n))
    assert all(abs(c - mean) <= 5 * sigma for c in counts), counts


def test_each_switch_hashes_with_its_own_seed() -> None:
    seeds = {switch_seed(p, tier, i) for p in range(2) for tier in (0, 1) for i in range(64)}
    assert len(seeds) == 256
    sa, da = host_address(SPEC, 0, 0), host_address(SPEC, 6, 0)
    picks = [[ecmp_hash(switch_seed(0, 0, t0), sa >> 64, sa & LOW64, da >> 64, da & LOW64,
                        sport) % 4 for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + 64)]
             for t0 in range(2)]
    assert picks[0] != picks[1]  # another seed: another spread (no polarisation)


def test_the_switch_picks_what_ecmp_t1_predicts() -> None:
    net = network()
    for qpn in range(2, 40):
        for src, dst in ((0, 5), (3, 6), (7, 1)):
            assert uplink_of(net, src, dst, udp_source_port(qpn, qpn)) == \
                ecmp_t1(SPEC, src, dst, qpn, 0)


# ====================================================================== plain and resilient
def test_rebalance_moves_only_what_it_must() -> None:
    table = rebalance([], [0, 1, 2, 3], 64)
    assert table == [b % 4 for b in range(64)]
    after = rebalance(table, [0, 1, 3], 64)
    assert [i for i in range(64) if after[i] != table[i]] == [i for i in range(64)
                                                               if table[i] == 2]
    assert max(after.count(m) for m in (0, 1, 3)) - min(after.count(m) for m in (0, 1, 3)) <= 1
    back = rebalance(after, [0, 1, 2, 3], 64)
    moved = [i for i in range(64) if back[i] != after[i]]
    assert all(back[i] == 2 for i in moved) and back.count(2) == 16 == len(moved)
    assert rebalance(back, [], 64) == [-1] * 64


@pytest.mark.parametrize("ecmp", ["resilient", "plain"])
def test_removal_moves_only_the_failed_members_flows_when_resilient(ecmp: str) -> None:
    net = network(ecmp)
    flows = [udp_source_port(q, q) for q in range(2, 802)]
    before = {f: uplink_of(net, 0, 6, f) for f in flows}
    faults.link_down(net, "p0.t0.0--p0.t1.2")
    run_to(net, us(DETECT_US))
    after = {f: uplink_of(net, 0, 6, f) for f in flows}
    moved = {f for f in flows if after[f] != before[f]}
    on_failed = {f for f in flows if before[f] == 2}
    assert 2 not in after.values()
    if ecmp == "resilient":
        assert moved == on_failed
    else:  # hash mod 3 instead of mod 4: most flows move
        assert moved > on_failed and len(moved) > 0.6 * len(flows)


# ====================================================================== repair, to the ps
def test_own_uplink_down_is_removed_after_detection_exactly() -> None:
    net = network()
    t_down = us(10)
    net.sim.at(t_down, lambda _: faults.link_down(net, "p0.t0.0--p0.t1.2"))
    flow = next(udp_source_port(q, q) for q in range(2, 500)
                if ecmp_t1(SPEC, 0, 6, q, 0) == 2)
    run_to(net, t_down + us(DETECT_US) - 1)
    assert uplink_of(net, 0, 6, flow) == 2  # still sent into the dead link: lost
    assert net.routing.members(0, 0, 3) == [0, 1, 2, 3]
    run_to(net, t_down + us(DETECT_US))
    assert net.routing.members(0, 0, 3) == [0, 1, 3] and uplink_of(net, 0, 6, flow) != 2
    # the other T0s learn it through routing, for destination T0 0 only
    assert net.routing.members(0, 1, 0) == [0, 1, 2, 3]
    run_to(net, t_down + us(CONV_US) - 1)
    assert net.routing.members(0, 1, 0) == [0, 1, 2, 3]
    run_to(net, t_down + us(CONV_US))
    assert net.routing.members(0, 1, 0) == [0, 1, 3]
    assert net.routing.members(0, 1, 3) == [0, 1, 2, 3]  # other destinations keep T1 2


def test_remote_link_down_is_withdrawn_after_convergence_exactly() -> None:
    """T1 2's link toward T0 3 goes down: T0 0 cannot see it, so its packets for T0 3 die
    at T1 2 until routing converges, then take another T1."""
    net = network()
    t_down = us(5)
    net.sim.at(t_down, lambda _: faults.link_down(net, "p0.t0.3--p0.t1.2"))
    flow = next(udp_source_port(q, q) for q in range(2, 500)
                if ecmp_t1(SPEC, 0, 6, q, 0) == 2)
    run_to(net, t_down + us(CONV_US) - 1)
    assert uplink_of(net, 0, 6, flow) == 2 and net.routing.members(0, 3, 1) == [0, 1, 3]
    run_to(net, t_down + us(CONV_US))
    assert uplink_of(net, 0, 6, flow) != 2 and net.routing.members(0, 0, 3) == [0, 1, 3]
    # it comes back after convergence too: a BGP session must come up first
    t_up = us(100)
    net.sim.at(t_up, lambda _: faults.link_up(net, "p0.t0.3--p0.t1.2"))
    flows = [udp_source_port(q, q) for q in range(2, 802)]
    run_to(net, t_up + us(CONV_US) - 1)
    assert net.routing.members(0, 3, 1) == [0, 1, 3]
    before = {f: uplink_of(net, 0, 6, f) for f in flows}
    run_to(net, t_up + us(CONV_US))
    assert net.routing.members(0, 3, 1) == net.routing.members(0, 0, 3) == [0, 1, 2, 3]
    # resilient: T1 2 takes back a fair share of buckets, and only flows moving to it move
    after = {f: uplink_of(net, 0, 6, f) for f in flows}
    moved = [f for f in flows if after[f] != before[f]]
    assert moved and all(after[f] == 2 for f in moved)
    assert net.routing.table(0, 0, 3).count(2) == 16


def test_a_flap_shorter_than_convergence_keeps_the_link_withdrawn_until_it_settles() -> None:
    net = network()
    for t, fn in ((us(10), faults.link_down), (us(11), faults.link_up),
                  (us(20), faults.link_down)):
        net.sim.at(t, lambda _, fn=fn: fn(net, "p0.t0.0--p0.t1.1"))
    run_to(net, us(200))
    assert net.routing.members(0, 0, 2) == [0, 2, 3]  # the stale advertisement was dropped


# ====================================================================== drain, black hole
def _rc_write(spec: FabricSpec, cfg: RoutingConfig, size: int, fault: object,
              until_us: float = 5_000) -> tuple[SimStack, Writes, int]:
    stack = SimStack(spec, seed=1, bin_ps=us(10), transport_name="rc", routing=cfg)
    conn = stack.open("rc", 0, 6, {"timeout_exp": 4, "retry_cnt": 3})
    w = Writes(stack, conn)
    w.post(size)
    stop_when_all_done(stack, [w])
    fault(stack)  # type: ignore[operator]
    stack.sim.run(us(until_us))
    qpn = conn.conn.requesters[0].qpn  # type: ignore[attr-defined]
    return stack, w, qpn


def _t1_of_qp(qpn: int) -> int:
    return ecmp_t1(SPEC, 0, 6, qpn, 0)


def _first_qpn() -> int:
    stack = SimStack(SPEC, seed=1, transport_name="rc")
    return stack.allocate_qpn(1)


def test_drain_then_power_off_loses_nothing() -> None:
    t1 = _t1_of_qp(_first_qpn())
    cfg = RoutingConfig(link_down_detect_us=DETECT_US, routing_convergence_us=CONV_US)
    name = names.t1_name(0, t1)

    def fault(stack: SimStack) -> None:
        stack.sim.at(us(20), lambda _: stack.net.routing.drain(name, True))
        stack.sim.at(us(20 + CONV_US + 5), lambda _: faults.switch_down(stack.net, name))

    stack, w, _ = _rc_write(SPEC, cfg, 4 << 20, fault)
    assert w.all_ok and w.finished
    drops = stack.totals()
    assert sum(sum(p.drops.values()) for p in stack.net.ports.values()) == 0, drops
    assert all(not sw.drops for sw in stack.net.switches.values())
    tx = stack.net.ports[f"p0.t0.0->{name}"].tx_packets
    assert tx > 0  # the flow did cross the T1 before the drain


def _finish_us(fault_target: str | None) -> tuple[float, object]:
    """When an 8 MB RC WRITE from h0 to h6 completes, with ``fault_target`` (a switch or a
    link the QP's flow crosses) going down at 30 us; and the requester's counters."""
    cfg = RoutingConfig(link_down_detect_us=DETECT_US, routing_convergence_us=CONV_US)

    def fault(stack: SimStack) -> None:
        if fault_target is None:
            return
        fn = faults.switch_down if "--" not in fault_target else faults.link_down
        stack.sim.at(us(30), lambda _: fn(stack.net, fault_target))

    stack, w, _ = _rc_write(SPEC, cfg, 8 << 20, fault)
    assert w.all_ok and w.finished
    req = stack.connections[0].conn.requesters[0]  # type: ignore[attr-defined]
    return w.done[0][0] / PS, req.stats


def _check_stall(stall_us: float, repair_us: float, stats: object) -> None:
    """The stall is the go-back-N resend of what was lost: every packet sent from the last
    one that got through until routing moved the flow (``repair_us``), plus those in flight
    and the NAK's way back (a round trip); one NAK, no timeout."""
    wire_us = (SPEC.mtu_bytes + 144 + 38) * 8 / SPEC.link_gbps / 1e3
    retx = stats.retx_sent  # type: ignore[attr-defined]
    assert abs(stall_us - retx * wire_us) < 1.0
    rtt = SPEC.base_rtt_ps() / PS
    assert repair_us <= stall_us <= repair_us + rtt + 4 * wire_us + 2
    assert stats.naks_received == 1 and stats.timeouts == 0  # type: ignore[attr-defined]


def test_rc_completes_across_a_t1_failure_stalled_for_detection() -> None:
    """Before routing (static SRv6), the QP stayed on the dead T1 and errored after its
    retries. Routed, every T0 sees its link to the dead T1 go down and removes it after
    detection; the packets sent after that arrive out of sequence, the responder NAKs and
    the requester goes back N: the transfer ends detection plus a round trip later."""
    t1 = _t1_of_qp(_first_qpn())
    healthy, _ = _finish_us(None)
    late, stats = _finish_us(names.t1_name(0, t1))
    _check_stall(late - healthy, DETECT_US, stats)


def test_rc_completes_across_a_remote_link_failure_stalled_for_convergence() -> None:
    """T1 -> T0 3 dies on the QP's path: T0 0 cannot see it and keeps sending into it until
    routing converges; the transfer ends convergence plus a round trip later."""
    t1 = _t1_of_qp(_first_qpn())
    healthy, _ = _finish_us(None)
    late, stats = _finish_us(names.fabric_link_name(0, 3, t1))
    _check_stall(late - healthy, CONV_US, stats)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_blackhole_drops_its_fraction_and_routing_never_moves(fraction: float) -> None:
    net = network()
    faults.blackhole(net, "p0.t1.1", fraction)
    groups = [net.routing.members(0, s, d) for s in range(4) for d in range(4) if s != d]
    flows = [udp_source_port(q, q) for q in range(2, 4002)
             if ecmp_t1(SPEC, 0, 6, q, 0) == 1]
    t1 = net.t1[0][1]
    passed = sum(t1.forward(probe(0, 6, f)) is not None for f in flows)
    dropped = len(flows) - passed
    assert t1.drops.get("blackhole") == dropped
    n = len(flows)
    assert abs(dropped - fraction * n) <= 5 * math.sqrt(n * fraction * (1 - fraction)) + 1e-9
    run_to(net, us(10 * CONV_US))
    assert [net.routing.members(0, s, d) for s in range(4) for d in range(4)
            if s != d] == groups
    faults.blackhole(net, "p0.t1.1", 0.0)
    assert t1.forward(probe(0, 6, flows[0])) is not None


def test_blackhole_on_a_link_and_refused_on_a_host_link() -> None:
    net = network()
    faults.blackhole(net, "p0.t0.3--p0.t1.1")
    t1 = net.t1[0][1]
    assert t1.forward(probe(0, 6, ROCE_SPORT_MIN)) is None  # toward T0 3: dropped
    assert t1.forward(probe(0, 2, ROCE_SPORT_MIN)) is not None  # toward T0 1: forwarded
    with pytest.raises(TypeError, match="host link"):
        faults.blackhole(net, "h0.p0--p0.t0.0")


def test_config_refuses_convergence_below_detection() -> None:
    with pytest.raises(ValueError, match="routing.routing_convergence_us"):
        RoutingConfig(link_down_detect_us=10.0, routing_convergence_us=5.0)
    with pytest.raises(ValueError, match="routing.ecmp"):
        RoutingConfig(ecmp="random")


def test_the_wire_shows_the_plain_destination_and_its_plane() -> None:
    """An RC packet's outer destination is the routed address (no uSID carrier), and the
    plane sits in the same byte as in the uSID block, so decoders and hosts read it alike."""
    from mrc import wire

    spec = FabricSpec(planes=4, hosts=8, hosts_per_t0=2, t1_per_plane=4)
    pkt = Packet(DATA, 0, 6, 9, 3, ev=udp_source_port(9, 9), length=64, msg_len=64,
                 da=host_address(spec, 6, 3), plane=3)
    data = wire.encode(pkt)
    assert data[24:28] == bytes([0xFD, 0x52, 0x00, 0x03])
    back = wire.decode(data)
    assert back.da == pkt.da and back.plane == 3


def test_kernel_routes_are_the_routed_plan() -> None:
    from topology.routed import kernel_routes

    t0 = kernel_routes(SPEC, "p0.t0.1")
    assert ("fd52:0:1::1:0:2/128", ("h2.p0",)) in t0
    assert ("fd52:0:3::/48", ("p0.t1.0", "p0.t1.1", "p0.t1.2", "p0.t1.3")) in t0
    assert len(t0) == 2 + 3
    assert kernel_routes(SPEC, "p0.t1.2")[3] == ("fd52:0:3::/48", ("p0.t0.3",))
