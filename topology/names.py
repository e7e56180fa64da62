"""Stable names for every fabric element, and selectors that labs use to point at them.

Fault schedules, counters and result tables refer to elements by these names, so the names are
part of the lab file format: they never depend on build order, and one element has exactly one
canonical name (no leading zeros, links written lower tier first).

Canonical names (``H`` host index, ``P`` plane, ``I`` T0 index, ``K`` T1 index; all from 0)::

    hH                  host (its whole NIC)                    h17
    hH.pP               the host's NIC port in plane P          h17.p3
    pP.t0.I             T0 (leaf) switch I of plane P           p3.t0.12
    pP.t1.K             T1 (spine) switch K of plane P          p3.t1.5
    hH.pP--pP.t0.I      host link: NIC port to its T0           h17.p3--p3.t0.4
    pP.t0.I--pP.t1.K    fabric link: T0 to T1                   p3.t0.12--p3.t1.5

Host ``H`` hangs under T0 ``H // hosts_per_t0`` in every plane, on that T0's downlink port
``H % hosts_per_t0``.

Selectors (accepted by :func:`resolve`, never produced by it) name an element relative to a
host, so a lab does not have to work out which T0 a host sits under::

    hH.pP.t0            the T0 above host H in plane P          h3.p2.t0 -> p2.t0.0
    hH.pP.uplink        host H's link in plane P                h3.p2.uplink -> h3.p2--p2.t0.0

:func:`resolve` also accepts a link written upper tier first (``p3.t1.5--p3.t0.12``) and returns
the canonical element. Every function here is O(1): a regular expression and some arithmetic,
never a graph, so it works at Fairwater scale (131,072 hosts x 8 planes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topology import usid
from topology.spec import FabricSpec

HOST = "host"
NIC_PORT = "nic_port"
T0 = "t0"
T1 = "t1"
LINK = "link"
KINDS = (HOST, NIC_PORT, T0, T1, LINK)

HOST_LINK = "host_link"
FABRIC_LINK = "fabric_link"

LINK_SEPARATOR = "--"


class UnknownElementError(ValueError):
    """A name or selector that does not denote an element of the given fabric."""

    def __init__(self, element: str, reason: str) -> None:
        super().__init__(f"unknown element {element!r}: {reason}")
        self.element = element
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Element:
    """One parsed fabric element. ``name`` is always the canonical name.

    ``index`` is the host index for hosts and NIC ports, the switch index for switches, and None
    for links. ``t0`` is the T0 the element is or hangs under (for a fabric link: its T0 end);
    ``t1`` is set for T1 switches and fabric links; ``port`` is the T0 downlink port of a host,
    NIC port or host link. ``ends`` holds a link's two canonical end names, lower tier first.
    """

    kind: str
    name: str
    plane: int | None = None
    index: int | None = None
    host: int | None = None
    t0: int | None = None
    t1: int | None = None
    port: int | None = None
    ends: tuple[str, str] | None = None

    @property
    def tier(self) -> int | None:
        """0 for a T0, 1 for a T1, None for anything that is not a switch."""
        return 0 if self.kind == T0 else 1 if self.kind == T1 else None

    @property
    def link_kind(self) -> str | None:
        """``host_link`` or ``fabric_link`` for links, None otherwise."""
        if self.kind != LINK:
            return None
        return HOST_LINK if self.host is not None else FABRIC_LINK

    @property
    def usid(self) -> int | None:
        """A switch's own uSID; for a NIC port, the T0-local port uSID that delivers to it."""
        if self.kind == T0:
            return usid.t0_usid(self.index)  # type: ignore[arg-type]
        if self.kind == T1:
            return usid.t1_usid(self.index)  # type: ignore[arg-type]
        if self.kind == NIC_PORT:
            return usid.port_usid(self.port)  # type: ignore[arg-type]
        return None


# ------------------------------------------------------------------ builders (no validation)
# Builders trust their integers (they are used in hot loops over valid indices); use
# parse()/resolve() to validate a name against a spec.


def host_name(host: int) -> str:
    return f"h{host}"


def nic_port_name(host: int, plane: int) -> str:
    return f"h{host}.p{plane}"


def t0_name(plane: int, index: int) -> str:
    return f"p{plane}.t0.{index}"


def t1_name(plane: int, index: int) -> str:
    return f"p{plane}.t1.{index}"


def switch_name(plane: int, tier: int, index: int) -> str:
    """Name of the switch at (plane, tier 0 or 1, index)."""
    if tier not in (0, 1):
        raise ValueError(f"tier must be 0 or 1, got {tier!r}")
    return f"p{plane}.t{tier}.{index}"


def host_link_name(host: int, plane: int, t0: int) -> str:
    """Link between host ``host``'s plane-``plane`` NIC port and T0 ``t0`` above it."""
    return f"h{host}.p{plane}{LINK_SEPARATOR}p{plane}.t0.{t0}"


def fabric_link_name(plane: int, t0: int, t1: int) -> str:
    return f"p{plane}.t0.{t0}{LINK_SEPARATOR}p{plane}.t1.{t1}"


def uplink_name(spec: FabricSpec, host: int, plane: int) -> str:
    """Host ``host``'s link in plane ``plane`` (the spec says which T0 it hangs under)."""
    return host_link_name(host, plane, spec.t0_of(host))


def link_name(end_a: str, end_b: str) -> str:
    """A link's name from its two end names in either order (lower tier first)."""
    return LINK_SEPARATOR.join(sorted((end_a, end_b), key=_tier_rank))


def _tier_rank(name: str) -> int:
    if _NIC_PORT_RE.match(name):
        return 0
    match = _SWITCH_RE.match(name)
    if match:
        return 1 + int(match["tier"])
    raise UnknownElementError(name, "a link end must be a NIC port or a switch")


# ------------------------------------------------------------------ parsing
_NUM = r"(?:0|[1-9][0-9]*)"
_HOST_RE = re.compile(rf"h(?P<host>{_NUM})")
_NIC_PORT_RE = re.compile(rf"h(?P<host>{_NUM})\.p(?P<plane>{_NUM})")
_SWITCH_RE = re.compile(rf"p(?P<plane>{_NUM})\.t(?P<tier>[01])\.(?P<index>{_NUM})")
_SELECTOR_RE = re.compile(rf"h(?P<host>{_NUM})\.p(?P<plane>{_NUM})\.(?P<what>t0|uplink)")
_LOOSE_NUMBERS = re.compile(r"[0-9]+")
_SYNTAX_HELP = ("expected h17, h17.p3, p3.t0.12, p3.t1.5, a link like h17.p3--p3.t0.4 or "
                "p3.t0.12--p3.t1.5, or a selector h3.p2.t0 / h3.p2.uplink")


def parse(spec: FabricSpec, name: str) -> Element:
    """Parse a canonical element name and check it exists in ``spec``.

    Raises :class:`UnknownElementError` naming the element and the reason. Selectors and links
    written upper tier first are refused here; :func:`resolve` accepts them.
    """
    element = resolve(spec, name)
    if element.name != name:
        raise UnknownElementError(name, f"not a canonical name; the element is {element.name!r}")
    return element


def resolve(spec: FabricSpec, text: str) -> Element:
    """The element a name or selector denotes in ``spec`` (canonical name in ``.name``)."""
    if not isinstance(text, str):
        raise UnknownElementError(repr(text), "element names are strings")
    if LINK_SEPARATOR in text:
        return _link(spec, text)
    if match := _SELECTOR_RE.fullmatch(text):
        host = _check_host(spec, text, int(match["host"]))
        plane = _check_plane(spec, text, int(match["plane"]))
        if match["what"] == "t0":
            return _t0(plane, spec.t0_of(host))
        return _host_link(spec, host, plane)
    if match := _HOST_RE.fullmatch(text):
        host = _check_host(spec, text, int(match["host"]))
        return Element(HOST, host_name(host), index=host, host=host, t0=spec.t0_of(host),
                       port=spec.port_of(host))
    if match := _NIC_PORT_RE.fullmatch(text):
        host = _check_host(spec, text, int(match["host"]))
        plane = _check_plane(spec, text, int(match["plane"]))
        return _nic_port(spec, host, plane)
    if match := _SWITCH_RE.fullmatch(text):
        plane = _check_plane(spec, text, int(match["plane"]))
        index = int(match["index"])
        if match["tier"] == "0":
            _check_range(text, "T0", index, spec.t0_per_plane, "T0 per plane")
            return _t0(plane, index)
        _check_range(text, "T1", index, spec.t1, "T1 per plane")
        return Element(T1, t1_name(plane, index), plane=plane, index=index, t1=index)
    _refuse_syntax(text)
    raise AssertionError("unreachable")


def _refuse_syntax(text: str) -> None:
    # Point out leading zeros explicitly: "h007" looks valid to a human.
    for number in _LOOSE_NUMBERS.findall(text):
        if len(number) > 1 and number.startswith("0"):
            raise UnknownElementError(text, f"leading zeros are not allowed ({number})")
    raise UnknownElementError(text, f"not an element name ({_SYNTAX_HELP})")


def _check_range(text: str, what: str, value: int, limit: int, noun: str) -> None:
    if not 0 <= value < limit:
        raise UnknownElementError(
            text, f"{what} index {value} outside 0..{limit - 1} (fabric has {limit:,} {noun})")


def _check_host(spec: FabricSpec, text: str, host: int) -> int:
    _check_range(text, "host", host, spec.hosts, "hosts")
    return host


def _check_plane(spec: FabricSpec, text: str, plane: int) -> int:
    if not 0 <= plane < spec.planes:
        raise UnknownElementError(
            text, f"plane {plane} outside 0..{spec.planes - 1} (fabric has {spec.planes} planes)")
    return plane


def _t0(plane: int, index: int) -> Element:
    return Element(T0, t0_name(plane, index), plane=plane, index=index, t0=index)


def _nic_port(spec: FabricSpec, host: int, plane: int) -> Element:
    return Element(NIC_PORT, nic_port_name(host, plane), plane=plane, index=host, host=host,
                   t0=spec.t0_of(host), port=spec.port_of(host))


def _host_link(spec: FabricSpec, host: int, plane: int) -> Element:
    t0 = spec.t0_of(host)
    lower, upper = nic_port_name(host, plane), t0_name(plane, t0)
    return Element(LINK, f"{lower}{LINK_SEPARATOR}{upper}", plane=plane, host=host, t0=t0,
                   port=spec.port_of(host), ends=(lower, upper))


_RANK = {HOST: 0, NIC_PORT: 0, T0: 1, T1: 2}


def _link(spec: FabricSpec, text: str) -> Element:
    parts = text.split(LINK_SEPARATOR)
    if len(parts) != 2 or not all(parts):
        raise UnknownElementError(text, "a link is two element names joined by '--'")
    try:
        resolved = [resolve(spec, part) for part in parts]
    except UnknownElementError as exc:
        raise UnknownElementError(text, f"end {exc.element!r}: {exc.reason}") from None
    lower, upper = sorted(resolved, key=lambda e: _RANK.get(e.kind, 3))
    if lower.kind == NIC_PORT and upper.kind == T0:
        if lower.plane != upper.plane:
            raise UnknownElementError(
                text, f"{lower.name} is in plane {lower.plane} but {upper.name} in plane "
                f"{upper.plane}")
        if lower.t0 != upper.index:
            raise UnknownElementError(
                text, f"h{lower.host} hangs under {t0_name(upper.plane, lower.t0)}, "  # type: ignore[arg-type]
                f"not {upper.name}")
        return _host_link(spec, lower.host, lower.plane)  # type: ignore[arg-type]
    if lower.kind == T0 and upper.kind == T1:
        if lower.plane != upper.plane:
            raise UnknownElementError(
                text, f"{lower.name} is in plane {lower.plane} but {upper.name} in plane "
                f"{upper.plane}")
        lname, uname = lower.name, upper.name
        return Element(LINK, f"{lname}{LINK_SEPARATOR}{uname}", plane=lower.plane, t0=lower.index,
                       t1=upper.index, ends=(lname, uname))
    raise UnknownElementError(
        text, f"no link joins a {lower.kind} and a {upper.kind} (links join a NIC port to its "
        "T0, or a T0 to a T1 of the same plane)")
