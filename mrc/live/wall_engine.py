"""The engine against the wall clock: :class:`WallEngine` runs a
:class:`~mrc.sim.engine.Simulator`'s events when the dilated clock reaches them.

A runtime on real time still has events in modelled time: the live fabric's packets, and every
runtime's workload steps and faults. They stay on the engine's heap, in the engine's order
(``(time, seq)``), and run through its ``run_until``; what this adds is *when*: one asyncio
timer armed for the earliest event, and :meth:`WallEngine.run_due`, which the hosts call
before they act, so an event that is due reaches them first however late the loop is with the
timer. Lateness never changes modelled timestamps (an event runs with the engine's clock at
its own time); it is measured (``lag_*``). The live fabric server drives its network's engine
with one, and so does the kernel runtime, whose fabric is the kernel's and whose engine holds
only the lab's schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mrc.live.clock import Clock
from mrc.sim.engine import Simulator


class WallEngine:
    """``sim``'s events run when ``clock`` reaches them, on an asyncio loop.

    Nothing runs until :meth:`attach` gives it the loop (a fabric server: when its socket is
    bound; the stack's clockwork: when modelled time starts). ``after_run`` is called after
    each batch of events (the fabric server sends what the batch delivered)."""

    __slots__ = ("sim", "clock", "after_run", "loop", "running", "lag_max_ps", "lag_sum_ps",
                 "lag_samples", "_timer", "_timer_at")

    def __init__(self, sim: Simulator, clock: Clock, *,
                 after_run: Callable[[], None] | None = None) -> None:
        self.sim = sim
        self.clock = clock
        self.after_run = after_run
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Events are being run (``run_due`` from inside one of them does nothing).
        self.running = False
        self.lag_max_ps = 0
        self.lag_sum_ps = 0
        self.lag_samples = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None

    # ------------------------------------------------------------------ lifecycle
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run on ``loop`` from now on (idempotent); arms the timer for what is scheduled."""
        if self.loop is loop:
            return
        self.loop = loop
        self.arm()

    def detach(self) -> None:
        """Stop: cancel the timer; nothing runs until attached again."""
        self._cancel_timer()
        self.loop = None

    # ------------------------------------------------------------------ scheduling
    def call_at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at modelled time ``time_ps`` (the engine's ``at``: never in the
        past), and re-arm the timer if it comes first."""
        self.sim.at(time_ps, fn, arg)
        self.arm()

    def due(self, now: int) -> bool:
        """Whether an event is due by modelled time ``now``."""
        due = self.sim.next_time()
        return due is not None and due <= now

    def run(self, now: int) -> None:
        """Run the events due by ``now`` (the caller checked :meth:`due`), measuring how late
        the first one runs; ``after_run`` follows, whatever happened."""
        due = self.sim.next_time()
        lag = now - due if due is not None else 0
        if lag > self.lag_max_ps:
            self.lag_max_ps = lag
        self.lag_sum_ps += lag
        self.lag_samples += 1
        self.running = True
        try:
            self.sim.run_until(now)
        finally:
            self.running = False
            if self.after_run is not None:
                self.after_run()

    def run_due(self, now: int) -> None:
        """Run the events due by modelled time ``now`` and move the engine's clock there,
        unless its events are running already (or it is not attached).

        Hosts in the same process call this before they act at ``now``: a fault or a link
        change scheduled before ``now`` then reaches their NICs first, however late the
        loop is with the timer (a busy loop must not let a host send on a port that is
        already dead in modelled time)."""
        if self.running or self.loop is None:
            return
        if self.due(now):
            self.run(now)
            self.arm()
        elif now > self.sim.now:
            self.sim.now = now

    # ------------------------------------------------------------------ the timer
    def arm(self) -> None:
        """Keep one timer armed for the earliest event."""
        t = self.sim.next_time()
        loop = self.loop
        if t is None or loop is None:
            return
        if self._timer_at is not None and self._timer_at <= t:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = t
        self._timer = loop.call_at(self.clock.wall_at(t), self._on_timer)

    def _on_timer(self) -> None:
        due = self._timer_at
        self._timer = None
        self._timer_at = None
        now = self.clock.now_ps()
        if due is not None and now < due:
            now = due  # asyncio may fire a hair early; the event is due by definition
        if self.due(now):
            self.run(now)
        self.arm()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def lag(self) -> dict[str, float]:
        """How late events ran behind the clock (wall lateness in modelled microseconds)."""
        return {"lag_max_us": self.lag_max_ps / 1e6,
                "lag_mean_us": self.lag_sum_ps / self.lag_samples / 1e6
                if self.lag_samples else 0.0}
