"""Congestion control: the NSCC-like quadrants, and a one-bottleneck packet model that
checks the two things the window is for: one flow fills an 800 Gb/s NIC, and an 8-to-1
incast keeps the bottleneck queue bounded."""

from __future__ import annotations

from collections import deque

import pytest

from mrc.packet import DATA_HEADER_BYTES
from mrc.sim.engine import Simulator
from mrc.transport.mrc.cc import DELAY_EWMA_GAIN, FixedWindow, Nscc, make_cc
from mrc.transport.mrc.config import CcConfig
from topology.spec import ETHERNET_OVERHEAD_BYTES, preset

US = 1_000_000
BASE = 8 * US
#: the quadrants one ACK at a time: no batching, no eta, no quick adapt
CFG = CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000, target_delay=6000,
               disable_qa=True, adjust_bytes_threshold=0, eta=0)


def test_fixed_window_never_moves() -> None:
    cc = make_cc(CcConfig(algorithm="fixed", fixed_window_bytes=12345))
    assert isinstance(cc, FixedWindow) and cc.window == 12345
    cc.on_ack(0, 4096, 50 * US, True, 1)
    cc.on_trim(1, 1)
    cc.on_loss(2, 1)
    assert cc.window == 12345
    assert make_cc(CcConfig(algorithm="fixed")).window == CcConfig().bdp_bytes


def test_defaults_follow_the_bdp() -> None:
    cc = Nscc(CFG)
    bdp = 800e9 / 8 * 8e-6
    assert cc.window == int(bdp) and cc.max_window == int(bdp) * 3 // 2
    assert CcConfig(base_rtt=12_000).target_ps == 9 * US


def test_no_ecn_low_delay_is_proportional_increase() -> None:
    cc = Nscc(CFG)
    cc.window = 100_000
    cc.on_ack(0, 10_000, BASE, False, 0)  # zero queueing delay: +pi_gain x acked
    assert cc.window == 110_000
    cc.on_ack(1, 10_000, BASE + 3 * US, False, 0)  # half the target: half as much
    assert cc.window == 115_000


def test_no_ecn_high_delay_is_fair_increase() -> None:
    cc = Nscc(CFG)
    cc.window = 100_000
    want = 100_000.0
    for i in range(25):  # one window's worth of ACKs: about + fi (5 MTU x BDP / 150 KB, UEC)
        cc.on_ack(i, 4_000, BASE + 10 * US, False, 0)
        want += CFG.fi_bytes * 4_000 / int(want)
    assert CFG.fi_bytes == pytest.approx(5 * 4096 * CFG.bdp_bytes / 150_000)
    assert abs(cc.window - want) <= 25  # fi x acked / window per ACK (whole bytes applied)
    assert 100_000 + 0.5 * CFG.fi_bytes < cc.window < 100_000 + CFG.fi_bytes


def test_ecn_high_delay_decreases_once_per_window_of_data_never_below_half() -> None:
    cc = Nscc(CFG)
    cc.window = 400_000
    rtt = BASE + 100 * US  # huge sustained delay: the decrease is capped at one half
    cc.avg_delay = 100 * US
    cc.on_ack(rtt, 4096, rtt, True, 0)  # a packet sent at 0
    assert cc.window == 200_000
    # marks on packets sent before that decrease report the window it answered: however
    # late they come back (a long queue), no second cut
    cc.on_ack(2 * rtt - 1, 4096, rtt, True, 0)
    cc.on_ack(3 * rtt, 4096, 2 * rtt + 1, True, 0)
    assert cc.window == 200_000 and cc.decreases == 1
    cc.on_ack(2 * rtt, 4096, rtt, True, 0)  # sent when the decrease was made: a new window
    assert cc.window == 100_000
    # a moderate average delay takes less than half: the cut is sized by the average
    cc = Nscc(CFG)
    cc.window = 400_000
    cc.avg_delay = 8 * US
    cc.on_ack(0, 4096, BASE + 8 * US, True, 0)
    avg = 8 * US + DELAY_EWMA_GAIN * (8 * US - 8 * US)
    assert cc.window == int(400_000 * (1 - 0.8 * (avg - 6 * US) / avg))
    assert 200_000 < cc.window < 400_000


def test_decrease_is_sized_by_the_smoothed_delay_not_one_sample() -> None:
    """One marked ACK from a long path (its delay far above the target) while the QP's
    delay has been low: no cut, the EWMA has only moved by its gain. Sustained high delay:
    the average climbs past the target and the next mark cuts, by the average's excess."""
    cc = Nscc(CFG)
    cc.window = 400_000
    cc.on_ack(0, 4096, BASE + 60 * US, True, 0)
    assert cc.window == 400_000 and cc.decreases == 0
    assert cc.avg_delay == pytest.approx(DELAY_EWMA_GAIN * 60 * US)
    now = 0
    while cc.avg_delay <= 6 * US:  # unmarked ACKs at 12 us of delay (fair increase)
        now += 1
        cc.on_ack(now, 4096, BASE + 12 * US, False, 0)
    grown = cc.window
    cc.on_ack(now + 1, 4096, BASE + 12 * US, True, 0)
    avg = cc.avg_delay
    assert 6 * US < avg < 12 * US and cc.decreases == 1
    assert cc.window == int(grown * (1 - 0.8 * (avg - 6 * US) / avg))
    # a trim is a delay sample of one unloaded round trip
    before = cc.avg_delay
    cc.on_trim(now + 2, 0)
    assert cc.avg_delay == pytest.approx(before + DELAY_EWMA_GAIN * (BASE - before))


def test_ecn_low_delay_leaves_the_window_to_load_balancing() -> None:
    cc = Nscc(CFG)
    cc.window = 100_000
    cc.on_ack(0, 4096, BASE + 1 * US, True, 0)
    assert cc.window == 100_000 and cc.decreases == 0


def test_trim_halves_once_per_rtt_and_loss_is_not_congestion() -> None:
    cc = Nscc(CFG)
    cc.window = 400_000
    cc.on_trim(0, 3)
    cc.on_trim(1, 3)
    assert cc.window == 200_000 and cc.trims == 2
    cc.on_loss(2 * BASE, 3)
    assert cc.window == 200_000
    lossy = Nscc(CcConfig(base_rtt=BASE // 1000, loss_md_factor=0.5))
    lossy.window = 400_000
    lossy.on_loss(0, 1)
    assert lossy.window == 200_000


def test_window_is_clamped() -> None:
    cc = Nscc(CFG)
    for i in range(1000):
        cc.on_ack(i, 1 << 20, BASE, False, 0)
    assert cc.window == cc.max_window
    for i in range(50):
        cc.on_trim(i * 1000 * US, 0)
    assert cc.window == CFG.min_window_bytes


def test_quick_adapt_jumps_to_the_delivered_bytes() -> None:
    cc = Nscc(CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000, target_delay=6000))
    start = cc.window
    interval = BASE + 6 * US
    cc.on_ack(0, 4096, BASE, False, 0)
    cc.on_trim(1, 0)  # halves the window and arms quick adapt
    assert cc.window == start // 2
    # ACKs of packets sent before the trim's decrease measure the old window: no interval
    cc.on_ack(2, 30_000, BASE, False, 0)
    cc.on_ack(BASE, 4096, BASE, False, 0)  # sent at 0
    assert cc.quick_adapts == 0
    t = 1 + BASE  # packets sent since come back: the first opens the interval
    cc.on_ack(t, 4096, BASE, False, 0)
    cc.on_ack(t + 1, 30_000, BASE, False, 0)
    cc.on_ack(t + interval + 5, 1, BASE, False, 0)  # interval over: 4096 + 30000 delivered
    assert cc.window == 30_000 + 4096 < start // 2
    assert cc.quick_adapts == 1


def test_the_pause_after_a_decrease_is_not_a_delivery_shortfall() -> None:
    """A cut from W to W/2 stops the sender until half the window is acknowledged, and an
    RTT later that pause is a gap in its ACKs. An interval spanning the gap delivers little
    and quick adapt would cut the window to nearly nothing (in an 8-to-1 incast, the flow
    that drew it finished last); intervals count only ACKs of packets sent after the last
    decrease."""
    cc = Nscc(CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000, target_delay=6000))
    cc.window = 400_000
    cc.avg_delay = 30 * US
    rtt = BASE + 40 * US  # far above the quick-adapt threshold: every interval is armed
    cc.on_ack(0, 4096, rtt, False, 0)  # opens an interval
    cc.on_ack(1, 4096, rtt, True, 0)  # the multiplicative decrease
    assert cc.decreases == 1
    cut = cc.window
    for i in range(1, 40):  # the rest of the old window comes back, slowly...
        cc.on_ack(1 + i * US, 4096, rtt, False, 0)
    resume = 1 + 20 * US  # ...and the sender was paused for 20 us
    now = resume + rtt
    while now < resume + rtt + 3 * (BASE + 6 * US):
        cc.on_ack(now, 4096, rtt, False, 0)
        now += US // 10
    assert cc.quick_adapts == 0 and cc.window >= cut


def test_increases_apply_in_batches_of_adjust_bytes_or_period() -> None:
    """mrc_ctl_cc_nscc_cfg's adjust thresholds: increases accumulate and apply after
    adjust_bytes_threshold acked bytes or adjust_period_threshold, with eta added each time
    the delay is below target."""
    cfg = CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000, target_delay=6000,
                   disable_qa=True, adjust_bytes_threshold=32_768, eta=1000)
    cc = Nscc(cfg)
    cc.window = 100_000
    cc._adj_start = 0
    for i in range(7):  # 7 x 4096 < 32768: nothing applied yet
        cc.on_ack(i, 4096, BASE, False, 0)
    assert cc.window == 100_000 and cc.adjustments == 0
    cc.on_ack(7, 4096, BASE, False, 0)  # the 8th: 8 x 4096 x pi_gain + eta
    assert cc.window == 100_000 + 8 * 4096 + 1000 and cc.adjustments == 1
    cc.on_ack(7 + BASE, 1, BASE, False, 0)  # a base RTT later: the period fires
    assert cc.adjustments == 2


def test_rate_hints_set_the_windows() -> None:
    """NCCL_MRC_CC_INIT/MIN/MAX_RATE (read as Mb/s) become windows of rate x base RTT."""
    cfg = CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000, init_rate_mbps=200_000,
                   min_rate_mbps=50_000, max_rate_mbps=400_000)
    cc = Nscc(cfg)
    assert cc.window == 200_000 * 10**6 // 8 * 8 // 10**6  # 200 Gb/s x 8 us = 200 KB
    assert cc.min_window == 50_000 // 8 * 8 * 1000 // 1000
    assert cc.max_window == 400_000 * 1000 // 1000


def test_base_rtt_is_learned_downwards_only() -> None:
    cc = Nscc(CFG)
    cc.on_ack(0, 1, BASE - 2 * US, False, 0)
    assert cc.base_rtt == BASE - 2 * US
    cc.on_ack(1, 1, BASE + 50 * US, False, 0)
    assert cc.base_rtt == BASE - 2 * US


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        CcConfig(algorithm="cubic")
    with pytest.raises(ValueError):
        CcConfig(gamma=0)
    with pytest.raises(ValueError):
        CcConfig(max_md_jump=1)
    with pytest.raises(ValueError):
        CcConfig(loss_md_factor=0.3)
    with pytest.raises(ValueError):
        CcConfig(init_window_bytes=0)


def test_base_rtt_of_a_fabric() -> None:
    spec = preset("lab-8plane")
    rtt = spec.base_rtt_ps()
    # 2 x (4 links x 500 ns + 3 switches x 400 ns) of flight plus serialization
    assert 2 * 3_200 * 1000 < rtt < 2 * 3_200 * 1000 + 2 * US


# ====================================================================== bottleneck model
class Bottleneck:
    """Senders at ``nic_gbps`` each, one shared 800 Gb/s queue with ECN at ``ecn_bytes`` and
    trimming above ``buffer_bytes``, per-packet ACKs; base RTT ``BASE``."""

    MTU = 4096

    def __init__(self, senders: int, cfg: CcConfig, *, ecn_bytes: int = 8 * 128 * 1024,
                 buffer_bytes: int = 8 * 512 * 1024) -> None:
        self.sim = Simulator()
        self.ccs = [Nscc(cfg) for _ in range(senders)]
        wire = (DATA_HEADER_BYTES + self.MTU + ETHERNET_OVERHEAD_BYTES) * 8
        self.ser = wire * 1_000_000_000_000 // int(800e9)  # same rate for NICs and bottleneck
        self.ecn_bytes = ecn_bytes
        self.buffer_bytes = buffer_bytes
        self.inflight = [0] * senders
        self.nic_busy = [False] * senders
        self.queue: deque[tuple[int, int, bool]] = deque()  # (sender, sent_ps, ecn)
        self.qbytes = 0
        self.serving = False
        self.delivered: list[tuple[int, int, int]] = []  # (time, bytes, sender) received
        self.samples: list[tuple[int, int]] = []
        self.trims = 0
        self.trim_times: list[int] = []

    def run(self, until: int) -> None:
        for i in range(len(self.ccs)):
            self.sim.at(0, self._try_send, i)
        self.sim.at(0, self._sample, None)
        self.sim.run(until)

    def _sample(self, _: object) -> None:
        self.samples.append((self.sim.now, self.qbytes))
        self.sim.after(1 * US, self._sample, None)

    def _try_send(self, i: int) -> None:
        if self.nic_busy[i] or self.inflight[i] >= self.ccs[i].window:
            return
        self.nic_busy[i] = True
        self.inflight[i] += self.MTU
        self.sim.after(self.ser, self._nic_free, i)
        self.sim.after(self.ser + BASE // 2 - self.ser, self._arrive, (i, self.sim.now))

    def _nic_free(self, i: int) -> None:
        self.nic_busy[i] = False
        self._try_send(i)

    def _arrive(self, item: tuple[int, int]) -> None:
        i, sent = item
        if self.qbytes + self.MTU > self.buffer_bytes:
            self.trims += 1
            self.trim_times.append(self.sim.now)
            self.sim.after(BASE // 2, self._nack, i)  # header on the priority queue
            return
        ecn = self.qbytes > self.ecn_bytes
        self.queue.append((i, sent, ecn))
        self.qbytes += self.MTU
        if not self.serving:
            self._serve(None)

    def _serve(self, _: object) -> None:
        if not self.queue:
            self.serving = False
            return
        self.serving = True
        i, sent, ecn = self.queue.popleft()
        self.qbytes -= self.MTU
        self.delivered.append((self.sim.now + self.ser, self.MTU, i))
        self.sim.after(self.ser + BASE // 2, self._ack, (i, sent, ecn))
        self.sim.after(self.ser, self._serve, None)

    def _ack(self, item: tuple[int, int, bool]) -> None:
        i, sent, ecn = item
        now = self.sim.now
        self.inflight[i] -= self.MTU
        self.ccs[i].on_ack(now, self.MTU, now - sent, ecn, 0)
        self._try_send(i)

    def _nack(self, i: int) -> None:
        self.inflight[i] -= self.MTU  # resent as the next packet
        self.ccs[i].on_trim(self.sim.now, 0)
        self._try_send(i)

    def goodput_fraction(self, start: int, end: int) -> float:
        got = sum(b for t, b, _ in self.delivered if start <= t < end)
        return got / ((end - start) * 800e9 / 8 / 1e12 * self.MTU
                      / (DATA_HEADER_BYTES + self.MTU + ETHERNET_OVERHEAD_BYTES))


def test_one_flow_fills_an_800g_nic() -> None:
    cfg = CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000)
    net = Bottleneck(1, cfg)
    net.run(200 * US)
    assert net.goodput_fraction(20 * US, 200 * US) > 0.99
    assert net.trims == 0
    assert max(q for _, q in net.samples) < 600 * 1024  # the 1.5 x BDP headroom, at most


def test_incast_8_to_1_keeps_the_queue_bounded() -> None:
    cfg = CcConfig(line_rate_gbps=800.0, base_rtt=BASE // 1000)
    net = Bottleneck(8, cfg)
    end = 500 * US
    net.run(end)
    settle = 100 * US
    late = [q for t, q in net.samples if t >= settle]
    assert net.goodput_fraction(settle, end) > 0.95
    assert max(late) < net.buffer_bytes * 3 // 4  # bounded well inside the buffer
    assert sum(late) / len(late) < 2 * net.ecn_bytes
    assert not [t for t in net.trim_times if t >= settle]  # trims only in the first RTTs
    # nobody starved: what each sender got after the settling (a window is one instant; the
    # bytes delivered are the share)
    got = [sum(b for t, b, s in net.delivered if t >= settle and s == i) for i in range(8)]
    assert max(got) < 4 * min(got)
