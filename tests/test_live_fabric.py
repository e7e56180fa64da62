"""The live fabric's engine on real packet bytes: it follows the static tables hop by hop,
keeps the receiver's checks valid after every shift, reproduces the simulator to the
picosecond (queues, trims, ECN), applies faults with the simulator's semantics, and counts
and drops anything malformed without ever raising."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc import wire
from mrc.live.fabric import DROP_REASONS, FabricCore
from mrc.packet import ACK, DATA, ECN_CE, PROBE, Packet, data_bytes
from mrc.sim.engine import Simulator
from mrc.sim.fabric import build_network
from topology import tables, usid
from topology.paths import address_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

SPEC = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2)
MTU = SPEC.mtu_bytes


def data_pkt(spec: FabricSpec, src: int, dst: int, plane: int, t1: int, psn: int = 1,
             length: int = MTU, da: int | None = None) -> Packet:
    payload = random.Random(psn * 1000 + src).randbytes(length)
    return Packet(DATA, src, dst, 7, psn, ev=usid.make_ev(plane, t1), msg_id=3,
                  offset=0, length=length, msg_len=length, payload=payload, plane=plane,
                  da=address_for(spec, src, dst, plane, t1) if da is None else da)


class Sink:
    """Collects what the fabric hands to hosts: (time_ps, host, decoded packet)."""

    def __init__(self) -> None:
        self.got: list[tuple[int, int, Packet]] = []

    def __call__(self, host: int, buf: bytearray, time_ps: int) -> None:
        self.got.append((time_ps, host, wire.decode(bytes(buf))))


def fabric(spec: FabricSpec = SPEC, **kw: object) -> tuple[FabricCore, Sink]:
    sink = Sink()
    return FabricCore(spec, deliver=sink, **kw), sink  # type: ignore[arg-type]


def send(core: FabricCore, t: int, pkt: Packet) -> bool:
    core.run_until(t)
    core.now = max(core.now, t)
    return core.inject(wire.encode(pkt), pkt.src)


def test_every_path_follows_the_reference_walk_and_stays_verifiable() -> None:
    core, sink = fabric()
    crossed: list[str] = []
    core.set_tap(lambda t, port, buf: crossed.append(port), point="every_hop")
    t = 0
    for src in range(SPEC.hosts):
        for dst in range(SPEC.hosts):
            if src == dst:
                continue
            for plane in range(SPEC.planes):
                for t1 in range(SPEC.t1):
                    pkt = data_pkt(SPEC, src, dst, plane, t1, psn=t // 10**9)
                    crossed.clear()
                    before = len(sink.got)
                    assert send(core, t, pkt)
                    core.run_until(t + 10**9)
                    ref = tables.walk(SPEC, pkt.da, src)
                    # every link the reference walk names, in order, as output ports
                    links = [core.ports[p].link.name for p in crossed]  # type: ignore[union-attr]
                    assert links == list(ref.links)
                    assert len(sink.got) == before + 1
                    _, host, got = sink.got[-1]
                    assert host == ref.host == dst
                    # decode() verified ICRC + UDP checksum after all the shifts
                    assert got.payload == pkt.payload and got.psn == pkt.psn
                    assert got.da == ref.address and got.da & usid.CARRIER_MASK == 0
                    t += 10**9
    assert core.totals()["drops"] == 0


def test_matches_the_simulator_to_the_picosecond_under_incast() -> None:
    """3:1 incast through one T1 port with a small buffer: same delivery times, same trims
    and ECN marks, trimmed headers overtaking queued data, exactly as mrc.sim.network."""
    spec = FabricSpec(planes=2, hosts=8, hosts_per_t0=2, t1_per_plane=2, buffer_bytes=64 * 1024,
                      ecn_threshold_bytes=16 * 1024)
    sim = Simulator(1)
    net = build_network(sim, spec)
    sim_got: list[tuple[int, int, int, bool, int, int]] = []

    class Agent:
        def __init__(self, h: int) -> None:
            self.h = h

        def pull(self, now: int, plane: int) -> None:
            return None

        def on_receive(self, now: int, pkt: Packet) -> None:
            sim_got.append((now, self.h, pkt.psn, pkt.trimmed, pkt.ecn, pkt.size))

    for host in net.hosts:
        host.attach(Agent(host.index))
    core, sink = fabric(spec)
    wire_ps = (data_bytes(MTU) + ETHERNET_OVERHEAD_BYTES) * 8 * 10**12 // spec.link_bps
    schedule = []
    for i in range(150):
        for src in (0, 2, 4):
            # Sources a few ps off line rate and off each other: the engines break ties between
            # simultaneous events differently (both valid), so the scenario has none.
            schedule.append((i * (wire_ps + 3 + src) + 7 * src, src,
                             data_pkt(spec, src, 6, 1, 0, psn=i * 8 + src)))
    for t, src, pkt in schedule:
        copy = Packet(DATA, pkt.src, pkt.dst, pkt.qpn, pkt.psn, ev=pkt.ev, msg_id=pkt.msg_id,
                      length=pkt.length, msg_len=pkt.msg_len, payload=pkt.payload,
                      da=pkt.da, plane=pkt.plane)
        sim.at(t, lambda a: net.hosts[a[0]].send_control(a[1]), (src, copy))
        send(core, t, pkt)
    sim.run()
    core.run_until(10**15)
    live_got = [(t, h, p.psn, p.trimmed, p.ecn, p.size) for t, h, p in sink.got]
    assert live_got == sim_got
    totals = core.totals()
    assert totals["trims"] == net.totals()["trims"] > 0
    assert totals["ecn_marks"] == net.totals()["ecn_marks"] > 0
    assert any(p.trimmed for _, _, p in sink.got) and any(p.ecn == ECN_CE for _, _, p in sink.got)
    # a trimmed packet still carries what its NACK needs
    trimmed = next(p for _, _, p in sink.got if p.trimmed)
    assert wire.nack_fields_from_trimmed(trimmed).psn == trimmed.psn


def test_delivery_time_is_serialization_plus_propagation() -> None:
    core, sink = fabric()
    pkt = data_pkt(SPEC, 0, 2, 1, 1)
    send(core, 0, pkt)
    core.run_until(10**12)
    size = data_bytes(MTU) + ETHERNET_OVERHEAD_BYTES
    ser = -(-size * 8 * 10**12 // SPEC.link_bps)
    expected = 4 * (ser + SPEC.link_delay_ps) + 3 * SPEC.switch_latency_ps
    assert sink.got[0][0] == expected


def test_switch_down_loses_only_what_crosses_it_and_tells_the_nics() -> None:
    signals: list[tuple[int, int, bool, int]] = []
    core, sink = fabric(nic_link=lambda h, p, up, bps: signals.append((h, p, up, bps)))
    core.schedule(0, "switch_down", "h0.p1.t0")  # p1.t0.0: hosts 0 and 1 lose plane 1
    core.run_until(0)
    assert sorted(signals) == [(0, 1, False, SPEC.link_bps), (1, 1, False, SPEC.link_bps)]
    send(core, 10, data_pkt(SPEC, 0, 2, 1, 0))  # its NIC link is down: lost at once
    send(core, 20, data_pkt(SPEC, 2, 0, 1, 1))  # reaches the T1, which cannot go down to it
    send(core, 30, data_pkt(SPEC, 0, 2, 2, 0))  # another plane: unaffected
    send(core, 40, data_pkt(SPEC, 3, 2, 1, 0))  # same plane, other T0s: unaffected
    core.run_until(10**12)
    assert sorted((h, p.plane) for _, h, p in sink.got) == [(2, 1), (2, 2)]
    totals = core.totals()
    assert totals["drop_down"] == 2 and totals["drops"] == 2
    core.apply("switch_up", "p1.t0.0")
    assert sorted(signals[-2:]) == [(0, 1, True, SPEC.link_bps), (1, 1, True, SPEC.link_bps)]
    send(core, 2 * 10**12, data_pkt(SPEC, 0, 2, 1, 0))
    core.run_until(3 * 10**12)
    assert sink.got[-1][1] == 2


def test_link_faults_loss_and_degrade_follow_the_lab_actions() -> None:
    core, sink = fabric()
    link = "p0.t0.0--p0.t1.1"
    core.apply("link_down", link)
    send(core, 0, data_pkt(SPEC, 0, 2, 0, 1))  # crosses the dead link
    send(core, 10, data_pkt(SPEC, 0, 2, 0, 0))  # other T1: fine
    core.run_until(10**12)
    assert len(sink.got) == 1 and core.totals()["drop_down"] == 1
    core.apply("link_up", link)
    # a T0 that is down keeps its links down even when the link fault clears
    core.apply("switch_down", "p0.t1.1")
    core.apply("link_down", link)
    core.apply("link_up", link)
    assert not core.links[link].is_up
    core.apply("switch_up", "p0.t1.1")
    assert core.links[link].is_up
    core.apply("loss_start", link, {"probability": 1.0})
    send(core, 2 * 10**12, data_pkt(SPEC, 0, 2, 0, 1))
    core.run_until(3 * 10**12)
    assert core.totals()["drop_loss"] == 1
    core.apply("loss_end", link)
    # degrade: the T0->T1 hop serializes at half rate
    core.apply("degrade_start", link, {"rate_fraction": 0.5})
    t0 = 4 * 10**12
    send(core, t0, data_pkt(SPEC, 0, 2, 0, 1))
    core.run_until(5 * 10**12)
    size = data_bytes(MTU) + ETHERNET_OVERHEAD_BYTES
    ser = -(-size * 8 * 10**12 // SPEC.link_bps)
    expected = 5 * ser + 4 * SPEC.link_delay_ps + 3 * SPEC.switch_latency_ps
    assert sink.got[-1][0] - t0 == expected
    assert [r["action"] for r in core.fault_log][-2:] == ["set_loss", "degrade"]
    with pytest.raises(ValueError):
        core.apply("drain_start", "p0.t1.1")


def test_a_carrier_that_leads_nowhere_is_lost_where_the_fabric_would_lose_it() -> None:
    core, sink = fabric()
    # T1 index 5 does not exist: the source T0 has no route for it
    bad_t1 = usid.encode(0, (usid.t0_usid(0), usid.t1_usid(5), usid.t0_usid(1),
                             usid.port_usid(0)))
    send(core, 0, data_pkt(SPEC, 0, 2, 0, 0, da=bad_t1))
    # an extra uSID after the port: the host sees a carrier that is not consumed
    extra = usid.encode(0, (usid.t0_usid(0), usid.t1_usid(0), usid.t0_usid(1),
                            usid.port_usid(0), usid.t1_usid(0)))
    send(core, 10, data_pkt(SPEC, 0, 2, 0, 0, da=extra))
    # the right carrier but the inner destination is another host
    wrong = data_pkt(SPEC, 0, 3, 0, 0, da=address_for(SPEC, 0, 2, 0, 0))
    send(core, 20, wrong)
    core.run_until(10**12)
    assert sink.got == []
    totals = core.totals()
    assert totals["drop_no_route"] == 1 and totals["drop_misdelivered"] == 2
    assert core.switches["p0.t0.0"].drops == {"no_route": 1}


def test_control_packets_and_every_kind_cross_intact() -> None:
    core, sink = fabric()
    da = address_for(SPEC, 2, 0, 3, 1)
    ack = Packet(ACK, 2, 0, 9, 77, ev=usid.make_ev(3, 1), ts=123, echo_psn=5, sack_base=70,
                 sack=0b1011, da=da, plane=3)
    probe = Packet(PROBE, 2, 0, 9, 4, ev=usid.make_ev(3, 1), ts=456, da=da, plane=3)
    send(core, 0, ack)
    send(core, 1, probe)
    core.run_until(10**12)
    kinds = [(p.kind, p.psn, p.plane) for _, _, p in sink.got]
    assert kinds == [(ACK, 77, 3), (PROBE, 4, 3)]
    assert sink.got[0][2].sack == 0b1011


def test_ingress_refuses_what_is_not_a_packet_of_a_registered_host() -> None:
    core, sink = fabric()
    good = wire.encode(data_pkt(SPEC, 0, 2, 0, 0))
    assert not core.inject(good, None)  # unknown sender address
    assert not core.inject(good, 1)  # h1 sending with h0's inner source
    assert not core.inject(b"\x00" * 20, 0)
    other_block = bytearray(good)
    other_block[24] = 0x20
    assert not core.inject(other_block, 0)
    plane9 = bytearray(good)
    plane9[27] = 9
    assert not core.inject(plane9, 0)
    totals = core.totals()
    assert (totals["rejected_unknown_source"], totals["rejected_spoofed"],
            totals["rejected_malformed"], totals["rejected_no_plane"]) == (1, 1, 1, 2)
    assert totals["drops"] == 0  # refused datagrams are not fabric losses


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_garbage_and_mutations_are_counted_never_raised(data: st.DataObject) -> None:
    # The fabric does not check what switches do not read: what it delivers may still be
    # garbage inside (the host's decoder refuses it), so collect raw bytes here.
    delivered: list[bytes] = []
    core = FabricCore(SPEC, deliver=lambda host, buf, t: delivered.append(bytes(buf)))
    base = bytearray(wire.encode(data_pkt(SPEC, 0, 2, 1, 1, length=64)))
    for i in range(20):
        if data.draw(st.booleans()):
            buf = bytearray(data.draw(st.binary(max_size=300)))
        else:
            buf = bytearray(base)
            for _ in range(data.draw(st.integers(1, 6))):
                pos = data.draw(st.integers(0, len(buf) - 1))
                buf[pos] = data.draw(st.integers(0, 255))
            if data.draw(st.booleans()):
                del buf[data.draw(st.integers(0, len(buf))):]
        src = data.draw(st.sampled_from([None, 0, 1, 2, 3]))
        core.inject(buf, src)
        core.run_until(i * 10**9)
    core.run_until(10**13)
    totals = core.totals()
    assert totals["rx_datagrams"] == 20
    lost = totals["drops"] + totals["rejected"]
    assert totals["delivered_datagrams"] + lost == 20 == len(delivered) + lost
    assert set(core.drops) <= set(("malformed", "unknown_source", "spoofed", "no_plane"))
    assert all(k in DROP_REASONS for p in core.ports.values() for k in p.drops)


def test_faults_are_the_simulators_primitives_and_nics_hear_their_rate() -> None:
    """Faults run ``mrc.sim.faults`` on the fabric's network: the same effect records as in
    simulation; a degraded host link tells that host's NIC the rate it now runs at."""
    signals: list[tuple[int, int, bool, int]] = []
    core, _ = fabric(nic_link=lambda h, p, up, bps: signals.append((h, p, up, bps)))
    sim = Simulator(0)
    net = build_network(sim, SPEC)
    from mrc.sim import faults as sim_faults

    assert core.fault("switch_down", "p2.t1.1") == dict(
        sim_faults.switch_down(net, "p2.t1.1").effect)
    assert signals == []  # a T1 is not a NIC's neighbour
    core.apply("degrade_start", "h3.p1", {"rate_fraction": 0.25})
    assert signals == [(3, 1, True, SPEC.link_bps // 4)]
    core.apply("degrade_end", "h3.p1")
    assert signals[-1] == (3, 1, True, SPEC.link_bps)
    core.fault("nic_port_down", "h1.p0")
    assert signals[-1] == (1, 0, False, SPEC.link_bps)
    with pytest.raises(ValueError):
        core.fault("reboot_everything", "p0.t0.0")
    assert [r["action"] for r in core.fault_log] == [
        "switch_down", "degrade", "degrade", "nic_port_down"]


def test_a_nic_port_that_loses_its_link_loses_what_waited_in_the_nic() -> None:
    """Datagrams a host handed to a NIC port queue in the NIC while the port serializes;
    when the link dies they are lost there (counted as ``link_down``), never delivered."""
    core, sink = fabric()
    for i in range(5):  # a burst at one instant: one on the wire, four waiting
        send(core, 0, data_pkt(SPEC, 0, 2, 1, 0, psn=i + 1))
    core.apply("port_down", "h0.p1")
    core.run_until(10**12)
    assert sink.got == []
    assert core.totals()["drop_link_down"] == 5
