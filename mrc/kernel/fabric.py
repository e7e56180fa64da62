"""The kernel fabric: a lab's Clos built from network namespaces, veth pairs and seg6local
routes, forwarded by the Linux kernel itself.

One namespace per switch and per host (``mrck-<token>-p3.t0.1``, ``mrck-<token>-h5``), one
veth pair per link, each end named after the element at the other end (see
:mod:`topology.seg6`). Switches forward IPv6 and route only the uSID plan; hosts have IPv6
switched off on their ports, because a host here is a NIC driven from user space through a
packet socket (:mod:`mrc.kernel.host`), not a kernel IP stack: nothing but the lab's own
packets ever crosses a link (no neighbour discovery, router solicitations or MLD reports).

Built in this order, each step one batch of netlink requests per namespace: namespaces and
their sysctls; every switch's SID device; every veth pair (created in the lower-tier
namespace, its peer directly in the upper one); token buckets on both ends
(:mod:`mrc.kernel.shaping`); links up; permanent neighbours and routes on the switch ends.
Ports go down and up with ``ip link set down/up`` (:meth:`KernelFabric.set_port`); the far
end of a veth whose port is down sees its carrier drop, as a switch port sees loss of signal.
Linux deletes a device's routes and neighbours when it goes down, so a switch port coming up
gets back exactly the routes of the plan that leave through it.

:meth:`KernelFabric.close` (also ``with``, and on any failure while building) closes every
socket this process holds in the fabric and deletes every namespace: that is the whole
teardown. A run killed before it could do so leaves namespaces that the next build removes
(:func:`mrc.kernel.netns.cleanup_stale`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mrc.kernel import bpf, ecmp, netns, rtnl
from mrc.kernel.shaping import Shaping
from topology import names
from topology import seg6 as plan
from topology.spec import FabricSpec
from topology.tables import UA

#: MTU of every veth: a full MRC DATA packet (4,240 IPv6 bytes at the default MTU) fits.
LINK_MTU = 9000


class KernelUnavailable(RuntimeError):
    """This machine cannot build a kernel fabric; the message names what is missing."""


@dataclass(frozen=True, slots=True)
class Port:
    """One end of a link: the element whose namespace holds it, its interface name there (the
    far end's name) and its MAC address."""

    element: str
    ifname: str
    mac: str


@dataclass(frozen=True, slots=True)
class Link:
    """A fabric link: ``lower`` is the host (or T0) end, ``upper`` the T0 (or T1) end."""

    name: str
    plane: int
    lower: Port
    upper: Port
    host: int | None = None  # the host of a host link

    @property
    def ports(self) -> tuple[Port, Port]:
        return (self.lower, self.upper)


def mac(number: int, end: int) -> str:
    """Locally administered, unique per link end: ``02:6d:<link number, 24 bits>:<end>``."""
    return f"02:6d:{number >> 16 & 255:02x}:{number >> 8 & 255:02x}:{number & 255:02x}:{end:02x}"


def plan_links(spec: FabricSpec) -> list[Link]:
    """Every link of ``spec``, plane by plane: host links, then T0-T1 links."""
    links: list[Link] = []

    def add(lower: str, upper: str, plane: int, host: int | None) -> None:
        n = len(links)
        name = names.link_name(lower, upper)
        low_el = names.host_name(host) if host is not None else lower
        links.append(Link(name, plane, Port(low_el, plan.interface_name(upper), mac(n, 0)),
                          Port(upper, plan.interface_name(lower), mac(n, 1)), host))

    for plane in range(spec.planes):
        for host in range(spec.hosts):
            add(names.nic_port_name(host, plane), names.t0_name(plane, spec.t0_of(host)),
                plane, host)
        for t0 in range(spec.t0_per_plane):
            for t1 in range(spec.t1):
                add(names.t0_name(plane, t0), names.t1_name(plane, t1), plane, None)
    return links


def switch_names(spec: FabricSpec) -> list[str]:
    return [names.switch_name(plane, tier, index) for plane in range(spec.planes)
            for tier, count in ((0, spec.t0_per_plane), (1, spec.t1)) for index in range(count)]


@dataclass
class BuildTimes:
    """Wall seconds of each build step (the closing note reports them)."""

    steps: dict[str, float] = field(default_factory=dict)

    def total(self) -> float:
        return sum(self.steps.values())


class KernelFabric:
    """A built fabric: its namespaces, a netlink socket into each, and the link plan."""

    def __init__(self, spec: FabricSpec, shaping: Shaping | None = None,
                 run: netns.Run | None = None) -> None:
        self.spec = spec
        self.shaping = shaping
        self.run = run or netns.Run()
        self.switches = switch_names(spec)
        self._switch_set = set(self.switches)
        self.hosts = [names.host_name(h) for h in range(spec.hosts)]
        self.links = {link.name: link for link in plan_links(spec)}
        self.links_of: dict[str, list[Link]] = {el: [] for el in self.switches + self.hosts}
        for link in self.links.values():
            self.links_of[link.lower.element].append(link)
            self.links_of[link.upper.element].append(link)
        self.sockets: dict[str, rtnl.Socket] = {}
        self.ifindex: dict[tuple[str, str], int] = {}
        self.admin_down: set[tuple[str, str]] = set()  # (element, ifname) set down
        self.times = BuildTimes()
        #: the loaded uA program (fd), or None where the kernel refused eBPF
        self.ua_program: int | None = None
        #: loaded random-drop programs by probability, the links that drop, what they dropped
        self.loss_programs: dict[float, int] = {}
        self.lossy: set[str] = set()
        self.loss_dropped = 0
        self.closed = False

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, spec: FabricSpec, shaping: Shaping | None = None) -> KernelFabric:
        """Build the whole fabric (after removing stale ones); torn down again on failure."""
        reason = netns.missing_privileges()
        if reason:
            raise KernelUnavailable(reason)
        netns.cleanup_stale()
        fabric = cls(spec, shaping)
        try:
            fabric._build()
        except BaseException:
            fabric.close()
            raise
        return fabric

    def ns(self, element: str) -> str:
        """The namespace name of a switch or host (``h5``, ``p3.t0.1``)."""
        return self.run.name(element)

    def _step(self, name: str, t0: float) -> float:
        now = time.perf_counter()
        self.times.steps[name] = round(now - t0, 4)
        return now

    def _build(self) -> None:
        t = time.perf_counter()
        for element in self.switches + self.hosts:
            netns.create(self.ns(element))
            with netns.enter(self.ns(element)):
                _configure_ipv6(host=element not in self._switch_set)
                self.sockets[element] = rtnl.Socket()
        t = self._step("namespaces", t)
        for switch in self.switches:
            self.sockets[switch].run([rtnl.device(plan.SID_DEVICE, "ifb")])
        by_lower: dict[str, list[rtnl.Request]] = {}
        fds: dict[str, int] = {}
        try:
            for link in self.links.values():
                upper = link.upper.element
                if upper not in fds:
                    fds[upper] = os.open(netns.path(self.ns(upper)), os.O_RDONLY)
                by_lower.setdefault(link.lower.element, []).append(rtnl.veth(
                    link.lower.ifname, link.lower.mac, link.upper.ifname, link.upper.mac,
                    fds[upper], LINK_MTU))
            for element, requests in by_lower.items():
                self.sockets[element].run(requests)
        finally:
            for fd in fds.values():
                os.close(fd)
        for element, sock in self.sockets.items():
            for stats in sock.links():
                self.ifindex[(element, stats.name)] = stats.index
        t = self._step("links", t)
        if self.shaping is not None:
            self._run_per_element((port.element, self._shaping(port, link))
                                  for link in self.links.values() for port in link.ports)
        t = self._step("shaping", t)
        for switch in self.switches:  # after the links exist: see _configure_ipv6
            with netns.enter(self.ns(switch)):
                netns.sysctl("net.ipv6.conf.all.forwarding", 1)
                ecmp.configure()
        ups = [rtnl.link_state(self.ifindex[(s, plan.SID_DEVICE)], True, plan.SID_DEVICE)
               for s in self.switches]
        self._run_per_element([(s, [r]) for s, r in zip(self.switches, ups, strict=True)])
        self._run_per_element((port.element, [self._state(port, True)])
                              for link in self.links.values() for port in link.ports)
        self.wait_running()
        t = self._step("up", t)
        try:
            self.ua_program = bpf.ua_shift()
        except bpf.BpfError:
            self.ua_program = None  # plain uA routes: the NIC consumes its port uSID
        routes = []
        for switch in self.switches:
            routes.append((switch, self._switch_requests(switch, None)))
        self._run_per_element(routes)
        self._step("routes", t)

    def _run_per_element(self, items: Iterable[tuple[str, list[rtnl.Request]]]) -> None:
        """Send requests grouped by namespace (one batch each, in first-seen order)."""
        grouped: dict[str, list[rtnl.Request]] = {}
        for element, requests in items:
            grouped.setdefault(element, []).extend(requests)
        for element, requests in grouped.items():
            if requests:
                self.sockets[element].run(requests)

    def _state(self, port: Port, up: bool) -> rtnl.Request:
        return rtnl.link_state(self.ifindex[(port.element, port.ifname)], up, port.ifname)

    def _switch_requests(self, switch: str, only: set[str] | None) -> list[rtnl.Request]:
        """Neighbours and routes of ``switch`` (only those leaving by the interfaces ``only``,
        when given): what its namespace holds for the links that are up."""
        requests: list[rtnl.Request] = []
        peers = {}
        for link in self.links_of[switch]:
            mine, other = ((link.lower, link.upper) if link.lower.element == switch
                           else (link.upper, link.lower))
            if (switch, mine.ifname) in self.admin_down or (
                    only is not None and mine.ifname not in only):
                continue
            peers[mine.ifname] = other
            requests.append(rtnl.neighbour(self.ifindex[(switch, mine.ifname)], plan.GATEWAY,
                                           other.mac, mine.ifname))
        for route in plan.switch_routes(self.spec, switch):
            if route.seg6local:
                if only is None:
                    requests.append(rtnl.route_end_next_csid(
                        route.prefix, self.ifindex[(switch, route.dev)],
                        plan.LOCATOR_BLOCK_BITS, plan.NODE_FUNCTION_BITS, route.dev))
            elif route.dev in peers:
                program = (None if route.action != UA or self.ua_program is None
                           else (self.ua_program, plan.UA_PROGRAM))
                requests.append(rtnl.route_via(route.prefix, plan.GATEWAY,
                                               self.ifindex[(switch, route.dev)], route.dev,
                                               xmit_bpf=program))
        if only is None:
            requests.extend(ecmp.routed_requests(self, switch))
        return requests

    # ------------------------------------------------------------------ links at run time
    def set_port(self, port: Port, up: bool) -> bool:
        """``ip link set dev PORT down`` (or up) in its element's namespace; False if it
        already was. A switch port coming up gets its neighbour entry and routes back."""
        key = (port.element, port.ifname)
        if up == (key not in self.admin_down):
            return False
        if up:
            self.admin_down.discard(key)
        else:
            self.admin_down.add(key)
        sock = self.sockets[port.element]
        sock.run([self._state(port, up)])
        if up and port.element in self._switch_set:
            sock.run(self._switch_requests(port.element, {port.ifname}))
        ecmp.refresh(self, port)  # RC's ECMP members at both ends of its link
        return True

    def wait_running(self, timeout_s: float = 10.0) -> None:
        """Wait until every port set up is operationally up. Linux attaches a device's qdisc
        only when its link watcher has run, which a loaded machine can delay by up to a
        second; until then the device drops what is sent into it, so a fabric (or a link
        brought back) is ready only after this."""
        deadline = time.monotonic() + timeout_s
        waiting = {(p.element, p.ifname) for link in self.links.values() for p in link.ports}
        waiting -= self.admin_down
        while waiting:
            for element in {element for element, _ in waiting}:
                for stats in self.sockets[element].links():
                    if stats.oper_up:
                        waiting.discard((element, stats.name))
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise KernelUnavailable(f"{len(waiting)} ports not up after {timeout_s} s, "
                                        f"e.g. {sorted(waiting)[0]}")
            time.sleep(0.005)

    def set_link(self, name: str, up: bool) -> bool:
        """Both ends of link ``name`` down (or up); False if nothing changed."""
        changed = [self.set_port(port, up) for port in self.links[name].ports]
        return any(changed)

    def link_is_up(self, name: str) -> bool:
        """Whether link ``name`` carries traffic (both of its ends are up)."""
        return not any((p.element, p.ifname) in self.admin_down for p in self.links[name].ports)

    def set_rate(self, name: str, fraction: float) -> None:
        """Run link ``name`` at ``fraction`` of its rate (both directions)."""
        if self.shaping is None:
            raise KernelUnavailable("this fabric was built without shaping")
        link = self.links[name]
        for port in link.ports:
            self.sockets[port.element].run(self._shaping(port, link, fraction))

    def _shaping(self, port: Port, link: Link, fraction: float = 1.0) -> list[rtnl.Request]:
        """The tbf requests of one end of ``link`` (:meth:`Shaping.requests`)."""
        assert self.shaping is not None
        return self.shaping.requests(self.ifindex[(port.element, port.ifname)], port.ifname,
                                     link.host is not None and port is link.lower, fraction)

    def set_loss(self, name: str, probability: float) -> None:
        """Drop each packet sent into link ``name`` (both directions) with ``probability``: an
        eBPF classifier on both ends' egress (0 takes it off again)."""
        if not 0 <= probability <= 1:
            raise ValueError(f"loss probability must be in [0, 1], got {probability!r}")
        fd = None
        if probability > 0:
            fd = self.loss_programs.get(probability)
            if fd is None:
                fd = self.loss_programs[probability] = bpf.random_drop(probability)
        if fd is None and name not in self.lossy:
            return
        for port in self.links[name].ports:
            index = self.ifindex[(port.element, port.ifname)]
            sock = self.sockets[port.element]
            if fd is not None:
                sock.run([rtnl.clsact(index, port.ifname),
                          rtnl.egress_bpf(index, fd, "mrc_loss", port.ifname)])
            else:  # keep its drop count: the hook goes, and its counters with it
                self.loss_dropped += sum(q.drops for q in sock.qdiscs()
                                         if q.index == index and q.kind == "clsact")
                sock.run([rtnl.clsact_delete(index, port.ifname)])
        if fd is None:
            self.lossy.discard(name)
        else:
            self.lossy.add(name)

    def link_of_host(self, host: int, plane: int) -> Link:
        return self.links[names.uplink_name(self.spec, host, plane)]

    # ------------------------------------------------------------------ counters
    def counters(self, elements: Iterable[str] | None = None) -> dict[tuple[str, str], Any]:
        """``(element, interface) -> rtnl.LinkStats`` of every fabric interface."""
        out = {}
        for element in (self.switches + self.hosts if elements is None else elements):
            for stats in self.sockets[element].links():
                out[(element, stats.name)] = stats
        return out

    def drops(self) -> dict[str, int]:
        """What the kernel fabric dropped: queue overflow in the token buckets, packets sent
        into a dead link, and packets a switch had no route for (``Ip6InNoRoutes``)."""
        qdiscs = [q for sock in self.sockets.values() for q in sock.qdiscs()]
        qdisc = sum(q.drops for q in qdiscs if q.kind == "tbf")
        loss = sum(q.drops for q in qdiscs if q.kind == "clsact") + self.loss_dropped
        link = sum(s.tx_dropped for s in self.counters().values())
        no_route = 0
        for switch in self.switches:
            with netns.enter(self.ns(switch)):
                no_route += _snmp6("Ip6InNoRoutes")
        return {"queue": qdisc, "loss": loss, "link": link, "no_route": no_route,
                "total": qdisc + loss + link + no_route}

    # ------------------------------------------------------------------ teardown
    def close(self) -> int:
        """Close our sockets and delete every namespace of the run (idempotent); returns how
        many namespaces were deleted."""
        if self.closed:
            return 0
        self.closed = True
        for sock in self.sockets.values():
            with contextlib.suppress(OSError):
                sock.close()
        self.sockets.clear()
        for fd in [self.ua_program, *self.loss_programs.values()]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.ua_program = None
        self.loss_programs.clear()
        deleted = self.run.delete_all()
        self.run.release()
        return deleted

    def __enter__(self) -> KernelFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _configure_ipv6(host: bool) -> None:
    """Sysctls of the namespace the thread is in, before any device exists: devices get no
    addresses and send nothing (no DAD, RS or RA); hosts have IPv6 off. Switches start to
    forward only once their links exist (and have no IFF_MULTICAST): a device that appears
    in a forwarding namespace joins the all-routers group and reports it."""
    for key, value in (("addr_gen_mode", 1), ("accept_dad", 0), ("accept_ra", 0),
                       ("router_solicitations", 0)):
        netns.sysctl(f"net.ipv6.conf.default.{key}", value)
    if host:
        netns.sysctl("net.ipv6.conf.default.disable_ipv6", 1)


def _snmp6(counter: str) -> int:
    """One counter of ``/proc/net/snmp6`` of the calling thread's namespace."""
    with open("/proc/thread-self/net/snmp6", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key == counter:
                return int(value)
    return 0



_SEG6 = ("SRv6 seg6local with the next-csid flavour (CONFIG_IPV6_SEG6_LWTUNNEL, Linux 6.1 or "
         "later)")
_probed: list[str | None] = []


def probe_seg6() -> str | None:
    """What the kernel lacks for a kernel fabric (None: nothing), found by building one
    switch's worth in a scratch namespace: an ifb SID device, a token bucket and a seg6local
    End route with the NEXT-C-SID flavour. Cached for the process."""
    if _probed:
        return _probed[0]
    run = netns.Run()
    name = run.name("probe")
    reason: str | None = None
    try:
        netns.create(name)
        with netns.enter(name), rtnl.Socket() as sock:
            _configure_ipv6(host=False)
            steps: list[tuple[str, Any]] = [
                ("the ifb device (CONFIG_IFB)",
                 lambda: [rtnl.device(plan.SID_DEVICE, "ifb")]),
                ("the tbf qdisc (CONFIG_NET_SCH_TBF)",
                 lambda: [rtnl.tbf(index(), 1e6, 9000, 100_000, 0, plan.SID_DEVICE),
                          rtnl.link_state(index(), True, plan.SID_DEVICE)]),
                (_SEG6, lambda: [rtnl.route_end_next_csid(
                    "fcbb:0:1000::/48", index(), plan.LOCATOR_BLOCK_BITS,
                    plan.NODE_FUNCTION_BITS)]),
            ]

            def index() -> int:
                return {s.name: s.index for s in sock.links()}[plan.SID_DEVICE]

            for what, requests in steps:
                try:
                    sock.run(requests())
                except rtnl.NetlinkError:
                    reason = f"the kernel runtime needs {what}"
                    break
    except OSError as exc:
        reason = f"the kernel runtime cannot create a network namespace ({exc.strerror})"
    finally:
        run.delete_all()
        run.release()
    _probed.append(reason)
    return reason
