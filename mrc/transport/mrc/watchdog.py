"""The watchdog of an MRC QP: the published retry rule on the local ACK timeout, and the error.

The first expiry comes T (``timeout``) after the last progress on any EV (new data
acknowledged, a trim NACK or an answered probe all prove a live path); ``retry_linear_cnt``
retries wait T each, then ``retry_exp_cnt`` retries wait 2T, 4T, ...; the next expiry is the
error, at ``last progress + T (1 + linear) + T (2^(exp + 1) - 2)``
(:func:`.config.error_delay_ps`); ``retry_exp_cnt = 25`` never errors. While any path
answers, the QP never errors; with every EV ASSUMED_BAD it keeps probing and resumes when
one answers. Loss recovery (:mod:`.recovery`) reports progress, reads the deadline among
the QP's timers and calls :meth:`Watchdog.expire` when it passes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mrc.transport.base import ASSUMED_BAD, DENIED, GOOD, QpError, TransportEvent
from mrc.transport.mrc.config import MrcConfig, MrcStats, QpCore
from mrc.transport.mrc.paths import PathManager
from mrc.transport.mrc.receiver import Receiver
from mrc.transport.mrc.sender import Sender
from mrc.transport.qp_base import QpBase

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]


@cython.cclass
class Watchdog:
    """The local ACK timer of one QP (see the module docstring). ``at``: its deadline, None
    while nothing is outstanding; a Python int (the backoff doubles past 64 bits)."""

    # What every ACK's progress writes first; what an expiry reads after.
    at: int | None
    _retries: cython.longlong
    _last_progress: cython.longlong
    _timeout: cython.longlong  # (the backoff shifts a Python int copy)
    sender: Sender
    qp: QpBase  # the QP (a QpCore too)
    receiver: Receiver
    paths: PathManager
    stats: MrcStats
    config: MrcConfig
    events: deque[TransportEvent]
    qpn: cython.longlong
    _linear: cython.longlong
    _error_after: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, qp: QpCore, paths: PathManager, sender: Sender,
                 receiver: Receiver) -> None:
        self.qp = qp  # type: ignore[assignment]
        self.stats = qp.stats
        self.events = qp.events
        self.qpn = qp.qpn
        self.sender = sender
        self.receiver = receiver
        self.paths = paths
        self.configure(qp.config)
        self.at = None
        self._retries = 0
        self._last_progress = 0

    @cython.ccall
    @cython.annotation_typing(True)
    def configure(self, cfg: MrcConfig) -> None:
        """Take the retry rule of ``cfg`` (at creation, and when the QP is modified)."""
        self.config = cfg
        self._timeout = cfg.timeout_ps  # the published local ACK timeout T (retries)
        self._linear = cfg.retry_linear_cnt
        self._error_after = cfg.retry_linear_cnt + cfg.retry_exp_cnt  # retries, then error

    @cython.ccall
    @cython.annotation_typing(True)
    def arm(self, now: cython.longlong) -> None:
        """Work was posted: start counting from now unless the watchdog already runs."""
        if self.at is None:
            self._last_progress = now
            self._retries = 0
            self.at = now + self._timeout

    @cython.ccall
    @cython.annotation_typing(True)
    def progress(self, now: cython.longlong) -> None:
        """A path proved alive: the retry count starts over."""
        self._retries = 0
        self._last_progress = now
        self.at = now + self._timeout if self.sender.has_work() else None

    @cython.ccall
    @cython.annotation_typing(True)
    def expire(self, now: cython.longlong) -> None:
        """One expiry of the local ACK timer without progress: a retry, or the error."""
        if not self.sender.has_work():
            self.at = None
            return
        deadline = self.at
        assert deadline is not None
        self._retries += 1
        self.stats.qp_timeouts += 1
        cfg = self.config
        if not cfg.retries_forever and self._retries > self._error_after:
            counts = {GOOD: 0, ASSUMED_BAD: 0, DENIED: 0}
            for e in self.paths.evs:
                counts[e.state] += 1
            self.fail(now, (
                f"retries exhausted (retry_linear_cnt={cfg.retry_linear_cnt}, "
                f"retry_exp_cnt={cfg.retry_exp_cnt}): {self._retries - 1} retries of the "
                f"{self._timeout} ps local ACK timeout without progress on any EV since "
                f"t={self._last_progress} ps; EVs good={counts[GOOD]} "
                f"assumed_bad={counts[ASSUMED_BAD]} denied={counts[DENIED]}; "
                f"{self.sender.outstanding_count} packets unacknowledged"))
            return
        # retry k waits T while k <= retry_linear_cnt, then 2T, 4T, ... (exponential range);
        # counted from the deadline, so a late timer call does not stretch the rule
        over = self._retries - self._linear
        timeout: Any = self._timeout  # (a Python int, compiled too: the backoff passes 64 bits)
        self.at = deadline + (timeout if over <= 0 else timeout << min(over, 40))

    @cython.ccall
    @cython.annotation_typing(True)
    def fail(self, now: cython.longlong, reason: str) -> None:
        """The QP moves to the error state: it sends nothing more and says why."""
        qp = self.qp
        qp.failed = True
        self.sender.sendable = False
        qp.error_reason = reason  # type: ignore[attr-defined]
        self.at = None
        self.receiver.ack_due = None
        self.events.append(QpError(now, self.qpn, reason))
