"""Live-runtime benchmark: one MRC connection through the user-space fabric, against a raw
asyncio UDP relay on the same loopback, in one run.

* **fabric path**: host h0's MRC QP writes 1 MB messages to h2 for ``--seconds`` of wall
  clock; every packet is encoded, sent as a datagram to the fabric, forwarded hop by hop
  (4 links, queues, shift-and-forward) and delivered to h2's socket, which decodes, places and
  acknowledges it. Links are made fast enough (``--link-gbps``) and timers lax enough that the
  CPU, not the model, sets the pace.
* **raw relay**: sender -> relay -> receiver, 4,240-byte datagrams (a full DATA packet), no
  MRC, no fabric logic; all in one event loop like the live runtime, with a window of
  datagrams in flight so the kernel never drops. Two of them:

  - *raw asyncio relay* (the issue's baseline): an asyncio datagram protocol that forwards
    each datagram asyncio hands it (asyncio reads one per loop turn), endpoints on
    asyncio-dgram (``await recv()``) and plain ``sendto``;
  - *batched relay* (a stricter yardstick): the same, but exactly as efficient as the fabric
    path's plumbing: the relay, like the fabric, and the receiver, like the hosts, read what
    else waits on the socket after each wake-up (the same bounded drain, with UDP GRO where
    the kernel has it: ``mrc.live.udp``), and the sender and the relay send equal-size runs
    with UDP GSO (``mrc.live.gso``) as the hosts and the fabric do.
    Against it, the ratio is what the fabric model, the codec and the QPs cost on their own.
* **fabric forwarding only**: the relay's endpoints blasting pre-encoded MRC DATA packets
  through the live fabric (what the four hops cost, without the QPs).

Reports datagrams per wall second (everything crossing the fabric/relay, and DATA only),
datagrams per CPU second (the machine is shared: this one does not depend on what else runs)
and goodput (payload bytes delivered per wall second; the fabric path also in modelled Gb/s),
and the ratios fabric/relay. Target: the fabric path keeps at least half of the raw relay's
datagram rate.

``--fabric-process`` runs the fabric, and the relay, in a child process of their own (so the
forwarder gets the second core) and compares those two; CPU figures then add both processes.

The first line says which build ran: the compiled core (``pip install .`` builds it) or pure
Python (``MRC_PURE_PYTHON=1`` forces it); compare the two by running the benchmark once each
way.

    python benchmarks/bench_live.py [--seconds 3] [--rounds 3] [--dilation 1000]
                                    [--fabric-process] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import selectors
import socket
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import asyncio_dgram

try:  # the installed mrc (its compiled core, when built) or PYTHONPATH's: that build is measured
    import mrc  # noqa: F401
except ImportError:  # nothing installed: this checkout's sources
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mrc import _build, wire  # noqa: E402
from mrc.live import gso  # noqa: E402
from mrc.live.clock import Clock  # noqa: E402
from mrc.live.fabric import FabricCore  # noqa: E402
from mrc.live.fabric_server import FabricServer  # noqa: E402
from mrc.live.stack import LiveSim, LiveStack  # noqa: E402
from mrc.live.udp import (  # noqa: E402
    MAX_DATAGRAM,
    RX_BATCH,
    read_more,
    release_reads,
    take_reads,
)
from mrc.packet import DATA, Packet, data_bytes  # noqa: E402
from topology import usid  # noqa: E402
from topology.paths import address_for  # noqa: E402
from topology.spec import FabricSpec  # noqa: E402

TARGET_RATIO = 0.5
MTU = 4096
DATAGRAM = data_bytes(MTU)  # 4,240 bytes: what a full DATA packet is on the wire


# ====================================================================== child process
def _child_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def _serve_pipe(loop: asyncio.AbstractEventLoop, conn: Connection,
                counters: Any) -> None:
    """Answer the parent until it says stop: ``"stats"`` -> (datagrams, DATA, CPU seconds)."""
    stop = loop.create_future()

    def on_message() -> None:
        message = conn.recv()
        if message == "stats":
            conn.send((*counters(), time.process_time()))
        elif not stop.done():
            stop.set_result(None)

    loop.add_reader(conn.fileno(), on_message)
    loop.run_until_complete(stop)
    loop.remove_reader(conn.fileno())


def _fabric_child(spec: FabricSpec, seed: int, dilation: float, origin: float,
                  hosts: list[tuple[int, tuple[str, int]]], conn: Connection) -> None:
    """A live fabric in its own process, on the parent's modelled clock (same origin)."""
    loop = _child_loop()
    core = FabricCore(spec, seed=seed)
    server = FabricServer(core, Clock(dilation, origin=origin))
    try:
        conn.send(loop.run_until_complete(server.start()))
        for index, address in hosts:
            server.register_host(index, address)
        _serve_pipe(loop, conn, lambda: (core.rx_datagrams, sum(core.ingress_data),
                                         core.totals()["drops"]))
        loop.run_until_complete(server.close())
    finally:
        loop.close()


def _relay_child(target: tuple[str, int], drain: int, conn: Connection) -> None:
    """The raw relay in its own process."""
    loop = _child_loop()
    try:
        sock = _udp()
        _, relay = loop.run_until_complete(
            loop.create_datagram_endpoint(lambda: _Relay(drain), sock=sock))
        relay.start(loop, target, sock)
        conn.send(sock.getsockname())
        _serve_pipe(loop, conn, lambda: (relay.count, relay.count, 0))
        relay.close(loop)
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


class _Child:
    """A forwarder process (fabric or relay) and the pipe that reads its counters."""

    def __init__(self, target: Any, *args: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(*args, child_conn), daemon=True)
        self.proc.start()
        child_conn.close()
        self.address: tuple[str, int] = tuple(self.conn.recv())  # type: ignore[assignment]

    def stats(self) -> tuple[int, int, int, float]:
        self.conn.send("stats")
        return self.conn.recv()  # type: ignore[no-any-return]

    def close(self) -> None:
        try:
            self.conn.send("stop")
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


# ====================================================================== fabric path
def bench_fabric(seconds: float, dilation: float, link_gbps: float, window_kb: int,
                 message_kb: int, fabric_process: bool = False) -> dict[str, Any]:
    spec = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2, link_gbps=link_gbps,
                      buffer_bytes=8 << 20, header_queue_bytes=1 << 20,
                      ecn_threshold_bytes=8 << 20, mtu_bytes=MTU)
    params = {"ev_timeout_us": 2000.0, "probe_interval_us": 1000.0,
              "cc": {"algorithm": "fixed", "fixed_window_bytes": window_kb * 1024}}
    stack = LiveStack(spec, seed=1, bin_ps=10**9, transport_name="mrc", dilation=dilation)
    child: _Child | None = None
    try:
        conn = stack.open("mrc", 0, 2, params)
        size = message_kb * 1024
        assert isinstance(stack.sim, LiveSim)
        stack.sim.start()  # modelled time zero now: a fabric process shares this origin
        if fabric_process:
            # The stack's own fabric keeps only the modelled-time scheduler; the packets go
            # to the fabric process (time.monotonic is the loop's clock, system-wide).
            child = _Child(_fabric_child, spec, 1, dilation, stack.clock.origin,
                           [(h.index, h.address) for h in stack.nics])
            for host in stack.nics:
                host.fabric_addr = child.address

        def post(now: int = 0, ok: bool = True) -> None:
            conn.write(stack.sim.now, size, post)

        def counters() -> tuple[int, int, int, float]:
            if child is not None:
                return child.stats()
            core = stack.core
            return core.rx_datagrams, sum(core.ingress_data), core.totals()["drops"], 0.0

        start = stack.sim.now
        warm = start + stack.clock.model_ps(0.5)
        end = warm + stack.clock.model_ps(seconds)
        for _ in range(4):
            stack.sim.at(start, lambda _: post())
        stack.sim.run(warm)
        rx0, data0, _, child_c0 = counters()
        placed0 = stack.recorder.bytes_delivered
        t0, c0 = time.perf_counter(), time.process_time()
        stack.sim.run(end)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rx1, data1, drops, child_c1 = counters()
        cpu += child_c1 - child_c0
        model_s = (stack.sim.now - warm) / 1e12
        datagrams = rx1 - rx0
        data = data1 - data0
        placed = stack.recorder.bytes_delivered - placed0
        return {
            "datagrams_per_s": datagrams / wall, "data_datagrams_per_s": data / wall,
            "goodput_mbps_wall": placed * 8 / wall / 1e6,
            "goodput_gbps_model": placed * 8 / model_s / 1e9,
            "messages_verified": conn.messages_ok, "messages_corrupt": conn.messages_corrupt,
            "retransmissions": conn.sender.stats.retransmissions,
            "fabric_drops": drops, "wall_s": wall, "cpu_s": cpu,
            "datagrams_per_cpu_s": datagrams / cpu if cpu > 0 else 0.0,
            "cpu_us_per_datagram": cpu / max(datagrams, 1) * 1e6,
        }
    finally:
        if child is not None:
            child.close()
        stack.close()


# ====================================================================== raw relay
class _Relay(asyncio.DatagramProtocol):
    """Forward every datagram from the sender to the receiver (the fabric minus its logic).

    ``drain``: datagrams read from the socket after each wake-up, as the fabric does (0: the
    plain asyncio relay, one datagram per loop turn)."""

    def __init__(self, drain: int = RX_BATCH) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.target: tuple[str, int] | None = None
        self.sock: socket.socket | None = None
        self.count = 0
        self.drain = drain
        self.reader: socket.socket | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def start(self, loop: asyncio.AbstractEventLoop, target: tuple[str, int],
              sock: socket.socket) -> None:
        """Forward to ``target``; the batched relay reads as the fabric does (with UDP GRO
        where the kernel has it: one read per GSO run)."""
        self.target, self.sock = target, sock
        if self.drain and self.transport is not None:
            self.reader = take_reads(sock, loop, self._readable, self.transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        transport, target, sock = self.transport, self.target, self.sock
        assert transport is not None and target is not None and sock is not None
        if not self.drain:
            self.count += 1
            transport.sendto(data, target)
            return
        # read what else waits, as the fabric does, and forward it as the fabric sends what
        # one run delivers: equal-size runs in one GSO send each
        burst = [(data, addr)]
        read_more(sock, burst, False, self.drain)
        self._forward(burst)

    def _readable(self, reader: socket.socket) -> None:
        burst: list[tuple[bytes, Any]] = []
        read_more(reader, burst, True, self.drain + 1)
        self._forward(burst)

    def _forward(self, burst: list[tuple[bytes, Any]]) -> None:
        transport, target, sock = self.transport, self.target, self.sock
        assert transport is not None and target is not None and sock is not None
        self.count += len(burst)
        _send_batch(sock, [data for data, _ in burst], target,
                    lambda d: transport.sendto(d, target))

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        release_reads(loop, self.reader)
        self.reader = None
        if self.transport is not None:
            self.transport.close()


def _send_batch(sock: socket.socket, batch: list[bytes], target: tuple[str, int],
                one: Any) -> None:
    """Datagrams in GSO runs where the kernel takes them, else one by one (``one(data)``)."""
    for run in gso.runs(batch):
        try:
            if len(run) > 1 and gso.send_run(sock, run, len(run[0]), target):
                continue
        except gso.Refused:
            pass
        for data in run:
            one(data)


def _udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


async def _relay(seconds: float, window: int, through_fabric: bool,
                 own_process: bool, drain: int) -> dict[str, Any]:
    """Blast ``window`` datagrams in flight from a sender to a receiver through a forwarder:
    the relay, or (``through_fabric``) the live fabric with pre-encoded MRC packets;
    ``own_process``: the forwarder runs in a child process; ``drain``: datagrams the relay
    and the receiver read after each wake-up (0: asyncio's own one-per-loop-turn reads)."""
    loop = asyncio.get_running_loop()
    send_sock, recv_sock = _udp(), _udp()
    receiver = await asyncio_dgram.from_socket(recv_sock)
    fabric: FabricServer | None = None
    relay: _Relay | None = None
    child: _Child | None = None
    if through_fabric:
        spec = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2,
                          link_gbps=1600.0, mtu_bytes=MTU)
        hosts = [(0, send_sock.getsockname()), (2, recv_sock.getsockname())]
        if own_process:
            child = _Child(_fabric_child, spec, 0, 1.0, loop.time(), hosts)
            target = child.address
        else:
            fabric = FabricServer(FabricCore(spec), Clock(1.0, time_fn=loop.time))
            target = await fabric.start()
            for index, address in hosts:
                fabric.register_host(index, address)
        rng = random.Random(1)
        payloads = [wire.encode(Packet(
            DATA, 0, 2, 7, i, ev=usid.make_ev(i % 4, i // 4 % 2), msg_id=1, offset=0,
            length=MTU, msg_len=MTU, payload=rng.randbytes(MTU), plane=i % 4,
            da=address_for(spec, 0, 2, i % 4, i // 4 % 2))) for i in range(64)]
    else:
        if own_process:
            child = _Child(_relay_child, recv_sock.getsockname(), drain)
            target = child.address
        else:
            relay_sock = _udp()
            _, relay = await loop.create_datagram_endpoint(lambda: _Relay(drain),
                                                           sock=relay_sock)
            relay.start(loop, recv_sock.getsockname(), relay_sock)
            target = relay_sock.getsockname()
        payloads = [bytes(DATAGRAM)]
    state = {"inflight": 0, "received": 0, "sent": 0, "stop": False}

    def send_one(data: bytes) -> None:
        try:
            send_sock.sendto(data, target)
        except BlockingIOError:
            return
        state["sent"] += 1
        state["inflight"] += 1

    def fill() -> None:
        if drain and not state["stop"]:  # the batched sender: GSO runs, as the hosts send
            batch = [payloads[(state["sent"] + i) % len(payloads)]
                     for i in range(window - state["inflight"])]
            for run in gso.runs(batch):
                try:
                    if len(run) > 1 and gso.send_run(send_sock, run, len(run[0]), target):
                        state["sent"] += len(run)
                        state["inflight"] += len(run)
                        continue
                except gso.Refused:
                    pass
                for data in run:
                    send_one(data)
            return
        while state["inflight"] < window and not state["stop"]:
            before = state["sent"]
            send_one(payloads[state["sent"] % len(payloads)])
            if state["sent"] == before:
                break

    def got() -> None:
        state["received"] += 1
        state["inflight"] -= 1
        if state["inflight"] <= window // 2:
            fill()  # refill like a window that opens on ACKs

    async def receive() -> None:
        while True:
            await receiver.recv()
            got()
            for _ in range(drain):  # then read what else waits, as the hosts do
                try:
                    recv_sock.recvfrom(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                got()

    def child_cpu() -> float:
        return child.stats()[-1] if child is not None else 0.0

    def readable(sock: socket.socket) -> None:
        burst: list[tuple[bytes, Any]] = []
        read_more(sock, burst, True, drain + 1)
        for _ in burst:
            got()

    # the batched receiver reads as the hosts do (with UDP GRO where the kernel has it)
    transport = getattr(receiver, "_transport", None)  # (asyncio-dgram's)
    reader = take_reads(recv_sock, loop, readable, transport) if drain and transport else None
    task = loop.create_task(receive()) if reader is None else None
    try:
        fill()
        await asyncio.sleep(0.5)
        r0, t0, c0, k0 = state["received"], time.perf_counter(), time.process_time(), child_cpu()
        await asyncio.sleep(seconds)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0 + child_cpu() - k0
        received = state["received"] - r0
    finally:
        state["stop"] = True
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, asyncio_dgram.TransportClosed):
                pass
        release_reads(loop, reader)
        receiver.close()
        send_sock.close()
        if relay is not None:
            relay.close(loop)
        if fabric is not None:
            await fabric.close()
        if child is not None:
            child.close()
        await asyncio.sleep(0)
    return {"datagrams_per_s": received / wall, "data_datagrams_per_s": received / wall,
            "goodput_mbps_wall": received * MTU * 8 / wall / 1e6, "wall_s": wall,
            "cpu_s": cpu, "datagrams_per_cpu_s": received / cpu if cpu > 0 else 0.0,
            "cpu_us_per_datagram": cpu / max(received, 1) * 1e6}


def bench_relay(seconds: float, window: int, through_fabric: bool = False,
                own_process: bool = False, drain: int = RX_BATCH) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(
            selectors.SelectSelector())) as runner:
        return runner.run(_relay(seconds, window, through_fabric, own_process, drain))


# ====================================================================== main
def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median datagram rate (one coherent row, not mixed columns)."""
    ordered = sorted(rows, key=lambda r: r["datagrams_per_s"])
    return ordered[len(ordered) // 2]


def build_label() -> str:
    """Which build of the core ran: the compiled one (``pip install .``), or pure Python."""
    return _build.describe()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="measured wall seconds per measurement and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--dilation", type=float, default=1000.0)
    parser.add_argument("--link-gbps", type=float, default=1600.0,
                        help="modelled link rate, high so the CPU sets the pace")
    parser.add_argument("--window-kb", type=int, default=2048, help="MRC's fixed window")
    parser.add_argument("--message-kb", type=int, default=1024)
    parser.add_argument("--relay-window", type=int, default=256,
                        help="raw relay: datagrams in flight")
    parser.add_argument("--fabric-process", action="store_true",
                        help="run the fabric (and the relay) in a process of its own")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args(argv)
    own = args.fabric_process
    # Interleaved rounds, medians: the three measurements see the same machine load.
    runs: dict[str, list[dict[str, Any]]] = {"fabric": [], "relay": [], "batched": [],
                                             "forward": []}
    for _ in range(args.rounds):
        runs["fabric"].append(bench_fabric(args.seconds, args.dilation, args.link_gbps,
                                           args.window_kb, args.message_kb, own))
        runs["relay"].append(bench_relay(args.seconds, args.relay_window, own_process=own,
                                         drain=0))
        runs["batched"].append(bench_relay(args.seconds, args.relay_window, own_process=own))
        runs["forward"].append(bench_relay(args.seconds, args.relay_window,
                                           through_fabric=True, own_process=own))
    fabric, relay, batched, forward = (_median(runs[k])
                                       for k in ("fabric", "relay", "batched", "forward"))
    ratio = fabric["datagrams_per_s"] / relay["datagrams_per_s"]
    data_ratio = fabric["data_datagrams_per_s"] / relay["data_datagrams_per_s"]
    batched_ratio = fabric["datagrams_per_s"] / batched["datagrams_per_s"]
    forward_ratio = forward["datagrams_per_s"] / batched["datagrams_per_s"]
    cpu_ratio = fabric["datagrams_per_cpu_s"] / relay["datagrams_per_cpu_s"]
    result = {"fabric": {k: round(v, 1) if isinstance(v, float) else v
                         for k, v in fabric.items()},
              "relay": {k: round(v, 1) for k, v in relay.items()},
              "batched_relay": {k: round(v, 1) for k, v in batched.items()},
              "fabric_forwarding_only": {k: round(v, 1) for k, v in forward.items()},
              "ratio_datagrams": round(ratio, 3), "ratio_data_datagrams": round(data_ratio, 3),
              "ratio_datagrams_per_cpu_s": round(cpu_ratio, 3),
              "ratio_to_batched_relay": round(batched_ratio, 3),
              "ratio_forwarding_only_to_batched": round(forward_ratio, 3),
              "target_ratio": TARGET_RATIO, "target_met": ratio >= TARGET_RATIO,
              "dilation": args.dilation, "fabric_process": own, "rounds": args.rounds,
              "seconds": args.seconds, "build": build_label()}
    if not args.json:
        print(f"build: {result['build']}")
        f, r, w = result["fabric"], result["relay"], result["fabric_forwarding_only"]
        b = result["batched_relay"]
        where = "in its own process" if own else "in the hosts' process"
        print(f"fabric path (1 MRC connection, 4 hops, fabric {where}): "
              f"{f['datagrams_per_s']:,.0f} datagrams/s ({f['data_datagrams_per_s']:,.0f} "
              f"DATA/s; {f['datagrams_per_cpu_s']:,.0f} per CPU s), goodput "
              f"{f['goodput_mbps_wall']:,.0f} Mb/s wall = {f['goodput_gbps_model']:,.1f} Gb/s "
              f"modelled at x{args.dilation:g}; {f['messages_verified']} messages verified, "
              f"{f['messages_corrupt']} corrupt")
        print(f"raw asyncio UDP relay: {r['datagrams_per_s']:,.0f} datagrams/s "
              f"({r['datagrams_per_cpu_s']:,.0f} per CPU s), goodput "
              f"{r['goodput_mbps_wall']:,.0f} Mb/s wall")
        print(f"batched relay (the fabric path's own read batching and GSO sends): "
              f"{b['datagrams_per_s']:,.0f} datagrams/s ({b['datagrams_per_cpu_s']:,.0f} per "
              f"CPU s), goodput {b['goodput_mbps_wall']:,.0f} Mb/s wall")
        print(f"fabric forwarding only (pre-encoded MRC packets, no QPs): "
              f"{w['datagrams_per_s']:,.0f} datagrams/s ({w['datagrams_per_cpu_s']:,.0f} per "
              f"CPU s), goodput {w['goodput_mbps_wall']:,.0f} Mb/s wall")
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        print(f"ratio fabric path/raw relay: {ratio:.2f} (DATA only: {data_ratio:.2f}; per "
              f"CPU second: {cpu_ratio:.2f}); target >= {TARGET_RATIO}: {verdict}")
        print(f"stricter: fabric path/batched relay {batched_ratio:.2f}; fabric forwarding "
              f"only/batched relay {forward_ratio:.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
