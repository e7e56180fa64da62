"""``data_class`` writes its constants out (C arithmetic): they must stay the named ones."""

from __future__ import annotations

import itertools

from mrc.packet import ACK, DATA, FLAG_ROCE, KIND_NAMES, NACK, data_class


def test_data_class_is_data_and_roce_acks_only() -> None:
    for kind, flags in itertools.product(range(len(KIND_NAMES)), (0, FLAG_ROCE, 0xFFFF)):
        expected = kind == DATA or (bool(flags & FLAG_ROCE) and kind in (ACK, NACK))
        assert data_class(kind, flags) == expected, (KIND_NAMES[kind], hex(flags))
