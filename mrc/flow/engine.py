"""The flow model's clock: piecewise-constant rates between events, for one transport.

Events are the fault schedule in the transport's view (:mod:`mrc.flow.conditions`), the
workload's own (a flow starts or ends, an iteration ends) and the transports' timers, taken
from the packet model's definitions:

* RC (``RcRequester``, as deployed: DCQCN paces it, so at most ``window_pkts`` = 1024 packets
  are ever outstanding, far more than a round trip): a QP whose path dies stops making
  progress at that instant but keeps sending until its window is full. When the path comes
  back while it still sends, the first packet through is out of sequence, the responder's
  NAK rewinds it, and it makes progress again one and a half round trips later
  (``resume_ps``); when its window filled first, it waits for its next local ACK timer
  retry (every ``timeout``). Otherwise it errors at ``last progress + (retry_cnt + 1) x
  timeout`` (``RcConfig.error_after_ps``). A stalled QP stalls its connection (striping),
  and the first QP error fails the job (NCCL aborts on any QP error; ``RcConnection``
  aborts the rest).
* RC's DCQCN (:class:`Dcqcn`): at a lasting bottleneck in a switch the QPs sit at their
  share (the max-min rates); when the bottleneck goes away they do not jump back to the
  line: each climbs as ``DcqcnRp`` climbs after a cut (fast recovery toward a target
  clamped at the share, then additive and hyper increase on its timer and byte counter),
  which with the lab's DCQCN timing takes milliseconds.
* MRC (``MrcQueuePair``): a connection with no live path on any plane errors at ``last
  progress + MrcConfig.error_after_ps()`` unless some path answers a probe before (progress);
  while any path lives it never errors.

Between events the rates are constant; each distinct (view, running connections) pair is
solved once and reused (a flap of a thousand cycles costs a few solves).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.fabric import Layout, View, make_view
from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive, Rates, liveness, mrc_rates, rc_rates
from mrc.flow.workload import GBPS, Progress, Stream, Workload
from mrc.transport.rc.dcqcn import DcqcnRp


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
    timeout_packets: float = 0.0  # RC: packets the line carries in one local ACK timeout
    resume_ps: int = 0  # RC: path back -> NAK -> rewind -> first resent packet placed
    fill_ps: float = float("inf")  # RC: time to send a full window at the line
    dcqcn: Any = None  # RC: its DcqcnConfig when cc = "dcqcn" (None: no rate control)
    line_bps: float = 0.0  # RC: the port's wire rate (DCQCN's ceiling)
    goodput_fraction: float = 1.0  # payload share of the wire (DCQCN rates are wire rates)


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
    dcqcn = Dcqcn(model, n) if model.kind == "rc" and model.dcqcn is not None else None
    backlog = Backlog(model, groups, entries, work.drain_bytes) \
        if model.kind == "rc" and isinstance(work, Stream) and work.drain_bytes > 0 else None
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
        # ---- rates (each distinct view, set of running connections and DCQCN caps solved
        # once)
        def solve(cap: np.ndarray | None, view: View = view, alive: Alive = alive,
                  run: np.ndarray = run, key_seen: cond.Conditions = key_seen) -> Rates:
            digest = hashlib.blake2b(np.packbits(run).tobytes(), digest_size=16)
            if cap is not None:
                digest.update(cap.tobytes())
            rkey = (key_seen, digest.digest())
            rates = solved.get(rkey)
            if rates is None:
                if model.kind == "mrc":
                    rates = mrc_rates(layout, groups, entries, view, alive, run,
                                      reps=model.reps, ack_ratio=model.ack_ratio)
                else:
                    rates = rc_rates(layout, groups, entries, view, alive, run, qps=model.qps,
                                     resend_packets=model.resend_packets,
                                     timeout_packets=model.timeout_packets,
                                     ack_ratio=model.ack_ratio, cap=cap)
                solved[rkey] = rates
                trace.solves += 1
                trace.rounds += rates.rounds
            return rates

        if dcqcn is None:
            rates = solve(None)
        else:
            dcqcn.climb(t)
            rates = solve(dcqcn.cap)
            if dcqcn.after_solve(t, rates, run):  # a bottleneck went away: DCQCN climbs
                rates = solve(dcqcn.cap)
        if model.kind == "mrc":
            prev_alive = _ev_changes(trace, model, groups, entries, alive, prev_alive, t)
        conn = np.where(run, rates.conn_gbps, 0.0)
        blocked = wanted & ~run if model.kind == "rc" else wanted & (rates.dead | ~run)
        stalled = timers.stalled() & wanted if trace.failed_at_ps is None \
            else np.zeros(n, dtype=bool)
        if backlog is not None and backlog.draining(stalled).any():
            d = backlog.draining(stalled)
            frac, live_share = backlog.live_share(alive_actual, n, layout.spec.planes)
            placed = conn.copy()
            placed[d] = backlog.pace[d] * frac[d]
            share = rates.plane_share.copy()
            share[d] = live_share[d]
            total, per_plane = progress.goodput(t, placed, share, blocked & ~d, run | d)
        else:
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
            if dcqcn is not None:
                nxt = min(nxt, dcqcn.due(t, rates, run))
            if backlog is not None:
                nxt = min(nxt, backlog.end(t, stalled))
        if nxt <= t:
            nxt = float(end_ps)  # nothing moves and nothing is due
        trace.times.append(t)
        trace.total.append(total)
        trace.planes.append(per_plane)
        trace.bad_evs.append(rates.bad_evs)
        if trace.failed_at_ps is None:
            trace.rows.extend(progress.advance(t, nxt, conn, blocked, run))
        if dcqcn is not None:
            dcqcn.sent(t, nxt, rates, run)
        if backlog is not None:
            backlog.spend(t, nxt, stalled)
            backlog.remember(conn, run & (conn > 0))
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


class Backlog:
    """What a stalled RC connection still places (write_bw streams).

    A message is striped over all the connection's QPs and perftest keeps ``tx_depth`` of
    them posted, so when one QP stalls the others go on placing their chunks of the posted
    messages: about ``tx_depth - 1/2`` messages' worth at the pace they had, the live QPs'
    share of it, and then the connection stops. The others are then that far ahead of the
    stalled QP, and stay ahead (it never runs faster than they do), so the credit is spent
    once, not refilled after a resume: later stalls stop the connection at once, as the
    packet model shows flap after flap.
    """

    def __init__(self, model: TransportModel, groups: Groups, entries: Entries,
                 drain_bytes: float) -> None:
        n = len(groups)
        self.credit = np.full(n, float(drain_bytes))
        self.entries = entries
        self.qps = float(model.qps)
        self.pace = np.zeros(n)  # the connection's rate before it stalled (Gb/s)

    def live_share(self, alive: Alive, n: int, planes: int) -> tuple[np.ndarray, np.ndarray]:
        """Per group: the share of its QPs on live paths, and their spread over planes."""
        e = self.entries
        live = (e.count * alive.up)
        frac = np.bincount(e.group, weights=live, minlength=n) / self.qps
        per_plane = np.zeros((n, planes))
        np.add.at(per_plane, (e.group, e.plane), live)
        total = per_plane.sum(axis=1, keepdims=True)
        share = np.divide(per_plane, total, out=np.zeros_like(per_plane), where=total > 0)
        return frac, share

    def draining(self, stalled: np.ndarray) -> np.ndarray:
        return stalled & (self.credit > 0) & (self.pace > 0)

    def remember(self, conn: np.ndarray, run: np.ndarray) -> None:
        self.pace[run] = conn[run]

    def end(self, t: float, stalled: np.ndarray) -> float:
        d = self.draining(stalled)
        if not d.any():
            return np.inf
        return t + float((self.credit[d] * 8 / self.pace[d] * GBPS).min())

    def spend(self, t0: float, t1: float, stalled: np.ndarray) -> None:
        d = self.draining(stalled)
        self.credit[d] = np.maximum(0.0, self.credit[d] - self.pace[d] * (t1 - t0) / GBPS / 8)
        self.credit[d & (self.credit < 1.0)] = 0.0


#: A climbing DCQCN rate is solved again once it has grown by this share (see Dcqcn.due).
CLIMB_STEP = 0.01
#: Timer steps looked ahead for that growth (then an event anyway).
CLIMB_LOOKAHEAD = 10_000


class Dcqcn:
    """RC's rate control at flow level: where DCQCN holds each connection's QPs.

    While a connection's pace is set by a full switch queue (``Rates.congested``), DCQCN's
    cuts keep its QPs near their share and the max-min rates stand for it. When that
    bottleneck goes away (a degraded link recovers, a competitor leaves), its QPs start
    from the share they had, with the target clamped there, and climb as one ``DcqcnRp``
    climbs (:meth:`DcqcnRp.settle`, then its own timer and byte counter): the cap this
    class keeps per connection, passed to the solver as an upper bound. Byte-counter steps
    are counted at each event of the run (at the latest every ``rpg_time_reset``), not at
    the exact byte.
    """

    def __init__(self, model: TransportModel, n: int) -> None:
        self.model = model
        self.cap = np.full(n, np.inf)  # per-QP goodput Gb/s allowed (inf: the line)
        self.level = np.zeros(n)  # per-QP goodput Gb/s while congested
        self.congested = np.zeros(n, dtype=bool)
        self.rps: dict[int, DcqcnRp] = {}

    def _gbps(self, rp: DcqcnRp) -> float:
        return rp.rate / 1e9 * self.model.goodput_fraction

    def _set(self, g: int) -> None:
        rp = self.rps[g]
        if rp.limited:
            self.cap[g] = self._gbps(rp)
        else:
            del self.rps[g]
            self.cap[g] = np.inf

    def climb(self, t: float) -> None:
        """Apply the timer increases due by ``t``."""
        for g in list(self.rps):
            self.rps[g].on_timer(int(t))
            self._set(g)

    def after_solve(self, t: float, rates: Rates, run: np.ndarray) -> bool:
        """Update from a solve at ``t``; True when a cap changed (solve again)."""
        assert rates.congested is not None
        per_qp = rates.conn_gbps / self.model.qps
        cong = rates.congested & run
        changed = False
        for g in np.flatnonzero(cong & np.isfinite(self.cap)).tolist():
            del self.rps[g]  # congested again: its cuts follow the share
            self.cap[g] = np.inf
            changed = True
        gone = self.congested & ~cong & run
        for g in np.flatnonzero(gone).tolist():
            if per_qp[g] <= self.level[g] * (1 + 1e-9):
                continue  # its share did not grow: nothing to climb
            rp = DcqcnRp(self.model.dcqcn, self.model.line_bps)
            rp.settle(int(t), self.level[g] / self.model.goodput_fraction * 1e9)
            self.rps[g] = rp
            self._set(g)
            changed = changed or g in self.rps
        self.level[cong] = per_qp[cong]
        self.congested = np.where(run, cong, self.congested)  # a stalled QP keeps its state
        return changed

    def due(self, t: float, rates: Rates, run: np.ndarray) -> float:
        """When a climbing connection's rate will have grown by ``CLIMB_STEP`` (or reached the
        line) on its timer alone: DCQCN raises it every ``rpg_time_reset``, often by a few
        Mb/s, and solving again for each of those would cost thousands of solves a run for
        nothing visible; the rate in between is the one of the last event (a little low)."""
        nxt = np.inf
        for rp in self.rps.values():
            if rp.next_increase is None:
                continue
            probe = copy.copy(rp)
            goal = rp.rate * (1 + CLIMB_STEP)
            due = probe.next_increase
            for _ in range(CLIMB_LOOKAHEAD):
                if due is None:
                    break
                probe.on_timer(due)
                if not probe.limited or probe.rate >= goal:
                    break
                due = probe.next_increase
            if due is not None:
                nxt = min(nxt, float(due))
        return nxt

    def sent(self, t0: float, t1: float, rates: Rates, run: np.ndarray) -> None:
        """The byte counters: what each climbing connection's QP sent from t0 to t1."""
        for g, rp in list(self.rps.items()):
            if run[g] and t1 > t0:
                gbps = rates.conn_gbps[g] / self.model.qps / self.model.goodput_fraction
                rp.on_sent(int(gbps * (t1 - t0) / GBPS / 8))
                self._set(g)


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
        self.resume = np.full(n, np.inf)  # RC: when a stalled connection progresses again
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
            stalled = self.stalled()
            self.resume[stalled & dead] = np.inf  # its path is (again) down
            timeout = float(model.timeout_ps) if model.timeout_ps is not None else np.inf
            # retries so far (each resends from the oldest unacknowledged packet and sends
            # on until the window is full again)
            k = np.where(stalled, np.floor((t - self.since) / timeout + 1e-9), 0.0)
            k = np.minimum(k, model.retry_cnt)
            back = stalled & ~dead & ~np.isfinite(self.resume)
            if back.any():
                restart = self.since + np.nan_to_num(k * timeout, nan=0.0)
                sending = (t - restart) < model.fill_ps
                nak = back & sending
                self.resume[nak] = t + model.resume_ps
                retry = back & ~sending & (k + 1 <= model.retry_cnt)
                self.resume[retry] = self.since[retry] + (k[retry] + 1) * timeout
            done = stalled & (self.resume <= t + 1.0)
            for g in np.flatnonzero(done).tolist():
                label = _label(self.groups, g)
                for j in range(1, int(k[g]) + 1):
                    self.trace.rows.append((self.since[g] + j * timeout, "retry", label,
                                            {"retry": j, "model": "flow"}))
            self.since[done] = np.inf
            self.resume[done] = np.inf
            stalled = self.stalled()
            if model.timeout_ps is None:
                return
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
        if model.kind == "rc":
            stalled = self.stalled()
            if stalled.any():
                nxt = float(self.resume[stalled].min())
                if model.timeout_ps is not None:
                    error = self.since[stalled] + (model.retry_cnt + 1) * float(model.timeout_ps)
                    nxt = min(nxt, float(error.min()))
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
