"""The simulator's NIC: the NIC driver (:mod:`mrc.nic.driver`) on the simulator's clock,
driving a simulated host's NIC ports.

The driver knows only the small classes of :mod:`mrc.nic.runtime`; here the simulator's
parts take their shape: :class:`SimClock` is the engine as the driver's ``Scheduler``,
:class:`PortLink` a :class:`~mrc.sim.host.NicPort` as its ``PortSink``. :class:`Nic` is the
host's agent in the network (``HostAgent``): its ports pull data from it when idle
(``NicDriver.pull``) and hand it what arrives (``on_receive``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrc.nic.driver import EventSink, NicDriver
from mrc.nic.runtime import PortSink, RecorderSink, Scheduler
from mrc.packet import Packet
from mrc.sim.engine import Simulator
from mrc.sim.host import Host, NicPort

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]


@cython.cclass
class SimClock(Scheduler):
    """The simulator's engine as the driver's clock."""

    sim: Simulator
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def now(self) -> cython.longlong:
        return self.sim.now

    @cython.ccall
    @cython.annotation_typing(True)
    def at(self, time_ps: cython.longlong, fn: Callable[[Any], None], arg: Any) -> None:
        self.sim.at(time_ps, fn, arg)


@cython.cclass
class PortLink(PortSink):
    """A simulated NIC port as the driver's port."""

    port: NicPort
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, port: NicPort) -> None:
        PortSink.__init__(self, port.plane)
        self.port = port

    @cython.ccall
    @cython.annotation_typing(True)
    def kick(self) -> None:
        self.port.kick()

    @cython.ccall
    @cython.annotation_typing(True)
    def send(self, pkt: Packet) -> None:
        self.port.send(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def drop_unsent(self, pkt: Packet) -> None:
        self.port.drop_unsent(pkt)


@cython.cclass
class Nic(NicDriver):
    """Binds the QPs of one simulated host to its NIC ports; goodput and counters go to
    ``recorder``, transport events to ``on_event``."""

    host: Host
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, sim: Simulator, host: Host, recorder: RecorderSink,
                 on_event: EventSink | None = None) -> None:
        super().__init__(SimClock(sim), [PortLink(port) for port in host.ports],
                         on_event=on_event, recorder=recorder)
        self.host = host
        host.attach(self)
