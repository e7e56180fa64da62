"""Live-runtime benchmark: one MRC connection through the user-space fabric, against a raw
asyncio UDP relay on the same loopback, in one run.

* **fabric path**: host h0's MRC QP writes 1 MB messages to h2 for ``--seconds`` of wall
  clock; every packet is encoded, sent as a datagram to the fabric, forwarded hop by hop
  (4 links, queues, shift-and-forward) and delivered to h2's socket, which decodes, places and
  acknowledges it. Links are made fast enough (``--link-gbps``) and timers lax enough that the
  CPU, not the model, sets the pace.
* **raw relay**: sender -> relay -> receiver, 4,240-byte datagrams (a full DATA packet), no
  MRC, no fabric logic: the relay is the same kind of asyncio datagram protocol as the
  fabric, the endpoints the same kind of sockets as the hosts (asyncio-dgram receive, plain
  ``sendto``), all in one event loop like the live runtime, with a window of datagrams in
  flight so the kernel never drops.

Reports datagrams per wall second (everything crossing the fabric/relay, and DATA only) and
goodput (payload bytes delivered per wall second; the fabric path also in modelled Gb/s), and
the ratio fabric/relay. Target: the fabric path keeps at least half of the relay's rate.

    python benchmarks/bench_live.py [--seconds 3] [--rounds 3] [--dilation 1000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import selectors
import socket
import time
from typing import Any

import asyncio_dgram

from mrc import wire
from mrc.live.clock import Clock
from mrc.live.fabric import FabricCore, FabricServer
from mrc.live.runner import LiveStack
from mrc.packet import DATA, Packet, data_bytes
from topology import usid
from topology.paths import address_for
from topology.spec import FabricSpec

TARGET_RATIO = 0.5
MTU = 4096
DATAGRAM = data_bytes(MTU)  # 4,240 bytes: what a full DATA packet is on the wire


# ====================================================================== fabric path
def bench_fabric(seconds: float, dilation: float, link_gbps: float, window_kb: int,
                 message_kb: int) -> dict[str, Any]:
    spec = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2, link_gbps=link_gbps,
                      buffer_bytes=8 << 20, header_queue_bytes=1 << 20,
                      ecn_threshold_bytes=8 << 20, mtu_bytes=MTU)
    params = {"rto_floor_us": 2000.0, "probe_interval_us": 1000.0,
              "cc": {"algorithm": "fixed", "fixed_window_bytes": window_kb * 1024}}
    stack = LiveStack(spec, seed=1, bin_ps=10**9, transport_name="mrc", dilation=dilation)
    try:
        conn = stack.open("mrc", 0, 2, params)
        size = message_kb * 1024

        def post(now: int = 0, ok: bool = True) -> None:
            conn.write(stack.sim.now, size, post)

        warm = stack.clock.model_ps(0.5)
        end = warm + stack.clock.model_ps(seconds)
        for _ in range(4):
            stack.sim.at(0, lambda _: post())
        stack.sim.run(warm)
        rx0 = stack.core.rx_datagrams
        data0 = sum(stack.core.ingress_data)
        placed0 = stack.recorder.bytes_delivered
        t0, c0 = time.perf_counter(), time.process_time()
        stack.sim.run(end)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        model_s = (stack.sim.now - warm) / 1e12
        datagrams = stack.core.rx_datagrams - rx0
        data = sum(stack.core.ingress_data) - data0
        placed = stack.recorder.bytes_delivered - placed0
        return {
            "datagrams_per_s": datagrams / wall, "data_datagrams_per_s": data / wall,
            "goodput_mbps_wall": placed * 8 / wall / 1e6,
            "goodput_gbps_model": placed * 8 / model_s / 1e9,
            "messages_verified": conn.messages_ok, "messages_corrupt": conn.messages_corrupt,
            "retransmissions": conn.sender.stats.retransmissions,
            "fabric_drops": stack.core.totals()["drops"], "wall_s": wall,
            "cpu_us_per_datagram": cpu / max(datagrams, 1) * 1e6,
        }
    finally:
        stack.close()


# ====================================================================== raw relay
class _Relay(asyncio.DatagramProtocol):
    """Forward every datagram from the sender to the receiver (the fabric minus its logic)."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.target: tuple[str, int] | None = None
        self.count = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        self.count += 1
        assert self.transport is not None and self.target is not None
        self.transport.sendto(data, self.target)


async def _relay(seconds: float, window: int, through_fabric: bool) -> dict[str, Any]:
    """Blast ``window`` datagrams in flight from a sender to a receiver through a forwarder:
    the plain relay, or (``through_fabric``) the live fabric with pre-encoded MRC packets."""
    loop = asyncio.get_running_loop()

    def udp() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        return sock

    send_sock, recv_sock = udp(), udp()
    receiver = await asyncio_dgram.from_socket(recv_sock)
    fabric: FabricServer | None = None
    transport = None
    if through_fabric:
        spec = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2,
                          link_gbps=1600.0, mtu_bytes=MTU)
        fabric = FabricServer(FabricCore(spec), Clock(1.0, time_fn=loop.time))
        target = await fabric.start()
        fabric.register_host(0, send_sock.getsockname())
        fabric.register_host(2, recv_sock.getsockname())
        rng = random.Random(1)
        payloads = [wire.encode(Packet(
            DATA, 0, 2, 7, i, ev=usid.make_ev(i % 4, i // 4 % 2), msg_id=1, offset=0,
            length=MTU, msg_len=MTU, payload=rng.randbytes(MTU), plane=i % 4,
            da=address_for(spec, 0, 2, i % 4, i // 4 % 2))) for i in range(64)]
    else:
        relay_sock = udp()
        transport, relay = await loop.create_datagram_endpoint(_Relay, sock=relay_sock)
        relay.target = recv_sock.getsockname()
        target = relay_sock.getsockname()
        payloads = [bytes(DATAGRAM)]
    state = {"inflight": 0, "received": 0, "sent": 0, "stop": False}

    def fill() -> None:
        while state["inflight"] < window and not state["stop"]:
            try:
                send_sock.sendto(payloads[state["sent"] % len(payloads)], target)
            except BlockingIOError:
                break
            state["sent"] += 1
            state["inflight"] += 1

    async def receive() -> None:
        while True:
            await receiver.recv()
            state["received"] += 1
            state["inflight"] -= 1
            if state["inflight"] <= window // 2:
                fill()  # refill like a window that opens on ACKs

    task = loop.create_task(receive())
    fill()
    await asyncio.sleep(0.5)
    r0, t0, c0 = state["received"], time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    received = state["received"] - r0
    state["stop"] = True
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, asyncio_dgram.TransportClosed):
        pass
    receiver.close()
    send_sock.close()
    if transport is not None:
        transport.close()
    if fabric is not None:
        await fabric.close()
    await asyncio.sleep(0)
    return {"datagrams_per_s": received / wall, "data_datagrams_per_s": received / wall,
            "goodput_mbps_wall": received * MTU * 8 / wall / 1e6, "wall_s": wall,
            "cpu_us_per_datagram": cpu / max(received, 1) * 1e6}


def bench_relay(seconds: float, window: int, through_fabric: bool = False) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(
            selectors.SelectSelector())) as runner:
        return runner.run(_relay(seconds, window, through_fabric))


# ====================================================================== main
def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median datagram rate (one coherent row, not mixed columns)."""
    ordered = sorted(rows, key=lambda r: r["datagrams_per_s"])
    return ordered[len(ordered) // 2]


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
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args(argv)
    # Interleaved rounds, medians: the three measurements see the same machine load.
    runs: dict[str, list[dict[str, Any]]] = {"fabric": [], "relay": [], "forward": []}
    for _ in range(args.rounds):
        runs["fabric"].append(bench_fabric(args.seconds, args.dilation, args.link_gbps,
                                           args.window_kb, args.message_kb))
        runs["relay"].append(bench_relay(args.seconds, args.relay_window))
        runs["forward"].append(bench_relay(args.seconds, args.relay_window,
                                           through_fabric=True))
    fabric, relay, forward = (_median(runs[k]) for k in ("fabric", "relay", "forward"))
    ratio = fabric["datagrams_per_s"] / relay["datagrams_per_s"]
    data_ratio = fabric["data_datagrams_per_s"] / relay["data_datagrams_per_s"]
    forward_ratio = forward["datagrams_per_s"] / relay["datagrams_per_s"]
    result = {"fabric": {k: round(v, 1) if isinstance(v, float) else v
                         for k, v in fabric.items()},
              "relay": {k: round(v, 1) for k, v in relay.items()},
              "fabric_forwarding_only": {k: round(v, 1) for k, v in forward.items()},
              "ratio_datagrams": round(ratio, 3), "ratio_data_datagrams": round(data_ratio, 3),
              "ratio_forwarding_only": round(forward_ratio, 3),
              "target_ratio": TARGET_RATIO, "dilation": args.dilation,
              "rounds": args.rounds, "seconds": args.seconds}
    if not args.json:
        f, r, w = result["fabric"], result["relay"], result["fabric_forwarding_only"]
        print(f"fabric path (1 MRC connection, 4 hops): {f['datagrams_per_s']:,.0f} datagrams/s "
              f"({f['data_datagrams_per_s']:,.0f} DATA/s), goodput {f['goodput_mbps_wall']:,.0f}"
              f" Mb/s wall = {f['goodput_gbps_model']:,.1f} Gb/s modelled at x{args.dilation:g}; "
              f"{f['messages_verified']} messages verified, {f['messages_corrupt']} corrupt")
        print(f"raw asyncio UDP relay: {r['datagrams_per_s']:,.0f} datagrams/s, goodput "
              f"{r['goodput_mbps_wall']:,.0f} Mb/s wall")
        print(f"fabric forwarding only (pre-encoded MRC packets, no QPs): "
              f"{w['datagrams_per_s']:,.0f} datagrams/s, goodput "
              f"{w['goodput_mbps_wall']:,.0f} Mb/s wall")
        print(f"ratio fabric path/relay: {ratio:.2f} (DATA only: {data_ratio:.2f}); "
              f"fabric forwarding only/relay: {forward_ratio:.2f}; target >= {TARGET_RATIO}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
