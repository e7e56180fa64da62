"""Acceptance items 4-6: random loss on one path, an 8-to-1 incast, and a permutation of
every host (MRC against RC's go-back-N where both apply)."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from mrc.acceptance.workload import (
    MB,
    Writes,
    metrics,
    rc_t1s,
    stop_when_all_done,
    transport_params,
    uplink,
)
from mrc.labs.run.workloads import derangement
from mrc.sim import faults
from mrc.sim.engine import PS_PER_US, us
from mrc.stack.rc_connection import bdp_packets
from mrc.stack.stack import MrcConnection, SimStack
from topology import preset
from topology.spec import FabricSpec


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


def permutation(kind: str = "mrc", size: int = 2 * MB, spec: FabricSpec | None = None,
                seed: int = 1) -> Permutation:
    """Every host writes ``size`` to its image under a random derangement, all at t=0.
    Ideal FCT = size / NIC rate + base RTT (the unloaded cross-T0 round trip)."""
    spec = spec or PERMUTATION_SPEC
    stack = SimStack(spec, seed=seed, bin_ps=us(10), transport_name=kind)
    # a random permutation of the hosts with no fixed point (no host sends to itself)
    perm = list(derangement(tuple(range(spec.hosts)), seed).values())
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
