"""Which paths each connection's traffic may take: MRC's EV spread and RC's pinned paths.

Both come from the packet model's own definitions, imported, never re-derived:

* MRC: :func:`mrc.stack.evset.build_ev_set` (the sender's EVs, as ``SimStack`` builds
  them with the run's seed): EV k on plane k mod P, and within a plane a seeded order of
  T1s per host pair. The ``exact`` spread counts each connection's EVs per (plane, T1):
  what round-robin spraying (``spray = "round_robin"``) loads each path with. The
  ``symmetric`` spread keeps the per-plane counts (they do not depend on the pair) and
  spreads each plane's share evenly over the plane's live T1s. It is exact when a plane's EV
  count is a multiple of its T1 count (every bundled lab: 16 EVs over 4 T1s: each pair has
  4 EVs on every T1). Otherwise (Fairwater: 16 EVs over 256 T1s) it is REPS's steady state,
  MRC's default spray: REPS keeps reusing the EVs whose packets come back unmarked and only
  explores the others, so load leaves a path whose queue marks packets until no path is
  hotter than the rest, and the paths of a T0 pair, reached by thousands of pairs' EV sets,
  end up evenly loaded (fixed round-robin splits over each pair's 16 random T1s would load
  some uplinks 50% above the mean). It is also the only affordable spread for an
  aggregated all-to-all.
* RC: :func:`mrc.stack.rc_connection.ecmp_t1` pins QP i of a connection to plane
  i mod P (``RcConnection``) and to the T1 the healthy routed fabric's ECMP picks for it
  (the source T0's hash of the QP's 5-tuple); when routing changes a T0's groups after a
  fault, :mod:`mrc.flow.routing` re-pins each QP with the same hash (:class:`Pins`);
  QPNs are numbered as ``SimStack.allocate_qpn`` hands them out (from the seed's
  ``mrc.stack.qpn.first_qpn``, a block of
  ``qps_per_plane x planes`` per connection in the order the workload opens them), so the
  pins are the packet run's. Hashing costs ~0.15 ms per QP at 256 T1s; beyond a budget the
  hashes are ``sampled``: seeded uniform 64-bit draws, the distribution of the hash
  (independent, uniform over T1s) but not its values. For an aggregated all-to-all the QPs of a class
  pair are spread over T1 types by a seeded multinomial draw (``multinomial``).

An entry is (group, plane, type, count): ``count`` EVs (MRC) or QPs (RC) of one connection of
the group on that plane and T1 type; type -1 marks hosts under one T0 (no T1 on the path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mrc.ev.profile import EvProfile
from mrc.flow.fabric import Layout
from mrc.stack.evset import build_ev_set
from mrc.stack.qpn import first_qpn
from mrc.stack.rc_connection import ecmp_hash_of
from topology.spec import FabricSpec

LOCAL = -1


@dataclass(frozen=True)
class Groups:
    """Connections, possibly aggregated: group g stands for ``mult[g]`` connections from a
    host of class ``src[g]`` to a host of class ``dst[g]``. Enumerated groups (one connection
    each) also know their hosts and the order the workload opens them in."""

    src: np.ndarray
    dst: np.ndarray
    mult: np.ndarray
    local: np.ndarray  # both ends under one T0
    src_host: np.ndarray | None = None
    dst_host: np.ndarray | None = None
    opened: np.ndarray | None = None  # index of the connection in open order

    def __len__(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class Entries:
    group: np.ndarray
    plane: np.ndarray
    gtype: np.ndarray  # LOCAL for hosts under one T0
    count: np.ndarray  # float: EVs or QPs (times nothing: per connection of the group)

    @staticmethod
    def concat(parts: list[Entries]) -> Entries:
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return Entries(empty, empty, empty, np.zeros(0))
        return Entries(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("group", "plane", "gtype", "count")))


def ev_counts_per_plane(spec: FabricSpec, ev_count: int, seed: int,
                        profile: EvProfile | None = None) -> np.ndarray:
    """EVs per plane of a crossing connection (the same for every pair), read off one
    ``build_ev_set`` (hosts 0 and the first host of the next T0)."""
    counts = np.zeros(spec.planes)
    if spec.t0_per_plane < 2:
        return counts
    for choice in build_ev_set(spec, 0, spec.hosts_per_t0, ev_count, seed, profile):
        counts[choice.plane] += 1
    return counts


def local_planes(spec: FabricSpec, ev_count: int, seed: int,
                 profile: EvProfile | None = None) -> np.ndarray:
    """EVs per plane of a connection under one T0 (one path per plane)."""
    counts = np.zeros(spec.planes)
    if spec.hosts_per_t0 < 2:
        return counts
    for choice in build_ev_set(spec, 0, 1, ev_count, seed, profile):
        counts[choice.plane] += 1
    return counts


def _local_entries(groups: Groups, per_plane: np.ndarray) -> Entries:
    idx = np.flatnonzero(groups.local)
    planes = np.flatnonzero(per_plane > 0)
    g = np.repeat(idx, len(planes))
    p = np.tile(planes, len(idx))
    return Entries(g, p, np.full(len(g), LOCAL, dtype=np.int64), per_plane[p])


def mrc_entries(spec: FabricSpec, layout: Layout, groups: Groups, ev_count: int, seed: int,
                *, exact: bool, profile: EvProfile | None = None) -> Entries:
    """MRC's EVs of every group, per plane and T1 type (module docstring); ``profile``: the
    transport's EV profile (None: the generated one of ``ev_count`` EVs)."""
    parts = [_local_entries(groups, local_planes(spec, ev_count, seed, profile))]
    cross = np.flatnonzero(~groups.local)
    if exact:
        assert groups.src_host is not None and groups.dst_host is not None
        g_l, p_l, t_l = [], [], []
        for g in cross.tolist():
            for choice in build_ev_set(spec, int(groups.src_host[g]), int(groups.dst_host[g]),
                                       ev_count, seed, profile):
                g_l.append(g)
                p_l.append(choice.plane)
                t_l.append(layout.type_of[choice.plane, choice.t1])
        if g_l:
            key = (np.array(g_l) * layout.types + np.array(t_l))
            uniq, counts = np.unique(key, return_counts=True)
            gt = uniq % layout.types
            parts.append(Entries(uniq // layout.types, layout.type_plane[gt], gt,
                                 counts.astype(float)))
    elif cross.size:
        per_plane = ev_counts_per_plane(spec, ev_count, seed, profile)
        share = per_plane[layout.type_plane] * layout.type_size / spec.t1  # per type
        types = np.flatnonzero(share > 0)
        gs = np.repeat(cross, len(types))
        ts = np.tile(types, len(cross))
        parts.append(Entries(gs, layout.type_plane[ts], ts, share[ts]))
    return Entries.concat(parts)


#: Hash evaluations (QPs x T1s) above which RC pins are sampled instead of hashed.
HASH_BUDGET = 8_000_000


@dataclass(frozen=True)
class Pins:
    """RC's crossing QPs one by one (``exact`` and ``sampled`` pinning): each QP's group,
    plane and 64-bit ECMP hashes (the source T0's of its DATA, the destination T0's of its
    ACKs: ``rc_connection.ecmp_hash_of`` each way; sampled: seeded uniform draws). A T0
    sends a packet to member ``hash mod len(group)`` of the group it has installed
    (:mod:`mrc.flow.routing` re-pins on every change); healthy, ``hash mod T1s``. The ACKs
    of a QP take their own T1 (the destination T0 hashes them), so a QP can lose its ACKs
    on a T1 its DATA never crosses."""

    group: np.ndarray
    plane: np.ndarray
    hash: np.ndarray  # uint64, the DATA's
    ack_hash: np.ndarray  # uint64, the ACKs'
    local: Entries  # the QPs of hosts under one T0 (no T1 on the path)

    def healthy(self, t1s: int, acks: bool = False) -> np.ndarray:
        h = self.ack_hash if acks else self.hash
        return (h % np.uint64(t1s)).astype(np.int64)

    def entries(self, layout: Layout, t1: np.ndarray) -> Entries:
        """Entries with QP i on T1 ``t1[i]`` of its plane (ACK entries alike: a path's
        liveness does not depend on its direction)."""
        gtype = layout.type_of[self.plane, t1]
        key = self.group * layout.types + gtype
        uniq, counts = np.unique(key, return_counts=True)
        gt = uniq % layout.types
        return Entries.concat([self.local, Entries(uniq // layout.types, layout.type_plane[gt],
                                                   gt, counts.astype(float))])


def rc_pins(spec: FabricSpec, groups: Groups, qps_per_plane: int, seed: int,
            pinning: str) -> Pins:
    """Every crossing QP's hashes (``exact``: the packet run's QPNs, ``sampled``: draws)."""
    qps = qps_per_plane * spec.planes
    planes_of_qp = np.arange(qps) % spec.planes
    local = _local_entries(groups, np.bincount(planes_of_qp, minlength=spec.planes)
                           .astype(float))
    cross = np.flatnonzero(~groups.local)
    g = np.repeat(cross, qps)
    qp = np.tile(np.arange(qps), len(cross))
    qp_plane = planes_of_qp[qp]
    if pinning == "exact":
        assert groups.opened is not None and groups.src_host is not None
        assert groups.dst_host is not None
        # SimStack.allocate_qpn: from the seed's first QPN (mrc.stack.qpn), a block each;
        # both ends of a QP share its QPN (rc_qp_pair), so the ACKs' source port too
        base = first_qpn(seed) + groups.opened[g] * qps
        rows = list(zip(groups.src_host[g].tolist(), groups.dst_host[g].tolist(),
                        (base + qp).tolist(), qp_plane.tolist(), strict=True))
        hashes = np.array([ecmp_hash_of(spec, s, d, q, pl) for s, d, q, pl in rows],
                          dtype=np.uint64)
        acks = np.array([ecmp_hash_of(spec, d, s, q, pl) for s, d, q, pl in rows],
                        dtype=np.uint64)
    elif pinning == "sampled":
        rng = np.random.default_rng([seed, 0x5243])  # "RC": pins apart from other draws
        hashes, acks = (rng.integers(0, 2**63, size=len(g), dtype=np.int64).astype(np.uint64)
                        for _ in range(2))
    else:
        raise ValueError(f"unknown RC pinning {pinning!r}")
    return Pins(g, qp_plane, hashes, acks, local)


def rc_entries(spec: FabricSpec, layout: Layout, groups: Groups, qps_per_plane: int,
               seed: int, pinning: str) -> Entries:
    """RC's QPs of every group, per plane and T1 type, on the healthy fabric: ``exact`` /
    ``sampled`` pins for enumerated connections, ``multinomial`` spread for aggregated
    groups."""
    if pinning != "multinomial":
        pins = rc_pins(spec, groups, qps_per_plane, seed, pinning)
        return pins.entries(layout, pins.healthy(spec.t1))
    planes_of_qp = np.arange(qps_per_plane * spec.planes) % spec.planes
    parts = [_local_entries(groups, np.bincount(planes_of_qp, minlength=spec.planes)
                            .astype(float))]
    cross = np.flatnonzero(~groups.local)
    rng = np.random.default_rng([seed, 0x5243])  # "RC": pins apart from other draws
    for p in range(spec.planes) if cross.size else ():
        types = np.flatnonzero(layout.type_plane == p)
        probs = layout.type_size[types] / spec.t1
        n = groups.mult[cross] * qps_per_plane
        drawn = rng.multinomial(n, probs)  # [group, type of this plane]
        gi, ti = np.nonzero(drawn)
        # per connection of the group: counts / mult (coefficients multiply by mult)
        parts.append(Entries(cross[gi], np.full(len(gi), p, dtype=np.int64), types[ti],
                             drawn[gi, ti] / groups.mult[cross[gi]]))
    return Entries.concat(parts)
