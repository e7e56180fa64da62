"""``KernelStack``: one transport's run with the Linux kernel as the fabric.

The labs runner drives a *stack* (``stack.sim.at``/``run``, ``stack.open``, tables at the end);
this is that stack for the kernel runtime, so workloads, summaries, CSVs and plots are the
simulator's own code, as they are for the live runtime:

* ``stack.sim`` is a :class:`KernelSim`, the modelled-time scheduler: ``run(until)`` runs the
  asyncio loop until the scaled wall clock reaches ``until``; ``at(t, fn)`` runs ``fn`` at
  modelled time ``t`` from its own heap (workload steps and faults). There is no user-space
  fabric to run it for us: the hosts call :meth:`KernelSim.run_due` before they act, so an
  event that is due reaches them first however late the loop is.
* Hosts are :class:`~mrc.kernel.host.KernelHost` (the live host on real veths); connections
  are the live runtime's, with real payloads whose SHA-256 the receiver checks.
* Faults are applied by :class:`~mrc.kernel.faults.KernelFaults` to the fabric's interfaces;
  a host link that changes tells its NIC at once.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import selectors
import time
from collections.abc import Callable
from typing import Any, ClassVar

from mrc.kernel.capture import Capture
from mrc.kernel.fabric import KernelFabric
from mrc.kernel.faults import FaultTimer, KernelFaults
from mrc.kernel.host import KernelHost, wires_of
from mrc.live.clock import Clock
from mrc.live.runner import LiveMrcConnection, LiveRcConnection, PayloadPool
from mrc.sim.recorder import Recorder
from mrc.sim.stack import ConnectionFactory, SimStack
from mrc.units import PS_PER_US

RUNTIME = "kernel"


class KernelRunError(RuntimeError):
    """A callback failed during a kernel run (a bug: the traceback is chained)."""


class KernelSim:
    """``stack.sim`` on the scaled wall clock: ``now``, ``at``, ``after``, ``stop``, ``run``.

    Modelled time starts at the first ``run``; until then ``now`` is 0 and ``at`` only
    records. Inside a callback ``now`` is the callback's own time (events are logged at the
    instant they were due; how late they really ran is measured separately)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock, seed: int) -> None:
        self.loop = loop
        self.clock = clock
        self.rng = random.Random(seed)
        self.started = False
        self._heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self._floor = 0
        self._in_callback: int | None = None
        self._running = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._stopped = False
        self._wake: asyncio.Future[None] | None = None
        self.error: BaseException | None = None

    @property
    def now(self) -> int:
        if self._in_callback is not None:
            return self._in_callback
        if not self.started:
            return 0
        t = self.clock.now_ps()
        if t < self._floor:
            return self._floor
        self._floor = t
        return t

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at modelled time ``time_ps`` (a time already past runs at once)."""
        self._seq += 1
        heapq.heappush(self._heap, (time_ps, self._seq, fn, arg))
        if self.started:
            self._arm()

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def run_due(self, now: int) -> None:
        """Run the events due by ``now`` (hosts call this first thing; not re-entrant)."""
        heap = self._heap
        if not heap or heap[0][0] > now or self._running or not self.started:
            return
        self._running = True
        try:
            while heap and heap[0][0] <= now:
                time_ps, _, fn, arg = heapq.heappop(heap)
                self._in_callback = time_ps
                try:
                    fn(arg)
                except Exception as exc:  # noqa: BLE001 - stop the run, report it
                    self.fail(exc)
                finally:
                    self._in_callback = None
        finally:
            self._running = False
        self._arm()

    def _arm(self) -> None:
        heap = self._heap
        if not heap:
            return
        due = heap[0][0]
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= due:
                return
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.loop.call_at(self.clock.wall_at(due), self._on_timer)

    def _on_timer(self) -> None:
        due = self._timer_at
        self._timer = None
        self._timer_at = None
        now = self.clock.now_ps()
        if due is not None and now < due:
            now = due  # asyncio may fire a hair early; the event is due by definition
        self.run_due(now)
        self._arm()

    def stop(self) -> None:
        self._stopped = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.stop()

    def start(self) -> None:
        if self.started:
            return
        self.clock.restart(self.loop.time())
        self.started = True
        self._arm()

    def run(self, until_ps: int | None = None) -> int:
        """Run until modelled time ``until_ps`` (or ``stop``); returns now."""
        if until_ps is None:
            raise ValueError("a kernel run needs an end time (runs stop themselves)")
        self.start()
        self._stopped = False
        wake: asyncio.Future[None] = self.loop.create_future()
        self._wake = wake
        handle = self.loop.call_at(self.clock.wall_at(until_ps), _resolve, wake)
        try:
            self.loop.run_until_complete(wake)
        finally:
            handle.cancel()
            self._wake = None
        if self.error is not None:
            raise KernelRunError(f"kernel run failed: {self.error!r}") from self.error
        if not self._stopped and self._floor < until_ps:
            self._floor = until_ps
        return self.now


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class KernelStack(SimStack):
    """Kernel fabric + kernel hosts + recorder for one transport of one lab run.

    The fabric is built (and torn down) by the caller; the stack opens one packet socket per
    host in it, and :meth:`close` closes them and its event loop."""

    connection_kinds: ClassVar[dict[str, ConnectionFactory]] = {
        "mrc": LiveMrcConnection, "rc": LiveRcConnection}

    def __init__(self, fabric: KernelFabric, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc", *, scale: float, trace: int = 0,
                 capture: Capture | None = None) -> None:
        spec = fabric.spec
        self.fabric = fabric
        self.spec = spec
        self.seed = seed
        self.payloads = PayloadPool(seed)
        self.transport_name = transport_name
        self.connections = []
        self._owner = {}
        self._rows = []
        self._next_qpn = 1
        self.closed = False
        self.loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self.loop.set_exception_handler(self._loop_error)
        self.clock = Clock(scale, time_fn=self.loop.time)
        self.recorder = Recorder(spec.planes, bin_ps)
        self.kernel_sim = KernelSim(self.loop, self.clock, seed)
        self.sim = self.kernel_sim
        self.faults = KernelFaults(fabric, on_nic_link=self._nic_link)
        self.timer = FaultTimer(self.clock.wall_at, scale, now=self.loop.time)
        self.nics: list[KernelHost] = [  # type: ignore[assignment]
            KernelHost(h, spec, self.clock, ns=fabric.ns(f"h{h}"), wires=wires_of(fabric, h),
                       on_event=self._on_qp_event, on_placed=self.recorder.placed,
                       on_count=self._count, sync=self.kernel_sim.run_due, trace=trace,
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

    def _count(self, name: str, now: int) -> None:
        self.recorder.count(name, now)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.kernel_sim.fail(exc if exc is not None else RuntimeError(context.get("message")))

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
