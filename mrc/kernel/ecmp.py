"""RC's routed plan on the kernel fabric: Linux's own ECMP routes, repaired at the switch.

Each switch namespace holds, beside the uSID plan (:mod:`topology.seg6`), the routed plan of
:func:`topology.routed.kernel_routes`: a T0 reaches another T0's /64 by one multipath route
over its uplinks, its own hosts by a /128 each; a T1 reaches each T0's /64 down its link.
Linux hashes the 5-tuple over the nexthops (``fib_multipath_hash_policy`` 1). Repair is the
switch's own, at once: when a link goes down or up at either end, the switches at both ends
re-install their routed plan over the links up at both ends. There is no BGP here, so a
failure a switch cannot see is never withdrawn, and there are no detection or convergence
delays: the simulator's :mod:`mrc.sim.routing` models those.
"""

from __future__ import annotations

from typing import Any, Protocol

from mrc.kernel import netns, rtnl
from topology import routed
from topology import seg6 as plan
from topology.spec import FabricSpec


class KernelFabric(Protocol):
    """What this module reads of ``mrc.kernel.fabric.KernelFabric`` (named here, not
    imported: the fabric imports this module)."""

    spec: FabricSpec
    switches: list[str]
    links_of: dict[str, list[Any]]
    admin_down: set[tuple[str, str]]
    ifindex: dict[tuple[str, str], int]
    sockets: dict[str, Any]


def configure() -> None:
    """Hash the 5-tuple (policy 1: addresses, ports, protocol), as a data-centre switch
    does; a kernel without the per-namespace sysctl keeps its default (addresses and flow
    label)."""
    try:
        netns.sysctl("net.ipv6.fib_multipath_hash_policy", 1)
    except OSError:
        pass


def routed_requests(fabric: KernelFabric, switch: str) -> list[rtnl.Request]:
    """``switch``'s routed plan over the links that are up at both ends."""
    live = set()
    for link in fabric.links_of[switch]:
        mine, other = ((link.lower, link.upper) if link.lower.element == switch
                       else (link.upper, link.lower))
        if ((switch, mine.ifname) not in fabric.admin_down
                and (other.element, other.ifname) not in fabric.admin_down):
            live.add(mine.ifname)
    requests = []
    for prefix, devs in routed.kernel_routes(fabric.spec, switch):
        hops = [(fabric.ifindex[(switch, dev)], dev) for dev in devs if dev in live]
        if len(hops) == 1:
            requests.append(rtnl.route_via(prefix, plan.GATEWAY, *hops[0]))
        elif hops:
            requests.append(rtnl.route_multipath(prefix, plan.GATEWAY, hops))
    return requests


def refresh(fabric: KernelFabric, port: Any) -> None:
    """After ``port`` went down or up, the switches at both ends of its link re-install
    their routed plan."""
    for link in fabric.links_of[port.element]:
        if port not in (link.lower, link.upper):
            continue
        for end in (link.lower, link.upper):
            if end.element in fabric.switches:
                requests = routed_requests(fabric, end.element)
                if requests:
                    fabric.sockets[end.element].run(requests)
