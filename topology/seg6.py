"""The uSID plan written as Linux routes: what each switch of a kernel fabric installs.

:mod:`topology.tables` says what a switch decides for each active uSID; this module says how
that decision is expressed with the Linux SRv6 data plane, so the kernel fabric
(:mod:`mrc.kernel`) installs exactly these routes and ``mrc-lab fabric --kernel-routes SWITCH``
prints them the way ``ip -6 route`` shows them (a test compares the two). It is pure data: no
sockets, no privileges, any fabric size.

One route per uSID a switch routes, each a /48 (32-bit block + the 16-bit uSID)::

    uN       fcbb:P:<own>::/48   encap seg6local action End flavors next-csid lblen 32
                                 nflen 16 dev usid
    forward  fcbb:P:<next>::/48  via fe80::1 dev <next switch>
    uA       fcbb:P:<port>::/48  encap bpf xmit mrc_ua via fe80::1 dev <host's NIC port>

Why these choices (each one found on a real kernel, 6.18):

* **uN is End with the NEXT-C-SID flavour**, RFC 9800's shift-and-forward: the kernel shifts
  the carrier by 16 bits and looks the new active uSID up in the same table. Its route must
  name a device that is not the loopback: Linux turns a route ``dev lo`` that is not a local
  address into a reject route (the packet is counted as "no route" before seg6local sees it).
  Every switch therefore has its own small ``usid`` device (an ifb) that carries nothing.
* **uA is a route to the downlink whose xmit hook shifts the carrier** (``mrc_ua``, a
  ten-line eBPF program, :mod:`mrc.kernel.bpf`), not End.X with NEXT-C-SID. The port uSID is
  always the last one of the carrier (``walk`` refuses anything else), and RFC 9800 hands a
  uSID whose argument is empty to ordinary SRH processing: Linux's End.X then needs a segment
  routing header, finds none and drops the packet (measured: every packet counted as an
  error). The eBPF shift makes the packet reach the host as the plan says (``fcbb:P::``).
  Where the kernel refuses eBPF, the fabric installs the plain route and the host's NIC
  consumes its own port uSID (the packet arrives as ``fcbb:P:E00J::``; same hops, same links,
  and nothing at the host reads the spent address except the plane in its block).
* **Next hops are one link-local gateway**, ``fe80::1`` on every interface, with a permanent
  neighbour entry for the peer's MAC: links are point to point, so no address plan, no
  neighbour discovery and no router advertisements are needed (the fabric sends nothing of its
  own that could be mistaken for traffic).
* **Interfaces are named after what is at the other end**: in switch ``p3.t0.1``, ``h5.p3`` is
  the downlink to host 5's plane-3 port and ``p3.t1.2`` the uplink to that T1; in host 5,
  ``p3.t0.1`` is its plane-3 port. So ``ip -6 route`` reads as the path.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from topology import names, usid
from topology.spec import FabricSpec
from topology.tables import FORWARD, UA, UN, switch_table

#: The one next-hop address of every route (each link is point to point).
GATEWAY = "fe80::1"
#: The device seg6local End routes are attached to (see the module docstring: not ``lo``).
SID_DEVICE = "usid"
#: The eBPF program on every uA route's xmit hook (it shifts the port uSID away).
UA_PROGRAM = "mrc_ua"
#: F3216: 32-bit locator block, 16-bit node uSID.
LOCATOR_BLOCK_BITS = 32
NODE_FUNCTION_BITS = 16
PREFIX_LEN = LOCATOR_BLOCK_BITS + NODE_FUNCTION_BITS
#: What the kernel shows for routes added without a metric, and the protocol we mark ours with.
METRIC = 1024
PROTO = "static"
#: Longest interface name Linux accepts (IFNAMSIZ - 1).
MAX_IFNAME = 15


@dataclass(frozen=True, slots=True)
class Route:
    """One route of a switch: ``usid`` in ``plane`` handled by ``action`` (``uN``, ``forward``
    or ``uA``), leaving on ``dev`` (the SID device for uN)."""

    plane: int
    usid: int
    action: str
    dev: str
    next_hop: str | None  # the element the packet goes to (None for uN: it stays here)

    @property
    def prefix(self) -> str:
        """``fcbb:P:UUUU::/48``, as the kernel prints it."""
        return f"{usid.format_address(usid.encode(self.plane, (self.usid,)))}/{PREFIX_LEN}"

    @property
    def seg6local(self) -> bool:
        return self.action == UN

    def text(self, ua_program: bool = True) -> str:
        """The route as ``ip -6 route show`` prints it (iproute2 6.x); ``ua_program=False``:
        a uA route as installed where the kernel refuses eBPF."""
        if self.seg6local:
            return (f"{self.prefix}  encap seg6local action End flavors next-csid "
                    f"lblen {LOCATOR_BLOCK_BITS} nflen {NODE_FUNCTION_BITS} dev {self.dev} "
                    f"proto {PROTO} metric {METRIC} pref medium")
        # iproute2 puts two spaces between a destination and its encapsulation
        head = (f"{self.prefix}  encap bpf xmit {UA_PROGRAM}" if self.action == UA and ua_program
                else self.prefix)
        return f"{head} via {GATEWAY} dev {self.dev} proto {PROTO} metric {METRIC} pref medium"


def interface_name(peer: str) -> str:
    """The name, inside an element's namespace, of its interface towards ``peer``."""
    if len(peer) > MAX_IFNAME:
        raise ValueError(f"interface name {peer!r} is longer than Linux's {MAX_IFNAME} "
                         "characters")
    return peer


def switch_routes(spec: FabricSpec, switch: str) -> list[Route]:
    """Every route switch ``switch`` (a name or selector) installs, in the order ``ip -6 route``
    lists them (ascending prefix)."""
    element = names.resolve(spec, switch)
    if element.tier is None:
        raise names.UnknownElementError(switch, f"is a {element.kind}, not a switch")
    table = switch_table(spec, element.plane, element.tier, element.index)  # type: ignore[arg-type]
    routes = []
    for value, decision in sorted(table.entries().items()):
        if decision.action == UN:
            routes.append(Route(table.plane, value, UN, SID_DEVICE, None))
        elif decision.action in (FORWARD, UA):
            hop = decision.next_hop
            assert hop is not None
            routes.append(Route(table.plane, value, decision.action, interface_name(hop), hop))
        else:  # pragma: no cover - tables.ACTIONS has exactly these three
            raise ValueError(f"no Linux route for action {decision.action!r}")
    return routes


def routes_text(spec: FabricSpec, switch: str, ua_program: bool = True) -> str:
    """``switch``'s routes, one per line, as ``ip -6 route show`` prints them in its namespace."""
    return "\n".join(route.text(ua_program) for route in switch_routes(spec, switch))


def route_address(route: Route) -> ipaddress.IPv6Network:
    """The route's destination as an ``ipaddress`` network (for netlink encoders)."""
    return ipaddress.IPv6Network(route.prefix)
