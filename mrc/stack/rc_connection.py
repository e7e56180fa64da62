"""RC QPs built over a fabric, NCCL-style: QPs on the routed fabric, messages striped.

The transport (:mod:`mrc.transport.rc`) never sees the fabric; this module, which does,
gives each QP its destination and sizes its config:

* ``rc_qp_pair``: both ends of one QP, each sending to the other's routed address on the
  QP's plane (:mod:`topology.routed`): a plain IPv6 destination, no source route. The
  switches' ECMP chooses the path (:mod:`mrc.sim.switch`, :mod:`mrc.sim.routing`).
* ``ecmp_t1``: the T1 the routed fabric sends a QP's packets through while it is healthy
  (the source T0's hash of the QP's 5-tuple, its own seed, every T1 a member): what the
  flow and fleet models pin a QP to, so their pins equal the packet model's.
* ``rc_config_for`` / ``bdp_packets``: the config for a fabric: under ``cc = "window"`` a
  window of one bandwidth-delay product; under DCQCN (the default) the rate limits, and the
  window is only a cap on packets in flight (``DCQCN_WINDOW_PKTS``), as a RoCE NIC's.
* ``RcConnection``: a ``StripedConnection`` with ``qps_per_plane`` such QPs per plane.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mrc.packet import data_bytes
from mrc.sim.switch import ecmp_hash, switch_seed
from mrc.transport.rc.config import RcConfig
from mrc.transport.rc.entropy import udp_source_port
from mrc.transport.rc.qp import RcQp
from mrc.transport.rc.striping import StripedConnection
from topology.routed import host_address
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

_LOW64 = (1 << 64) - 1


# ---------------------------------------------------------------------- path hashing
def ecmp_t1(spec: FabricSpec, src: int, dst: int, qpn: int, plane: int) -> int:
    """The T1 a healthy routed fabric sends QP ``qpn``'s packets from ``src`` to ``dst``
    through on ``plane``: the source T0's ECMP hash (``mrc.sim.switch.ecmp_hash`` with that
    switch's seed) of the 5-tuple, modulo the T1 count. Plain and resilient groups agree
    while every T1 is a member (``mrc.sim.routing``). Hosts under one T0 cross no T1 (0)."""
    if spec.t0_of(src) == spec.t0_of(dst):
        return 0
    return int(ecmp_hash_of(spec, src, dst, qpn, plane) % spec.t1)


def ecmp_hash_of(spec: FabricSpec, src: int, dst: int, qpn: int, plane: int) -> int:
    """The source T0's 64-bit ECMP hash of QP ``qpn``'s 5-tuple: the switch picks member
    ``hash mod len(group)`` of the group it has installed (the flow model re-pins QPs with it
    when routing changes a group)."""
    sa = host_address(spec, src, plane)
    da = host_address(spec, dst, plane)
    return int(ecmp_hash(switch_seed(plane, 0, spec.t0_of(src)), sa >> 64, sa & _LOW64,
                         da >> 64, da & _LOW64, udp_source_port(qpn, qpn)))


# ---------------------------------------------------------------------- building QPs
def rc_qp_pair(spec: FabricSpec, src: int, dst: int, qpn: int, plane: int,
               config: RcConfig | None = None) -> tuple[RcQp, RcQp]:
    """Both endpoints of one RC QP from ``src`` to ``dst`` on ``plane``, each addressed to
    the other's routed address there (ACKs return on the same plane; the fabric hashes
    them as it hashes the data)."""
    if src == dst:
        raise ValueError("an RC QP needs two different hosts")
    if not 0 <= plane < spec.planes:
        raise ValueError(f"plane {plane} outside 0..{spec.planes - 1}")
    return (RcQp(qpn, src, dst, plane, {0: host_address(spec, dst, plane)}, config=config),
            RcQp(qpn, dst, src, plane, {0: host_address(spec, src, plane)}, config=config))


def bdp_packets(spec: FabricSpec) -> float:
    """Bandwidth-delay product of one port in full DATA packets (the go-back-N cost unit)."""
    wire_bits = (data_bytes(spec.mtu_bytes) + ETHERNET_OVERHEAD_BYTES) * 8
    return spec.base_rtt_ps() * spec.link_bps / 1e12 / wire_bits


#: Packets in flight at most under DCQCN: a cap, not a congestion window (a RoCE NIC limits
#: a QP's rate, not its window; 1024 x 4 KB is 4 MB, some 40 BDPs of the lab fabrics).
DCQCN_WINDOW_PKTS = 1024


def rc_config_for(spec: FabricSpec, **overrides: Any) -> RcConfig:
    """An ``RcConfig`` for ``spec``: its MTU; under ``cc = "window"`` a window of one BDP plus
    the ACK coalescing slack (so a healthy QP runs at line rate without queueing), under
    DCQCN the cap ``DCQCN_WINDOW_PKTS``; the port's rate and framing for DCQCN's pacing; the
    lossless priority when the fabric runs PFC (RC as deployed). Overrides win."""
    ack_every = int(overrides.get("ack_every", RcConfig().ack_every))
    if overrides.get("cc", RcConfig().cc) == "dcqcn":
        window = DCQCN_WINDOW_PKTS
    else:
        window = math.ceil(bdp_packets(spec)) + ack_every + 2
    params: dict[str, Any] = {"mtu": spec.mtu_bytes, "window_pkts": window,
                              "line_rate_gbps": spec.link_gbps,
                              "frame_overhead_bytes": ETHERNET_OVERHEAD_BYTES,
                              "priority": spec.pfc_priority if spec.pfc else 0}
    params.update(overrides)
    return RcConfig(**params)


# ---------------------------------------------------------------------- the connection
class RcConnection(StripedConnection):
    """One direction (``src`` -> ``dst``) of an NCCL-style RC connection over ``spec``.

    QPs are numbered ``qpn_base`` + i, ordered round by round over ``planes`` (default: all):
    QP i sits on plane ``planes[i % len(planes)]``, routed by the fabric (``rc_qp_pair``); both
    ends of a QP use its number, so the two directions of a host pair need disjoint QPN
    ranges. The config defaults to ``rc_config_for(spec)``. Everything else is
    ``StripedConnection``'s.
    """

    __slots__ = ("spec", "planes")

    def __init__(self, spec: FabricSpec, src: int, dst: int, qpn_base: int, *,
                 qps_per_plane: int = 1, config: RcConfig | None = None,
                 planes: Sequence[int] | None = None, abort_on_error: bool = True) -> None:
        if qps_per_plane < 1:
            raise ValueError(f"qps_per_plane must be at least 1, got {qps_per_plane}")
        self.spec = spec
        config = config or rc_config_for(spec)
        self.planes = list(range(spec.planes) if planes is None else planes)
        if not self.planes:
            raise ValueError("a connection needs at least one plane")
        n = len(self.planes)
        pairs = [rc_qp_pair(spec, src, dst, qpn_base + i, self.planes[i % n], config)
                 for i in range(qps_per_plane * n)]
        super().__init__(src, dst, qpn_base, pairs, abort_on_error=abort_on_error)
