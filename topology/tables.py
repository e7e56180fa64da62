"""Static per-switch uSID forwarding tables, and the reference forwarding walk.

This module is the specification of forwarding: the simulator (and any live data plane) must
decide exactly what :meth:`SwitchTable.lookup` decides, and a packet must visit exactly the
elements :func:`walk` returns. Tests check the simulator against it.

A switch looks only at the active uSID (the 16 bits after the F3216 block)::

    at T0 I of plane P                         at T1 K of plane P
    ----------------------------------------   ----------------------------------------
    0x1000+I  own uSID       uN: shift, look   0x2000+K  own uSID       uN: shift, look
                             up again                                   up again
    0x2000+k  T1 k           forward up to     0x1000+i  T0 i           forward down to
                             pP.t1.k                                    pP.t0.i
    0xE000+j  local port j   uA: shift, send   anything else            drop (no route)
                             down to host
                             I*hosts_per_t0+j
    anything else            drop (no route)

Tables are stored as a few uSID *ranges* (rules), not one entry per uSID: that is how the
plan is meant to be implemented, it keeps every table of a Fairwater plane tiny, and it makes
"unambiguous" checkable in O(rules): a table is built only if its rules are disjoint, inside
one allocated uSID range each, and never match end-of-carrier. :meth:`SwitchTable.entries`
expands a table into an explicit ``{uSID: Decision}`` dict for small fabrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from topology import names, usid
from topology.spec import FabricError, FabricSpec

#: Own uSID: shift the carrier and look the new active uSID up in the same table.
UN = "uN"
#: Send the packet unchanged to a neighbouring switch.
FORWARD = "forward"
#: Shift the carrier and send the packet out a host downlink (End.X-style adjacency).
UA = "uA"
ACTIONS = (UN, FORWARD, UA)

_TIER_KIND = (names.T0, names.T1)


class NoRouteError(ValueError):
    """A packet that a switch would drop, or that reaches a host with uSIDs left over."""


@dataclass(frozen=True, slots=True)
class Rule:
    """uSIDs ``first..last`` (inclusive) all take ``action``.

    The next hop for uSID ``u`` is element ``next_kind`` number ``next_base + (u - first)``
    (a switch index for ``t0``/``t1``, a host index for ``nic_port``); uN has no next hop.
    """

    first: int
    last: int
    action: str
    next_kind: str | None = None
    next_base: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """What the switch (``plane``, ``tier``, ``index``) does with one active uSID."""

    action: str
    plane: int
    tier: int
    index: int
    next_kind: str | None
    next_index: int | None

    @property
    def shift(self) -> bool:
        """Whether the switch shifts the carrier (uN and uA do, a plain forward does not)."""
        return self.action != FORWARD

    @property
    def next_hop(self) -> str | None:
        """Name of the element the packet goes to (None for uN: it stays here)."""
        if self.next_kind == names.T0:
            return names.t0_name(self.plane, self.next_index)  # type: ignore[arg-type]
        if self.next_kind == names.T1:
            return names.t1_name(self.plane, self.next_index)  # type: ignore[arg-type]
        if self.next_kind == names.NIC_PORT:
            return names.nic_port_name(self.next_index, self.plane)  # type: ignore[arg-type]
        return None

    @property
    def link(self) -> str | None:
        """Name of the link the packet leaves on (None for uN)."""
        if self.next_kind == names.T1:
            return names.fabric_link_name(self.plane, self.index, self.next_index)  # type: ignore[arg-type]
        if self.next_kind == names.T0:
            return names.fabric_link_name(self.plane, self.next_index, self.index)  # type: ignore[arg-type]
        if self.next_kind == names.NIC_PORT:
            return names.host_link_name(self.next_index, self.plane, self.index)  # type: ignore[arg-type]
        return None


@dataclass(frozen=True, slots=True)
class SwitchTable:
    """The static table of switch (``plane``, ``tier``, ``index``); unambiguous by construction."""

    plane: int
    tier: int
    index: int
    rules: tuple[Rule, ...]

    def __post_init__(self) -> None:
        _check_rules(self)

    @property
    def name(self) -> str:
        return names.switch_name(self.plane, self.tier, self.index)

    @property
    def usid(self) -> int:
        """The switch's own uSID (unique within its plane)."""
        return usid.t0_usid(self.index) if self.tier == 0 else usid.t1_usid(self.index)

    def lookup(self, value: int) -> Decision | None:
        """The decision for active uSID ``value``; None means drop (no route)."""
        for rule in self.rules:
            if rule.first <= value <= rule.last:
                nxt = None if rule.next_kind is None else rule.next_base + (value - rule.first)
                return Decision(rule.action, self.plane, self.tier, self.index, rule.next_kind,
                                nxt)
        return None

    def routed(self) -> int:
        """How many uSIDs this switch has a route for."""
        return sum(rule.last - rule.first + 1 for rule in self.rules)

    def entries(self) -> dict[int, Decision]:
        """Every routed uSID and its decision (one entry per uSID; for small fabrics)."""
        out: dict[int, Decision] = {}
        for rule in self.rules:
            for value in range(rule.first, rule.last + 1):
                decision = self.lookup(value)
                assert decision is not None
                out[value] = decision
        return out


def _check_rules(table: SwitchTable) -> None:
    """Refuse a table in which one uSID could mean two things (or end-of-carrier means any)."""
    where = table.name
    previous_last = -1
    for rule in sorted(table.rules, key=lambda r: r.first):
        if rule.action not in ACTIONS:
            raise FabricError(f"{where}: unknown action {rule.action!r}")
        if not 0 < rule.first <= rule.last <= 0xFFFF:
            raise FabricError(f"{where}: bad uSID range {rule.first:#06x}..{rule.last:#06x}")
        if rule.first <= previous_last:
            raise FabricError(
                f"{where}: ambiguous table, uSID {rule.first:#06x} is matched by two rules")
        previous_last = rule.last
        try:
            kind = usid.classify(rule.first).kind
            same = usid.classify(rule.last).kind == kind
        except usid.UsidError as exc:
            raise FabricError(f"{where}: {exc}") from None
        if not same:
            raise FabricError(
                f"{where}: rule {rule.first:#06x}..{rule.last:#06x} spans two uSID ranges")
        if (rule.action == UN) != (rule.next_kind is None):
            raise FabricError(f"{where}: uN rules, and only they, have no next hop")


def switch_table(spec: FabricSpec, plane: int, tier: int, index: int) -> SwitchTable:
    """The static table of one switch (the rules are closed-form: O(1) to build)."""
    if not 0 <= plane < spec.planes:
        raise names.UnknownElementError(
            f"p{plane}.t{tier}.{index}", f"plane {plane} outside 0..{spec.planes - 1}")
    if tier == 0:
        if not 0 <= index < spec.t0_per_plane:
            raise names.UnknownElementError(
                names.t0_name(plane, index), f"T0 index outside 0..{spec.t0_per_plane - 1}")
        own = usid.t0_usid(index)
        rules: tuple[Rule, ...] = (
            Rule(own, own, UN),
            Rule(usid.T1_BASE, usid.T1_BASE + spec.t1 - 1, FORWARD, names.T1, 0),
            Rule(usid.PORT_BASE, usid.PORT_BASE + spec.hosts_per_t0 - 1, UA, names.NIC_PORT,
                 index * spec.hosts_per_t0),
        )
    elif tier == 1:
        if not 0 <= index < spec.t1:
            raise names.UnknownElementError(
                names.t1_name(plane, index), f"T1 index outside 0..{spec.t1 - 1}")
        own = usid.t1_usid(index)
        rules = (
            Rule(usid.T0_BASE, usid.T0_BASE + spec.t0_per_plane - 1, FORWARD, names.T0, 0),
            Rule(own, own, UN),
        )
    else:
        raise ValueError(f"tier must be 0 or 1, got {tier!r}")
    return SwitchTable(plane, tier, index, tuple(sorted(rules, key=lambda r: r.first)))


def all_tables(spec: FabricSpec) -> Iterator[SwitchTable]:
    """Every switch's table, plane by plane, T0s then T1s (6,144 small objects at Fairwater)."""
    for plane in range(spec.planes):
        for index in range(spec.t0_per_plane):
            yield switch_table(spec, plane, 0, index)
        for index in range(spec.t1):
            yield switch_table(spec, plane, 1, index)


@dataclass(frozen=True, slots=True)
class Walk:
    """Where a packet went: NIC port, switches, NIC port; the links between; who got it."""

    hops: tuple[str, ...]
    links: tuple[str, ...]
    host: int
    address: int  # the destination address as it arrived (carrier fully consumed)


#: No valid path needs more lookups than this; more means a forwarding loop.
_MAX_LOOKUPS = 4 * usid.USIDS_PER_ADDRESS


def walk(spec: FabricSpec, address: int, src_host: int) -> Walk:
    """Forward ``address`` from ``src_host`` hop by hop through the static tables.

    The plane comes from the block, so the packet leaves on that plane's NIC port and enters the
    source host's T0. Each switch applies its table to the active uSID (``usid.active``) and
    rewrites with ``usid.shift`` exactly as a switch would. Raises :class:`NoRouteError` naming
    the element where the packet would be dropped.
    """
    if not 0 <= src_host < spec.hosts:
        raise names.UnknownElementError(
            names.host_name(src_host), f"host index outside 0..{spec.hosts - 1}")
    try:
        plane = usid.plane_of(address)
    except usid.UsidError as exc:
        raise NoRouteError(f"{names.host_name(src_host)}: {exc}") from None
    text = usid.format_address(address)
    if plane >= spec.planes:
        raise NoRouteError(
            f"{names.host_name(src_host)}: {text} names plane {plane} but the fabric has "
            f"{spec.planes} planes")
    hops = [names.nic_port_name(src_host, plane)]
    links = [names.uplink_name(spec, src_host, plane)]
    tier, index = 0, spec.t0_of(src_host)
    table = switch_table(spec, plane, tier, index)
    hops.append(table.name)
    for _ in range(_MAX_LOOKUPS):
        value = usid.active(address)
        decision = table.lookup(value)
        if decision is None:
            raise NoRouteError(
                f"{table.name}: no route for active uSID {value:#06x} (address {text})")
        if decision.shift:
            address = usid.shift(address)
        if decision.action == UN:
            continue
        links.append(decision.link)  # type: ignore[arg-type]
        hops.append(decision.next_hop)  # type: ignore[arg-type]
        if decision.action == UA:
            if usid.active(address) != usid.EOC:
                raise NoRouteError(
                    f"{decision.next_hop}: arrived with uSIDs left over "
                    f"({usid.format_address(address)}, sent as {text})")
            return Walk(tuple(hops), tuple(links), decision.next_index, address)  # type: ignore[arg-type]
        tier = 1 if decision.next_kind == names.T1 else 0
        index = decision.next_index  # type: ignore[assignment]
        table = switch_table(spec, plane, tier, index)
    raise NoRouteError(f"{table.name}: forwarding loop for {text}")
