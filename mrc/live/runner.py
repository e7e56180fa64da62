"""Run a lab live: the labs layer's runner, with a stack of real sockets and real time.

The labs runner (``mrc.labs.runner``) drives a *stack* through a lab: it opens connections,
schedules the workload and the fault schedule with ``stack.sim.at``, advances time with
``stack.sim.run(until)`` and reads tables at the end. :class:`LiveStack` is that stack for
the live runtime, so workloads, fault schedules, summaries, CSVs and plots are the very same
code as in simulation:

* ``stack.sim`` is a :class:`LiveSim`: ``run(until)`` runs the asyncio loop until the dilated
  wall clock reaches ``until``; ``at(t, fn)`` puts ``fn`` in the fabric's modelled-time event
  heap, so workload steps and faults happen at their exact modelled time, in order with the
  packets; ``now`` is the clock.
* Connections are the simulator's (``mrc.sim.stack``) with real payloads: seeded bytes per
  message, a SHA-256 taken at post time, and the receiver's reassembled bytes checked against
  it (``messages_verified`` / ``messages_corrupt``).
* Hosts are :class:`~mrc.live.host.LiveHost` (one asyncio-dgram socket each), the fabric a
  :class:`~mrc.live.fabric.FabricServer`; faults run on the fabric's network (``stack.net``,
  the simulator's own), drains go to the transports, exactly as the lab says.

:func:`run_live` is what ``mrc-lab run LAB --runtime live`` calls. One transport runs at a
time, each on a fresh stack, so they do not compete for the CPU.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import selectors
import struct
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mrc.labs.errors import LabError
from mrc.labs.model import Collective, ConnectionMatrix, Lab, Permutation, WriteBw
from mrc.live.clock import Clock
from mrc.live.fabric import FabricCore, FabricServer, check_bind_address
from mrc.live.host import LiveHost
from mrc.packet import data_bytes
from mrc.pcap import PcapWriter
from mrc.sim.qpn import first_qpn
from mrc.sim.recorder import Recorder
from mrc.sim.stack import ConnectionFactory, MrcConnection, RcConnectionAdapter, SimStack
from mrc.transport.base import EVENT_MESSAGE_COMPLETED, QueuePair, TransportEvent
from mrc.units import PS_PER_US
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

RUNTIME = "live"
#: Full-size DATA datagrams per wall second that one Python process moves comfortably while
#: keeping its own latency small against the modelled one (what ``auto`` dilation aims at).
AUTO_BUDGET_PPS = 1_500
DILATION_STEPS = (1, 2, 5)
MIN_AUTO_DILATION = 1_000


# ====================================================================== the modelled clock
class LiveRunError(RuntimeError):
    """A callback failed during a live run (a bug: the traceback is chained)."""


class LiveSim:
    """What the labs layer calls ``stack.sim``, on the wall clock (same surface as
    ``mrc.sim.engine.Simulator``: ``now``, ``at``, ``after``, ``stop``, ``run``).

    Modelled time starts when ``run`` is first called; until then ``now`` is 0 and ``at``
    only records. Callbacks run from the fabric's event heap at their exact modelled time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock, fabric: FabricServer,
                 seed: int) -> None:
        self.loop = loop
        self.clock = clock
        self.fabric = fabric
        self.seed = seed
        self.rng = random.Random(seed)
        self.started = False
        self._floor = 0
        self._in_callback: int | None = None
        self._pending: list[tuple[int, Callable[[Any], None], Any]] = []
        self._stopped = False
        self._wake: asyncio.Future[None] | None = None
        self.error: BaseException | None = None

    @property
    def now(self) -> int:
        """Modelled picoseconds: the event's own time inside a callback, else the clock."""
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
        if not self.started:
            self._pending.append((time_ps, fn, arg))
            return
        self.fabric.call_at(time_ps, self._call, (fn, arg))

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def _call(self, job: tuple[Callable[[Any], None], Any]) -> None:
        fn, arg = job
        self._in_callback = self.fabric.core.now
        try:
            fn(arg)
        finally:
            self._in_callback = None

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
        if not self._stopped and self._floor < until_ps:
            self._floor = until_ps  # float rounding of the clock must not read as a stop
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

    The sender's QP gives the checksum a message must have (``expected_checksum`` of its
    bytes: SHA-256, first 64 bits) and the receiving QP reports the SHA-256 of the bytes it
    placed, so each message is hashed once at each end and never again here."""

    def __init__(self, stack: LiveStack, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, src, dst, params)  # type: ignore[arg-type]
        self._sha: dict[int, int] = {}

    def _post(self, now: int, msg_id: int, size: int) -> None:
        stack: LiveStack = self.stack  # type: ignore[assignment]
        payload = stack.payloads.message(self.src, self.sender.qpn, msg_id, size)
        self._sha[msg_id] = self.sender.expected_checksum(msg_id, size, payload)
        stack.nics[self.src].post(self.sender, msg_id, size, payload)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        if event.kind == EVENT_MESSAGE_COMPLETED and qp is self.receiver:
            msg_id = int(event.detail["msg_id"])  # type: ignore[call-overload]
            want = self._sha.pop(msg_id, None)
            data = event.detail.get("data")
            ok = (want is not None and isinstance(data, bytes | bytearray)
                  and event.detail.get("checksum") == want)
            self._completed(event.time_ps, msg_id, ok)
            return
        super().on_event(event, qp)


class LiveRcConnection(RcConnectionAdapter):
    """The simulator's NCCL-style RC connection, carrying real bytes checked by SHA-256.

    The RC connection hashes the bytes it is given at post time and the bytes it reassembled
    at completion (SHA-256, first 64 bits, as MRC does) and says whether they match
    (``ok``); this class only makes sure the message was one it posted with real bytes, so
    each message is hashed once at each end and never again here."""

    def __init__(self, stack: LiveStack, src: int, dst: int, params: dict[str, Any]) -> None:
        super().__init__(stack, src, dst, params)  # type: ignore[arg-type]
        self._posted: set[int] = set()

    def _post(self, now: int, msg_id: int, size: int) -> None:
        stack: LiveStack = self.stack  # type: ignore[assignment]
        payload = stack.payloads.message(self.src, self.conn.qpn_base, msg_id, size)
        self._posted.add(msg_id)
        host = stack.nics[self.src]
        self.conn.post_write(host.now(), msg_id, size, payload=payload)
        for qp in self.conn.requesters:
            host.poke(qp)

    def on_event(self, event: TransportEvent, qp: QueuePair) -> None:
        for ev in self.conn.events:  # the connection reassembled the stripes: check them
            if ev.kind == EVENT_MESSAGE_COMPLETED:
                msg_id = int(ev.detail["msg_id"])  # type: ignore[call-overload]
                posted = msg_id in self._posted
                self._posted.discard(msg_id)
                ev.detail["ok"] = bool(ev.detail.get("ok")) and posted and isinstance(
                    ev.detail.get("data"), bytes | bytearray)
        super().on_event(event, qp)


# ====================================================================== the stack
class LiveStack(SimStack):
    """Fabric server + live hosts + recorder for one transport of one live lab run.

    Builds its own event loop (a ``select`` selector: timeouts to the microsecond, where
    epoll rounds up to the millisecond) and binds every socket at once; :meth:`close`
    releases all of it. The inherited parts (opening connections, drains, event rows,
    timeseries) are the simulator stack's.
    """

    connection_kinds: ClassVar[dict[str, ConnectionFactory]] = {
        "mrc": LiveMrcConnection, "rc": LiveRcConnection}

    def __init__(self, spec: FabricSpec, seed: int = 0, bin_ps: int = 10 * PS_PER_US,
                 transport_name: str = "mrc", *, dilation: float = 10_000.0,
                 pcap: str | Path | None = None, pcap_every_hop: bool = False,
                 bind_host: str = "127.0.0.1", allow_non_loopback: bool = False,
                 trace: int = 0) -> None:
        check_bind_address(bind_host, allow_non_loopback)
        self.spec = spec
        self.seed = seed
        self.payloads = PayloadPool(seed)
        self.transport_name = transport_name
        self.connections = []
        self._owner = {}
        self._rows = []
        self._next_qpn = first_qpn(seed)  # seeded, as in the simulator's stack
        self.closed = False
        self.loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self.loop.set_exception_handler(self._loop_error)
        self.clock = Clock(dilation, time_fn=self.loop.time)
        self.recorder = Recorder(spec.planes, bin_ps)
        self.core = FabricCore(spec, seed=seed, nic_link=self._nic_link)
        self.core.observer = self._fabric_event
        self.net = self.core.net  # the simulator's network, on the fabric's event heap
        self.fabric = FabricServer(self.core, self.clock, host=bind_host,
                                   allow_non_loopback=allow_non_loopback)
        self.live_sim = LiveSim(self.loop, self.clock, self.fabric, seed)
        self.sim = self.live_sim
        self.nics: list[LiveHost] = [  # type: ignore[assignment]
            LiveHost(h, spec, self.clock, bind_host=bind_host,
                     allow_non_loopback=allow_non_loopback, on_event=self._on_qp_event,
                     on_placed=self.recorder.placed, on_count=self._count,
                     sync=self.fabric.run_due, trace=trace)
            for h in range(spec.hosts)]
        self.pcap: PcapWriter | None = None
        self.wall_started: float | None = None
        try:
            if pcap is not None:
                Path(pcap).parent.mkdir(parents=True, exist_ok=True)
                self.pcap = PcapWriter(pcap)
                self.core.set_tap(self._capture, everywhere=pcap_every_hop)
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

    def _count(self, name: str, now: int) -> None:
        self.recorder.count(name, now)

    def _capture(self, time_ps: int, port: str, buf: bytearray) -> None:
        if self.pcap is not None:
            self.pcap.write(time_ps, buf)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.live_sim.fail(exc if exc is not None else RuntimeError(context.get("message")))

    # ----------------------------------------------------------------- results
    def fabric_counts(self) -> tuple[int, int]:
        stats = self.fabric.stats()
        return stats["trims"], stats["drops"]

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


# ====================================================================== dilation
def workload_hosts(lab: Lab) -> int:
    """How many NICs the workload can make send at once (bounds the datagram rate)."""
    w = lab.workload
    if isinstance(w, WriteBw):
        senders = {s for s, _ in w.pairs}
        if w.bidirectional:
            senders |= {d for _, d in w.pairs}
        return len(senders)
    if isinstance(w, Collective | Permutation):
        return len(w.hosts)
    if isinstance(w, ConnectionMatrix):
        return len({f.src for f in w.flows}) or 1
    return lab.fabric.hosts


def auto_dilation(lab: Lab, budget_pps: float = AUTO_BUDGET_PPS) -> float:
    """The smallest 1-2-5 factor (>= 1000) that keeps full-rate DATA of every sending NIC
    port within ``budget_pps`` datagrams per wall second."""
    spec = lab.fabric
    wire_bits = (data_bytes(spec.mtu_bytes) + ETHERNET_OVERHEAD_BYTES) * 8
    pps = workload_hosts(lab) * spec.planes * spec.link_bps / wire_bits
    need = max(pps / budget_pps, MIN_AUTO_DILATION)
    exp = math.floor(math.log10(need))
    for e in (exp, exp + 1):
        for step in DILATION_STEPS:
            if step * 10 ** e >= need:
                return float(step * 10 ** e)
    return float(10 ** (exp + 1))


# ====================================================================== the entry point
def _pcap_path(pcap: str | Path | None, name: str, several: bool) -> Path | None:
    if pcap is None:
        return None
    path = Path(pcap)
    if not several:
        return path
    return path.with_name(f"{path.stem}.{name}{path.suffix or '.pcap'}")


def _make_stack(fabric: FabricSpec, seed: int, bin_ps: int, name: str, *,
                made: list[LiveStack], **options: Any) -> LiveStack:
    """The labs runner's stack factory for live runs (remembers what it made, to close it)."""
    stack = LiveStack(fabric, seed, bin_ps, name, **options)
    stack.wall_started = time.perf_counter()
    made.append(stack)
    return stack


def run_live(path_or_spec: Any, *, out: str | Path | None = None, seed: int | None = None,
             transports: str | Sequence[str] | None = None, bin_us: float | None = None,
             progress: bool = True, overrides: Mapping[str, Any] | None = None,
             dilation: float | None = None, pcap: str | Path | None = None,
             pcap_every_hop: bool = False, bind_host: str = "127.0.0.1",
             allow_non_loopback: bool = False, trace: int = 0,
             keep_stacks: list[LiveStack] | None = None) -> Any:
    """Run a lab in the live runtime; same tables and files as a simulated run, with
    ``runtime: "live"`` and a ``live`` section (dilation, wall and modelled units, fabric and
    host counters). ``pcap``: capture file (``NAME.<transport>.pcap`` when several run).
    ``keep_stacks``: a list that receives the (closed) stacks, for tests to inspect."""
    from mrc.labs import runner as labs_runner

    wall0 = time.perf_counter()
    lab = labs_runner.prepare(path_or_spec, seed=seed, bin_us=bin_us, overrides=overrides)
    specs = labs_runner.select_transports(lab, transports)
    if dilation is None:
        factor = auto_dilation(lab)
    else:
        if isinstance(dilation, bool) or not isinstance(dilation, int | float) or not (
                math.isfinite(dilation) and dilation > 0):
            raise LabError(f"must be a positive number, got {dilation!r}", "--dilation")
        factor = float(dilation)
    try:
        check_bind_address(bind_host, allow_non_loopback)
    except PermissionError as exc:
        raise LabError(str(exc), "--bind") from None
    runs = []
    live_info: dict[str, Any] = {}
    for spec in specs:
        made: list[LiveStack] = []
        factory = functools.partial(
            _make_stack, made=made, dilation=factor,
            pcap=_pcap_path(pcap, spec.name, len(specs) > 1), pcap_every_hop=pcap_every_hop,
            bind_host=bind_host, allow_non_loopback=allow_non_loopback, trace=trace)
        try:
            run = labs_runner.run_transport(lab, spec, factory, progress=progress)
        finally:
            for stack in made:
                stack.close()
                if keep_stacks is not None:
                    keep_stacks.append(stack)
        runs.append(run)
        live_info[spec.name] = run.totals.get("live")
    result = labs_runner.assemble(lab, runs, wall_s=time.perf_counter() - wall0,
                                  runtime=RUNTIME)
    for run in runs:
        entry = result.summary["transports"][run.name]
        entry["messages_verified"] = int(run.totals.get("messages_verified", 0))
        entry["messages_corrupt"] = int(run.totals.get("messages_corrupt", 0))
        entry["live"] = live_info[run.name]
    result.summary["live"] = {
        "dilation": factor,
        "wall_s_per_model_us": factor / 1e6,
        "link_gbps_model": lab.fabric.link_gbps,
        "link_gbps_wall": lab.fabric.link_gbps / factor,
        "wall_s_per_transport": round(lab.run.duration_us * factor / 1e6, 3),
        "bind": bind_host,
        "pcap": None if pcap is None else [str(_pcap_path(pcap, s.name, len(specs) > 1))
                                           for s in specs],
    }
    if out is not None:
        result.write(out)
    return result
