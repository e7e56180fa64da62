"""What the two halves of an RC QP (:mod:`.requester`, :mod:`.responder`) use of the QP they
belong to: its identity, config and counters, its failure flag, the placed-bytes count, the
queue of control packets and the two ways to raise an event. Naming it here lets the halves
be read and type-checked without importing :mod:`.qp`, which builds them."""

from __future__ import annotations

from typing import Protocol

from mrc.packet import Packet
from mrc.transport.base import TransportEvent
from mrc.transport.rc.config import RcConfig, RcStats


class RcEndpoint(Protocol):
    """The RC QP as its requester and responder see it (``RcQp`` is one)."""

    qpn: int
    host: int
    peer: int
    plane: int
    config: RcConfig
    stats: RcStats
    failed: bool
    bytes_placed: int
    _ctrl: list[Packet]

    def _emit(self, event: TransportEvent) -> None:
        """Raise ``event`` (queued for the driver, and passed to the listener)."""

    def _error(self, now: int, reason: str, psn: int, last_progress_ps: int) -> None:
        """Move the QP to the error state for ``reason``."""
