"""MRC queue pair through the sans-IO API only: a tiny loopback driver moves packets between
two QPs with per-EV delay (FIFO per EV, reordering across EVs), drops and trims."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc.packet import (
    ACK,
    DATA,
    ECN_CE,
    FLAG_ECN_ECHO,
    FLAG_RETX,
    FLAG_TRIM,
    NACK,
    PROBE,
    PROBE_REPLY,
    PSN_MOD,
    SACK_BITS,
    Packet,
)
from mrc.stack.evset import build_ev_set, paths_of, reply_paths
from mrc.transport.base import (
    ASSUMED_BAD,
    DENIED,
    EVENT_EV_STATE,
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
    EVENT_SEND_COMPLETED,
    GOOD,
    PathChoice,
    TransportEvent,
)
from mrc.transport.mrc import MrcConfig, MrcQueuePair
from mrc.transport.mrc.config import CcConfig
from topology import usid
from topology.paths import ev_address
from topology.spec import FabricSpec

US = 1_000_000
MTU = 1024
PLANES = 2
T1S = 4

Fate = Callable[[int, Packet], str | None]  # -> None (deliver), "drop", "trim" or "dup"


def make_evs(count: int = 8) -> list[PathChoice]:
    """Synthetic EVs: plane k % PLANES, T1 (k // PLANES) % T1S; address = the EV (the loop
    routes by EV, the QP only copies it into pkt.da)."""
    out = []
    for k in range(count):
        plane, j = k % PLANES, k // PLANES
        ev = usid.make_ev(plane, j % T1S, j // T1S)
        out.append(PathChoice(ev, plane, j % T1S, 0xFC00 << 112 | ev))
    return out


def spread_key(ev: int) -> int:
    """An EV's fields as one number with the T1 lowest (the per-EV delays of these tests
    spread the EVs of each plane over different delays)."""
    return (usid.ev_instance(ev) << 24) | (usid.ev_plane(ev) << 16) | usid.ev_t1(ev)


def config(**kw) -> MrcConfig:
    base = dict(ev_timeout_ps=20 * US, timeout=4, probe_interval_ps=5 * US,
                probes_to_reintegrate=3, retry_exp_cnt=25, loss_grace_ps=1 * US,
                ev_min_active=0,
                cc=CcConfig(algorithm="fixed", fixed_window_bytes=32 * MTU))
    base.update(kw)
    return MrcConfig(**base)


class Loop:
    """Two QPs joined by per-EV FIFO paths. Each NIC port serializes one DATA per ``ser_ps``
    and pulls when idle; control packets go at once. ``fate`` decides drop/trim per packet."""

    def __init__(self, cfg: MrcConfig | None = None, *, evs: list[PathChoice] | None = None,
                 psn: int = 0, delay: Callable[[int], int] | None = None,
                 fate: Fate | None = None, ser_ps: int = 100_000) -> None:
        cfg = cfg or config()
        evs = evs or make_evs()
        self.a = MrcQueuePair(1, 0, 1, 2, MTU, evs, config=cfg, psn=psn, peer_psn=psn)
        self.b = MrcQueuePair(2, 1, 0, 1, MTU, evs, config=cfg, psn=psn, peer_psn=psn)
        self.qps = {0: self.a, 1: self.b}
        self.delay = delay or (lambda ev: 2 * US + (usid.ev_t1(ev) & 0xFF) * 150_000)
        self.fate = fate
        self.ser_ps = ser_ps
        self.now = 0
        self._heap: list[tuple[int, int, Callable[..., None], tuple]] = []
        self._seq = 0
        self._busy: dict[tuple[int, int], bool] = {}
        self._timer_at: dict[int, int] = {}
        self.events: list[tuple[int, TransportEvent]] = []
        self.sent: list[tuple[int, Packet]] = []  # (time, packet) of everything put on a wire
        self.dropped = 0

    # ------------------------------------------------------------- engine
    def at(self, t: int, fn: Callable[..., None], *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def run(self, until: int, stop: Callable[[], bool] | None = None) -> int:
        while self._heap and self._heap[0][0] <= until:
            t, _, fn, args = heapq.heappop(self._heap)
            self.now = t
            fn(*args)
            if stop is not None and stop():
                break
        return self.now

    # ------------------------------------------------------------- driver
    def post(self, qp: MrcQueuePair, msg_id: int, length: int,
             payload: bytes | None = None) -> None:
        qp.post_write(self.now, msg_id, length, payload=payload)
        self.service(qp)

    def service(self, qp: MrcQueuePair) -> None:
        for pkt in qp.take_control():
            self.wire(pkt)
        deadline = qp.next_timer()
        if deadline is not None:
            deadline = max(deadline, self.now)
            scheduled = self._timer_at.get(qp.host)
            if scheduled is None or deadline < scheduled:
                self._timer_at[qp.host] = deadline
                self.at(deadline, self.on_timer, qp)
        while qp.events:
            self.events.append((qp.host, qp.events.popleft()))
        for plane in range(PLANES):
            self.kick(qp, plane)

    def kick(self, qp: MrcQueuePair, plane: int) -> None:
        if self._busy.get((qp.host, plane)):
            return
        pkt = qp.poll(self.now, plane)
        if pkt is None:
            return
        assert pkt.plane == plane
        self._busy[(qp.host, plane)] = True
        self.at(self.now + self.ser_ps, self.port_free, qp, plane)
        self.wire(pkt)

    def port_free(self, qp: MrcQueuePair, plane: int) -> None:
        self._busy[(qp.host, plane)] = False
        self.service(qp)

    def wire(self, pkt: Packet) -> None:
        self.sent.append((self.now, pkt))
        fate = self.fate(self.now, pkt) if self.fate else None
        if fate == "drop":
            self.dropped += 1
            return
        if fate == "trim":
            pkt.trimmed = True
            pkt.payload = None
            pkt.size = 128
        self.at(self.now + self.delay(pkt.ev), self.deliver, pkt)
        if fate == "dup":  # a stray copy, much later
            self.at(self.now + 3 * self.delay(pkt.ev), self.deliver, pkt)

    def deliver(self, pkt: Packet) -> None:
        qp = self.qps[pkt.dst]
        qp.receive(self.now, pkt)
        self.service(qp)

    def on_timer(self, qp: MrcQueuePair) -> None:
        if self._timer_at.get(qp.host) == self.now:
            del self._timer_at[qp.host]
        deadline = qp.next_timer()
        if deadline is not None and deadline <= self.now:
            qp.handle_timer(self.now)
        self.service(qp)

    # ------------------------------------------------------------- views
    def completions(self, host: int, kind: str = EVENT_MESSAGE_COMPLETED) -> list[dict]:
        return [e.detail() for h, e in self.events if h == host and e.kind == kind]

    def ev_events(self, host: int = 0) -> list[TransportEvent]:
        return [e for h, e in self.events if h == host and e.kind == EVENT_EV_STATE]

    def data_sent(self, ev: int | None = None) -> list[tuple[int, Packet]]:
        return [(t, p) for t, p in self.sent
                if p.kind == DATA and p.src == 0 and (ev is None or p.ev == ev)]

    def transfer(self, sizes: list[int], until: int = 10_000 * US,
                 payload: bool = False) -> list[bytes | None]:
        datas = []
        for i, size in enumerate(sizes):
            data = random.Random(i).randbytes(size) if payload else None
            datas.append(data)
            self.post(self.a, i, size, data)
        self.run(until, stop=lambda: len(self.completions(1)) == len(sizes)
                 and len(self.completions(0, EVENT_SEND_COMPLETED)) == len(sizes))
        return datas


def check_exact(loop: Loop, sizes: list[int], datas: list[bytes | None] | None = None) -> None:
    done = loop.completions(1)
    assert sorted(d["msg_id"] for d in done) == list(range(len(sizes)))  # each exactly once
    for d in done:
        i = d["msg_id"]
        assert d["bytes"] == sizes[i]
        payload = datas[i] if datas else None
        assert d["checksum"] == loop.a.expected_checksum(i, sizes[i], payload)
        if payload is not None:
            assert d["data"] == payload
        else:
            assert "data" not in d
    assert loop.b.bytes_placed == sum(sizes)
    assert not loop.a.failed and not loop.b.failed


# ====================================================================== delivery
SIZES = [1, MTU - 1, MTU, MTU + 1, 37 * MTU + 5, 3]


def test_exact_delivery_with_heavy_reordering() -> None:
    # EV delays from 2 us to 9 us: packets arrive far out of PSN order
    loop = Loop(delay=lambda ev: 2 * US + ((spread_key(ev) * 7919) % 8) * 900_000)
    loop.transfer(SIZES)
    check_exact(loop, SIZES)
    assert loop.a.stats.retransmissions == 0
    assert loop.a.stats.timeouts == 0
    assert loop.a.inflight_bytes == 0
    assert len(loop.completions(0, EVENT_SEND_COMPLETED)) == len(SIZES)
    assert not loop.completions(1, EVENT_SEND_COMPLETED)
    assert not loop.completions(0)  # only receivers report placement


def test_real_payload_bytes_are_placed() -> None:
    loop = Loop()
    datas = loop.transfer(SIZES, payload=True)
    check_exact(loop, SIZES, datas)


def test_any_arrival_order_direct() -> None:
    """Packets handed to the receiver in a random permutation, with duplicates."""
    evs = make_evs()
    cfg = config(cc=CcConfig(algorithm="fixed", fixed_window_bytes=1 << 30))
    a = MrcQueuePair(1, 0, 1, 2, MTU, evs, config=cfg)
    b = MrcQueuePair(2, 1, 0, 1, MTU, evs, config=cfg)
    sizes = [5 * MTU + 3, 1, 2 * MTU]
    for i, size in enumerate(sizes):
        a.post_write(0, i, size)
    pkts = []
    while (p := a.poll(0, len(pkts) % PLANES)) is not None:
        pkts.append(p)
    assert len(pkts) == 6 + 1 + 2
    rng = random.Random(4)
    order = pkts + rng.sample(pkts, 5)  # every packet once, then 5 duplicates
    rng.shuffle(order)
    for t, p in enumerate(order):
        b.receive(t, p)
    done = [e.detail() for e in b.events if e.kind == EVENT_MESSAGE_COMPLETED]
    assert sorted(d["msg_id"] for d in done) == [0, 1, 2]
    for d in done:
        assert d["checksum"] == a.expected_checksum(d["msg_id"], sizes[d["msg_id"]])
    assert b.bytes_placed == sum(sizes)
    assert b.stats.duplicates == sum(1 for i, p in enumerate(order) if p in order[:i])


def test_duplicate_and_late_packets_never_double_count() -> None:
    loop = Loop()
    loop.transfer(SIZES)
    placed = loop.b.bytes_placed
    completions = len(loop.completions(1))
    # replay every DATA ever sent, long after completion
    for _, pkt in loop.data_sent():
        loop.b.receive(loop.now + 1, pkt)
    assert loop.b.bytes_placed == placed == sum(SIZES)
    assert len([e for e in loop.b.events if e.kind == EVENT_MESSAGE_COMPLETED]) == 0
    assert len(loop.completions(1)) == completions
    assert loop.b.stats.duplicates == len(loop.data_sent())
    # and the sender copes with the flood of duplicate ACKs
    for pkt in loop.b.take_control():
        loop.a.receive(loop.now + 2, pkt)
    assert loop.a.inflight_bytes == 0 and not loop.a.failed


def test_psn_wraps_at_24_bits() -> None:
    start = PSN_MOD - 7
    loop = Loop(psn=start, delay=lambda ev: 2 * US + (usid.ev_t1(ev) & 0xFF) * 400_000)
    sizes = [20 * MTU, 3 * MTU + 1]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    psns = [p.psn for _, p in loop.data_sent()]
    assert min(psns) == 0 and max(psns) == PSN_MOD - 1  # it did wrap
    assert start in psns and (start + 23) % PSN_MOD in psns
    acks = [p for _, p in loop.sent if p.kind == ACK and p.src == 1]
    assert acks[-1].psn == (start + 24) % PSN_MOD  # cumulative: next expected


def test_psn_wrap_with_loss_and_retransmission() -> None:
    victim = make_evs()[3].ev
    dropped: list[int] = []

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.kind == DATA and pkt.ev == victim and len(dropped) < 2:
            dropped.append(pkt.psn)
            return "drop"
        return None

    loop = Loop(psn=PSN_MOD - 3, fate=fate)
    sizes = [30 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    retx = [p.psn for _, p in loop.data_sent() if p.flags & FLAG_RETX]
    assert sorted(retx) == sorted(dropped)


def test_lazy_segmentation_of_a_huge_message() -> None:
    a = MrcQueuePair(1, 0, 1, 2, 4096, make_evs(), config=config(
        cc=CcConfig(algorithm="fixed", fixed_window_bytes=1 << 20)))
    a.post_write(0, 0, 4 << 30)  # 4 GiB: a million packets, none materialised up front
    sent = [a.poll(0, 0) for _ in range(10)]
    assert all(p is not None for p in sent)
    assert a._sender.outstanding_count == 10
    assert a._sender.cur is not None and a._sender.cur.next_offset == 10 * 4096


def test_acks_are_coalesced_and_tail_is_acked_by_timer() -> None:
    cfg = config(ack_every=4, ack_req_on_last=False)
    evs = make_evs()
    a = MrcQueuePair(1, 0, 1, 2, MTU, evs, config=cfg)
    b = MrcQueuePair(2, 1, 0, 1, MTU, evs, config=cfg)
    a.post_write(0, 0, 6 * MTU)
    a.post_write(0, 1, 6 * MTU)  # keeps the first message's packets free of ACK_REQ
    pkts = [a.poll(0, 0) for _ in range(6)]
    for i, p in enumerate(pkts):
        b.receive(10 + i, p)
    acks = b.take_control()
    assert len(acks) == 1 and acks[0].kind == ACK  # one ACK for the first four
    assert b.next_timer() == 14 + cfg.ack_delay_ps  # the tail waits for the delayed ACK
    b.handle_timer(15 + cfg.ack_delay_ps)
    tail = b.take_control()
    assert len(tail) == 1 and tail[0].psn == 6 and tail[0].echo_psn == 5


def test_sack_window_reports_every_arrival_even_when_spread() -> None:
    """Arrivals more than 64 PSNs apart get an ACK each, so none goes unreported."""
    evs = make_evs()
    cfg = config(ack_every=3, cc=CcConfig(algorithm="fixed", fixed_window_bytes=1 << 30))
    a = MrcQueuePair(1, 0, 1, 2, MTU, evs, config=cfg)
    b = MrcQueuePair(2, 1, 0, 1, MTU, evs, config=cfg)
    a.post_write(0, 0, 300 * MTU)
    pkts = [a.poll(0, 0) for _ in range(300)]
    for p in (pkts[10], pkts[150], pkts[290]):
        b.receive(1, p)
    acks = b.take_control()
    assert len(acks) == 3
    reported = set()
    for ack in acks:
        assert ack.psn == 0
        reported |= {ack.sack_base + i for i in range(SACK_BITS) if ack.sack >> i & 1}
    assert reported == {10, 150, 290}
    for ack in acks:
        a.receive(2, ack)
    outstanding = {seg.seq for seg in a._sender.outstanding if seg is not None}
    assert outstanding == set(range(300)) - {10, 150, 290}  # (the ring grew to hold 300)
    assert a._sender.outstanding_count == 297


# ====================================================================== loss and trims
def test_single_loss_marks_only_that_ev_and_retransmits_elsewhere() -> None:
    victim = make_evs()[5].ev
    state = {"dropped": None}

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.kind == DATA and pkt.ev == victim and state["dropped"] is None:
            state["dropped"] = pkt.psn
            return "drop"
        return None

    loop = Loop(fate=fate)
    sizes = [60 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    bad = [e for e in loop.ev_events() if e.new == ASSUMED_BAD]
    assert [e.ev for e in bad] == [victim]
    assert bad[0].reason.startswith("loss")  # FIFO evidence, not a timer
    assert loop.a.stats.timeouts == 0
    retx = [(t, p) for t, p in loop.data_sent() if p.flags & FLAG_RETX]
    assert [p.psn for _, p in retx] == [state["dropped"]]
    assert retx[0][1].ev != victim
    # detected once the next packet on the victim EV was acked, plus the grace: well under RTO
    first_send = next(t for t, p in loop.data_sent(victim))
    assert bad[0].time_ps - first_send < loop.a.rto_ps
    assert loop.a.stats.losses == 1 and loop.a.stats.paths_marked_bad == 1


def test_dead_ev_times_out_and_only_it_goes_bad() -> None:
    """The RTO backstop alone (overdue evidence off)."""
    victim = make_evs()[2].ev
    loop = Loop(config(overdue_loss=False), fate=lambda now, p: "drop" if p.ev == victim else None)
    sizes = [80 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    bad = [e for e in loop.ev_events() if e.new == ASSUMED_BAD]
    assert [e.ev for e in bad] == [victim]
    assert bad[0].reason.startswith("timeout")
    first_send = next(t for t, _ in loop.data_sent(victim))
    assert bad[0].time_ps == first_send + loop.a.rto_ps
    lost = {p.psn for _, p in loop.data_sent(victim)}
    retx = [p for _, p in loop.data_sent() if p.flags & FLAG_RETX]
    assert {p.psn for p in retx} == lost and all(p.ev != victim for p in retx)
    # no data on the dead EV after it was marked; it is probed instead
    assert all(t <= bad[0].time_ps for t, _ in loop.data_sent(victim))
    probes = [p for _, p in loop.sent if p.kind == PROBE and p.ev == victim]
    assert probes and loop.a.ev_state(victim) == ASSUMED_BAD


def test_trim_gets_immediate_nack_and_retransmit_ev_stays_good() -> None:
    victim = make_evs()[1].ev
    trimmed: list[int] = []

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.kind == DATA and pkt.ev == victim and len(trimmed) < 3:
            trimmed.append(pkt.psn)
            return "trim"
        return None

    loop = Loop(fate=fate)
    sizes = [50 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    nacks = [(t, p) for t, p in loop.sent if p.kind == NACK]
    assert sorted(p.echo_psn for _, p in nacks) == sorted(trimmed)
    assert all(p.flags & FLAG_TRIM and p.ev == victim for _, p in nacks)
    assert loop.a.stats.trims == 3 and loop.a.stats.timeouts == 0 and loop.a.stats.losses == 0
    assert loop.ev_events() == []  # never a state change: trims are congestion
    assert loop.a.ev_state(victim) == GOOD
    # each retransmission leaves as soon as its NACK arrives (the port is idle)
    d = loop.delay(victim)
    for t_nack, nack in nacks:
        t_retx = next(t for t, p in loop.data_sent()
                      if p.flags & FLAG_RETX and p.psn == nack.echo_psn)
        assert t_retx - (t_nack + d) <= loop.ser_ps


def test_ecn_is_echoed_at_once_and_reps_avoids_marked_ev() -> None:
    hot = make_evs()[0].ev

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.kind == DATA and pkt.ev == hot:
            pkt.ecn = ECN_CE
        return None

    cfg = config(spray="reps", reps_explore_every=8)
    loop = Loop(cfg, fate=fate)
    sizes = [400 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    echoes = [p for _, p in loop.sent if p.kind == ACK and p.flags & FLAG_ECN_ECHO]
    assert echoes and all(p.ev == hot for p in echoes)
    assert loop.a.stats.ecn_echoes == len(echoes)
    on_hot = len(loop.data_sent(hot))
    plane0 = [p for _, p in loop.data_sent() if p.plane == 0]
    # round robin would give the hot EV a quarter of plane 0; REPS only explores onto it
    assert on_hot < len(plane0) / 8


def test_round_robin_spreads_evenly() -> None:
    loop = Loop(config(spray="round_robin"))
    loop.transfer([128 * MTU])
    counts = {pc.ev: len(loop.data_sent(pc.ev)) for pc in make_evs()}
    assert set(counts.values()) == {16}


# ====================================================================== overdue evidence
def bad_events(loop: Loop, host: int = 0) -> list[TransportEvent]:
    return [e for e in loop.ev_events(host) if e.new == ASSUMED_BAD]


def test_silent_ev_is_found_by_overdue_evidence_well_before_the_rto() -> None:
    """A dead path leaves no later packet on its EV to prove a loss; packets sent later on
    the other EVs being acknowledged does, within the reorder window."""
    victim = make_evs()[2].ev
    fault = 60 * US  # the scopes are warm by then
    loop = Loop(fate=lambda now, p: "drop" if p.ev == victim and now >= fault else None)
    sizes = [3000 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    bad = bad_events(loop)
    assert [e.ev for e in bad] == [victim]  # no other EV suspected
    assert bad[0].reason.startswith("overdue")
    assert bad[0].time_ps - fault < loop.a.rto_ps
    stats = loop.a.stats
    assert stats.timeouts == 0 and stats.overdue_losses >= 1
    lost = {p.psn for t, p in loop.data_sent(victim) if t >= fault}
    retx = [p for _, p in loop.data_sent() if p.flags & FLAG_RETX]
    assert {p.psn for p in retx} == lost and all(p.ev != victim for p in retx)
    assert all(t <= bad[0].time_ps for t, _ in loop.data_sent(victim))  # then only probes


def test_a_silent_plane_is_caught_by_the_qp_wide_scope() -> None:
    """No EV of the plane delivers, so only the other plane's ACKs can prove the loss."""
    fault = 60 * US
    loop = Loop(fate=lambda now, p: "drop" if p.plane == 1 and now >= fault else None)
    sizes = [3000 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    bad = bad_events(loop)
    plane1 = {pc.ev for pc in make_evs() if pc.plane == 1}
    assert {e.ev for e in bad} == plane1
    assert all(e.reason.startswith("overdue") for e in bad)
    assert min(e.time_ps for e in bad) - fault < loop.a.rto_ps
    assert loop.a.stats.timeouts == 0  # never the RTO: each EV is found when next used


def test_heavy_static_reordering_is_not_loss() -> None:
    """EV paths from 2 to 9 us one way: the window learns the 14 us RTT spread."""
    loop = Loop(delay=lambda ev: 2 * US + ((spread_key(ev) * 7919) % 8) * 900_000)
    sizes = [4000 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    stats = loop.a.stats
    assert stats.retransmissions == stats.losses == stats.overdue_losses == 0
    assert loop.ev_events() == []
    spread = 2 * 7 * 900_000
    assert all(sc.window > spread for sc in loop.a._recovery.scopes)


def test_queues_building_on_some_paths_widen_the_window() -> None:
    """Half the paths of each plane queue up (to 6 us more each way, 0.25 us per us): a
    growing queue is reordering, never loss."""
    loop = Loop()

    def delay(ev: int) -> int:
        base = 2 * US + (usid.ev_t1(ev) & 0xFF) * 150_000
        if usid.ev_t1(ev) < 2:
            base += min(6 * US, max(0, loop.now - 40 * US) // 4)
        return base

    loop.delay = delay
    sizes = [6000 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    assert loop.a.stats.overdue_losses == loop.a.stats.retransmissions == 0
    assert loop.ev_events() == []


def test_a_trim_nack_within_the_grace_beats_overdue_evidence() -> None:
    """A trimmed packet on a slow path looks overdue before its NACK is back: the grace
    lets the NACK make it a trim (congestion), never a loss."""
    victim = make_evs()[3].ev
    trimmed: list[int] = []

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.kind == DATA and pkt.ev == victim and now > 50 * US and not trimmed:
            trimmed.append(pkt.psn)
            return "trim"
        return None

    cfg = config(reorder_window_ps=1 * US, loss_grace_ps=10 * US)
    loop = Loop(cfg, fate=fate, delay=lambda ev: 6 * US if ev == victim else 2 * US)
    sizes = [2000 * MTU]
    loop.transfer(sizes)
    check_exact(loop, sizes)
    stats = loop.a.stats
    assert trimmed and stats.trims == 1 and stats.losses == stats.overdue_losses == 0
    assert loop.ev_events() == []


def _strike_case(deliver_until: int) -> tuple[MrcQueuePair, list[int]]:
    """EV 0 (plane 0) carries packets sent at 0, 4 and 8 us and loses them all; every other
    packet sent up to ``deliver_until`` is acknowledged. Window 1 us, no grace."""
    evs = make_evs()
    cfg = config(reorder_window_ps=1 * US, loss_grace_ps=0, overdue_strikes=2, ack_every=64,
                 ack_req_on_last=False, spray="round_robin",
                 cc=CcConfig(algorithm="fixed", fixed_window_bytes=1 << 20))
    a = MrcQueuePair(1, 0, 1, 2, MTU, evs, config=cfg)
    b = MrcQueuePair(2, 1, 0, 1, MTU, evs, config=cfg)
    a.post_write(0, 0, 100 * MTU)
    a.post_write(0, 1, MTU)  # keeps the ACK_REQ of "nothing queued" off these packets
    victim = evs[0].ev
    mine = []
    for i in range(12):  # one packet per plane every 1 us
        for plane in range(PLANES):
            pkt = a.poll(i * US, plane)
            assert pkt is not None
            if pkt.ev == victim:
                mine.append(pkt.psn)
            elif pkt.ts <= deliver_until:
                b.receive(20 * US, pkt)
    assert len(mine) == 3
    b.handle_timer(30 * US)  # one delayed ACK reports them all
    for ack in b.take_control():
        a.receive(21 * US, ack)
    return a, mine


def test_overdue_strikes_make_an_ev_bad() -> None:
    """Two overdue losses with no delivery between: ASSUMED_BAD although the EV's newest
    packet is not overdue yet; that packet is resent elsewhere at once."""
    a, mine = _strike_case(deliver_until=6 * US)  # overdue: sent before 5 us
    assert a.stats.overdue_losses == 2 and a.stats.evicted == 1
    assert a.ev_state(make_evs()[0].ev) == ASSUMED_BAD
    assert [e.reason for e in a.events if e.kind == EVENT_EV_STATE] == [
        f"overdue psn={mine[1]} strikes=2"]


def test_an_ev_whose_packets_are_all_overdue_goes_bad_at_the_first() -> None:
    a, mine = _strike_case(deliver_until=11 * US)  # all three overdue
    assert a.stats.overdue_losses == 1 and a.stats.evicted == 2
    assert [e.reason for e in a.events if e.kind == EVENT_EV_STATE] == [
        f"overdue psn={mine[0]} strikes=1"]


def test_a_delivery_clears_the_strikes() -> None:
    a, _ = _strike_case(deliver_until=2 * US)  # only the packet sent at 0 us is overdue
    e = a._path_manager.find(make_evs()[0].ev)
    assert a.stats.overdue_losses == 1 and e.strikes == 1 and e.state == GOOD
    e.strikes = 1
    a._path_manager.set_state(0, e, GOOD, "test")  # any fresh start clears them
    assert e.strikes == 0


def test_port_down_marks_the_plane_at_once_and_probes_bring_it_back() -> None:
    down, up = 30 * US, 90 * US
    loop = Loop(fate=lambda now, p: "drop" if p.plane == 1 and down <= now < up else None)
    loop.post(loop.a, 0, 3000 * MTU)
    loop.run(down)
    t_down = loop.now
    in_flight = sum(1 for t, p in loop.data_sent() if p.plane == 1 and t > down - 5 * US)
    changed = loop.a.port_down(loop.now, 1)
    plane1 = {pc.ev for pc in make_evs() if pc.plane == 1}
    assert set(changed) == plane1
    assert all(loop.a.ev_state(ev) == ASSUMED_BAD for ev in plane1)
    assert loop.a._path_manager.bad_count == len(plane1)  # (the QP's timer reads it)
    assert 0 < loop.a.stats.evicted <= in_flight
    assert loop.a.port_down(loop.now, 1) == [] and loop.a.port_down(loop.now, 7) == []
    loop.service(loop.a)
    loop.run(5000 * US, stop=lambda: len(loop.completions(1)) == 1)
    check_exact(loop, [3000 * MTU])
    bad = bad_events(loop)
    assert len(bad) == len(plane1)
    assert all(e.time_ps == t_down and e.reason == "port down" for e in bad)
    assert all(loop.a.ev_state(ev) == GOOD for ev in plane1)  # probed back after ``up``
    assert loop.a._path_manager.bad_count == 0
    assert loop.a.stats.timeouts == 0 and loop.a.stats.reintegrated == len(plane1)


def test_reorder_window_learns_the_spread_and_holds_it() -> None:
    from mrc.transport.mrc.reorder import Reorder

    rto = 100 * US
    sc = Reorder(rto)
    sc.sample(0, 10 * US, hold_rtts=8)
    assert sc.refresh(rto, 1.0, 1.0) == rto  # cold: nothing known about the spread
    sc.cur_max = 30 * US  # a packet reported 30 us after it was sent
    sc.sample(41 * US, 10 * US, hold_rtts=8)  # half a hold period (4 x 10 us): rotates
    assert sc.refresh(rto, 1.0, 1.0) == 10 * US + 20 * US  # margin + spread
    assert sc.refresh(rto, 0.5, 2.0) == 5 * US + 40 * US
    sc.sample(82 * US, 10 * US, hold_rtts=8)
    assert sc.refresh(rto, 1.0, 1.0) == 10 * US  # the spread is gone: narrow again
    sc.cur_max = 500 * US
    assert sc.refresh(rto, 1.0, 1.0) == rto  # never past the RTO
    with pytest.raises(ValueError):
        MrcConfig(reorder_window_ps=0)
    with pytest.raises(ValueError):
        MrcConfig(overdue_strikes=0)


def test_a_long_queue_of_transmissions_is_freed_without_deep_recursion() -> None:
    """Transmission records are chained (records.Tx, TxQueue): a queue dropped whole frees
    its chain one record after another. The compiled records use CPython's trashcan for
    that; a plain recursive free of 200,000 records would overflow a 512 KiB thread stack
    (this runs in a child, so such a crash fails the test instead of ending the run)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import threading
        from mrc.transport.mrc.records import LINK_SENT, Msg, TxQueue, new_seg, new_tx

        def run():
            seg = new_seg(0, Msg(0, 1, 0, None, None, 0), 0, 1)
            q = TxQueue(LINK_SENT)
            for tx in range(200_000):
                t = new_tx(tx, seg, tx)
                q.push(t)
            del q, t

        threading.stack_size(512 * 1024)
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        print("freed")
    """)
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "freed", out.stderr[-2000:]


# ====================================================================== probes, DENIED
def test_probes_reintegrate_after_k_answers() -> None:
    victim = make_evs()[4].ev
    restore = 100 * US

    def fate(now: int, pkt: Packet) -> str | None:
        return "drop" if pkt.ev == victim and now < restore else None

    cfg = config()
    loop = Loop(cfg, fate=fate)
    loop.post(loop.a, 0, 3000 * MTU)
    loop.run(2000 * US, stop=lambda: len(loop.completions(1)) == 1)
    check_exact(loop, [3000 * MTU])
    changes = [(e.time_ps, e.old, e.new) for e in loop.ev_events()]
    assert [c[1:] for c in changes] == [(GOOD, ASSUMED_BAD), (ASSUMED_BAD, GOOD)]
    probes = [(t, p) for t, p in loop.sent if p.kind == PROBE and p.ev == victim]
    answered = [(t, p) for t, p in probes if t >= restore]
    k = cfg.probes_to_reintegrate
    # GOOD exactly when the K-th probe after the restore is answered
    t_kth, _ = answered[k - 1]
    rtt = 2 * loop.delay(victim)
    assert changes[1][0] == t_kth + rtt
    assert all(b - a == cfg.probe_interval_ps for (a, _), (b, _) in zip(probes, probes[1:], strict=False))
    assert loop.a.stats.reintegrated == 1
    assert loop.a.stats.probes_answered == k
    # and it carries data again afterwards
    assert any(t > changes[1][0] for t, _ in loop.data_sent(victim))
    replies = [p for _, p in loop.sent if p.kind == PROBE_REPLY]
    assert all(p.ev == victim and p.plane == usid.ev_plane(victim) for p in replies)


def test_a_lost_probe_restarts_the_count() -> None:
    victim = make_evs()[4].ev
    cfg = config(probes_to_reintegrate=3)
    drop_probe = {"n": 0}

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.ev != victim:
            return None
        if now < 50 * US:
            return "drop"
        if pkt.kind == PROBE:
            drop_probe["n"] += 1
            if drop_probe["n"] == 3:  # two answered, the third lost
                return "drop"
        return None

    loop = Loop(cfg, fate=fate)
    loop.post(loop.a, 0, 2000 * MTU)
    loop.run(3000 * US, stop=lambda: len(loop.completions(1)) == 1)
    good = [e for e in loop.ev_events() if e.new == GOOD]
    assert len(good) == 1
    probes = [t for t, p in loop.sent if p.kind == PROBE and p.ev == victim and t >= 50 * US]
    # answered: 1, 2, (3 lost), 4 resets the count... GOOD after probes 4, 5, 6
    assert good[0].time_ps == probes[5] + 2 * loop.delay(victim)


def test_denied_evs_are_never_used_nor_probed() -> None:
    evs = make_evs()
    drained = {pc.ev for pc in evs if pc.plane == 1 and pc.t1 == 2}
    loop = Loop()
    changed = loop.a.deny(0, lambda pc: pc.plane == 1 and pc.t1 == 2)
    assert set(changed) == drained and all(loop.a.ev_state(ev) == DENIED for ev in drained)
    loop.transfer([200 * MTU])
    check_exact(loop, [200 * MTU])
    assert not [p for _, p in loop.sent if p.src == 0 and p.ev in drained]
    assert all(e.reason == "denied" for e in loop.ev_events())
    # allow again: used again
    loop.a.allow(loop.now, drained)
    assert all(loop.a.ev_state(ev) == GOOD for ev in drained)
    loop.post(loop.a, 99, 64 * MTU)
    loop.run(loop.now + 1000 * US, stop=lambda: len(loop.completions(1)) == 2)
    assert [p for _, p in loop.sent if p.src == 0 and p.ev in drained]


def test_denied_ev_survives_loss_and_is_not_probed() -> None:
    evs = make_evs()
    target = evs[0].ev
    loop = Loop(fate=lambda now, p: "drop" if p.ev == target else None)
    loop.post(loop.a, 0, 100 * MTU)
    loop.run(3 * US)  # packets in flight on the target EV
    loop.a.deny(loop.now, [target])
    loop.run(5000 * US, stop=lambda: len(loop.completions(1)) == 1)
    check_exact(loop, [100 * MTU])
    assert loop.a.ev_state(target) == DENIED  # loss does not un-deny it
    assert not [p for _, p in loop.sent if p.kind == PROBE]


def test_allow_with_validation_probes_first() -> None:
    loop = Loop()
    ev = make_evs()[3].ev
    loop.a.deny(0, [ev])
    loop.a.allow(0, [ev], validate=True)
    assert loop.a.ev_state(ev) == ASSUMED_BAD
    loop.service(loop.a)
    loop.run(200 * US)
    assert loop.a.ev_state(ev) == GOOD
    assert loop.a.stats.probes_answered == loop.a.config.probes_to_reintegrate


# ====================================================================== RTO, retries, QP error
@pytest.mark.parametrize(("linear", "exponential"), [(1, 2), (0, 0), (7, 0), (3, 4)])
def test_qp_errors_only_when_every_path_is_dead_at_the_predicted_time(
        linear: int, exponential: int) -> None:
    """The published retry rule, to the picosecond: T (1 + linear) + T (2^(exp+1) - 2)."""
    cut = 30 * US
    cfg = config(retry_linear_cnt=linear, retry_exp_cnt=exponential)
    loop = Loop(cfg, fate=lambda now, p: "drop" if now >= cut else None)
    loop.post(loop.a, 0, 5000 * MTU)
    loop.run(100_000 * US)
    errors = [e for h, e in loop.events if e.kind == EVENT_QP_ERROR]
    assert len(errors) == 1 and loop.a.failed and not loop.b.failed
    # last progress: the last ACK that got through (sent before the cut)
    last_progress = max(t + loop.delay(p.ev) for t, p in loop.sent
                        if p.kind == ACK and t < cut)
    t = cfg.timeout_ps
    assert t == 1_024_000 * 16
    rule = t * (1 + linear) + t * (2 ** (exponential + 1) - 2)
    assert cfg.error_after_ps() == rule
    assert errors[0].time_ps == last_progress + rule
    assert loop.a.stats.qp_timeouts == linear + exponential + 1  # every retry, then the error
    reason = errors[0].reason
    assert f"retry_linear_cnt={linear}" in reason and "assumed_bad=8" in reason
    assert all(loop.a.ev_state(pc.ev) == ASSUMED_BAD for pc in make_evs())
    assert loop.completions(1) == []  # nothing partial is reported complete
    assert loop.b.bytes_placed < 5000 * MTU
    # no further sending of any kind
    n = len(loop.sent)
    assert loop.a.poll(loop.now, 0) is None and loop.a.next_timer() is None
    loop.run(loop.now + 1000 * US)
    assert len(loop.sent) == n


def test_never_errors_while_one_path_stays_up() -> None:
    keep = make_evs()[6].ev
    # the harshest budget: a single timeout without progress
    cfg = config(retry_linear_cnt=0, retry_exp_cnt=0)
    loop = Loop(cfg, fate=lambda now, p: None if p.ev == keep or now < 20 * US else "drop")
    sizes = [600 * MTU]
    loop.transfer(sizes, until=100_000 * US)
    check_exact(loop, sizes)
    assert loop.a.ev_state(keep) == GOOD
    assert all(loop.a.ev_state(pc.ev) == ASSUMED_BAD for pc in make_evs() if pc.ev != keep)


def test_all_paths_down_then_back_resumes_without_error() -> None:
    outage = (30 * US, 330 * US)
    # errors only after 8 T + 14 T = 22 x 16.4 us = 360 us without progress
    cfg = config(retry_linear_cnt=7, retry_exp_cnt=3)

    def fate(now: int, pkt: Packet) -> str | None:
        return "drop" if outage[0] <= now < outage[1] else None

    loop = Loop(cfg, fate=fate)
    sizes = [1500 * MTU]
    loop.transfer(sizes, until=100_000 * US)
    check_exact(loop, sizes)
    bad = {e.ev for e in loop.ev_events() if e.new == ASSUMED_BAD}
    assert bad == {pc.ev for pc in make_evs()}  # every EV went bad...
    assert all(s == GOOD for s in loop.a.ev_states().values())  # ...and came back
    assert loop.a.stats.qp_timeouts >= 1


def test_published_timer_defaults_and_ranges() -> None:
    cfg = MrcConfig()
    assert (cfg.timeout, cfg.retry_linear_cnt, cfg.retry_exp_cnt) == (20, 7, 25)
    assert cfg.timeout_ps == 1_024_000 * 2**20  # 1.07 s: NCCL_MRC_TIMEOUT=20
    assert cfg.error_after_ps() is None  # 25 = retry forever
    assert MrcConfig(timeout=24).timeout_ps == 1_024_000 * 2**24  # 17.18 s, the header's max
    assert MrcConfig(retry_exp_cnt=0, retry_linear_cnt=7, timeout=4).error_after_ps() == \
        8 * 1_024_000 * 16  # the verbs rule: (retry_cnt + 1) x timeout
    assert cfg.ev_timeout_ps == 64 * 1_024_000  # the per-EV path timer (own model)
    for bad in (dict(spray="ecmp"), dict(timeout=25), dict(retry_linear_cnt=8),
                dict(retry_exp_cnt=26), dict(mpr=0), dict(max_wimm=0),
                dict(ev_min_active=129)):
        with pytest.raises(ValueError):
            MrcConfig(**bad)  # type: ignore[arg-type]


# ====================================================================== EV sets
def test_build_ev_set_spreads_evenly_and_is_symmetric() -> None:
    spec = FabricSpec(planes=4, hosts=8, hosts_per_t0=2, t1_per_plane=4)
    evs = build_ev_set(spec, 0, 5, count=128, seed=3)
    assert len(evs) == 128 and len({pc.ev for pc in evs}) == 128
    groups = paths_of(evs)
    assert len(groups) == 16 and {len(v) for v in groups.values()} == {8}
    for pc in evs:
        assert usid.ev_plane(pc.ev) == pc.plane and usid.ev_t1(pc.ev) == pc.t1
        assert pc.address == ev_address(spec, 0, 5, pc.ev)
    back = build_ev_set(spec, 5, 0, count=128, seed=3)
    assert [pc.ev for pc in back] == [pc.ev for pc in evs]
    assert back == reply_paths(spec, 5, 0, evs)
    assert build_ev_set(spec, 0, 5, count=128, seed=3) == evs  # deterministic
    # fewer EVs than paths: distinct paths, even over planes
    few = build_ev_set(spec, 0, 5, count=8, seed=1)
    assert len(paths_of(few)) == 8 and sorted(pc.plane for pc in few) == [0, 0, 1, 1, 2, 2, 3, 3]
    # same T0: one path per plane, no T1
    local = build_ev_set(spec, 0, 1, count=16)
    assert {pc.t1 for pc in local} == {None} and len({pc.ev for pc in local}) == 16
    with pytest.raises(ValueError):  # more than the 12-bit entropy field tells apart
        build_ev_set(spec, 0, 1, count=4 * 4 * 4096 + 1)


def test_qp_on_a_real_ev_set_replies_along_the_same_path() -> None:
    spec = FabricSpec(planes=4, hosts=8, hosts_per_t0=2, t1_per_plane=4)
    evs_ab = build_ev_set(spec, 0, 5, count=32)
    evs_ba = build_ev_set(spec, 5, 0, count=32)
    a = MrcQueuePair(1, 0, 5, 2, MTU, evs_ab, config=config())
    b = MrcQueuePair(2, 5, 0, 1, MTU, evs_ba, config=config())
    a.post_write(0, 0, 3 * MTU)
    for plane in range(3):
        pkt = a.poll(0, plane)
        assert pkt is not None and pkt.plane == plane == usid.ev_plane(pkt.ev)
        assert pkt.da == ev_address(spec, 0, 5, pkt.ev)
        b.receive(1, pkt)
    for ack in b.take_control():
        assert ack.da == ev_address(spec, 5, 0, ack.ev) and ack.plane == usid.ev_plane(ack.ev)
    assert b.stats.reply_fallbacks == 0


# ====================================================================== property
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 150 * MTU), min_size=1, max_size=4),
    outages=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 150), st.integers(1, 300),
                               st.sampled_from(["both", "forward", "reverse"])),
                     max_size=12),
    p_drop=st.sampled_from([0.0, 0.01, 0.05]),
    p_trim=st.sampled_from([0.0, 0.02, 0.1]),
    p_dup=st.sampled_from([0.0, 0.02]),
    safe=st.integers(0, 7),
    spray=st.sampled_from(["round_robin", "reps"]),
)
def test_random_faults_with_one_live_path_never_lose_duplicate_or_corrupt(
        seed: int, sizes: list[int], outages: list[tuple[int, int, int, str]], p_drop: float,
        p_trim: float, p_dup: float, safe: int, spray: str) -> None:
    evs = make_evs()
    safe_ev = evs[safe].ev
    windows = [(evs[i].ev, start * US, (start + length) * US, way)
               for i, start, length, way in outages if evs[i].ev != safe_ev]
    rng = random.Random(seed)

    def fate(now: int, pkt: Packet) -> str | None:
        if pkt.ev == safe_ev:
            return None
        for ev, start, end, way in windows:
            if ev == pkt.ev and start <= now < end and (
                    way == "both" or (way == "forward") == (pkt.src == 0)):
                return "drop"
        r = rng.random()
        if r < p_drop:
            return "drop"
        if pkt.kind == DATA and r < p_drop + p_trim:
            return "trim"
        if r < p_drop + p_trim + p_dup:
            return "dup"
        return None

    # the harshest retry budget that still must never fire: one live EV is enough
    cfg = config(spray=spray, retry_linear_cnt=0, retry_exp_cnt=1, ack_every=1 + seed % 6,
                 loss_grace_ps=(seed % 3) * US)
    loop = Loop(cfg, fate=fate, psn=rng.randrange(PSN_MOD))
    datas = loop.transfer(sizes, until=200_000 * US, payload=bool(seed & 1))
    check_exact(loop, sizes, datas)
    assert loop.a.inflight_bytes == 0


def test_stats_are_a_plain_dict() -> None:
    loop = Loop()
    loop.transfer([10 * MTU])
    stats = loop.a.stats.as_dict()
    assert stats["data_sent"] == 10 and stats["retransmissions"] == 0
    assert loop.b.stats.as_dict()["acks_sent"] >= 1
    assert loop.a.window == 32 * MTU


def test_timer_table_walks_every_timer_in_order() -> None:
    """``next_timer`` takes the minimum over, and ``handle_timer`` serves, exactly the
    timers of :class:`Timer`, in its order (read from the source, so it holds compiled too)."""
    from pathlib import Path

    from mrc.transport import mrc as package
    from mrc.transport.mrc import loss

    source = (Path(package.__path__[0]) / "loss.py").read_text()
    names = [t.name.lower() for t in loss.Timer]

    def calls(method: str, prefix: str) -> list[str]:
        body = source.split(f"    def {method}(", 1)[1].split("\n    @", 1)[0]
        return [line.split(f"self.{prefix}", 1)[1].split("(", 1)[0]
                for line in body.splitlines() if f"self.{prefix}" in line]

    assert calls("next_timer", "_due_") == names
    assert calls("handle_timer", "_serve_") == names
    for name in names:
        assert f"    def _due_{name}(self)" in source
        assert f"    def _serve_{name}(self, now" in source
