"""Seeded Monte Carlo of one job's year under fleet failure rates, for MRC and RC.

One trial draws a fault schedule for the job's footprint (Poisson arrivals per fault class,
each element class counted by :func:`mrc.labs.fleet.impact.footprint`; durations exponential
around the repair time or fixed), then plays it against each transport with the impacts the
flow model gives (:mod:`mrc.labs.fleet.impact`). Both transports see the same schedule and
the same draws (common random numbers), so their difference is not sampling noise.

The job: trains at speed ``1 / ((1 - c) + c / f)`` where ``c`` is the share of a step bound
by the network and ``f`` the job's bandwidth fraction (the lowest of the faults active: a
synchronous job goes at its slowest connection's pace; an RC stall is ``f = 0``). It saves a
checkpoint every ``checkpoint_interval`` of running time. A fatal event (a GPU or NIC lost,
or an RC QP error) loses the work since the last checkpoint and costs ``restart`` before it
trains again; an RC stall (the QP waits for routing's repair and its next retransmission)
is a stretch at ``f = 0``, lost throughput, not an interruption; the restarted job is placed around the failed element (the operator drains it),
so that event does not strike twice, while slowdowns last their whole duration.

Effective training throughput = useful work / horizon (1 = every second trained at full
speed); interruptions per day = fatal events that hit the running job, per day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mrc.labs.fleet.impact import Impact, JobImpacts
from mrc.labs.fleet.schema import Fleet

DAY_S = 86_400.0
#: classes whose events land on a host-side element, a fabric-side one, or either (links)
_SIDES = {"nic_port": ("host",), "link_down": ("host", "fabric"),
          "link_flap": ("host", "fabric"), "optics_degrade": ("host", "fabric"),
          "t0_reboot": ("host",), "t0_failure": ("host",), "t1_reboot": ("fabric",),
          "t1_failure": ("fabric",), "t1_blackhole": ("fabric",)}


@dataclass(frozen=True)
class RcTimers:
    """RC's retransmission timing (``RcConfig``, ``retry_schedule``): the local ACK timer's
    expiries after the last progress (the adaptive ladder, or the fixed timer) and when the
    QP errors (None: timeout 0, it waits forever), in seconds."""

    offsets_s: tuple[float, ...]
    error_after_s: float | None

    def stall(self, path_back_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(survives, stall length) for QPs whose path is back ``path_back_s`` after their
        last progress: they resume at the first expiry after it (the NAK of a QP still
        sending comes within microseconds; at these timers its window is long full), or
        error at the budget when no expiry comes first."""
        if self.error_after_s is None:
            return np.ones(len(path_back_s), dtype=bool), path_back_s
        offsets = np.asarray(self.offsets_s, dtype=float)
        idx = np.searchsorted(offsets, path_back_s, side="left")
        survives = idx < len(offsets)
        stall = np.where(survives, offsets[np.minimum(idx, max(len(offsets) - 1, 0))]
                         if len(offsets) else 0.0, self.error_after_s)
        return survives, stall


@dataclass
class Outcome:
    interruptions: int
    throughput: float
    by_class: dict[str, int]
    stall_s: float = 0.0  # RC: time its QPs waited for routing and a retransmission


def _population(impacts: JobImpacts, cls: str, side: str) -> int:
    fp = impacts.footprint
    if cls in ("host", "nic"):
        return fp.hosts
    if cls == "nic_port":
        return fp.nic_ports
    if cls.startswith("t0_"):
        return fp.t0s
    if cls.startswith("t1_"):
        return fp.t1s
    return fp.host_links if side == "host" else fp.fabric_links


def trial(fleet: Fleet, impacts: JobImpacts, rc: RcTimers, rng: np.random.Generator
          ) -> dict[str, Outcome]:
    """One seeded trial for both transports (``mrc``, ``rc``)."""
    horizon = fleet.days * DAY_S
    fatal: dict[str, list[tuple[float, str]]] = {"mrc": [], "rc": []}
    stalled = 0.0
    slow: dict[str, list[tuple[np.ndarray, np.ndarray, float]]] = {"mrc": [], "rc": []}
    for cls, rate in fleet.rates.items():
        sides = _SIDES.get(cls, ("host",))
        for side in sides:
            n = _population(impacts, cls, side)
            mean = rate.per_year / 365 * n * fleet.days
            count = int(rng.poisson(mean)) if mean > 0 else 0
            if not count:
                continue
            start = np.sort(rng.uniform(0.0, horizon, count))
            dur = rng.exponential(rate.duration_s, count) if rate.exponential \
                else np.full(count, rate.duration_s)
            exposed_draw = rng.uniform(size=count)
            if rate.element == "fatal":
                for t in start.tolist():
                    fatal["mrc"].append((t, cls))
                    fatal["rc"].append((t, cls))
                continue
            impact: Impact = (impacts.host_link if side == "host" else impacts.fabric)[cls]
            if impact.mrc_fraction < 1.0:
                slow["mrc"].append((start, start + dur, impact.mrc_fraction))
            exposed = exposed_draw < impact.rc_exposure
            if not exposed.any():
                continue
            s, d = start[exposed], dur[exposed]
            if cls == "optics_degrade":
                slow["rc"].append((s, s + d, impact.rc_fraction))
                continue
            # the path is back when routing moves the QPs or the element returns, whichever
            # comes first (a black hole: the operator's drain, then routing's withdrawal)
            back = d + impact.rc_after_end_s if impact.rc_repair_s is None \
                else np.minimum(d, impact.rc_repair_s)
            survives, stall = rc.stall(back)
            slow["rc"].append((s[survives], s[survives] + stall[survives], 0.0))
            stalled += float(stall[survives].sum())
            for at in (s[~survives] + stall[~survives]).tolist():
                fatal["rc"].append((at, cls))
    out = {name: _play(fatal[name], slow[name], fleet, horizon) for name in ("mrc", "rc")}
    out["rc"].stall_s = stalled
    return out


def _speed(f: np.ndarray, comm: float) -> np.ndarray:
    """Training speed at bandwidth fraction ``f`` (0 when the network stalls)."""
    with np.errstate(divide="ignore"):
        return np.where(f > 0, 1.0 / ((1.0 - comm) + comm / np.maximum(f, 1e-300)), 0.0)


def _work_curve(slow: list[tuple[np.ndarray, np.ndarray, float]], comm: float,
                horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and cumulative work W(t) (seconds at full speed): the lowest fraction of
    the slowdowns active at each instant sets the speed."""
    by_value: dict[float, list[tuple[np.ndarray, np.ndarray]]] = {}
    for start, end, f in slow:
        by_value.setdefault(f, []).append((start, np.minimum(end, horizon)))
    unions = []
    for f, parts in by_value.items():
        s = np.concatenate([p[0] for p in parts])
        e = np.concatenate([p[1] for p in parts])
        order = np.argsort(s)
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        starts = s[new]
        ends = reach[np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]]
        unions.append((f, starts, ends))
    points = np.unique(np.concatenate([[0.0, horizon]]
                                      + [np.concatenate([u[1], u[2]]) for u in unions]))
    points = points[(points >= 0) & (points <= horizon)]
    mids = (points[:-1] + points[1:]) / 2
    f_now = np.ones(len(mids))
    for f, starts, ends in unions:
        k = np.searchsorted(starts, mids, side="right") - 1
        covered = (k >= 0) & (mids < ends[np.maximum(k, 0)])
        f_now = np.where(covered, np.minimum(f_now, f), f_now)
    work = np.concatenate([[0.0], np.cumsum(_speed(f_now, comm) * np.diff(points))])
    return points, work


def _play(fatal: list[tuple[float, str]], slow: list[tuple[np.ndarray, np.ndarray, float]],
          fleet: Fleet, horizon: float) -> Outcome:
    points, work = _work_curve(slow, fleet.comm_fraction, horizon)

    def w(t: float) -> float:
        return float(np.interp(t, points, work))

    useful = 0.0
    running_since = 0.0
    interruptions = 0
    by_class: dict[str, int] = {}
    for at, cls in sorted(fatal):
        if at < running_since or at >= horizon:
            continue  # restarting (the job is not there to hit), or after the horizon
        saved = running_since + math.floor((at - running_since) / fleet.checkpoint_s) \
            * fleet.checkpoint_s
        useful += w(saved) - w(running_since)
        interruptions += 1
        by_class[cls] = by_class.get(cls, 0) + 1
        running_since = at + fleet.restart_s
    if running_since < horizon:
        useful += w(horizon) - w(running_since)
    return Outcome(interruptions, useful / horizon, by_class)


def simulate(fleet: Fleet, impacts: JobImpacts, rc: RcTimers) -> list[dict[str, object]]:
    """Every trial of one job size: rows (trial, transport, interruptions, throughput...)."""
    rows: list[dict[str, object]] = []
    for k in range(fleet.trials):
        rng = np.random.default_rng([fleet.seed, impacts.gpus, k])
        for name, out in trial(fleet, impacts, rc, rng).items():
            rows.append({"gpus": impacts.gpus, "trial": k, "transport": name,
                         "interruptions": out.interruptions,
                         "interruptions_per_day": out.interruptions / fleet.days,
                         "effective_throughput": out.throughput,
                         "stall_s_per_day": out.stall_s / fleet.days,
                         **{f"interruptions_{c}": out.by_class.get(c, 0)
                            for c in fleet.rates}})
    return rows
