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

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]


@cython.cclass
class PortSink:
    """One NIC port (plane ``plane``), as the driver uses it. The port pulls its data from
    the driver (``NicDriver.pull``) whenever it is idle; the driver calls it only to wake it
    and to hand it control packets, never while it pulls."""

    plane: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, plane: int) -> None:
        self.plane = plane

    @cython.ccall
    @cython.annotation_typing(True)
    def kick(self) -> None:
        """Pull now if the port is idle and up."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def send(self, pkt: Packet) -> None:
        """A control packet: out at once, on the port's priority queue."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def drop_unsent(self, pkt: Packet) -> None:
        """A packet a QP put on this port while it had no link: lost here."""
        raise NotImplementedError


@cython.cclass
class Scheduler:
    """The clock the driver runs on."""

    __slots__ = ()

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def now(self) -> cython.longlong:
        """The time (ps) of the call the runtime is in."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def at(self, time_ps: cython.longlong, fn: Callable[[Any], None], arg: Any) -> None:
        """Call ``fn(arg)`` at ``time_ps`` (never before ``now``)."""
        raise NotImplementedError


@cython.cclass
class RecorderSink:
    """Where the driver reports its QPs' goodput and counters (the stack's ``Recorder``,
    :mod:`mrc.stack.recorder`). This base records nothing."""

    __slots__ = ()

    @cython.ccall
    @cython.annotation_typing(True)
    def placed(self, now: cython.longlong, plane: cython.longlong,
               nbytes: cython.longlong) -> None:
        """``nbytes`` new payload bytes placed at ``now`` by a packet that came on ``plane``."""

    @cython.ccall
    @cython.annotation_typing(True)
    def count(self, name: Any, now: cython.longlong, amount: cython.longlong = 1) -> None:
        """Count ``amount`` of ``name`` ("retransmissions", "probes", "cnps") at ``now``."""
