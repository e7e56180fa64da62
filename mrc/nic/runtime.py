"""What a runtime hands the NIC driver (:mod:`mrc.nic.driver`): its NIC ports, its clock and
the recorder its QPs' goodput goes to. The simulator's are in :mod:`mrc.sim.nic`, the live
host's in :mod:`mrc.live.host`.

They are the driver's protocols, written as small base classes that a runtime subclasses
rather than as ``typing.Protocol``: compiled (``mrc._build``), a call through a class the
driver names is a C call, where a call on an object it knows only by its methods costs an
attribute lookup and Python's call protocol, a few times per packet. The driver knows
nothing else of a runtime: not the simulator's ports or engine, not a socket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrc.packet import Packet


class PortSink:
    """One NIC port (plane ``plane``), as the driver uses it. The port pulls its data from
    the driver (``NicDriver.pull``) whenever it is idle; the driver calls it only to wake it
    and to hand it control packets, never while it pulls."""

    __slots__ = ("plane",)

    def __init__(self, plane: int) -> None:
        self.plane = plane

    def kick(self) -> None:
        """Pull now if the port is idle and up."""
        raise NotImplementedError

    def send(self, pkt: Packet) -> None:
        """A control packet: out at once, on the port's priority queue."""
        raise NotImplementedError

    def drop_unsent(self, pkt: Packet) -> None:
        """A packet a QP put on this port while it had no link: lost here."""
        raise NotImplementedError


class Scheduler:
    """The clock the driver runs on."""

    __slots__ = ()

    def now(self) -> int:
        """The time (ps) of the call the runtime is in."""
        raise NotImplementedError

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any) -> None:
        """Call ``fn(arg)`` at ``time_ps`` (never before ``now``)."""
        raise NotImplementedError


class RecorderSink:
    """Where the driver reports its QPs' goodput and counters (the stack's ``Recorder``,
    :mod:`mrc.stack.recorder`). This base records nothing."""

    __slots__ = ()

    def placed(self, now: int, plane: int, nbytes: int) -> None:
        """``nbytes`` new payload bytes placed at ``now`` by a packet that came on ``plane``."""

    def count(self, name: str, now: int, amount: int = 1) -> None:
        """Count ``amount`` of ``name`` ("retransmissions", "probes", "cnps") at ``now``."""
