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
  NACK is an **RNR NAK with timer code 1 (0x21, 0.01 ms)**: RNR is the only other non-fatal
  NAK in the IBA table and means "I could not accept this packet for lack of resources, send
  it again", which is what a trim is. Sequence-error would order an RC requester to go back N
  (wrong for MRC's selective repeat, and ambiguous with our own RC NACKs); the remaining NAK
  codes (invalid request, remote access/operational error) are fatal and move an RC QP to the
  error state. ``FLAG_TRIM`` in MRC-AETH still says what happened.
* **AETH MSN** carries ``msg_id mod 2**24``: RC's MSN counts the responder's completed
  messages; MRC completes messages out of order, so the id of the message concerned is the
  honest analogue (and lets a NACK name the message of the trimmed packet).
* **RETH**: VA = byte offset in the message, R_Key = ``msg_id`` low 32 bits, DMA length =
  payload bytes. MRC-DETH repeats the full msg_id; both must agree.
* **No pad bytes** (BTH PadCnt 0): ``mrc.packet.natural_size`` counts payload bytes exactly.
* **Entropy.** Flow label (outer and inner) and UDP source port are folds of the EV, so any
  ECMP hash would spread EVs; the receiver reads the EV from the MRC header, never from these.
* **Integrity.** The inner UDP checksum and the RoCE v2 ICRC are real. The ICRC is CRC-32 over
  8 bytes of 0xFF (the masked LRH stand-in) + inner IPv6 + UDP + BTH + everything up to the
  ICRC, with the fields routers may change replaced by ones: IPv6 traffic class, flow label
  and hop limit, the UDP checksum, and the BTH byte after the P_Key (FECN/BECN/reserved). It is
  stored least-significant byte first, as Linux rxe and scapy do. Switches only ever rewrite
  the *outer* header, so both checks verify after every uSID shift, CE mark or trim re-mark.
* **Trimming.** A trimmed packet is the full packet cut to ``size`` bytes, its outer DSCP set
  to ``TRIM_DSCP`` and its outer payload length fixed (so the outer header stays well formed;
  the inner one still states the original length). ``decode`` accepts short packets only with
  that mark and returns every field that survived (no checksum can be verified).
* **Simulation.** ``payload=None`` is encoded as ``pseudo_payload(digest, length)`` so pcaps
  of simulated runs have true sizes. ``decode`` always returns the bytes it found.

``decode`` raises ``DecodeError`` (a ``ValueError``) for anything malformed, and nothing else.
``encode`` raises ``ValueError`` for fields that do not fit their wire width.

One module per concern; this package's namespace is the public API (``wire.encode(pkt)``):

* :mod:`mrc.wire.layout`: protocol constants, byte offsets and the precompiled ``struct``
  layouts every other module packs or unpacks with.
* :mod:`mrc.wire.checksum`: the ICRC constants and the one's-complement sums behind the UDP
  checksum (one numpy reduction per burst).
* :mod:`mrc.wire.encoder`: ``encode``/``encode_many`` and the EV striping of flow label and
  UDP source port.
* :mod:`mrc.wire.decoder`: ``decode``/``decode_many`` (full and trimmed packets) and the
  fields a receiver needs to NACK a trimmed packet.
* :mod:`mrc.wire.outer`: byte-level outer-header edits for the live fabric's switches.
"""

from mrc.wire.decoder import (
    DecodeError,
    TrimmedFields,
    decode,
    decode_many,
    nack_fields_from_trimmed,
)
from mrc.wire.encoder import encode, encode_many, flow_label, pseudo_payload, udp_sport
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
    SYNDROME_RNR_TRIM,
    UDP_SPORT_BASE,
    WIRE_FIELDS,
)
from mrc.wire.outer import (
    active_usid,
    inner_hosts,
    is_trimmed,
    mark_ce,
    outer_dscp,
    outer_dst,
    outer_ecn,
    outer_ok,
    set_outer_dscp,
    set_outer_dst,
    shift_outer_dst,
    trim,
)

__all__ = [
    "HOP_LIMIT", "NH_IPV6", "NH_UDP", "OFF_ACTIVE_USID", "OFF_BTH", "OFF_EXT", "OFF_INNER",
    "OFF_OUTER_DST", "OFF_UDP", "OFF_UDP_CSUM", "OP_ACKNOWLEDGE", "OP_MRC_PROBE",
    "OP_MRC_PROBE_REPLY", "OP_RDMA_WRITE_ONLY", "OP_RDMA_WRITE_ONLY_IMM", "PKEY_DEFAULT",
    "SYNDROME_ACK", "SYNDROME_NAK_SEQ", "SYNDROME_RNR_TRIM", "UDP_SPORT_BASE", "WIRE_FIELDS",
    "DecodeError", "TrimmedFields", "active_usid", "decode", "decode_many", "encode",
    "encode_many", "flow_label", "inner_hosts", "is_trimmed", "mark_ce",
    "nack_fields_from_trimmed", "outer_dscp", "outer_dst", "outer_ecn", "outer_ok",
    "pseudo_payload", "set_outer_dscp", "set_outer_dst", "shift_outer_dst", "trim",
    "udp_sport",
]
