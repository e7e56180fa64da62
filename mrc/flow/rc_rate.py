"""RC's rate at flow level beyond the max-min solve: the DCQCN climb after a bottleneck goes
away (:class:`Dcqcn`), and what a stalled, striped connection still places (:class:`Backlog`)."""

from __future__ import annotations

import copy

import numpy as np

from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive, Rates
from mrc.flow.transport_model import TransportModel
from mrc.flow.workload import GBPS
from mrc.transport.rc.dcqcn import DcqcnConfig, DcqcnRp


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


def keeps_target(cfg: DcqcnConfig) -> bool:
    """Whether the target rate stays where the first cut put it (the rate before the
    bottleneck: the line) while DCQCN holds a QP at a lasting bottleneck. The paper's
    profile clamps the target to the rate at every cut; NVIDIA's (``clamp_tgt_rate``
    off) only after a timer increase, and its timer (``rpg_time_reset``, 300 us) restarts
    at every cut, which comes far sooner (CNPs every ``min_time_between_cnps``, cuts every
    ``rate_reduce_monitor_period``): so no timer increase comes between cuts, and once the
    bottleneck is gone fast recovery halves the way back to the line at each step."""
    if cfg.clamp_tgt_rate:
        return False
    return not cfg.clamp_tgt_rate_after_time_inc or cfg.rpg_time_reset > max(
        cfg.rate_reduce_monitor_period, cfg.min_time_between_cnps)


class Dcqcn:
    """RC's rate control at flow level: where DCQCN holds each connection's QPs.

    While a connection's pace is set by a full switch queue (``Rates.congested``), DCQCN's
    cuts keep its QPs near their share and the max-min rates stand for it. When that
    bottleneck goes away (a degraded link recovers, a competitor leaves), its QPs start
    from the share they had, with the target where the profile leaves it at a lasting
    bottleneck (:func:`keeps_target`), and climb as one ``DcqcnRp`` climbs
    (:meth:`DcqcnRp.settle`, then its own timer and byte counter): the cap this class keeps
    per connection, passed to the solver as an upper bound. The next event comes when the
    timer or the byte counter at the sending rate has raised the rate by ``CLIMB_STEP``
    (:meth:`due`); bytes are counted at each event, not at the exact byte.
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
            if keeps_target(self.model.dcqcn):
                rp.target = rp.max_bps
            self.rps[g] = rp
            self._set(g)
            changed = changed or g in self.rps
        self.level[cong] = per_qp[cong]
        self.congested = np.where(run, cong, self.congested)  # a stalled QP keeps its state
        return changed

    def due(self, t: float, rates: Rates, run: np.ndarray) -> float:
        """When a climbing connection's rate will have grown by ``CLIMB_STEP`` (or reached the
        line), on its timer and its byte counter at the rate it sends: DCQCN raises it every
        ``rpg_time_reset`` and every ``rpg_byte_reset`` bytes, often by a few Mb/s, and
        solving again for each of those would cost thousands of solves a run for nothing
        visible; the rate in between is the one of the last event (a little low). A byte
        step is taken a whole ``rpg_byte_reset`` after the last (the counter's partial
        count is ignored: at most one step late)."""
        nxt = np.inf
        for g, rp in self.rps.items():
            if not run[g]:
                continue
            probe = copy.copy(rp)
            goal = rp.rate * (1 + CLIMB_STEP)
            reset = float(self.model.dcqcn.rpg_byte_reset)
            at = float(t)
            for _ in range(CLIMB_LOOKAHEAD):
                timer = probe.next_increase
                by_bytes = at + reset * probe.ps_per_byte
                if timer is not None and timer <= by_bytes:
                    probe.on_timer(timer)
                    at = float(timer)
                else:
                    probe.on_sent(int(reset))
                    at = by_bytes
                if not probe.limited or probe.rate >= goal:
                    break
            nxt = min(nxt, at)
        return nxt

    def sent(self, t0: float, t1: float, rates: Rates, run: np.ndarray) -> None:
        """The byte counters: what each climbing connection's QP sent from t0 to t1."""
        for g, rp in list(self.rps.items()):
            if run[g] and t1 > t0:
                gbps = rates.conn_gbps[g] / self.model.qps / self.model.goodput_fraction
                rp.on_sent(int(gbps * (t1 - t0) / GBPS / 8))
                self._set(g)
