"""The event engine: ordering, run limits, stop, event counting."""

from __future__ import annotations

import gc
import itertools
import random

import pytest

from mrc.sim.engine import Simulator, collection_paused, ns, us


def test_time_order_and_fifo_ties() -> None:
    sim = Simulator()
    seen: list[tuple[int, str]] = []
    for label, t in [("c", 30), ("a", 10), ("b1", 20), ("b2", 20), ("b3", 20)]:
        sim.at(t, lambda x: seen.append((sim.now, x)), label)
    sim.run()
    assert seen == [(10, "a"), (20, "b1"), (20, "b2"), (20, "b3"), (30, "c")]
    assert sim.events_processed == 5
    assert sim.pending() == 0


def test_run_until_includes_limit_and_advances_clock() -> None:
    sim = Simulator()
    seen: list[int] = []
    for t in (5, 10, 15):
        sim.at(t, seen.append, t)
    assert sim.run(until_ps=10) == 10
    assert seen == [5, 10] and sim.pending() == 1 and sim.next_time() == 15
    assert sim.run(until_ps=12) == 12  # nothing due: the clock still moves to the limit
    assert sim.run() == 15 and seen == [5, 10, 15]
    assert sim.events_processed == 3


def test_stop_returns_after_current_event_and_resumes() -> None:
    sim = Simulator()
    seen: list[int] = []

    def event(x: int) -> None:
        seen.append(x)
        if x == 2:
            sim.stop()
            sim.after(1, event, 99)  # scheduled after stop(): runs on the next run()

    for t in range(5):
        sim.at(t * 10, event, t)
    assert sim.run(until_ps=1000) == 20  # stopped: the clock is not advanced to the limit
    assert seen == [0, 1, 2] and sim.events_processed == 3 and sim.pending() == 3
    sim.run()
    assert seen == [0, 1, 2, 99, 3, 4] and sim.events_processed == 6


def test_stop_outside_run_is_a_noop() -> None:
    sim = Simulator()
    seen: list[int] = []
    sim.at(5, seen.append, 5)
    sim.stop()
    sim.run()
    assert seen == [5] and sim.events_processed == 1


def test_no_scheduling_in_the_past_and_units() -> None:
    sim = Simulator()
    sim.at(10, lambda _: None)
    sim.run()
    with pytest.raises(ValueError):
        sim.at(5, lambda _: None)
    assert us(1.5) == 1_500_000 and ns(0.5) == 500


def test_exception_in_callback_keeps_counts_consistent() -> None:
    sim = Simulator()

    def boom(_: object) -> None:
        raise RuntimeError("boom")

    sim.at(1, lambda _: None)
    sim.at(2, boom)
    sim.at(3, lambda _: None)
    with pytest.raises(RuntimeError):
        sim.run()
    assert sim.events_processed == 2 and sim.pending() == 1
    sim.run()
    assert sim.events_processed == 3


def test_seeded_rng_is_reproducible() -> None:
    a, b = Simulator(seed=7), Simulator(seed=7)
    assert [a.rng.random() for _ in range(5)] == [b.rng.random() for _ in range(5)]


def test_run_until_steps_like_run() -> None:
    """``run_until`` (the live fabric's step) runs what is due, in the same order and with the
    same counting as ``run``, advances the clock, and ends early on ``stop``."""
    sim = Simulator()
    seen: list[tuple[int, int]] = []

    def event(x: int) -> None:
        seen.append((sim.now, x))
        if x == 3:
            sim.stop()

    for t, x in [(20, 2), (10, 1), (20, 3), (40, 4), (50, 5)]:
        sim.at(t, event, x)
    assert sim.run_until(5) == 0 and sim.now == 5
    assert sim.run_until(30) == 3 and seen == [(10, 1), (20, 2), (20, 3)]
    assert sim.now == 20 and sim.events_processed == 3  # stopped: the clock stays
    assert sim.run_until(45) == 1 and sim.now == 45
    sim.stop()  # outside a step: a no-op, as for run
    assert sim.run_until(60) == 1 and sim.now == 60 and sim.events_processed == 5


def test_many_pending_events_run_in_time_then_schedule_order() -> None:
    """Thousands of pending events (the compiled heap grows past its first 1024 slots while
    events run), many at the same time: they run sorted by (time, order scheduled), and
    events scheduled by running ones take their place in that order too."""
    rng = random.Random(7)
    sim = Simulator()
    ran: list[tuple[int, int]] = []
    order = itertools.count()

    def fire(key: tuple[int, int]) -> None:
        ran.append(key)
        if key[1] % 3 == 0 and len(ran) < 6000:  # schedule more from inside the run
            t = sim.now + rng.randrange(0, 50)
            sim.schedule(t, fire, (t, next(order)))

    for _ in range(3000):
        t = rng.randrange(0, 2000)
        sim.at(t, fire, (t, next(order)))
    sim.run()
    assert len(ran) > 4000
    assert ran == sorted(ran)
    assert sim.pending() == 0


def test_collection_paused_restores_the_collector_state() -> None:
    """Building a simulation pauses the cycle collector and gives back whatever state it
    found, also when the block raises."""
    was = gc.isenabled()
    try:
        for before in (True, False):
            if before:
                gc.enable()
            else:
                gc.disable()
            with collection_paused():
                assert not gc.isenabled()
            assert gc.isenabled() is before
            with pytest.raises(RuntimeError), collection_paused():
                raise RuntimeError("boom")
            assert gc.isenabled() is before
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
