"""``KernelStack``: one transport's run with the Linux kernel as the fabric.

The labs runner drives a *stack* (``stack.sim.at``/``run``, ``stack.open``, tables at the end);
this is that stack for the kernel runtime: the shared :class:`~mrc.stack.stack.Stack`
(connections, drains, event rows, goodput recorder, totals) built from kernel parts, as the
live runtime's ``LiveStack`` is from live ones, so workloads, summaries, CSVs and plots are the
simulator's own code:

* ``stack.sim`` is the live runtime's :class:`~mrc.live.stack.LiveSim` over an engine of its
  own (:class:`~mrc.sim.engine.Simulator`, run against the scaled wall clock by a
  :class:`~mrc.live.wall_engine.WallEngine`). Its heap holds only the lab's schedule
  (workload steps and faults): the packets are the kernel's. The hosts run the events that
  are due before they act (their ``sync`` hook), so a fault that is due reaches them first
  however late the loop is.
* Hosts are :class:`~mrc.kernel.host.KernelHost` (the live host on real veths); connections
  are the live runtime's, with real payloads whose SHA-256 the receiver checks.
* There is no simulated network (``stack.net`` is None): faults are applied by
  :class:`~mrc.kernel.faults.KernelFaults` to the fabric's interfaces (``apply_fault``, which
  the labs layer's fault schedule calls); a host link that changes tells its NIC at once.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any, ClassVar

from mrc.kernel.capture import Capture
from mrc.kernel.fabric import KernelFabric
from mrc.kernel.faults import FaultTimer, KernelFaults
from mrc.kernel.host import KernelHost, wires_of
from mrc.live.clock import Clock
from mrc.live.stack import LiveMrcConnection, LiveRcConnection, LiveSim, PayloadPool
from mrc.live.wall_engine import WallEngine
from mrc.sim.engine import Simulator
from mrc.stack.recorder import Recorder
from mrc.stack.stack import ConnectionFactory, Stack
from mrc.units import PS_PER_US

RUNTIME = "kernel"


class KernelStack(Stack):
    """Kernel fabric + kernel hosts + recorder for one transport of one lab run.

    The fabric is built (and torn down) by the caller; the stack opens one packet socket per
    host in it, and :meth:`close` closes them and its event loop (a ``select`` selector:
    timeouts to the microsecond, as the live stack's)."""

    connection_kinds: ClassVar[dict[str, ConnectionFactory]] = {
        "mrc": LiveMrcConnection, "rc": LiveRcConnection}

    def __init__(self, fabric: KernelFabric, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc", *, scale: float, trace: int = 0,
                 capture: Capture | None = None) -> None:
        spec = fabric.spec
        self.fabric = fabric
        self.closed = False
        self.loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self.loop.set_exception_handler(self._loop_error)
        self.clock = Clock(scale, time_fn=self.loop.time)
        #: The lab's schedule on the engine, run against the clock (attached when run starts).
        self.engine = WallEngine(Simulator(seed), self.clock)
        self.live_sim = LiveSim(self.loop, self.clock, self.engine)
        super().__init__(spec, seed, transport_name, sim=self.live_sim, net=None,
                         recorder=Recorder(spec.planes, bin_ps))
        self.payloads = PayloadPool(seed)
        self.faults = KernelFaults(fabric, on_nic_link=self._nic_link)
        self.timer = FaultTimer(self.clock.wall_at, scale, now=self.loop.time)
        self.nics: list[KernelHost] = [
            KernelHost(h, spec, self.clock, ns=fabric.ns(f"h{h}"), wires=wires_of(fabric, h),
                       on_event=self._on_qp_event, recorder=self.recorder,
                       sync=self.engine.run_due, trace=trace,
                       burst_ps=self.clock.model_ps(fabric.shaping.host_catch_up_s)
                       if fabric.shaping is not None else None)
            for h in range(spec.hosts)]
        self.capture = capture
        self.wall_started = time.perf_counter()
        try:
            self.loop.run_until_complete(self._start())
            if capture is not None:
                capture.attach(self.loop, self.clock)
        except BaseException:
            self.close()
            raise

    async def _start(self) -> None:
        for host in self.nics:
            await host.start()

    # ----------------------------------------------------------------- plumbing
    def _nic_link(self, host: int, plane: int, up: bool, bps: int | None) -> None:
        self.nics[host].set_link(plane, up, bps)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.live_sim.fail(exc if exc is not None else RuntimeError(context.get("message")))

    def apply_fault(self, primitive: str, target: str, **params: Any) -> dict[str, Any]:
        """Apply a fault primitive now (the labs layer's fault schedule calls this), timed
        against the moment it was due; then the NICs hear of their links."""
        due = self.sim.now
        effect: dict[str, Any] = self.timer.run(
            due, primitive, target, lambda: self.faults.apply_kernel(primitive, target, **params))
        self.faults.tell_nics()
        return effect

    # ----------------------------------------------------------------- results
    def fabric_counts(self) -> tuple[int, int]:
        """(trimmed, dropped): the kernel never trims."""
        return 0, self.fabric.drops()["total"]

    def totals(self) -> dict[str, Any]:
        return {**super().totals(), "kernel": self.kernel_stats()}

    def kernel_stats(self) -> dict[str, Any]:
        """What the run did on the machine: wall time, the hosts' and the fabric's counters,
        and the timing of every fault."""
        hosts: dict[str, int] = {}
        for host in self.nics:
            for key, value in host.counters.items():
                hosts[key] = hosts.get(key, 0) + value
        return {
            "scale": self.clock.dilation,
            "model_us": round(self.sim.now / PS_PER_US, 3),
            "wall_s": round(time.perf_counter() - self.wall_started, 3),
            "fabric_drops": self.fabric.drops(),
            "hosts": hosts,
            "socket_drops": sum(host.socket_drops() for host in self.nics),
            "host_rejections": next((h.first_rejection for h in self.nics
                                     if h.first_rejection), None),
            **self.timer.summary(),
        }

    # ----------------------------------------------------------------- teardown
    def close(self) -> None:
        """Close every host socket and the loop (idempotent; the fabric is the caller's)."""
        if self.closed:
            return
        self.closed = True
        loop = self.loop
        self.engine.detach()
        try:
            if self.capture is not None:
                self.capture.detach()
            if not loop.is_closed():
                loop.run_until_complete(self._close_hosts())
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            if not loop.is_closed():
                loop.close()

    async def _close_hosts(self) -> None:
        for host in self.nics:
            await host.close()

    def __enter__(self) -> KernelStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
