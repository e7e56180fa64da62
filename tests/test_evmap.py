"""EvMap (mrc/transport/mrc/evmap.py): the same answers as a dict, in whichever build runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrc.transport.mrc.evmap import MAX_KEY, EvMap

keys = st.one_of(st.integers(0, 255), st.integers(0, (1 << 32) - 1), st.integers(0, MAX_KEY))
values = st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, (1 << 64) - 1),
                   st.integers(0, (1 << 64) - 1))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 64), st.lists(st.tuples(st.booleans(), keys, values), max_size=300))
def test_it_answers_as_a_dict_does(hint: int, ops: list[tuple[bool, int, tuple[int, int, int]]]
                                   ) -> None:
    m = EvMap(hint)
    model: dict[int, tuple[int, int, int]] = {}
    for is_put, ev, vals in ops:
        if is_put:
            m.put(ev, *vals)
            model[ev] = vals
            assert (m.a, m.b, m.c) == vals
        else:
            assert m.find(ev) == (ev in model)
            if ev in model:
                assert (m.a, m.b, m.c) == model[ev]
        assert len(m) == len(model)
    for ev, vals in model.items():
        assert m.find(ev) and (m.a, m.b, m.c) == vals
    assert m.items() == sorted((ev, *vals) for ev, vals in model.items())


def test_it_grows_past_any_size_hint() -> None:
    m = EvMap(4)
    for ev in range(0, 5000 * 257, 257):
        m.put(ev, ev // 257, ev, ~ev & ((1 << 64) - 1))
    assert len(m) == 5000
    for ev in range(0, 5000 * 257, 257):
        assert m.find(ev) and (m.a, m.b) == (ev // 257, ev)
        assert not m.find(ev + 1)


def test_keys_out_of_range_are_refused_and_never_found() -> None:
    m = EvMap()
    for bad in (-1, MAX_KEY + 1):
        with pytest.raises(ValueError, match="out of range"):
            m.put(bad, 0, 0, 0)
    assert len(m) == 0
    assert not m.find(-1)
    m.put(MAX_KEY, 1, 2, 3)
    assert m.find(MAX_KEY) and (m.a, m.b, m.c) == (1, 2, 3)
