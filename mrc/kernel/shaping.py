"""Link rates on the kernel fabric: a token bucket on every veth end, all scaled by one factor.

Python hosts cannot fill 100 Gb/s links, so the whole lab runs ``scale`` times slower, exactly
as the live runtime's dilation (:class:`mrc.live.clock.Clock`): a 100 Gb/s link runs at
100 Gb/s / ``scale`` on the wall clock, and modelled time is wall time / ``scale``. That one
factor is stated in every result.

Why ``tbf``: it is in every kernel (``sch_netem`` and ``sch_fq`` are often modules, and the
machine this was built on has neither), and with a bucket one packet deep it *is* a
serializer: a packet leaves when the tokens for its bytes have accumulated at the link rate,
so back-to-back packets are spaced by their serialization time. Its rate counts Ethernet's
on-wire overhead too (``overhead`` 24: the preamble, FCS and inter-frame gap that the 14-byte
MAC header the kernel already counts leaves out), so a packet occupies the link exactly as
long as in the simulator (``FabricSpec.serialization_ps``). Accuracy: tbf times packets with a
high-resolution timer, so the error per packet is the timer slack (tens of microseconds of
wall time, i.e. ``slack / scale`` modelled) and the long-run rate is exact. The queue is
drop-tail at the spec's ``buffer_bytes`` per port.

What the kernel fabric does not model, and says so in every result (``limits``): trimming and
ECN marking (no Linux qdisc trims a packet to its header and re-queues it at high priority),
and propagation and switch latency (no ``sch_netem`` here; the kernel's own forwarding time,
tens of microseconds per hop, is a few nanoseconds once scaled). Random loss is an eBPF
classifier (:mod:`mrc.kernel.bpf`), not seeded.
"""

from __future__ import annotations

from dataclasses import dataclass

from mrc.kernel import rtnl
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

#: The MAC header is part of what tbf measures (skb length at egress); the rest of the
#: Ethernet overhead is added by the rate table.
MAC_HEADER_BYTES = 14
RATE_OVERHEAD_BYTES = ETHERNET_OVERHEAD_BYTES - MAC_HEADER_BYTES

LIMITS = (
    "no trimming or ECN marking in the kernel fabric (drop-tail queues): MRC sees only loss, "
    "so a full queue costs a timeout-driven retransmission where a trim would cost a NACK",
    "no propagation or switch latency (no sch_netem): the kernel's own forwarding time, "
    "scaled, stands in for it",
    "random loss (loss faults) is drawn by the kernel, unseeded: it differs between runs",
)


@dataclass(frozen=True)
class Shaping:
    """Token-bucket settings for every link of ``spec`` at ``scale`` (modelled / wall)."""

    spec: FabricSpec
    scale: float
    #: A host's own port queue is this many times a switch port's (the host paces itself;
    #: the bucket only re-serializes its catch-up bursts, see mrc.live.host).
    host_queue_factor: int = 4
    #: Wall seconds of sending a host port may catch up at once after its timer fired late
    #: (the host's ``burst_ps``). The host's own bucket is that much deeper than a switch
    #: port's one packet, so time lost to a late wake-up is not lost to the link; the T0
    #: behind it serializes the burst at line rate again.
    host_catch_up_s: float = 0.005

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale!r}")

    @property
    def wall_bps(self) -> float:
        """A nominal link's rate on the wall clock (bits per second)."""
        return self.spec.link_bps / self.scale

    @property
    def burst_bytes(self) -> int:
        """One full-size frame as tbf counts it: a switch port's bucket holds a single packet,
        so the link serializes (never bursts)."""
        return self.spec.packet_bytes(self.spec.mtu_bytes) + MAC_HEADER_BYTES

    def burst(self, port_is_host: bool, fraction: float = 1.0) -> int:
        """Bucket depth of a port: one frame, plus the host's catch-up window on host ports."""
        if not port_is_host:
            return self.burst_bytes
        return self.burst_bytes + int(self.wall_bps * fraction * self.host_catch_up_s / 8)

    def limit_bytes(self, port_is_host: bool) -> int:
        queue = self.spec.buffer_bytes * (self.host_queue_factor if port_is_host else 1)
        return queue + self.burst(port_is_host)

    def requests(self, ifindex: int, ifname: str, port_is_host: bool,
                 fraction: float = 1.0) -> list[rtnl.Request]:
        """The tbf of one link end (interface ``ifname``, index ``ifindex`` in its namespace;
        ``port_is_host``: a host's own end) at ``fraction`` of the nominal rate (created or
        changed)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"rate fraction must be in (0, 1], got {fraction!r}")
        return [rtnl.tbf(ifindex, self.wall_bps * fraction, self.burst(port_is_host, fraction),
                         self.limit_bytes(port_is_host), RATE_OVERHEAD_BYTES, ifname)]

    def describe(self) -> dict[str, object]:
        return {"qdisc": "tbf", "scale": self.scale,
                "link_gbps_model": self.spec.link_gbps,
                "link_mbps_wall": round(self.wall_bps / 1e6, 6),
                "burst_bytes": self.burst_bytes,
                "queue_bytes": self.spec.buffer_bytes,
                "overhead_bytes": RATE_OVERHEAD_BYTES}
