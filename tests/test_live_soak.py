"""Opt-in soak of the live runtime (``pytest --runslow``; ``MRC_LIVE_SOAK_S`` sets the wall
seconds, default 30): two MRC connections write continuously while another thread throws
garbage datagrams at the fabric and at every host. Everything thrown is counted and dropped,
every message stays byte-exact, and memory, sockets, threads, tasks and the event heaps stop
growing once warm."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import time

import psutil
import pytest

from mrc import wire
from mrc.live.stack import LiveStack
from mrc.packet import DATA, Packet
from topology import usid
from topology.paths import address_for
from topology.spec import FabricSpec

SPEC = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2)
DILATION = 5000.0
SAMPLE_S = 2.0


def _thrower(targets: list[tuple[str, int]], stop: threading.Event, sent: list[int],
             rate: float) -> None:
    """Random bytes, truncated and bit-flipped real packets, and well-formed packets from an
    address nobody registered, at ``rate`` datagrams per second."""
    rng = random.Random(7)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    real = wire.encode(Packet(DATA, 0, 2, 1, 3, ev=usid.make_ev(1, 0), msg_id=1, length=512,
                              msg_len=512, payload=rng.randbytes(512),
                              da=address_for(SPEC, 0, 2, 1, 0), plane=1))
    try:
        while not stop.is_set():
            for target in targets:
                choice = rng.random()
                if choice < 0.4:
                    data = rng.randbytes(rng.randrange(0, 1500))
                elif choice < 0.7:
                    data = real[:rng.randrange(0, len(real))]
                elif choice < 0.9:
                    buf = bytearray(real)
                    buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
                    data = bytes(buf)
                else:
                    data = real
                try:
                    sock.sendto(data, target)
                    sent[0] += 1
                except OSError:
                    pass
            time.sleep(len(targets) / rate)
    finally:
        sock.close()


@pytest.mark.slow
def test_soak_with_garbage_stays_flat() -> None:
    seconds = float(os.environ.get("MRC_LIVE_SOAK_S", "30"))
    proc = psutil.Process()
    threads0 = proc.num_threads()
    stack = LiveStack(SPEC, seed=3, bin_ps=10**8, dilation=DILATION)
    stop = threading.Event()
    sent = [0]
    thrower = None
    try:
        conns = [stack.open("mrc", 0, 2, {}), stack.open("mrc", 3, 1, {})]

        def keep_posting(conn: object) -> None:
            def again(now: int = 0, ok: bool = True) -> None:
                if not stop.is_set():
                    conn.write(stack.sim.now, 256 * 1024, again)  # type: ignore[attr-defined]
            for _ in range(2):
                again()

        for conn in conns:
            stack.sim.at(0, lambda _, c=conn: keep_posting(c))
        targets = [stack.fabric.address] + [h.address for h in stack.nics]
        thrower = threading.Thread(target=_thrower, args=(targets, stop, sent, 2000.0),
                                   daemon=True)
        thrower.start()
        samples = []
        step = stack.clock.model_ps(SAMPLE_S)
        end = stack.clock.model_ps(seconds)
        t = 0
        while t < end:
            t += step
            stack.sim.run(t)
            samples.append({
                "rss": proc.memory_info().rss, "fds": proc.num_fds(),
                "threads": proc.num_threads(),
                "tasks": len(asyncio.all_tasks(stack.loop)),
                "heap": stack.core.sim.pending(), "scheduled": len(stack.loop._scheduled),  # type: ignore[attr-defined]
                "verified": sum(c.messages_ok for c in conns),
            })
        stop.set()
        thrower.join(5)
        stack.sim.run(stack.sim.now + stack.clock.model_ps(0.3))  # drain what is in flight
        totals = stack.totals()
    finally:
        stop.set()
        if thrower is not None:
            thrower.join(5)
        stack.close()
    live = totals["live"]
    refused = (live["fabric"]["rejected"] + live["hosts"]["rx_malformed"]
               + live["hosts"]["rx_unknown_source"])
    assert sent[0] > 1000
    assert refused >= 0.9 * sent[0]  # the kernel may drop a few under load; none got through
    assert live["hosts"]["rx_rejected"] == 0 and live["host_rejections"] is None
    assert totals["messages_corrupt"] == 0
    assert samples[-1]["verified"] > samples[1]["verified"] > 0  # still making progress
    warm, last = samples[1], samples[-1]
    print("soak samples:", samples, "garbage sent", sent[0], "refused", refused)
    assert last["rss"] - warm["rss"] < 40 * 2**20, samples
    assert last["fds"] == warm["fds"] and last["tasks"] == warm["tasks"], samples
    assert last["threads"] == warm["threads"], samples
    assert max(s["heap"] for s in samples[1:]) < 10_000, samples
    assert max(s["scheduled"] for s in samples[1:]) < 10_000, samples
    assert proc.num_threads() == threads0
