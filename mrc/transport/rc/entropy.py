"""The UDP source port of an RC QP: RoCEv2's only entropy for ECMP.

A RoCEv2 packet's 5-tuple is fixed but for the UDP source port (destination port 4791,
protocol 17, the two GIDs), so the NIC chooses that port per QP and the switches' ECMP hash
spreads QPs by it. Linux does it in the verbs core (``include/rdma/ib_verbs.h``,
``rdma_calc_flow_label`` and ``rdma_flow_label_to_udp_sport``, used by the mlx5 and other
RoCE drivers when the application gives no flow label): it folds the product of the two QPNs
into a 20-bit IPv6 flow label, then folds that into the 14 low bits of a port in the range
0xC000..0xFFFF that RoCEv2 reserves for it (IANA's dynamic range; the IBTA RoCEv2 annex lets
the source port carry entropy). This module does the same, in its own code: the same two
folds, so a QP's port depends only on its two QPNs and is the same at both ends.

In mrc-lab both ends of a QP use one number (``mrc.stack.rc_connection``), so the two
directions of a QP share one source port, as they would on Linux with equal QPNs.
"""

from __future__ import annotations

#: The lowest source port RoCEv2 entropy takes (the top two bits set).
ROCE_SPORT_MIN = 0xC000
_FLOW_LABEL_MASK = 0xFFFFF  # 20 bits
_LOW14 = 0x3FFF


def flow_label(lqpn: int, rqpn: int) -> int:
    """A 20-bit flow label from the two QPNs: their product folded down by xor."""
    product = (lqpn & 0xFFFFFF) * (rqpn & 0xFFFFFF)  # two 24-bit QPNs: at most 48 bits
    product ^= product >> 20
    product ^= product >> 40
    return product & _FLOW_LABEL_MASK


def udp_source_port(lqpn: int, rqpn: int) -> int:
    """The QP's UDP source port: its flow label folded into 0xC000..0xFFFF (the label's top
    6 bits xored onto its low 14)."""
    label = flow_label(lqpn, rqpn)
    return ROCE_SPORT_MIN | ((label & _LOW14) ^ (label >> 14))
