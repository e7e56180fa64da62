"""Faults on the kernel fabric: the simulator's primitives, done to real interfaces, on time.

The lab's fault schedule is the same data as in simulation (``mrc.labs.schema.schedule.schedule``
expands it into timed primitives); :class:`KernelFaults` implements the primitives of
:mod:`mrc.sim.faults` by name, with the same semantics, on a :class:`~mrc.kernel.fabric.
KernelFabric`:

* ``link_down``/``link_up``: ``ip link set down/up`` on both ends of the veth pair. The
  kernel drops what was queued in either end's token bucket, as hardware loses what was
  queued for a dead link.
* ``switch_down``/``switch_up``: every port of the switch goes down; its neighbours see their
  carrier drop (loss of signal) and lose what they send into it. ``switch_up`` revives only
  ports that nothing else holds down (a link cut on its own stays cut), exactly the
  simulator's hold-down causes, and reinstalls the switch's routes at once (static tables).
* ``nic_port_down``/``nic_port_up``: the host's end of its link (the T0 sees loss of signal).
* ``degrade``: the link's token buckets run at ``fraction`` of the nominal rate (a switch:
  every link of it).
* ``set_loss``: each packet sent into the link is dropped with probability p, by an eBPF
  classifier on both ends' egress (:mod:`mrc.kernel.bpf`; ``sch_netem`` is not relied on).
  The kernel's random generator is not seeded: which packets are lost differs between runs.

A NIC sees its own port's link change at once (loss of signal): ``on_nic_link(host, plane,
up, bps)`` is called for every host link that changes, as the live fabric does, right after the
kernel has applied the fault (:meth:`KernelFaults.apply` holds the calls until then, so the
fault's timing measures the kernel, not the transports' reaction).

Timing: a fault is due at a modelled instant, i.e. at a wall-clock instant of the run's clock.
:class:`FaultTimer` records when each one was due, when it started and when the kernel had
applied it (the last netlink acknowledgement), so every result reports each fault's timing
error in wall time and in modelled time (wall error / scale).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mrc.kernel import bpf
from mrc.kernel.fabric import KernelFabric
from mrc.sim.faults import CAUSE_LINK, CAUSE_NIC
from topology import names

NicLinkSink = Callable[[int, int, bool, "int | None"], None]


class Unsupported(ValueError):
    """A fault the kernel fabric cannot apply (the message says why)."""


class KernelFaults:
    """Fault primitives on a kernel fabric, by element name (a name or a selector)."""

    PRIMITIVES = ("link_down", "link_up", "switch_down", "switch_up", "nic_port_down",
                  "nic_port_up", "degrade", "set_loss")

    def __init__(self, fabric: KernelFabric, on_nic_link: NicLinkSink | None = None) -> None:
        self.fabric = fabric
        self.spec = fabric.spec
        self.on_nic_link = on_nic_link
        #: hold-down causes of each port (element, interface): it is down while any remains
        self.causes: dict[tuple[str, str], set[str]] = {
            (p.element, p.ifname): set() for link in fabric.links.values() for p in link.ports}
        self.fraction: dict[str, float] = {}
        self._told: list[tuple[int, int, bool, int | None]] = []

    @classmethod
    def check(cls, primitive: str) -> None:
        """Refuse, before anything runs, a primitive this runtime cannot apply."""
        if primitive == "set_loss" and not loss_supported():
            raise Unsupported("random loss needs an eBPF classifier, which this kernel "
                              "refuses; run this lab in simulation or live")
        if primitive not in cls.PRIMITIVES:
            raise Unsupported(f"the kernel fabric does not implement fault {primitive!r}")

    def apply(self, primitive: str, target: str, **params: Any) -> dict[str, Any]:
        """Run primitive ``primitive`` on ``target`` now and tell the NICs whose links changed;
        returns what it did. ``apply_kernel`` + ``tell_nics`` are the same in two steps."""
        effect = self.apply_kernel(primitive, target, **params)
        self.tell_nics()
        return effect

    def apply_kernel(self, primitive: str, target: str, **params: Any) -> dict[str, Any]:
        """The kernel's part of a primitive (NIC notifications are held for ``tell_nics``)."""
        self.check(primitive)
        fn: Callable[..., dict[str, Any]] = getattr(self, primitive)
        return fn(target, **params)

    def tell_nics(self) -> None:
        """Deliver the held link changes to the NICs, in order."""
        told, self._told = self._told, []
        if self.on_nic_link is not None:
            for host, plane, up, bps in told:
                self.on_nic_link(host, plane, up, bps)

    # ------------------------------------------------------------------ resolution
    def _link(self, target: str) -> str:
        element = names.resolve(self.spec, target)
        if element.kind == names.NIC_PORT:
            return names.uplink_name(self.spec, element.host, element.plane)  # type: ignore[arg-type]
        if element.kind != names.LINK:
            raise Unsupported(f"{target!r} is a {element.kind}, not a link")
        return element.name

    def _switch(self, target: str) -> str:
        element = names.resolve(self.spec, target)
        if element.tier is None:
            raise Unsupported(f"{target!r} is a {element.kind}, not a switch")
        return element.name

    # ------------------------------------------------------------------ hold-downs
    def _hold(self, link: str, cause: str, only: str | None = None) -> bool:
        """Add a hold-down cause to the link's ports (only the one in element ``only``, when
        given); returns whether the link stopped carrying traffic now."""
        was_up = self.fabric.link_is_up(link)
        for port in self.fabric.links[link].ports:
            if only is None or port.element == only:
                causes = self.causes[(port.element, port.ifname)]
                causes.add(cause)
                self.fabric.set_port(port, False)
        went = was_up and not self.fabric.link_is_up(link)
        if went:
            self._tell_nic(link, False)
        return went

    def _release(self, link: str, cause: str) -> bool:
        """Remove a hold-down cause from the link's ports; a port with no cause left comes up.
        Returns whether the link carries traffic again now."""
        was_up = self.fabric.link_is_up(link)
        for port in self.fabric.links[link].ports:
            causes = self.causes[(port.element, port.ifname)]
            if cause in causes:
                causes.discard(cause)
                if not causes:
                    self.fabric.set_port(port, True)
        came = not was_up and self.fabric.link_is_up(link)
        if came:
            self._tell_nic(link, True)
        return came

    def held_by(self, link: str) -> str:
        """The causes still holding link ``link`` down, comma-separated."""
        return ",".join(sorted(set().union(*(self.causes[(p.element, p.ifname)]
                                             for p in self.fabric.links[link].ports))))

    def _tell_nic(self, link: str, up: bool) -> None:
        kl = self.fabric.links[link]
        if kl.host is not None:
            self._told.append((kl.host, kl.plane, up, self._bps(link)))

    def _bps(self, link: str) -> int:
        return int(round(self.spec.link_bps * self.fraction.get(link, 1.0)))

    # ------------------------------------------------------------------ primitives
    def link_down(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        went = self._hold(link, CAUSE_LINK)
        return {"link": link, "up": False, "changed": went}

    def link_up(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        came = self._release(link, CAUSE_LINK)
        return {"link": link, "up": self.fabric.link_is_up(link), "changed": came,
                "held_by": self.held_by(link)}

    def switch_down(self, target: str) -> dict[str, Any]:
        switch = self._switch(target)
        went = sum(self._hold(link.name, switch, only=switch)
                   for link in self.fabric.links_of[switch])
        return {"switch": switch, "links_down": went}

    def switch_up(self, target: str) -> dict[str, Any]:
        switch = self._switch(target)
        came = sum(self._release(link.name, switch) for link in self.fabric.links_of[switch])
        return {"switch": switch, "links_up": came}

    def nic_port_down(self, target: str, plane: int | None = None) -> dict[str, Any]:
        link = self._nic_link(target, plane)
        host = self.fabric.links[link].lower.element
        return {"link": link, "changed": self._hold(link, CAUSE_NIC, only=host)}

    def nic_port_up(self, target: str, plane: int | None = None) -> dict[str, Any]:
        link = self._nic_link(target, plane)
        return {"link": link, "changed": self._release(link, CAUSE_NIC),
                "held_by": self.held_by(link)}

    def _nic_link(self, target: str, plane: int | None) -> str:
        element = names.resolve(self.spec, target)
        if element.kind == names.HOST:
            if plane is None:
                raise Unsupported(f"{target}: say which plane's NIC port (plane=...)")
            return names.uplink_name(self.spec, element.index, plane)  # type: ignore[arg-type]
        return self._link(target)

    def set_loss(self, target: str, p: float, direction: str | None = None) -> dict[str, Any]:
        if direction not in (None, "both"):
            raise Unsupported("the kernel fabric makes both directions of a link lossy")
        link = self._link(target)
        self.fabric.set_loss(link, p)
        return {"link": link, "p": p}

    def degrade(self, target: str, fraction: float, direction: str | None = None
                ) -> dict[str, Any]:
        if direction not in (None, "both"):
            raise Unsupported("the kernel fabric degrades both directions of a link")
        element = names.resolve(self.spec, target)
        if element.tier is not None:  # a switch: every link of it
            links = [name for name, link in self.fabric.links.items()
                     if any(port.element == element.name for port in link.ports)]
        else:
            links = [self._link(target)]
        for link in links:
            self.fraction[link] = fraction
            self.fabric.set_rate(link, fraction)
            if self.fabric.link_is_up(link):
                self._tell_nic(link, True)
        if element.tier is not None:
            return {"switch": element.name, "links": links, "fraction": fraction}
        return {"link": links[0], "fraction": fraction}


@dataclass(frozen=True, slots=True)
class FaultTiming:
    """When one fault was due and when the kernel had applied it."""

    time_us: float  # modelled time it was scheduled for
    action: str
    target: str
    due_wall: float  # wall-clock instant (the run clock's) it was due
    start_wall: float
    done_wall: float
    scale: float

    @property
    def error_wall_ms(self) -> float:
        """How late the fault was complete, in wall milliseconds (negative: early)."""
        return (self.done_wall - self.due_wall) * 1e3

    @property
    def error_model_ns(self) -> float:
        """The same lateness in modelled nanoseconds (wall error / scale)."""
        return (self.done_wall - self.due_wall) / self.scale * 1e9

    def as_row(self) -> dict[str, Any]:
        return {"time_us": self.time_us, "action": self.action, "target": self.target,
                "late_wall_ms": round(self.error_wall_ms, 3),
                "apply_wall_ms": round((self.done_wall - self.start_wall) * 1e3, 3),
                "late_model_ns": round(self.error_model_ns, 3)}


class FaultTimer:
    """Runs fault callbacks and records their timing against the run's wall clock."""

    def __init__(self, wall_at: Callable[[int], float], scale: float,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.wall_at = wall_at
        self.scale = scale
        self.now = now
        self.records: list[FaultTiming] = []

    def run(self, time_ps: int, action: str, target: str, fn: Callable[[], Any]) -> Any:
        start = self.now()
        try:
            return fn()
        finally:
            done = self.now()
            self.records.append(FaultTiming(time_ps / 1e6, action, target, self.wall_at(time_ps),
                                            start, done, self.scale))

    def summary(self) -> dict[str, Any]:
        rows = [r.as_row() for r in self.records]
        late = [abs(r["late_model_ns"]) for r in rows]
        return {"faults": rows,
                "max_late_wall_ms": max((abs(r["late_wall_ms"]) for r in rows), default=None),
                "max_late_model_ns": max(late, default=None)}


_loss_ok: list[bool] = []


def loss_supported() -> bool:
    """Whether this kernel loads the random-drop classifier (checked once per process)."""
    if not _loss_ok:
        try:
            os.close(bpf.random_drop(0.0))
            _loss_ok.append(True)
        except bpf.BpfError:
            _loss_ok.append(False)
    return _loss_ok[0]
