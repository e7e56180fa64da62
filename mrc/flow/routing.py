"""RC's routed fabric at flow level: when each T0 changes its ECMP groups after a fault, and
which T1 each RC QP's packets take then.

The rules are :mod:`mrc.sim.routing`'s, applied to the fault schedule instead of simulator
events (``Routing.changed`` / ``_apply``): a T0-T1 link is *usable* while it and both its
switches are up and neither it nor its T1 is drained (a black hole stays usable: routing
never sees it). When a link stops being usable because it went down, the T0 at its end
removes it after ``link_down_detect_us`` and every other T0 after
``routing_convergence_us``; a drain or a return reaches every T0 after convergence; an
advertisement overtaken by a newer change of the same link is dropped. T0 ``s`` sends toward
T0 ``d`` through every T1 whose links to ``s`` and to ``d`` both look usable to ``s``; with
``plain`` ECMP the group is those members, with ``resilient`` the bucket table
(``mrc.sim.routing.rebalance``, so only the failed member's flows move). A QP goes to
``group[hash mod len(group)]`` (:class:`mrc.flow.paths.Pins`), exactly the switch's choice.

The flow model works on T0 *groups* (:class:`mrc.flow.fabric.Layout`): a T0 a fault names is
a group of its own, and T0s no fault tells apart see the same thing, so routing over groups
is routing over T0s. Aggregated collectives (``multinomial`` QP counts, no single QPs) move
in expectation: the QPs on withdrawn T1s spread over the group's members in proportion to
their count (plain and resilient hashing agree in expectation). A group left with no member
keeps its QPs where they were (their path is dead; RC stalls and errors as it would).

The ACKs of a QP are hashed by the destination T0 on their own (:class:`Pins`), so they
are re-pinned the same way on the reverse triple: a QP whose ACKs die stalls as surely as
one whose DATA dies (no progress reaches the requester). Aggregated groups carry no ACK
entries (their ACKs are taken to share their DATA's fate).

Output: *epochs*, ``(time_ps, entries, ack entries)`` for every instant a group that some
RC QP uses changes, which :mod:`mrc.flow.engine` swaps in.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.fabric import Layout
from mrc.flow.paths import LOCAL, Entries, Groups, Pins
from mrc.sim.routing import BUCKETS_PER_MEMBER, RoutingConfig, rebalance
from topology import names
from topology.spec import FabricSpec

Link = tuple[int, int, int]  # (plane, T0 group, T1)
Triple = tuple[int, int, int]  # (plane, source T0 group, destination T0 group)
Epoch = tuple[float, Entries, Entries | None]  # (time, DATA entries, ACK entries)
Update = tuple[int, int, int, bool, list[int]]  # (plane, a, k, usable, observers)


def unusable(spec: FabricSpec, layout: Layout, active: Iterable[tuple[str, str]]
             ) -> dict[Link, bool]:
    """The T0-T1 links routing must not use under the active conditions, each with whether
    it is down (a switch at its T0 sees loss of signal) rather than only drained."""
    out: dict[Link, bool] = {}
    groups = range(layout.t0_groups)
    for family, target in sorted(active):
        if family not in ("down", "drain"):
            continue
        e = names.resolve(spec, target)
        lost = family == "down"
        plane = int(e.plane) if e.plane is not None else 0
        if e.kind == names.T1:
            links = [(plane, a, int(e.index or 0)) for a in groups]
        elif e.kind == names.T0:
            links = [(plane, int(layout.group_of_t0[e.index or 0]), k) for k in range(spec.t1)]
        elif e.kind == names.LINK and e.t1 is not None:
            links = [(plane, int(layout.group_of_t0[e.t0 or 0]), int(e.t1))]
        else:
            continue  # host links and NIC ports: no alternative for routing to choose
        for link in links:
            out[link] = out.get(link, False) or lost
    return out


class _ControlPlane:
    """Each T0 group's view of the links and its installed groups (for the triples QPs use)."""

    def __init__(self, spec: FabricSpec, layout: Layout, config: RoutingConfig,
                 triples: set[Triple]) -> None:
        self.spec, self.config, self.triples = spec, config, triples
        self.t0s = layout.t0_groups
        self.false: set[tuple[int, int, int, int]] = set()  # (plane, observer, a, k) withdrawn
        self.buckets = BUCKETS_PER_MEMBER * spec.t1
        healthy = list(range(spec.t1))
        self.table0 = rebalance([], healthy, self.buckets)
        self.chosen: dict[Triple, list[int]] = {}  # triples off their healthy group

    def group(self, tri: Triple) -> list[int]:
        if tri in self.chosen:
            return self.chosen[tri]
        return self.table0 if self.config.ecmp == "resilient" else list(range(self.spec.t1))

    def apply(self, plane: int, observers: list[int], a: int, k: int, value: bool
              ) -> set[Triple]:
        """One routing update; the triples whose group changed."""
        changed: set[Triple] = set()
        for s in observers:
            key = (plane, s, a, k)
            if (key not in self.false) == value:
                continue
            if value:
                self.false.discard(key)
            else:
                self.false.add(key)
            for d in (range(self.t0s) if a == s else (a,)):
                tri = (plane, s, d)
                if d != s and tri in self.triples:
                    before = self.group(tri)
                    self._install(tri)
                    if self.group(tri) != before:
                        changed.add(tri)
        return changed

    def _install(self, tri: Triple) -> None:
        plane, s, d = tri
        f = self.false
        members = [k for k in range(self.spec.t1)
                   if (plane, s, s, k) not in f and (plane, s, d, k) not in f]
        if self.config.ecmp == "plain":
            self.chosen[tri] = members
        else:
            table = rebalance(self.chosen.get(tri, self.table0), members, self.buckets)
            self.chosen[tri] = table if members else []


def _updates(spec: FabricSpec, layout: Layout, changes: list[cond.Change],
             config: RoutingConfig) -> list[tuple[int, int, Update]]:
    """Routing's updates in time order: (time, sequence, (plane, a, k, value, observers)),
    advertisements overtaken by a newer change of their link by then left out."""
    active: dict[tuple[str, str], float] = {}
    facts: dict[Link, bool] = {}
    flips: dict[Link, list[int]] = {}  # when each link's usability changed
    pending: list[tuple[int, int, Update, int]] = []
    for t in sorted({c.time_ps for c in changes}):
        for c in changes:
            if c.time_ps == t:
                cond.apply(active, c)
        now = unusable(spec, layout, active)
        for link in sorted(set(facts) | set(now)):
            if (link in facts) == (link in now):
                continue
            flips.setdefault(link, []).append(t)
            gen = len(flips[link])
            plane, a, k = link
            usable = link not in now
            others = [s for s in range(layout.t0_groups) if s != a]
            if not usable and now[link]:  # lost: its own T0 sees loss of signal
                pending.append((t + config.detect_ps, len(pending),
                                (plane, a, k, usable, [a]), gen))
            else:
                others.append(a)
            pending.append((t + config.convergence_ps, len(pending),
                            (plane, a, k, usable, others), gen))
        facts = now
    out = []
    for at, n, update, gen in sorted(pending, key=lambda u: (u[0], u[1])):
        times = flips[update[:3]]  # type: ignore[index]
        if update[3] and len(times) > gen and times[gen] <= at:
            continue  # the advertisement was overtaken (Routing._apply drops it)
        out.append((at, n, update))
    return out


def epochs(spec: FabricSpec, layout: Layout, groups: Groups, entries: Entries,
           pins: Pins | None, changes: list[cond.Change], config: RoutingConfig
           ) -> list[Epoch]:
    """The RC entries (DATA, and ACKs when QPs are pinned one by one) after every routing
    change that moves some QP (module docstring)."""
    n = layout.t0_groups
    if pins is not None:
        src = layout.class_group[groups.src[pins.group]]
        dst = layout.class_group[groups.dst[pins.group]]
        plane = pins.plane
    else:
        cross = entries.gtype != LOCAL
        g = entries.group[cross]
        src, dst, plane = (layout.class_group[groups.src[g]],
                           layout.class_group[groups.dst[g]], entries.plane[cross])
    data_id = (plane * n + src) * n + dst
    ack_id = (plane * n + dst) * n + src  # the ACKs: the destination T0 hashes them back
    ids = np.unique(np.concatenate([data_id, ack_id] if pins is not None else [data_id]))
    triples = {(int(t // n**2), int(t // n % n), int(t % n)) for t in ids.tolist()}
    cp = _ControlPlane(spec, layout, config, triples)
    out: list[Epoch] = []
    pin = pins.healthy(spec.t1) if pins is not None else None
    ack_pin = pins.healthy(spec.t1, acks=True) if pins is not None else None
    updates = _updates(spec, layout, changes, config)
    i = 0
    while i < len(updates):
        at = updates[i][0]
        moved: set[Triple] = set()
        while i < len(updates) and updates[i][0] == at:
            plane_u, a, k, value, observers = updates[i][2]
            moved |= cp.apply(plane_u, observers, a, k, value)
            i += 1
        if not moved:
            continue
        if pins is not None and pin is not None and ack_pin is not None:
            pin = _repin(cp, moved, n, data_id, pins.hash, pin)
            ack_pin = _repin(cp, moved, n, ack_id, pins.ack_hash, ack_pin)
            out.append((float(at), pins.entries(layout, pin), pins.entries(layout, ack_pin)))
        else:
            out.append((float(at), spread(spec, layout, groups, entries, cp), None))
    return out


def _repin(cp: _ControlPlane, moved: set[Triple], n: int, tri_id: np.ndarray,
           hashes: np.ndarray, pin: np.ndarray) -> np.ndarray:
    """Each QP of a triple whose group changed on ``group[hash mod len(group)]``; a
    triple left with no member keeps its QPs where they were (dead: no route)."""
    pin = pin.copy()
    for tri in moved:
        chosen = cp.group(tri)
        if not chosen:
            continue
        sel = tri_id == (tri[0] * n + tri[1]) * n + tri[2]
        if sel.any():
            table = np.asarray(chosen, dtype=np.int64)
            pin[sel] = table[(hashes[sel] % np.uint64(len(table))).astype(np.int64)]
    return pin


def spread(spec: FabricSpec, layout: Layout, groups: Groups, entries: Entries,
           cp: _ControlPlane) -> Entries:
    """Aggregated QP counts under the current groups, in expectation: on each triple, the
    count on a type keeps the share of its T1s that are members; the rest spreads over the
    members of the plane in proportion to how many each type has."""
    cross = np.flatnonzero(entries.gtype != LOCAL)
    keep = entries.count.copy()
    extra: list[Entries] = []
    by_tri: dict[Triple, list[int]] = {}
    for e in cross.tolist():
        g = int(entries.group[e])
        tri = (int(entries.plane[e]), int(layout.class_group[groups.src[g]]),
               int(layout.class_group[groups.dst[g]]))
        by_tri.setdefault(tri, []).append(e)
    for tri, idx in by_tri.items():
        members = sorted(set(cp.group(tri)))
        if not members or len(members) == spec.t1:
            continue
        per_type = np.bincount(layout.type_of[tri[0], members], minlength=layout.types)
        sel = np.asarray(idx)
        stay = per_type[entries.gtype[sel]] / layout.type_size[entries.gtype[sel]]
        moved = entries.count[sel] * (1 - stay)
        keep[sel] = entries.count[sel] * stay
        types = np.flatnonzero(per_type)
        share = per_type[types] / per_type.sum()
        for e, m in zip(sel.tolist(), moved.tolist(), strict=True):
            if m > 0:
                extra.append(Entries(np.full(len(types), entries.group[e]),
                                     np.full(len(types), tri[0]), types, m * share))
    merged = Entries.concat([Entries(entries.group, entries.plane, entries.gtype, keep),
                             *extra])
    planes = spec.planes
    key = (merged.group * planes + merged.plane) * (layout.types + 1) + (merged.gtype + 1)
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv, weights=merged.count)
    ok = count > 0
    uniq, count = uniq[ok], count[ok]
    gp = uniq // (layout.types + 1)
    return Entries(gp // planes, gp % planes, uniq % (layout.types + 1) - 1, count)
