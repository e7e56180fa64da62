"""The base class of every transport's queue pair: what its NIC driver calls per packet.

A QP subclasses :class:`QpBase` and implements the per-packet half of the sans-IO contract
(:mod:`mrc.transport.base`): ``poll``, ``receive``, ``take_control``, ``next_timer`` and
``handle_timer``, and keeps ``qpn``, ``events``, ``bytes_placed`` and ``failed``. In pure
Python this is only a shared base; in the compiled build (``qp_base.pxd``, see
:mod:`mrc._build`) it gives the driver one C layout for every transport, so those calls and
fields cost a C call and a load instead of a Python method call and attribute lookup.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mrc.packet import Packet
    from mrc.transport.base import TransportEvent


class QpBase:
    """Identity and outputs of a QP, and the per-packet calls a driver makes on it."""

    __slots__ = ("qpn", "events", "bytes_placed", "failed")

    qpn: int
    events: deque[TransportEvent]
    bytes_placed: int
    failed: bool

    def poll(self, now: int, plane: int) -> Packet | None:
        """The next DATA packet for the idle port of ``plane``, or None."""
        raise NotImplementedError

    def receive(self, now: int, pkt: Packet) -> None:
        """A packet for this QP arrived."""
        raise NotImplementedError

    def take_control(self) -> list[Packet]:
        """Control packets to send now (each names its port in ``pkt.plane``)."""
        raise NotImplementedError

    def next_timer(self) -> int | None:
        """The earliest deadline in picoseconds, or None."""
        raise NotImplementedError

    def handle_timer(self, now: int) -> None:
        """The deadline from ``next_timer`` passed."""
        raise NotImplementedError
