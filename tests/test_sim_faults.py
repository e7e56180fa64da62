"""Fault primitives: a failed element loses exactly what crosses it, and recovers."""

from __future__ import annotations

import pytest

from mrc.packet import ACK, DATA, Packet, data_bytes
from mrc.sim import faults
from mrc.sim.engine import Simulator, us
from mrc.sim.fabric import build_network
from mrc.sim.network import Network
from topology.paths import address_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

SPEC = FabricSpec(planes=2, hosts=4, hosts_per_t0=2, t1_per_plane=2, name="faults")
SER = (data_bytes(4096) + ETHERNET_OVERHEAD_BYTES) * 80  # full packet at 100 Gb/s, in ps


class Stream:
    """HostAgent: a paced stream of DATA packets to ``dst`` over (plane, t1) pairs, PSNs
    counting up per path; records what it receives."""

    def __init__(self, src: int, dst: int, paths: list[tuple[int, int]], length: int = 4096,
                 limit: int | None = None, until: int | None = None) -> None:
        self.src, self.dst, self.length, self.limit, self.until = src, dst, length, limit, until
        self.paths = {plane: address_for(SPEC, src, dst, plane, t1) for plane, t1 in paths}
        self.sent: dict[int, int] = {plane: 0 for plane in self.paths}
        self.pulled_at: dict[tuple[int, int], int] = {}  # (plane, psn) -> time
        self.received: list[tuple[int, Packet]] = []

    def pull(self, now: int, plane: int) -> Packet | None:
        if plane not in self.paths or (self.limit is not None and self.sent[plane] >= self.limit):
            return None
        if self.until is not None and now >= self.until:
            return None
        self.sent[plane] += 1
        self.pulled_at[plane, self.sent[plane]] = now
        return Packet(DATA, self.src, self.dst, 1, self.sent[plane], length=self.length,
                      plane=plane, ts=now, da=self.paths[plane])

    def on_receive(self, now: int, pkt: Packet) -> None:
        self.received.append((now, pkt))

    def got(self, plane: int | None = None) -> list[int]:
        return [p.psn for _, p in self.received if plane is None or p.plane == plane]


def setup(streams: dict[int, Stream], spec: FabricSpec = SPEC, seed: int = 1, start: bool = True,
          ) -> tuple[Simulator, Network, dict[int, Stream]]:
    sim = Simulator(seed)
    net = build_network(sim, spec)
    sinks = {}
    for host in net.hosts:
        agent = streams.get(host.index) or Stream(host.index, host.index, [])
        host.attach(agent)
        sinks[host.index] = agent
    if start:
        net.kick_all()
    return sim, net, sinks


def test_link_down_loses_only_what_crosses_it_and_link_up_restores() -> None:
    a = Stream(0, 2, [(0, 0)], until=us(60))  # crosses p0.t0.0--p0.t1.0
    b = Stream(1, 3, [(0, 1)], until=us(60))  # same T0, other T1
    sim, net, agents = setup({0: a, 1: b})
    faults.at(sim, us(20), faults.link_down, net, "p0.t0.0--p0.t1.0")
    faults.at(sim, us(40), faults.link_up, net, "p0.t1.0--p0.t0.0")
    sim.run()
    got_a, got_b = agents[2].got(), agents[3].got()
    assert got_b == list(range(1, b.sent[0] + 1))
    missing = sorted(set(range(1, a.sent[0] + 1)) - set(got_a))
    lost = len(missing)
    assert lost > 0 and got_a[-1] == a.sent[0] > missing[-1]  # a gap, then traffic again
    up, down = net.links["p0.t0.0--p0.t1.0"].ports
    counted = sum(up.drops.values()) + sum(down.drops.values())
    assert counted == lost and set(up.drops) <= {"down", "link_down"}
    assert not down.drops  # nothing flowed the other way
    # Exactly the packets that would have reached the T1 while the link was down are missing
    # (a packet on the wire, or within the far switch's latency, at the cut is lost).
    d, lat = SPEC.link_delay_ps, SPEC.switch_latency_ps
    expected = [psn for (_, psn), t in sorted(a.pulled_at.items())
                if t + 2 * (SER + d + lat) < us(20) or t + SER + d + lat >= us(40)]
    assert got_a == expected
    assert [r.action for r in net.fault_log] == ["link_down", "link_up"]
    assert net.fault_log[0].time_ps == us(20) and net.fault_log[1].effect["up"] is True


@pytest.mark.parametrize("when", ["serializing", "propagating"])
def test_packet_on_the_wire_is_lost_when_its_link_goes_down(when: str) -> None:
    a = Stream(0, 2, [(0, 0)], limit=1)
    sim, net, agents = setup({0: a})
    d, lat = SPEC.link_delay_ps, SPEC.switch_latency_ps
    at_t1 = 2 * (SER + d + lat)  # the T1 forwards it now, down toward p0.t0.1
    cut = at_t1 + (SER // 2 if when == "serializing" else SER + d // 2)
    faults.at(sim, cut, faults.link_down, net, "p0.t0.1--p0.t1.0")
    sim.run()
    assert agents[2].received == []
    port = net.ports["p0.t1.0->p0.t0.1"]
    assert port.tx_packets == 1 and port.drops == {"link_down": 1} and port.delivered == 0
    assert net.fault_log[0].effect["lost_queued"] == 0
    faults.link_up(net, "p0.t0.1--p0.t1.0")
    a.limit = 2
    net.hosts[0].kick(0)
    sim.run()
    assert agents[2].got() == [2]


def test_queued_packets_are_lost_with_their_link() -> None:
    a, b = Stream(0, 3, [(0, 0)]), Stream(2, 3, [(0, 0)])  # 2:1 into h3's downlink
    sim, net, agents = setup({0: a, 2: b})
    faults.at(sim, us(10), faults.link_down, net, "h3.p0--p0.t0.1")
    sim.run(until_ps=us(10) - 1)
    queued = net.ports["p0.t0.1->h3.p0"].backlog()[1]
    sim.run(until_ps=us(12))
    record = net.fault_log[0]
    assert queued > 0 and record.effect["lost_queued"] == queued
    port = net.ports["p0.t0.1->h3.p0"]
    assert port.drops["link_down"] >= queued and port.backlog() == (0, 0, 0, 0)


def test_switch_down_loses_its_paths_only_and_up_restores_them() -> None:
    # plane 0 via T1 0 (fails); plane 1 via its own T1 0
    a = Stream(0, 2, [(0, 0), (1, 0)], until=us(60))
    b = Stream(1, 3, [(0, 1)], until=us(60))
    sim, net, agents = setup({0: a, 1: b})
    faults.at(sim, us(20), faults.switch_down, net, "p0.t1.0")
    faults.at(sim, us(40), faults.switch_up, net, "p0.t1.0")
    sim.run()
    got = agents[2]
    assert got.got(1) == list(range(1, a.sent[1] + 1))  # the other plane never noticed
    plane0 = got.got(0)
    assert len(plane0) < a.sent[0] - 20 and plane0[-1] == a.sent[0]  # gap, then back
    assert agents[3].got() == list(range(1, b.sent[0] + 1))
    assert net.fault_log[0].effect["links_down"] == 2
    assert net.switches["p0.t1.0"].up


def test_switch_up_does_not_revive_a_link_cut_on_its_own() -> None:
    sim, net, _ = setup({})
    faults.link_down(net, "p0.t0.0--p0.t1.0")
    faults.switch_down(net, "p0.t1.0")
    faults.switch_up(net, "p0.t1.0")
    assert not net.links["p0.t0.0--p0.t1.0"].is_up
    assert net.links["p0.t0.1--p0.t1.0"].is_up
    record = faults.link_up(net, "p0.t0.0--p0.t1.0")
    assert record.effect == {"up": True, "held_by": []}


def test_t0_down_silences_that_plane_of_its_hosts() -> None:
    a = Stream(0, 2, [(0, 0), (1, 1)])
    sim, net, agents = setup({0: a})
    faults.at(sim, us(10), faults.switch_down, net, "p0.t0.0")
    sim.run(until_ps=us(30))
    sent0, sent1 = a.sent[0], a.sent[1]
    assert not net.hosts[0].ports[0].up
    sim.run(until_ps=us(50))
    assert a.sent[0] == sent0 and a.sent[1] > sent1  # the dead plane pulls nothing
    faults.switch_up(net, "p0.t0.0")
    sim.run(until_ps=us(70))
    assert a.sent[0] > sent0  # the NIC port came back and pulls again
    assert agents[2].got(1) == list(range(1, a.sent[1] + 1))[: len(agents[2].got(1))]


def test_nic_port_down_and_up() -> None:
    a = Stream(0, 2, [(0, 0), (1, 0)])
    sim, net, agents = setup({0: a})
    faults.at(sim, us(10), faults.nic_port_down, net, "h0.p1")
    sim.run(until_ps=us(20))
    sent = a.sent[1]
    ack = Packet(ACK, 0, 2, 1, 0, plane=1, da=address_for(SPEC, 0, 2, 1, 0))
    net.hosts[0].send_control(ack)
    sim.run(until_ps=us(30))
    nic = net.nic_ports["h0.p1"]
    assert a.sent[1] == sent and nic.drops["down"] == 1
    plane0 = agents[2].got(0)
    assert plane0 == list(range(1, len(plane0) + 1)) and a.sent[0] > 2 * sent
    faults.nic_port_up(net, "h0", plane=1)
    sim.run(until_ps=us(40))
    assert a.sent[1] > sent + 10


def test_random_loss_rate_is_close_to_p_and_one_directional() -> None:
    n = 20_000
    a = Stream(0, 2, [(0, 0)], length=64, limit=n)
    back = Stream(2, 0, [(0, 0)], length=64, limit=n)
    sim, net, agents = setup({0: a, 2: back}, seed=11)
    record = faults.set_loss(net, "p0.t0.0--p0.t1.0", 0.1, direction="up")
    sim.run()
    lost = n - len(agents[2].received)
    assert abs(lost / n - 0.1) < 0.01
    up, down = net.links["p0.t0.0--p0.t1.0"].ports
    assert up.drops == {"loss": lost} and not down.drops
    assert len(agents[0].received) == n  # the reverse direction is clean
    assert record.params == {"p": 0.1, "direction": "up"}


def test_degraded_link_serializes_at_the_reduced_rate() -> None:
    a = Stream(0, 1, [(0, 0)], limit=3)  # same T0: NIC -> T0 -> host
    sim, net, agents = setup({0: a}, start=False)
    faults.degrade(net, "h0.p0", 0.25, direction="up")
    net.kick_all()
    sim.run()
    times = [t for t, _ in agents[1].received]
    d, lat = SPEC.link_delay_ps, SPEC.switch_latency_ps
    assert times[0] == 4 * SER + d + lat + SER + d
    assert times[1] - times[0] == 4 * SER  # paced by the slow NIC link
    faults.restore(net, "h0.p0")
    assert net.nic_ports["h0.p0"].bps == SPEC.link_bps


def test_apply_by_name_restore_and_errors() -> None:
    sim, net, _ = setup({})
    record = faults.apply(net, "set_loss", "p1.t0.1--p1.t1.1", p=0.5)
    assert record.action == "set_loss" and net.ports["p1.t0.1->p1.t1.1"].loss_p == 0.5
    faults.apply(net, "link_down", "p1.t0.1--p1.t1.1")
    restored = faults.restore(net, "p1.t0.1--p1.t1.1")
    link = net.links["p1.t0.1--p1.t1.1"]
    assert restored.effect["up"] and link.is_up and all(p.loss_p == 0 for p in link.ports)
    faults.switch_down(net, "p1.t1.1")
    faults.restore_all(net)
    assert all(sw.up for sw in net.switches.values())
    assert all(link.is_up for link in net.links.values())
    rows = [r.as_row() for r in net.fault_log]
    assert rows[0]["param_p"] == 0.5 and rows[-1]["action"] == "restore_all"
    with pytest.raises(ValueError, match="unknown fault"):
        faults.apply(net, "explode", "p1.t1.1")
    with pytest.raises(TypeError):
        faults.switch_down(net, "p1.t0.1--p1.t1.1")
    with pytest.raises(ValueError):
        faults.set_loss(net, "p1.t0.1->p1.t1.1", 0.1, direction="up")


def test_flap_schedules_down_up_cycles() -> None:
    a = Stream(0, 2, [(0, 0)])
    sim, net, agents = setup({0: a})
    faults.flap(sim, net, "p0.t0.0--p0.t1.0", us(5), us(2), us(3), cycles=3)
    sim.run(until_ps=us(30))
    assert [r.action for r in net.fault_log] == ["link_down", "link_up"] * 3
    assert [r.time_ps for r in net.fault_log] == [us(x) for x in (5, 7, 10, 12, 15, 17)]
    assert net.links["p0.t0.0--p0.t1.0"].is_up and len(agents[2].received) > 0
