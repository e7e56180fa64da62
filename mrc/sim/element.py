"""What every fabric element shares: the drop reasons, the hook types, the ``HostAgent`` a host
drives, :class:`Node` (a host or switch as a port sees it), and :class:`Fabric`, the part of
the network an element reads.

The elements (:mod:`mrc.sim.ports`, :mod:`mrc.sim.host`, :mod:`mrc.sim.switch`, the PFC
ports) sit below the network that holds them: they know it only as a :class:`Fabric` (its
simulator, spec and hooks), so :mod:`mrc.sim.network` can name every element without any of
them naming it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mrc.packet import Packet

if TYPE_CHECKING:
    from mrc.sim.engine import Simulator
    from topology.spec import FabricSpec

#: Why a packet was dropped. ``buffer``: the data queue was full and trimming is off;
#: ``header_queue``: even the priority queue was full; ``down``: handed to a port that is down;
#: ``link_down``: queued at or on the wire of a port when it went down; ``loss``: random loss;
#: ``no_route``: a switch found no entry for the active uSID; ``misdelivered``: a host received
#: a packet whose carrier was not consumed or whose inner destination is another host.
#: PFC (:mod:`mrc.sim.pfc`): ``lossless_overflow``: a lossless packet found its ingress
#: headroom full (a bug of the headroom sizing: counted so a test can prove it never happens);
#: ``pfc_watchdog``: a lossless queue the PFC watchdog declared stormed dropped it;
#: ``rx_stalled``: a host whose NIC stopped draining its receive queue could not take it.
DROP_REASONS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered", "lossless_overflow", "pfc_watchdog", "rx_stalled")

#: ``tap(now, port_name, pkt)``: sees every packet that crossed a link, as the far element
#: takes it (``now`` = that moment, so calls come in global time order; the packet is as it was
#: on that wire: outer address, ECN and trim state not yet rewritten by the far switch).
Tap = Callable[[int, str, Packet], None]
#: ``observer(now, where, pkt, event)``: ``event`` is ``"trim"``, ``"ecn"`` or a drop reason;
#: ``where`` is a port, switch or host name.
Observer = Callable[[int, str, Packet, str], None]
#: ``pause_hook(now, delta)``: a port's lossless egress became paused (+1) or resumed (-1).
PauseHook = Callable[[int, int], None]


class Fabric(Protocol):
    """The network as its elements see it (:class:`mrc.sim.network.Network` is one): the
    simulator, the spec, and the hooks an element calls. Nothing here names an element."""

    sim: Simulator
    spec: FabricSpec
    #: Called on every drop, trim and ECN mark; None costs nothing on the hot path.
    observer: Observer | None
    #: Told when a port's lossless egress is paused or resumed (PFC fabrics only).
    pause_hook: PauseHook | None

    @property
    def tap(self) -> Tap | None:
        """The capture hook a new port starts with."""
        ...


class Node(Protocol):
    """An element an output port leads to or from: a host or a switch."""

    @property
    def name(self) -> str: ...

    def receive(self, pkt: Packet) -> None:
        """Take a packet that crossed the link."""
        ...


class HostAgent(Protocol):
    """What a host's NIC drives: the NIC glue of a transport, or a benchmark traffic source."""

    def pull(self, now: int, plane: int) -> Packet | None:
        """The port of ``plane`` is idle and has no control packet waiting: the next packet
        to put on that wire, or None (then call ``Host.kick`` when there is one). A pull only
        hands a packet back: it never sends or kicks on the host's ports."""
        ...

    def on_receive(self, now: int, pkt: Packet) -> None:
        """A packet from the fabric reached this host."""
        ...

    # Optional: ``on_port_state(now, plane, up)`` is called, when the agent defines it, as
    # the NIC port of ``plane`` loses or regains its link (a NIC sees loss of signal), and
    # ``on_port_rate(now, plane, bps)`` as that port's rate changes (a degraded link).
