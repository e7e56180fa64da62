"""The event engine: ordering, run limits, stop, event counting."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrc.sim.engine import Simulator, ns, us
from mrc.units import PS_PER_MS, PS_PER_US


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


#: Delays that reach every place the compiled engine keeps an event (engine.py, "the compiled
#: heap"): the same instant, the bucket being run (2 ns), the ring of buckets ahead (4.2 us)
#: and the far heap beyond it.
_SCALES = (0, 900, 3_000, 2 * PS_PER_US, 20 * PS_PER_US, 3 * PS_PER_MS)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 6))
def test_events_run_in_time_then_schedule_order_at_every_scale(seed: int, steps: int) -> None:
    """Whatever the mix of delays, events run in (time, order scheduled) order, each once:
    scheduled before the run and from inside it, run whole or in ``run_until`` steps that
    stop between events of one bucket and move the clock past empty stretches; the counts
    agree throughout."""
    rng = random.Random(seed)
    sim = Simulator()
    ran: list[tuple[int, int]] = []
    order = itertools.count()
    scheduled = [0]

    def delay() -> int:
        return rng.randrange(0, _SCALES[rng.randrange(len(_SCALES))] + 1)

    def fire(key: tuple[int, int]) -> None:
        assert sim.now == key[0]
        ran.append(key)
        for _ in range(rng.choice((0, 0, 1, 2))):
            if scheduled[0] < 3000:
                t = sim.now + delay()
                sim.schedule(t, fire, (t, next(order)))
                scheduled[0] += 1

    for _ in range(rng.randrange(1, 400)):
        t = delay()
        sim.at(t, fire, (t, next(order)))
        scheduled[0] += 1
    for _ in range(steps):
        limit = sim.now + delay()
        sim.run_until(limit)
        assert sim.now == limit or ran[-1][0] == sim.now
        nxt = sim.next_time()
        assert nxt is None or nxt > limit
        assert sim.pending() == scheduled[0] - len(ran)
        if rng.random() < 0.3:  # later events, from outside, after the clock moved on
            t = sim.now + delay()
            sim.at(t, fire, (t, next(order)))
            scheduled[0] += 1
    sim.run()
    assert ran == sorted(ran)
    assert len(ran) == scheduled[0] == sim.events_processed
    assert sim.pending() == 0 and sim.next_time() is None


def test_a_crowded_instant_and_the_far_future() -> None:
    """Five thousand events at one instant (one bucket: the compiled engine's chunk pool
    grows) between a timer 3 ms ahead and one 5 us ahead; a stop() made after run_until moved
    the clock past everything is dropped by the next run, as before."""
    sim = Simulator()
    ran: list[object] = []
    sim.at(3 * PS_PER_MS, ran.append, "far")
    sim.at(5 * PS_PER_US, ran.append, "ring")
    for i in range(5000):
        sim.at(1_500, ran.append, i)
    assert sim.pending() == 5002 and sim.next_time() == 1_500
    assert sim.run_until(1_500) == 5000 and ran == list(range(5000))
    assert sim.next_time() == 5 * PS_PER_US
    assert sim.run_until(4 * PS_PER_MS) == 2 and ran[-2:] == ["ring", "far"]
    sim.stop()
    sim.at(sim.now + 1, ran.append, "after")
    sim.run()
    assert ran[-1] == "after" and sim.events_processed == 5003 and sim.pending() == 0



@pytest.mark.parametrize("shuffle", [False, True])
def test_a_crowded_bucket_in_any_order(shuffle: bool) -> None:
    """Three thousand events in one 2 ns bucket 1 us ahead, scheduled latest first (the
    compiled engine gives up sorting them and uses its heap) or shuffled, some scheduling
    more into the same bucket while it runs, and stopped halfway: (time, schedule order)
    throughout."""
    rng = random.Random(7)
    sim = Simulator()
    ran: list[tuple[int, int]] = []
    order = itertools.count()
    start = 1_000_000  # (the bucket of 999,424-1,001,471 ps)

    def fire(key: tuple[int, int]) -> None:
        assert sim.now == key[0]
        ran.append(key)
        if key[1] % 10 == 0 and sim.now < start + 40:
            t = sim.now + rng.randrange(0, 3)
            sim.at(t, fire, (t, next(order)))

    times = [start + 40 * i // 3_000 for i in range(3_000)][::-1]
    if shuffle:
        rng.shuffle(times)
    for t in times:
        sim.at(t, fire, (t, next(order)))
    sim.run_until(start + 20)
    assert sim.now == start + 20 and all(t <= start + 20 for t, _ in ran)
    sim.run()
    assert ran == sorted(ran) and len(ran) == len(set(ran)) == sim.events_processed
    assert sim.pending() == 0
