"""The simulator's NIC: one :class:`~mrc.sim.nic_driver.NicDriver` per host, on the
simulator's clock, driving the network's NIC ports.

It is the host's agent in the network (``HostAgent``: ``pull``, ``on_receive``,
``on_port_state``), so the simulated NIC ports pull data from it and hand it what arrives;
everything it does for its QPs is the driver's (:mod:`mrc.sim.nic_driver`), shared with the
live runtime's host. The ports pull from inside their transmit, so control packets a QP hands
over while polled wait for an event of their own.
"""

from __future__ import annotations

from typing import Any

from mrc.sim.engine import Simulator
from mrc.sim.nic_driver import EventSink, NicDriver
from mrc.sim.recorder import Recorder


class Nic(NicDriver):
    """Binds the QPs of one simulated host to its NIC ports; goodput and counters go to
    ``recorder``, transport events to ``on_event``."""

    def __init__(self, sim: Simulator, host: Any, recorder: Recorder,
                 on_event: EventSink | None = None) -> None:
        super().__init__(sim, host.ports, on_event=on_event, on_placed=recorder.placed,
                         on_count=recorder.count, defer_polled_control=True)
        self.sim = sim
        self.host = host
        self.recorder = recorder
        host.attach(self)
