"""The base class of every transport's queue pair: what its NIC driver calls per packet.

A QP subclasses :class:`QpBase` and implements the per-packet half of the sans-IO contract
(:mod:`mrc.transport.base`): ``poll``, ``receive``, ``take_control``, ``next_timer`` and
``handle_timer``, and keeps ``qpn``, ``events``, ``bytes_placed`` and ``failed``. In pure
Python this is only a shared base; in the compiled build (see :mod:`mrc._build`) it gives the
driver one C layout for every transport, so those calls and fields cost a C call and a load
instead of a Python method call and attribute lookup.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from mrc.packet import Packet

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if TYPE_CHECKING:
    from mrc.transport.base import TransportEvent


@cython.cclass
class QpBase:
    """Identity and outputs of a QP, and the per-packet calls a driver makes on it."""

    qpn: cython.longlong
    events: deque[TransportEvent]
    bytes_placed: cython.longlong
    failed: cython.bint
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    @cython.ccall
    @cython.annotation_typing(True)
    def poll(self, now: cython.longlong, plane: cython.longlong) -> Any:  # Packet | None
        """The next DATA packet for the idle port of ``plane``, or None."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def receive(self, now: cython.longlong, pkt: Packet) -> None:
        """A packet for this QP arrived."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def take_control(self) -> list:  # list[Packet]
        """Control packets to send now (each names its port in ``pkt.plane``)."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def next_timer(self) -> Any:  # int | None
        """The earliest deadline in picoseconds, or None."""
        raise NotImplementedError

    @cython.ccall
    @cython.annotation_typing(True)
    def handle_timer(self, now: cython.longlong) -> None:
        """The deadline from ``next_timer`` passed."""
        raise NotImplementedError
