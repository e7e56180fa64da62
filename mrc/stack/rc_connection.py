"""RC QPs built over a fabric, NCCL-style: QPs pinned to ECMP-hashed paths, messages striped.

The transport (:mod:`mrc.transport.rc`) never sees the fabric; this module, which does,
gives each QP its paths and sizes its config:

* ``ecmp_t1`` / ``t1_ranking``: which T1 a QP's single path crosses. A stable hash of
  (src, dst, qpn), as an ECMP switch hashes a RoCE flow (whose UDP source port derives from
  the QPN). Rendezvous (highest-random-weight) hashing over blake2b: as uniform as
  ``hash % n``, reproducible across processes (never Python's salted ``hash()``), and the
  ranking doubles as the re-convergence order of ``RcConfig.reroute_after_us``: when a T1
  goes away only the flows on it move, each to its own next choice.
* ``rc_qp_pair``: both ends of one QP, with the addresses toward each other.
* ``rc_config_for`` / ``bdp_packets``: the config for a fabric: under ``cc = "window"`` a
  window of one bandwidth-delay product; under DCQCN (the default) the rate limits, and the
  window is only a cap on packets in flight (``DCQCN_WINDOW_PKTS``), as a RoCE NIC's.
* ``RcConnection``: a ``StripedConnection`` with ``qps_per_plane`` such QPs per plane.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from typing import Any

from mrc.packet import data_bytes
from mrc.transport.rc.config import RcConfig
from mrc.transport.rc.qp import RcQp
from mrc.transport.rc.striping import StripedConnection
from topology.paths import addresses_for
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec


# ---------------------------------------------------------------------- path hashing
def _weight(src: int, dst: int, qpn: int, t1: int) -> int:
    digest = hashlib.blake2b(struct.pack("<QQQQ", src, dst, qpn, t1), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def t1_ranking(spec: FabricSpec, src: int, dst: int, qpn: int) -> list[int]:
    """All T1s of a plane, most preferred first, for the flow (src, dst, qpn)."""
    return sorted(range(spec.t1), key=lambda t1: (-_weight(src, dst, qpn, t1), t1))


def ecmp_t1(spec: FabricSpec, src: int, dst: int, qpn: int) -> int:
    """The T1 an RC QP's path crosses: stable, deterministic, spread evenly over the T1s."""
    return max(range(spec.t1), key=lambda t1: (_weight(src, dst, qpn, t1), -t1))


# ---------------------------------------------------------------------- building QPs
def rc_qp_pair(spec: FabricSpec, src: int, dst: int, qpn: int, plane: int,
               config: RcConfig | None = None, *, t1: int | None = None) -> tuple[RcQp, RcQp]:
    """Both endpoints of one RC QP from ``src`` to ``dst`` pinned to ``plane``.

    The T1 is ``ecmp_t1`` unless ``t1`` is given; each end gets the addresses towards the
    other for every T1 of the plane, in ``t1_ranking`` order (the re-convergence order), so
    ACKs return over the same plane and T1 as the data. Hosts under one T0 have a single path
    per plane (no T1): its EV uses T1 0, as in ``topology.paths``.
    """
    if src == dst:
        raise ValueError("an RC QP needs two different hosts")
    if not 0 <= plane < spec.planes:
        raise ValueError(f"plane {plane} outside 0..{spec.planes - 1}")
    if spec.t0_of(src) == spec.t0_of(dst):
        order = [0]
        t1 = 0
    else:
        order = t1_ranking(spec, src, dst, qpn)
        if t1 is not None:
            if not 0 <= t1 < spec.t1:
                raise ValueError(f"t1 {t1} outside 0..{spec.t1 - 1}")
            order.remove(t1)
            order.insert(0, t1)
    fwd = dict(zip(order, addresses_for(spec, src, dst, plane, order), strict=True))
    rev = dict(zip(order, addresses_for(spec, dst, src, plane, order), strict=True))
    return (RcQp(qpn, src, dst, plane, fwd, config=config),
            RcQp(qpn, dst, src, plane, rev, config=config))


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
    QP i sits on plane ``planes[i % len(planes)]`` on its ECMP path (``rc_qp_pair``); both
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
