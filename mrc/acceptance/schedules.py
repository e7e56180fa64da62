"""Acceptance item 7: fault schedules as data against one MRC connection.

A schedule is a list of :data:`Fault` (time, an ``mrc.sim.faults`` action, target,
parameters). :func:`random_schedule` draws episodes on every element of a pair's paths but
one protected path's; :func:`cut_schedule` then cuts every path. :func:`run_schedule` runs
one connection through a schedule and reports what was delivered, completed and reported;
:func:`schedule_sweep` is the seeded property check over many schedules."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mrc.acceptance.workload import MB, Writes, engine
from mrc.sim import faults
from mrc.sim.engine import PS_PER_US, us
from mrc.stack.stack import MrcConnection, SimStack
from mrc.stack.transport_params import mrc_config
from topology import preset
from topology.spec import FabricSpec

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
        faults.at(engine(stack), us(at_us), faults.apply, stack.net, action, target, **params_)
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
