"""The transports' timers at flow level (:class:`Timers`): RC's local ACK timer and retries
per stalled connection (the adaptive ladder as shipped, or the fixed IBA timer: the first
episode of ``mrc.transport.rc.config.retry_schedule``), MRC's watchdog per connection with no live path, and the QP error
that ends the job when one runs out (see :mod:`mrc.flow.engine` for the model)."""

from __future__ import annotations

import numpy as np

from mrc.flow.paths import Entries, Groups
from mrc.flow.rates import Alive
from mrc.flow.transport_model import Trace, TransportModel, group_label
from mrc.flow.workload import Progress


class Timers:
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
        self.acks: Entries | None = None  # RC: its ACKs' paths (None: they share DATA's)
        self.data_dead = np.zeros(n, dtype=bool)  # RC: a DATA path down at the last update
        self.nak_lost = np.zeros(n, dtype=bool)  # RC: the NAK of its gap found no way back
        #: RC: how long a QP whose path died keeps sending: its window at the line, or less
        #: when the work posted to it runs out first (:meth:`posted`)
        self.fill_ps = model.fill_ps

    def posted(self, bytes_per_qp: float, mtu_bytes: int) -> None:
        """RC: the work posted to each QP of a stream (ib_write_bw's ``tx_depth`` messages
        striped over the connection's QPs) bounds what it sends after its path dies: with
        1 MB WRITEs, 4 deep, over 16 QPs, 64 packets (~21 us at 400 Gb/s), well inside
        DCQCN's window of 1024. A path back after that waits for the timer, not a NAK."""
        self.fill_ps = min(self.model.fill_ps, bytes_per_qp / mtu_bytes * self.model.pkt_ps)

    def stalled(self) -> np.ndarray:
        return np.isfinite(self.since)

    def _dead(self, alive: Alive, ack_alive: Alive | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """Groups with a QP whose DATA path is down, and with one whose ACK path is."""
        e = self.entries
        n = len(self.groups)
        dead = np.bincount(e.group, weights=(e.count > 0) & ~alive.up, minlength=n) > 0
        acks = np.zeros(n, dtype=bool)
        if ack_alive is not None and self.acks is not None:
            a = self.acks
            acks = np.bincount(a.group, weights=(a.count > 0) & ~ack_alive.up,
                               minlength=n) > 0
        return dead, acks

    def update(self, t: float, wanted: np.ndarray, alive: Alive, progress: Progress,
               ack_alive: Alive | None = None) -> None:
        model = self.model
        if model.kind == "rc":
            self._rc(t, wanted, alive, progress, ack_alive)
        elif model.error_after_ps is not None:
            e = self.entries
            live = np.bincount(e.group, weights=alive.up & (e.count > 0),
                               minlength=len(self.groups)) > 0
            self.silent[live] = np.inf
            self.silent[wanted & ~live & ~np.isfinite(self.silent)] = t
            over = np.isfinite(self.silent) & (t >= self.silent + model.error_after_ps - 1.0)
            if over.any():
                g = int(np.flatnonzero(over)[0])
                fail(self.trace, progress, self.groups, g, t, model, float(self.silent[g]))

    def _rc(self, t: float, wanted: np.ndarray, alive: Alive, progress: Progress,
            ack_alive: Alive | None) -> None:
        """RC: a connection whose path died stalls from ``t``; once a path is back (its own,
        or the one routing moved it to) it progresses after the NAK's round trip while it
        still sends, else at its next local ACK timer expiry (the adaptive ladder or the
        fixed timer, ``retry_offsets``); with no progress by ``error_after_ps`` it errors.
        A QP's ACKs take their own path (``acks``): while it is down nothing the requester
        sends counts as progress, and a NAK sent into it is lost."""
        model = self.model
        data_dead, ack_dead = self._dead(alive, ack_alive)
        dead = data_dead | ack_dead
        stalled = self.stalled()
        self.since[wanted & ~stalled & dead] = t
        stalled = self.stalled()
        self.resume[stalled & dead] = np.inf  # its path is (again) down
        # its DATA path back while its ACKs' is still down: the responder's one NAK for the
        # gap is lost, and it drops what follows silently: only the timer helps then
        self.nak_lost |= stalled & self.data_dead & ~data_dead & ack_dead
        self.data_dead = data_dead
        offsets = np.asarray(model.retry_offsets, dtype=float)
        # expiries so far (each resends from the oldest unacknowledged packet and sends on
        # until the window is full again)
        k = np.where(stalled, np.searchsorted(offsets, np.nan_to_num(t - self.since + 1e-3,
                                                                     posinf=0.0),
                                              side="right"), 0)
        back = stalled & ~dead & ~np.isfinite(self.resume)
        if back.any():
            last = np.concatenate([[0.0], offsets])[k]
            sending = ((t - (self.since + last)) < self.fill_ps) & ~self.nak_lost
            nak = back & sending
            self.resume[nak] = t + model.resume_ps
            retry = back & ~sending & (k < len(offsets))
            self.resume[retry] = self.since[retry] + offsets[k[retry]]
        done = stalled & (self.resume <= t + 1.0)
        for g in np.flatnonzero(done).tolist():
            label = group_label(self.groups, g)
            for j in range(int(k[g])):
                self.trace.rows.append((self.since[g] + offsets[j], "retry", label,
                                        {"retry": j + 1, "model": "flow"}))
        self.since[done] = np.inf
        self.resume[done] = np.inf
        self.nak_lost[done] = False
        stalled = self.stalled()
        if model.error_after_ps is None:
            return
        errored = stalled & (t >= self.since + model.error_after_ps - 1.0)
        if errored.any():
            g = int(np.flatnonzero(errored)[0])
            fail(self.trace, progress, self.groups, g, t, model, float(self.since[g]))

    def due(self, t: float, alive: Alive) -> float:
        """The next timer that can change something after ``t``."""
        model = self.model
        nxt = np.inf
        if model.kind == "rc":
            stalled = self.stalled()
            if stalled.any():
                nxt = float(self.resume[stalled].min())
                if model.error_after_ps is not None:
                    error = self.since[stalled] + float(model.error_after_ps)
                    nxt = min(nxt, float(error.min()))
        if model.kind == "mrc" and model.error_after_ps is not None:
            waiting = np.isfinite(self.silent)
            if waiting.any():
                nxt = min(nxt, float((self.silent[waiting] + model.error_after_ps).min()))
        return nxt


def fail(trace: Trace, progress: Progress, groups: Groups, g: int, t: float,
          model: TransportModel, since: float) -> None:
    """The QP of group ``g`` errored at ``t`` (no progress since ``since``): log its retries
    and the error, and fail the job."""
    label = group_label(groups, g)
    if model.kind == "rc":
        budget_us = (model.error_after_ps or 0) / 1e6
        reason = (f"retry count exceeded (IBV_WC_RETRY_EXC_ERR): no progress within the "
                  f"{budget_us:g} us retry budget (retry_cnt {model.retry_cnt})")
        for k, offset in enumerate(model.retry_offsets, 1):
            trace.rows.append((since + offset, "retry", label, {"retry": k, "model": "flow"}))
    else:
        reason = "no path made progress (every EV's path is down)"
    trace.rows.append((t, "qp_error", label, {"reason": reason, "model": "flow"}))
    trace.rows.append((t, "connection_failed", label, {"reason": reason}))
    trace.rows.append((t, "job_failed", label, {"reason": f"QP error: {reason}"}))
    trace.failed_at_ps = t
    trace.failure_reason = f"QP error: {reason}"
    progress.fail(t)
