"""Fast wire codec: ``mrc.packet.Packet`` <-> real IPv6/IPv6/UDP/RoCE v2/MRC bytes.

The layout is the one ``mrc.packet`` documents (outer IPv6 carrying the uSIDs, inner IPv6 with
the real host addresses, UDP 4791, BTH, RoCE extension headers, MRC extensions, ICRC). Choices
that the model leaves open, and why:

* **Opcodes.** DATA is RC RDMA WRITE ONLY (0x0A, 0x0B with ImmDt) so every packet carries a
  RETH and is placed on its own. ACK/NACK are RC ACKNOWLEDGE (0x11) with an AETH. PROBE and
  PROBE_REPLY use 0xC0/0xC1: opcodes 0xC0-0xFF are the IBA's manufacturer-specific range, so
  no standard RoCE endpoint mistakes them for its own traffic.
* **AETH syndromes.** ACK = 0x1F (ACK, credit field "invalid": no end-to-end credits). The RC
  go-back-N NACK (``FLAG_SEQ_ERR``) is the standard PSN-sequence-error NAK 0x60. The MRC trim
  NACK has **its own code: NAK code 5 (syndrome 0x65)**, the first NAK code the IBA leaves
  reserved. Not RNR: MRC does not support RNR (OCP README), and a trim is congestion, its
  own signal. Not sequence-error either: that orders an RC requester to go back N, wrong for
  MRC's selective repeat. tshark shows it as an RC Acknowledge with NAK "Unknown (5)".
  ``FLAG_TRIM`` in MRC-AETH says the same.
* **AETH MSN** carries ``msg_id mod 2**24``: RC's MSN counts the responder's completed
  messages; MRC completes messages out of order, so the id of the message concerned is the
  honest analogue (and lets a NACK name the message of the trimmed packet).
* **RETH**: VA = byte offset in the message, R_Key = ``msg_id`` low 32 bits, DMA length =
  payload bytes. MRC-DETH repeats the full msg_id; both must agree.
* **No pad bytes** (BTH PadCnt 0): ``mrc.packet.natural_size`` counts payload bytes exactly.
* **Entropy.** The 32-bit EV is striped over the entropy fields: its low 20 bits are the
  flow label (outer and inner), its high 12 bits the low bits of the UDP source port
  (49152 + EV >> 20). The MRC extension headers repeat it; the decoder reads it from the
  flow label and port and refuses a packet whose copies disagree. ACKs, NACKs and probe
  replies carry the EV they answer the same way (it also names their reverse path).
* **Addresses.** Inner host addresses are fd00:6d72:6300::/64 with interface ID
  ``0:1:<host>`` (never all-zero). QPNs 0 and 1 are never used for data (InfiniBand's SMI
  and GSI: tshark dissects QP1 traffic as MAD). The outer hop limit starts at 64 and drops
  by one at every switch; the inner one is end to end.
* **Integrity.** The inner UDP checksum and the RoCE v2 ICRC are real. The ICRC is CRC-32 over
  8 bytes of 0xFF (the masked LRH stand-in) + inner IPv6 + UDP + BTH + everything up to the
  ICRC, with the fields routers may change replaced by ones: IPv6 traffic class, flow label
  and hop limit, the UDP checksum, and the BTH byte after the P_Key (FECN/BECN/reserved). It is
  stored least-significant byte first, as Linux rxe and scapy do. Switches only ever rewrite
  the *outer* header, so both checks verify after every uSID shift, CE mark or trim re-mark.
* **Trimming.** A trimmed packet is the full packet cut to ``size`` bytes, its outer DSCP set
  to ``TRIM_DSCP`` and its length fields (outer and inner IPv6 payload length, UDP length)
  rewritten to the cut, so it is a well-formed shorter packet; the original length survives
  in the RETH DMA length. ``decode`` accepts a cut packet only with that mark and returns
  every field that survived (no checksum can be verified).
* **Simulation.** ``payload=None`` is encoded as ``pseudo_payload(digest, length)`` so pcaps
  of simulated runs have true sizes. ``decode`` always returns the bytes it found.

``decode`` raises ``DecodeError`` (a ``ValueError``) for anything malformed, and nothing else.
``encode`` raises ``ValueError`` for fields that do not fit their wire width.

One module per concern; this package's namespace is the public API (``wire.encode(pkt)``):

* :mod:`mrc.wire.layout`: protocol constants, byte offsets and the precompiled ``struct``
  layouts every other module packs or unpacks with.
* :mod:`mrc.wire.checksum`: the ICRC constants and the one's-complement sums behind the UDP
  checksum (pure Python: one numpy reduction per burst; compiled: a C loop), and the
  ICRC's masked header bytes.
* :mod:`mrc.wire.encoder`: ``encode``/``encode_many`` and the EV striping of flow label and
  UDP source port.
* :mod:`mrc.wire.decoder`: ``decode``/``decode_many`` (full and trimmed packets) and the
  fields a receiver needs to NACK a trimmed packet.
* :mod:`mrc.wire.outer`: byte-level outer-header edits for the live fabric's switches.
* :mod:`mrc.wire.roce`: RoCEv2's own framing, for RoCE RC's packets and CNPs (one IPv6
  header, BTH, RETH on a WRITE's first packet only, AETH, ICRC): ``encode``/``decode``
  choose it by ``FLAG_ROCE`` / the first header's next header (UDP).
"""

from mrc.wire.decoder import (
    DecodeError,
    TrimmedFields,
    decode,
    decode_many,
    nack_fields_from_trimmed,
)
from mrc.wire.encoder import (
    encode,
    encode_many,
    ev_from_entropy,
    flow_label,
    pseudo_payload,
    udp_sport,
)
from mrc.wire.layout import (
    HOP_LIMIT,
    NH_IPV6,
    NH_UDP,
    OFF_ACTIVE_USID,
    OFF_BTH,
    OFF_EXT,
    OFF_INNER,
    OFF_OUTER_DST,
    OFF_UDP,
    OFF_UDP_CSUM,
    OP_ACKNOWLEDGE,
    OP_MRC_PROBE,
    OP_MRC_PROBE_REPLY,
    OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_IMM,
    PKEY_DEFAULT,
    SYNDROME_ACK,
    SYNDROME_NAK_SEQ,
    SYNDROME_NAK_TRIM,
    UDP_SPORT_BASE,
    WIRE_FIELDS,
)
from mrc.wire.outer import (
    active_usid,
    cut_lengths,
    hop_limit,
    inner_hosts,
    is_roce,
    is_trimmed,
    mark_ce,
    outer_dscp,
    outer_dst,
    outer_ecn,
    outer_ok,
    set_hop_limit,
    set_outer_dscp,
    set_outer_dst,
    shift_outer_dst,
    trim,
)
from mrc.wire.roce import unnamed_destination

__all__ = [
    "HOP_LIMIT", "NH_IPV6", "NH_UDP", "OFF_ACTIVE_USID", "OFF_BTH", "OFF_EXT", "OFF_INNER",
    "OFF_OUTER_DST", "OFF_UDP", "OFF_UDP_CSUM", "OP_ACKNOWLEDGE", "OP_MRC_PROBE",
    "OP_MRC_PROBE_REPLY", "OP_RDMA_WRITE_ONLY", "OP_RDMA_WRITE_ONLY_IMM", "PKEY_DEFAULT",
    "SYNDROME_ACK", "SYNDROME_NAK_SEQ", "SYNDROME_NAK_TRIM", "UDP_SPORT_BASE", "WIRE_FIELDS",
    "DecodeError", "TrimmedFields", "active_usid", "cut_lengths", "decode", "decode_many",
    "encode", "encode_many", "ev_from_entropy", "flow_label", "hop_limit", "inner_hosts",
    "is_roce", "is_trimmed", "mark_ce", "nack_fields_from_trimmed", "outer_dscp", "outer_dst",
    "outer_ecn", "outer_ok", "pseudo_payload", "set_hop_limit", "set_outer_dscp",
    "set_outer_dst", "shift_outer_dst", "trim", "udp_sport", "unnamed_destination",
]
