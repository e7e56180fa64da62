"""The live host's batched send (UDP GSO) and burst receive (wire.decode_many): exactly the
datagrams of one send per packet, in order, whatever the burst (one by one where the kernel
refuses GSO), and the same packets and counters as taking the datagrams in one by one; a GSO
run read in one read (UDP GRO) is cut back into the very same datagrams."""

from __future__ import annotations

import asyncio
import random
import socket
from collections import deque
from typing import Any

import pytest
from udp_support import kernel_has_gro

from mrc import wire
from mrc.live import gso
from mrc.live.clock import Clock
from mrc.live.gso import MAX_BYTES as GSO_MAX_BYTES
from mrc.live.gso import UDP_SEGMENT
from mrc.live.host import LiveHost
from mrc.live.udp import read_more, release_reads, take_reads
from mrc.packet import ACK, DATA, Packet
from mrc.transport.qp_base import QpBase
from topology import usid
from topology.spec import FabricSpec

SPEC = FabricSpec(planes=4, hosts=4, hosts_per_t0=2, t1_per_plane=2)
FABRIC = ("127.0.0.1", 9)


class FakeSocket:
    """Records what the host hands the kernel: ("gso", segment, [datagrams]) or ("one", d)."""

    def __init__(self, refuse_gso: int | None = None) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.refuse_gso = refuse_gso

    def sendmsg(self, buffers: list[bytes], ancdata: list[tuple[int, int, bytes]], flags: int,
                addr: tuple[str, int]) -> int:
        assert addr == FABRIC and flags == 0
        ((level, kind, value),) = ancdata
        assert (level, kind) == (socket.IPPROTO_UDP, UDP_SEGMENT)
        if self.refuse_gso is not None:
            raise OSError(self.refuse_gso, "refused")
        segment = int.from_bytes(value, "little")
        assert all(len(b) == segment for b in buffers) and sum(map(len, buffers)) <= GSO_MAX_BYTES
        self.sent.append(("gso", segment, list(buffers)))
        return sum(map(len, buffers))

    def sendto(self, data: bytes, addr: tuple[str, int]) -> int:
        assert addr == FABRIC
        self.sent.append(("one", data))
        return len(data)

    def recvfrom(self, size: int) -> tuple[bytes, Any]:
        raise BlockingIOError  # nothing more waits: the burst is what the test hands over

    def datagrams(self) -> list[bytes]:
        out: list[bytes] = []
        for entry in self.sent:
            out += entry[2] if entry[0] == "gso" else [entry[1]]
        return out


class RecordingQp(QpBase):
    """Just enough of a queue pair for a host to hand it what it decoded."""

    def __init__(self) -> None:
        self.qpn = 99
        self.bytes_placed = 0
        self.failed = False
        self.got: list[tuple[int, bytes | None]] = []
        self.events: deque[Any] = deque()

    def receive(self, now: int, pkt: Packet) -> None:
        self.got.append((pkt.psn, pkt.payload))

    def take_control(self) -> list[Packet]:
        return []

    def next_timer(self) -> int | None:
        return None


def host_with(sock: FakeSocket, gso: bool = True) -> LiveHost:
    host = LiveHost(0, SPEC, Clock(1000.0), gso=gso)
    host._sock = sock  # type: ignore[assignment]
    host.fabric_addr = FABRIC
    return host


def packets(n: int, seed: int = 1) -> list[Packet]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i >= 40 and rng.random() < 0.15:  # the first 40: one long run of full DATA
            out.append(Packet(ACK, 0, 2, 7, i, ev=usid.make_ev(i % 4, 0), sack=i))
        else:
            length = 4096 if i < 40 or rng.random() < 0.9 else rng.randrange(1, 4096)
            out.append(Packet(DATA, 0, 2, 7, i, ev=usid.make_ev(i % 4, 1), msg_id=1,
                              offset=4096 * i, length=length, msg_len=1 << 30,
                              payload=rng.randbytes(length), ts=(1 << 33) + i))
    return out


@pytest.mark.parametrize("gso", [True, False])
def test_held_datagrams_go_out_complete_and_in_order(gso: bool) -> None:
    sock = FakeSocket()
    host = host_with(sock, gso)
    pkts = packets(200)
    port = host.ports[0]
    for p in pkts:  # DATA as a kick sends it (held), control as _send_control does
        host._send(p, port, 0, p.kind == DATA)
    host._flush()
    want = []
    for p in packets(200):
        p.ts &= (1 << 32) - 1  # the host sends the timestamp wrapped to 32 bits
        want.append(wire.encode(p))
    assert sock.datagrams() == want
    assert host.counters["tx_datagrams"] == len(pkts)
    assert host.counters["tx_bytes"] == sum(map(len, want))
    batches = [len(e[2]) for e in sock.sent if e[0] == "gso"]
    if gso:
        assert max(batches) == GSO_MAX_BYTES // 4240  # bursts longer than one GSO send split
    else:
        assert not batches


def test_a_refused_gso_send_falls_back_to_one_by_one_for_good() -> None:
    import errno

    sock = FakeSocket(refuse_gso=errno.EINVAL)
    host = host_with(sock)
    pkts = [p for p in packets(40) if p.kind == DATA]
    for p in pkts:
        host._send(p, host.ports[1], 0, True)
    host._flush()
    assert len(sock.datagrams()) == len(pkts) and not host.gso
    assert host.counters["tx_datagrams"] == len(pkts)


def test_burst_receive_matches_one_by_one() -> None:
    rng = random.Random(3)
    good = [wire.encode(Packet(DATA, 0, 1, 99, i, ev=usid.make_ev(0, 0), msg_id=1,
                               offset=4096 * i, length=4096 if i % 5 else 1001,
                               msg_len=1 << 30, payload=rng.randbytes(4096 if i % 5 else 1001)))
            for i in range(30)]
    burst = []
    for i, data in enumerate(good):
        if i % 7 == 3:
            bad = bytearray(data)
            bad[200] ^= 1
            burst.append((bytes(bad), FABRIC))  # corrupt payload: malformed
        elif i % 11 == 5:
            burst.append((data, ("127.0.0.1", 4)))  # not from the fabric
        else:
            burst.append((data, FABRIC))
    burst.append((b"\x60garbage", FABRIC))
    seen: dict[str, list[Any]] = {}
    counters = {}
    for mode in ("burst", "single"):
        host = LiveHost(1, SPEC, Clock(1000.0))
        host.fabric_addr = FABRIC
        qp = RecordingQp()
        host.add(qp, [])  # type: ignore[arg-type]
        if mode == "burst":
            host._drain(list(burst))
        else:
            for data, addr in burst:
                host.receive(data, addr)
        seen[mode] = qp.got
        counters[mode] = dict(host.counters)
    assert seen["burst"] == seen["single"] and len(seen["burst"]) == 30 - 4 - 3
    assert counters["burst"] == counters["single"]
    assert counters["burst"]["rx_malformed"] == 5 and counters["burst"]["rx_unknown_source"] == 3


class AckingQp(RecordingQp):
    """Answers every DATA packet with an ACK (its control, taken by the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.control: list[Packet] = []

    def receive(self, now: int, pkt: Packet) -> None:
        super().receive(now, pkt)
        self.control.append(Packet(ACK, 0, 1, 7, pkt.psn, ev=usid.make_ev(pkt.psn % 4, 0),
                                   sack_base=pkt.psn, plane=pkt.psn % 4))

    def take_control(self) -> list[Packet]:
        out, self.control = self.control, []
        return out


def test_a_bursts_acks_leave_together_in_order() -> None:
    """The ACKs a received burst provokes are held and leave in one GSO send after it, the
    same datagrams in the same order as when each DATA is taken in alone."""
    burst = [(wire.encode(Packet(DATA, 1, 0, 99, i, ev=usid.make_ev(0, 0), msg_id=1,
                                 offset=4096 * i, length=4096, msg_len=1 << 30,
                                 payload=bytes([i]) * 4096)), FABRIC) for i in range(20)]
    sent = {}
    for mode in ("burst", "single"):
        sock = FakeSocket()
        host = host_with(sock)
        host.add(AckingQp(), [])  # type: ignore[arg-type]
        if mode == "burst":
            host._drain(list(burst))
        else:
            for data, addr in burst:
                host.receive(data, addr)
        sent[mode] = sock
    assert [e[0] for e in sent["burst"].sent] == ["gso"]
    assert [e[0] for e in sent["single"].sent] == ["one"] * 20
    acks = sent["burst"].datagrams()
    assert acks == sent["single"].datagrams() and len(acks) == 20
    assert [wire.decode(a).sack_base for a in acks] == list(range(20))


@pytest.mark.skipif(not kernel_has_gro(), reason="no UDP GRO here (Linux 5.0+)")
def test_a_gso_run_arrives_in_one_read_and_is_cut_back_into_its_datagrams() -> None:
    rng = random.Random(3)
    run = [rng.randbytes(4240) for _ in range(10)]
    single = rng.randbytes(999)

    async def exchange() -> tuple[list[tuple[int, int, int]], list[bytes], list[bytes]]:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                           sock=sock)
        woken = asyncio.Event()
        reader = take_reads(sock, loop, lambda r: woken.set(), transport)
        assert reader is not None
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sender.bind(("127.0.0.1", 0))
        target = sock.getsockname()
        try:
            # what the kernel does: the run in one read, its segment size beside it
            assert gso.send_run(sender, run, 4240, target)
            await asyncio.wait_for(woken.wait(), 2)
            data, ancillary, _, _ = reader.recvmsg(65_535, socket.CMSG_SPACE(4))
            raw = [(level, kind, len(data)) for level, kind, _ in ancillary]
            assert data == b"".join(run)
            # what read_more makes of it: the datagrams again, in order; a lone one as it is
            assert gso.send_run(sender, run, 4240, target)
            sender.sendto(single, target)
            burst: list[tuple[bytes, object]] = []
            for _ in range(100):
                read_more(reader, burst, True)
                if len(burst) >= len(run) + 1:
                    break
                await asyncio.sleep(0.01)
            addrs = {addr for _, addr in burst}
            assert addrs == {sender.getsockname()}
            return raw, [d for d, _ in burst[:len(run)]], [d for d, _ in burst[len(run):]]
        finally:
            release_reads(loop, reader)
            transport.close()
            sender.close()
            await asyncio.sleep(0)

    raw, cut, rest = asyncio.run(exchange())
    assert raw == [(socket.IPPROTO_UDP, 104, 4240 * 10)]
    assert cut == run
    assert rest == [single]
