"""PFC (issue 15): PAUSE timing to the picosecond, the lossless class never dropping for
buffer space, head-of-line blocking, the stuck host and the watchdog, and PFC off costing
nothing. Driven with plain traffic sources (no transport) where timing is checked, and with
RC where the lossless promise is."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc.packet import DATA, PAUSE_BYTES, Packet, data_bytes
from mrc.sim.engine import Simulator
from mrc.sim.fabric import build_network
from mrc.sim.network import Network
from mrc.sim.pfc import PauseFrame, PfcIngress
from mrc.sim.pfc_nic import PfcNicPort
from mrc.sim.pfc_ports import PfcPort
from mrc.sim.ports import OutPort
from mrc.stack.stack import SimStack
from topology.paths import address_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec, preset

MTU = 4096
PRIO = 3
#: 1 plane: h0, h1 under t0.0; h2, h3 under t0.1; one T1; 100 Gb/s, 500 ns links
SPEC = FabricSpec(planes=1, hosts=4, hosts_per_t0=2, t1_per_plane=1, name="pfc")
DELAY = SPEC.link_delay_ps
PAUSE_WIRE = (PAUSE_BYTES + ETHERNET_OVERHEAD_BYTES) * 80  # 84 bytes at 80 ps/byte
DATA_WIRE = (data_bytes(MTU) + ETHERNET_OVERHEAD_BYTES) * 80
QUANTUM = SPEC.pause_quantum_ps


class Source:
    """A traffic source: full-MTU DATA of one priority to one host, ``limit`` packets."""

    def __init__(self, src: int, dst: int, prio: int = PRIO, limit: int = 10_000) -> None:
        self.src, self.dst, self.prio, self.limit = src, dst, prio, limit
        self.sent = 0
        self.received: list[tuple[int, Packet]] = []

    def pull(self, now: int, plane: int) -> Packet | None:
        if self.sent >= self.limit:
            return None
        self.sent += 1
        return Packet(DATA, self.src, self.dst, 1, self.sent, length=MTU, plane=plane,
                      prio=self.prio, da=address_for(SPEC, self.src, self.dst, plane, 0))

    def on_receive(self, now: int, pkt: Packet) -> None:
        self.received.append((now, pkt))


def fabric(spec: FabricSpec = SPEC, **sources: Source) -> tuple[Simulator, Network,
                                                               dict[int, Source]]:
    sim = Simulator(1)
    net = build_network(sim, spec)
    agents = {h: sources.get(f"h{h}", Source(h, h, limit=0)) for h in range(spec.hosts)}
    for h, agent in agents.items():
        net.hosts[h].attach(agent)
    net.kick_all()
    return sim, net, agents


def departures(net: Network, port: str) -> list[int]:
    """Start times of the DATA packets a host-facing port sends (from their arrivals)."""
    starts: list[int] = []
    net.tap = lambda now, name, pkt: starts.append(now - DATA_WIRE - DELAY) \
        if name == port and pkt.kind == DATA else None
    return starts


class _PauseSpy:
    """Stands in as the port a PAUSE frame is about: records, then hands it on."""

    def __init__(self, port: PfcPort) -> None:
        self.port = port
        self.seen: list[tuple[int, int]] = []

    def on_pause_frame(self, frame: PauseFrame) -> None:
        self.seen.append((self.port.sim.now, frame.quanta))
        self.port.on_pause_frame(frame)


def record_pauses(port: PfcPort) -> list[tuple[int, int]]:
    """(arrival time, quanta) of every PAUSE frame that reaches ``port``: the frames come
    over the reverse direction, whose arrival hands them to its ``reverse``."""
    spy = _PauseSpy(port)
    port.reverse.reverse = spy  # type: ignore[attr-defined]
    return spy.seen


# ====================================================================== timing
def test_pause_stops_the_priority_one_frame_and_one_propagation_later_until_expiry() -> None:
    """An XOFF sent by h0's NIC at T (its wire idle) serializes (84 bytes) and propagates:
    the T0's port to h0 stops starting lossless packets exactly then, and starts again
    exactly ``quanta`` x 512 bit times later (it expires: nobody refreshes it)."""
    sim, net, _ = fabric(h2=Source(2, 0), h3=Source(3, 0))  # 2-to-1: a backlog toward h0
    down = net.ports["p0.t0.0->h0.p0"]
    nic = net.ports["h0.p0->p0.t0.0"]
    assert isinstance(down, PfcPort) and isinstance(nic, PfcNicPort)
    starts = departures(net, down.name)
    arrivals = record_pauses(down)
    t, quanta = 40_000_000, 100
    sim.at(t, lambda _: nic.send_pause(PauseFrame(PRIO, quanta)))
    sim.run(120_000_000)
    stop = t + PAUSE_WIRE + DELAY
    assert arrivals == [(stop, quanta)]
    resume = stop + quanta * QUANTUM
    assert QUANTUM == 5_120 and down.paused_ps == quanta * QUANTUM
    assert max(s for s in starts if s <= stop) > stop - DATA_WIRE  # it was busy: the frame
    assert not [s for s in starts if stop < s < resume]  # in flight completed, none after
    assert min(s for s in starts if s >= resume) == resume
    assert down.pfc_counters()[:2] == (0, 1) and nic.pfc_counters()[0] == 1


def test_xon_resumes_one_frame_and_one_propagation_after_it_is_sent() -> None:
    sim, net, _ = fabric(h2=Source(2, 0), h3=Source(3, 0))
    down = net.ports["p0.t0.0->h0.p0"]
    nic = net.ports["h0.p0->p0.t0.0"]
    starts = departures(net, down.name)
    t_off, t_on = 40_000_000, 55_000_000
    sim.at(t_off, lambda _: nic.send_pause(PauseFrame(PRIO, 0xFFFF)))  # type: ignore[attr-defined]
    sim.at(t_on, lambda _: nic.send_pause(PauseFrame(PRIO, 0)))  # type: ignore[attr-defined]
    sim.run(80_000_000)
    stop, resume = t_off + PAUSE_WIRE + DELAY, t_on + PAUSE_WIRE + DELAY
    assert not [s for s in starts if stop < s < resume]
    assert min(s for s in starts if s >= resume) == resume
    assert not down.paused and down.paused_ps == resume - stop


def test_pause_waits_only_for_the_frame_on_the_wire() -> None:
    """h0 is sending (its NIC port busy): the PAUSE goes right after the frame in flight,
    ahead of everything queued behind it."""
    sim, net, _ = fabric(h0=Source(0, 2, prio=0), h2=Source(2, 0), h3=Source(3, 0))
    down = net.ports["p0.t0.0->h0.p0"]
    nic = net.ports["h0.p0->p0.t0.0"]
    arrivals = record_pauses(down)  # type: ignore[arg-type]
    t = 40_000_000 + 1_234  # mid-frame
    busy_until: list[int] = []

    def pause(_: object) -> None:
        busy_until.append(nic.busy_until)
        nic.send_pause(PauseFrame(PRIO, 50))  # type: ignore[attr-defined]

    sim.at(t, pause)
    sim.run(45_000_000)
    (end,) = busy_until
    assert end > t  # it was mid-frame
    assert arrivals == [(end + PAUSE_WIRE + DELAY, 50)]


def test_a_stuck_host_pauses_its_t0_exactly_and_resumes_it_exactly() -> None:
    """Ingress accounting at the host: the lossless packet that lifts h0's receive buffer
    above XOFF arrives at t0; the XOFF leaves then (h0's wire is idle) and stops the T0's
    port one PAUSE frame and one propagation later. When h0 drains again at t1 it sends XON
    and the port resumes one frame and one propagation after that."""
    sim, net, _ = fabric(h2=Source(2, 0, limit=400))
    down = net.ports["p0.t0.0->h0.p0"]
    assert isinstance(down, PfcPort)
    arrivals_at_h0: list[int] = []
    net.tap = lambda now, name, pkt: arrivals_at_h0.append(now) \
        if name == down.name and pkt.kind == DATA else None
    pauses = record_pauses(down)
    down.set_rx_stall(True)
    sim.run(30_000_000)
    xoff = SPEC.pfc_xoff_bytes
    crossing = next(i for i in range(1, 400) if i * data_bytes(MTU) > xoff)  # type: ignore[operator]
    t0 = arrivals_at_h0[crossing - 1]
    assert pauses[0] == (t0 + PAUSE_WIRE + DELAY, SPEC.pfc_quanta)
    assert down.paused and down.pause_since == t0 + PAUSE_WIRE + DELAY
    held = len(down.held)
    assert held * data_bytes(MTU) <= xoff + SPEC.pfc_headroom_bytes  # type: ignore[operator]
    t1 = 30_000_000
    starts = departures(net, down.name)
    delivered = down.set_rx_stall(False)
    assert delivered == held and not down.held
    sim.run(60_000_000)
    assert pauses[-1] == (t1 + PAUSE_WIRE + DELAY, 0)
    assert min(starts) == t1 + PAUSE_WIRE + DELAY  # its backlog restarts at that picosecond
    assert net.totals()["drops"] == 0


# ====================================================================== lossless
def _incast(spec: FabricSpec, limit: int = 800) -> tuple[Network, dict[int, Source]]:
    senders = {f"h{h}": Source(h, 0, limit=limit) for h in range(1, spec.hosts)}
    sim, net, agents = fabric(spec, **senders)
    sim.run(2_000_000_000)
    return net, agents


def test_minimum_headroom_holds_a_line_rate_incast_and_less_would_not() -> None:
    """Sources that ignore congestion (no CC at all) blast a 3-to-1 incast through the T1 and
    the T0: with the least headroom validation accepts, no lossless packet is ever dropped
    and the ingress counters come close to their limit (the headroom is used, not slack);
    with a quarter of it the same traffic overflows (the counter is live)."""
    spec = SPEC.with_(pfc_xoff_bytes=20_000, pfc_xon_bytes=10_000)
    net, agents = _incast(spec)
    totals = net.totals()
    assert totals["drops"] == 0 and totals["pause_frames_sent"] > 10
    assert len(agents[0].received) == 3 * 800  # everything arrived
    limit = spec.pfc_xoff_bytes + spec.pfc_headroom_bytes  # type: ignore[operator]
    peaks = [p.ingress.peak for p in net.ports.values()]  # type: ignore[attr-defined]
    assert max(peaks) <= limit and max(peaks) > spec.pfc_xoff_bytes + 3 * data_bytes(MTU)  # type: ignore[operator]

    senders = {f"h{h}": Source(h, 0, limit=800) for h in range(1, spec.hosts)}
    sim, net, agents = fabric(spec, **senders)
    for port in net.ports.values():
        acct: PfcIngress = port.ingress  # type: ignore[attr-defined]
        acct.limit = acct.xoff + spec.pfc_headroom_bytes // 4  # type: ignore[operator]
    sim.run(2_000_000_000)
    assert net.totals()["drop_lossless_overflow"] > 0


def _rc_run(spec: FabricSpec, flows: list[tuple[int, int, int]], params: dict | None = None,
            until_us: int = 20_000) -> SimStack:
    stack = SimStack(spec, seed=1, transport_name="rc")
    done: list[bool] = []
    conns = [stack.open("rc", s, d, dict(params or {})) for s, d, _ in flows]
    for conn, (_, _, size) in zip(conns, flows, strict=True):
        conn.write(0, size, lambda now, ok: done.append(ok))
    sim = stack.net.sim

    def check(_: object) -> None:
        if len(done) == len(flows):
            sim.stop()
        else:
            sim.at(sim.now + 10_000_000, check)

    sim.at(10_000_000, check)
    sim.run(until_us * 1_000_000)
    assert done == [True] * len(flows), (len(done), len(flows))
    return stack


def test_rc_incast_8_to_1_loses_nothing_and_completes() -> None:
    spec = preset("lab-8plane")
    stack = _rc_run(spec, [(h, 0, 2 << 20) for h in range(4, 12)])
    totals = stack.totals()
    assert totals["dropped_packets"] == 0 and totals["retransmitted_packets"] == 0
    assert totals["lossless_overflow_drops"] == 0
    assert totals["pause_frames_sent"] > 0  # PFC did work: the first burst was paused
    assert sum(qp.stats.timeouts for c in stack.connections for qp in c.qps()) == 0


def test_rc_permutation_8_planes_x_64_hosts_loses_nothing_and_completes() -> None:
    from mrc.labs.run.workloads import derangement

    spec = FabricSpec(planes=8, hosts=64, hosts_per_t0=8, t1_per_plane=8, name="8x64")
    peers = derangement(list(range(64)), 1)
    stack = _rc_run(spec, [(h, peers[h], 1 << 20) for h in range(64)])
    totals = stack.totals()
    assert totals["dropped_packets"] == 0 and totals["lossless_overflow_drops"] == 0
    assert totals["retransmitted_packets"] == 0


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(flows=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7),
                                st.integers(1, 64)), min_size=1, max_size=6),
       xoff_pkts=st.integers(2, 40), cc=st.sampled_from(["dcqcn", "window"]))
def test_lossless_fabric_never_drops_and_rc_never_times_out(
        flows: list[tuple[int, int, int]], xoff_pkts: int, cc: str) -> None:
    """Property: on a PFC fabric, any RC traffic (any mix of incast and crossing flows, any
    XOFF), with either congestion control: nothing is dropped, nothing resent, no QP waits
    for its local ACK timeout, and every message completes."""
    flows = [(s, d, n * 4096 * 8) for s, d, n in flows if s != d]
    if not flows:
        return
    xoff = xoff_pkts * data_bytes(MTU)
    spec = preset("lab-small", pfc_xoff_bytes=xoff, pfc_xon_bytes=xoff // 2)
    stack = _rc_run(spec, flows, {"cc": cc})
    totals = stack.totals()
    assert totals["dropped_packets"] == 0 and totals["retransmitted_packets"] == 0
    qps = [qp for c in stack.connections for qp in c.qps()]
    assert sum(qp.stats.timeouts for qp in qps) == 0


# ====================================================================== pathologies
def test_head_of_line_blocking_pauses_a_lossless_victim_but_not_a_best_effort_one() -> None:
    """h0 is stuck; h3 -> h0 is lossless. Its bytes pile up at the T0 and pause the T1's port
    toward it, which h2 -> h1 also uses: a lossless victim stops though h1 is idle, a
    best-effort one keeps going. No code names the victim."""
    for prio, stalls in ((PRIO, True), (0, False)):
        sim, net, agents = fabric(h3=Source(3, 0), h2=Source(2, 1, prio=prio))
        net.ports["p0.t0.0->h0.p0"].set_rx_stall(True)  # type: ignore[attr-defined]
        sim.run(100_000_000)
        before = len(agents[1].received)
        sim.run(200_000_000)
        moved = len(agents[1].received) - before
        assert net.ports["p0.t1.0->p0.t0.0"].paused  # type: ignore[attr-defined]
        if stalls:
            assert moved == 0
        else:
            assert moved > 0.9 * 100_000_000 / DATA_WIRE  # ~line rate for 100 us
        assert net.totals()["drops"] == 0


@pytest.mark.parametrize("watchdog_us", [0.0, 20.0])
def test_watchdog_breaks_a_storm_only_when_on(watchdog_us: float) -> None:
    spec = SPEC.with_(pfc_watchdog_us=watchdog_us, pfc_watchdog_restore_us=watchdog_us or 0.0)
    sim, net, agents = fabric(spec, h3=Source(3, 0), h2=Source(2, 1))
    down = net.ports["p0.t0.0->h0.p0"]
    down.set_rx_stall(True)  # type: ignore[attr-defined]
    sim.run(150_000_000)
    totals = net.totals()
    before = len(agents[1].received)
    sim.run(350_000_000)
    moved = len(agents[1].received) - before  # the victim h2 -> h1, 150..350 us
    if not watchdog_us:
        assert totals["watchdog_storms"] == 0 and down.paused  # type: ignore[attr-defined]
        assert totals["drops"] == 0 and moved == 0  # the storm holds it for good
        return
    # stormed ports drop the stuck host's lossless traffic and ignore its PAUSE, the pause
    # tree collapses and the victim moves again (h0 keeps refreshing XOFF, so each port is
    # re-paused and re-stormed in cycles, as SONiC's watchdog does)
    assert down.storms >= 1 and totals["drop_pfc_watchdog"] > 0  # type: ignore[attr-defined]
    assert moved > 20


def test_watchdog_declares_the_storm_exactly_its_detection_time_after_the_pause() -> None:
    spec = SPEC.with_(pfc_watchdog_us=20.0, pfc_watchdog_restore_us=20.0)
    sim, net, _ = fabric(spec, h3=Source(3, 0))
    down = net.ports["p0.t0.0->h0.p0"]
    down.set_rx_stall(True)  # type: ignore[attr-defined]
    storms: list[int] = []
    net.observer = lambda now, where, pkt, event: storms.append(now) \
        if event == "pfc_watchdog" and where == down.name else None
    while not storms:
        since = down.pause_since if down.paused else None  # type: ignore[attr-defined]
        sim.run(sim.now + 1_000_000)
    assert since is not None and storms[0] == since + 20_000_000


def test_pfc_off_builds_the_plain_ports() -> None:
    net = build_network(Simulator(), SPEC.with_(pfc=False))
    assert all(type(p) in (OutPort,) or type(p).__name__ == "NicPort"
               for p in net.ports.values())
    assert "pause_frames_sent" not in net.totals()
