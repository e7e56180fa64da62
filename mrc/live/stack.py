"""The live runtime's stack: what the labs layer drives for one transport, on real sockets
and real time.

The labs runner drives a *stack* through a lab: it opens connections, schedules the workload
and the fault schedule with ``stack.sim.at``, advances time with ``stack.sim.run(until)`` and
reads tables at the end. :class:`LiveStack` is that stack for the live runtime: the same
:class:`~mrc.stack.stack.Stack` as the simulator's (connections, drains, event rows, goodput
recorder), built from live parts, so workloads, fault schedules, summaries, CSVs and plots are
the very same code as in simulation:

* ``stack.sim`` is a :class:`LiveSim`: the fabric's own event engine, run against the wall
  clock. ``at(t, fn)`` puts ``fn`` on the fabric's modelled-time event heap, so workload steps
  and faults happen at their exact modelled time, in order with the packets; ``run(until)``
  runs the asyncio loop until the dilated wall clock reaches ``until``.
* Connections are the simulator's (``mrc.stack.stack``) with real payloads: seeded bytes per
  message, a SHA-256 taken at post time, and the receiver's reassembled bytes checked against
  it (``messages_verified`` / ``messages_corrupt``).
* Hosts are :class:`~mrc.live.host.LiveHost` (one asyncio-dgram socket each), the fabric a
  :class:`~mrc.live.fabric_server.FabricServer`; faults run on the fabric's network (``stack.net``,
  the simulator's own), drains go to the transports, exactly as the lab says.

Running a lab live (dilation, captures, the summary's ``live`` section) is the labs layer's
business (:mod:`mrc.labs.run.live`).
"""

from __future__ import annotations

import asyncio
import selectors
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mrc.live.clock import Clock
from mrc.live.fabric import FabricCore
from mrc.live.fabric_server import FabricServer
from mrc.live.host import LiveHost
from mrc.live.udp import check_bind_address
from mrc.live.wall_engine import WallEngine
from mrc.pcap import Capture, CaptureOptions
from mrc.stack.recorder import Recorder
from mrc.stack.stack import (
    ConnectionFactory,
    MrcConnection,
    RcConnectionAdapter,
    Stack,
)
from mrc.transport.base import QueuePair, StripedMessageCompleted, TransportEvent
from mrc.units import PS_PER_US
from topology.spec import FabricSpec


# ====================================================================== the modelled clock
class LiveRunError(RuntimeError):
    """A callback failed during a live run (a bug: the traceback is chained)."""


class LiveSim:
    """What the labs layer calls ``stack.sim`` on real time: an engine
    (:class:`mrc.sim.engine.Simulator`) run against the wall clock by a
    :class:`~mrc.live.wall_engine.WallEngine`: the live fabric's own engine, or the kernel
    runtime's (``mrc.kernel.stack``), which holds only the lab's schedule.

    Callbacks go on the engine's event heap and run at their exact modelled time, in order
    with the packets; ``now`` is the engine's (inside a callback, its time, as in the
    simulator). ``run(until)`` waits on the wall clock instead of stepping through the heap,
    and ends as the engine's does: every event due by ``until`` run, the clock at ``until``
    (unless stopped). Modelled time starts when ``run`` is first called; until then ``at``
    only records.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock,
                 wall: WallEngine) -> None:
        self.loop = loop
        self.clock = clock
        self.wall = wall
        self.engine = wall.sim
        self.seed = self.engine.seed
        self.rng = self.engine.rng
        self.started = False
        self._pending: list[tuple[int, Callable[[Any], None], Any]] = []
        self._stopped = False
        self._wake: asyncio.Future[None] | None = None
        self.error: BaseException | None = None

    @property
    def now(self) -> int:
        """Modelled picoseconds: the fabric engine's clock."""
        return self.engine.now

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at modelled time ``time_ps``.

        A time the engine has already passed runs at once, where the engine would refuse
        it: callers take their times from the hosts' clocks, which may trail the engine's by
        a hair (asyncio fires the engine's timer early, and the engine runs to its due time).
        """
        if not self.started:
            self._pending.append((time_ps, fn, arg))
            return
        now = self.engine.now
        self.wall.call_at(time_ps if time_ps > now else now, fn, arg)

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def stop(self) -> None:
        """Make ``run`` return now (a finite job finished or failed)."""
        self._stopped = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.stop()

    def start(self) -> None:
        """Modelled time zero is now; release what was scheduled before."""
        if self.started:
            return
        self.clock.restart(self.loop.time())
        self.started = True
        self.wall.attach(self.loop)
        pending, self._pending = self._pending, []
        for time_ps, fn, arg in pending:
            self.at(time_ps, fn, arg)

    def run(self, until_ps: int | None = None) -> int:
        """Run the live system until modelled time ``until_ps`` (or ``stop``); returns now."""
        if until_ps is None:
            raise ValueError("a live run needs an end time (runs stop themselves)")
        if self.loop.is_closed():
            raise RuntimeError("this live stack is closed")
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
            raise LiveRunError(f"live run failed: {self.error!r}") from self.error
        if not self._stopped:
            self.wall.run_due(until_ps)  # what a late loop left due, and the clock to the end
        return self.now


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# ====================================================================== payloads
class PayloadPool:
    """Seeded, reproducible message bytes: each message is a window of one random pool.

    Drawing fresh pseudo-random bytes for every message cost the live loop about 1.1 ms per
    MB, as much as its two SHA-256s; a window of a pool drawn once costs one copy. The pool is
    an SFC64 stream keyed by the seed (numpy's words, little-endian on every platform) and
    grows when a larger message comes; a longer stream keeps its prefix, so a window's bytes
    never change. A message's window starts at an 8-byte offset drawn from ``(src, qpn,
    msg_id)`` within a span as long as the message. No two segments of a message are alike,
    and two messages share bytes only by a one-in-``size/8`` chance, so a misplaced or
    mixed-up segment still changes the message's SHA-256."""

    def __init__(self, seed: int) -> None:
        self._key = zlib.crc32(struct.pack("<Q", seed & (2**64 - 1)))
        self._pool = b""

    def message(self, src: int, qpn: int, msg_id: int, size: int) -> bytes:
        """The ``size`` bytes of message ``msg_id`` on ``src``'s QP ``qpn``."""
        if size <= 0:
            return b""
        words = (size + 7) >> 3
        start = 8 * (zlib.crc32(struct.pack("<QQQ", src, qpn, msg_id)) % words)
        if start + size > len(self._pool):
            self._grow(start + size)
        return self._pool[start:start + size]

    def _grow(self, need: int) -> None:
        words = max((need + 7) >> 3, len(self._pool) >> 2)  # at least double: few regrowths
        self._pool = np.random.SFC64(self._key).random_raw(words).astype(
            "<u8", copy=False).tobytes()


class LiveMrcConnection(MrcConnection):
    """The simulator's MRC connection, carrying real bytes checked by SHA-256.

    Each chunk's bytes come from the stack's payload pool; the sender's QP gives the
    checksum it must have (SHA-256 of its bytes, first 64 bits) and the receiving QP reports
    the SHA-256 of the bytes it placed, so each chunk is hashed once at each end."""

    def _payload(self, qp: Any, msg_id: int, size: int) -> bytes | None:
        stack: LiveStack = self.stack  # type: ignore[assignment]
        return stack.payloads.message(self.src, qp.qpn, msg_id, size)

    def _needs_bytes(self, entry: Any) -> bool:
        return True


class LiveRcConnection(RcConnectionAdapter):
    """The simulator's NCCL-style RC connection, carrying real bytes checked by SHA-256.

    The RC connection hashes the bytes it is given at post time and the bytes it reassembled
    at completion (SHA-256, first 64 bits, as MRC does) and says whether they match
    (``ok``); this class only makes sure the message was one it posted with real bytes, so
    each message is hashed once at each end and never again here."""

    def __init__(self, stack: LiveStack, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, src, dst, params)
        self._posted: set[int] = set()

    def _post(self, now: int, msg_id: int, size: int) -> None:
        stack: LiveStack = self.stack  # type: ignore[assignment]
        payload = stack.payloads.message(self.src, self.conn.qpn_base, msg_id, size)
        self._posted.add(msg_id)
        host = stack.nics[self.src]
        self.conn.post_write(host.now(), msg_id, size, payload=payload, qps=self._rc_qps())
        for qp in self.conn.requesters:
            host.poke(qp)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        for ev in self.conn.events:  # the connection reassembled the stripes: check them
            if isinstance(ev, StripedMessageCompleted):
                posted = ev.msg_id in self._posted
                self._posted.discard(ev.msg_id)
                ev.ok = ev.ok and posted and isinstance(ev.data, bytes | bytearray)
        super().on_event(event, qp)


# ====================================================================== the stack
class LiveStack(Stack):
    """Fabric server + live hosts + recorder for one transport of one live lab run.

    Builds its own event loop (a ``select`` selector: timeouts to the microsecond, where
    epoll rounds up to the millisecond) and binds every socket at once; :meth:`close`
    releases all of it. Opening connections, drains, event rows, timeseries and totals are
    the shared :class:`~mrc.stack.stack.Stack`'s.
    """

    connection_kinds: ClassVar[dict[str, ConnectionFactory]] = {
        "mrc": LiveMrcConnection, "rc": LiveRcConnection}

    def __init__(self, spec: FabricSpec, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc", *, dilation: float = 10_000.0,
                 capture: CaptureOptions | None = None,
                 bind_host: str = "127.0.0.1", allow_non_loopback: bool = False,
                 trace: int = 0) -> None:
        check_bind_address(bind_host, allow_non_loopback)
        self.closed = False
        self.loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self.loop.set_exception_handler(self._loop_error)
        self.clock = Clock(dilation, time_fn=self.loop.time)
        self.core = FabricCore(spec, seed=seed, nic_link=self._nic_link)
        self.fabric = FabricServer(self.core, self.clock, host=bind_host,
                                   allow_non_loopback=allow_non_loopback)
        self.live_sim = LiveSim(self.loop, self.clock, self.fabric.engine)
        # the simulator's network, on the fabric's event heap
        super().__init__(spec, seed, transport_name, sim=self.live_sim, net=self.core.net,
                         recorder=Recorder(spec.planes, bin_ps))
        self.core.observer = self._fabric_event
        self.payloads = PayloadPool(seed)
        self.nics: list[LiveHost] = [
            LiveHost(h, spec, self.clock, bind_host=bind_host,
                     allow_non_loopback=allow_non_loopback, on_event=self._on_qp_event,
                     recorder=self.recorder,
                     sync=self.fabric.engine.run_due, trace=trace)
            for h in range(spec.hosts)]
        self.pcap: Capture | None = None
        self.wall_started = time.perf_counter()
        try:
            if capture is not None:
                Path(capture.path).parent.mkdir(parents=True, exist_ok=True)
                self.pcap = Capture(capture)
                self.core.set_tap(self._capture, point=capture.point)
            self.loop.run_until_complete(self._bind())
        except BaseException:
            self.close()
            raise

    async def _bind(self) -> None:
        address = await self.fabric.start()
        for host in self.nics:
            self.fabric.register_host(host.index, await host.start(address))

    # ----------------------------------------------------------------- plumbing
    def _nic_link(self, host: int, plane: int, up: bool, bps: int) -> None:
        self.nics[host].set_link(plane, up, bps)

    def _fabric_event(self, now: int, event: str, pkt: Any = None) -> None:
        self._observe(now, "", pkt, event)  # the packet's kind splits the drops

    def _capture(self, time_ps: int, port: str, buf: bytearray) -> None:
        if self.pcap is not None:
            self.pcap.offer(time_ps, port, buf)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.live_sim.fail(exc if exc is not None else RuntimeError(context.get("message")))

    # ----------------------------------------------------------------- results
    def totals(self) -> dict[str, Any]:
        return {**super().totals(), "live": self.live_stats()}

    def live_stats(self) -> dict[str, Any]:
        """What the live machinery did: wall time, the fabric's and the hosts' counters."""
        hosts: dict[str, int] = {}
        for host in self.nics:
            for key, value in host.counters.items():
                hosts[key] = hosts.get(key, 0) + value
        fabric = self.fabric.stats()
        model_us = self.sim.now / PS_PER_US
        wall_s = (time.perf_counter() - self.wall_started) if self.wall_started else None
        kernel = [fabric["kernel_drops"]] + [h.stats()["kernel_drops"] for h in self.nics]
        return {
            "dilation": self.clock.dilation,
            "model_us": round(model_us, 3),
            "wall_s_per_model_us": self.clock.dilation / 1e6,
            "wall_s": None if wall_s is None else round(wall_s, 3),
            "link_gbps_model": self.spec.link_gbps,
            "link_gbps_wall": self.clock.wall_gbps(self.spec.link_gbps),
            "fabric": {k: fabric[k] for k in (
                "rx_datagrams", "delivered_datagrams", "tx_packets", "trims", "ecn_marks",
                "drops", "rejected", "rejected_malformed", "rejected_unknown_source",
                "rejected_spoofed", "rejected_no_plane", "rejected_no_host", "send_errors",
                "lag_max_us", "lag_mean_us")},
            "hosts": hosts,
            # datagrams the kernel dropped on full socket buffers: losses the model did not
            # make (None where /proc/net/udp is not available)
            "kernel_drops": None if None in kernel else sum(kernel),  # type: ignore[arg-type]
            "host_rejections": next((h.first_rejection for h in self.nics
                                     if h.first_rejection), None),
            "pcap_packets": self.pcap.count if self.pcap is not None else None,
        }

    # ----------------------------------------------------------------- teardown
    def close(self) -> None:
        """Close every socket and task and the loop (idempotent; safe after a failure)."""
        if self.closed:
            return
        self.closed = True
        loop = self.loop
        try:
            if not loop.is_closed():
                loop.run_until_complete(self._close_all())
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            if self.pcap is not None:
                self.pcap.close()
            if not loop.is_closed():
                loop.close()

    async def _close_all(self) -> None:
        for host in self.nics:
            await host.close()
        await self.fabric.close()

    def __enter__(self) -> LiveStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
