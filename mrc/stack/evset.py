"""EV sets: which paths a QP sprays over, and the address each EV selects.

The QP never sees the fabric; the driver builds its EV set here and hands it over. The EVs
come from an EV profile (:mod:`mrc.ev.profile`) read on the fabric (:mod:`topology.evs`):
by default the generated profile of ``count`` EVs per QP (the htsim-style "EVs per QP"
shorthand), field 0 the plane (EV k on plane k mod P), field 1 the T1 in a seeded order,
field 2 entropy when there are more EVs than paths (those EVs share a path).

The order depends on the *unordered* pair {src, dst} and the seed, so
``build_ev_set(spec, a, b)`` and ``build_ev_set(spec, b, a)`` give the same EV values on the
same (plane, T1) pairs: each side can then answer a peer's EV along the reverse of the very
path that EV names.
"""

from __future__ import annotations

from collections.abc import Iterable

from mrc.ev.profile import EvProfile
from mrc.transport.base import PathChoice
from topology import evs as fabric_evs
from topology.paths import address_for
from topology.spec import FabricSpec

_new_tuple = tuple.__new__


def build_ev_set(spec: FabricSpec, src: int, dst: int, count: int = 128, seed: int = 0,
                 profile: EvProfile | None = None) -> list[PathChoice]:
    """The EVs from ``src`` toward ``dst``: ``profile``'s, or ``count`` generated ones.

    Deterministic in (spec, {src, dst}, profile, seed). Raises ValueError when the profile
    does not fit the fabric or cannot give ``count`` distinct EVs."""
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    if profile is None:
        profile = fabric_evs.fabric_profile(spec, count)
    rows = fabric_evs.ev_path_rows(spec, src, dst, profile, seed)
    return [_new_tuple(PathChoice, row) for row in rows]  # (as PathChoice(*row), in C)


def reply_paths(spec: FabricSpec, host: int, peer: int,
                peer_evs: Iterable[PathChoice]) -> list[PathChoice]:
    """For every EV the peer sprays with, the path from ``host`` back to ``peer`` along the
    same plane and T1: what a QP needs to send ACK, NACK and PROBE_REPLY for that EV.

    Only needed when the two directions were not built as a symmetric pair by
    :func:`build_ev_set` (then each side's own set already is the reply map)."""
    local = spec.t0_of(host) == spec.t0_of(peer)
    out = []
    for item in peer_evs:
        t1 = item.t1 or 0
        out.append(PathChoice(item.ev, item.plane, None if local else t1,
                              address_for(spec, host, peer, item.plane, t1)))
    return out


def paths_of(evs: Iterable[PathChoice]) -> dict[tuple[int, int | None], list[int]]:
    """EVs grouped by the path (plane, T1) they select: how many EVs share each path."""
    out: dict[tuple[int, int | None], list[int]] = {}
    for choice in evs:
        out.setdefault((choice.plane, choice.t1), []).append(choice.ev)
    return out
