"""Fault primitives on a simulated network, callable at any simulated time.

Each primitive takes the network and an element (its canonical name, a selector such as
``h3.p2.uplink``, or the object itself), changes the fabric at ``sim.now``, appends a
:class:`FaultRecord` to ``net.fault_log`` and returns it, so the labs layer can log exactly
what happened and when. :func:`at` schedules any primitive for later; :func:`apply` calls one
by its action name, which is how a fault schedule written as data gets executed
(:func:`primitive` maps a schedule's window actions, ``loss_start``/``loss_end``..., to them).

Semantics, chosen to match what hardware does:

* ``link_down``: both directions stop; packets queued for the link and packets on the wire are
  lost (on-wire packets are counted as ``link_down`` drops when they would have arrived). The
  far switch's latency is part of the hop, so a packet still inside it is lost too.
* ``switch_down``: every link of the switch goes down (the neighbours see loss of signal, so a
  host under a dead T0 stops pulling on that plane). ``switch_up`` revives only links that
  nothing else holds down: a link cut on its own stays cut.
* ``nic_port_down``: the host link of that NIC port goes down.
* ``set_loss``: each packet put on the wire is lost with probability p (drawn from
  ``sim.rng``), on both directions or one.
* ``degrade``: later packets serialize at ``fraction`` of the nominal rate (on a link, or on
  every link of a switch).
* ``restore``: undo every fault on the element (up, no loss, full rate).
* ``blackhole``: a switch or T0-T1 link drops a fraction of what it forwards with its links
  up and its routes advertised (routing never repairs it; MRC's evidence maps it out).
* Every primitive that takes a link or switch down or up tells RC's routing control plane
  (``net.routing``, :mod:`mrc.sim.routing`), which repairs the ECMP groups on its own clock.
* ``nic_stall`` / ``nic_resume``: a stuck host: its NIC stops draining its receive queue (and
  starts again). On a PFC fabric the NIC holds what arrives on the lossless class and keeps
  its T0 paused (``mrc.sim.pfc``), and drops everything else; without PFC it drops all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mrc.sim.engine import Simulator
from mrc.sim.host import Host, NicPort
from mrc.sim.link import Link
from mrc.sim.network import Network
from mrc.sim.ports import OutPort
from mrc.sim.switch import Switch

#: Hold-down causes on a link (switch failures use the switch's name).
CAUSE_LINK = "link"
CAUSE_NIC = "nic"

Target = str | Link[OutPort] | Switch | OutPort | Host


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One fault as applied: when, what, on which element, with which parameters, and what
    it did (``effect``: links affected, packets lost from queues, ...)."""

    time_ps: int
    action: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)
    effect: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        """Flat dict for a tidy table."""
        return {"time_ps": self.time_ps, "action": self.action, "target": self.target,
                **{f"param_{k}": v for k, v in self.params.items()},
                **{f"effect_{k}": v for k, v in self.effect.items()}}


def _record(net: Network, action: str, target: str, params: dict[str, Any] | None = None,
            **effect: Any) -> FaultRecord:
    record = FaultRecord(net.sim.now, action, target, params or {}, effect)
    net.fault_log.append(record)
    return record


def _routing_changed(net: Network) -> None:
    """Tell RC's routing control plane (``mrc.sim.routing``) that links may have changed:
    it schedules the withdrawals and advertisements that follow."""
    if net.routing is not None:
        net.routing.changed()


# ------------------------------------------------------------------ resolution
def _resolve(net: Network, target: Target) -> Host | Switch | Link[OutPort] | OutPort:
    if isinstance(target, str):
        return net.element(target)
    return target


def _as_link(net: Network, target: Target) -> Link[OutPort]:
    found = _resolve(net, target)
    if isinstance(found, Link):
        return found
    if isinstance(found, OutPort) and found.link is not None:
        return found.link
    raise TypeError(f"{target!r} is not a link")


def _as_switch(net: Network, target: Target) -> Switch:
    found = _resolve(net, target)
    if not isinstance(found, Switch):
        raise TypeError(f"{target!r} is not a switch")
    return found


def _as_nic(net: Network, target: Target, plane: int | None) -> NicPort:
    found = _resolve(net, target)
    if isinstance(found, Host):
        if plane is None:
            raise TypeError(f"{found.name}: say which plane's NIC port (plane=...)")
        return found.ports[plane]
    if isinstance(found, NicPort):
        return found
    if isinstance(found, Link) and isinstance(found.up_port, NicPort):
        return found.up_port
    raise TypeError(f"{target!r} is not a NIC port")


def _ports(net: Network, target: Target, direction: str | None) -> tuple[str, list[OutPort]]:
    """The ports a per-direction fault applies to, and the name to log.

    ``direction``: None or ``"both"``; ``"up"`` (lower tier -> upper tier, e.g. host -> T0);
    ``"down"``. An output port (``a->b``, or a port object) means that direction only; a NIC
    port name (``h17.p3``) means its host link."""
    found = _resolve(net, target)
    if isinstance(found, OutPort) and not (isinstance(target, str) and target in net.nic_ports):
        if direction not in (None, "both"):
            raise ValueError("a port is already one direction; drop the direction argument")
        return found.name, [found]
    link = _as_link(net, found)  # type: ignore[arg-type]
    if direction in (None, "both"):
        return link.name, [link.up_port, link.down_port]
    if direction == "up":
        return link.name, [link.up_port]
    if direction == "down":
        return link.name, [link.down_port]
    raise ValueError(f"direction must be 'up', 'down' or 'both', got {direction!r}")


# ------------------------------------------------------------------ primitives
def link_down(net: Network, link: Target) -> FaultRecord:
    """Take a link down (both directions); its queued and on-wire packets are lost."""
    obj = _as_link(net, link)
    lost = obj.hold_down(CAUSE_LINK)
    _routing_changed(net)
    return _record(net, "link_down", obj.name, lost_queued=lost, up=obj.is_up)


def link_up(net: Network, link: Target) -> FaultRecord:
    """Clear a ``link_down``; the link carries traffic again unless a dead switch or NIC
    port still holds it down (``effect['held_by']`` says which)."""
    obj = _as_link(net, link)
    obj.release(CAUSE_LINK)
    _routing_changed(net)
    return _record(net, "link_up", obj.name, up=obj.is_up, held_by=sorted(obj.causes))


def switch_down(net: Network, switch: Target) -> FaultRecord:
    """Power a switch off: all its links go down and everything queued in it is lost."""
    sw = _as_switch(net, switch)
    sw.up = False
    lost = 0
    affected = []
    for port in sw.ports:
        link = port.link
        assert link is not None
        was_up = link.is_up
        lost += link.hold_down(sw.name)
        if was_up:
            affected.append(link.name)
    _routing_changed(net)
    return _record(net, "switch_down", sw.name, lost_queued=lost, links_down=len(affected))


def switch_up(net: Network, switch: Target) -> FaultRecord:
    """Power a switch back on (tables are static: it forwards at once)."""
    sw = _as_switch(net, switch)
    sw.up = True
    revived = 0
    for port in sw.ports:
        link = port.link
        assert link is not None
        revived += link.release(sw.name)
    _routing_changed(net)
    return _record(net, "switch_up", sw.name, links_up=revived)


def nic_port_down(net: Network, port: Target, plane: int | None = None) -> FaultRecord:
    """A host loses its NIC port (``h17.p3``, or ``h17`` with ``plane=3``)."""
    nic = _as_nic(net, port, plane)
    link = nic.link
    assert link is not None
    lost = link.hold_down(CAUSE_NIC)
    return _record(net, "nic_port_down", f"{nic.src.name}.p{nic.plane}", lost_queued=lost)


def nic_port_up(net: Network, port: Target, plane: int | None = None) -> FaultRecord:
    nic = _as_nic(net, port, plane)
    link = nic.link
    assert link is not None
    link.release(CAUSE_NIC)
    return _record(net, "nic_port_up", f"{nic.src.name}.p{nic.plane}", up=link.is_up,
                   held_by=sorted(link.causes))


def _as_host(net: Network, target: Target) -> Host:
    found = _resolve(net, target)
    if not isinstance(found, Host):
        raise TypeError(f"{target!r} is not a host")
    return found


def nic_stall(net: Network, host: Target) -> FaultRecord:
    """The host's NIC stops draining its receive queue (a stuck host)."""
    h = _as_host(net, host)
    return _set_stall(net, h, True, "nic_stall")


def nic_resume(net: Network, host: Target) -> FaultRecord:
    """The stuck host drains again: what its NIC held is delivered now."""
    h = _as_host(net, host)
    return _set_stall(net, h, False, "nic_resume")


def _set_stall(net: Network, h: Host, stalled: bool, action: str) -> FaultRecord:
    delivered = 0
    if not net.spec.pfc:
        h.set_rx_stalled(stalled)  # no PFC: the host loses everything itself
        return _record(net, action, h.name)
    for nic in h.ports:
        link = nic.link
        assert link is not None
        delivered += link.down_port.set_rx_stall(stalled)  # type: ignore[attr-defined]
    return _record(net, action, h.name, held_delivered=delivered)


def set_loss(net: Network, link: Target, p: float, direction: str | None = None) -> FaultRecord:
    """Lose each packet put on the wire with probability ``p`` (0 clears it)."""
    name, ports = _ports(net, link, direction)
    for port in ports:
        port.set_loss(p)
    return _record(net, "set_loss", name, {"p": p, "direction": direction or "both"},
                   ports=[port.name for port in ports])


def degrade(net: Network, link: Target, fraction: float,
            direction: str | None = None) -> FaultRecord:
    """Run the link at ``fraction`` of its nominal rate (1.0 restores it). A switch means
    every link of it (both directions, or as ``direction`` says): a slow switch ASIC, or
    htsim's "every link of this T1 at 25%" scenario."""
    found = _resolve(net, link)
    if isinstance(found, Switch):
        ports = []
        for port in found.ports:
            ports.extend(_ports(net, port.link, direction)[1])  # type: ignore[arg-type]
        name = found.name
    else:
        name, ports = _ports(net, link, direction)
    for port in ports:
        port.set_rate_fraction(fraction)
    return _record(net, "degrade", name, {"fraction": fraction, "direction": direction or "both"},
                   rate_bps=[port.bps for port in ports])


def restore(net: Network, target: Target) -> FaultRecord:
    """Undo every fault on one element: a switch comes up; a link or NIC port comes up (unless
    a dead switch still holds it) with no loss and full rate."""
    found = _resolve(net, target)
    if isinstance(found, Switch):
        found.set_blackhole(0.0)
        inner = switch_up(net, found)
        net.fault_log.pop()
        return _record(net, "restore", found.name, **inner.effect)
    if isinstance(found, Host):
        for port in found.ports:
            _restore_link(port.link)  # type: ignore[arg-type]
        return _record(net, "restore", found.name,
                       ports_up=sum(port.up for port in found.ports))
    link = _as_link(net, found)  # type: ignore[arg-type]
    _restore_link(link)
    _routing_changed(net)
    return _record(net, "restore", link.name, up=link.is_up, held_by=sorted(link.causes))


def _restore_link(link: Link[OutPort]) -> None:
    link.release(CAUSE_LINK)
    link.release(CAUSE_NIC)
    for port in link.ports:
        port.set_loss(0.0)
        port.set_rate_fraction(1.0)
        if isinstance(port.src, Switch):
            port.src.set_blackhole(0.0, port)


def restore_all(net: Network) -> FaultRecord:
    """Bring the whole fabric back to healthy."""
    for sw in net.switches.values():
        if not sw.up:
            switch_up(net, sw)
            net.fault_log.pop()
    for link in net.links.values():
        _restore_link(link)
    for sw in net.switches.values():
        sw.set_blackhole(0.0)
    _routing_changed(net)
    return _record(net, "restore_all", "*")


def blackhole(net: Network, target: Target, fraction: float = 1.0) -> FaultRecord:
    """A black hole: a switch (everything it forwards) or a T0-T1 link (both directions)
    drops ``fraction`` of the packets (0 ends it) while its links stay up and routing keeps
    advertising it: the control-plane/data-plane split no routing repairs. Per packet, from
    the simulator's seeded generator (fraction 1 draws nothing)."""
    found = _resolve(net, target)
    if isinstance(found, Switch):
        found.set_blackhole(fraction)
        return _record(net, "blackhole", found.name, {"fraction": fraction})
    link = _as_link(net, found)  # type: ignore[arg-type]
    ports = []
    for port in link.ports:
        owner = port.src
        if not isinstance(owner, Switch) or not isinstance(port.dst, Switch):
            raise TypeError(f"{link.name}: a black hole acts on a switch or a T0-T1 link, not "
                            "a host link")
        owner.set_blackhole(fraction, port)
        ports.append(port.name)
    return _record(net, "blackhole", link.name, {"fraction": fraction}, ports=ports)


# ------------------------------------------------------------------ faults as data
FAULTS: dict[str, Callable[..., FaultRecord]] = {
    "link_down": link_down,
    "link_up": link_up,
    "switch_down": switch_down,
    "switch_up": switch_up,
    "nic_port_down": nic_port_down,
    "nic_port_up": nic_port_up,
    "set_loss": set_loss,
    "degrade": degrade,
    "restore": restore,
    "nic_stall": nic_stall,
    "nic_resume": nic_resume,
    "blackhole": blackhole,
}


#: Every fault-schedule action -> (the state family it changes, whether it starts it): a
#: window's start and end flip one family of one target. The labs' schedule checks and the
#: flow model's conditions both read this one table.
ACTION_STATES: dict[str, tuple[str, bool]] = {
    "link_down": ("down", True), "link_up": ("down", False),
    "switch_down": ("down", True), "switch_up": ("down", False),
    "port_down": ("down", True), "port_up": ("down", False),
    "loss_start": ("loss", True), "loss_end": ("loss", False),
    "degrade_start": ("degrade", True), "degrade_end": ("degrade", False),
    "drain_start": ("drain", True), "drain_end": ("drain", False),
    "ev_deny_start": ("ev_deny", True), "ev_deny_end": ("ev_deny", False),
    "stall_start": ("stall", True), "stall_end": ("stall", False),
    "blackhole_start": ("blackhole", True), "blackhole_end": ("blackhole", False),
}

#: A fault schedule's actions (a lab's ``[[fault]]`` entries expand to them, and the live
#: fabric accepts them): action -> (primitive, its keyword arguments from the action's
#: params). A window's start and end are two actions on one primitive.
SCHEDULE_ACTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "link_down": ("link_down", lambda p: {}),
    "link_up": ("link_up", lambda p: {}),
    "switch_down": ("switch_down", lambda p: {}),
    "switch_up": ("switch_up", lambda p: {}),
    "port_down": ("nic_port_down", lambda p: {}),
    "port_up": ("nic_port_up", lambda p: {}),
    "loss_start": ("set_loss", lambda p: {"p": p["probability"]}),
    "loss_end": ("set_loss", lambda p: {"p": 0.0}),
    "degrade_start": ("degrade", lambda p: {"fraction": p["rate_fraction"]}),
    "degrade_end": ("degrade", lambda p: {"fraction": 1.0}),
    "stall_start": ("nic_stall", lambda p: {}),
    "stall_end": ("nic_resume", lambda p: {}),
    "blackhole_start": ("blackhole", lambda p: {"fraction": p["fraction"]}),
    "blackhole_end": ("blackhole", lambda p: {"fraction": 0.0}),
}


def primitive(action: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The primitive a fault-schedule action runs, and its keyword arguments."""
    try:
        name, kwargs = SCHEDULE_ACTIONS[action]
    except KeyError:
        raise ValueError(f"the fabric does not implement fault {action!r}") from None
    return name, kwargs(params)


def apply(net: Network, action: str, target: Target, **params: Any) -> FaultRecord:
    """Run the primitive called ``action`` (a key of :data:`FAULTS`) on ``target``."""
    try:
        fn = FAULTS[action]
    except KeyError:
        raise ValueError(f"unknown fault {action!r}; known: {', '.join(FAULTS)}") from None
    return fn(net, target, **params)


def at(sim: Simulator, time_ps: int, fault: Callable[..., Any], *args: Any,
       **kwargs: Any) -> None:
    """Run ``fault(*args, **kwargs)`` at simulated time ``time_ps``, e.g.
    ``at(sim, us(50), link_down, net, "p0.t0.1--p0.t1.2")``."""
    sim.at(time_ps, _fire, (fault, args, kwargs))


def _fire(job: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> None:
    fault, args, kwargs = job
    fault(*args, **kwargs)


def flap(sim: Simulator, net: Network, link: Target, start_ps: int, down_ps: int, up_ps: int,
         cycles: int) -> None:
    """Schedule ``cycles`` down/up cycles: down at start, up ``down_ps`` later, down again
    ``up_ps`` after that, ... (the link ends up)."""
    t = start_ps
    for _ in range(cycles):
        at(sim, t, link_down, net, link)
        at(sim, t + down_ps, link_up, net, link)
        t += down_ps + up_ps
