"""Acceptance items 1-3: one transfer through a healthy fabric, through a T0 that dies, and
over a T1 that fails and comes back (MRC and RC alike, on lab-8plane and lab-small)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mrc.acceptance.workload import (
    MB,
    ROUTING_LAB,
    STREAM_DEPTH,
    Writes,
    engine,
    ev_state_rows,
    metrics,
    rc_t1s,
    stop_when_all_done,
    transport_params,
    window_mean,
)
from mrc.packet import ACK, NACK
from mrc.sim import faults
from mrc.sim.engine import PS_PER_US, us
from mrc.stack.rc_connection import ecmp_t1
from mrc.stack.stack import Connection, MrcConnection, RcConnectionAdapter, SimStack
from mrc.transport.base import ASSUMED_BAD, GOOD
from topology import preset
from topology.spec import FabricSpec


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
    that reached it is its last progress, so the predicted error time is that + the config's
    ``error_after_ps`` (retry_cnt x timeout, adaptive; + 1 timeout, fixed), independently of
    what the QP reports."""
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
    faults.at(engine(stack), us(fault_us), faults.switch_down, stack.net, f"h{src}.p{plane}.t0")
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
    QPs are routed through) fails at ``fault_us`` and comes back at ``restore_us``. RC's
    fabric routes (``ROUTING_LAB``): its T0s drop the dead T1 from their groups after
    detection, and the QPs that crossed it go on over another T1."""
    spec = spec or preset("lab-small")
    if t1 is None:
        hashed = rc_t1s(spec, pairs, plane, seed)
        t1 = max(range(spec.t1), key=lambda k: (hashed.count(k), -k))
    target = f"p{plane}.t1.{t1}"
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind, routing=ROUTING_LAB)
    conns = [stack.open(kind, s, d, transport_params(kind)) for s, d in pairs]
    for conn in conns:
        Writes(stack, conn).stream(MB, depth)
    faults.at(engine(stack), us(fault_us), faults.switch_down, stack.net, target)
    faults.at(engine(stack), us(restore_us), faults.switch_up, stack.net, target)
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
                if qp.plane == plane and ecmp_t1(spec, qp.host, qp.peer, qp.qpn, plane) == t1:
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
