"""WallEngine: the engine's events run when the dilated clock reaches them (the live fabric's
and both real-time stacks' one modelled-time scheduler)."""

from __future__ import annotations

import asyncio
import selectors

from mrc.live.clock import Clock
from mrc.live.wall_engine import WallEngine
from mrc.sim.engine import Simulator


def test_run_due_runs_in_order_at_event_time_and_is_not_reentrant() -> None:
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        wall = WallEngine(Simulator(1), Clock(1000.0, time_fn=loop.time))
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
        assert wall.sim.now == 0
        wall.attach(loop)
        wall.run_due(100)
        assert seen == [("early", 10), ("b", 50), ("c", 50)]
        assert wall.sim.now == 100 and wall.sim.next_time() == 500
        assert wall.lag()["lag_max_us"] == 90 / 1e6  # the first event ran 90 ps late
        wall.run_due(80)  # the clock never goes back
        assert wall.sim.now == 100
        wall.detach()
    finally:
        loop.close()


def test_the_timer_runs_what_is_due_without_anyone_asking() -> None:
    """No host wakes up: the timer armed for the earliest event runs it on the wall clock."""
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        clock = Clock(10_000.0, time_fn=loop.time)  # 1 us modelled = 10 ms wall
        after: list[int] = []
        wall = WallEngine(Simulator(2), clock, after_run=lambda: after.append(wall.sim.now))
        fired: list[int] = []
        wall.call_at(2_000_000, lambda _: fired.append(wall.sim.now))  # 2 us: 20 ms wall
        wall.call_at(1_000_000, lambda _: fired.append(wall.sim.now))  # re-arms earlier
        clock.restart(loop.time())
        wall.attach(loop)
        loop.run_until_complete(asyncio.sleep(0.05))
        assert fired == [1_000_000, 2_000_000]  # each at its own modelled time
        # after_run follows each batch (one per timer, or one if a late loop ran both)
        assert after and after[-1] >= 2_000_000 and wall.lag()["lag_max_us"] >= 0
        wall.call_at(6_000_000, lambda _: fired.append(wall.sim.now))  # 60 ms wall
        wall.detach()  # a detached engine's timer is gone
        loop.run_until_complete(asyncio.sleep(0.03))
        assert len(fired) == 2 and wall.sim.next_time() == 6_000_000
    finally:
        loop.close()
