"""Units of virtual time: every duration in mrc-lab is an integer number of picoseconds.

One place for the conversions, imported by every layer (topology included): it imports
nothing, so it sits below all of them. Picoseconds keep a 100G serialisation (80 ps a byte)
and a 1.024 us timer unit exact in integers, which is what makes a seeded run repeatable.
"""

from __future__ import annotations

from typing import Final

PS_PER_NS: Final = 1_000
PS_PER_US: Final = 1_000_000
PS_PER_MS: Final = 1_000_000_000
PS_PER_S: Final = 1_000_000_000_000


def us(value: float) -> int:
    """Microseconds to integer picoseconds."""
    return int(round(value * PS_PER_US))


def ns(value: float) -> int:
    """Nanoseconds to integer picoseconds."""
    return int(round(value * PS_PER_NS))
