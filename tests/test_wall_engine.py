"""WallEngine: the engine's events run when the dilated clock reaches them (the live fabric's
and both real-time stacks' one modelled-time scheduler).

The loop here is a scripted one (:class:`FakeLoop`: the two things WallEngine asks of an
asyncio loop, ``time`` and ``call_at``), so what runs when is decided by the test, not by how
busy the machine is."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, cast

from mrc.live.clock import Clock
from mrc.live.wall_engine import WallEngine
from mrc.sim.engine import Simulator


class FakeTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """An event loop's clock and timers, moved by :meth:`advance` only."""

    def __init__(self) -> None:
        self.now = 100.0  # seconds, as loop.time() (an arbitrary origin)
        self._timers: list[tuple[float, int, FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer()
        heapq.heappush(self._timers, (when, next(self._seq), timer, callback))
        return timer

    def as_asyncio(self) -> asyncio.AbstractEventLoop:
        """What WallEngine.attach takes (it uses ``time`` and ``call_at`` only)."""
        return cast(asyncio.AbstractEventLoop, self)

    def pending(self) -> list[float]:
        return sorted(when for when, _, timer, _ in self._timers if not timer.cancelled)

    def advance(self, seconds: float) -> None:
        """Move the clock on, firing each timer due on the way at its own time (a timer
        armed by a callback for a time already passed fires next, as asyncio's would)."""
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer, callback = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = max(self.now, when)
            callback()
        self.now = end


def engine(dilation: float, seed: int = 1, **kwargs: Any) -> tuple[WallEngine, FakeLoop]:
    loop = FakeLoop()
    clock = Clock(dilation, time_fn=loop.time)
    clock.restart(loop.time())
    return WallEngine(Simulator(seed), clock, **kwargs), loop


def test_run_due_runs_in_order_at_event_time_and_is_not_reentrant() -> None:
    wall, loop = engine(1000.0)
    seen: list[tuple[str, int]] = []

    def early(_: object) -> None:
        seen.append(("early", wall.sim.now))
        wall.run_due(1_000)  # a host woken inside an event: nothing more runs from here

    wall.sim.at(50, lambda _: seen.append(("b", wall.sim.now)))
    wall.sim.at(10, early)
    wall.sim.at(50, lambda _: seen.append(("c", wall.sim.now)))
    wall.sim.at(500, lambda _: seen.append(("late", wall.sim.now)))
    wall.run_due(100)
    assert seen == []  # not attached: nothing runs, the clock stays
    assert wall.sim.now == 0 and loop.pending() == []
    wall.attach(loop.as_asyncio())  # arms a timer for the earliest event, 10 ps in
    assert loop.pending() == [loop.now + 10e-12 * 1000.0]
    wall.run_due(100)
    assert seen == [("early", 10), ("b", 50), ("c", 50)]
    assert wall.sim.now == 100 and wall.sim.next_time() == 500
    assert wall.lag()["lag_max_us"] == 90 / 1e6  # the first event ran 90 ps late
    wall.run_due(80)  # the clock never goes back
    assert wall.sim.now == 100
    wall.detach()
    assert loop.pending() == []  # the timer went with it
    loop.advance(1.0)
    assert seen == [("early", 10), ("b", 50), ("c", 50)]


def test_the_timer_runs_what_is_due_without_anyone_asking() -> None:
    """No host wakes up: the timer armed for the earliest event runs it on the wall clock."""
    after: list[int] = []
    wall: WallEngine
    wall, loop = engine(10_000.0, seed=2, after_run=lambda: after.append(wall.sim.now))
    fired: list[tuple[int, float]] = []  # (modelled ps, wall seconds from the start)
    start = loop.now

    def record(_: object) -> None:
        fired.append((wall.sim.now, round(loop.now - start, 9)))

    wall.call_at(2_000_000, record)  # 2 us modelled: 20 ms wall
    wall.call_at(1_000_000, record)  # not attached yet: no timer
    assert loop.pending() == []
    wall.attach(loop.as_asyncio())
    assert loop.pending() == [start + 0.01]  # one timer, for the earliest event
    loop.advance(0.015)
    assert fired == [(1_000_000, 0.01)]  # on time, at its own modelled time
    assert loop.pending() == [start + 0.02]  # re-armed for the next
    loop.advance(0.035)
    assert fired == [(1_000_000, 0.01), (2_000_000, 0.02)]
    assert after == [1_000_000, 2_000_000]  # after_run follows each batch
    assert wall.lag()["lag_max_us"] == 0  # the timers were never late
    wall.call_at(6_000_000, record)  # 60 ms wall
    assert loop.pending() == [start + 0.06]
    wall.detach()  # a detached engine's timer is gone
    loop.advance(0.1)
    assert len(fired) == 2 and wall.sim.next_time() == 6_000_000


def test_a_late_timer_runs_everything_due_in_one_batch_and_measures_the_lag() -> None:
    """A loop busy elsewhere fires the timer late: every event due by then runs, each at its
    own modelled time, and the lateness is what lag() reports."""
    after: list[int] = []
    wall: WallEngine
    wall, loop = engine(10_000.0, after_run=lambda: after.append(wall.sim.now))
    fired: list[int] = []
    for t in (1_000_000, 2_000_000, 3_000_000):
        wall.call_at(t, lambda _: fired.append(wall.sim.now))
    wall.attach(loop.as_asyncio())
    loop.now += 0.025  # the loop was away 25 ms (2.5 us modelled) when the timer was due
    loop.advance(0.0)
    assert fired == [1_000_000, 2_000_000]
    assert after == [2_500_000]  # one batch, the engine's clock at the wall clock's now
    assert wall.lag()["lag_max_us"] == 1.5  # 2.5 us now - 1 us due
    assert loop.pending() == [loop.now - 0.025 + 0.03]  # re-armed for the third, on time
    loop.advance(0.01)
    assert fired == [1_000_000, 2_000_000, 3_000_000]
