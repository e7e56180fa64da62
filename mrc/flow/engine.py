"""The flow model's clock: piecewise-constant rates between events, for one transport.

Events are the fault schedule in the transport's view (:mod:`mrc.flow.conditions`), the
workload's own (a flow starts or ends, an iteration ends) and the transports' timers, taken
from the packet model's definitions:

* RC (``RcQp``): a QP whose path dies stops making progress at that instant; its local ACK
  timer retries every ``timeout`` and, if the path is back at a retry, the QP resumes there;
  otherwise it errors at ``last progress + (retry_cnt + 1) x timeout``
  (``RcConfig.error_after_ps``). A stalled QP stalls its connection (striping), and the first
  QP error fails the job (NCCL aborts on any QP error; ``RcConnection`` aborts the rest).
* MRC (``MrcQueuePair``): a connection with no live path on any plane errors at ``last
  progress + MrcConfig.error_after_ps()`` unless some path answers a probe before (progress);
  while any path lives it never errors.

Between events the rates are constant; each distinct (view, running connections) pair is
solved once and reused (a flap of a thousand cycles costs a few solves).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.fabric import Layout, View, make_view
from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive, Rates, liveness, mrc_rates, rc_rates
from mrc.flow.workload import Progress, Stream, Workload


@dataclass(frozen=True)
class TransportModel:
    """What the flow model needs of one transport (from its lab config)."""

    name: str
    kind: str  # mrc | rc
    reps: bool = True  # MRC: spray = "reps"
    reintegrate_ps: int = 0  # MRC: probes_to_reintegrate x probe_interval
    error_after_ps: int | None = None  # MRC: no live path this long -> QP error; RC: retries
    timeout_ps: int | None = None  # RC local ACK timeout (None: waits forever)
    retry_cnt: int = 7
    qps: int = 1  # RC QPs per connection (qps_per_plane x planes)
    resend_packets: float = 0.0  # RC go-back-N: packets resent per loss (the window)
    ack_ratio: float = 0.0  # ACK wire bytes per DATA wire byte (reverse path)
    ev_count: int = 128  # MRC: EVs per QP
    profile: Any = None  # MRC: its EV profile (mrc.ev.profile.EvProfile; None: generated)
    pfc: bool = False  # RC: DATA on the fabric's lossless class (PFC)


Row = tuple[float, str, str, dict[str, Any]]


@dataclass
class Trace:
    """What one transport did: segments of constant rates, event rows, outcome."""

    name: str
    kind: str
    times: list[float] = field(default_factory=list)  # segment starts (ps); last = end
    total: list[float] = field(default_factory=list)  # Gb/s per segment
    planes: list[np.ndarray] = field(default_factory=list)
    bad_evs: list[float] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    failed_at_ps: float | None = None
    failure_reason: str | None = None
    end_ps: float = 0.0
    solves: int = 0
    rounds: int = 0
    marked_bad: float = 0.0
    reintegrated: float = 0.0


def _label(groups: Groups, g: int) -> str:
    if groups.src_host is not None and groups.dst_host is not None:
        return f"h{groups.src_host[g]}->h{groups.dst_host[g]}"
    return f"{int(groups.mult[g])} connections (class {groups.src[g]}->{groups.dst[g]})"


def simulate(layout: Layout, groups: Groups, entries: Entries, work: Workload,
             model: TransportModel, changes: list[cond.Change], *, end_ps: float,
             class_index: dict[int, int], batch_ps: float = 0.0) -> tuple[Trace, Progress]:
    """Run one transport from 0 to ``end_ps`` (or until a finite workload is done)."""
    trace = Trace(model.name, model.kind)
    progress = Progress(work, groups, layout.spec, layout.spec.planes)
    finite = not isinstance(work, Stream)
    actual = cond.rc_view(changes)
    seen = cond.mrc_view(changes, model.reintegrate_ps) if model.kind == "mrc" else actual
    for c in changes:  # the fault rows, as the packet run's events.csv has them
        trace.rows.append((float(c.time_ps), c.action, c.target,
                           {"fault": c.fault, **dict(c.params)}))
    views: dict[cond.Conditions, tuple[View, Alive]] = {}
    solved: dict[tuple[cond.Conditions, bytes], Rates] = {}
    n = len(groups)
    state_seen: dict[tuple[str, str], float] = {}
    state_actual: dict[tuple[str, str], float] = {}
    i_seen = i_actual = 0
    timers = _Timers(model, groups, entries, trace)
    prev_alive: np.ndarray | None = None
    t = 0.0

    def view_of(key: cond.Conditions) -> tuple[View, Alive]:
        if key not in views:
            v = make_view(layout, key, class_index)
            views[key] = (v, liveness(layout, groups, entries, v))
        return views[key]

    while t < end_ps and not (finite and progress.finished):
        while i_seen < len(seen) and seen[i_seen].time_ps <= t:
            cond.apply(state_seen, seen[i_seen])
            i_seen += 1
        while i_actual < len(actual) and actual[i_actual].time_ps <= t:
            cond.apply(state_actual, actual[i_actual])
            i_actual += 1
        key_seen = cond.freeze(state_seen)
        view, alive = view_of(key_seen)
        _, alive_actual = view_of(cond.freeze(state_actual))
        wanted = progress.running(t)
        if trace.failed_at_ps is None:
            timers.update(t, wanted, alive_actual, progress)
        if trace.failed_at_ps is not None and finite:
            break
        run = wanted & ~timers.stalled() if trace.failed_at_ps is None \
            else np.zeros(n, dtype=bool)
        # ---- rates (each distinct view and set of running connections solved once)
        rkey = (key_seen, hashlib.blake2b(np.packbits(run).tobytes(), digest_size=16).digest())
        rates = solved.get(rkey)
        if rates is None:
            if model.kind == "mrc":
                rates = mrc_rates(layout, groups, entries, view, alive, run, reps=model.reps,
                                  ack_ratio=model.ack_ratio)
            else:
                rates = rc_rates(layout, groups, entries, view, alive, run, qps=model.qps,
                                 resend_packets=model.resend_packets,
                                 ack_ratio=model.ack_ratio)
            solved[rkey] = rates
            trace.solves += 1
            trace.rounds += rates.rounds
        if model.kind == "mrc":
            prev_alive = _ev_changes(trace, model, groups, entries, alive, prev_alive, t)
        conn = np.where(run, rates.conn_gbps, 0.0)
        blocked = wanted & ~run if model.kind == "rc" else wanted & (rates.dead | ~run)
        total, per_plane = progress.goodput(t, conn, rates.plane_share, blocked, run)
        # ---- the next event
        nxt = float(end_ps)
        if i_seen < len(seen):
            nxt = min(nxt, float(seen[i_seen].time_ps))
        if i_actual < len(actual):
            nxt = min(nxt, float(actual[i_actual].time_ps))
        if trace.failed_at_ps is None:
            nxt = min(nxt, progress.next_event(t, conn, blocked, run, batch_ps),
                      timers.due(t, alive_actual))
        if nxt <= t:
            nxt = float(end_ps)  # nothing moves and nothing is due
        trace.times.append(t)
        trace.total.append(total)
        trace.planes.append(per_plane)
        trace.bad_evs.append(rates.bad_evs)
        if trace.failed_at_ps is None:
            trace.rows.extend(progress.advance(t, nxt, conn, blocked, run))
        t = nxt
    trace.end_ps = min(t, float(end_ps))
    trace.times.append(trace.end_ps)
    return trace, progress


def _ev_changes(trace: Trace, model: TransportModel, groups: Groups, entries: Entries,
                alive: Alive, prev: np.ndarray | None, t: float) -> np.ndarray:
    """MRC: log how many EVs left GOOD (path down) or came back (reintegrated) at ``t``."""
    now = alive.up & (entries.count > 0)
    if prev is not None:
        weight = entries.count * groups.mult[entries.group]
        bad = float((weight * (prev & ~now)).sum())
        back = float((weight * (~prev & now)).sum())
        if bad or back:
            trace.marked_bad += bad
            trace.reintegrated += back
            trace.rows.append((t, "ev_states", model.name,
                               {"assumed_bad": round(bad), "reintegrated": round(back),
                                "model": "flow"}))
    return now


class _Timers:
    """The transports' clocks: RC's local ACK timer per stalled connection, MRC's watchdog
    per connection with no live path (module docstring)."""

    def __init__(self, model: TransportModel, groups: Groups, entries: Entries,
                 trace: Trace) -> None:
        self.model = model
        self.groups = groups
        self.entries = entries
        self.trace = trace
        n = len(groups)
        self.since = np.full(n, np.inf)  # RC: last progress of a stalled connection
        self.silent = np.full(n, np.inf)  # MRC: since when no path of the connection lives

    def stalled(self) -> np.ndarray:
        return np.isfinite(self.since)

    def _dead(self, alive: Alive) -> np.ndarray:
        e = self.entries
        return np.bincount(e.group, weights=(e.count > 0) & ~alive.up,
                           minlength=len(self.groups)) > 0

    def update(self, t: float, wanted: np.ndarray, alive: Alive, progress: Progress) -> None:
        model = self.model
        if model.kind == "rc":
            dead = self._dead(alive)
            stalled = self.stalled()
            self.since[wanted & ~stalled & dead] = t
            if model.timeout_ps is None:
                return
            timeout = float(model.timeout_ps)
            waited = np.where(stalled, t - self.since, 0.0)
            k = np.round(waited / timeout)
            on_retry = stalled & (np.abs(waited - k * timeout) < 1.0) & (k >= 1)
            resume = on_retry & (k <= model.retry_cnt) & ~dead
            for g in np.flatnonzero(resume).tolist():
                label = _label(self.groups, g)
                for j in range(1, int(k[g]) + 1):
                    self.trace.rows.append((self.since[g] + j * timeout, "retry", label,
                                            {"retry": j, "model": "flow"}))
            self.since[resume] = np.inf
            errored = stalled & (t >= self.since + (model.retry_cnt + 1) * timeout - 1.0)
            if errored.any():
                g = int(np.flatnonzero(errored)[0])
                _fail(self.trace, progress, self.groups, g, t, model, float(self.since[g]))
        elif model.error_after_ps is not None:
            e = self.entries
            live = np.bincount(e.group, weights=alive.up & (e.count > 0),
                               minlength=len(self.groups)) > 0
            self.silent[live] = np.inf
            self.silent[wanted & ~live & ~np.isfinite(self.silent)] = t
            over = np.isfinite(self.silent) & (t >= self.silent + model.error_after_ps - 1.0)
            if over.any():
                g = int(np.flatnonzero(over)[0])
                _fail(self.trace, progress, self.groups, g, t, model, float(self.silent[g]))

    def due(self, t: float, alive: Alive) -> float:
        """The next timer that can change something after ``t``."""
        model = self.model
        nxt = np.inf
        if model.kind == "rc" and model.timeout_ps is not None:
            stalled = self.stalled()
            if stalled.any():
                timeout = float(model.timeout_ps)
                anchor = self.since[stalled]
                k = np.floor((t - anchor) / timeout + 1e-9) + 1
                retry = anchor + k * timeout
                error = anchor + (model.retry_cnt + 1) * timeout
                dead = self._dead(alive)[stalled]
                nxt = float(np.where(dead, error, np.minimum(retry, error)).min())
        if model.kind == "mrc" and model.error_after_ps is not None:
            waiting = np.isfinite(self.silent)
            if waiting.any():
                nxt = min(nxt, float((self.silent[waiting] + model.error_after_ps).min()))
        return nxt


def _fail(trace: Trace, progress: Progress, groups: Groups, g: int, t: float,
          model: TransportModel, since: float) -> None:
    label = _label(groups, g)
    if model.kind == "rc":
        timeout_us = (model.timeout_ps or 0) / 1e6
        reason = (f"retry count exceeded (IBV_WC_RETRY_EXC_ERR): {model.retry_cnt} retries of "
                  f"the {timeout_us:g} us local ACK timeout without progress")
        for k in range(1, model.retry_cnt + 1):
            trace.rows.append((since + k * (model.timeout_ps or 0), "retry", label,
                               {"retry": k, "model": "flow"}))
    else:
        reason = "no path made progress (every EV's path is down)"
    trace.rows.append((t, "qp_error", label, {"reason": reason, "model": "flow"}))
    trace.rows.append((t, "connection_failed", label, {"reason": reason}))
    trace.rows.append((t, "job_failed", label, {"reason": f"QP error: {reason}"}))
    trace.failed_at_ps = t
    trace.failure_reason = f"QP error: {reason}"
    progress.fail(t)
