"""The kernel fabric: real Linux switches forward exactly as the uSID plan says.

Packets are real encoded MRC packets sent from a host's namespace through a packet socket;
where they went is read from the veths' own counters, what arrived from the receiving host's
socket. Every test checks that it left no namespace behind. Skipped without root or SRv6.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import needs_kernel, no_leftovers  # noqa: F401 (fixture)

from mrc import wire
from mrc.kernel import netns
from mrc.kernel.fabric import KernelFabric, plan_links
from mrc.kernel.faults import KernelFaults, Unsupported
from mrc.kernel.host import ETH_P_IPV6, wires_of
from mrc.kernel.shaping import Shaping
from mrc.packet import DATA, Packet
from topology import names, paths, seg6, tables, usid
from topology.routed import kernel_routes
from topology.spec import FabricSpec, preset

pytestmark = [needs_kernel, pytest.mark.usefixtures("no_leftovers")]

#: 2 planes, 2 T0 and 2 T1 per plane, 2 hosts per T0: 12 namespaces, 16 veth pairs.
SMALL = FabricSpec(planes=2, hosts=4, hosts_per_t0=2, t1_per_plane=2)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fabric() -> Iterator[KernelFabric]:
    with KernelFabric.build(SMALL, Shaping(SMALL, 100)) as built:
        yield built


def open_sockets(fabric: KernelFabric) -> dict[int, socket.socket]:
    socks = {}
    for host in range(fabric.spec.hosts):
        with netns.enter(fabric.ns(names.host_name(host))):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IPV6))
        sock.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING
        sock.settimeout(0.1)
        socks[host] = sock
    return socks


def send(fabric: KernelFabric, sock: socket.socket, src: int, dst: int, address: int,
         count: int = 1, tag: int = 0) -> bytes:
    plane = usid.plane_of(address)
    data = wire.encode(Packet(DATA, src, dst, 7, tag, ev=0, msg_id=1, length=64, msg_len=64,
                              da=address, payload=bytes(64), plane=plane))
    port = wires_of(fabric, src)[plane]
    for _ in range(count):
        sock.sendto(data, (port.ifname, ETH_P_IPV6, 0, 0, port.peer_mac))
    return data


def received(sock: socket.socket, first_s: float = 3.0) -> list[bytes]:
    """What arrives: the first packet may wait for neighbour discovery on each hop of a path
    not used before (slow on a loaded machine), so wait up to ``first_s`` for it, then 0.2 s
    after each packet."""
    out = []
    deadline = time.monotonic() + first_s
    while time.monotonic() < deadline:
        try:
            out.append(sock.recv(65_535))
            deadline = time.monotonic() + 0.2
        except TimeoutError:
            if out:
                break
    return out


def dropped(fabric: KernelFabric, before: int, count: int) -> bool:
    """Whether the fabric's drop counters pass ``before + count`` within 3 s: the evidence
    that packets sent into a dead path are gone, without waiting out ``received``'s 3 s."""
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if fabric.drops()["total"] >= before + count:
            return True
        time.sleep(0.01)
    return False


def tx_rx(fabric: KernelFabric) -> dict[tuple[str, str], tuple[int, int]]:
    return {key: (s.tx_packets, s.rx_packets) for key, s in fabric.counters().items()}


def link_counts(fabric: KernelFabric, before: dict, after: dict) -> dict[str, int]:
    """Packets that crossed each link (lower end's tx + rx: each crossing counts once)."""
    out = {}
    for link in fabric.links.values():
        key = (link.lower.element, link.lower.ifname)
        out[link.name] = sum(after[key]) - sum(before[key])
    return out


# ---------------------------------------------------------------------- the plan in Linux
def test_plan_names_every_link_once_with_unique_macs() -> None:
    spec = preset("lab-8plane")
    links = plan_links(spec)
    assert len(links) == 256 and len({link.name for link in links}) == 256
    macs = [port.mac for link in links for port in link.ports]
    assert len(set(macs)) == len(macs)


def test_routes_are_what_ip_route_shows(fabric: KernelFabric) -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed")
    for switch in ("p0.t0.0", "p1.t0.1", "p1.t1.1"):
        shown = subprocess.run(["ip", "-n", fabric.ns(switch), "-6", "route", "show"],
                               capture_output=True, text=True, check=True).stdout
        planned = seg6.routes_text(SMALL, switch, ua_program=fabric.ua_program is not None)
        lines = shown.strip().splitlines()
        usid_lines = [line for line in lines
                      if not line.startswith("fd52:") and not line[:1].isspace()]
        assert usid_lines == planned.splitlines()
        # RC's routed plan beside it (topology.routed): one route per prefix, the T0s'
        # remote prefixes over every uplink (ECMP: one nexthop line per member)
        routed_plan = kernel_routes(SMALL, switch)
        assert [ipaddress.IPv6Network(line.split()[0]) for line in lines
                if line.startswith("fd52:")] == sorted(
            ipaddress.IPv6Network(prefix) for prefix, _ in routed_plan)  # (ip omits /128)
        nexthops = [line.split() for line in lines if line.strip().startswith("nexthop")]
        assert len(nexthops) == sum(len(devs) for _, devs in routed_plan if len(devs) > 1)


def test_kernel_routes_command_prints_them() -> None:
    from click.testing import CliRunner

    from topology.cli import fabric as fabric_command

    result = CliRunner().invoke(fabric_command, ["--preset", "lab-8plane",
                                                 "--kernel-routes", "h5.p3.t0"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines == seg6.routes_text(preset("lab-8plane"), "p3.t0.1").splitlines()
    assert "encap seg6local action End flavors next-csid lblen 32 nflen 16" in lines[0]
    bad = CliRunner().invoke(fabric_command, ["--preset", "lab-8plane", "--kernel-routes", "h5"])
    assert bad.exit_code == 2 and "not a switch" in bad.output


# ---------------------------------------------------------------------- forwarding
def test_a_usid_address_takes_exactly_the_switches_it_names(fabric: KernelFabric) -> None:
    # ready means every veth end's operstate is UP (the link watcher ran and attached its
    # qdisc); IFF_RUNNING alone also passed a new veth still UNKNOWN, whose first packets the
    # unattached qdisc dropped (the first path below saw nothing cross any link, in CI)
    stats = fabric.counters()
    assert all(stats[(p.element, p.ifname)].oper_up for link in fabric.links.values()
               for p in link.ports)
    socks = open_sockets(fabric)
    try:
        pairs = [(0, 2), (2, 0), (0, 1), (3, 2)]  # crossing the T1s, and under one T0
        for src, dst in pairs:
            for path in paths.paths_between(SMALL, src, dst):
                before = tx_rx(fabric)
                sent = send(fabric, socks[src], src, dst, path.address, count=5)
                got = received(socks[dst])
                after = tx_rx(fabric)
                crossed = link_counts(fabric, before, after)
                walk = tables.walk(SMALL, path.address, src)
                assert {k: v for k, v in crossed.items() if v} == dict.fromkeys(walk.links, 5), \
                    path.address_text
                assert len(got) == 5
                # the kernel shifted the carrier at every uN, and at the uA (the eBPF program)
                # unless the kernel refused it: then the port uSID is left for the NIC
                arrived = wire.outer_dst(got[0])
                if fabric.ua_program is not None:
                    assert arrived == walk.address
                else:
                    last = usid.port_usid(SMALL.port_of(dst))
                    assert arrived == usid.encode(path.plane, (last,))
                assert got[0][40:] == sent[40:]  # inner packet untouched
                assert wire.decode(got[0]).dst == dst
    finally:
        for sock in socks.values():
            sock.close()


def test_a_dead_link_loses_only_what_crosses_it(fabric: KernelFabric) -> None:
    socks = open_sockets(fabric)
    dead = "p1.t0.0--p1.t1.1"
    try:
        assert fabric.set_link(dead, False) and not fabric.link_is_up(dead)
        cut = 0  # paths that cross the dead link
        for src, dst in ((0, 2), (2, 0), (0, 1), (1, 3)):
            for path in paths.paths_between(SMALL, src, dst):
                before = tx_rx(fabric)
                through = dead in tables.walk(SMALL, path.address, src).links
                drops = fabric.drops()["total"]
                send(fabric, socks[src], src, dst, path.address, count=3)
                if through:  # dropped on the way, and nothing arrives a while after
                    cut += 1
                    assert dropped(fabric, drops, 3), path.address_text
                    got = received(socks[dst], first_s=0.2)
                else:
                    got = received(socks[dst])
                crossed = link_counts(fabric, before, tx_rx(fabric))
                assert len(got) == (0 if through else 3), path.address_text
                assert crossed[dead] == 0
        assert cut > 0
        assert fabric.set_link(dead, True)
        fabric.wait_running()  # Linux attaches the qdisc when its link watcher runs
        for path in paths.paths_between(SMALL, 0, 2):  # routes came back with the link
            send(fabric, socks[0], 0, 2, path.address)
            assert len(received(socks[2])) == 1, path.address_text
    finally:
        for sock in socks.values():
            sock.close()


def test_random_loss_drops_only_on_its_link(fabric: KernelFabric) -> None:
    from mrc.kernel.faults import loss_supported

    if not loss_supported():
        pytest.skip("this kernel refuses the eBPF random-drop classifier")
    socks = open_sockets(fabric)
    lossy = "p0.t0.0--p0.t1.1"
    through = paths.path(SMALL, 0, 2, plane=0, t1=1).address
    around = paths.path(SMALL, 0, 2, plane=0, t1=0).address
    try:
        faults = KernelFaults(fabric)
        faults.apply("set_loss", lossy, p=1.0)
        send(fabric, socks[0], 0, 2, through, count=20)
        send(fabric, socks[0], 0, 2, around, count=20)
        got = received(socks[2])
        assert len(got) == 20  # every packet around the lossy link, none through it
        faults.apply("set_loss", lossy, p=0.5)
        send(fabric, socks[0], 0, 2, through, count=200)
        assert 40 < len(received(socks[2])) < 160  # binomial(200, 0.5): far outside 6 sigma
        faults.apply("set_loss", lossy, p=0.0)
        send(fabric, socks[0], 0, 2, through, count=20)
        assert len(received(socks[2])) == 20
        assert fabric.drops()["loss"] >= 20 + 40
    finally:
        for sock in socks.values():
            sock.close()


def test_switch_down_and_up_restores_the_plan(fabric: KernelFabric) -> None:
    told: list[tuple[int, int, bool]] = []
    faults = KernelFaults(fabric, on_nic_link=lambda h, p, up, bps: told.append((h, p, up)))
    faults.apply("switch_down", "p1.t0.0")
    assert sorted(told) == [(0, 1, False), (1, 1, False)]  # its hosts lose their plane-1 port
    faults.apply("link_down", "p1.t0.0--p1.t1.0")
    faults.apply("switch_up", "p1.t0.0")
    assert not fabric.link_is_up("p1.t0.0--p1.t1.0")  # cut on its own: stays cut
    assert fabric.link_is_up("p1.t0.0--p1.t1.1") and sorted(told)[-1] == (1, 1, True)
    faults.apply("link_up", "p1.t0.0--p1.t1.0")
    if shutil.which("ip"):
        for switch in ("p1.t0.0", "p1.t1.0"):
            shown = subprocess.run(["ip", "-n", fabric.ns(switch), "-6", "route"],
                                   capture_output=True, text=True, check=True).stdout
            routed_plan = kernel_routes(SMALL, switch)  # RC's, back with every member
            assert len(shown.strip().splitlines()) == len(seg6.switch_routes(SMALL, switch)) + (
                len(routed_plan) + sum(len(devs) for _, devs in routed_plan if len(devs) > 1))
    with pytest.raises(Unsupported, match="not a link"):
        faults.apply("set_loss", "p1.t0.0", p=0.1)
    faults.apply("degrade", "h0.p1.uplink", fraction=0.5)
    slowed = faults.apply("degrade", "p1.t1.1", fraction=0.25)  # a switch: every link of it
    assert sorted(slowed["links"]) == ["p1.t0.0--p1.t1.1", "p1.t0.1--p1.t1.1"]
    assert all(faults.fraction[link] == 0.25 for link in slowed["links"])
    faults.apply("nic_port_down", "h3.p0")
    assert told[-1] == (3, 0, False) and not fabric.link_is_up("h3.p0--p0.t0.1")


# ---------------------------------------------------------------------- teardown
# (SIGINT handled as in a terminal even when the tests run as a background job, whose
# children inherit SIGINT ignored: the SIGINT case would otherwise wait out its timeout)
_BUILD_AND_WAIT = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from mrc.kernel.fabric import KernelFabric
    from mrc.kernel.shaping import Shaping
    from mrc.labs.run.kernel import _signals_interrupt
    from topology.spec import FabricSpec
    spec = FabricSpec(planes=2, hosts=4, hosts_per_t0=2, t1_per_plane=2)
    with _signals_interrupt():
        with KernelFabric.build(spec, Shaping(spec, 100)) as fabric:
            print(fabric.run.prefix, flush=True)
            if sys.argv[1] == "crash":
                raise RuntimeError("boom")
            time.sleep(60)
""")


def _spawn(mode: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _BUILD_AND_WAIT, mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    prefix = proc.stdout.readline().strip()
    assert prefix.startswith(netns.PREFIX), proc.stderr.read() if proc.stderr else ""
    return proc, prefix


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL, "crash"])
def test_no_namespace_survives_a_run(how: signal.Signals | str) -> None:
    proc, prefix = _spawn("crash" if how == "crash" else "wait")
    try:
        if how != "crash":
            assert len(netns.listed(prefix)) == 12
            proc.send_signal(how)  # type: ignore[arg-type]
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if how == signal.SIGKILL:  # nothing could run: the next build finds the stale fabric
        assert len(netns.listed(prefix)) == 12
        assert set(netns.listed(prefix)) <= set(netns.cleanup_stale())
    assert netns.listed(prefix) == []


def test_a_live_run_is_never_taken_for_stale(fabric: KernelFabric) -> None:
    assert netns.cleanup_stale() == []
    assert len(fabric.run.namespaces()) == 12


def test_lab_8plane_builds_and_tears_down_in_under_30_s() -> None:
    """80 namespaces, 256 veth pairs (about 0.3 s each way here, so not a slow test)."""
    spec = preset("lab-8plane")
    t0 = time.perf_counter()
    fabric = KernelFabric.build(spec, Shaping(spec, 20_000))
    built = time.perf_counter() - t0
    try:
        assert len(fabric.run.namespaces()) == 80 and len(fabric.links) == 256
        assert len(fabric.counters()) == 2 * 256 + 64 * 2 + 16  # veths; usid + lo; lo
    finally:
        t1 = time.perf_counter()
        fabric.close()
        down = time.perf_counter() - t1
    print(f"lab-8plane: built in {built:.2f} s, torn down in {down:.3f} s")
    assert built + down < 30
