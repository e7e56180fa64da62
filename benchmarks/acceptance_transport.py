"""Acceptance measurements for the MRC and RoCE RC transports (issue 3), on small fabrics.

Every scenario runs the real simulator through ``SimStack`` and returns a result dataclass;
``tests/test_acceptance_transport.py`` and ``tests/test_acceptance_properties.py`` assert on the
same functions, and this script prints the numbers each acceptance item asks for::

    python benchmarks/acceptance_transport.py [--json]

Conventions used throughout:

* Goodput is unique payload bytes placed at receivers (the SimStack recorder), in Gb/s; the
  payload ceiling of the wire format is printed next to it.
* RC runs with a lab timeout (``RC_LAB``: local ACK timeout 4.096 us x 2^3 = 32.8 us,
  retry_cnt 7), so a QP on a dead path errors 8 x 32.8 = 262 us after its last progress,
  within the run. MRC runs with its defaults unless a scenario says otherwise.
* Bulk-transfer workloads keep ``STREAM_DEPTH`` 1 MB WRITEs outstanding per connection, like
  ``ib_write_bw`` (perftest keeps 128 in flight by default).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

if __name__ == "__main__":  # run as a script: this checkout's mrc (tests import the installed one)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mrc.packet import ACK, NACK
from mrc.sim import faults
from mrc.sim.engine import PS_PER_US, us
from mrc.stack.rc_connection import bdp_packets
from mrc.stack.stack import Connection, MrcConnection, RcConnectionAdapter, SimStack
from mrc.stack.transport_params import mrc_config
from mrc.transport.base import ASSUMED_BAD, GOOD
from topology import preset
from topology.spec import FabricSpec

MB = 1 << 20
#: RC lab parameters: 32.8 us local ACK timeout, 7 retries (error 262 us after last progress).
RC_LAB: dict[str, Any] = {"timeout_exp": 3}
#: 1 MB WRITEs kept outstanding per connection by the bulk-transfer workloads.
STREAM_DEPTH = 32


def transport_params(kind: str) -> dict[str, Any]:
    """The lab parameters a scenario opens ``kind`` connections with."""
    return dict(RC_LAB) if kind == "rc" else {}


# ====================================================================== workload helpers
class Writes:
    """The WRITEs posted on one connection and their completions ``(time_ps, ok)``."""

    def __init__(self, stack: SimStack, conn: Connection) -> None:
        self.stack = stack
        self.conn = conn
        self.sizes: dict[int, int] = {}
        self.done: dict[int, tuple[int, bool]] = {}
        self.placed: dict[int, tuple[int, bool]] = {}  # at the receiver (before the ACK)
        self.on_all_done: Callable[[], None] | None = None
        self._stream_until: int | None = None
        self._stream_size = 0

    def post(self, size: int) -> int:
        """Post one WRITE now."""
        index = len(self.sizes)
        self.sizes[index] = size
        self.conn.write(self.stack.sim.now, size, functools.partial(self._complete, index),
                        on_placed=functools.partial(self._placed, index))
        return index

    def post_at(self, time_ps: int, size: int) -> None:
        def post(_: object) -> None:
            self.post(size)

        self.stack.sim.at(time_ps, post)

    def stream(self, size: int = MB, depth: int = STREAM_DEPTH,
               until_ps: int | None = None) -> None:
        """Keep ``depth`` WRITEs of ``size`` outstanding (until ``until_ps`` or a failure)."""
        self._stream_until = until_ps if until_ps is not None else 1 << 62
        self._stream_size = size
        for _ in range(depth):
            self.post(size)

    def _placed(self, index: int, now: int, ok: bool) -> None:
        self.placed[index] = (now, ok)

    def _complete(self, index: int, now: int, ok: bool) -> None:
        self.done[index] = (now, ok)
        if (self._stream_until is not None and not self.conn.failed
                and self.stack.sim.now < self._stream_until):
            self.post(self._stream_size)
        elif self.finished and self.on_all_done is not None:
            self.on_all_done()

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.sizes)

    @property
    def all_ok(self) -> bool:
        return self.finished and all(ok for _, ok in self.done.values())

    @property
    def bytes_posted(self) -> int:
        return sum(self.sizes.values())

    @property
    def bytes_ok(self) -> int:
        return sum(self.sizes[i] for i, (_, ok) in self.done.items() if ok)

    @property
    def last_completion_ps(self) -> int:
        """The last sender CQE: the last byte placed and its ACK back at the sender."""
        return max(t for t, _ in self.done.values())

    @property
    def last_placed_ps(self) -> int:
        """The last byte placed at the receiver (no ACK's return trip)."""
        return max(t for t, _ in self.placed.values())


def stop_when_all_done(stack: SimStack, writes: Sequence[Writes]) -> None:
    """Stop the simulator once every WRITE of every ``writes`` has completed."""

    def check() -> None:
        if all(w.finished for w in writes):
            stack.sim.stop()

    for w in writes:
        w.on_all_done = check


def metrics(stack: SimStack, end_ps: int | None = None) -> pd.DataFrame:
    """The recorder's bins as a wide table: index ``time_us``, one column per metric."""
    ts = stack.timeseries(end_ps)
    return ts.pivot(index="time_us", columns="metric", values="value")


def window_mean(series: pd.Series, start_us: float, end_us: float) -> float:
    """Mean of the bins that start in ``[start_us, end_us)``."""
    part = series[(series.index >= start_us) & (series.index < end_us)]
    return float(part.mean()) if len(part) else float("nan")


def ev_state_rows(stack: SimStack) -> pd.DataFrame:
    """The ``ev_state`` events with their detail unpacked (host, qpn, ev, plane, t1, old, new)."""
    events = stack.events()
    events = events[events.kind == "ev_state"]
    rows = []
    for time_us, target, detail in zip(events.time_us, events.target, events.detail,
                                       strict=True):
        host, qpn = target.split(".qp")
        d = json.loads(detail)
        rows.append({"time_us": time_us, "host": int(host[1:]), "qpn": int(qpn),
                     "ev": d["ev"], "plane": d["plane"], "t1": d["t1"], "old": d["old"],
                     "new": d["new"], "reason": d["reason"]})
    return pd.DataFrame(rows, columns=["time_us", "host", "qpn", "ev", "plane", "t1", "old",
                                       "new", "reason"])


def rc_t1s(spec: FabricSpec, pairs: Sequence[tuple[int, int]], plane: int,
           seed: int = 1) -> list[int]:
    """The T1 that each pair's RC QP on ``plane`` hashes onto, opening the connections in
    this order on a fresh stack of ``seed`` (the seed draws the QPNs, and the order of
    opening numbers them, so both decide the hashes)."""
    stack = SimStack(spec, seed=seed, transport_name="rc")
    out = []
    for src, dst in pairs:
        conn = stack.open("rc", src, dst, transport_params("rc"))
        assert isinstance(conn, RcConnectionAdapter)
        out.append(next(qp.t1 for qp in conn.conn.requesters if qp.plane == plane))
    return out


def uplink(spec: FabricSpec, host: int, plane: int, t1: int) -> str:
    """Name of the link from ``host``'s T0 to ``t1`` in ``plane``."""
    return f"p{plane}.t0.{spec.t0_of(host)}--p{plane}.t1.{t1}"


# ====================================================================== 1. healthy line rate
@dataclass
class Healthy:
    kind: str
    size_bytes: int
    completion_us: float
    goodput_gbps: float
    nic_gbps: float
    ceiling_gbps: float
    all_ok: bool

    @property
    def of_nic(self) -> float:
        return self.goodput_gbps / self.nic_gbps


def healthy(kind: str, size: int = 64 * MB, spec: FabricSpec | None = None,
            src: int = 0, dst: int = 5, seed: int = 1) -> Healthy:
    """One connection (one MRC QP, or RC with one QP per plane) writes one ``size`` message
    between hosts under different T0s; goodput = size / completion time."""
    spec = spec or preset("lab-8plane")
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind)
    w = Writes(stack, stack.open(kind, src, dst, transport_params(kind)))
    w.post(size)
    stop_when_all_done(stack, [w])
    stack.sim.run(us(50_000))
    end = w.last_completion_ps
    return Healthy(kind, size, end / PS_PER_US, size * 8 / end * 1e3, spec.nic_gbps,
                   spec.goodput_ceiling_gbps(), w.all_ok)


# ====================================================================== 2. T0 down
@dataclass
class T0Down:
    kind: str
    plane: int
    planes: int
    fault_us: float
    pre_gbps: float
    post_gbps: float
    completed: bool  # every WRITE reported (ok or failed)
    all_ok: bool
    bytes_posted: int
    bytes_delivered: int
    messages_corrupt: int
    ceiling_gbps: float
    # RC only
    failed: bool = False
    failure_reason: str | None = None
    failed_messages: int = 0
    qp_error_us: float | None = None
    last_progress_us: float | None = None
    predicted_error_us: float | None = None
    error_after_us: float | None = None

    @property
    def kept(self) -> float:
        """Post-fault steady goodput as a fraction of pre-fault."""
        return self.post_gbps / self.pre_gbps

    @property
    def expected(self) -> float:
        return (self.planes - 1) / self.planes


def t0_down(kind: str, plane: int = 2, fault_us: float = 100.0, total: int = 40 * MB,
            spec: FabricSpec | None = None, src: int = 0, dst: int = 5, seed: int = 1,
            settle_us: float = 100.0, end_us: float = 2_000.0) -> T0Down:
    """``src``'s T0 in ``plane`` dies at ``fault_us`` while ``total`` bytes (1 MB WRITEs, all
    posted at t=0) are in transfer. Steady bins: [20 us, fault) before, and from
    ``settle_us`` after the fault to the last full bin before the transfer ended.

    For RC, the requester of the plane-``plane`` QP is watched on the wire: the last ACK/NAK
    that reached it is its last progress, so the predicted error time is that + (retry_cnt +
    1) x timeout, independently of what the QP reports."""
    spec = spec or preset("lab-8plane")
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind)
    conn = stack.open(kind, src, dst, transport_params(kind))
    w = Writes(stack, conn)
    for _ in range(total // MB):
        w.post(MB)
    stop_when_all_done(stack, [w])
    last_ack: list[int] = []
    qp = None
    if isinstance(conn, RcConnectionAdapter):
        qp = next(q for q in conn.conn.requesters if q.plane == plane)
        downlink = f"p{plane}.t0.{spec.t0_of(src)}->h{src}.p{plane}"

        def tap(now: int, port: str, pkt: Any) -> None:
            if port == downlink and pkt.qpn == qp.qpn and pkt.kind in (ACK, NACK):
                last_ack.append(now)

        stack.net.tap = tap
    faults.at(stack.sim, us(fault_us), faults.switch_down, stack.net, f"h{src}.p{plane}.t0")
    stack.sim.run(us(end_us))
    table = metrics(stack)
    good = table["goodput_gbps"]
    bin_us = stack.recorder.bin_ps / PS_PER_US
    end = (w.last_completion_ps if w.done else stack.sim.now) / PS_PER_US
    result = T0Down(
        kind, plane, spec.planes, fault_us,
        pre_gbps=window_mean(good, 2 * bin_us, fault_us),
        post_gbps=window_mean(good, fault_us + settle_us, end - bin_us),
        completed=w.finished, all_ok=w.all_ok, bytes_posted=w.bytes_posted,
        bytes_delivered=stack.recorder.bytes_delivered,
        messages_corrupt=stack.totals()["messages_corrupt"],
        ceiling_gbps=spec.goodput_ceiling_gbps())
    if qp is not None:
        result.failed = conn.failed
        result.failure_reason = conn.failure_reason
        result.failed_messages = sum(1 for _, ok in w.done.values() if not ok)
        result.qp_error_us = None if qp.error_time_ps is None else qp.error_time_ps / PS_PER_US
        after = qp.config.error_after_ps
        result.error_after_us = None if after is None else after / PS_PER_US
        if last_ack and after is not None:
            result.last_progress_us = last_ack[-1] / PS_PER_US
            result.predicted_error_us = (last_ack[-1] + after) / PS_PER_US
    return result


# ====================================================================== 3. T1 fail + restore
RING_PAIRS = ((0, 2), (2, 4), (4, 6), (6, 0))  # lab-small: one sender and receiver per T0


@dataclass
class T1FailRestore:
    kind: str
    target: str
    fault_us: float
    restore_us: float
    pre_gbps: float
    bins_100us: dict[float, float]
    ceiling_gbps: float
    # MRC
    affected_evs: int = 0
    marked_bad: int = 0
    max_mark_delay_us: float | None = None
    returned_good: int = 0
    max_return_delay_us: float | None = None
    other_evs_marked_bad: int = 0
    # RC
    rc_qps_on_t1: list[str] = field(default_factory=list)  # requesters, as h<host>.qp<qpn>
    rc_qps_errored: list[str] = field(default_factory=list)  # requesters that raised qp_error
    rc_connections_failed: int = 0
    rc_error_us: list[float] = field(default_factory=list)

    @property
    def dip(self) -> float:
        """1 - the lowest 100 us bin from the fault on, relative to pre-fault goodput."""
        after = [v for t, v in self.bins_100us.items() if t >= self.fault_us]
        return 1 - min(after) / self.pre_gbps


def t1_fail_restore(kind: str, plane: int = 0, t1: int | None = None, fault_us: float = 100.0,
                    restore_us: float = 400.0, end_us: float = 700.0,
                    pairs: Sequence[tuple[int, int]] = RING_PAIRS,
                    spec: FabricSpec | None = None, depth: int = STREAM_DEPTH,
                    seed: int = 1) -> T1FailRestore:
    """Streams on every pair; T1 ``t1`` of ``plane`` (default: the one most of the pairs' RC
    QPs hash onto) fails at ``fault_us`` and comes back at ``restore_us``."""
    spec = spec or preset("lab-small")
    if t1 is None:
        hashed = rc_t1s(spec, pairs, plane, seed)
        t1 = max(range(spec.t1), key=lambda k: (hashed.count(k), -k))
    target = f"p{plane}.t1.{t1}"
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind)
    conns = [stack.open(kind, s, d, transport_params(kind)) for s, d in pairs]
    for conn in conns:
        Writes(stack, conn).stream(MB, depth)
    faults.at(stack.sim, us(fault_us), faults.switch_down, stack.net, target)
    faults.at(stack.sim, us(restore_us), faults.switch_up, stack.net, target)
    stack.sim.run(us(end_us))
    good = metrics(stack)["goodput_gbps"]
    bin_us = stack.recorder.bin_ps / PS_PER_US
    bins = good.groupby(((good.index - fault_us) // 100) * 100 + fault_us).mean()
    result = T1FailRestore(kind, target, fault_us, restore_us,
                           pre_gbps=window_mean(good, 2 * bin_us, fault_us),
                           bins_100us={float(t): float(v) for t, v in bins.items()
                                       if t + 100 <= end_us},
                           ceiling_gbps=spec.goodput_ceiling_gbps())
    if kind == "mrc":
        _mrc_ev_summary(stack, conns, plane, t1, result)
    else:
        events = stack.events()
        errors = events[events.kind == "qp_error"]
        errored = {target: time_us for target, time_us in zip(errors.target, errors.time_us,
                                                               strict=True)}
        for conn in conns:
            assert isinstance(conn, RcConnectionAdapter)
            for qp in conn.conn.requesters:
                name = f"h{qp.host}.qp{qp.qpn}"
                if qp.plane == plane and qp.t1 == t1:
                    result.rc_qps_on_t1.append(name)
                if name in errored:
                    result.rc_qps_errored.append(name)
                    result.rc_error_us.append(float(errored[name]))
            result.rc_connections_failed += conn.failed
    return result


def _mrc_ev_summary(stack: SimStack, conns: Sequence[Connection], plane: int, t1: int,
                    result: T1FailRestore) -> None:
    rows = ev_state_rows(stack)
    for conn in conns:
        assert isinstance(conn, MrcConnection)
        sender = conn.sender
        mine = rows[(rows.host == sender.host) & (rows.qpn == sender.qpn)]
        for choice in sender.paths:
            ev_rows = mine[mine.ev == choice.ev]
            bad = ev_rows[(ev_rows.new == ASSUMED_BAD) & (ev_rows.time_us >= result.fault_us)]
            if choice.plane != plane or choice.t1 != t1:
                result.other_evs_marked_bad += len(bad)
                continue
            result.affected_evs += 1
            if len(bad):
                result.marked_bad += 1
                delay = float(bad.time_us.iloc[0]) - result.fault_us
                result.max_mark_delay_us = max(result.max_mark_delay_us or 0.0, delay)
            back = ev_rows[(ev_rows.new == GOOD) & (ev_rows.time_us >= result.restore_us)]
            if len(back) and sender.ev_state(choice.ev) == GOOD:
                result.returned_good += 1
                delay = float(back.time_us.iloc[0]) - result.restore_us
                result.max_return_delay_us = max(result.max_return_delay_us or 0.0, delay)


# ====================================================================== 4. random loss
@dataclass
class RandomLoss:
    kind: str
    p: float
    link: str
    bdp_packets: float
    job_gbps: float
    healthy_job_gbps: float
    qp_gbps: float | None  # RC: the QP on the lossy link
    healthy_qp_gbps: float | None
    all_ok: bool
    ceiling_gbps: float

    @property
    def model(self) -> float:
        """Go-back-N: fraction of goodput left, 1 / (1 + p x BDP in packets)."""
        return 1 / (1 + self.p * self.bdp_packets)

    @property
    def job_kept(self) -> float:
        return self.job_gbps / self.healthy_job_gbps

    @property
    def qp_kept(self) -> float | None:
        if self.qp_gbps is None or self.healthy_qp_gbps is None:
            return None
        return self.qp_gbps / self.healthy_qp_gbps


def _loss_run(kind: str, p: float, spec: FabricSpec, src: int, dst: int, plane: int,
              link: str, per_qp: int, seed: int) -> tuple[float, float | None, bool]:
    """(job goodput, goodput of plane ``plane``, all ok) of one bulk WRITE set."""
    stack = SimStack(spec, seed=seed, bin_ps=us(1), transport_name=kind)
    w = Writes(stack, stack.open(kind, src, dst, transport_params(kind)))
    for _ in range(per_qp * spec.planes // MB):
        w.post(MB)
    stop_when_all_done(stack, [w])
    if p:
        faults.set_loss(stack.net, link, p, direction="up")  # the data direction
    stack.sim.run(us(100_000))
    job = w.bytes_posted * 8 / w.last_completion_ps * 1e3
    if kind != "rc":
        return job, None, w.all_ok
    # one RC QP per plane: the plane's bytes are that QP's; its last byte ends its transfer
    placed = metrics(stack)[f"goodput_gbps_p{plane}"].cumsum() * 1e-6 * 1e9 / 8
    done_us = float(placed[placed >= per_qp - 1].index.min()) + 1
    return job, per_qp * 8 / (done_us * PS_PER_US) * 1e3, w.all_ok


@functools.lru_cache(maxsize=8)
def _healthy_loss_run(kind: str, spec: FabricSpec, src: int, dst: int, plane: int, link: str,
                      per_qp: int, seed: int) -> tuple[float, float | None, bool]:
    """The p = 0 baseline, shared by every loss rate."""
    return _loss_run(kind, 0.0, spec, src, dst, plane, link, per_qp, seed)


def random_loss(kind: str, p: float, plane: int = 2, spec: FabricSpec | None = None,
                src: int = 0, dst: int = 3, per_qp: int = 8 * MB,
                seed: int = 1) -> RandomLoss:
    """Loss ``p`` (data direction) on the T0->T1 link the pair's RC QP of ``plane`` hashes
    onto; ``per_qp`` bytes per RC QP (RC stripes each 1 MB WRITE over all planes), the same
    WRITEs for MRC. Healthy numbers come from the same run with p = 0."""
    spec = spec or preset("lab-small")
    link = uplink(spec, src, plane, rc_t1s(spec, [(src, dst)], plane, seed)[0])
    base_job, base_qp, _ = _healthy_loss_run(kind, spec, src, dst, plane, link, per_qp, seed)
    job, qp, ok = _loss_run(kind, p, spec, src, dst, plane, link, per_qp, seed)
    return RandomLoss(kind, p, link, bdp_packets(spec), job, base_job, qp, base_qp, ok,
                      spec.goodput_ceiling_gbps())


# ====================================================================== 5. incast
@dataclass
class Incast:
    """``goodput_gbps``: bytes over the time to the last *sender completion* (the last byte
    placed, then its ACK's trip back); ``placed_gbps``: bytes over the time to the last
    byte *placed at the receiver*. The receiver's NIC is done at placement, so the share
    of the receiver's NIC (the issue's "the 8-to-1 incast keeps >= 93% of the receiver's
    NIC") is ``placed_of_nic``; ``of_nic`` also counts the last ACK's return trip."""

    senders: int
    size_bytes: int
    goodput_gbps: float
    nic_gbps: float
    ceiling_gbps: float
    all_ok: bool
    trims: int
    trims_after_warmup: int
    warmup_us: float
    data_packets_after_warmup: int
    duration_us: float
    timeouts: int
    qp_timeouts: int
    losses: int
    nacks_received: int
    retransmissions: int
    buffer_bytes: int
    ecn_threshold_bytes: int
    peak_queue_bytes: int
    peak_queue_after_warmup_bytes: int
    mean_queue_bytes: float
    downlink_packets: list[int]  # packets into the receiver, per plane
    placed_gbps: float = 0.0
    placed_us: float = 0.0

    @property
    def placed_of_nic(self) -> float:
        return self.placed_gbps / self.nic_gbps

    @property
    def plane_imbalance(self) -> float:
        """Busiest over idlest receiver downlink, in packets (1.0 = even spraying)."""
        return max(self.downlink_packets) / max(1, min(self.downlink_packets))

    @property
    def of_nic(self) -> float:
        return self.goodput_gbps / self.nic_gbps

    @property
    def trim_rate_after_warmup(self) -> float:
        """Trimmed share of the DATA packets that reached the receiver after warm-up."""
        return self.trims_after_warmup / max(1, self.data_packets_after_warmup)


def incast(senders: int = 8, size: int = 4 * MB, receiver: int = 0,
           spec: FabricSpec | None = None, warmup_rtts: int = 5, seed: int = 1,
           sample_us: float = 1.0) -> Incast:
    """``senders`` hosts (under other T0s) each write ``size`` to ``receiver`` at t=0 with
    MRC. The receiver's downlinks (one per plane) are the bottleneck; their data queues are
    sampled every ``sample_us``. Warm-up = the first ``warmup_rtts`` base RTTs."""
    spec = spec or preset("lab-8plane")
    stack = SimStack(spec, seed=seed, bin_ps=us(5), transport_name="mrc")
    first = (spec.t0_of(receiver) + 1) * spec.hosts_per_t0
    sources = [(first + i) % spec.hosts for i in range(senders)]
    conns = [stack.open("mrc", s, receiver, {}) for s in sources]
    writes = [Writes(stack, c) for c in conns]
    for w in writes:
        w.post(size)
    stop_when_all_done(stack, writes)
    host = stack.net.hosts[receiver]
    ports = [port for port in stack.net.ports.values() if port.dst is host]
    warmup_ps = warmup_rtts * spec.base_rtt_ps()
    samples: list[tuple[int, int]] = []
    snap: dict[str, int] = {}

    def sample(_: object) -> None:
        now = stack.sim.now
        for port in ports:
            samples.append((now, port.backlog()[0]))
        stack.sim.at(now + us(sample_us), sample)

    def at_warmup(_: object) -> None:
        snap["trims"] = stack.net.totals()["trims"]
        snap["delivered"] = sum(port.delivered for port in ports)

    stack.sim.at(0, sample)
    stack.sim.at(warmup_ps, at_warmup)
    stack.sim.run(us(20_000))
    end = max(w.last_completion_ps for w in writes)
    placed = max(w.last_placed_ps for w in writes)
    senders_qps = [c.sender for c in conns if isinstance(c, MrcConnection)]
    after = [q for t, q in samples if warmup_ps <= t <= end]
    during = [q for t, q in samples if t <= end]
    total = sum(w.bytes_posted for w in writes)
    return Incast(
        senders, size, total * 8 / end * 1e3, spec.nic_gbps, spec.goodput_ceiling_gbps(),
        all(w.all_ok for w in writes),
        trims=stack.net.totals()["trims"],
        trims_after_warmup=stack.net.totals()["trims"] - snap.get("trims", 0),
        warmup_us=warmup_ps / PS_PER_US,
        data_packets_after_warmup=sum(p.delivered for p in ports) - snap.get("delivered", 0),
        duration_us=end / PS_PER_US,
        timeouts=sum(q.stats.timeouts for q in senders_qps),
        qp_timeouts=sum(q.stats.qp_timeouts for q in senders_qps),
        losses=sum(q.stats.losses for q in senders_qps),
        nacks_received=sum(q.stats.nacks_received for q in senders_qps),
        retransmissions=sum(q.stats.retransmissions for q in senders_qps),
        buffer_bytes=spec.buffer_bytes, ecn_threshold_bytes=spec.ecn_threshold_bytes,
        peak_queue_bytes=max(p.peak_qbytes for p in ports),
        peak_queue_after_warmup_bytes=max(after, default=0),
        mean_queue_bytes=statistics.fmean(during) if during else 0.0,
        downlink_packets=[p.delivered for p in sorted(ports, key=lambda p: p.plane)],
        placed_gbps=total * 8 / placed * 1e3, placed_us=placed / PS_PER_US)


@dataclass
class IncastSpread:
    """The incast's share of the receiver's NIC over several seeds (the seed draws QPNs,
    entropy and so which paths the 8 senders' packets take; one draw is noisy)."""

    seeds: list[int]
    placed_pct: list[float]
    completion_pct: list[float]

    @property
    def mean_pct(self) -> float:
        return statistics.fmean(self.placed_pct)

    @property
    def min_pct(self) -> float:
        return min(self.placed_pct)

    @property
    def max_pct(self) -> float:
        return max(self.placed_pct)

    @property
    def sd_points(self) -> float:
        return statistics.stdev(self.placed_pct) if len(self.placed_pct) > 1 else 0.0

    @property
    def completion_mean_pct(self) -> float:
        return statistics.fmean(self.completion_pct)


def incast_over_seeds(seeds: Iterable[int]) -> IncastSpread:
    """:func:`incast` at each seed: the placed and completion shares of the NIC, in %."""
    runs = [(s, incast(seed=s)) for s in seeds]
    return IncastSpread([s for s, _ in runs], [100 * r.placed_of_nic for _, r in runs],
                        [100 * r.of_nic for _, r in runs])


# ====================================================================== 6. permutation
PERMUTATION_SPEC = FabricSpec(planes=4, hosts=32, hosts_per_t0=8, name="perm-32x4")


@dataclass
class Permutation:
    kind: str
    flows: int
    size_bytes: int
    mean_fct_us: float
    min_fct_us: float
    max_fct_us: float
    ideal_us: float
    same_t0_flows: int
    all_ok: bool
    ceiling_gbps: float

    @property
    def ratio(self) -> float:
        return self.mean_fct_us / self.ideal_us


def derangement(n: int, rng: random.Random) -> list[int]:
    """A random permutation of range(n) with no fixed point (no host sends to itself)."""
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(i != j for i, j in enumerate(perm)):
            return perm


def permutation(kind: str = "mrc", size: int = 2 * MB, spec: FabricSpec | None = None,
                seed: int = 1) -> Permutation:
    """Every host writes ``size`` to its image under a random derangement, all at t=0.
    Ideal FCT = size / NIC rate + base RTT (the unloaded cross-T0 round trip)."""
    spec = spec or PERMUTATION_SPEC
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind)
    perm = derangement(spec.hosts, random.Random(seed))
    writes = [Writes(stack, stack.open(kind, s, d, transport_params(kind)))
              for s, d in enumerate(perm)]
    for w in writes:
        w.post(size)
    stop_when_all_done(stack, writes)
    stack.sim.run(us(50_000))
    fcts = [w.last_completion_ps / PS_PER_US for w in writes]
    ideal = size * 8 / (spec.nic_gbps * 1e3) + spec.base_rtt_ps() / PS_PER_US
    return Permutation(kind, len(writes), size, statistics.fmean(fcts), min(fcts), max(fcts),
                       ideal, sum(spec.t0_of(s) == spec.t0_of(d) for s, d in enumerate(perm)),
                       all(w.all_ok for w in writes), spec.goodput_ceiling_gbps())


# ====================================================================== 7. fault schedules
#: A fault as data: (time in us, fault action of mrc.sim.faults.FAULTS, target, params).
Fault = tuple[float, str, str, dict[str, Any]]
#: Aggressive MRC timers for the schedule runs, so a QP error fits in a short run: per-EV
#: timer and local ACK timeout T 16.4 us, no linear retries, 3 exponential ones: the error
#: comes 15 T (246 us) after the last progress on any EV.
SCHEDULE_MRC: dict[str, Any] = {"ev_timeout_us": 16.384, "timeout": 4, "retry_linear_cnt": 0,
                                "retry_exp_cnt": 3}
#: Ways to cut every path between ``src`` and ``dst`` (see ``cut_every_path``).
CUTS = ("src_nic", "dst_nic", "src_t0", "dst_t0", "all_t1")


def schedule_error_after_us(spec: FabricSpec, params: dict[str, Any] | None = None) -> float:
    """How long after its last progress an MRC QP with ``params`` (default SCHEDULE_MRC)
    errors when no path answers."""
    after = mrc_config(spec, dict(SCHEDULE_MRC if params is None else params)).error_after_ps()
    assert after is not None
    return after / PS_PER_US


def path_elements(spec: FabricSpec, src: int, dst: int, plane: int, t1: int) -> set[str]:
    """Canonical names of every element on the path src -> dst through (``plane``, ``t1``)."""
    a, b = spec.t0_of(src), spec.t0_of(dst)
    names = {f"h{src}.p{plane}--p{plane}.t0.{a}", f"p{plane}.t0.{a}",
             f"h{dst}.p{plane}--p{plane}.t0.{b}", f"p{plane}.t0.{b}"}
    if a != b:
        names |= {f"p{plane}.t1.{t1}", f"p{plane}.t0.{a}--p{plane}.t1.{t1}",
                  f"p{plane}.t0.{b}--p{plane}.t1.{t1}"}
    return names


def pair_elements(spec: FabricSpec, src: int, dst: int) -> list[tuple[str, str]]:
    """``(kind, name)`` of every element on some path of the pair: kind is ``switch``,
    ``link`` (T0-T1) or ``nic`` (a host link), in a stable order."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for plane in range(spec.planes):
        for t1 in range(spec.t1):
            for name in sorted(path_elements(spec, src, dst, plane, t1)):
                if name in seen:
                    continue
                seen.add(name)
                if "--" not in name:
                    kind = "switch"
                elif name.startswith("h"):
                    kind = "nic"
                else:
                    kind = "link"
                out.append((kind, name))
    return out


def episode(kind: str, name: str, effect: str, start_us: float, duration_us: float | None,
            value: float = 0.0) -> list[Fault]:
    """The faults of one episode on one element: ``effect`` is ``down`` (switch, link or NIC
    port), ``loss`` (probability ``value``) or ``degrade`` (rate fraction ``value``); it ends
    after ``duration_us`` (None: never)."""
    if effect == "down":
        down, up = {"switch": ("switch_down", "switch_up"), "link": ("link_down", "link_up"),
                    "nic": ("nic_port_down", "nic_port_up")}[kind]
        target = name.split("--")[0] if kind == "nic" else name
        start: Fault = (start_us, down, target, {})
        stop: Fault = (0.0, up, target, {})
    elif effect in ("loss", "degrade"):
        if kind == "switch":
            raise ValueError("loss and degrade apply to links")
        action, param, clear = (("set_loss", "p", 0.0) if effect == "loss"
                                else ("degrade", "fraction", 1.0))
        start = (start_us, action, name, {param: value})
        stop = (0.0, action, name, {param: clear})
    else:
        raise ValueError(f"unknown effect {effect!r}")
    if duration_us is None:
        return [start]
    return [start, (start_us + duration_us, stop[1], stop[2], stop[3])]


def cut_every_path(spec: FabricSpec, src: int, dst: int, how: str, at_us: float) -> list[Fault]:
    """Permanent faults at ``at_us`` that leave no path between ``src`` and ``dst``."""
    planes = range(spec.planes)
    if how == "src_nic":
        return [(at_us, "nic_port_down", f"h{src}.p{p}", {}) for p in planes]
    if how == "dst_nic":
        return [(at_us, "nic_port_down", f"h{dst}.p{p}", {}) for p in planes]
    if how == "src_t0":
        return [(at_us, "switch_down", f"p{p}.t0.{spec.t0_of(src)}", {}) for p in planes]
    if how == "dst_t0":
        return [(at_us, "switch_down", f"p{p}.t0.{spec.t0_of(dst)}", {}) for p in planes]
    if how == "all_t1":
        return [(at_us, "switch_down", f"p{p}.t1.{k}", {}) for p in planes
                for k in range(spec.t1)]
    raise ValueError(f"unknown cut {how!r}; known: {CUTS}")


def cut_schedule(spec: FabricSpec, src: int, dst: int, before: Iterable[Fault], how: str,
                 at_us: float) -> list[Fault]:
    """``before`` up to ``at_us`` (so no later repair revives anything), then the cut."""
    return [f for f in before if f[0] < at_us] + cut_every_path(spec, src, dst, how, at_us)


@dataclass
class ScheduleOutcome:
    messages: int
    completed_ok: int
    reported_failed: int
    unreported: int
    corrupt: int
    bytes_posted: int
    bytes_ok: int
    bytes_delivered: int
    failed: bool
    failed_at_us: float | None
    failure_reason: str | None
    ok_after_failure: int
    receiver_bad_packets: int
    end_us: float


def run_schedule(schedule: Iterable[Fault], messages: Sequence[tuple[float, int]],
                 spec: FabricSpec | None = None, src: int = 0, dst: int = 2,
                 params: dict[str, Any] | None = None, cap_us: float = 20_000.0,
                 seed: int = 1) -> ScheduleOutcome:
    """One MRC connection ``src`` -> ``dst`` posts ``messages`` ((time us, bytes)) while the
    ``schedule`` runs; the run ends when every message is reported (or at ``cap_us``)."""
    spec = spec or preset("lab-small")
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name="mrc")
    conn = stack.open("mrc", src, dst, dict(SCHEDULE_MRC if params is None else params))
    assert isinstance(conn, MrcConnection)
    w = Writes(stack, conn)
    for at_us, size in messages:
        w.post_at(us(at_us), size)

    def all_reported() -> None:
        if len(w.sizes) == len(messages):
            stack.sim.stop()

    w.on_all_done = all_reported
    for at_us, action, target, params_ in schedule:
        faults.at(stack.sim, us(at_us), faults.apply, stack.net, action, target, **params_)
    stack.sim.run(us(cap_us))
    failed_at = conn.failed_at_ps
    ok_after = sum(1 for t, ok in w.done.values()
                   if ok and failed_at is not None and t > failed_at)
    return ScheduleOutcome(
        messages=len(messages), completed_ok=sum(ok for _, ok in w.done.values()),
        reported_failed=sum(not ok for _, ok in w.done.values()),
        unreported=len(messages) - len(w.done), corrupt=conn.messages_corrupt,
        bytes_posted=w.bytes_posted, bytes_ok=w.bytes_ok,
        bytes_delivered=stack.recorder.bytes_delivered, failed=conn.failed,
        failed_at_us=None if failed_at is None else failed_at / PS_PER_US,
        failure_reason=conn.failure_reason, ok_after_failure=ok_after,
        receiver_bad_packets=conn.receiver.stats.bad_packets, end_us=stack.sim.now / PS_PER_US)


def random_schedule(rng: random.Random, spec: FabricSpec, src: int, dst: int,
                    episodes: int, horizon_us: float = 400.0
                    ) -> tuple[tuple[int, int], list[Fault]]:
    """(protected (plane, t1), faults): random episodes on every element of the pair's
    paths except those of one protected path, which stays up throughout."""
    keep = (rng.randrange(spec.planes), rng.randrange(spec.t1))
    protected = path_elements(spec, src, dst, *keep)
    candidates = [e for e in pair_elements(spec, src, dst) if e[1] not in protected]
    out: list[Fault] = []
    for _ in range(episodes):
        kind, name = rng.choice(candidates)
        effect = "down" if kind == "switch" else rng.choice(("down", "down", "loss", "degrade"))
        value = {"down": 0.0, "loss": rng.choice((0.01, 0.1, 0.5, 1.0)),
                 "degrade": rng.choice((0.1, 0.25, 0.5))}[effect]
        duration = rng.choice((None, rng.uniform(1, horizon_us)))
        out += episode(kind, name, effect, rng.uniform(0, horizon_us), duration, value)
    return keep, out


def schedule_sweep(runs: int = 20, seed: int = 7) -> dict[str, Any]:
    """The property check of item 7 over ``runs`` seeded random schedules of each kind."""
    spec = preset("lab-small")
    rng = random.Random(seed)
    survive = {"runs": 0, "messages": 0, "bytes": 0, "violations": 0, "qp_errors": 0}
    cut = {"runs": 0, "qp_errors": 0, "partial_reported_complete": 0, "partial_bytes": 0,
           "violations": 0}
    for _ in range(runs):
        _, schedule = random_schedule(rng, spec, 0, 2, rng.randrange(1, 8))
        messages = [(0.0, 4 * MB)] + [(rng.uniform(0, 300), rng.choice((1, 4096, 5000,
                                                                      300_000, 2 * MB)))
                                      for _ in range(rng.randrange(0, 5))]
        out = run_schedule(schedule, messages, spec)
        survive["runs"] += 1
        survive["messages"] += out.messages
        survive["bytes"] += out.bytes_ok
        survive["qp_errors"] += out.failed
        survive["violations"] += not (out.completed_ok == out.messages and out.corrupt == 0
                                      and out.bytes_delivered == out.bytes_posted
                                      and not out.failed)
    for _ in range(runs):
        _, before = random_schedule(rng, spec, 0, 2, rng.randrange(0, 5), horizon_us=100)
        cut_at = rng.uniform(20, 150)
        schedule = cut_schedule(spec, 0, 2, before, rng.choice(CUTS), cut_at)
        messages = [(0.0, 16 * MB)] + [(rng.uniform(0, 100), rng.choice((1, 4096, 100_000)))
                                       for _ in range(rng.randrange(0, 4))]
        out = run_schedule(schedule, messages, spec, cap_us=5_000)
        cut["runs"] += 1
        cut["qp_errors"] += out.failed
        partial = out.bytes_delivered - out.bytes_ok
        cut["partial_bytes"] += partial
        cut["partial_reported_complete"] += out.ok_after_failure
        cut["violations"] += not (out.failed and out.unreported == 0 and out.corrupt == 0
                                  and out.ok_after_failure == 0 and partial > 0)
    return {"one_path_up": survive, "every_path_cut": cut}


# ====================================================================== the report
def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(out: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every scenario and print the numbers; returns them as a dict (for --json)."""
    results: dict[str, Any] = {}
    t_all = time.perf_counter()

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        value = fn()
        results[name] = value
        out(f"    [{name}: {time.perf_counter() - t:.1f} s wall]")
        return value

    out("1. Healthy fabric: lab-8plane (8 planes x 100G), h0 -> h5, one 64 MB WRITE")
    for kind in ("mrc", "rc"):
        h = timed(f"1.{kind}", functools.partial(healthy, kind))
        out(f"   {kind:3s} goodput {h.goodput_gbps:.1f} Gb/s = {100 * h.of_nic:.1f}% of "
            f"{h.nic_gbps:.0f} Gb/s NIC (payload ceiling {h.ceiling_gbps:.1f}); "
            f"completed at {h.completion_us:.1f} us; verified={h.all_ok}")

    out("2. Sender's T0 in plane 2 down at 100 us: lab-8plane, h0 -> h5, 40 x 1 MB")
    for kind in ("mrc", "rc"):
        r = timed(f"2.{kind}", functools.partial(t0_down, kind))
        out(f"   {kind:3s} pre {r.pre_gbps:.1f} Gb/s, post {_fmt(r.post_gbps)} Gb/s; kept "
            f"{100 * r.kept:.1f}% (target (P-1)/P = {100 * r.expected:.1f}% +- 5 points); "
            f"every WRITE verified={r.all_ok}; bytes placed {r.bytes_delivered}/"
            f"{r.bytes_posted}; corrupt={r.messages_corrupt} (ceiling {r.ceiling_gbps:.1f})")
        if kind == "rc":
            out(f"       plane-2 QP error at {_fmt(r.qp_error_us, 5)} us; last ACK seen on the "
                f"wire {_fmt(r.last_progress_us, 5)} us + (7+1) x 32.768 us = predicted "
                f"{_fmt(r.predicted_error_us, 5)} us; transfer failed={r.failed}, "
                f"{r.failed_messages} WRITEs reported failed")

    out("3. T1 fails at 100 us, restored at 400 us: lab-small, ring 0->2->4->6->0, "
        f"{STREAM_DEPTH} x 1 MB outstanding per pair")
    for kind in ("mrc", "rc"):
        r = timed(f"3.{kind}", functools.partial(t1_fail_restore, kind))
        bins = ", ".join(f"{t:.0f}:{v:.0f}" for t, v in r.bins_100us.items())
        out(f"   {kind:3s} {r.target}: pre {r.pre_gbps:.1f} Gb/s; 100 us bins [{bins}]; "
            f"dip {100 * r.dip:.1f}% (ceiling {r.ceiling_gbps:.1f} per host)")
        if kind == "mrc":
            out(f"       EVs on {r.target}: {r.affected_evs}; ASSUMED_BAD {r.marked_bad} "
                f"(latest {_fmt(r.max_mark_delay_us)} us after the fault); GOOD again "
                f"{r.returned_good} (latest {_fmt(r.max_return_delay_us)} us after restore); "
                f"other EVs marked bad: {r.other_evs_marked_bad}")
        else:
            out(f"       RC QPs hashed onto {r.target}: {len(r.rc_qps_on_t1)} "
                f"{r.rc_qps_on_t1}; errored: {len(r.rc_qps_errored)} {r.rc_qps_errored} at "
                f"{[round(t, 1) for t in r.rc_error_us]} us; "
                f"connections failed: {r.rc_connections_failed}/{len(RING_PAIRS)}")
    shallow = timed("3.mrc.shallow", lambda: t1_fail_restore(
        "mrc", spec=preset("lab-8plane"), pairs=((0, 4),), depth=4))
    out(f"   note: one 800G pair on lab-8plane with only 4 x 1 MB outstanding dips "
        f"{100 * shallow.dip:.1f}% (100 us bins {[round(v) for v in shallow.bins_100us.values()]}"
        f"): overdue-loss detection resends a packet lost on the dead T1 within tens of us, "
        f"before the 42 us the queue of WRITEs lasts at line rate runs dry (with the 65.5 us "
        f"RTO alone it dipped 35%)")

    out("4. Random loss (data direction) on one RC path's T0->T1 link: lab-small, h0 -> h3, "
        "8 MB per RC QP")
    for p in (0.001, 0.01, 0.05):
        rc = timed(f"4.rc.{p}", functools.partial(random_loss, "rc", p))
        mrc = timed(f"4.mrc.{p}", functools.partial(random_loss, "mrc", p))
        qp_err = rc.qp_kept / rc.model - 1  # type: ignore[operator]
        out(f"   p={p:<6} {rc.link}: model 1/(1+p x {rc.bdp_packets:.1f}) = {rc.model:.3f}; "
            f"RC QP {rc.qp_gbps:.1f}/{rc.healthy_qp_gbps:.1f} Gb/s = {rc.qp_kept:.3f} "
            f"({100 * qp_err:+.1f}% vs model); RC job {rc.job_gbps:.1f}/"
            f"{rc.healthy_job_gbps:.1f} Gb/s = {rc.job_kept:.3f}; MRC job {mrc.job_gbps:.1f}/"
            f"{mrc.healthy_job_gbps:.1f} Gb/s = {100 * mrc.job_kept:.1f}% "
            f"(ceiling {rc.ceiling_gbps:.1f})")

    out("5. 8-to-1 incast, MRC: lab-8plane, h4..h11 -> h0, 4 MB each")
    r = timed("5", incast)
    out(f"   receiver goodput to the last byte placed at the receiver {r.placed_gbps:.1f} Gb/s = "
        f"{100 * r.placed_of_nic:.1f}% of its NIC (the issue's measure; {r.placed_us:.1f} us); "
        f"to the last sender completion (its ACK back too) {r.goodput_gbps:.1f} Gb/s = "
        f"{100 * r.of_nic:.1f}% ({r.duration_us:.1f} us); ceiling {r.ceiling_gbps:.1f}; "
        f"verified={r.all_ok}")
    out(f"   trims {r.trims} (after the first {r.warmup_us:.1f} us = 5 RTTs: "
        f"{r.trims_after_warmup}, {100 * r.trim_rate_after_warmup:.2f}% of the "
        f"{r.data_packets_after_warmup} packets into the receiver); NACKs received "
        f"{r.nacks_received}, retransmissions {r.retransmissions}, losses {r.losses}, "
        f"timeouts {r.timeouts}, QP timeouts {r.qp_timeouts}")
    out(f"   receiver downlink queues: peak {r.peak_queue_bytes} B (after warm-up "
        f"{r.peak_queue_after_warmup_bytes} B), mean {r.mean_queue_bytes:.0f} B, against a "
        f"{r.buffer_bytes} B buffer (ECN threshold {r.ecn_threshold_bytes} B); packets "
        f"per downlink {r.downlink_packets} (busiest/idlest {r.plane_imbalance:.3f})")

    spread = timed("5.seeds", functools.partial(incast_over_seeds, range(1, 17)))
    out(f"   over seeds 1-16 (the draws' spread, sd {spread.sd_points:.2f} points, is larger "
        f"than the target's margin, so the mean is the figure): placed {spread.mean_pct:.2f}% "
        f"of the NIC (min {spread.min_pct:.2f}%, max {spread.max_pct:.2f}%); completion "
        f"{spread.completion_mean_pct:.2f}%")

    out("6. Permutation, 32 hosts x 4 planes (8 per T0, 8 T1), 2 MB per flow")
    for kind in ("mrc", "rc"):
        r = timed(f"6.{kind}", functools.partial(permutation, kind))
        out(f"   {kind:3s} mean FCT {r.mean_fct_us:.1f} us (min {r.min_fct_us:.1f}, max "
            f"{r.max_fct_us:.1f}); ideal {r.ideal_us:.1f} us; ratio {r.ratio:.3f}; "
            f"{r.same_t0_flows} flows within one T0; verified={r.all_ok} "
            f"(ceiling {r.ceiling_gbps:.1f})")

    out("7. Fault schedules (MRC, lab-small, h0 -> h2, T 16.4 us, retry_exp_cnt 3)")
    sweep = timed("7", schedule_sweep)
    s, c = sweep["one_path_up"], sweep["every_path_cut"]
    out(f"   one path kept up: {s['runs']} schedules, {s['messages']} WRITEs, {s['bytes']} "
        f"bytes verified, QP errors {s['qp_errors']}, violations {s['violations']}")
    out(f"   every path cut:   {c['runs']} schedules, QP errors {c['qp_errors']}, partially "
        f"delivered bytes never reported {c['partial_bytes']}, WRITEs reported complete "
        f"after the error {c['partial_reported_complete']}, violations {c['violations']}")
    out(f"total {time.perf_counter() - t_all:.1f} s wall")
    return results


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args(argv)
    results = report()
    if args.json:
        print(json.dumps({k: _jsonable(v) for k, v in results.items()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
