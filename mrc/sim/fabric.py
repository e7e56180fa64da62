"""Build a simulated network from a :class:`~topology.spec.FabricSpec`.

Every element gets its canonical name from :mod:`topology.names` (``h17``, ``h17.p3``,
``p3.t0.12``, ``p3.t1.5``, links ``h17.p3--p3.t0.4`` and ``p3.t0.12--p3.t1.5``). Output ports
are named ``<from>-><to>`` with the same end names (``h17.p3->p3.t0.4``,
``p3.t0.4->h17.p3``); ``Network.element("h17.p3")`` returns that NIC port's output port.
Switch tables come from :func:`topology.tables.switch_table`, the reference the tests hold
the simulator to.
"""

from __future__ import annotations

from mrc.sim.engine import Simulator
from mrc.sim.host import Host, NicPort
from mrc.sim.link import Link
from mrc.sim.network import Network
from mrc.sim.pfc import wire_pfc
from mrc.sim.pfc_nic import PfcNicPort
from mrc.sim.pfc_ports import PfcPort
from mrc.sim.ports import OutPort
from mrc.sim.routing import Routing, RoutingConfig
from mrc.sim.switch import Switch
from topology import names, tables
from topology.spec import FabricError, FabricSpec

#: Largest fabric (in links) build_network accepts unless told otherwise. A link costs about
#: 5 kB of Python objects (two ports with their four queues), so this is roughly 0.5 GB before
#: any traffic, and a pure-Python event loop could not push meaningful traffic through more.
MAX_SIM_LINKS = 100_000


class FabricTooLargeError(FabricError):
    """The fabric is valid but too large to simulate packet by packet in one process."""


def link_count(spec: FabricSpec) -> int:
    """Host links plus T0-T1 links, over all planes."""
    return spec.planes * (spec.hosts + spec.t0_per_plane * spec.t1)


def build_network(sim: Simulator, spec: FabricSpec, *, max_links: int = MAX_SIM_LINKS,
                  routing: RoutingConfig | None = None) -> Network:
    """Create every host, switch, link and port of ``spec``, with static uSID tables (MRC)
    and the routing control plane's ECMP groups (RC, ``routing``: defaults if None).

    Refuses (``FabricTooLargeError``) fabrics above ``max_links`` links with the reason:
    the Fairwater preset (131,072 hosts x 8 planes, 2,097,152 links) is a fabric to describe
    and address, not to simulate packet by packet; run its mechanisms on a smaller spec.
    """
    count = link_count(spec)
    if count > max_links:
        raise FabricTooLargeError(
            f"fabric {spec.name!r} has {count:,} links ({spec.planes} planes x "
            f"({spec.hosts:,} host links + {spec.t0_per_plane} T0 x {spec.t1} T1)); the packet "
            f"simulator accepts at most {max_links:,} (about 5 kB of state per link, and every "
            "packet is a Python object). Simulate a smaller fabric with the same per-switch "
            "shape, or raise max_links if you have the memory and patience.")
    net = Network(sim, spec)
    latency = spec.switch_latency_ps
    # a PFC fabric gets the PFC ports (mrc.sim.pfc); without PFC, the plain ones, unchanged
    port_cls: type[OutPort] = PfcPort if spec.pfc else OutPort
    nic_cls: type[NicPort] = PfcNicPort if spec.pfc else NicPort
    net.hosts = [Host(net, h, names.host_name(h)) for h in range(spec.hosts)]
    for plane in range(spec.planes):
        t0s = [Switch(net, names.t0_name(plane, i), plane, 0, i)
               for i in range(spec.t0_per_plane)]
        t1s = [Switch(net, names.t1_name(plane, k), plane, 1, k) for k in range(spec.t1)]
        net.t0.append(t0s)
        net.t1.append(t1s)
        for sw in (*t0s, *t1s):
            net.switches[sw.name] = sw
        for host in net.hosts:  # host order = T0 downlink order (port j = host % hosts_per_t0)
            t0 = t0s[spec.t0_of(host.index)]
            nic_name = names.nic_port_name(host.index, plane)
            nic = nic_cls(net, f"{nic_name}->{t0.name}", host, t0, plane,
                          far_latency_ps=latency)
            down = port_cls(net, f"{t0.name}->{nic_name}", t0, host, plane, far_latency_ps=0)
            _add_link(net, names.host_link_name(host.index, plane, t0.index), plane, nic, down)
            net.nic_ports[nic_name] = nic
            host.ports.append(nic)
            t0.downlinks.append(down)
        for t0 in t0s:
            for t1 in t1s:
                up = port_cls(net, f"{t0.name}->{t1.name}", t0, t1, plane,
                              far_latency_ps=latency)
                down = port_cls(net, f"{t1.name}->{t0.name}", t1, t0, plane,
                                far_latency_ps=latency)
                _add_link(net, names.fabric_link_name(plane, t0.index, t1.index), plane, up,
                          down)
                t0.uplinks.append(up)
                t1.downlinks.append(down)
        for sw in (*t0s, *t1s):
            sw.build_tables(tables.switch_table(spec, plane, sw.tier, sw.index).rules)
    if spec.pfc:
        wire_pfc(net)
    net.routing = Routing(net, routing)
    return net


def _add_link(net: Network, name: str, plane: int, up: OutPort, down: OutPort) -> None:
    link = Link(name, plane, up, down)
    net.links[name] = link
    net.ports[up.name] = up
    net.ports[down.name] = down
