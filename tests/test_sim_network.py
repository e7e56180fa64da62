"""Simulated network: forwarding by uSID, exact timing, queues (trim, ECN, drop), hooks,
determinism, and the lazy-departure port checked against a plain reference queue."""

from __future__ import annotations

import random
import sys
from collections import deque
from fractions import Fraction
from math import ceil

import pytest

from mrc.packet import ACK, DATA, ECN_CE, ECN_ECT0, Packet, data_bytes
from mrc.sim.engine import Simulator
from mrc.sim.fabric import FabricTooLargeError, build_network, link_count
from mrc.sim.fifo import Fifo
from mrc.sim.network import Network
from mrc.sim.ports import OutPort
from topology import tables, usid
from topology.paths import address_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec, preset

MTU = 4096
FULL = data_bytes(MTU)


class Inbox:
    """HostAgent that sends what it is given (per plane) and records what arrives."""

    def __init__(self) -> None:
        self.outbox: dict[int, deque[Packet]] = {}
        self.received: list[tuple[int, Packet]] = []

    def queue(self, pkt: Packet) -> None:
        self.outbox.setdefault(pkt.plane, deque()).append(pkt)

    def pull(self, now: int, plane: int) -> Packet | None:
        box = self.outbox.get(plane)
        return box.popleft() if box else None

    def on_receive(self, now: int, pkt: Packet) -> None:
        self.received.append((now, pkt))


class Blast:
    """HostAgent that always has a full-MTU packet for one destination on one path."""

    def __init__(self, spec: FabricSpec, src: int, dst: int, plane: int = 0, t1: int = 0,
                 limit: int | None = None) -> None:
        self.spec, self.src, self.dst, self.plane, self.t1 = spec, src, dst, plane, t1
        self.sent = 0
        self.limit = limit
        self.received: list[tuple[int, Packet]] = []

    def pull(self, now: int, plane: int) -> Packet | None:
        if plane != self.plane or (self.limit is not None and self.sent >= self.limit):
            return None
        self.sent += 1
        return data(self.spec, self.src, self.dst, plane, self.t1, psn=self.sent)

    def on_receive(self, now: int, pkt: Packet) -> None:
        self.received.append((now, pkt))


def data(spec: FabricSpec, src: int, dst: int, plane: int = 0, t1: int = 0, *, psn: int = 0,
         length: int = MTU) -> Packet:
    return Packet(DATA, src, dst, 1, psn, length=length, plane=plane,
                  da=address_for(spec, src, dst, plane, t1))


def build(spec: FabricSpec, seed: int = 1) -> tuple[Simulator, Network]:
    sim = Simulator(seed)
    return sim, build_network(sim, spec)


SMALL = FabricSpec(planes=2, hosts=8, hosts_per_t0=2, t1_per_plane=2, name="small")


# ------------------------------------------------------------------ construction
def test_build_counts_names_and_lookup() -> None:
    sim, net = build(SMALL)
    assert len(net.links) == link_count(SMALL) == 2 * (8 + 4 * 2)
    assert len(net.ports) == 2 * len(net.links)
    assert len(net.switches) == 2 * (4 + 2)
    assert [p.plane for p in net.hosts[5].ports] == [0, 1]
    assert net.element("h5").index == 5
    assert net.element("p1.t0.2").name == "p1.t0.2"
    assert net.element("h5.p1") is net.hosts[5].ports[1]
    assert net.element("h5.p1--p1.t0.2").name == "h5.p1--p1.t0.2"
    assert net.element("p1.t1.0--p1.t0.3") is net.links["p1.t0.3--p1.t1.0"]  # either end first
    assert net.element("h5.p1.uplink") is net.links["h5.p1--p1.t0.2"]
    assert net.element("p0.t0.1->p0.t1.1").dst.name == "p0.t1.1"
    with pytest.raises(ValueError, match="h99"):
        net.element("h99")
    rows = net.port_stats()
    assert len(rows) == len(net.ports) and rows[0]["tx_packets"] == 0
    frame = net.port_stats_frame()
    assert len(frame) == len(net.ports) and "drop_link_down" in frame.columns


def test_fairwater_is_refused_with_the_reason() -> None:
    with pytest.raises(FabricTooLargeError, match="2,097,152 links"):
        build_network(Simulator(), preset("fairwater"))


# ------------------------------------------------------------------ forwarding
def test_packets_follow_exactly_the_hops_their_usids_name() -> None:
    sim, net = build(SMALL)
    crossed: dict[int, list[tuple[str, int]]] = {}
    net.tap = lambda now, port, pkt: crossed.setdefault(pkt.qpn, []).append((port, pkt.da))
    agents = [Inbox() for _ in net.hosts]
    for host, agent in zip(net.hosts, agents, strict=True):
        host.attach(agent)
    expected = {}
    qpn = 0
    for src in range(SMALL.hosts):
        for dst in range(SMALL.hosts):
            if src == dst:
                continue
            for plane in range(SMALL.planes):
                for t1 in range(SMALL.t1):
                    qpn += 1
                    pkt = data(SMALL, src, dst, plane, t1, length=64)
                    pkt.qpn = qpn
                    expected[qpn] = (tables.walk(SMALL, pkt.da, src), pkt.da, dst)
                    agents[src].queue(pkt)
    net.kick_all()
    sim.run()
    got = {pkt.qpn: (h, pkt) for h, agent in enumerate(agents) for _, pkt in agent.received}
    assert len(got) == len(expected)
    for qpn, (walk, address, dst) in expected.items():
        host, pkt = got[qpn]
        assert host == dst == walk.host
        hops = crossed[qpn]
        assert [net.ports[port].link.name for port, _ in hops] == list(walk.links)
        # The carrier as seen on each wire: consumed exactly as the plan says.
        assert usid.carrier(hops[0][1]) == usid.carrier(address)
        assert usid.carrier(hops[-1][1]) == []
        assert pkt.da == walk.address
    totals = net.totals()
    assert totals["drops"] == 0 and totals["delivered"] == sum(len(h) for h in crossed.values())


def test_switch_receive_matches_reference_tables() -> None:
    sim, net = build(SMALL)
    for sw in net.switches.values():
        table = tables.switch_table(SMALL, sw.plane, sw.tier, sw.index)
        for value in [*range(0x1000, 0x1006), *range(0x2000, 0x2004), *range(0xE000, 0xE003),
                      0x0000, 0x3000]:
            for after in (0x2001, 0x1002, 0xE001):
                address = usid.encode(sw.plane, [value, after]) if value else usid.encode(
                    sw.plane, [])
                port, rewritten = sw.route(address)
                decision = table.lookup(usid.active(address))
                while decision is not None and decision.action == tables.UN:
                    address = usid.shift(address)
                    decision = table.lookup(usid.active(address))
                if decision is None:
                    assert port is None
                    continue
                assert port is not None and port.link.name == decision.link
                assert rewritten == (usid.shift(address) if decision.shift else address)


def test_forward_rewrites_the_address_as_usid_shift_does() -> None:
    """forward() rewrites the 128-bit address from its two 64-bit halves: the same address
    as usid.shift (route()) for every number of uSIDs consumed, whatever the later uSIDs."""
    sim, net = build(SMALL)
    rng = random.Random(7)
    for sw in net.switches.values():
        for after in (*sw._next, *sw._ua):
            for own in range(1, 5):
                values = [sw.usid] * own + [after]
                values += [rng.randint(1, 0xFFFF) for _ in range(usid.USIDS_PER_ADDRESS - len(values))]
                address = usid.encode(sw.plane, values)
                pkt = data(SMALL, 0, 5)
                pkt.da = address
                port = sw.forward(pkt)
                expected_port, rewritten = sw.route(address)
                assert port is expected_port is not None
                assert pkt.da == rewritten


def test_no_route_and_foreign_block_are_dropped_and_counted() -> None:
    sim, net = build(SMALL)
    agent = Inbox()
    net.hosts[0].attach(agent)
    bad = data(SMALL, 0, 5)
    bad.da = usid.encode(0, [usid.t0_usid(0), usid.t0_usid(3)])  # a T0 cannot reach a T0
    foreign = data(SMALL, 0, 5)
    foreign.da = usid.encode(1, [usid.t0_usid(0), usid.t1_usid(0)])  # plane 1 block on plane 0
    agent.queue(bad)
    agent.queue(foreign)
    net.kick_all()
    sim.run()
    assert net.switches["p0.t0.0"].drops == {"no_route": 2}
    assert net.totals()["drop_no_route"] == 2


def test_misdelivered_packet_is_dropped_by_the_host() -> None:
    sim, net = build(SMALL)
    agents = [Inbox() for _ in net.hosts]
    for host, agent in zip(net.hosts, agents, strict=True):
        host.attach(agent)
    pkt = data(SMALL, 0, 5)
    pkt.dst = 4  # inner destination disagrees with the path
    agents[0].queue(pkt)
    net.kick_all()
    sim.run()
    assert net.hosts[5].drops == {"misdelivered": 1} and not agents[5].received


# ------------------------------------------------------------------ timing
@pytest.mark.parametrize("gbps", [100.0, 40.0, 30.0])
def test_delivery_time_is_exact_to_the_picosecond(gbps: float) -> None:
    spec = FabricSpec(planes=1, hosts=4, hosts_per_t0=2, t1_per_plane=2, link_gbps=gbps,
                      link_delay_ns=123.457, switch_latency_ns=77.001)
    sim, net = build(spec)
    agents = [Inbox() for _ in net.hosts]
    for host, agent in zip(net.hosts, agents, strict=True):
        host.attach(agent)
    far = data(spec, 0, 3, 0, 1, length=1000)
    near = data(spec, 0, 1, length=333)
    agents[0].queue(far)
    net.kick_all()
    sim.run()
    wire = far.size + ETHERNET_OVERHEAD_BYTES
    ser = ceil(Fraction(wire * 8 * 10**12, int(gbps * 1e9)))
    assert agents[3].received[0][0] == 4 * ser + 4 * 123_457 + 3 * 77_001
    start = sim.now
    agents[0].queue(near)
    net.hosts[0].kick(0)
    sim.run()
    ser = ceil(Fraction((near.size + ETHERNET_OVERHEAD_BYTES) * 8 * 10**12, int(gbps * 1e9)))
    assert agents[1].received[0][0] - start == 2 * ser + 2 * 123_457 + 77_001


def test_nic_port_paces_at_line_rate_and_control_goes_first() -> None:
    spec = FabricSpec(planes=1, hosts=2, hosts_per_t0=2, t1_per_plane=1, link_delay_ns=0,
                      switch_latency_ns=0)
    sim, net = build(spec)
    src, dst = Inbox(), Inbox()
    net.hosts[0].attach(src)
    net.hosts[1].attach(dst)
    for i in range(3):
        src.queue(data(spec, 0, 1, psn=i))
    net.kick_all()  # packet 0 starts at once
    ack = Packet(ACK, 0, 1, 1, 7, da=address_for(spec, 0, 1, 0, 0), plane=0)
    net.hosts[0].send_control(ack)  # jumps ahead of data packets 1 and 2
    sim.run()
    order = [(pkt.kind, pkt.psn) for _, pkt in dst.received]
    assert order == [(DATA, 0), (ACK, 7), (DATA, 1), (DATA, 2)]
    ser = FULL + ETHERNET_OVERHEAD_BYTES  # 80 ps per byte at 100 Gb/s
    times = [t for t, _ in dst.received]
    assert times[0] == 2 * ser * 80
    assert times[2] - times[1] == ser * 80  # back to back at line rate on the downlink


# ------------------------------------------------------------------ queues
def incast(spec: FabricSpec, senders: int, packets: int, seed: int = 1):
    """``senders`` hosts under T0 0 and 1 blast ``packets`` each at the last host."""
    sim, net = build(spec, seed)
    sink = Inbox()
    dst = spec.hosts - 1
    net.hosts[dst].attach(sink)
    blasters = []
    for src in range(senders):
        blaster = Blast(spec, src, dst, limit=packets)
        net.hosts[src].attach(blaster)
        blasters.append(blaster)
    return sim, net, sink, blasters


def test_two_to_one_trims_and_trimmed_headers_overtake_queued_data() -> None:
    spec = FabricSpec(planes=1, hosts=3, hosts_per_t0=3, t1_per_plane=1,
                      buffer_bytes=8 * FULL, header_queue_bytes=16 * 128)
    sim, net, sink, _ = incast(spec, senders=2, packets=60)
    admitted: dict[tuple[int, int], int] = {}  # (src, psn) -> time the T0 took it
    net.tap = lambda now, port, pkt: (
        admitted.setdefault((pkt.src, pkt.psn), now) if port.startswith("h") else None)
    net.kick_all()
    sim.run()
    port = net.ports["p0.t0.0->h2.p0"]
    assert port.trims > 0 and port.drops == {}
    assert port.peak_qbytes <= spec.buffer_bytes
    trimmed = [(t, pkt) for t, pkt in sink.received if pkt.trimmed]
    assert len(trimmed) == port.trims and all(p.size == spec.trim_size_bytes for _, p in trimmed)
    assert len(sink.received) == 120  # nothing lost: every packet arrives, whole or trimmed
    recv = {(pkt.src, pkt.psn): t for t, pkt in sink.received}
    overtakes = [(x, y) for x in recv for y in recv
                 if any(p.src == x[0] and p.psn == x[1] for _, p in trimmed)
                 and admitted[y] < admitted[x] and recv[x] < recv[y]]
    assert overtakes, "a trimmed header must overtake data that was queued before it"
    # A trimmed header waits at most for the packet on the wire plus headers ahead of it.
    wire = (FULL + ETHERNET_OVERHEAD_BYTES) * 80
    for t, pkt in trimmed:
        assert t - admitted[(pkt.src, pkt.psn)] < wire + 16 * 200 * 80 + spec.link_delay_ps


def test_ecn_marks_only_above_threshold() -> None:
    spec = FabricSpec(planes=1, hosts=3, hosts_per_t0=3, t1_per_plane=1,
                      ecn_threshold_bytes=3 * FULL)
    sim, net, sink, _ = incast(spec, senders=2, packets=40)
    port = net.ports["p0.t0.0->h2.p0"]
    seen: list[int] = []
    net.observer = lambda now, where, pkt, event: (
        seen.append(net.ports[where].qbytes) if event == "ecn" else None)
    net.kick_all()
    sim.run()
    marked = [pkt for _, pkt in sink.received if pkt.ecn == ECN_CE]
    assert port.ecn_marks == len(marked) == len(seen) > 0
    assert all(q > spec.ecn_threshold_bytes for q in seen)
    assert all(pkt.ecn == ECN_ECT0 for _, pkt in sink.received[:4])  # the queue was short
    assert port.trims == 0


def test_drop_when_trimming_is_off_and_when_header_queue_is_full() -> None:
    spec = FabricSpec(planes=1, hosts=3, hosts_per_t0=3, t1_per_plane=1,
                      buffer_bytes=4 * FULL, trimming=False)
    sim, net, sink, _ = incast(spec, senders=2, packets=50)
    net.kick_all()
    sim.run()
    port = net.ports["p0.t0.0->h2.p0"]
    assert port.trims == 0 and port.drops["buffer"] > 0
    assert len(sink.received) == 100 - port.drops["buffer"]
    assert not any(pkt.trimmed for _, pkt in sink.received)

    # Four synchronized senders: trimmed headers arrive together and overflow a one-header queue.
    spec = FabricSpec(planes=1, hosts=5, hosts_per_t0=5, t1_per_plane=1,
                      buffer_bytes=4 * FULL, header_queue_bytes=128)
    sim, net, sink, _ = incast(spec, senders=4, packets=30)
    net.kick_all()
    sim.run()
    port = net.ports["p0.t0.0->h4.p0"]
    assert port.trims > 0 and port.drops["header_queue"] > 0
    assert port.peak_hqbytes <= 128
    assert len(sink.received) == 120 - port.drops["header_queue"]


def test_observer_sees_trims_and_drops() -> None:
    spec = FabricSpec(planes=1, hosts=5, hosts_per_t0=5, t1_per_plane=1,
                      buffer_bytes=4 * FULL, header_queue_bytes=128)
    sim, net, sink, _ = incast(spec, senders=4, packets=30)
    events: dict[str, int] = {}
    net.observer = lambda now, where, pkt, event: events.__setitem__(
        event, events.get(event, 0) + 1)
    net.kick_all()
    sim.run()
    totals = net.totals()
    assert events.get("trim") == totals["trims"] > 0
    assert events.get("header_queue") == totals["drop_header_queue"] > 0


# ------------------------------------------------------------------ lazy departures
def reference_port(arrivals: list[tuple[int, int, int, int, int]], spec: FabricSpec,
                   ) -> tuple[dict[int, tuple[int, bool, bool]], list[tuple[int, int, int, int]]]:
    """A plain strict-priority output port: before each arrival, every departure whose turn
    came (at or before that time) happens. Returns idx -> (far-end arrival, trimmed, CE), and
    (admitted, started, queue, bytes) for every packet that waited (queue 0 data, 1 header)."""
    q: deque[tuple[int, int, bool, bool]] = deque()
    hq: deque[tuple[int, int, bool, bool]] = deque()
    qb = hqb = 0
    free = 0
    out: dict[int, tuple[int, bool, bool]] = {}
    admitted: dict[int, int] = {}
    waits: list[tuple[int, int, int, int]] = []

    def ser(size: int) -> int:
        return (size + ETHERNET_OVERHEAD_BYTES) * 80

    def depart(now: int) -> None:
        nonlocal free, qb, hqb
        while free <= now and (hq or q):
            which = 1 if hq else 0
            if hq:
                idx, size, trimmed, ce = hq.popleft()
                hqb -= size
            else:
                idx, size, trimmed, ce = q.popleft()
                qb -= size
            waits.append((admitted[idx], free, which, size))
            free += ser(size)
            out[idx] = (free + spec.link_delay_ps, trimmed, ce)

    for t, idx, kind, size, _ in arrivals:
        depart(t)
        if free <= t and not q and not hq:
            free = t + ser(size)
            out[idx] = (free + spec.link_delay_ps, False, False)
            continue
        admitted[idx] = t
        if kind == DATA and qb + size <= spec.buffer_bytes:
            q.append((idx, size, False, qb > spec.ecn_threshold_bytes))
            qb += size
            continue
        trimmed = kind == DATA
        size = spec.trim_size_bytes if trimmed else size
        if hqb + size <= spec.header_queue_bytes:
            hq.append((idx, size, trimmed, False))
            hqb += size
    depart(1 << 62)
    return out, waits


@pytest.mark.parametrize("seed, grid", [(1, False), (2, False), (3, False), (4, True),
                                        (5, True)])
def test_lazy_departures_match_a_plain_queue(seed: int, grid: bool) -> None:
    spec = FabricSpec(planes=1, hosts=2, hosts_per_t0=2, t1_per_plane=1,
                      buffer_bytes=6 * FULL, header_queue_bytes=3 * 136,
                      ecn_threshold_bytes=2 * FULL, link_delay_ns=150)
    sim, net = build(spec, seed)
    sink = Inbox()
    net.hosts[1].attach(sink)
    port: OutPort = net.ports["p0.t0.0->h1.p0"]
    rnd = random.Random(seed)
    arrivals = []
    t = 0
    for idx in range(600):
        roll = rnd.random()  # mostly busy, some simultaneous arrivals, some idle gaps
        if grid:  # full-size packets on the serialization grid: arrivals tie with departures
            t += (FULL + ETHERNET_OVERHEAD_BYTES) * 80 * rnd.choice([0, 0, 1, 1, 1, 2, 5])
            kind = DATA if rnd.random() < 0.85 else ACK
            size = FULL if kind == DATA else 136
            arrivals.append((t, idx, kind, size, 0))
            continue
        t += 0 if roll < 0.15 else 8_000_000 if roll > 0.97 else int(rnd.expovariate(1 / 120_000))
        kind = DATA if rnd.random() < 0.7 else ACK
        size = data_bytes(rnd.randrange(1, MTU + 1)) if kind == DATA else 136
        arrivals.append((t, idx, kind, size, 0))
    for t, idx, kind, size, _ in arrivals:
        pkt = Packet(kind, 0, 1, 1, idx, size=size, da=usid.encode(0, []))
        sim.at(t, port.send, pkt)
    backlog_checks: dict[int, tuple[int, int, int, int]] = {}
    for t in range(0, arrivals[-1][0], 97_000):  # reading occupancy never perturbs the run
        sim.at(t, lambda t: backlog_checks.__setitem__(t, port.backlog()), t)
    sim.run()
    expected, waits = reference_port(arrivals, spec)
    got = {pkt.psn: (now, pkt.trimmed, pkt.ecn == ECN_CE) for now, pkt in sink.received}
    assert got == expected
    assert port.ecn_marks > 0
    if not grid:
        assert port.trims > 0 and port.drops.get("header_queue", 0) > 0
    for t, (qb, qn, hqb, hqn) in backlog_checks.items():
        waiting = [(which, size) for admit, start, which, size in waits if admit <= t < start]
        assert qb == sum(size for which, size in waiting if which == 0)
        assert hqb == sum(size for which, size in waiting if which == 1)
        assert (qn, hqn) == (sum(w == 0 for w, _ in waiting), sum(w == 1 for w, _ in waiting))
    assert any(b[0] for b in backlog_checks.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_port_fifo_behaves_as_a_deque(seed: int) -> None:
    """The ports' queue (``Fifo``, a ring that grows) against ``collections.deque``, through
    every operation the ports use."""
    rnd = random.Random(seed)
    fifo, ref = Fifo(), deque[int]()
    for step in range(4000):
        roll = rnd.random()
        if roll < 0.45 or not ref:  # runs of appends grow the ring past its first sizes
            fifo.append(step)
            ref.append(step)
        elif roll < 0.5:
            fifo.appendleft(step)
            ref.appendleft(step)
        elif roll < 0.52:
            victim = rnd.choice(list(ref))
            fifo.remove(victim)
            ref.remove(victim)
        else:
            assert fifo.popleft() == ref.popleft()
        assert len(fifo) == len(ref) and bool(fifo) == bool(ref)
        if step % 97 == 0:
            assert list(fifo) == list(ref)
    while ref:
        assert fifo.popleft() == ref.popleft()
    assert not fifo and list(fifo) == []
    with pytest.raises(IndexError):
        fifo.popleft()
    with pytest.raises(ValueError):
        fifo.remove(-1)


@pytest.mark.parametrize("held", [0, 1, 3, 4, 5, 40])
def test_port_fifo_keeps_and_releases_exactly_its_references(held: int) -> None:
    """The queue owns one reference per item it holds, whether its ring is still its own
    first slots or has moved to a list, and gives every one back: popped, removed, or freed
    with the queue."""
    item = object()
    base = sys.getrefcount(item)
    fifo = Fifo()
    for _ in range(held + 2):
        fifo.append(item)
    fifo.popleft()
    fifo.remove(item)
    assert sys.getrefcount(item) == base + held
    fifo.appendleft(item)
    assert list(fifo) == [item] * (held + 1)
    assert sys.getrefcount(item) == base + held + 1
    del fifo
    assert sys.getrefcount(item) == base


# ------------------------------------------------------------------ determinism
class RandomBlast:
    """HostAgent: always a full packet to a random other host over a random T1."""

    def __init__(self, spec: FabricSpec, src: int, rnd: random.Random) -> None:
        self.spec, self.src, self.rnd = spec, src, rnd

    def pull(self, now: int, plane: int) -> Packet:
        dst = self.rnd.randrange(self.spec.hosts - 1)
        dst += dst >= self.src
        return data(self.spec, self.src, dst, plane, self.rnd.randrange(self.spec.t1))

    def on_receive(self, now: int, pkt: Packet) -> None:
        pass


def blast_run(seed: int) -> tuple[list[dict[str, object]], int]:
    spec = FabricSpec(planes=2, hosts=8, hosts_per_t0=2, t1_per_plane=2,
                      buffer_bytes=6 * FULL)
    sim, net = build(spec, seed)
    rnd = random.Random(seed)
    for host in net.hosts:
        host.attach(RandomBlast(spec, host.index, rnd))
    net.kick_all()
    sim.run(until_ps=60_000_000)
    return net.port_stats(), sim.events_processed


def test_same_seed_same_counters() -> None:
    first, events = blast_run(5)
    again, events_again = blast_run(5)
    assert first == again and events == events_again
    assert sum(int(r["trims"]) for r in first) > 0  # the scenario really congests
    other, _ = blast_run(6)
    assert other != first


def test_an_error_inside_a_hop_reaches_the_caller_of_run() -> None:
    """The compiled engine fires a port's arrival as a C method (``engine.Handler``): an
    exception raised inside it (here by the drop observer, on a packet no switch can route)
    must reach ``run``, in both builds, never be printed and swallowed."""
    sim, net = build(SMALL)

    def observer(now: int, where: str, pkt: Packet | None, reason: str) -> None:
        raise RuntimeError(f"{reason} at {where}")

    net.observer = observer
    bad = Packet(DATA, 0, 5, 1, 0, length=64, da=(usid.block(0) << 96) | (0xFFFF << 80))
    net.hosts[0].ports[0].send(bad)
    with pytest.raises(RuntimeError, match="no_route at p0.t0"):
        sim.run(10_000_000)
