"""The NIC driver (mrc.nic.driver) on a runtime of its own: a pull never calls into a port,
what a poll leaves behind is served in an event of its own, and the per-QP state is the
driver's (QpContext), kept across a QP's removal and registration again."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mrc.nic.driver import NicDriver
from mrc.nic.runtime import PortSink, Scheduler
from mrc.packet import ACK, DATA, Packet
from mrc.transport.qp_base import QpBase


class Clock(Scheduler):
    def __init__(self) -> None:
        self.time = 0
        self.jobs: list[tuple[int, Callable[[Any], None], Any]] = []

    def now(self) -> int:
        return self.time

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any) -> None:
        self.jobs.append((time_ps, fn, arg))

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for time_ps, fn, arg in jobs:
            self.time = time_ps
            fn(arg)


class Port(PortSink):
    def __init__(self, plane: int, log: list[tuple[str, int]]) -> None:
        super().__init__(plane)
        self.log = log

    def kick(self) -> None:
        self.log.append(("kick", self.plane))

    def send(self, pkt: Packet) -> None:
        self.log.append(("send", pkt.kind))

    def drop_unsent(self, pkt: Packet) -> None:
        self.log.append(("drop", pkt.kind))


class Qp(QpBase):
    """Sends ``n`` DATA packets on plane 0, each poll leaving an ACK behind."""

    def __init__(self, qpn: int, n: int) -> None:
        self.qpn = qpn
        self.events = deque()
        self.bytes_placed = 0
        self.failed = False
        self.left = n
        self.control: list[Packet] = []

    def poll(self, now: int, plane: int) -> Packet | None:
        if not self.left:
            return None
        self.left -= 1
        self.control.append(Packet(ACK, 0, 1, self.qpn, 0))
        return Packet(DATA, 0, 1, self.qpn, self.left, length=100)

    def take_control(self) -> list[Packet]:
        out, self.control = self.control, []
        return out

    def next_timer(self) -> int | None:
        return None

    def receive(self, now: int, pkt: Packet) -> None:
        pass

    def handle_timer(self, now: int) -> None:
        pass


def test_a_pull_hands_its_packet_back_and_serves_the_rest_later() -> None:
    log: list[tuple[str, int]] = []
    clock = Clock()
    driver = NicDriver(clock, [Port(0, log), Port(1, log)])
    qp = Qp(7, 1)
    driver.add(qp, [0])
    pkt = driver.pull(0, 0)
    assert pkt is not None and pkt.kind == DATA
    assert log == []  # no port was called while it pulled
    assert len(clock.jobs) == 1  # the ACK the poll left waits for an event of its own
    clock.run()
    assert log == [("send", ACK)]
    assert driver.pull(0, 0) is None and driver.pull(0, 1) is None


def test_the_qp_context_is_the_drivers_and_survives_registration_again() -> None:
    log: list[tuple[str, int]] = []
    driver = NicDriver(Clock(), [Port(0, log), Port(1, log)])
    qp = Qp(9, 3)
    driver.add(qp, [1])
    ctx = driver.context(qp)
    assert ctx is not None and [p.plane for p in ctx.ports] == [1] and ctx.timer == -1
    driver.poke(qp)
    assert log == [("kick", 1)]  # a QP wakes the ports of its planes only
    driver.remove(qp)
    assert not driver.holds(qp) and driver.context(qp) is None and driver.qps == {}
    driver.add(qp, [0, 1])
    assert driver.context(qp) is ctx and len(ctx.ports) == 2
    other = Qp(9, 1)  # another QP of the same number, once this one is gone
    driver.remove(qp)
    driver.add(other, [])
    assert driver.context(other) is not ctx and driver.qps == {9: other}
