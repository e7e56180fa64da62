"""What the live host (:mod:`mrc.live.host`) hands its NIC driver (:mod:`mrc.nic.runtime`):
its paced NIC ports (:class:`LivePort`) and its timers, asyncio's on the dilated clock
(:class:`LiveTimers`). Both act through the host, which paces the ports and owns the socket:
what they need of it is :class:`PortsHost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from mrc.live.clock import Clock
from mrc.nic.runtime import PortSink, Scheduler
from mrc.packet import Packet
from mrc.units import PS_PER_S
from topology.spec import ETHERNET_OVERHEAD_BYTES

_PS_BITS = 8 * PS_PER_S
_ETH = ETHERNET_OVERHEAD_BYTES


class PortsHost(Protocol):
    """The live host, as its ports and timers use it."""

    counters: dict[str, int]
    clock: Clock
    closed: bool
    _loop: asyncio.AbstractEventLoop | None
    _burst: list[LivePort] | None
    _last_now: int

    def _fill(self, port: LivePort, now: int) -> None: ...

    def _send_now(self, pkt: Packet, port: LivePort) -> None: ...

    def _wake_up(self) -> int: ...


class LivePort(PortSink):
    """One NIC port (plane): when it is free again, whether its link is up, its wake timer."""

    __slots__ = ("host", "bps", "free_at", "up", "busy", "wake", "tx_data", "tx_control",
                 "dropped_down")

    def __init__(self, host: PortsHost, plane: int, bps: int) -> None:
        super().__init__(plane)
        self.host = host
        self.bps = bps
        self.free_at = 0
        self.up = True
        self.busy = False  # a wake timer is armed for free_at
        self.wake: asyncio.TimerHandle | None = None
        self.tx_data = 0
        self.tx_control = 0
        self.dropped_down = 0

    def serialization_ps(self, size: int) -> int:
        return -((size + _ETH) * -_PS_BITS // self.bps)

    def kick(self) -> None:
        """Fill the port now if it is idle and up (while a received burst is taken in: once,
        after it)."""
        if self.up and not self.busy:
            host = self.host
            burst = host._burst
            if burst is None:
                host._fill(self, host._last_now)
            elif self not in burst:
                burst.append(self)

    def send(self, pkt: Packet) -> None:
        self.host._send_now(pkt, self)

    def drop_unsent(self, pkt: Packet) -> None:
        """A packet put on this port while it has no link: lost here."""
        self.dropped_down += 1
        self.host.counters["tx_nic_down"] += 1


class LiveTimers(Scheduler):
    """The live host's scheduler for its QPs' wake-ups: asyncio timers on the dilated clock.

    ``now`` wakes the host up (modelled time from the clock, never backwards, after the
    ``sync`` hook ran the fabric's due events); a wake-up asyncio fires a hair early is due
    all the same, so the host's time is moved to it first. Each wake-up counts how late it
    came (``wakes``, ``wake_late_ps``, in modelled time): a host whose loop cannot keep up
    runs its QPs' timers late, which ``mrc.labs.run.pace`` judges."""

    __slots__ = ("host",)

    def __init__(self, host: PortsHost) -> None:
        self.host = host

    def now(self) -> int:
        return self.host._wake_up()

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any) -> None:
        host = self.host
        if host._loop is not None and not host.closed:
            host._loop.call_at(host.clock.wall_at(time_ps), self._fire, (time_ps, fn, arg))

    def _fire(self, job: tuple[int, Callable[[Any], None], Any]) -> None:
        time_ps, fn, arg = job
        host = self.host
        if host.closed:
            return
        counters = host.counters
        counters["wakes"] += 1
        late = host.clock.now_ps() - time_ps
        if late > 0:
            counters["wake_late_ps"] += late
        if host._last_now < time_ps:
            host._last_now = time_ps
        fn(arg)
