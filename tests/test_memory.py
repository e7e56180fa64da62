"""Verifiable payload (``mrc.transport.memory``): a message placed segment by segment, in any
order and with duplicates, checks out exactly when every segment landed once where it belongs;
a segment that does not fit is refused, whatever its offset."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrc.transport.memory import (
    ReceiveBuffer,
    expected_checksum,
    message_key,
    segment_digest,
)

MTU = 4096


def _segments(length: int) -> list[tuple[int, int]]:
    return [(off, min(MTU, length - off)) for off in range(0, length, MTU)]


@given(length=st.integers(1, 20 * MTU), data=st.data())
def test_any_order_with_duplicates_places_each_segment_once(length: int,
                                                             data: st.DataObject) -> None:
    key = message_key(3, 0x1234, 7)
    segs = _segments(length)
    order = data.draw(st.permutations(segs))
    dups = data.draw(st.lists(st.sampled_from(segs), max_size=5))
    buf = ReceiveBuffer(7, length, MTU)
    placed = 0
    for off, n in [*order, *dups]:
        placed += buf.place(off, n, segment_digest(key, off, n))
    assert placed == buf.placed == length
    assert buf.checksum() == expected_checksum(key, length, MTU)


@given(length=st.integers(2 * MTU, 8 * MTU))
def test_a_wrong_digest_or_a_misplaced_segment_changes_the_checksum(length: int) -> None:
    key = message_key(1, 2, 3)
    want = expected_checksum(key, length, MTU)
    segs = _segments(length)
    swapped = ReceiveBuffer(3, length, MTU)  # the first two full segments' digests swapped
    for i, (off, n) in enumerate(segs):
        src = segs[1 - i] if i < 2 else (off, n)
        swapped.place(off, n, segment_digest(key, *src))
    assert swapped.checksum() != want
    other = ReceiveBuffer(3, length, MTU)  # another message's bytes
    for off, n in segs:
        other.place(off, n, segment_digest(key ^ 1, off, n))
    assert other.checksum() != want


@pytest.mark.parametrize("offset, length", [
    (-MTU, MTU),  # before the message: never wraps to its last segment
    (1, MTU),  # not on a segment boundary
    (3 * MTU, MTU),  # at the end
    (2 ** 64 - MTU, MTU),  # a u64 wire offset far past the end
    (2 ** 70, MTU),  # wider than any C integer
    (0, 0),  # empty
    (0, MTU - 1),  # short, and not the last segment
    (2 * MTU, MTU + 1),  # longer than the MTU
])
def test_a_segment_that_does_not_fit_is_refused(offset: int, length: int) -> None:
    buf = ReceiveBuffer(9, 3 * MTU, MTU)
    with pytest.raises(ValueError, match="does not fit message 9"):
        buf.place(offset, length, 0)
    assert buf.placed == 0 and not buf.complete


def test_segment_digest_is_64_bits_and_depends_on_every_input() -> None:
    seen = {segment_digest(k, off, n) for k in (0, 1, 2 ** 64 - 1)
            for off in (0, MTU, 2 ** 64 - MTU) for n in (1, MTU)}
    assert len(seen) == 18
    assert all(0 <= d < 2 ** 64 for d in seen)
