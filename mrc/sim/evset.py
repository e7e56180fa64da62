"""EV sets: which paths a QP sprays over, and the address each EV selects.

The QP never sees the fabric; the driver builds its EV set here and hands it over. EVs are
spread evenly over the planes (EV k goes to plane k mod P) and, within a plane, over the
T1s in a seeded order, so a QP with fewer EVs than paths still covers distinct paths and
different pairs load different T1s. On small fabrics several EVs share a path; they differ
in the EV's instance byte.

The T1 order depends on the *unordered* pair {src, dst} and the seed, so
``build_ev_set(spec, a, b)`` and ``build_ev_set(spec, b, a)`` give the same EV values on the
same (plane, T1) pairs: each side can then answer a peer's EV along the reverse of the very
path that EV names (``ev_address`` uses the same plane and T1 in both directions).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterable

from mrc.transport.base import PathChoice
from topology import usid
from topology.paths import address_for
from topology.spec import FabricSpec


def _pair_rng(seed: int, src: int, dst: int) -> random.Random:
    # crc32, never Python's salted hash(): the same inputs give the same set in any process
    lo, hi = (src, dst) if src <= dst else (dst, src)
    mixed = zlib.crc32(struct.pack("<QQQ", seed & (2**64 - 1), lo, hi))
    return random.Random(mixed)


def build_ev_set(spec: FabricSpec, src: int, dst: int, count: int = 128,
                 seed: int = 0) -> list[PathChoice]:
    """``count`` EVs from ``src`` toward ``dst``, even over planes and over each plane's paths.

    Deterministic in (spec, {src, dst}, count, seed). Raises ValueError when ``count`` EVs
    cannot be told apart by the EV layout (more than 256 per path).
    """
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    if src == dst:
        raise ValueError("an EV set needs two different hosts")
    planes = spec.planes
    local = spec.t0_of(src) == spec.t0_of(dst)
    paths = 1 if local else spec.t1
    per_plane = -(-count // planes)
    if per_plane > paths * 256:
        raise ValueError(
            f"{count} EVs need {per_plane} per plane but {paths} path(s) x 256 instances "
            "is the most the EV layout can distinguish")
    rng = _pair_rng(seed, src, dst)
    orders = []
    for _ in range(planes):
        order = list(range(paths))
        rng.shuffle(order)
        orders.append(order)
    out: list[PathChoice] = []
    for k in range(count):
        plane = k % planes
        j = k // planes
        t1 = orders[plane][j % paths]
        instance = j // paths
        ev = usid.make_ev(plane, t1, instance)
        out.append(PathChoice(ev, plane, None if local else t1,
                              address_for(spec, src, dst, plane, t1)))
    return out


def reply_paths(spec: FabricSpec, host: int, peer: int,
                peer_evs: Iterable[PathChoice | int]) -> list[PathChoice]:
    """For every EV the peer sprays with, the path from ``host`` back to ``peer`` along the
    same plane and T1: what a QP needs to send ACK, NACK and PROBE_REPLY for that EV.

    Only needed when the two directions were not built as a symmetric pair by
    :func:`build_ev_set` (then each side's own set already is the reply map)."""
    local = spec.t0_of(host) == spec.t0_of(peer)
    out = []
    for item in peer_evs:
        ev = item if isinstance(item, int) else item.ev
        plane, t1 = usid.ev_plane(ev), usid.ev_t1(ev)
        out.append(PathChoice(ev, plane, None if local else t1,
                              address_for(spec, host, peer, plane, t1)))
    return out


def paths_of(evs: Iterable[PathChoice]) -> dict[tuple[int, int | None], list[int]]:
    """EVs grouped by the path (plane, T1) they select: how many EVs share each path."""
    out: dict[tuple[int, int | None], list[int]] = {}
    for choice in evs:
        out.setdefault((choice.plane, choice.t1), []).append(choice.ev)
    return out
