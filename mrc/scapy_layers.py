"""Scapy layers for MRC over RoCE v2: the second, independent codec (dissection and pcaps).

``scapy.contrib.roce`` provides BTH (bound to UDP 4791, ICRC computed by its post_build) and
AETH, but no RETH. This module adds RETH and ImmDt as the IBA defines them, plus MRC's own
extension headers, and binds them on the BTH opcode the way ``mrc.wire`` lays packets out:

* BTH 0x0A -> RETH -> MRC-DETH -> payload; BTH 0x0B -> RETH -> ImmDt -> MRC-DETH -> payload
* BTH 0x11 -> AETH (scapy's) -> MRC-AETH
* BTH 0xC0 / 0xC1 (manufacturer-specific opcodes) -> MRC-PETH

Scapy's own BTH, AETH and their bindings are used, not replaced. Importing this module adds
bindings globally (scapy's model); after that any RC RDMA WRITE ONLY is read as MRC. Scapy's
BTH always treats the last 4 bytes as the ICRC, so a *trimmed* packet dissects with its last 4
bytes in ``BTH.icrc``; ``mrc.wire.decode`` is the authority for trimmed packets.
"""

from __future__ import annotations

from typing import Any

from scapy.contrib.roce import AETH, BTH
from scapy.fields import IntField, LongField, ShortField, XIntField, XLongField, XShortField
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Raw, bind_layers

from mrc import wire
from mrc.packet import (
    ACK,
    DATA,
    DEFAULT_DSCP,
    ECN_CE,
    ECN_ECT0,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_SEQ_ERR,
    NACK,
    PROBE,
    PROBE_REPLY,
    ROCE_UDP_PORT,
    TRIM_DSCP,
    Packet,
    natural_size,
)
from topology.usid import format_address, host_address, host_of, parse_address

__all__ = ["RETH", "ImmDt", "MRCDETH", "MRCAETH", "MRCPETH", "to_scapy", "from_scapy"]


class RETH(ScapyPacket):
    """RDMA Extended Transport Header: where the payload goes (VA, R_Key, DMA length)."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]

    def guess_payload_class(self, payload: bytes) -> type[ScapyPacket]:
        # ImmDt follows the RETH only for the "with immediate" opcode.
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode == wire.OP_RDMA_WRITE_ONLY_IMM:
            return ImmDt
        return MRCDETH


class ImmDt(ScapyPacket):
    """Immediate data of RDMA WRITE with immediate (4 bytes, delivered to the receiver's CQ)."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRCDETH(ScapyPacket):
    """MRC data extension: EV and message id first, so they survive a 128-byte trim."""

    name = "MRC-DETH"
    fields_desc = [
        XIntField("ev", 0),
        IntField("msg_id", 0),
        IntField("ts", 0),
        XShortField("flags", 0),
        ShortField("reserved", 0),
        LongField("msg_len", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[ScapyPacket]:
        return Raw


class MRCAETH(ScapyPacket):
    """MRC acknowledgement extension: EV/timestamp echo, echoed PSN, flags, SACK window."""

    name = "MRC-AETH"
    fields_desc = [
        XIntField("ev", 0),
        IntField("ts", 0),
        IntField("echo_psn", 0),
        XShortField("flags", 0),
        ShortField("reserved", 0),
        IntField("sack_base", 0),
        XLongField("sack", 0),
    ]


class MRCPETH(ScapyPacket):
    """MRC probe extension (PROBE / PROBE_REPLY)."""

    name = "MRC-PETH"
    fields_desc = [
        XIntField("ev", 0),
        IntField("ts", 0),
        XShortField("flags", 0),
        ShortField("reserved", 0),
    ]


bind_layers(BTH, RETH, opcode=wire.OP_RDMA_WRITE_ONLY)
bind_layers(BTH, RETH, opcode=wire.OP_RDMA_WRITE_ONLY_IMM)
bind_layers(ImmDt, MRCDETH)
bind_layers(AETH, MRCAETH)
bind_layers(BTH, MRCPETH, opcode=wire.OP_MRC_PROBE)
bind_layers(BTH, MRCPETH, opcode=wire.OP_MRC_PROBE_REPLY)


def to_scapy(pkt: Packet) -> ScapyPacket:
    """IPv6/IPv6/UDP/BTH/... built field by field; scapy computes lengths, the inner UDP
    checksum and the ICRC itself. A trimmed packet (cut short) is dissected from its bytes."""
    if pkt.trimmed and pkt.size < natural_size(pkt.kind, pkt.length, pkt.flags):
        return IPv6(wire.encode(pkt))
    ev = pkt.ev
    fl = wire.flow_label(ev)
    ecn = pkt.ecn
    src = format_address(host_address(pkt.src))
    dscp = TRIM_DSCP if pkt.trimmed else DEFAULT_DSCP
    inner_ecn = ECN_ECT0 if ecn == ECN_CE else ecn
    flags = pkt.flags
    outer = IPv6(tc=(dscp << 2) | ecn, fl=fl, hlim=pkt.hop_limit, src=src,
                 dst=format_address(pkt.da))
    inner = IPv6(tc=(DEFAULT_DSCP << 2) | inner_ecn, fl=fl, hlim=wire.HOP_LIMIT, src=src,
                 dst=format_address(host_address(pkt.dst)))
    udp = UDP(sport=wire.udp_sport(ev), dport=ROCE_UDP_PORT)
    ackreq = 1 if flags & FLAG_ACK_REQ else 0
    kind = pkt.kind
    ext: ScapyPacket
    if kind == DATA:
        imm = bool(flags & FLAG_IMM)
        opcode = wire.OP_RDMA_WRITE_ONLY_IMM if imm else wire.OP_RDMA_WRITE_ONLY
        payload = pkt.payload if pkt.payload is not None else wire.pseudo_payload(
            pkt.digest, pkt.length)
        ext = RETH(va=pkt.offset, rkey=pkt.msg_id & 0xFFFFFFFF, dlen=pkt.length)
        if imm:
            ext = ext / ImmDt(imm=pkt.imm)
        ext = ext / MRCDETH(ev=ev, msg_id=pkt.msg_id, ts=pkt.ts, flags=flags,
                            msg_len=pkt.msg_len)
        if payload:
            ext = ext / Raw(load=payload)
    elif kind in (ACK, NACK):
        opcode = wire.OP_ACKNOWLEDGE
        if kind == ACK:
            syndrome = wire.SYNDROME_ACK
        elif flags & FLAG_SEQ_ERR:
            syndrome = wire.SYNDROME_NAK_SEQ
        else:
            syndrome = wire.SYNDROME_NAK_TRIM
        ext = AETH(syndrome=syndrome, msn=pkt.msg_id & 0xFFFFFF) / MRCAETH(
            ev=ev, ts=pkt.ts, echo_psn=pkt.echo_psn, flags=flags, sack_base=pkt.sack_base,
            sack=pkt.sack)
    elif kind in (PROBE, PROBE_REPLY):
        opcode = wire.OP_MRC_PROBE if kind == PROBE else wire.OP_MRC_PROBE_REPLY
        ext = MRCPETH(ev=ev, ts=pkt.ts, flags=flags)
    else:
        raise ValueError(f"unknown packet kind {kind!r}")
    bth = BTH(opcode=opcode, pkey=wire.PKEY_DEFAULT, dqpn=pkt.qpn, ackreq=ackreq, psn=pkt.psn)
    return outer / inner / udp / bth / ext


def from_scapy(spkt: ScapyPacket) -> Packet:
    """Map a dissected scapy packet back to the packet model (no integrity checks: this is the
    independent reading that tests compare with ``mrc.wire.decode``)."""
    outer = spkt.getlayer(IPv6, 1)
    inner = spkt.getlayer(IPv6, 2)
    bth = spkt.getlayer(BTH)
    if outer is None or inner is None or bth is None:
        raise ValueError("not an IPv6/IPv6/UDP/BTH packet")
    opcode = bth.opcode
    fields: dict[str, Any] = {}
    if opcode in (wire.OP_RDMA_WRITE_ONLY, wire.OP_RDMA_WRITE_ONLY_IMM):
        kind = DATA
        reth, deth = spkt[RETH], spkt[MRCDETH]
        raw = spkt.getlayer(Raw)
        fields.update(offset=reth.va, length=reth.dlen, msg_id=deth.msg_id, ev=deth.ev,
                      ts=deth.ts, flags=deth.flags, msg_len=deth.msg_len,
                      payload=bytes(raw.load) if raw is not None else b"")
        if opcode == wire.OP_RDMA_WRITE_ONLY_IMM:
            fields["imm"] = spkt[ImmDt].imm
    elif opcode == wire.OP_ACKNOWLEDGE:
        aeth, mrc = spkt[AETH], spkt[MRCAETH]
        kind = ACK if aeth.syndrome >> 5 == 0 else NACK
        fields.update(msg_id=aeth.msn, ev=mrc.ev, ts=mrc.ts, echo_psn=mrc.echo_psn,
                      flags=mrc.flags, sack_base=mrc.sack_base, sack=mrc.sack)
    elif opcode in (wire.OP_MRC_PROBE, wire.OP_MRC_PROBE_REPLY):
        peth = spkt[MRCPETH]
        kind = PROBE if opcode == wire.OP_MRC_PROBE else PROBE_REPLY
        fields.update(ev=peth.ev, ts=peth.ts, flags=peth.flags)
    else:
        raise ValueError(f"BTH opcode {opcode:#x} is not MRC")
    da = parse_address(outer.dst)
    top = da >> 96
    pkt = Packet(kind, host_of(parse_address(inner.src)), host_of(parse_address(inner.dst)),
                 bth.dqpn, bth.psn, da=da, ecn=outer.tc & 3, trimmed=outer.tc >> 2 == TRIM_DSCP,
                 size=len(outer), plane=top & 0xFF if top >> 8 == 0xFCBB00 else 0, **fields)
    pkt.hop_limit = outer.hlim
    return pkt
