"""EV profiles on a fabric: which hop each EV field picks, and the uSID path of every EV.

A two-tier multi-plane Clos has two choices to make between hosts under different T0s:
the plane (the NIC port) and the T1 (the source T0's uplink). An EV profile's field 0 is
the plane and field 1 the T1, exactly as the OCP worked example orders its hops (plane in
the low bits, then the first switch's uplink); any further field picks nothing on this
fabric (the T1's downlink and the last T0's port follow from the destination), so EVs that
differ only there **share a path**. For hosts under one T0 only the plane matters.

``fabric_profile`` builds the generated profile the "EVs per QP" shorthand stands for, in
mrc-lab's default format (:mod:`mrc.ev`): plane 0..P-1, T1 0..T1-1, and as many entropy
values as it takes to give ``ev_count`` distinct EVs. ``ev_paths`` lists a host pair's EVs
with the uSID address each selects (the NIC derives the carrier from the hop fields; the
uSID stack alone forwards).
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from dataclasses import dataclass

from mrc.ev import EV_INSTANCE_BITS, EV_PLANE_BITS, EV_T1_BITS
from mrc.ev.profile import EVENT_MASK_STATES, GENERATED, EvField, EvProfile, EvProfileError
from topology import usid
from topology.paths import addresses_for
from topology.spec import FabricSpec


class EvPathError(ValueError):
    """A profile whose hop fields name planes or T1s the fabric does not have."""


@dataclass(frozen=True, slots=True)
class EvPath:
    """One EV of a host pair: the plane and T1 its fields pick (T1 None under one T0)
    and the uSID destination address that carries the packet along that path."""

    ev: int
    plane: int
    t1: int | None
    address: int


def fabric_profile(spec: FabricSpec, ev_count: int = 128, *, min_active: int | None = None,
                   event_mask: int | None = None) -> EvProfile:
    """The generated profile of ``ev_count`` EVs per QP on ``spec``, in the default format.

    ``min_active`` defaults to a quarter of the EVs, as the OCP examples set
    ``ev_min_active = ev_count / 4``."""
    if ev_count < 1:
        raise EvPathError(f"ev_count must be positive, got {ev_count}")
    paths = spec.planes * spec.t1
    entropy = -(-ev_count // paths)
    if entropy > 1 << EV_INSTANCE_BITS:
        raise EvPathError(
            f"{ev_count} EVs need {entropy} per path but the {EV_INSTANCE_BITS}-bit entropy "
            f"field holds {1 << EV_INSTANCE_BITS} ({paths} paths)")
    fields = (EvField(EV_PLANE_BITS, max_val=spec.planes - 1, name="plane"),
              EvField(EV_T1_BITS, max_val=spec.t1 - 1, name="t1"),
              EvField(EV_INSTANCE_BITS, max_val=entropy - 1, name="entropy"))
    return EvProfile(fields, GENERATED, ev_count=ev_count,
                     min_active=ev_count // 4 if min_active is None else min_active,
                     event_mask=EVENT_MASK_STATES if event_mask is None else event_mask)


def hops(profile: EvProfile, ev: int) -> tuple[int, int]:
    """(plane, T1) an EV's fields pick: the generated values of fields 0 and 1."""
    values = profile.unpack(ev)
    return values[0], values[1] if len(values) > 1 else 0


def check_fits(spec: FabricSpec, profile: EvProfile) -> None:
    """Refuse a profile whose EVs would name a plane or T1 the fabric lacks."""
    if profile.mode == GENERATED:
        f0 = profile.fields[0]
        if f0.top >= spec.planes:
            raise EvPathError(f"field 0 (the plane) reaches {f0.top} but the fabric has "
                              f"{spec.planes} plane(s): set its max_val to {spec.planes - 1}")
        if len(profile.fields) > 1 and profile.fields[1].top >= spec.t1:
            raise EvPathError(f"field 1 (the T1) reaches {profile.fields[1].top} but a plane "
                              f"has {spec.t1} T1(s): set its max_val to {spec.t1 - 1}")
        return
    for ev in profile.evs:
        plane, t1 = hops(profile, ev)
        if plane >= spec.planes or t1 >= spec.t1:
            raise EvPathError(f"EV {ev:#010x} names plane {plane} T1 {t1}; the fabric has "
                              f"{spec.planes} plane(s) of {spec.t1} T1(s)")


def pair_orders(profile: EvProfile, seed: int, src: int, dst: int) -> list[list[int] | None]:
    """The generation order of each field's values for the pair {src, dst}: the plane in
    order (EV k is on plane k mod P), every other field in a seeded order, so QPs with
    fewer EVs than paths still cover distinct paths and different pairs load different
    T1s. The order depends on the *unordered* pair, so both directions get the same EVs
    (each side answers the peer's EV along the reverse of the very path it names)."""
    lo, hi = (src, dst) if src <= dst else (dst, src)
    # crc32, never Python's salted hash(): the same inputs give the same set in any process
    rng = random.Random(zlib.crc32(struct.pack("<QQQ", seed & (2**64 - 1), lo, hi)))
    orders: list[list[int] | None] = [None]
    for f in profile.fields[1:]:
        order = list(range(f.min_val, f.top + 1))
        rng.shuffle(order)
        orders.append(order)
    return orders


def ev_paths(spec: FabricSpec, src: int, dst: int, profile: EvProfile,
             seed: int = 0) -> list[EvPath]:
    """Every EV of ``profile`` from ``src`` toward ``dst`` with the path it selects."""
    return [EvPath(*row) for row in ev_path_rows(spec, src, dst, profile, seed)]


def ev_path_rows(spec: FabricSpec, src: int, dst: int, profile: EvProfile,
                 seed: int = 0) -> list[tuple[int, int, int | None, int]]:
    """:func:`ev_paths` as plain ``(ev, plane, t1, address)`` tuples, for a caller that
    wraps them in its own record (the simulator's EV sets: 262,144 EVs at 1024 hosts, where
    a frozen dataclass per EV cost more than the rest of the set's setup)."""
    if src == dst:
        raise EvPathError("an EV set needs two different hosts")
    check_fits(spec, profile)
    try:
        evs = _pair_evs(profile, seed, min(src, dst), max(src, dst))
    except EvProfileError as exc:
        raise EvPathError(str(exc)) from None
    local = spec.t0_of(src) == spec.t0_of(dst)
    known = _hops_of(profile)  # (every pair's EVs come from the same few field values)
    # each plane's address per T1 (check_fits: every EV's T1 is one), made when first named:
    # several EVs share each path, and one call encodes a plane's T1s together
    t1s = range(spec.t1)
    by_plane: dict[int, list[int]] = {}
    out = []
    for ev in evs:
        path = known.get(ev)
        if path is None:
            path = known[ev] = hops(profile, ev)
        plane, t1 = path
        row = by_plane.get(plane)
        if row is None:
            row = by_plane[plane] = addresses_for(spec, src, dst, plane, t1s)
        out.append((ev, plane, None if local else t1, row[t1]))
    return out


@functools.lru_cache(maxsize=8)
def _pair_evs(profile: EvProfile, seed: int, lo: int, hi: int) -> tuple[int, ...]:
    """The EV values of ``profile`` for the pair {lo, hi}: the same in both directions, so a
    connection that builds its two sets one after the other generates them once (half of
    the EV-set setup of a 1024-host permutation)."""
    return tuple(profile.generate(pair_orders(profile, seed, lo, hi)
                                  if profile.mode == GENERATED else None))


@functools.lru_cache(maxsize=16)
def _hops_of(profile: EvProfile) -> dict[int, tuple[int, int]]:
    """The (plane, T1) of each EV of ``profile`` seen so far (filled by :func:`ev_paths`):
    a profile is frozen, so what :func:`hops` says of an EV never changes."""
    return {}


def sharing(paths: list[EvPath]) -> dict[tuple[int, int | None], list[int]]:
    """EVs grouped by the path (plane, T1) they select: how many EVs share each path."""
    out: dict[tuple[int, int | None], list[int]] = {}
    for p in paths:
        out.setdefault((p.plane, p.t1), []).append(p.ev)
    return out


def format_path(spec: FabricSpec, p: EvPath) -> str:
    """The uSID carrier of an EV's path as text."""
    return usid.format_address(p.address)
