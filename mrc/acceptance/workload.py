"""What the acceptance scenarios share: WRITE workloads on a :class:`SimStack`, their
completions, the recorder's bins as a table, and the fabric names a scenario aims at.

Conventions used throughout :mod:`mrc.acceptance`:

* Goodput is unique payload bytes placed at receivers (the SimStack recorder), in Gb/s; the
  payload ceiling of the wire format is printed next to it.
* RC runs with a lab timeout (``RC_LAB``: local ACK timeout 4.096 us x 2^3 = 32.8 us,
  retry_cnt 7), so a QP on a dead path errors 7 x 32.8 = 229 us after its last progress
  (adaptive retransmission's budget, ``RcConfig.error_after_ps``), within the run, and RC's
  routed fabric runs on the same time scale (``ROUTING_LAB``). MRC runs with its defaults
  unless a scenario says otherwise.
* Bulk-transfer workloads keep ``STREAM_DEPTH`` 1 MB WRITEs outstanding per connection, like
  ``ib_write_bw`` (perftest keeps 128 in flight by default).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from mrc.sim.engine import Simulator
from mrc.sim.routing import RoutingConfig
from mrc.stack.rc_connection import ecmp_t1
from mrc.stack.stack import Connection, RcConnectionAdapter, SimStack
from topology.spec import FabricSpec

MB = 1 << 20
#: RC lab parameters: 32.8 us local ACK timeout, 7 retries (error 262 us after last progress).
RC_LAB: dict[str, Any] = {"timeout_exp": 3}
#: RC's routed fabric on the same time scale as ``RC_LAB``'s timeout (2^-17: NCCL_IB_TIMEOUT
#: 20 -> 3): the real-world 1 ms member removal and 1 s BGP convergence (mrc.sim.routing)
#: become 7.6 ns and 7.63 us.
ROUTING_LAB = RoutingConfig(link_down_detect_us=1_000 / 2**17,
                            routing_convergence_us=1_000_000 / 2**17)
#: 1 MB WRITEs kept outstanding per connection by the bulk-transfer workloads.
STREAM_DEPTH = 32


def transport_params(kind: str) -> dict[str, Any]:
    """The lab parameters a scenario opens ``kind`` connections with."""
    return dict(RC_LAB) if kind == "rc" else {}


def engine(stack: SimStack) -> Simulator:
    """The simulator a :class:`SimStack` runs on (what ``mrc.sim.faults.at`` schedules on)."""
    sim = stack.sim
    assert isinstance(sim, Simulator)
    return sim


class Writes:
    """The WRITEs posted on one connection and their completions ``(time_ps, ok)``."""

    def __init__(self, stack: SimStack, conn: Connection) -> None:
        self.stack = stack
        self.conn = conn
        self.sizes: dict[int, int] = {}
        self.done: dict[int, tuple[int, bool]] = {}
        self.placed: dict[int, tuple[int, bool]] = {}  # at the receiver (before the ACK)
        self.on_all_done: Callable[[], None] | None = None
        self._stream_until: int | None = None
        self._stream_size = 0

    def post(self, size: int) -> int:
        """Post one WRITE now."""
        index = len(self.sizes)
        self.sizes[index] = size
        self.conn.write(self.stack.sim.now, size, functools.partial(self._complete, index),
                        on_placed=functools.partial(self._placed, index))
        return index

    def post_at(self, time_ps: int, size: int) -> None:
        def post(_: object) -> None:
            self.post(size)

        self.stack.sim.at(time_ps, post)

    def stream(self, size: int = MB, depth: int = STREAM_DEPTH,
               until_ps: int | None = None) -> None:
        """Keep ``depth`` WRITEs of ``size`` outstanding (until ``until_ps`` or a failure)."""
        self._stream_until = until_ps if until_ps is not None else 1 << 62
        self._stream_size = size
        for _ in range(depth):
            self.post(size)

    def _placed(self, index: int, now: int, ok: bool) -> None:
        self.placed[index] = (now, ok)

    def _complete(self, index: int, now: int, ok: bool) -> None:
        self.done[index] = (now, ok)
        if (self._stream_until is not None and not self.conn.failed
                and self.stack.sim.now < self._stream_until):
            self.post(self._stream_size)
        elif self.finished and self.on_all_done is not None:
            self.on_all_done()

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.sizes)

    @property
    def all_ok(self) -> bool:
        return self.finished and all(ok for _, ok in self.done.values())

    @property
    def bytes_posted(self) -> int:
        return sum(self.sizes.values())

    @property
    def bytes_ok(self) -> int:
        return sum(self.sizes[i] for i, (_, ok) in self.done.items() if ok)

    @property
    def last_completion_ps(self) -> int:
        """The last sender CQE: the last byte placed and its ACK back at the sender."""
        return max(t for t, _ in self.done.values())

    @property
    def last_placed_ps(self) -> int:
        """The last byte placed at the receiver (no ACK's return trip)."""
        return max(t for t, _ in self.placed.values())


def stop_when_all_done(stack: SimStack, writes: Sequence[Writes]) -> None:
    """Stop the simulator once every WRITE of every ``writes`` has completed."""

    def check() -> None:
        if all(w.finished for w in writes):
            stack.sim.stop()

    for w in writes:
        w.on_all_done = check


def metrics(stack: SimStack, end_ps: int | None = None) -> pd.DataFrame:
    """The recorder's bins as a wide table: index ``time_us``, one column per metric."""
    ts = stack.timeseries(end_ps)
    return ts.pivot(index="time_us", columns="metric", values="value")


def window_mean(series: pd.Series, start_us: float, end_us: float) -> float:
    """Mean of the bins that start in ``[start_us, end_us)``."""
    part = series[(series.index >= start_us) & (series.index < end_us)]
    return float(part.mean()) if len(part) else float("nan")


def ev_state_rows(stack: SimStack) -> pd.DataFrame:
    """The ``ev_state`` events with their detail unpacked (host, qpn, ev, plane, t1, old, new)."""
    events = stack.events()
    events = events[events.kind == "ev_state"]
    rows = []
    for time_us, target, detail in zip(events.time_us, events.target, events.detail,
                                       strict=True):
        host, qpn = target.split(".qp")
        d = json.loads(detail)
        rows.append({"time_us": time_us, "host": int(host[1:]), "qpn": int(qpn),
                     "ev": d["ev"], "plane": d["plane"], "t1": d["t1"], "old": d["old"],
                     "new": d["new"], "reason": d["reason"]})
    return pd.DataFrame(rows, columns=["time_us", "host", "qpn", "ev", "plane", "t1", "old",
                                       "new", "reason"])


def rc_t1s(spec: FabricSpec, pairs: Sequence[tuple[int, int]], plane: int,
           seed: int = 1) -> list[int]:
    """The T1 that each pair's RC QP on ``plane`` is routed through while the fabric is
    healthy (its source T0's ECMP hash, ``ecmp_t1``), opening the connections in
    this order on a fresh stack of ``seed`` (the seed draws the QPNs, and the order of
    opening numbers them, so both decide the hashes)."""
    stack = SimStack(spec, seed=seed, transport_name="rc")
    out = []
    for src, dst in pairs:
        conn = stack.open("rc", src, dst, transport_params("rc"))
        assert isinstance(conn, RcConnectionAdapter)
        qpn = next(qp.qpn for qp in conn.conn.requesters if qp.plane == plane)
        out.append(ecmp_t1(spec, src, dst, qpn, plane))
    return out


def uplink(spec: FabricSpec, host: int, plane: int, t1: int) -> str:
    """Name of the link from ``host``'s T0 to ``t1`` in ``plane``."""
    return f"p{plane}.t0.{spec.t0_of(host)}--p{plane}.t1.{t1}"
