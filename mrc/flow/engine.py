"""The flow model's clock: piecewise-constant rates between events, for one transport.

Events are the fault schedule in the transport's view (:mod:`mrc.flow.conditions`), the
workload's own (a flow starts or ends, an iteration ends) and the transports' timers, taken
from the packet model's definitions:

* RC (``RcRequester``, as deployed: DCQCN paces it, so at most ``window_pkts`` = 1024 packets
  are ever outstanding, far more than a round trip; a stream's QP has less posted): a QP
  whose DATA or ACK path dies stops making progress at that instant but keeps sending until
  its posted work or window runs out. Routing moves it (``routes``, :mod:`mrc.flow.routing`).
  When its paths are back while it still sends, the first packet through is out of sequence,
  the responder's NAK rewinds it, and it makes progress again one and a half round trips
  later (``resume_ps``), unless that one NAK went into an ACK path still dead; otherwise it
  waits for the next expiry of its retransmission ladder (``retry_offsets``). With no
  progress by its retry budget (``RcConfig.error_after_ps``) it errors. A stalled QP stalls
  its connection (striping), and the first QP error fails the job (NCCL aborts on any QP
  error; ``RcConnection`` aborts the rest).
* RC's DCQCN (:class:`mrc.flow.rc_rate.Dcqcn`): at a lasting bottleneck in a switch the QPs sit at their
  share (the max-min rates); when the bottleneck goes away they do not jump back to the
  line: each climbs as ``DcqcnRp`` climbs after a cut (fast recovery toward its target:
  clamped at the share by the paper's profile, left at the line by NVIDIA's, then additive
  and hyper increase on its timer and byte counter): tens of microseconds with NVIDIA's
  profile, milliseconds with the paper's.
* MRC (``MrcQueuePair``): a connection with no live path on any plane errors at ``last
  progress + MrcConfig.error_after_ps()`` unless some path answers a probe before (progress);
  while any path lives it never errors.

Between events the rates are constant; each distinct (view, running connections) pair is
solved once and reused (a flap of a thousand cycles costs a few solves).
"""

from __future__ import annotations

import hashlib

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.detection import Detection
from mrc.flow.fabric import Layout, View, make_view
from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive, Rates, liveness, mrc_rates, rc_rates
from mrc.flow.rc_rate import Backlog, Dcqcn
from mrc.flow.routing import Epoch
from mrc.flow.timers import Timers
from mrc.flow.transport_model import Trace, TransportModel
from mrc.flow.workload import Collective, Progress, Stream, Workload


def simulate(layout: Layout, groups: Groups, entries: Entries, work: Workload,
             model: TransportModel, changes: list[cond.Change], *, end_ps: float,
             class_index: dict[int, int], batch_ps: float = 0.0,
             routes: list[Epoch] | None = None, acks: Entries | None = None
             ) -> tuple[Trace, Progress]:
    """Run one transport from 0 to ``end_ps`` (or until a finite workload is done);
    ``routes``: RC's entries after each routing change (:mod:`mrc.flow.routing`);
    ``acks``: where RC's ACKs go (their own T1s; a dead ACK path stalls its QP too)."""
    run = _Run(layout, groups, entries, work, model, changes, class_index, batch_ps)
    run.routes = routes or []
    run.acks = run.timers.acks = acks
    t = 0.0
    while t < end_ps and not (run.finite and run.progress.finished):
        nxt = run.segment(t, end_ps)
        if nxt is None:
            break
        t = nxt
    trace = run.trace
    trace.end_ps = min(t, float(end_ps))
    trace.times.append(trace.end_ps)
    return trace, run.progress


class _Run:
    """One transport's run: what :func:`simulate` carries from one event to the next."""

    def __init__(self, layout: Layout, groups: Groups, entries: Entries, work: Workload,
                 model: TransportModel, changes: list[cond.Change],
                 class_index: dict[int, int], batch_ps: float) -> None:
        self.layout, self.groups, self.entries, self.work = layout, groups, entries, work
        self.model, self.class_index, self.batch_ps = model, class_index, batch_ps
        self.trace = trace = Trace(model.name, model.kind)
        self.progress = Progress(work, groups, layout.spec, layout.spec.planes)
        self.finite = not isinstance(work, Stream)
        #: the fault schedule as the fabric has it, and as the transport sees it
        self.actual = cond.rc_view(changes)
        self.seen = cond.mrc_view(changes, model.reintegrate_ps) if model.kind == "mrc" \
            else self.actual
        for c in changes:  # the fault rows, as the packet run's events.csv has them
            trace.rows.append((float(c.time_ps), c.action, c.target,
                               {"fault": c.fault, **dict(c.params)}))
        self.views: dict[tuple[int, cond.Conditions], tuple[View, Alive]] = {}
        self.solved: dict[tuple[int, cond.Conditions, bytes], Rates] = {}
        self.n = n = len(groups)
        self.state_seen: dict[tuple[str, str], float] = {}
        self.state_actual: dict[tuple[str, str], float] = {}
        self.i_seen = self.i_actual = 0
        self.timers = Timers(model, groups, entries, trace)
        if model.kind == "rc" and isinstance(work, Stream) and work.drain_bytes > 0:
            self.timers.posted(work.drain_bytes / model.qps,
                               layout.spec.mtu_bytes)
        self.dcqcn = Dcqcn(model, n) if model.kind == "rc" and model.dcqcn is not None \
            else None
        self.backlog = Backlog(model, groups, entries, work.drain_bytes) \
            if model.kind == "rc" and isinstance(work, Stream) and work.drain_bytes > 0 \
            else None
        self.prev_alive: np.ndarray | None = None
        self.detection = Detection(model.detect, groups, entries, layout.spec.planes) \
            if model.kind == "mrc" and model.detect is not None else None
        self.prev_good: np.ndarray | None = None  # MRC: EVs GOOD in the last segment
        self.prev_conn: np.ndarray | None = None  # and what each group sent then
        self.prev_share: np.ndarray | None = None
        self.routes: list[Epoch] = []  # RC: routing's epochs
        self.epoch = 0  # how many of them are in effect
        self.acks: Entries | None = None  # RC: its ACKs' paths
        self.ack_alive: dict[tuple[int, cond.Conditions], Alive] = {}

    def segment(self, t: float, end_ps: float) -> float | None:
        """Rates from ``t`` to the next event, recorded; returns that event's time (None: the
        job failed, and a finite workload stops there)."""
        model, trace, progress = self.model, self.trace, self.progress
        self._route(t)
        key_seen, view, alive, alive_actual = self._conditions(t)
        wanted = progress.running(t)
        if trace.failed_at_ps is None:
            self.timers.update(t, wanted, alive_actual, progress, self._ack_alive())
        if trace.failed_at_ps is not None and self.finite:
            return None
        run = wanted & ~self.timers.stalled() if trace.failed_at_ps is None \
            else np.zeros(self.n, dtype=bool)
        rates = self._rates(t, key_seen, view, alive, run)
        if model.kind == "mrc":
            self.prev_alive = _ev_changes(trace, model, self.groups, self.entries, alive,
                                          self.prev_alive, t)
        conn = np.where(run, rates.conn_gbps, 0.0)
        blocked = wanted & ~run if model.kind == "rc" else wanted & (rates.dead | ~run)
        if self.detection is not None:
            conn, blocked = self._detect(t, view, alive, alive_actual, wanted, run, rates,
                                         conn, blocked)
        stalled = self.timers.stalled() & wanted if trace.failed_at_ps is None \
            else np.zeros(self.n, dtype=bool)
        total, per_plane = self._goodput(t, alive_actual, rates, conn, blocked, run, stalled)
        nxt = self._next_event(t, end_ps, alive_actual, rates, conn, blocked, run, stalled)
        trace.times.append(t)
        trace.total.append(total)
        trace.planes.append(per_plane)
        trace.bad_evs.append(rates.bad_evs)
        if trace.failed_at_ps is None:
            trace.rows.extend(progress.advance(t, nxt, conn, blocked, run))
        if self.dcqcn is not None:
            self.dcqcn.sent(t, nxt, rates, run)
        if self.backlog is not None:
            self.backlog.spend(t, nxt, stalled)
            self.backlog.remember(conn, run & (conn > 0))
        return nxt

    def _route(self, t: float) -> None:
        """RC: swap in the entries of the routing changes due by ``t`` (its QPs move)."""
        while self.epoch < len(self.routes) and self.routes[self.epoch][0] <= t:
            _, self.entries, acks = self.routes[self.epoch]
            if acks is not None:
                self.acks = self.timers.acks = acks
            self.epoch += 1
            self.timers.entries = self.entries
            if self.backlog is not None:
                self.backlog.entries = self.entries

    def _conditions(self, t: float) -> tuple[cond.Conditions, View, Alive, Alive]:
        """Apply the schedule's changes due by ``t``: the transport's view (its key, the
        fabric view and liveness) and the liveness the fabric really has."""
        seen, actual = self.seen, self.actual
        while self.i_seen < len(seen) and seen[self.i_seen].time_ps <= t:
            cond.apply(self.state_seen, seen[self.i_seen])
            self.i_seen += 1
        while self.i_actual < len(actual) and actual[self.i_actual].time_ps <= t:
            cond.apply(self.state_actual, actual[self.i_actual])
            self.i_actual += 1
        key_seen = cond.freeze(self.state_seen)
        view, alive = self._view_of(key_seen)
        _, alive_actual = self._view_of(cond.freeze(self.state_actual))
        return key_seen, view, alive, alive_actual

    def _ack_alive(self) -> Alive | None:
        """RC: which of its ACK paths are up in the fabric as it is."""
        if self.acks is None:
            return None
        key = (self.epoch, cond.freeze(self.state_actual))
        if key not in self.ack_alive:
            view, _ = self._view_of(key[1])
            self.ack_alive[key] = liveness(self.layout, self.groups, self.acks, view)
        return self.ack_alive[key]

    def _view_of(self, key: cond.Conditions) -> tuple[View, Alive]:
        if (self.epoch, key) not in self.views:
            v = make_view(self.layout, key, self.class_index)
            self.views[(self.epoch, key)] = (v, liveness(self.layout, self.groups, self.entries,
                                                         v))
        return self.views[(self.epoch, key)]

    def _rates(self, t: float, key_seen: cond.Conditions, view: View, alive: Alive,
               run: np.ndarray) -> Rates:
        """The rates of this segment (RC with DCQCN: under its caps, solved again when a
        bottleneck went away and DCQCN starts climbing)."""
        dcqcn = self.dcqcn
        if dcqcn is None:
            return self._solve(None, key_seen, view, alive, run)
        dcqcn.climb(t)
        rates = self._solve(dcqcn.cap, key_seen, view, alive, run)
        if dcqcn.after_solve(t, rates, run):
            rates = self._solve(dcqcn.cap, key_seen, view, alive, run)
        return rates

    def _solve(self, cap: np.ndarray | None, key_seen: cond.Conditions, view: View,
               alive: Alive, run: np.ndarray) -> Rates:
        """Each distinct view, set of running connections and DCQCN caps is solved once."""
        digest = hashlib.blake2b(np.packbits(run).tobytes(), digest_size=16)
        if cap is not None:
            digest.update(cap.tobytes())
        rkey = (self.epoch, key_seen, digest.digest())
        rates = self.solved.get(rkey)
        if rates is None:
            model, layout, groups, entries = self.model, self.layout, self.groups, self.entries
            if model.kind == "mrc":
                rates = mrc_rates(layout, groups, entries, view, alive, run,
                                  reps=model.reps, ack_ratio=model.ack_ratio)
            else:
                rates = rc_rates(layout, groups, entries, view, alive, run, qps=model.qps,
                                 resend_packets=model.resend_packets,
                                 timeout_packets=model.timeout_packets,
                                 ack_ratio=model.ack_ratio, cap=cap,
                                 wire_per_payload=model.wire_per_payload)
            self.solved[rkey] = rates
            self.trace.solves += 1
            self.trace.rounds += rates.rounds
        return rates

    def _detect(self, t: float, view: View, alive: Alive, alive_actual: Alive,
                wanted: np.ndarray, run: np.ndarray, rates: Rates, conn: np.ndarray,
                blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """MRC with detection: log a fault's losses, hold the step in flight until they are
        recovered; returns what is placed and what is blocked."""
        detection = self.detection
        assert detection is not None
        good = _good(self.entries, alive, view)
        prev_good, prev_conn = self.prev_good, self.prev_conn
        if prev_good is not None and (prev_good & ~good).any() and prev_conn is not None:
            phase = self.progress.step_burst(t, prev_conn[wanted], detection.p.mtu_bytes) \
                if isinstance(self.work, Collective) else None
            self.trace.rows.extend(detection.fault(t, prev_good, alive, view, self.prev_share,
                                                   prev_conn, run, phase))
        self.prev_good, self.prev_conn, self.prev_share = good, conn, rates.plane_share
        detection.recover(t, alive_actual)
        if detection.held(t):  # the step in flight waits for its lost packets
            blocked = blocked | wanted
        return detection.placed(t, conn), blocked

    def _goodput(self, t: float, alive_actual: Alive, rates: Rates, conn: np.ndarray,
                 blocked: np.ndarray, run: np.ndarray,
                 stalled: np.ndarray) -> tuple[float, np.ndarray]:
        """Goodput of the segment, total and per plane (a stalled RC stream still places
        its backlog on its live QPs)."""
        backlog, progress = self.backlog, self.progress
        if backlog is not None and backlog.draining(stalled).any():
            d = backlog.draining(stalled)
            frac, live_share = backlog.live_share(alive_actual, self.n, self.layout.spec.planes)
            placed = conn.copy()
            placed[d] = backlog.pace[d] * frac[d]
            share = rates.plane_share.copy()
            share[d] = live_share[d]
            return progress.goodput(t, placed, share, blocked & ~d, run | d)
        return progress.goodput(t, conn, rates.plane_share, blocked, run)

    def _next_event(self, t: float, end_ps: float, alive_actual: Alive, rates: Rates,
                    conn: np.ndarray, blocked: np.ndarray, run: np.ndarray,
                    stalled: np.ndarray) -> float:
        """The next schedule change, workload event or timer after ``t`` (``end_ps`` when
        nothing moves and nothing is due)."""
        nxt = float(end_ps)
        if self.i_seen < len(self.seen):
            nxt = min(nxt, float(self.seen[self.i_seen].time_ps))
        if self.i_actual < len(self.actual):
            nxt = min(nxt, float(self.actual[self.i_actual].time_ps))
        if self.epoch < len(self.routes):
            nxt = min(nxt, self.routes[self.epoch][0])
        if self.trace.failed_at_ps is None:
            nxt = min(nxt, self.progress.next_event(t, conn, blocked, run, self.batch_ps),
                      self.timers.due(t, alive_actual))
            if self.dcqcn is not None:
                nxt = min(nxt, self.dcqcn.due(t, rates, run))
            if self.backlog is not None:
                nxt = min(nxt, self.backlog.end(t, stalled))
            if self.detection is not None:
                nxt = min(nxt, self.detection.due(t))
        if nxt <= t:
            nxt = float(end_ps)  # nothing moves and nothing is due
        return nxt


def _good(entries: Entries, alive: Alive, view: View) -> np.ndarray:
    """MRC: entries whose EVs are GOOD (path up, not drained by an operator)."""
    cross = entries.gtype >= 0
    drained = cross & view.drained[np.where(cross, entries.gtype, 0)]
    return alive.up & (entries.count > 0) & ~drained


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
