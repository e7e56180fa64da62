"""The entropy value (EV) bit layout: the one definition every layer uses.

A 32-bit EV names one path between a pair of hosts. Bits 16-23 hold the plane, bits 0-15
the T1 (ignored for hosts under the same T0), bits 24-31 an instance number so that several
EVs can share one path on fabrics with fewer paths than EVs. The sender writes the EV into
every packet and the receiver echoes it, so the transport reads the plane back from an EV
without knowing the fabric; the fabric (``topology``) turns plane and T1 into a uSID path.

This module imports nothing: it sits below ``topology`` and the transports alike.
"""

from __future__ import annotations

from typing import Final

EV_T1_BITS: Final = 16
EV_PLANE_SHIFT: Final = 16
EV_PLANE_BITS: Final = 8
EV_INSTANCE_SHIFT: Final = 24
EV_INSTANCE_BITS: Final = 8
#: The bits that pick the path (plane and T1); the instance bits above them do not.
EV_PATH_MASK: Final = (1 << EV_INSTANCE_SHIFT) - 1
EV_MAX_PLANES: Final = 1 << EV_PLANE_BITS
EV_MAX_T1: Final = 1 << EV_T1_BITS
EV_MAX_INSTANCES: Final = 1 << EV_INSTANCE_BITS


class EvError(ValueError):
    """An EV field is out of the range its bits can hold."""


def make_ev(plane: int, t1: int, instance: int = 0, *, max_t1: int = EV_MAX_T1) -> int:
    """The EV of (plane, T1, instance); ``max_t1`` lets a fabric refuse T1s it lacks."""
    if not (0 <= plane < EV_MAX_PLANES and 0 <= t1 < max_t1 and 0 <= instance < EV_MAX_INSTANCES):
        raise EvError(f"EV fields out of range: plane={plane} t1={t1} instance={instance}")
    return (instance << EV_INSTANCE_SHIFT) | (plane << EV_PLANE_SHIFT) | t1


def ev_plane(ev: int) -> int:
    return (ev >> EV_PLANE_SHIFT) & (EV_MAX_PLANES - 1)


def ev_t1(ev: int) -> int:
    return ev & (EV_MAX_T1 - 1)


def ev_path_bits(ev: int) -> int:
    """The bits of ``ev`` that select its path: EVs equal here share a path."""
    return ev & EV_PATH_MASK
