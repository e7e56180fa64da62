"""Where every field lies: protocol constants, byte offsets and precompiled layouts.

The encoder packs and the decoder unpacks a whole header with one precompiled ``struct`` call
per packet kind; the ``EXT_*`` layouts cover the extension headers alone (after the envelope)
and ``ENDS_*`` say where each of their fields ends, which decides what survived a trim. Why
the opcodes, syndromes and fields are what they are: :mod:`mrc.wire`.
"""

from __future__ import annotations

import struct
from typing import Final

from mrc.packet import (
    ACK,
    CNP,
    CNP_RESERVED_BYTES,
    DATA,
    DEFAULT_HOP_LIMIT,
    ENVELOPE_BYTES,
    ICRC_BYTES,
    IPV6_BYTES,
    NACK,
    PROBE,
    PROBE_REPLY,
)
from topology.usid import HOST_IID_MARK, HOST_PREFIX

# ------------------------------------------------------------------ protocol constants
OP_RDMA_WRITE_ONLY: Final = 0x0A
OP_RDMA_WRITE_ONLY_IMM: Final = 0x0B
OP_ACKNOWLEDGE: Final = 0x11
OP_MRC_PROBE: Final = 0xC0
OP_MRC_PROBE_REPLY: Final = 0xC1
OP_CNP: Final = 0x81  # RoCEv2 congestion notification packet (DCQCN)

SYNDROME_ACK: Final = 0x1F  # ACK, credit count 31 = "invalid" (no end-to-end credits)
SYNDROME_NAK_SEQ: Final = 0x60  # NAK, code 0: PSN sequence error (RC go-back-N)
#: MRC trim NACK: NAK (type 3) with code 5, the first NAK code the IBA leaves reserved.
#: Not RNR: MRC does not support RNR (OCP README); a trim is its own signal.
SYNDROME_NAK_TRIM: Final = 0x65

PKEY_DEFAULT: Final = 0xFFFF
HOP_LIMIT: Final = DEFAULT_HOP_LIMIT
NH_IPV6: Final = 41
NH_UDP: Final = 17
UDP_SPORT_BASE: Final = 0xC000  # RoCE v2 entropy ports live in 49152..65535
#: The EV on the wire: its low ``EV_FLOW_LABEL_BITS`` bits are the outer (and inner) IPv6
#: flow label, the rest the low bits of the UDP source port (49152 + EV >> 20).
EV_FLOW_LABEL_BITS: Final = 20
EV_FLOW_LABEL_MASK: Final = (1 << EV_FLOW_LABEL_BITS) - 1

#: Which Packet attributes each kind carries on the wire (what round-trips exactly).
#: ``imm`` only with FLAG_IMM; ``msg_id`` of ACK/NACK travels as AETH MSN (modulo 2**24).
WIRE_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    DATA: ("kind", "src", "dst", "qpn", "psn", "ev", "msg_id", "offset", "length", "msg_len",
           "flags", "ts", "imm", "da", "ecn", "trimmed", "size", "payload", "hop_limit"),
    ACK: ("kind", "src", "dst", "qpn", "psn", "ev", "msg_id", "flags", "ts", "echo_psn",
          "sack_base", "sack", "da", "ecn", "trimmed", "size", "hop_limit"),
    PROBE: ("kind", "src", "dst", "qpn", "psn", "ev", "flags", "ts", "da", "ecn", "trimmed",
            "size", "hop_limit"),
}
WIRE_FIELDS[CNP] = ("kind", "src", "dst", "qpn", "psn", "da", "ecn", "trimmed", "size")
WIRE_FIELDS[NACK] = WIRE_FIELDS[ACK]
WIRE_FIELDS[PROBE_REPLY] = WIRE_FIELDS[PROBE]

# Byte offsets (outermost first), shared with the byte-level helpers (mrc.wire.outer).
OFF_HOP_LIMIT: Final = 7
OFF_OUTER_DST: Final = 24
OFF_ACTIVE_USID: Final = 28
OFF_INNER: Final = IPV6_BYTES  # 40
OFF_INNER_PLEN: Final = IPV6_BYTES + 4  # 44
OFF_UDP: Final = 2 * IPV6_BYTES  # 80
OFF_UDP_LEN: Final = OFF_UDP + 4  # 84
OFF_UDP_CSUM: Final = OFF_UDP + 6  # 86
OFF_BTH: Final = OFF_UDP + 8  # 88
OFF_EXT: Final = ENVELOPE_BYTES  # 100

HOST_HI: Final = HOST_PREFIX >> 64
HOST_LO: Final = HOST_IID_MARK  # OR-ed with the host index: the low half of its address
M64: Final = (1 << 64) - 1
M24: Final = (1 << 24) - 1

# ------------------------------------------------------------------ precompiled layouts
# Envelope: outer IPv6 | inner IPv6 | UDP | BTH. Addresses as two u64 halves; host addresses
# are HOST_PREFIX | HOST_IID_MARK | host, so their low half is HOST_LO | host index.
ENV_FMT = ">IHBBQQQQ" "IHBBQQQQ" "HHHH" "BBHII"
ENV = struct.Struct(ENV_FMT)
RETH_DETH_FMT = "QII" "IIIHHQ"
RETH_IMM_DETH_FMT = "QII" "I" "IIIHHQ"
AETH_MRC_FMT = "I" "IIIHHIQ"
PETH_FMT = "IIHH"
HDR_DATA = struct.Struct(ENV_FMT + RETH_DETH_FMT)
HDR_DATA_IMM = struct.Struct(ENV_FMT + RETH_IMM_DETH_FMT)
HDR_ACK = struct.Struct(ENV_FMT + AETH_MRC_FMT)
HDR_PROBE = struct.Struct(ENV_FMT + PETH_FMT)
HDR_CNP = struct.Struct(ENV_FMT + f"{CNP_RESERVED_BYTES}x")  # BTH, 16 reserved bytes
EXT_DATA = struct.Struct(">" + RETH_DETH_FMT)
EXT_DATA_IMM = struct.Struct(">" + RETH_IMM_DETH_FMT)
EXT_ACK = struct.Struct(">" + AETH_MRC_FMT)
EXT_PROBE = struct.Struct(">" + PETH_FMT)
DATA_HDR_BYTES: Final = HDR_DATA.size  # 140
DATA_IMM_HDR_BYTES: Final = HDR_DATA_IMM.size  # 144
ACK_FULL_BYTES: Final = HDR_ACK.size + ICRC_BYTES  # every ACK/NACK has this length
PROBE_FULL_BYTES: Final = HDR_PROBE.size + ICRC_BYTES
CNP_FULL_BYTES: Final = HDR_CNP.size + ICRC_BYTES


def _field_ends(fmt: str) -> tuple[int, ...]:
    """Absolute end offset of each field of an extension layout (trim survival test)."""
    ends = []
    pos = OFF_EXT
    for code in fmt:
        pos += struct.calcsize(">" + code)
        ends.append(pos)
    return tuple(ends)


ENDS_DATA = _field_ends(RETH_DETH_FMT)
ENDS_DATA_IMM = _field_ends(RETH_IMM_DETH_FMT)
ENDS_ACK = _field_ends(AETH_MRC_FMT)
ENDS_PROBE = _field_ends(PETH_FMT)
