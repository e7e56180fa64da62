"""Links: both directions between two elements, and what holds them down; and
:class:`Egress`, an output port as its link and the switch that sends on it see it (the ports
of :mod:`mrc.sim.ports` are that, and name the link they belong to)."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from mrc.packet import Packet
from mrc.sim.element import Node


class Egress(Protocol):
    """One direction of a link (:class:`mrc.sim.ports.OutPort`), as a :class:`Link` holds it
    and a switch's tables send on it."""

    #: the link this port is one direction of (set by :class:`Link`)
    link: Link[Any] | None

    @property
    def name(self) -> str: ...
    @property
    def src(self) -> Node: ...
    @property
    def dst(self) -> Node: ...
    @property
    def up(self) -> bool: ...
    @property
    def bps(self) -> int: ...
    # counters (a switch's statistics sum them)
    @property
    def tx_packets(self) -> int: ...
    @property
    def trims(self) -> int: ...
    @property
    def ecn_marks(self) -> int: ...
    @property
    def peak_qbytes(self) -> int: ...
    @property
    def drops(self) -> dict[str, int]: ...

    def send(self, pkt: Packet) -> None: ...
    def set_down(self) -> int: ...
    def set_up(self) -> None: ...
    def set_loss(self, p: float) -> None: ...
    def set_rate_fraction(self, fraction: float) -> None: ...


#: the kind of port a link holds (the fabric's: :class:`mrc.sim.ports.OutPort`)
PortT = TypeVar("PortT", bound=Egress)


class Link(Generic[PortT]):
    """Both directions between two elements, named ``lower--upper`` (lower tier first).

    A link is up while nothing holds it down; ``causes`` says who does (``"link"`` for an
    operator/flap fault, ``"nic"`` for a NIC port fault, a switch name for a dead switch), so
    that bringing a switch back does not revive a link that was cut on its own.
    """

    __slots__ = ("name", "plane", "lower", "upper", "up_port", "down_port", "causes")

    def __init__(self, name: str, plane: int, up_port: PortT, down_port: PortT) -> None:
        self.name = name
        self.plane = plane
        self.up_port = up_port  # lower -> upper
        self.down_port = down_port  # upper -> lower
        self.lower = up_port.src
        self.upper = up_port.dst
        self.causes: set[str] = set()
        up_port.link = self
        down_port.link = self

    def __repr__(self) -> str:
        state = "up" if self.is_up else f"DOWN({','.join(sorted(self.causes))})"
        return f"<Link {self.name} {state}>"

    @property
    def ports(self) -> tuple[PortT, PortT]:
        return (self.up_port, self.down_port)

    @property
    def is_up(self) -> bool:
        return not self.causes

    def hold_down(self, cause: str) -> int:
        """Add a reason for the link to be down; returns packets lost from queues."""
        was_up = not self.causes
        self.causes.add(cause)
        if not was_up:
            return 0
        return self.up_port.set_down() + self.down_port.set_down()

    def release(self, cause: str) -> bool:
        """Remove one reason; returns True when that brought the link back up."""
        if cause not in self.causes:
            return False
        self.causes.discard(cause)
        if self.causes:
            return False
        self.down_port.set_up()
        self.up_port.set_up()  # last, so a NIC port that restarts pulling sees a live path
        return True
