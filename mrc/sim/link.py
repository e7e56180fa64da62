"""Links: both directions between two elements, and what holds them down."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mrc.sim.ports import OutPort


class Link:
    """Both directions between two elements, named ``lower--upper`` (lower tier first).

    A link is up while nothing holds it down; ``causes`` says who does (``"link"`` for an
    operator/flap fault, ``"nic"`` for a NIC port fault, a switch name for a dead switch), so
    that bringing a switch back does not revive a link that was cut on its own.
    """

    __slots__ = ("name", "plane", "lower", "upper", "up_port", "down_port", "causes")

    def __init__(self, name: str, plane: int, up_port: OutPort, down_port: OutPort) -> None:
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
    def ports(self) -> tuple[OutPort, OutPort]:
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
