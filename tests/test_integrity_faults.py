"""Delivery integrity under random faults (issue 7).

Hypothesis draws a small multi-plane fabric (1-8 planes, 1-4 T1 per plane, 1-3 T0s), a few
host pairs each on MRC or RC, WRITEs from 1 byte to 3 MB, and a fault schedule mixing link,
switch and NIC-port downs and ups, flaps, restores, random loss, degraded links and operator
drains (``stack.deny``/``stack.allow``). Every run goes through the real simulator
(``SimStack``), and every pair also posts one WRITE just after the last fault.

Whether a pair still has a path is decided by :class:`FabricModel`, which replays the
schedule on the *topology* (``topology.paths``: which links each path crosses, which links
each switch and NIC port holds) and never asks a transport what it thinks. At the end each
MRC pair is in one of three classes:

* ``up``: some path is clean (every link up, no loss either way, not drained). Every WRITE
  completes exactly once, verified, with exactly its bytes placed, and the QP never errors.
* ``cut``: every path is hard-cut (a link down, loss 1.0 one way, or drained). The QP reports
  a retry-exhausted error; every WRITE is reported; none completes after the error (so no
  partial WRITE is reported complete); the WRITE posted after the last fault fails.
* ``lossy``: neither (only lossy paths left): either outcome above, with its checks.

RC pairs (NCCL-style, one QP per plane pinned to one path): every WRITE verified or the
connection fails with a QP error; never a corrupt or duplicate completion; a connection whose
QPs' paths no fault ever touched completes.

The number of cases follows the hypothesis profile (``tests/conftest.py``): three times the
profile's ``max_examples``, i.e. 300 in the default ``ci`` profile and 3,000 with
``MRC_HYPOTHESIS_PROFILE=thorough``. The module prints its figures (cases, faults injected,
bytes verified) when it finishes.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc.sim import faults
from mrc.sim.engine import PS_PER_US, us
from mrc.stack.evset import paths_of
from mrc.stack.stack import Connection, MrcConnection, RcConnectionAdapter, SimStack
from mrc.transport.base import (
    EVENT_CONNECTION_FAILED,
    EVENT_MESSAGE_COMPLETED,
    EVENT_QP_ERROR,
)
from topology import names
from topology.paths import Path as FabricPath
from topology.paths import path, paths_between
from topology.spec import FabricSpec

MB = 1 << 20
#: Faults happen in [0, HORIZON_US]; every pair posts one more WRITE TAIL_US after the last.
HORIZON_US = 300
TAIL_US = 1
#: MRC timers: RTO 16.4 us; error 16.4 x (2^6 - 1) = 1,032 us after the last progress, longer
#: than any outage the schedule can cause before its last fault (at most HORIZON_US).
MRC_PARAMS: dict[str, Any] = {"ev_timeout_us": 16.384, "timeout": 4, "retry_linear_cnt": 0,
                               "retry_exp_cnt": 5}
#: RC: local ACK timeout 32.8 us, 7 retries: error 262 us after the last progress.
RC_PARAMS: dict[str, Any] = {"timeout_exp": 3}
#: Simulated time allowed after the last fault for everything to be reported.
CAP_AFTER_US = 30_000
CASES = 3 * settings().max_examples  # settings() is the loaded profile's
SETTINGS = settings(max_examples=CASES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: One fault as data: (time in us, operation, target, parameters). Operations are the
#: primitives of ``mrc.sim.faults`` plus ``deny``/``allow`` (drain; target ``"drain"``,
#: parameters plane and t1, either None for "any").
Fault = tuple[float, str, str, dict[str, Any]]

STATS: Counter[str] = Counter()


# ====================================================================== the topology model
class FabricModel:
    """The fabric's fault state replayed from the schedule on the topology alone.

    Links are held down by causes, as the fault primitives document: ``"link"`` (link_down),
    ``"nic"`` (nic_port_down) and a switch's name (switch_down holds every link of the
    switch); loss is per link and direction; drains are replayed per path.
    """

    def __init__(self, spec: FabricSpec) -> None:
        self.spec = spec
        self.causes: dict[str, set[str]] = defaultdict(set)
        self.loss: dict[tuple[str, str], float] = {}
        self.drains: list[tuple[bool, int | None, int | None]] = []
        self.touched: set[str] = set()  # links and switches any fault acted on

    def switch_links(self, name: str) -> list[str]:
        element = names.resolve(self.spec, name)
        plane, spec = element.plane, self.spec
        assert plane is not None
        if element.kind == names.T0:
            t0 = element.index
            assert t0 is not None
            hosts = range(t0 * spec.hosts_per_t0, (t0 + 1) * spec.hosts_per_t0)
            return ([names.host_link_name(h, plane, t0) for h in hosts]
                    + [names.fabric_link_name(plane, t0, k) for k in range(spec.t1)])
        return [names.fabric_link_name(plane, i, element.index)  # type: ignore[arg-type]
                for i in range(spec.t0_per_plane)]

    def link_of(self, target: str) -> str:
        """The link a link or NIC-port target acts on."""
        element = names.resolve(self.spec, target)
        if element.kind == names.NIC_PORT:
            return names.uplink_name(self.spec, element.host, element.plane)  # type: ignore[arg-type]
        assert element.kind == names.LINK, target
        return element.name

    def apply(self, op: str, target: str, params: dict[str, Any]) -> None:
        if op in ("deny", "allow"):
            self.drains.append((op == "deny", params["plane"], params["t1"]))
            return
        if op in ("switch_down", "switch_up") or (op == "restore" and ".t" in target
                                                  and "--" not in target):
            links = self.switch_links(target)
            self.touched |= {target, *links}
            for link in links:
                (self.causes[link].add if op == "switch_down" else self.causes[link].discard)(
                    target)
            return
        link = self.link_of(target)
        self.touched.add(link)
        if op == "link_down":
            self.causes[link].add("link")
        elif op == "link_up":
            self.causes[link].discard("link")
        elif op == "nic_port_down":
            self.causes[link].add("nic")
        elif op == "nic_port_up":
            self.causes[link].discard("nic")
        elif op == "set_loss":
            for d in _directions(params.get("direction")):
                self.loss[(link, d)] = params["p"]
        elif op == "restore":
            self.causes[link] -= {"link", "nic"}
            for d in ("up", "down"):
                self.loss[(link, d)] = 0.0
        elif op != "degrade":  # a slower link still delivers everything: no state here
            raise AssertionError(f"unknown op {op}")

    # ------------------------------------------------------------------ per path
    def link_up(self, link: str) -> bool:
        return not self.causes.get(link)

    def drained(self, p: FabricPath) -> bool:
        state = False
        for deny, plane, t1 in self.drains:  # stack._drain's matching rule, replayed
            if (plane is None or plane == p.plane) and (t1 is None or p.t1 is None
                                                        or p.t1 == t1):
                state = deny
        return state

    def clean(self, p: FabricPath) -> bool:
        """Up end to end, no loss either way, not drained."""
        return not self.drained(p) and all(
            self.link_up(link) and self.loss.get((link, "up"), 0.0) == 0.0
            and self.loss.get((link, "down"), 0.0) == 0.0 for link in p.links)

    def hard_cut(self, p: FabricPath) -> bool:
        """Nothing can make it through and back: a link down, certain loss, or drained."""
        return self.drained(p) or any(
            not self.link_up(link) or self.loss.get((link, "up"), 0.0) >= 1.0
            or self.loss.get((link, "down"), 0.0) >= 1.0 for link in p.links)

    def forward_cut(self, p: FabricPath) -> bool:
        """No data can reach the destination (the ACK direction may still work)."""
        half = len(p.links) // 2  # the first half of the links is crossed upwards
        return self.drained(p) or any(
            not self.link_up(link) or self.loss.get((link, "up" if i < half else "down"),
                                                    0.0) >= 1.0
            for i, link in enumerate(p.links))

    def ever_touched(self, p: FabricPath) -> bool:
        return any(x in self.touched for x in (*p.links, *p.hops))

    def check_against(self, stack: SimStack) -> None:
        """The simulator's links agree with the model (a check on the fault primitives)."""
        for name, link in stack.net.links.items():
            assert link.is_up == self.link_up(name), (name, link.causes, self.causes[name])
            assert link.up_port.loss_p == self.loss.get((name, "up"), 0.0), name
            assert link.down_port.loss_p == self.loss.get((name, "down"), 0.0), name


def _directions(direction: str | None) -> tuple[str, ...]:
    return ("up", "down") if direction in (None, "both") else (direction,)  # type: ignore[return-value]


# ====================================================================== strategies
@dataclass
class PairPlan:
    kind: str
    src: int
    dst: int
    writes: list[tuple[float, int]]  # (post time us, bytes)
    tail_bytes: int


@dataclass
class Scenario:
    spec: FabricSpec
    pairs: list[PairPlan]
    faults: list[Fault]
    seed: int
    ev_factor: int

    @property
    def last_fault_us(self) -> float:
        return max((f[0] for f in self.faults), default=0.0)

    def describe(self) -> str:
        s = self.spec
        return (f"planes={s.planes} hosts={s.hosts}/{s.hosts_per_t0} per T0 t1={s.t1} "
                f"seed={self.seed} pairs={[(p.kind, p.src, p.dst) for p in self.pairs]}")


sizes = st.one_of(st.sampled_from((1, 2, 4095, 4096, 4097, 12_288, 65_536, MB, 3 * MB)),
                  st.integers(1, 3 * MB))


@st.composite
def fabrics(draw: st.DrawFn) -> FabricSpec:
    planes = draw(st.integers(1, 8))
    t1 = draw(st.integers(1, 4))
    per_t0 = draw(st.integers(1, 3))
    t0s = draw(st.integers(1 if per_t0 > 1 else 2, 3))
    return FabricSpec(planes=planes, hosts=per_t0 * t0s, hosts_per_t0=per_t0, t1_per_plane=t1)


def elements(spec: FabricSpec) -> dict[str, list[str]]:
    """Every fault target of the fabric by kind."""
    links, switches, ports = [], [], []
    for plane in range(spec.planes):
        for h in range(spec.hosts):
            links.append(names.host_link_name(h, plane, spec.t0_of(h)))
            ports.append(names.nic_port_name(h, plane))
        for i in range(spec.t0_per_plane):
            switches.append(names.t0_name(plane, i))
            for k in range(spec.t1):
                links.append(names.fabric_link_name(plane, i, k))
        switches += [names.t1_name(plane, k) for k in range(spec.t1)]
    return {"link": links, "switch": switches, "nic": ports}


@st.composite
def fault_lists(draw: st.DrawFn, spec: FabricSpec, pairs: list[tuple[int, int]]
                ) -> list[Fault]:
    everything = elements(spec)
    near: dict[str, list[str]] = {"link": [], "switch": [], "nic": []}
    for src, dst in pairs:  # elements on the pairs' paths: most faults should matter
        for p in paths_between(spec, src, dst):
            near["link"] += p.links
            near["switch"] += [h for h in p.hops if ".t" in h]
            near["nic"] += [h for h in p.hops if ".t" not in h]

    def pick(kind: str) -> str:
        pool = near[kind] if draw(st.integers(0, 3)) else everything[kind]
        return draw(st.sampled_from(sorted(set(pool))))

    out: list[Fault] = []
    for _ in range(draw(st.integers(0, 10))):
        t = float(draw(st.integers(0, HORIZON_US)))
        op = draw(st.sampled_from(("link_down", "link_up", "switch_down", "switch_up",
                                   "nic_port_down", "nic_port_up", "flap", "set_loss",
                                   "degrade", "restore", "deny", "allow")))
        if op in ("link_down", "link_up"):
            out.append((t, op, pick("link"), {}))
        elif op in ("switch_down", "switch_up"):
            out.append((t, op, pick("switch"), {}))
        elif op in ("nic_port_down", "nic_port_up"):
            out.append((t, op, pick("nic"), {}))
        elif op == "flap":
            link = pick("link")
            down, up = draw(st.integers(1, 40)), draw(st.integers(1, 40))
            for k in range(draw(st.integers(1, 4))):
                start = t + k * (down + up)
                out += [(start, "link_down", link, {"flap": k}),
                        (start + down, "link_up", link, {"flap": k})]
        elif op == "set_loss":
            out.append((t, op, pick("link"), {
                "p": draw(st.sampled_from((0.0, 0.01, 0.1, 1.0))),
                "direction": draw(st.sampled_from((None, "up", "down")))}))
        elif op == "degrade":
            out.append((t, op, pick("link"), {
                "fraction": draw(st.sampled_from((0.25, 0.5, 1.0))),
                "direction": draw(st.sampled_from((None, "up", "down")))}))
        elif op == "restore":
            out.append((t, op, pick(draw(st.sampled_from(("link", "switch")))), {}))
        else:
            plane = draw(st.none() | st.integers(0, spec.planes - 1))
            t1 = draw(st.none() | st.integers(0, spec.t1 - 1))
            out.append((t, op, "drain", {"plane": plane, "t1": t1}))
    out.sort(key=lambda f: f[0])  # stable: same-time faults keep their order
    # an ending that decides a pair's fate: cut it, leave it only lossy paths, or heal
    ending = draw(st.sampled_from(("none", "cut", "lossy", "heal")))
    if ending != "none":
        t = max((f[0] for f in out), default=0.0) + draw(st.integers(0, 50))
        src, dst = draw(st.sampled_from(pairs))
        out += endings(spec, ending, src, dst, t, draw)
    return out


def endings(spec: FabricSpec, ending: str, src: int, dst: int, t: float,
            draw: st.DrawFn) -> list[Fault]:
    planes = range(spec.planes)
    if ending == "heal":
        return ([(t, "restore", s, {}) for s in elements(spec)["switch"]]
                + [(t, "restore", link, {}) for link in elements(spec)["link"]]
                + [(t, "allow", "drain", {"plane": None, "t1": None})])
    host = draw(st.sampled_from((src, dst)))
    uplinks = [names.host_link_name(host, p, spec.t0_of(host)) for p in planes]
    if ending == "lossy":
        p = draw(st.sampled_from((0.01, 0.1)))
        return [(t, "set_loss", link, {"p": p, "direction": None}) for link in uplinks]
    how = draw(st.sampled_from(("nic", "t0", "t1", "drain", "loss")))
    if how == "nic":
        return [(t, "nic_port_down", names.nic_port_name(host, p), {}) for p in planes]
    if how == "t0":
        return [(t, "switch_down", names.t0_name(p, spec.t0_of(host)), {}) for p in planes]
    if how == "t1":  # cuts only pairs under different T0s
        return [(t, "switch_down", names.t1_name(p, k), {}) for p in planes
                for k in range(spec.t1)]
    if how == "drain":
        return [(t, "deny", "drain", {"plane": None, "t1": None})]
    direction = draw(st.sampled_from((None, "up", "down")))
    return [(t, "set_loss", link, {"p": 1.0, "direction": direction}) for link in uplinks]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    spec = draw(fabrics())
    hosts = st.integers(0, spec.hosts - 1)
    plans = []
    for _ in range(draw(st.integers(1, 3))):
        src = draw(hosts)
        other = draw(st.integers(0, spec.hosts - 2))
        dst = other + (other >= src)  # any host but src, without a filter
        writes = draw(st.lists(st.tuples(st.integers(0, HORIZON_US).map(float), sizes),
                               min_size=0, max_size=3))
        plans.append(PairPlan(draw(st.sampled_from(("mrc", "rc"))), src, dst, writes,
                              draw(sizes)))
    fault_list = draw(fault_lists(spec, [(p.src, p.dst) for p in plans]))
    return Scenario(spec, plans, fault_list, draw(st.integers(0, 2**16)),
                    draw(st.integers(1, 2)))


# ====================================================================== running one case
@dataclass
class PairRun:
    plan: PairPlan
    conn: Connection
    sizes: list[int] = field(default_factory=list)
    posted_ps: list[int] = field(default_factory=list)
    reports: dict[int, list[tuple[int, bool]]] = field(default_factory=dict)
    raw_completions: Counter[int] = field(default_factory=Counter)

    def post(self, now: int, size: int) -> None:
        index = len(self.sizes)
        self.sizes.append(size)
        self.posted_ps.append(now)
        self.reports[index] = []

        def done(t: int, ok: bool) -> None:
            self.reports[index].append((t, ok))

        self.conn.write(now, size, done)

    @property
    def all_reported(self) -> bool:
        return all(self.reports.values())

    @property
    def settled(self) -> bool:
        """Every WRITE reported and, for MRC, the sender done too (all acknowledged, or
        failed): a receiver completes a WRITE before the sender learns it."""
        if not self.all_reported:
            return False
        conn = self.conn
        if isinstance(conn, MrcConnection) and not conn.failed:
            return conn.sender.stats.messages_sent == len(self.sizes)
        return True

    def bytes_placed(self) -> int:
        if isinstance(self.conn, MrcConnection):
            return self.conn.receiver.bytes_placed
        assert isinstance(self.conn, RcConnectionAdapter)
        return self.conn.conn.bytes_placed


def _spy(run: PairRun) -> None:
    """Count completions where the transport raises them, before ``Connection`` dedups."""
    conn = run.conn
    inner = conn.on_event

    def on_event(event: Any, qp: Any) -> None:
        if isinstance(conn, MrcConnection):
            if event.kind == EVENT_MESSAGE_COMPLETED and qp is conn.receiver:
                run.raw_completions[int(event.msg_id)] += 1
        elif isinstance(conn, RcConnectionAdapter):
            for ev in conn.conn.events:
                if ev.kind == EVENT_MESSAGE_COMPLETED:
                    run.raw_completions[int(ev.msg_id)] += 1
        inner(event, qp)

    conn.on_event = on_event  # type: ignore[method-assign]


def _post(job: tuple[SimStack, PairRun, int]) -> None:
    stack, run, size = job
    run.post(stack.sim.now, size)


def _drain(job: tuple[SimStack, bool, int | None, int | None]) -> None:
    stack, deny, plane, t1 = job
    (stack.deny if deny else stack.allow)(stack.sim.now, plane, t1)


def run_scenario(sc: Scenario) -> tuple[SimStack, list[PairRun], FabricModel]:
    stack = SimStack(sc.spec, seed=sc.seed, transport_name="mix")
    runs = []
    for plan in sc.pairs:
        if plan.kind == "mrc":
            paths = len(paths_between(sc.spec, plan.src, plan.dst))
            params = {**MRC_PARAMS, "ev_count": paths * sc.ev_factor}
        else:
            params = dict(RC_PARAMS)
        run = PairRun(plan, stack.open(plan.kind, plan.src, plan.dst, params))
        _spy(run)
        runs.append(run)
        for at_us, size in plan.writes:
            stack.sim.at(us(at_us), _post, (stack, run, size))
        stack.sim.at(us(sc.last_fault_us + TAIL_US), _post, (stack, run, plan.tail_bytes))

    for at_us, op, target, params in sc.faults:
        if op in ("deny", "allow"):
            stack.sim.at(us(at_us), _drain, (stack, op == "deny", params["plane"], params["t1"]))
        else:
            kwargs = {k: v for k, v in params.items() if k != "flap"}
            faults.at(stack.sim, us(at_us), faults.apply, stack.net, op, target, **kwargs)
    posted_last = max([sc.last_fault_us + TAIL_US]
                      + [t for p in sc.pairs for t, _ in p.writes])
    end = us(posted_last + CAP_AFTER_US)
    # run in slices; stop as soon as every WRITE is reported
    while stack.sim.now < end:
        stack.sim.run(min(end, stack.sim.now + us(200)))
        if stack.sim.now >= us(posted_last) and all(r.settled for r in runs):
            break
        if stack.sim.pending() == 0:
            break
    model = FabricModel(sc.spec)
    for _, op, target, params in sc.faults:
        model.apply(op, target, params)
    return stack, runs, model


# ====================================================================== the properties
def check_common(run: PairRun) -> None:
    """Both transports: nothing corrupt, nothing completed twice, no byte placed twice;
    every WRITE reported."""
    conn = run.conn
    assert conn.messages_corrupt == 0, "a WRITE completed with the wrong bytes"
    for index, reports in run.reports.items():
        assert len(reports) <= 1, f"WRITE {index} reported {len(reports)} times"
    assert all(n == 1 for n in run.raw_completions.values()), run.raw_completions
    ok_sizes = [run.sizes[i] for i, r in run.reports.items() if r and r[0][1]]
    placed = run.bytes_placed()
    assert sum(ok_sizes) <= placed <= sum(run.sizes), (ok_sizes, placed, run.sizes)
    if conn.failed:
        assert conn.failure_reason, "a failed connection must say why"
        assert conn.failed_at_ps is not None
        late_ok = [i for i, r in run.reports.items()
                   if r and r[0][1] and r[0][0] > conn.failed_at_ps]
        assert not late_ok, f"WRITEs {late_ok} reported complete after the error"
    assert run.all_reported, (
        f"WRITEs never reported: {[i for i, r in run.reports.items() if not r]} "
        f"(failed={conn.failed})")
    if not conn.failed:
        assert all(r[0][1] for r in run.reports.values())
        assert placed == sum(run.sizes), "bytes lost or placed twice"


def check_mrc(run: PairRun, model: FabricModel, sc: Scenario) -> str:
    conn = run.conn
    assert isinstance(conn, MrcConnection)
    spec, plan = sc.spec, run.plan
    paths = paths_between(spec, plan.src, plan.dst)
    covered = set(paths_of(conn.sender.paths))
    # the EV set reaches every path of the topology, so a topological path is usable
    assert {(p.plane, p.t1) for p in paths} <= covered
    if any(model.clean(p) for p in paths):
        verdict = "up"
        assert not conn.failed, f"QP error with a clean path left: {conn.failure_reason}"
        assert all(r[0][1] for r in run.reports.values())
        assert conn.receiver.bytes_placed == sum(run.sizes)
        assert conn.sender.stats.messages_sent == len(run.sizes), "sender never saw the ACKs"
    elif all(model.hard_cut(p) for p in paths):
        verdict = "cut"
        assert conn.failed, "every path is cut but the QP did not report an error"
    else:
        verdict = "lossy"
    if conn.failed:
        assert "retries exhausted" in (conn.failure_reason or ""), conn.failure_reason
        assert conn.failed_at_ps is not None
        qp = conn.sender
        assert f"h{qp.host}.qp{qp.qpn}" in logged_targets(conn.stack, EVENT_QP_ERROR)
        if verdict == "cut":  # within the give-up time of the cut (slack: queued ACKs)
            error_after = conn.sender.config.error_after_ps()
            assert error_after is not None
            assert conn.failed_at_ps <= max(run.posted_ps) + 2 * error_after
    if verdict == "cut" and all(model.forward_cut(p) for p in paths):
        # posted after the last fault with no way forward: they cannot have been placed
        late = [i for i, t in enumerate(run.posted_ps) if t > us(sc.last_fault_us)]
        assert late and not any(run.reports[i][0][1] for i in late)
    return verdict


def check_rc(run: PairRun, model: FabricModel, sc: Scenario) -> str:
    conn = run.conn
    assert isinstance(conn, RcConnectionAdapter)
    # RC rides the routed fabric (issue 36): its data and its ACKs may take any T1 of its
    # plane as routing repairs and rebalances (resilient groups hand a returning member other
    # flows' buckets), so every path of the QP's plane between the pair, both ways, is its
    src, dst = run.plan.src, run.plan.dst
    qp_paths = [path(sc.spec, a, b, qp.plane, t1) for qp in conn.conn.requesters
                for a, b in ((src, dst), (dst, src)) for t1 in range(sc.spec.t1)]
    if not any(model.ever_touched(p) for p in qp_paths):
        assert not conn.failed, f"RC failed with no fault on its paths: {conn.failure_reason}"
    if conn.failed:
        logged = logged_targets(conn.stack, EVENT_CONNECTION_FAILED)
        assert f"h{conn.src}->h{conn.dst}" in logged, "RC failed without logging it"
        return "failed"
    return "ok"


def logged_targets(stack: SimStack, kind: str) -> set[str]:
    events = stack.events()
    return set(events.target[events.kind == kind])


@SETTINGS
@given(scenarios())
def test_random_faults_never_lose_duplicate_or_corrupt(sc: Scenario) -> None:
    stack, runs, model = run_scenario(sc)
    model.check_against(stack)
    verdicts = []
    for run in runs:
        check_common(run)
        if run.plan.kind == "mrc":
            verdicts.append("mrc_" + check_mrc(run, model, sc))
        else:
            verdicts.append("rc_" + check_rc(run, model, sc))
    assert stack.totals()["messages_corrupt"] == 0
    STATS["cases"] += 1
    STATS["pairs"] += len(runs)
    STATS["faults_injected"] += sum(f[1] != "restore" for f in sc.faults)
    STATS["restores"] += sum(f[1] == "restore" for f in sc.faults)
    assert len(stack.net.fault_log) + sum(f[1] in ("deny", "allow") for f in sc.faults) \
        == len(sc.faults), "a scheduled fault did not run"
    STATS["messages"] += sum(len(r.sizes) for r in runs)
    STATS["messages_verified"] += sum(1 for r in runs for x in r.reports.values()
                                      if x and x[0][1])
    STATS["bytes_verified"] += sum(r.sizes[i] for r in runs for i, x in r.reports.items()
                                   if x and x[0][1])
    STATS["sim_us"] += stack.sim.now // PS_PER_US
    for v in verdicts:
        STATS[v] += 1


@pytest.fixture(scope="module", autouse=True)
def _report_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the suite's figures (and write them to $MRC_INTEGRITY_STATS if set)."""
    yield
    if not STATS:
        return
    line = ("integrity: " + ", ".join(f"{k}={v:,}" for k, v in sorted(STATS.items())))
    plugins = request.config.pluginmanager
    reporter = plugins.getplugin("terminalreporter")
    capture = plugins.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)
    target = os.environ.get("MRC_INTEGRITY_STATS")
    if target:
        with open(target, "w", encoding="utf-8") as f:
            json.dump(dict(STATS), f, indent=2, sort_keys=True)


def test_rc_write_posted_on_a_dead_port_errors() -> None:
    spec = FabricSpec(planes=1, hosts=2, hosts_per_t0=1, t1_per_plane=1)
    stack = SimStack(spec, seed=0)
    conn = stack.open("rc", 0, 1, dict(RC_PARAMS))
    faults.nic_port_down(stack.net, "h0.p0")  # the sender's only port dies ...
    done: list[tuple[int, bool]] = []
    conn.write(us(1), 4096, lambda t, ok: done.append((t, ok)))  # ... then a WRITE is posted
    stack.sim.run(us(100_000))  # 100 ms: hundreds of times RC's 262 us give-up time
    assert conn.failed and done and not done[0][1], (done, conn.failed)


def test_mrc_write_posted_on_a_dead_port_errors() -> None:
    """The same case on MRC: its watchdog starts at the post, so the QP errors on time."""
    spec = FabricSpec(planes=1, hosts=2, hosts_per_t0=1, t1_per_plane=1)
    stack = SimStack(spec, seed=0)
    conn = stack.open("mrc", 0, 1, dict(MRC_PARAMS))
    faults.nic_port_down(stack.net, "h0.p0")
    done: list[tuple[int, bool]] = []
    conn.write(us(1), 4096, lambda t, ok: done.append((t, ok)))
    stack.sim.run(us(100_000))
    assert conn.failed and "retries exhausted" in (conn.failure_reason or "")
    assert done == [(conn.failed_at_ps, False)]
