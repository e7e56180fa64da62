"""The routing control plane of RoCE RC's fabric: ECMP groups, their repair, and drains.

RoCE RC runs over a BGP-routed Clos with ECMP (brief section 6); MRC's static SRv6 never
consults any of this. Each T0 holds, per destination T0 of its plane, the group of uplinks
(T1s) that routing currently advertises for it; a T1 reaches a T0 by its one downlink, and a
T0 its own hosts by their ports (both fixed: there is no alternative to choose). What a T0
believes about each T0-T1 link of its plane is its *view*, and the group toward T0 ``d`` is
every T1 ``k`` whose link to this T0 and whose link to ``d`` both look usable.

Views change only through timed control-plane events on the simulator (integer ps), after a
fact of the fabric changes (:meth:`Routing.changed`, called by every fault primitive that
takes a link or switch down or up, and by :meth:`Routing.drain`):

* a T0 sees its **own** link go down (loss of signal) and removes the member after
  ``link_down_detect_us`` (hardware fast failover: micro- to milliseconds);
* a failure it **cannot see** (a T1's link toward another T0; a T1 that died is seen by each
  T0 on its own link to it) reaches it as a BGP withdrawal after ``routing_convergence_us``,
  for the destinations it concerns only;
* a link or switch **coming back** is used again after ``routing_convergence_us``, own link
  included: the BGP session has to come up and advertise before traffic returns;
* a **drain** (a T1, or one T0-T1 link) withdraws the element through routing, after
  ``routing_convergence_us``, while it still forwards: what was sent toward it before the
  withdrawal arrives, nothing is sent after, so a drain followed (after convergence) by a
  power-off loses nothing by construction.

A withdrawal always applies; an advertisement that is overtaken by a newer change of the same
link before it lands is dropped (the newer change brings its own event).

ECMP modes (``RoutingConfig.ecmp``): ``plain`` installs the live members, so a packet picks
``hash mod members`` and a removal moves most flows; ``resilient`` installs a fixed table of
``BUCKETS_PER_MEMBER`` x T1 buckets, each naming a member: a removal reassigns only the
failed member's buckets, a returning member takes back only enough to rebalance. Healthy,
the two choose the same member (the table starts as bucket ``b`` -> member ``b mod n``, and
its size is a multiple of ``n``), so the flow model's pins need not know the mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mrc.units import PS_PER_US
from topology import names

if TYPE_CHECKING:
    from mrc.sim.link import Link
    from mrc.sim.network import Network
    from mrc.sim.ports import OutPort

ECMP_MODES = ("resilient", "plain")
#: Hardware removal of an ECMP member whose own link went down: "micro- to milliseconds"
#: (brief section 6); 1 ms is mrc-lab's choice inside that range (loss-of-signal debounce
#: plus the switch's next-hop-group update; ASIC fast-failover can be faster).
DEFAULT_LINK_DOWN_DETECT_US = 1_000.0
#: A BGP withdrawal or advertisement through a two-tier Clos: "hundreds of milliseconds to
#: seconds" (brief section 6; RFC 7938 section 7 on BGP in data centres: convergence bounded
#: by update propagation and timers); 1 s is mrc-lab's choice inside that range.
DEFAULT_ROUTING_CONVERGENCE_US = 1_000_000.0
#: Buckets of a resilient group per T1 of the plane (a multiple of every healthy group size).
BUCKETS_PER_MEMBER = 16


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """How RC's routed fabric repairs itself (a lab's ``[routing]`` section). The two times
    are plain fields so that a lab's time scale multiplies them (``REAL_TIMERS``,
    :func:`mrc.knobs.scale_timers`)."""

    REAL_TIMERS = ("link_down_detect_us", "routing_convergence_us")

    ecmp: str = "resilient"
    link_down_detect_us: float = DEFAULT_LINK_DOWN_DETECT_US
    routing_convergence_us: float = DEFAULT_ROUTING_CONVERGENCE_US

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(f"routing.{problem[0]}: {problem[1]}")

    def problem(self) -> tuple[str, str] | None:
        """(key, why) of the first bad value, or None."""
        if self.ecmp not in ECMP_MODES:
            return "ecmp", f"{self.ecmp!r} is not one of {', '.join(ECMP_MODES)}"
        if not self.link_down_detect_us >= 0:
            return "link_down_detect_us", "must not be negative"
        if not self.routing_convergence_us >= self.link_down_detect_us:
            return ("routing_convergence_us", f"{self.routing_convergence_us:g} us is below "
                    f"link_down_detect_us ({self.link_down_detect_us:g} us): a withdrawal "
                    "through routing cannot beat the switch's own link detection")
        return None

    @property
    def detect_ps(self) -> int:
        return int(round(self.link_down_detect_us * PS_PER_US))

    @property
    def convergence_ps(self) -> int:
        return int(round(self.routing_convergence_us * PS_PER_US))


class Routing:
    """The control plane of one simulated network (``net.routing``): views, groups, drains.

    ``changes`` logs every change of a group's members after the start: (time ps, T0 name,
    destination T0, the member T1s in order)."""

    def __init__(self, net: Network, config: RoutingConfig | None = None) -> None:
        self.net = net
        self.config = config or RoutingConfig()
        spec = net.spec
        self.planes = spec.planes
        self.t0n = spec.t0_per_plane
        self.t1n = spec.t1
        self.buckets = BUCKETS_PER_MEMBER * self.t1n
        #: links[plane][a][k]: the T0 a - T1 k link
        self.links: list[list[list[Link[OutPort]]]] = [
            [[net.links[names.fabric_link_name(p, a, k)] for k in range(self.t1n)]
             for a in range(self.t0n)] for p in range(self.planes)]
        self.drained: set[str] = set()  # drained T1s and links, by canonical name
        self._fact = [[[True] * self.t1n for _ in range(self.t0n)] for _ in range(self.planes)]
        self._gen = [[[0] * self.t1n for _ in range(self.t0n)] for _ in range(self.planes)]
        #: view[plane][s][a][k]: what T0 s believes of link (a, k)
        self._view = [[[[True] * self.t1n for _ in range(self.t0n)] for _ in range(self.t0n)]
                      for _ in range(self.planes)]
        #: resilient tables: table[plane][s][d] = member T1 per bucket (-1: none)
        self._table: list[list[list[list[int]]]] = [
            [[[] for _ in range(self.t0n)] for _ in range(self.t0n)] for _ in range(self.planes)]
        self.changes: list[tuple[int, str, int, tuple[int, ...]]] = []
        self._last: dict[tuple[int, int, int], list[int]] = {}
        #: (plane, T0, members) -> (table, ports) of a group's first install: a T0's healthy
        #: groups toward every destination are the same, so they share one table and one
        #: port list (neither is changed in place: a change installs new ones)
        self._fresh: dict[tuple[int, int, tuple[int, ...]], tuple[list[int], list[Any]]] = {}
        for plane in range(self.planes):
            for s in range(self.t0n):
                sw = net.t0[plane][s]
                sw.set_groups([[] for _ in range(self.t0n)])
                for d in range(self.t0n):
                    if d != s:
                        self._install(plane, s, d, log=False)

    # ------------------------------------------------------------------ facts
    def _usable(self, plane: int, a: int, k: int) -> bool:
        link = self.links[plane][a][k]
        return (link.is_up and link.name not in self.drained
                and names.t1_name(plane, k) not in self.drained)

    def changed(self) -> None:
        """Compare every T0-T1 link with the last known fact and schedule what routing does
        about each change (called after every fault primitive)."""
        now = self.net.sim.now
        cfg = self.config
        for plane in range(self.planes):
            for a in range(self.t0n):
                for k in range(self.t1n):
                    value = self._usable(plane, a, k)
                    if value == self._fact[plane][a][k]:
                        continue
                    self._fact[plane][a][k] = value
                    self._gen[plane][a][k] += 1
                    gen = self._gen[plane][a][k]
                    lost = not value and not self.links[plane][a][k].is_up
                    others = [s for s in range(self.t0n) if s != a]
                    if lost:  # the T0 at the link's end sees loss of signal
                        self.net.sim.at(now + cfg.detect_ps, self._apply,
                                        (plane, [a], a, k, value, gen))
                    else:
                        others.append(a)
                    self.net.sim.at(now + cfg.convergence_ps, self._apply,
                                    (plane, others, a, k, value, gen))

    def drain(self, target: str, on: bool) -> None:
        """Drain (or undrain) a T1 or a T0-T1 link, by canonical name, through routing."""
        element = names.resolve(self.net.spec, target)
        if element.kind not in (names.T1, names.LINK) or (
                element.kind == names.LINK and element.t1 is None):
            raise ValueError(f"a drain acts on a T1 or a T0-T1 link, not {element.name!r}")
        if on:
            self.drained.add(element.name)
        else:
            self.drained.discard(element.name)
        self.changed()

    def _apply(self, job: tuple[int, list[int], int, int, bool, int]) -> None:
        plane, observers, a, k, value, gen = job
        if value and gen != self._gen[plane][a][k]:
            return  # overtaken by a newer change of the link: that one has its own event
        for s in observers:
            view = self._view[plane][s]
            if view[a][k] == value:
                continue
            view[a][k] = value
            for d in (range(self.t0n) if a == s else (a,)):
                if d != s:
                    self._install(plane, s, d, log=True)

    # ------------------------------------------------------------------ groups
    def members(self, plane: int, s: int, d: int) -> list[int]:
        """The T1s T0 ``s`` currently believes reach T0 ``d`` (ascending)."""
        view = self._view[plane][s]
        return [k for k in range(self.t1n) if view[s][k] and view[d][k]]

    def _install(self, plane: int, s: int, d: int, *, log: bool) -> None:
        members = self.members(plane, s, d)
        sw = self.net.t0[plane][s]
        first = (plane, s, tuple(members))
        fresh = self._fresh.get(first) if not self._table[plane][s][d] else None
        if fresh is not None:  # a first install like one before: the same table and ports
            self._table[plane][s][d], ports = fresh
        else:
            if self.config.ecmp == "plain":
                chosen = members
            else:
                table = self._table[plane][s][d]
                new = not table
                self._table[plane][s][d] = table = rebalance(table, members, self.buckets)
                chosen = table if members else []
            ports = [sw.uplinks[k] for k in chosen]
            if self.config.ecmp == "plain" or new:
                self._fresh[first] = (self._table[plane][s][d], ports)
        sw.set_group(d, ports)
        key = (plane, s, d)
        if log and self._last.get(key) != members:
            self.changes.append((self.net.sim.now, sw.name, d, tuple(members)))
        self._last[key] = members

    def table(self, plane: int, s: int, d: int) -> list[int]:
        """The member T1 of each bucket of a resilient group (tests, tools)."""
        return list(self._table[plane][s][d])


def rebalance(table: list[int], members: list[int], size: int) -> list[int]:
    """A resilient ECMP table of ``size`` buckets for ``members``, moving as few buckets of
    ``table`` as possible: buckets of members that left are freed; a member above its fair
    share (``ceil(size / n)``) gives up its highest buckets; freed buckets go, lowest first,
    to the member with the fewest (lowest T1 on a tie); then single buckets move from the
    fullest to the emptiest member until they differ by at most one. With no members, every
    bucket is -1."""
    if not members:
        return [-1] * size
    live = set(members)
    out = [b if b in live else -1 for b in table] if len(table) == size else [-1] * size
    owned: dict[int, list[int]] = {m: [] for m in members}
    for i, m in enumerate(out):
        if m >= 0:
            owned[m].append(i)
    cap = -(-size // len(members))
    for m in members:
        while len(owned[m]) > cap:
            out[owned[m].pop()] = -1
    for i, m in enumerate(out):
        if m < 0:
            to = min(members, key=lambda x: (len(owned[x]), x))
            out[i] = to
            owned[to].append(i)
    while True:
        full = max(members, key=lambda x: (len(owned[x]), -x))
        empty = min(members, key=lambda x: (len(owned[x]), x))
        if len(owned[full]) - len(owned[empty]) <= 1:
            return out
        i = owned[full].pop()
        out[i] = empty
        owned[empty].append(i)


def routing_of(net: Any) -> Routing | None:
    """The network's routing control plane, if it has one."""
    return getattr(net, "routing", None)
