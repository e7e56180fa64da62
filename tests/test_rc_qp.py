"""RoCE RC baseline: QP state machine, go-back-N, timers, striping connection, ECMP hashing.

Everything runs on a tiny loopback driver written here against the sans-IO API only: each
(host, plane) port is paced at a line rate, every packet takes a fixed one-way delay, and a
``fate`` hook may drop, trim or CE-mark any packet at the moment it is sent.
"""

from __future__ import annotations

import heapq
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc.packet import (
    ACK,
    DATA,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    NACK,
    PSN_MASK,
    Packet,
    data_class,
)
from mrc.stack.rc_connection import (
    DCQCN_WINDOW_PKTS,
    RcConnection,
    bdp_packets,
    ecmp_t1,
    rc_config_for,
    rc_qp_pair,
)
from mrc.transport.base import (
    EVENT_CONNECTION_FAILED,
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
    EVENT_RETRY,
    EVENT_SEND_COMPLETED,
    TransportEvent,
)
from mrc.transport.memory import expected_checksum, message_key
from mrc.transport.rc.config import LOCAL_ACK_UNIT_PS, RcConfig, retry_schedule
from mrc.transport.rc.entropy import ROCE_SPORT_MIN, udp_source_port
from mrc.transport.rc.qp import RcQp
from mrc.transport.rc.striping import stripe
from topology.routed import host_address
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec, preset

US = 1_000_000
SPEC = preset("lab-small")  # 4 planes, 8 hosts, 2 per T0, 4 T1 per plane
SRC, DST = 0, 5  # under different T0s

Fate = Callable[[Packet, int], str | None]


# ====================================================================== loopback driver
class Loop:
    """Deterministic sans-IO driver: paced ports, fixed delay, a fate hook per sent packet."""

    def __init__(self, *, rate_gbps: float = 100.0, delay_ps: int = 2 * US,
                 fate: Fate | None = None) -> None:
        self.now = 0
        self.rate_bps = rate_gbps * 1e9
        self.delay_ps = delay_ps
        self.fate = fate
        self._heap: list[tuple[int, int, str, object]] = []
        self._seq = 0
        self.qps: dict[tuple[int, int], RcQp] = {}
        self.host_qps: dict[int, list[RcQp]] = {}
        self._busy: dict[tuple[int, int], int] = {}
        self._armed: set[tuple[int, int]] = set()
        self._timer_at: dict[int, int] = {}
        self._rr: dict[tuple[int, int], int] = {}
        self.log: list[tuple[int, TransportEvent]] = []  # (host, event)
        self.sent: list[tuple[int, Packet]] = []  # (send time, packet), every packet
        self.arrived: list[tuple[int, Packet]] = []  # (arrival time, packet), delivered ones

    def add(self, host: int, qp: RcQp) -> None:
        self.qps[(host, qp.qpn)] = qp
        self.host_qps.setdefault(host, []).append(qp)

    def add_connection(self, conn: RcConnection) -> None:
        for host, qp in conn.endpoints():
            self.add(host, qp)

    def post(self, host: int, qp: RcQp | RcConnection, msg_id: int, length: int,
             payload: bytes | None = None) -> None:
        qp.post_write(self.now, msg_id, length, payload=payload)
        for q in self.host_qps[host]:
            self._service(host, q)

    def kick(self) -> None:
        """Service every QP (after posting on them directly)."""
        for host, qps in self.host_qps.items():
            for qp in qps:
                self._service(host, qp)

    # ------------------------------------------------------------------ loop
    def run(self, until_ps: int | None = None, stop: Callable[[], bool] | None = None,
            max_steps: int = 5_000_000) -> int:
        heap = self._heap
        for _ in range(max_steps):
            if not heap or (until_ps is not None and heap[0][0] > until_ps):
                break
            t, _, kind, arg = heapq.heappop(heap)
            self.now = t
            getattr(self, "_on_" + kind)(arg)
            if stop is not None and stop():
                break
        else:
            raise AssertionError("loopback driver did not settle")
        if until_ps is not None and self.now < until_ps and (stop is None or not stop()):
            self.now = until_ps
        return self.now

    def _push(self, t: int, kind: str, arg: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, arg))

    def _service(self, host: int, qp: RcQp) -> None:
        for pkt in qp.take_control():
            self._transmit(pkt, self.now + self.delay_ps)
        deadline = qp.next_timer()
        if deadline is not None and self._timer_at.get(id(qp)) != deadline:
            self._timer_at[id(qp)] = deadline
            self._push(max(deadline, self.now), "timer", (host, qp))
        while qp.events:
            self.log.append((host, qp.events.popleft()))
        for plane in {q.plane for q in self.host_qps[host]}:
            key = (host, plane)
            if key not in self._armed:
                self._armed.add(key)
                self._push(max(self.now, self._busy.get(key, 0)), "port", key)

    def _transmit(self, pkt: Packet, arrive: int) -> None:
        self.sent.append((self.now, pkt))
        verdict = self.fate(pkt, self.now) if self.fate is not None else None
        if verdict == "drop":
            return
        if verdict == "trim":
            pkt.trimmed = True
            pkt.size = 128
        elif verdict == "ce":
            pkt.ecn = ECN_CE
        self._push(arrive, "arrive", pkt)

    def _on_port(self, key: tuple[int, int]) -> None:
        self._armed.discard(key)
        host, plane = key
        if self._busy.get(key, 0) > self.now:
            self._armed.add(key)
            self._push(self._busy[key], "port", key)
            return
        qps = [q for q in self.host_qps[host] if q.plane == plane]
        start = self._rr.get(key, 0)
        for i in range(len(qps)):
            qp = qps[(start + i) % len(qps)]
            pkt = qp.poll(self.now, plane)
            if pkt is not None:
                self._rr[key] = (start + i + 1) % len(qps)
                ser = math.ceil((pkt.size + ETHERNET_OVERHEAD_BYTES) * 8e12 / self.rate_bps)
                self._busy[key] = self.now + ser
                self._transmit(pkt, self.now + ser + self.delay_ps)
                self._service(host, qp)
                return

    def _on_arrive(self, pkt: Packet) -> None:
        qp = self.qps.get((pkt.dst, pkt.qpn))
        if qp is None:
            return
        self.arrived.append((self.now, pkt))
        qp.receive(self.now, pkt)
        self._service(pkt.dst, qp)

    def _on_timer(self, arg: tuple[int, RcQp]) -> None:
        host, qp = arg
        deadline = qp.next_timer()
        if self._timer_at.get(id(qp)) == self.now:
            del self._timer_at[id(qp)]
        if deadline is not None and deadline <= self.now:
            qp.handle_timer(self.now)
        self._service(host, qp)

    # ------------------------------------------------------------------ queries
    def events(self, kind: str, host: int | None = None) -> list[TransportEvent]:
        return [e for h, e in self.log if e.kind == kind and (host is None or h == host)]

    def data_sent(self, qpn: int | None = None) -> list[Packet]:
        return [p for _, p in self.sent if p.kind == DATA and (qpn is None or p.qpn == qpn)]


def pair(config: RcConfig, *, qpn: int = 7, plane: int = 1) -> tuple[RcQp, RcQp]:
    return rc_qp_pair(SPEC, SRC, DST, qpn, plane, config)


def loop_with(req: RcQp, resp: RcQp, **kw: object) -> Loop:
    lp = Loop(**kw)  # type: ignore[arg-type]
    lp.add(SRC, req)
    lp.add(DST, resp)
    return lp


def drop_psn_times(psn: int, times: int = 1, verdict: str = "drop") -> Fate:
    """Hit the DATA packet with ``psn`` the first ``times`` times it is sent."""
    left = [times]

    def fate(pkt: Packet, now: int) -> str | None:
        if pkt.kind == DATA and pkt.psn == psn and left[0] > 0:
            left[0] -= 1
            return verdict
        return None

    return fate


def expected(qpn: int, msg_id: int, length: int, mtu: int, src: int = SRC) -> int:
    return expected_checksum(message_key(src, qpn, msg_id, 0), length, mtu)


CFG = RcConfig(retransmission="fixed", mtu=4096, window_pkts=24, timeout_exp=4, retry_cnt=7)


# ====================================================================== QP behaviour
def test_in_order_delivery_byte_exact_and_acks_coalesced() -> None:
    req, resp = pair(CFG)
    lp = loop_with(req, resp)
    sizes = {1: 100_000, 2: 1, 3: 4096, 4: 4097}
    for msg_id, size in sizes.items():
        lp.post(SRC, req, msg_id, size)
    lp.run()
    done = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert [e.msg_id for e in done] == list(sizes)
    for e in done:
        msg_id = int(e.msg_id)
        size = sizes[msg_id]
        assert e.bytes == size
        assert e.checksum == expected(req.qpn, msg_id, size, 4096)
        assert e.posted_ps == 0
    assert [e.msg_id for e in lp.events(EVENT_SEND_COMPLETED, SRC)] == list(sizes)
    assert resp.bytes_placed == sum(sizes.values()) and req.bytes_placed == 0
    npkts = sum(math.ceil(s / 4096) for s in sizes.values())
    assert req.stats.data_sent == npkts and req.stats.retx_sent == 0
    assert resp.stats.dropped_oos == resp.stats.naks_sent == resp.stats.duplicates == 0
    # ACKs coalesce: far fewer than packets, but every message tail asked for one
    assert len(sizes) <= resp.stats.acks_sent < npkts / 2
    data = lp.data_sent()
    assert [p.psn for p in data] == list(range(npkts))
    assert all(p.flags & FLAG_LAST and p.flags & FLAG_ACK_REQ
               for p in data if p.offset + p.length == p.msg_len)
    # one destination: the peer's routed address on the plane, and the QP's UDP source port
    # as its entropy (the fabric's ECMP chooses the path); ACKs go to the requester's
    sport = udp_source_port(req.qpn, req.qpn)
    assert {(p.plane, p.da, p.ev) for p in data} == {(1, host_address(SPEC, DST, 1), sport)}
    acks = [p for _, p in lp.sent if p.kind == ACK]
    assert {(p.plane, p.da, p.ev) for p in acks} == {(1, host_address(SPEC, SRC, 1), sport)}
    assert req.outstanding == 0 and req.next_timer() is None and req.pending_messages == 0


def test_real_bytes_are_placed_exactly() -> None:
    payload = random.Random(3).randbytes(50_000)
    req, resp = pair(CFG)
    lp = loop_with(req, resp, fate=drop_psn_times(4))
    lp.post(SRC, req, 9, len(payload), payload)
    lp.run()
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert done.data == payload


def test_loss_one_seq_nak_then_go_back_n_resend() -> None:
    req, resp = pair(CFG)
    lp = loop_with(req, resp, fate=drop_psn_times(5))
    lp.post(SRC, req, 1, 60 * 4096)
    lp.run()
    # several packets arrived out of sequence, but the gap got exactly one NAK
    assert resp.stats.dropped_oos >= 5
    assert resp.stats.naks_sent == 1 and req.stats.naks_received == 1
    (nak,) = [p for _, p in lp.sent if p.kind == NACK]
    assert nak.flags & FLAG_SEQ_ERR and nak.psn == 5
    # go-back-N: the sender resent everything from PSN 5 that it had sent, in order
    psns = [p.psn for p in lp.data_sent()]
    first_retx = next(i for i, p in enumerate(lp.data_sent()) if p.flags & FLAG_RETX)
    highest = max(psns[:first_retx])
    assert psns[first_retx:first_retx + highest - 4] == list(range(5, highest + 1))
    assert req.stats.retx_sent == highest - 4 == resp.stats.dropped_oos + 1
    assert req.stats.timeouts == 0 and not lp.events(EVENT_RETRY)
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert done.checksum == expected(req.qpn, 1, 60 * 4096, 4096)
    assert resp.bytes_placed == 60 * 4096


def test_trimmed_packet_is_handled_like_a_loss() -> None:
    req, resp = pair(CFG)
    lp = loop_with(req, resp, fate=drop_psn_times(5, verdict="trim"))
    lp.post(SRC, req, 1, 40 * 4096)
    lp.run()
    assert resp.stats.dropped_trimmed == 1
    assert resp.stats.naks_sent == 1  # from the next packet, not from the trimmed one
    (nak,) = [p for _, p in lp.sent if p.kind == NACK]
    assert nak.psn == 5 and not nak.flags & ~(FLAG_SEQ_ERR | FLAG_ROCE)
    assert req.stats.timeouts == 0
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert done.checksum == expected(req.qpn, 1, 40 * 4096, 4096)


def test_lost_resend_starts_a_new_gap_episode() -> None:
    req, resp = pair(CFG)
    lp = loop_with(req, resp, fate=drop_psn_times(5, times=2))
    lp.post(SRC, req, 1, 60 * 4096)
    lp.run()
    assert resp.stats.naks_sent == 2 and req.stats.timeouts == 0
    assert lp.events(EVENT_MESSAGE_COMPLETED, DST)


def test_duplicates_are_reacked_after_a_lost_ack() -> None:
    left = [1]

    def fate(pkt: Packet, now: int) -> str | None:
        if pkt.kind == ACK and left[0]:
            left[0] -= 1
            return "drop"
        return None

    req, resp = pair(CFG)
    lp = loop_with(req, resp, fate=fate)
    lp.post(SRC, req, 1, 4 * 4096)
    lp.run()
    (retry,) = lp.events(EVENT_RETRY, SRC)
    assert retry.time_ps == CFG.timeout_ps  # first packet left at 0
    assert retry.detail() == {"retry": 1, "psn": 0, "timeout_ps": CFG.timeout_ps}
    # the first duplicate of the resent run is re-ACKed, and so is its ACK-request tail
    assert resp.stats.duplicates == 4 and resp.stats.acks_sent == 1 + 2
    assert req.stats.retx_sent == 4 and not req.failed
    assert len(lp.events(EVENT_MESSAGE_COMPLETED, DST)) == 1  # placed once, not twice
    assert resp.bytes_placed == 4 * 4096


@pytest.mark.parametrize("retry_cnt,timeout_exp", [(7, 2), (3, 1), (0, 5)])
def test_dead_path_errors_at_exactly_the_predicted_time(retry_cnt: int,
                                                        timeout_exp: int) -> None:
    cfg = RcConfig(retransmission="fixed", window_pkts=16, timeout_exp=timeout_exp, retry_cnt=retry_cnt)
    timeout = LOCAL_ACK_UNIT_PS << timeout_exp
    assert cfg.timeout_ps == timeout and cfg.error_after_ps == (retry_cnt + 1) * timeout
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=lambda p, now: "drop")
    lp.run(until_ps=3 * US)
    lp.post(SRC, req, 1, 1 << 20)  # first packet leaves at 3 us: the timer starts there
    lp.run()
    retries = lp.events(EVENT_RETRY, SRC)
    assert [e.time_ps for e in retries] == [3 * US + k * timeout for k in range(1, retry_cnt + 1)]
    assert [e.retry for e in retries] == list(range(1, retry_cnt + 1))
    (err,) = lp.events(EVENT_QP_ERROR, SRC)
    assert err.time_ps == 3 * US + (retry_cnt + 1) * timeout == req.error_time_ps
    assert "retr" in str(err.reason) and req.failed
    assert req.stats.timeouts == retry_cnt + 1 and req.stats.retries == retry_cnt
    # every retry resent the window from the oldest unacknowledged PSN
    assert all(p.psn < 16 for p in lp.data_sent())
    assert req.stats.data_sent == 16 * (retry_cnt + 1)
    # the error state is final: nothing more to send, no timer
    assert req.poll(lp.now, 1) is None and req.next_timer() is None
    assert not lp.events(EVENT_MESSAGE_COMPLETED)


def test_path_dies_mid_transfer_error_counts_from_last_progress() -> None:
    kill = 30 * US
    cfg = RcConfig(retransmission="fixed", window_pkts=24, timeout_exp=3, retry_cnt=7)
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=lambda p, now: "drop" if now >= kill else None)
    lp.post(SRC, req, 1, 10_000 * 4096)
    lp.run()
    progress = [t for t, p in lp.arrived if p.kind == ACK and p.dst == SRC]
    assert progress and max(progress) > kill  # ACKs in flight at the kill still arrive
    (err,) = lp.events(EVENT_QP_ERROR, SRC)
    assert err.time_ps == max(progress) + 8 * (LOCAL_ACK_UNIT_PS << 3)
    assert err.last_progress_ps == max(progress)
    assert 0 < resp.bytes_placed < 10_000 * 4096
    assert not lp.events(EVENT_MESSAGE_COMPLETED)


def test_psn_wraps_at_24_bits() -> None:
    cfg = RcConfig(retransmission="fixed", window_pkts=24, timeout_exp=4, initial_psn=PSN_MASK - 20)
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=drop_psn_times(3))  # a loss just after the wrap
    lp.post(SRC, req, 1, 100 * 4096)
    lp.run()
    first_pass = [p.psn for p in lp.data_sent() if not p.flags & FLAG_RETX]
    assert first_pass == [(PSN_MASK - 20 + i) & PSN_MASK for i in range(100)]
    assert PSN_MASK in first_pass and 0 in first_pass
    (nak,) = [p for _, p in lp.sent if p.kind == NACK]
    assert nak.psn == 3
    assert req.stats.timeouts == 0
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert done.checksum == expected(req.qpn, 1, 100 * 4096, 4096)


def test_healthy_qp_runs_at_line_rate() -> None:
    req, resp = pair(RcConfig(retransmission="fixed", window_pkts=24, ack_every=8))
    lp = loop_with(req, resp)
    length = 2000 * 4096
    lp.post(SRC, req, 1, length)
    lp.run()
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    ceiling = 100e9 * SPEC.goodput_ceiling_fraction()
    assert length * 8 / (done.time_ps / 1e12) >= 0.97 * ceiling


@pytest.mark.parametrize("ack_every,low,high", [(1, 0.75, 1.2), (8, 0.5, 1.1)])
def test_go_back_n_cost_is_about_p_times_window(ack_every: int, low: float,
                                                high: float) -> None:
    """Window-limited QP (RTT >> W packets): each loss costs about W resent packets, so
    resent/sent ~ p x W. Coalesced ACKs make the window lag the loss a little (fewer resent)."""
    window, p = 16, 0.01
    rng = random.Random(2024)

    def fate(pkt: Packet, now: int) -> str | None:
        return "drop" if pkt.kind == DATA and rng.random() < p else None

    cfg = RcConfig(retransmission="fixed", window_pkts=window, timeout_exp=6, ack_every=ack_every)
    req, resp = pair(cfg)
    lp = loop_with(req, resp, delay_ps=20 * US, fate=fate)
    lp.post(SRC, req, 1, 12_000 * 4096)
    lp.run()
    assert resp.bytes_placed == 12_000 * 4096
    ratio = req.stats.retx_sent / req.stats.data_sent
    assert low * p * window <= ratio <= high * p * window, ratio / (p * window)
    assert resp.stats.naks_sent >= 0.5 * p * req.stats.data_sent


@pytest.mark.parametrize("seed", range(6))
def test_random_faults_never_corrupt_or_duplicate(seed: int) -> None:
    """Drops of data and control, trims and CE marks together: every message still completes
    exactly once, byte-exact, and the unique byte count is exact."""
    rng = random.Random(seed)

    def fate(pkt: Packet, now: int) -> str | None:
        x = rng.random()
        if x < 0.04:
            return "drop"
        if x < 0.06 and pkt.kind == DATA:
            return "trim"
        if x < 0.10 and pkt.kind == DATA:
            return "ce"
        return None

    cfg = RcConfig(retransmission="fixed", window_pkts=20, timeout_exp=5, initial_psn=PSN_MASK - rng.randrange(300))
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=fate)
    sizes = [rng.randrange(1, 300_000) for _ in range(8)]
    for i, size in enumerate(sizes):
        lp.post(SRC, req, i, size)
    lp.run()
    assert not req.failed
    done = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert [e.msg_id for e in done] == list(range(len(sizes)))
    for i, (e, size) in enumerate(zip(done, sizes, strict=True)):
        assert e.checksum == expected(req.qpn, i, size, 4096)
    assert resp.bytes_placed == sum(sizes)
    assert req.pending_messages == 0 and req.outstanding == 0


def test_ecn_echo_cuts_the_window_at_most_once_per_window() -> None:
    marks = [0]

    def fate(pkt: Packet, now: int) -> str | None:
        if pkt.kind == DATA and now < 100 * US:
            marks[0] += 1
            return "ce"
        return None

    cfg = RcConfig(retransmission="fixed", window_pkts=32, min_window_pkts=2, timeout_exp=4, cc="window")
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=fate)
    lp.post(SRC, req, 1, 600 * 4096)
    lp.run(until_ps=100 * US)
    assert req.window < 4 and req.stats.ecn_cuts >= 3
    assert req.stats.ecn_cuts < resp.stats.acks_sent < marks[0]  # CNP-like ACKs, cuts fewer
    lp.run()
    assert lp.events(EVENT_MESSAGE_COMPLETED, DST) and req.stats.timeouts == 0
    assert req.window > 2  # additive increase once the marks stop


def test_ecn_cut_guard_direct() -> None:
    """Driven by hand: a cut, no second cut until data sent after it is acknowledged."""
    req, _ = pair(RcConfig(retransmission="fixed", window_pkts=32, min_window_pkts=2, cc="window"))
    req.post_write(0, 1, 100 * 4096)
    sent = [req.poll(0, 1) for _ in range(40)]
    assert sum(p is not None for p in sent) == 32  # window-limited

    def ack(psn: int, echo: bool) -> None:
        req.receive(1, Packet(ACK, DST, SRC, req.qpn, psn, flags=FLAG_ECN_ECHO if echo else 0))

    ack(0, True)
    assert req.window == 16 and req.stats.ecn_cuts == 1
    ack(1, True)
    ack(30, True)
    assert req.stats.ecn_cuts == 1  # still data from before the cut
    ack(31, True)  # everything sent before the cut is acknowledged: a new cut is allowed
    assert req.stats.ecn_cuts == 2 and 8 <= req.window < 9
    assert req.outstanding == 0


def test_poll_only_serves_its_own_plane_and_cheaply_when_idle() -> None:
    req, resp = pair(CFG, plane=2)
    assert req.poll(0, 2) is None  # nothing posted
    req.post_write(0, 1, 10_000)
    assert req.poll(0, 0) is None and req.poll(0, 3) is None
    pkt = req.poll(0, 2)
    assert pkt is not None and pkt.plane == 2 and pkt.da == host_address(SPEC, DST, 2)
    assert resp.poll(0, 2) is None  # a pure responder never has data
    assert req.next_timer() == CFG.timeout_ps  # timer started by the first send


def test_config_validation_and_infinite_timeout() -> None:
    with pytest.raises(ValueError):
        RcConfig(retransmission="fixed", retry_cnt=8)
    with pytest.raises(ValueError):
        RcConfig(retransmission="fixed", timeout_exp=32)
    with pytest.raises(ValueError):
        RcConfig(retransmission="fixed", window_pkts=4, min_window_pkts=8)
    req, _ = pair(RcConfig(retransmission="fixed", timeout_exp=0))  # verbs: 0 = wait forever
    req.post_write(0, 1, 100)
    assert req.poll(0, 1) is not None and req.next_timer() is None
    with pytest.raises(ValueError):
        req.post_write(0, 1, 100)  # same msg_id twice
    with pytest.raises(ValueError):
        req.post_write(0, 2, 0)


# ====================================================================== striping connection
def test_stripe_is_contiguous_and_balanced() -> None:
    assert stripe(10, 4) == [(0, 3), (3, 3), (6, 2), (8, 2)]
    assert stripe(2, 4) == [(0, 1), (1, 1), (2, 0), (2, 0)]
    for length in (1, 7, 4096, 1_000_003):
        parts = stripe(length, 8)
        assert sum(s for _, s in parts) == length
        assert all(o2 == o1 + s1 for (o1, s1), (o2, _) in pairwise(parts))
        assert max(s for _, s in parts) - min(s for _, s in parts) <= 1


def test_connection_stripes_over_every_plane_and_reassembles() -> None:
    conn = RcConnection(SPEC, SRC, DST, 100, qps_per_plane=2,
                        config=rc_config_for(SPEC, timeout_exp=4))
    assert [qp.plane for qp in conn.requesters] == [0, 1, 2, 3] * 2
    lp = Loop()
    lp.add_connection(conn)
    payload = random.Random(1).randbytes(1_000_001)
    chunks = conn.post_write(0, 1, len(payload), payload=payload)
    assert len(chunks) == 8 and sum(c[2] for c in chunks) == len(payload)
    conn.post_write(0, 2, 3 << 20)  # simulated bytes
    conn.post_write(0, 3, 3)  # fewer bytes than QPs: three chunks
    lp.kick()
    lp.run()
    done = {e.msg_id: e for e in conn.events if e.kind == EVENT_MESSAGE_COMPLETED}
    assert set(done) == {1, 2, 3} and all(e.ok for e in done.values())
    # the sender's CQE of each message: every chunk acknowledged, after it was placed
    acked = {e.msg_id: e for e in conn.events if e.kind == EVENT_SEND_COMPLETED}
    assert set(acked) == {1, 2, 3} and all(e.ok for e in acked.values())
    assert all(acked[m].time_ps >= done[m].time_ps for m in done)
    assert done[1].data == payload
    assert len(done[3].chunks) == 3
    assert conn.bytes_placed == len(payload) + (3 << 20) + 3 and conn.pending == 0
    # each QP kept to its own plane's port and to one T1
    for qp in conn.requesters:
        sent = lp.data_sent(qp.qpn)
        assert sent and {(p.plane, p.ev) for p in sent} == {(qp.plane, qp.ev)}
    # the NIC is used in parallel: all 4 ports finish at about the same time
    last = [max(t for t, p in lp.sent if p.kind == DATA and p.plane == k) for k in range(4)]
    assert max(last) - min(last) < 0.1 * max(last)


def test_one_qp_error_fails_the_whole_connection() -> None:
    cfg = rc_config_for(SPEC, timeout_exp=2)
    conn = RcConnection(SPEC, SRC, DST, 200, config=cfg)
    lp = Loop(fate=lambda p, now: "drop" if p.plane == 2 else None)
    lp.add_connection(conn)
    conn.post_write(0, 1, 8 << 20)
    lp.kick()
    lp.run()
    (failure,) = [e for e in conn.events if e.kind == EVENT_CONNECTION_FAILED]
    assert failure.time_ps == cfg.error_after_ps == 7 * cfg.timeout_ps  # type: ignore[operator]
    assert failure.qpn == 202 and failure.failed_messages == [1]
    assert failure.aborted_qpns == [200, 201, 203]
    assert conn.failed and conn.failed_messages == [1] and 1 not in conn.completed
    assert not [e for e in conn.events if e.kind == EVENT_MESSAGE_COMPLETED]
    # exactly one QP error (the others were aborted by the "job", not by the transport)
    assert [e.qpn for e in lp.events(EVENT_QP_ERROR)] == [202]
    assert all(qp.failed for _, qp in conn.endpoints())
    # the healthy planes placed data until the abort, plane 2 placed nothing
    assert conn.responders[2].bytes_placed == 0
    assert all(conn.responders[i].bytes_placed > 0 for i in (0, 1, 3))
    assert conn.post_write(lp.now, 2, 100) == [] and conn.failed_messages == [1, 2]


# ====================================================================== ECMP hashing
def test_ecmp_t1_is_deterministic_and_in_range() -> None:
    spec = FabricSpec(planes=2, hosts=64, hosts_per_t0=16, t1_per_plane=16)
    cases = [(0, 40, 1, 0), (3, 60, 9, 1), (17, 2, 1000, 1)]
    values = [ecmp_t1(spec, *c) for c in cases]
    assert values == [ecmp_t1(spec, *c) for c in cases]
    assert all(0 <= v < 16 for v in values)
    code = ("from topology.spec import FabricSpec; "
            "from mrc.stack.rc_connection import ecmp_t1; "
            "s = FabricSpec(planes=2, hosts=64, hosts_per_t0=16, t1_per_plane=16); "
            f"print([ecmp_t1(s, *c) for c in {cases!r}])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == str(values)


def test_udp_source_port_from_the_qpns() -> None:
    """Linux's recipe (rdma_calc_flow_label, rdma_flow_label_to_udp_sport), checked on
    values worked by hand: the product folded to 20 bits, then to 14 bits over 0xC000."""
    # 7 x 7 = 49: no high bits to fold; label 49 -> port 0xC000 | 49
    assert udp_source_port(7, 7) == ROCE_SPORT_MIN | 49
    # 0x1000 x 0x1000 = 2^24: label = (2^24 ^ 2^4) & 0xFFFFF = 0x10; port 0xC010
    assert udp_source_port(0x1000, 0x1000) == 0xC010
    # label 0xFC000 (top six bits): folds onto the low bits as 0x3F
    assert udp_source_port(0xFC000, 1) == ROCE_SPORT_MIN | 0x3F
    ports = {udp_source_port(q, q) for q in range(2, 4098)}
    assert all(ROCE_SPORT_MIN <= port <= 0xFFFF for port in ports) and len(ports) > 3000


def test_pair_under_one_t0_and_config_for_fabric() -> None:
    req, resp = rc_qp_pair(SPEC, 0, 1, 5, 3)  # hosts 0 and 1 share T0 0
    assert req.address == host_address(SPEC, 1, 3) and resp.address == host_address(SPEC, 0, 3)
    assert ecmp_t1(SPEC, 0, 1, 5, 3) == 0  # no T1 between them
    cfg = rc_config_for(SPEC, cc="window")
    assert cfg.mtu == SPEC.mtu_bytes
    assert 15 < bdp_packets(SPEC) < 40
    assert cfg.window_pkts == math.ceil(bdp_packets(SPEC)) + cfg.ack_every + 2
    # as deployed: DCQCN's rate limits (the window is only a cap), on the lossless priority
    cfg = rc_config_for(SPEC)
    assert cfg.cc == "dcqcn" and cfg.window_pkts == DCQCN_WINDOW_PKTS
    assert cfg.priority == SPEC.pfc_priority and cfg.line_rate_gbps == SPEC.link_gbps
    assert rc_config_for(SPEC.with_(pfc=False)).priority == 0


# ====================================================================== the ACK stall (issue 15)
def _ce_fate(seed: int, p_mark: float) -> Fate:
    """CE-mark DATA packets at random (the fabric loses nothing)."""
    rng = random.Random(seed)

    def fate(pkt: Packet, now: int) -> str | None:
        return "ce" if pkt.kind == DATA and rng.random() < p_mark else None

    return fate


def test_window_cut_below_the_ack_batch_is_acknowledged_by_the_timer() -> None:
    """The stall of issue 15: ECN cuts shrink the window below ``ack_every`` after the last
    packets left without an ACK request, so the responder's batch never fills. Without the
    coalescing timer the requester waits for its local ACK timeout although every packet
    arrived; with it (the default) the transfer never times out."""
    base = dict(window_pkts=21, ack_every=2, timeout_exp=10, min_window_pkts=1, cc="window")
    stalled_req, stalled_resp = pair(RcConfig(retransmission="fixed", **base, ack_timer_us=None))
    lp = loop_with(stalled_req, stalled_resp, fate=_ce_fate(15 * 7, 0.261))
    lp.post(SRC, stalled_req, 1, 300 * 4096)
    lp.run()
    assert stalled_req.stats.timeouts >= 1 and stalled_resp.stats.dropped_oos == 0
    assert stalled_resp.stats.acks_on_timer == 0

    req, resp = pair(RcConfig(retransmission="fixed", **base))
    assert req.config.ack_timer_ps == 4 * US
    lp = loop_with(req, resp, fate=_ce_fate(15 * 7, 0.261))
    lp.post(SRC, req, 1, 300 * 4096)
    lp.run()
    (done,) = lp.events(EVENT_MESSAGE_COMPLETED, DST)
    assert req.stats.timeouts == 0 and req.stats.retx_sent == 0
    assert resp.stats.acks_on_timer >= 1
    assert done.time_ps < req.config.timeout_ps  # type: ignore[operator]


def test_small_window_asks_for_an_ack_on_every_packet() -> None:
    req, _ = pair(RcConfig(retransmission="fixed", window_pkts=6, ack_every=8, min_window_pkts=1))
    req.post_write(0, 1, 20 * 4096)
    sent = [req.poll(0, 1) for _ in range(6)]
    assert all(p is not None and p.flags & FLAG_ACK_REQ for p in sent)
    req, _ = pair(RcConfig(retransmission="fixed", window_pkts=16, ack_every=8))
    req.post_write(0, 1, 20 * 4096)
    sent = [req.poll(0, 1) for _ in range(16)]
    asks = [i for i, p in enumerate(sent) if p is not None and p.flags & FLAG_ACK_REQ]
    assert asks == [15]  # only the packet that fills the window


def test_coalescing_timer_fires_once_per_unacknowledged_run() -> None:
    """Driven by hand: one packet, no request: the ACK leaves exactly ack_timer later."""
    req, resp = pair(RcConfig(retransmission="fixed", window_pkts=16, ack_every=8, ack_timer_us=3.0))
    req.post_write(0, 1, 3 * 4096)
    first = req.poll(0, 1)
    assert first is not None and not first.flags & FLAG_ACK_REQ
    resp.receive(5 * US, first)
    assert resp.next_timer() == 8 * US and not resp.take_control()
    resp.handle_timer(8 * US - 1)
    assert not resp.take_control()
    resp.handle_timer(8 * US)
    (ack,) = resp.take_control()
    assert ack.kind == ACK and ack.psn == first.psn and resp.stats.acks_on_timer == 1
    assert resp.next_timer() is None


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cc=st.sampled_from(["window", "dcqcn"]), window=st.integers(2, 48), ack_every=st.integers(1, 16),
       p_mark=st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6]),
       seed=st.integers(0, 2**16), delay_us=st.integers(1, 20),
       sizes=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 4095)), min_size=1,
                      max_size=4))
def test_no_timeout_when_the_fabric_delivers_everything(cc: str, window: int, ack_every: int,
                                                         p_mark: float, seed: int,
                                                         delay_us: int,
                                                         sizes: list[tuple[int, int]]
                                                         ) -> None:
    """Property: whatever the window, ACK batch, CE marks and message sizes, a QP whose
    packets all arrive never waits for its local ACK timeout: no timeout, no retry, no
    resend, every message placed once."""
    cfg = RcConfig(retransmission="fixed", window_pkts=window, ack_every=ack_every, min_window_pkts=1,
                   timeout_exp=14, cc=cc)
    req, resp = pair(cfg)
    lp = loop_with(req, resp, delay_ps=delay_us * US, fate=_ce_fate(seed, p_mark))
    for i, (pkts, short) in enumerate(sizes):
        lp.post(SRC, req, i, max(1, pkts * 4096 - short))
    lp.run()
    assert req.stats.timeouts == 0 and req.stats.retx_sent == 0
    assert [e.msg_id for e in lp.events(EVENT_MESSAGE_COMPLETED, DST)] == \
        list(range(len(sizes)))
    assert req.outstanding == 0 and req.pending_messages == 0


# ====================================================================== issue 36
#: a ladder that starts below the lab's 65.5 us timeout (exponent 4): 16.384, 32.768 us
ADP16 = {"adp_initial_timeout_us": 16.384, "adp_range_low_us": 32.768}


def test_adaptive_retransmission_ladder_to_the_picosecond() -> None:
    """ConnectX's adaptive retransmission (the default): on a dead path the expiries fall at
    16.384 us (the first timeout, once), then 32.768 us later, then at the QP's own timeout
    (65.536 us, exponent 4) until the total budget, 3 x 65.536 us after the last progress,
    where the QP errors: written out, not recomputed from retry_schedule."""
    cfg = RcConfig(window_pkts=16, timeout_exp=4, retry_cnt=3, **ADP16)
    assert cfg.retransmission == "adaptive" and cfg.error_after_ps == 196_608_000
    req, resp = pair(cfg)
    lp = loop_with(req, resp, fate=lambda p, now: "drop")
    lp.run(until_ps=3 * US)
    lp.post(SRC, req, 1, 1 << 20)  # the first packet leaves at 3 us: the timer starts there
    lp.run()
    retries = lp.events(EVENT_RETRY, SRC)
    assert [e.time_ps for e in retries] == [3_000_000 + t for t in (
        16_384_000, 49_152_000, 114_688_000, 180_224_000)]
    assert [e.timeout_ps for e in retries] == [16_384_000, 32_768_000, 65_536_000,  # type: ignore[attr-defined]
                                               65_536_000]
    (err,) = lp.events(EVENT_QP_ERROR, SRC)
    assert err.time_ps == 3_000_000 + 196_608_000 == req.error_time_ps
    assert "RETRY_EXC_ERR" in str(err.reason)
    assert req.stats.retries == 4 and req.stats.timeouts == 5


def test_adaptive_schedule_by_starting_level_and_the_fixed_one() -> None:
    """retry_schedule: per starting level, when each expiry and the error fall (ps)."""
    ladder, offsets, err = retry_schedule(RcConfig(timeout_exp=4, retry_cnt=3, **ADP16))
    assert ladder == (16_384_000, 32_768_000, 65_536_000)
    assert offsets == ((16_384_000, 49_152_000, 114_688_000, 180_224_000),
                       (32_768_000, 98_304_000, 163_840_000),
                       (65_536_000, 131_072_000))
    assert err == 196_608_000
    ladder, offsets, err = retry_schedule(RcConfig(timeout_exp=4, retry_cnt=3,
                                                   adp_retries_per_step=2, **ADP16))
    assert ladder == (16_384_000, 32_768_000, 32_768_000, 65_536_000)
    ladder, offsets, err = retry_schedule(RcConfig(retransmission="fixed", timeout_exp=4,
                                                   retry_cnt=3))
    assert ladder == (65_536_000,) and err == 4 * 65_536_000
    assert offsets == ((65_536_000, 131_072_000, 196_608_000),)
    # the defaults (exponent 20, 7 retries, NCCL's): 131.072 us, 262.144 us, doubling to
    # 4.29 s; the error at 7 x 4.29 s; the lab's exponent 4 caps the whole ladder at 65.5 us
    ladder, offsets, err = retry_schedule(RcConfig())
    assert ladder[:3] == (131_072_000, 262_144_000, 524_288_000)
    assert ladder[-1] == LOCAL_ACK_UNIT_PS << 20 and len(ladder) == 16
    assert err == 7 * (LOCAL_ACK_UNIT_PS << 20)
    assert retry_schedule(RcConfig(timeout_exp=4, retry_cnt=3))[:2] == (
        (65_536_000, 65_536_000), ((65_536_000, 131_072_000), (65_536_000, 131_072_000)))


def test_progress_lowers_the_next_episode_by_adp_dec_steps() -> None:
    """Two expiries reach level 2; progress takes adp_dec_steps (1) off: the next episode
    starts at level 1 (32.768 us); with adp_dec_steps 0 it would start at level 2."""
    for dec, level in ((1, 1), (0, 2), (5, 0)):
        req, resp = pair(RcConfig(window_pkts=16, timeout_exp=4, retry_cnt=3,
                                  adp_dec_steps=dec, **ADP16))
        sent: list[Packet] = []

        def fate(p: Packet, now: int, sent: list[Packet] = sent) -> str | None:
            if p.kind == DATA:
                sent.append(p)
                return "drop" if len(sent) <= 16 else None
            return None

        lp = loop_with(req, resp, fate=fate)
        lp.post(SRC, req, 1, 8 * 4096)  # 8 packets: two rounds dropped, the third lands
        lp.run()
        assert req.stats.retries == 2 and not req.failed
        assert req.requester._lvl == level


def test_slow_restart_cuts_the_rate_on_a_timeout() -> None:
    req, resp = pair(RcConfig(window_pkts=16, timeout_exp=4, retry_cnt=3, slow_restart=True,
                              **ADP16))
    rp = req.requester.rp
    assert rp is not None and not rp.limited
    lp = loop_with(req, resp, fate=lambda p, now: "drop" if p.kind == DATA
                   and not p.flags & FLAG_RETX else None)  # every first copy
    lp.post(SRC, req, 1, 8 * 4096)
    lp.run(until_ps=16_384_000)  # the first expiry, 16.384 us after the first packet left
    assert req.stats.retries == 1 and rp.cuts == 0
    assert rp.limited and rp.rate == rp.target == pytest.approx(rp.max_bps / 2)  # 50 % cut
    lp.run()
    assert not req.failed and req.pending_messages == 0


def test_rc_packets_are_roce_v2_sized() -> None:
    """RoCEv2's own packet: RETH on the first packet of a WRITE only, no MRC headers;
    68-byte ACKs on the QP's priority (the data class)."""
    req, resp = pair(RcConfig(window_pkts=16, priority=3))
    lp = loop_with(req, resp)
    lp.post(SRC, req, 1, 3 * 4096 - 100)
    lp.run()
    sizes = [(p.offset, p.length, p.size) for p in lp.data_sent()]
    assert sizes == [(0, 4096, 60 + 16 + 4 + 4096), (4096, 4096, 64 + 4096),
                     (8192, 3996, 64 + 3996)]
    acks = [p for _, p in lp.sent if p.kind == ACK]
    assert acks and all(a.size == 68 and a.prio == 3 and a.flags & FLAG_ROCE for a in acks)
    assert all(p.flags & FLAG_ROCE for p in lp.data_sent())
    assert all(data_class(p.kind, p.flags) for _, p in lp.sent)
