"""A small rtnetlink client: exactly the messages the kernel fabric sends, nothing more.

Why not pyroute2 (or ``ip`` per command): two of the messages the fabric needs are beyond
pyroute2 0.9: a seg6local route with the NEXT-C-SID flavour (``SEG6_LOCAL_FLAVORS``) and a
token bucket whose rate counts Ethernet overhead (``tc_ratespec.overhead``). Working around
both would mean patching its message classes or shelling out to ``ip``/``tc`` for every
switch. The messages themselves are plain structs, and sending a switch's routes as one batch
on a socket opened inside its namespace (:func:`mrc.kernel.netns.enter`) costs microseconds
per route. Every request asks for an acknowledgement, and a refusal raises
:class:`NetlinkError` naming the request and the kernel's errno (and its extended message).

Layouts are those of ``<linux/rtnetlink.h>``, ``<linux/if_link.h>``, ``<linux/neighbour.h>``,
``<linux/seg6_local.h>`` and ``<linux/pkt_sched.h>``; integers in host order.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# netlink
_NLMSG = struct.Struct("=IHHII")
NLMSG_ERROR = 2
NLMSG_DONE = 3
F_REQUEST, F_MULTI, F_ACK = 0x1, 0x2, 0x4
F_DUMP = 0x300
F_REPLACE, F_EXCL, F_CREATE = 0x100, 0x200, 0x400
NLA_F_NESTED = 0x8000
NLMSGERR_ATTR_MSG = 1
_NLM_F_CAPPED = 0x100
_NLM_F_ACK_TLVS = 0x200
_NETLINK_EXT_ACK = 11
_SOL_NETLINK = 270

# rtnetlink message types
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWROUTE = 24
RTM_NEWNEIGH = 28
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTFILTER = 44

# links
_IFINFO = struct.Struct("=BxHiII")
IFF_UP = 0x1
IFF_MULTICAST = 0x1000
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU = 1, 3, 4
IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_STATS64, IFLA_NET_NS_FD = 16, 18, 23, 28
IF_OPER_UP = 6
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
_STATS64 = struct.Struct("=8Q")  # rx/tx packets, rx/tx bytes, rx/tx errors, rx/tx dropped

# routes
_RTMSG = struct.Struct("=BBBBBBBBI")
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 4, 0, 1
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_ENCAP_TYPE, RTA_ENCAP = 1, 4, 5, 6, 21, 22
RTA_MULTIPATH = 9
LWTUNNEL_ENCAP_BPF, LWTUNNEL_ENCAP_SEG6_LOCAL = 6, 7
LWT_BPF_XMIT, LWT_BPF_PROG_FD, LWT_BPF_PROG_NAME = 3, 1, 2
SEG6_LOCAL_ACTION, SEG6_LOCAL_FLAVORS = 1, 11
SEG6_LOCAL_ACTION_END = 1
SEG6_LOCAL_FLV_OPERATION, SEG6_LOCAL_FLV_LCBLOCK_BITS, SEG6_LOCAL_FLV_LCNODE_FN_BITS = 1, 2, 3
SEG6_LOCAL_FLV_OP_NEXT_CSID = 4

# neighbours
_NDMSG = struct.Struct("=BxxxiHBB")
NUD_PERMANENT = 0x80
NDA_DST, NDA_LLADDR = 1, 2

# qdiscs
_TCMSG = struct.Struct("=BxxxiIII")
TC_H_ROOT = 0xFFFFFFFF
TCA_KIND, TCA_OPTIONS, TCA_STATS = 1, 2, 3
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 4, 6
TC_LINKLAYER_ETHERNET = 1
TC_H_CLSACT, TC_H_CLSACT_EGRESS = 0xFFFFFFF1, 0xFFFFFFF3
TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS = 6, 7, 8
TCA_BPF_FLAG_ACT_DIRECT = 1
_ETH_P_ALL_BE = 0x0300  # htons(ETH_P_ALL)
_RATESPEC = struct.Struct("=BBHhHI")
_TBF_TAIL = struct.Struct("=III")
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog
_PSCHED_TICK_NS = 64


class NetlinkError(OSError):
    """The kernel refused a request; ``what`` says which, ``errno``/``strerror`` why."""

    def __init__(self, err: int, what: str, detail: str = "") -> None:
        text = os.strerror(err) + (f" ({detail})" if detail else "")
        super().__init__(err, f"{what}: {text}")
        self.what = what


# ---------------------------------------------------------------------- attributes
def attr(kind: int, data: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + bytes(-n % 4)


def nest(kind: int, *parts: bytes) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(parts))


def u8(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=B", value))


def u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def text(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def ip6(address: str | int) -> bytes:
    return ipaddress.IPv6Address(address).packed


def parse_attrs(buf: bytes, offset: int = 0, end: int | None = None) -> dict[int, bytes]:
    """Attributes from ``offset`` to ``end`` by type (nested flag stripped; last one wins)."""
    out = {}
    end = len(buf) if end is None else end
    while offset + 4 <= end:
        n, kind = struct.unpack_from("=HH", buf, offset)
        if n < 4:
            break
        out[kind & 0x3FFF] = buf[offset + 4:offset + n]
        offset += (n + 3) & ~3
    return out


# ---------------------------------------------------------------------- messages
@dataclass(frozen=True, slots=True)
class Request:
    """One rtnetlink request: type, flags, body (header struct + attributes), and what it is
    (for error messages)."""

    kind: int
    flags: int
    body: bytes
    what: str


def veth(name: str, mac: str, peer: str, peer_mac: str, peer_ns_fd: int, mtu: int) -> Request:
    """A veth pair: ``name`` here, ``peer`` created directly in the namespace ``peer_ns_fd``.
    Both ends are made without IFF_MULTICAST: a router then joins no multicast group on them
    and sends no MLD reports (a link carries only what its hosts send)."""
    peer_info = (_IFINFO.pack(0, 0, 0, 0, IFF_MULTICAST) + text(IFLA_IFNAME, peer)
                 + attr(IFLA_ADDRESS, mac_bytes(peer_mac)) + u32(IFLA_MTU, mtu)
                 + u32(IFLA_NET_NS_FD, peer_ns_fd))
    body = (_IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, IFF_MULTICAST) + text(IFLA_IFNAME, name)
            + attr(IFLA_ADDRESS, mac_bytes(mac)) + u32(IFLA_MTU, mtu)
            + nest(IFLA_LINKINFO, text(IFLA_INFO_KIND, "veth"),
                   nest(IFLA_INFO_DATA, attr(VETH_INFO_PEER, peer_info))))
    return Request(RTM_NEWLINK, F_CREATE | F_EXCL, body, f"veth {name} <-> {peer}")


def device(name: str, kind: str) -> Request:
    """A virtual device of ``kind`` (``ifb``) with no peer."""
    body = (_IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + text(IFLA_IFNAME, name)
            + nest(IFLA_LINKINFO, text(IFLA_INFO_KIND, kind)))
    return Request(RTM_NEWLINK, F_CREATE | F_EXCL, body, f"{kind} device {name}")


def link_state(index: int, up: bool, name: str = "") -> Request:
    """``ip link set dev X up/down``."""
    body = _IFINFO.pack(socket.AF_UNSPEC, 0, index, IFF_UP if up else 0, IFF_UP)
    return Request(RTM_NEWLINK, 0, body, f"link {name or index} {'up' if up else 'down'}")


def neighbour(index: int, address: str, mac: str, name: str = "") -> Request:
    """A permanent neighbour entry (no neighbour discovery on this link, ever)."""
    body = (_NDMSG.pack(socket.AF_INET6, index, NUD_PERMANENT, 0, 0)
            + attr(NDA_DST, ip6(address)) + attr(NDA_LLADDR, mac_bytes(mac)))
    return Request(RTM_NEWNEIGH, F_CREATE | F_REPLACE, body,
                   f"neighbour {address} on {name or index}")


def _route_head(prefix: ipaddress.IPv6Network) -> bytes:
    return (_RTMSG.pack(socket.AF_INET6, prefix.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC,
                        RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
            + attr(RTA_DST, prefix.network_address.packed))


def route_via(prefix: str, gateway: str, oif: int, dev: str = "",
              xmit_bpf: tuple[int, str] | None = None) -> Request:
    """``ip -6 route replace PREFIX [encap bpf xmit PROG] via GATEWAY dev OIF proto static``;
    ``xmit_bpf`` is a loaded ``LWT_XMIT`` program's (fd, name)."""
    net = ipaddress.IPv6Network(prefix)
    body = _route_head(net) + attr(RTA_GATEWAY, ip6(gateway)) + u32(RTA_OIF, oif)
    if xmit_bpf is not None:
        fd, name = xmit_bpf
        body += (u16(RTA_ENCAP_TYPE, LWTUNNEL_ENCAP_BPF)
                 + nest(RTA_ENCAP, nest(LWT_BPF_XMIT, u32(LWT_BPF_PROG_FD, fd),
                                        text(LWT_BPF_PROG_NAME, name))))
    return Request(RTM_NEWROUTE, F_CREATE | F_REPLACE, body, f"route {prefix} via {dev or oif}")


def route_multipath(prefix: str, gateway: str, nexthops: Sequence[tuple[int, str]]) -> Request:
    """``ip -6 route replace PREFIX nexthop via GATEWAY dev A nexthop via GATEWAY dev B ...
    proto static``: one ECMP route (``nexthops``: (ifindex, name) each; struct rtnexthop:
    length, flags, hops, ifindex, then its RTA_GATEWAY)."""
    net = ipaddress.IPv6Network(prefix)
    hops = b""
    for oif, _ in nexthops:
        gw = attr(RTA_GATEWAY, ip6(gateway))
        hops += struct.pack("=HBBi", 8 + len(gw), 0, 0, oif) + gw
    body = _route_head(net) + attr(RTA_MULTIPATH, hops)
    names = ",".join(name for _, name in nexthops)
    return Request(RTM_NEWROUTE, F_CREATE | F_REPLACE, body, f"route {prefix} via {names}")


def route_end_next_csid(prefix: str, oif: int, block_bits: int, node_bits: int,
                        dev: str = "") -> Request:
    """``ip -6 route replace PREFIX encap seg6local action End flavors next-csid lblen B
    nflen N dev OIF proto static``: the uN behaviour (shift and look up again)."""
    net = ipaddress.IPv6Network(prefix)
    flavors = nest(SEG6_LOCAL_FLAVORS,
                   u32(SEG6_LOCAL_FLV_OPERATION, 1 << SEG6_LOCAL_FLV_OP_NEXT_CSID),
                   u8(SEG6_LOCAL_FLV_LCBLOCK_BITS, block_bits),
                   u8(SEG6_LOCAL_FLV_LCNODE_FN_BITS, node_bits))
    body = (_route_head(net) + u32(RTA_OIF, oif)
            + u16(RTA_ENCAP_TYPE, LWTUNNEL_ENCAP_SEG6_LOCAL)
            + nest(RTA_ENCAP, u32(SEG6_LOCAL_ACTION, SEG6_LOCAL_ACTION_END), flavors))
    return Request(RTM_NEWROUTE, F_CREATE | F_REPLACE, body,
                   f"seg6local End next-csid {prefix} on {dev or oif}")


def tbf(index: int, rate_bps: float, burst_bytes: int, limit_bytes: int, overhead: int,
        name: str = "") -> Request:
    """``tc qdisc replace dev X root handle 1: tbf rate R burst B limit L overhead O``: the
    root token bucket (created, or changed in place, keeping its queue)."""
    rate = int(rate_bps // 8)  # bytes per second
    rate32 = min(rate, 0xFFFFFFFF)
    spec = _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, overhead, 0, 0, rate32)
    buffer_ticks = min(int(burst_bytes * 1e9 / rate / _PSCHED_TICK_NS), 0xFFFFFFFF)
    qopt = spec + _RATESPEC.pack(0, 0, 0, 0, 0, 0) + _TBF_TAIL.pack(limit_bytes, buffer_ticks, 0)
    options = [attr(TCA_TBF_PARMS, qopt), u32(TCA_TBF_BURST, burst_bytes)]
    if rate > 0xFFFFFFFF:
        options.append(attr(TCA_TBF_RATE64, struct.pack("=Q", rate)))
    body = (_TCMSG.pack(socket.AF_UNSPEC, index, 0x10000, TC_H_ROOT, 0) + text(TCA_KIND, "tbf")
            + nest(TCA_OPTIONS, *options))
    return Request(RTM_NEWQDISC, F_CREATE | F_REPLACE, body, f"tbf on {name or index}")


def clsact(index: int, name: str = "") -> Request:
    """``tc qdisc replace dev X clsact``: the hook for egress filters (no queue of its own)."""
    body = (_TCMSG.pack(socket.AF_UNSPEC, index, 0xFFFF0000, TC_H_CLSACT, 0)
            + text(TCA_KIND, "clsact"))
    return Request(RTM_NEWQDISC, F_CREATE | F_REPLACE, body, f"clsact on {name or index}")


def clsact_delete(index: int, name: str = "") -> Request:
    """``tc qdisc del dev X clsact`` (its filters go with it)."""
    body = (_TCMSG.pack(socket.AF_UNSPEC, index, 0xFFFF0000, TC_H_CLSACT, 0)
            + text(TCA_KIND, "clsact"))
    return Request(RTM_DELQDISC, 0, body, f"clsact off {name or index}")


def egress_bpf(index: int, fd: int, prog_name: str, name: str = "") -> Request:
    """``tc filter replace dev X egress prio 1 handle 1 bpf da fd FD``: a direct-action
    classifier on every packet the port sends."""
    body = (_TCMSG.pack(socket.AF_UNSPEC, index, 1, TC_H_CLSACT_EGRESS,
                        (1 << 16) | _ETH_P_ALL_BE)
            + text(TCA_KIND, "bpf")
            + nest(TCA_OPTIONS, u32(TCA_BPF_FD, fd), text(TCA_BPF_NAME, prog_name),
                   u32(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT)))
    return Request(RTM_NEWTFILTER, F_CREATE | F_REPLACE, body,
                   f"bpf {prog_name} on {name or index} egress")


# ---------------------------------------------------------------------- the socket
@dataclass(frozen=True, slots=True)
class LinkStats:
    name: str
    index: int
    rx_packets: int
    tx_packets: int
    rx_bytes: int
    tx_bytes: int
    rx_dropped: int
    tx_dropped: int
    #: IFLA_OPERSTATE is UP: the link watcher has run since the carrier came, and attached
    #: the qdisc. Not IFF_RUNNING: a new veth reads operstate UNKNOWN until the link watcher
    #: first runs, and IFF_RUNNING counts UNKNOWN as up, while its qdisc still drops all.
    oper_up: bool = False


@dataclass(frozen=True, slots=True)
class QdiscStats:
    index: int
    kind: str
    packets: int
    drops: int
    backlog: int


class Socket:
    """An rtnetlink socket; it belongs to the namespace the calling thread was in when made."""

    BATCH = 128

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        try:
            self.sock.setsockopt(_SOL_NETLINK, _NETLINK_EXT_ACK, 1)
        except OSError:
            pass  # older kernels: errors without the extended message
        self.sock.bind((0, 0))
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _frame(self, kind: int, flags: int, body: bytes) -> tuple[int, bytes]:
        self._seq += 1
        return self._seq, _NLMSG.pack(_NLMSG.size + len(body), kind, flags, self._seq, 0) + body

    def run(self, requests: Sequence[Request]) -> None:
        """Send the requests (in batches) and wait for every acknowledgement; the first
        refusal raises :class:`NetlinkError` (after the rest of its batch was answered)."""
        for start in range(0, len(requests), self.BATCH):
            batch = requests[start:start + self.BATCH]
            pending: dict[int, Request] = {}
            frames = []
            for req in batch:
                seq, frame = self._frame(req.kind, F_REQUEST | F_ACK | req.flags, req.body)
                pending[seq] = req
                frames.append(frame)
            self.sock.sendall(b"".join(frames))
            failure: NetlinkError | None = None
            while pending:
                for kind, flags, seq, payload in self._read():
                    if kind != NLMSG_ERROR or seq not in pending:
                        continue
                    req = pending.pop(seq)
                    err = -struct.unpack_from("=i", payload)[0]
                    if err and failure is None:
                        failure = NetlinkError(err, req.what, _ext_message(flags, payload))
            if failure is not None:
                raise failure

    def dump(self, kind: int, body: bytes) -> Iterator[tuple[int, bytes]]:
        """A dump request's answers (message type, payload) until the end of the dump."""
        seq, frame = self._frame(kind, F_REQUEST | F_DUMP, body)
        self.sock.sendall(frame)
        while True:
            for mtype, _flags, mseq, payload in self._read():
                if mseq != seq:
                    continue
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", payload)[0]
                    if err:
                        raise NetlinkError(err, f"dump {kind}")
                    return
                yield mtype, payload

    def _read(self) -> Iterator[tuple[int, int, int, bytes]]:
        data = self.sock.recv(1 << 20)
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, kind, flags, seq, _pid = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size:
                break
            yield kind, flags, seq, data[offset + _NLMSG.size:offset + length]
            offset += (length + 3) & ~3

    # ------------------------------------------------------------------ queries
    def links(self) -> list[LinkStats]:
        """Every device of this namespace with its counters."""
        out = []
        for kind, payload in self.dump(RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind != RTM_NEWLINK:
                continue
            _family, _type, index, _flags, _change = _IFINFO.unpack_from(payload)
            attrs = parse_attrs(payload, _IFINFO.size)
            name = attrs.get(IFLA_IFNAME, b"\0").split(b"\0")[0].decode()
            stats = attrs.get(IFLA_STATS64)
            values = _STATS64.unpack_from(stats) if stats else (0,) * 8
            rx_p, tx_p, rx_b, tx_b, _rx_e, _tx_e, rx_d, tx_d = values
            out.append(LinkStats(name, index, rx_p, tx_p, rx_b, tx_b, rx_d, tx_d,
                                 attrs.get(IFLA_OPERSTATE, b"\0")[0] == IF_OPER_UP))
        return out

    def qdiscs(self) -> list[QdiscStats]:
        """Every qdisc of this namespace with its packet and drop counters."""
        out = []
        for kind, payload in self.dump(RTM_GETQDISC, _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind != RTM_NEWQDISC:
                continue
            _family, index, _handle, _parent, _info = _TCMSG.unpack_from(payload)
            attrs = parse_attrs(payload, _TCMSG.size)
            name = attrs.get(TCA_KIND, b"\0").split(b"\0")[0].decode()
            stats = attrs.get(TCA_STATS)
            _bytes, packets, drops, _over, _bps, _pps, _qlen, backlog = (
                _TC_STATS.unpack_from(stats) if stats else (0,) * 8)
            out.append(QdiscStats(index, name, packets, drops, backlog))
        return out


def _ext_message(flags: int, payload: bytes) -> str:
    """The kernel's extended ack message (``NLMSGERR_ATTR_MSG``), if it sent one. The TLVs
    follow the error code and the refused request: its header only when capped, else all of
    it."""
    if not flags & _NLM_F_ACK_TLVS or len(payload) < 4 + _NLMSG.size:
        return ""
    offset = 4 + _NLMSG.size
    if not flags & _NLM_F_CAPPED:
        offset = 4 + ((_NLMSG.unpack_from(payload, 4)[0] + 3) & ~3)
    msg = parse_attrs(payload, offset).get(NLMSGERR_ATTR_MSG, b"")
    return msg.split(b"\0")[0].decode(errors="replace")
