"""Fabric specification: the numbers that define a two-tier, multi-plane Clos.

A NIC is split into ``planes`` ports; port p attaches to plane p. Every plane is an
independent leaf/spine: ``t0_per_plane`` leaves with ``hosts_per_t0`` hosts below each and
``t1_per_plane`` spines, every T0 linked to every T1 of its plane. Impossible specs are refused
with the reason (``FabricError``), never silently adjusted.

Times are stored as integer picoseconds (``*_ps``) because the simulator is exact; the
constructor takes the human units (ns, Gb/s) that lab files use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mrc.packet import (
    ACK_BYTES,
    DATA_HEADER_BYTES,
    IMMDT_BYTES,
    IPV6_BYTES,
    MIN_TRIM_BYTES,
    PAUSE_BYTES,
)
from topology import usid

#: Ethernet bytes on the wire that are not part of the IPv6 packet:
#: preamble+SFD 8, MAC header 14, FCS 4, inter-frame gap 12.
ETHERNET_OVERHEAD_BYTES = 38
#: Bit times in one PFC pause quantum (IEEE 802.1Qbb, as for 802.3x PAUSE).
PAUSE_QUANTUM_BITS = 512
#: The smallest MTU: RoCE's smallest path MTU (IB MTU 256).
MIN_MTU_BYTES = 256
#: The largest MTU the wire format encodes: the outer IPv6 payload length is 16 bits, and
#: it covers the inner IPv6 header, UDP, BTH, RETH, ImmDt, the MRC extension and the ICRC.
MAX_MTU_BYTES = 0xFFFF + IPV6_BYTES - DATA_HEADER_BYTES - IMMDT_BYTES
#: Beyond 100 Tb/s the shortest packet would take ~12 ps on the wire: integer picoseconds
#: stop resolving serialization.
MAX_LINK_GBPS = 100_000.0
#: A link delay or switch latency above a second is no fabric (and keeps every time far
#: inside float precision where times are converted).
MAX_DELAY_NS = 1e9


class FabricError(ValueError):
    """A fabric spec that cannot be built; the message says why."""


@dataclass(frozen=True)
class FabricSpec:
    """A multi-plane two-tier Clos. Defaults describe a non-oversubscribed 100 GbE fabric."""

    planes: int = 8
    hosts: int = 16
    hosts_per_t0: int = 4
    t1_per_plane: int | None = None  # default: hosts_per_t0 (non-oversubscribed)
    link_gbps: float = 100.0
    link_delay_ns: float = 500.0
    switch_latency_ns: float = 400.0
    buffer_bytes: int = 512 * 1024
    trimming: bool = True
    trim_threshold_bytes: int | None = None  # default: buffer_bytes (trim when full)
    trim_size_bytes: int = 128
    header_queue_bytes: int = 64 * 1024
    ecn_threshold_bytes: int = 128 * 1024
    mtu_bytes: int = 4096  # payload bytes per DATA packet
    switch_radix: int | None = None  # when set, both tiers must fit in this many ports
    # PFC (IEEE 802.1Qbb) on one lossless priority; the mechanism is mrc.sim.pfc
    pfc: bool = True  # switches and NICs run PFC on pfc_priority (RoCE's lossless class)
    pfc_priority: int = 3  # the 802.1p priority of the lossless class
    pfc_xoff_bytes: int | None = None  # default: 2 x ecn_threshold_bytes, >= 16 packets
    pfc_xon_bytes: int | None = None  # default: pfc_xoff_bytes // 2
    pfc_headroom_bytes: int | None = None  # default: pfc_min_headroom_bytes()
    pfc_quanta: int = 0xFFFF  # pause time an XOFF asks for, in 512-bit-time quanta
    pfc_watchdog_us: float = 0.0  # SONiC's PFC watchdog detection time; 0 = off
    pfc_watchdog_restore_us: float | None = None  # default: pfc_watchdog_us
    # ECN of the lossless queue, DCQCN's congestion point (RED, as the DCQCN paper sets it:
    # no mark up to kmin, probability rising to pmax at kmax, every packet above kmax)
    lossless_ecn_kmin_bytes: int = 5_000
    lossless_ecn_kmax_bytes: int = 200_000
    lossless_ecn_pmax: float = 0.01
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        if self.t1_per_plane is None:
            object.__setattr__(self, "t1_per_plane", self.hosts_per_t0)
        if self.trim_threshold_bytes is None:
            object.__setattr__(self, "trim_threshold_bytes", self.buffer_bytes)
        self._validate()
        derived = {"pfc_xoff_bytes": lambda: max(16 * self.packet_bytes(self.mtu_bytes),
                                                 2 * self.ecn_threshold_bytes),
                   "pfc_xon_bytes": lambda: self.pfc_xoff_bytes // 2,  # type: ignore[operator]
                   "pfc_headroom_bytes": self.pfc_min_headroom_bytes,
                   "pfc_watchdog_restore_us": lambda: self.pfc_watchdog_us}
        for name, default in derived.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default())
        self._validate_pfc()

    # ----------------------------------------------------------------- validation
    def _validate(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise FabricError(f"{name} must be a positive number, got {value!r}")

        for name in ("planes", "hosts", "hosts_per_t0", "t1_per_plane", "link_gbps",
                     "buffer_bytes", "trim_size_bytes", "header_queue_bytes", "mtu_bytes"):
            positive(name)
        for name in ("planes", "hosts", "hosts_per_t0", "t1_per_plane", "buffer_bytes",
                     "trim_threshold_bytes", "trim_size_bytes", "header_queue_bytes",
                     "ecn_threshold_bytes", "mtu_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise FabricError(f"{name} must be an integer, got {value!r}")
        for name in ("link_delay_ns", "switch_latency_ns", "ecn_threshold_bytes"):
            if getattr(self, name) < 0:
                raise FabricError(f"{name} must not be negative, got {getattr(self, name)!r}")
        for name in ("link_delay_ns", "switch_latency_ns"):
            if getattr(self, name) > MAX_DELAY_NS:
                raise FabricError(f"{name} must be at most {MAX_DELAY_NS:g} (a second), got "
                                  f"{getattr(self, name)!r}")
        if self.link_gbps > MAX_LINK_GBPS:
            raise FabricError(f"link_gbps must be at most {MAX_LINK_GBPS:g} (integer "
                              f"picoseconds resolve serialization up to there), got "
                              f"{self.link_gbps!r}")
        if not MIN_MTU_BYTES <= self.mtu_bytes <= MAX_MTU_BYTES:
            raise FabricError(f"mtu_bytes must be in [{MIN_MTU_BYTES}, {MAX_MTU_BYTES}] (RoCE's "
                              f"smallest path MTU .. what the packet's 16-bit IPv6 length "
                              f"encodes), got {self.mtu_bytes}")
        if self.hosts % self.hosts_per_t0:
            raise FabricError(
                f"hosts ({self.hosts}) must be a multiple of hosts_per_t0 ({self.hosts_per_t0})")
        if self.planes > usid.MAX_PLANES:
            raise FabricError(f"planes ({self.planes}) exceeds the uSID plan's {usid.MAX_PLANES}")
        if self.t0_per_plane > usid.MAX_T0:
            raise FabricError(
                f"{self.t0_per_plane} T0 per plane exceeds the uSID plan's {usid.MAX_T0}")
        if self.t1_per_plane > usid.MAX_T1:  # type: ignore[operator]
            raise FabricError(
                f"t1_per_plane ({self.t1_per_plane}) exceeds the uSID plan's {usid.MAX_T1}")
        if self.hosts_per_t0 > usid.MAX_PORTS:
            raise FabricError(
                f"hosts_per_t0 ({self.hosts_per_t0}) exceeds the uSID plan's {usid.MAX_PORTS} "
                "local port uSIDs")
        if not 0 < self.trim_threshold_bytes <= self.buffer_bytes:  # type: ignore[operator]
            raise FabricError(
                f"trim_threshold_bytes ({self.trim_threshold_bytes}) must be in "
                f"(0, buffer_bytes={self.buffer_bytes}]")
        if self.trim_size_bytes >= self.packet_bytes(self.mtu_bytes):
            raise FabricError(
                f"trim_size_bytes ({self.trim_size_bytes}) must be smaller than a full packet")
        if self.trim_size_bytes < MIN_TRIM_BYTES:
            raise FabricError(
                f"trim_size_bytes ({self.trim_size_bytes}) must keep the headers a NACK needs "
                f"(at least {MIN_TRIM_BYTES} bytes)")
        if self.buffer_bytes < self.packet_bytes(self.mtu_bytes):
            raise FabricError(f"buffer_bytes ({self.buffer_bytes}) cannot hold one MTU packet")
        if self.switch_radix is not None:
            t0_ports = self.hosts_per_t0 + self.t1_per_plane  # type: ignore[operator]
            if t0_ports > self.switch_radix:
                raise FabricError(
                    f"a T0 needs {t0_ports} ports ({self.hosts_per_t0} hosts + "
                    f"{self.t1_per_plane} T1 uplinks) but switch_radix is {self.switch_radix}")
            if self.t0_per_plane > self.switch_radix:
                raise FabricError(
                    f"a T1 needs {self.t0_per_plane} ports (one per T0) but switch_radix is "
                    f"{self.switch_radix}")

    def _validate_pfc(self) -> None:
        for name in ("pfc_priority", "pfc_xoff_bytes", "pfc_xon_bytes", "pfc_headroom_bytes",
                     "pfc_quanta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise FabricError(f"{name} must be an integer, got {value!r}")
        for name in ("pfc_watchdog_us", "pfc_watchdog_restore_us"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise FabricError(f"{name} must be a number >= 0, got {value!r}")
        if not isinstance(self.pfc, bool):
            raise FabricError(f"pfc must be true or false, got {self.pfc!r}")
        if not 0 <= self.pfc_priority <= 7:
            raise FabricError(f"pfc_priority ({self.pfc_priority}) is an 802.1p priority: 0..7")
        kmin, kmax, pmax = (self.lossless_ecn_kmin_bytes, self.lossless_ecn_kmax_bytes,
                            self.lossless_ecn_pmax)
        for name, value in (("lossless_ecn_kmin_bytes", kmin), ("lossless_ecn_kmax_bytes", kmax)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise FabricError(f"{name} must be an integer >= 0, got {value!r}")
        if kmax < kmin:
            raise FabricError(f"lossless_ecn_kmax_bytes ({kmax}) must not be below "
                              f"lossless_ecn_kmin_bytes ({kmin})")
        if isinstance(pmax, bool) or not isinstance(pmax, int | float) or not 0 <= pmax <= 1:
            raise FabricError(f"lossless_ecn_pmax must be a probability in [0, 1], got {pmax!r}")
        if not 1 <= self.pfc_quanta <= 0xFFFF:
            raise FabricError(f"pfc_quanta ({self.pfc_quanta}) must be in 1..65535")
        if not self.pfc:
            return
        xoff, xon = self.pfc_xoff_bytes, self.pfc_xon_bytes
        headroom = self.pfc_headroom_bytes
        assert xoff is not None and xon is not None and headroom is not None
        if xoff <= 0:
            raise FabricError(f"pfc_xoff_bytes must be positive, got {xoff}")
        if not 0 <= xon < xoff:
            raise FabricError(
                f"pfc_xon_bytes ({xon}) must be below pfc_xoff_bytes ({xoff}): a port "
                "would resume while its ingress is still above the pause threshold")
        need = self.pfc_min_headroom_bytes()
        if headroom < need:
            raise FabricError(
                f"pfc_headroom_bytes ({headroom}) cannot hold what still arrives after an "
                f"XOFF: at least {need} bytes at {self.link_gbps:g} Gb/s (2 x link delay "
                "+ switch latency + 3 MTU frames + one PAUSE frame)")
        if self.pfc_watchdog_us and not self.pfc_watchdog_restore_us:
            raise FabricError("pfc_watchdog_restore_us must be positive when the watchdog "
                              "is on")

    def pfc_min_headroom_bytes(self) -> int:
        """Bytes that can still reach an ingress after it decided to send XOFF: the PAUSE
        waits for at most one frame on the reverse port, serializes, propagates; the
        upstream finishes the frame it is sending; what it sent before the PAUSE arrived
        is still on the wire and in the far switch's pipeline (propagation + latency); the
        first of those packets may have started a frame earlier. At line rate, rounded up
        (wire bytes, so the IPv6 bytes the ingress counts are over-covered)."""
        frame = self.serialization_ps(self.packet_bytes(self.mtu_bytes))
        pause = self.serialization_ps(PAUSE_BYTES)
        span_ps = 2 * self.link_delay_ps + self.switch_latency_ps + 3 * frame + pause
        return -(-span_ps * self.link_bps // 8_000_000_000_000)

    @property
    def pause_quantum_ps(self) -> int:
        """One PFC pause quantum (512 bit times) at the link rate, in ps (rounded up)."""
        return -(-PAUSE_QUANTUM_BITS * 1_000_000_000_000 // self.link_bps)

    # ----------------------------------------------------------------- derived numbers
    @property
    def t0_per_plane(self) -> int:
        return self.hosts // self.hosts_per_t0

    @property
    def t1(self) -> int:
        """T1 switches per plane (``t1_per_plane`` after defaulting)."""
        return int(self.t1_per_plane)  # type: ignore[arg-type]

    @property
    def link_bps(self) -> int:
        return int(round(self.link_gbps * 1e9))

    @property
    def link_delay_ps(self) -> int:
        return int(round(self.link_delay_ns * 1000))

    @property
    def switch_latency_ps(self) -> int:
        return int(round(self.switch_latency_ns * 1000))

    @property
    def nic_gbps(self) -> float:
        return self.planes * self.link_gbps

    def t0_of(self, host: int) -> int:
        """Index of the T0 (same in every plane) that ``host`` hangs under."""
        return host // self.hosts_per_t0

    def port_of(self, host: int) -> int:
        """Downlink port index of ``host`` on its T0."""
        return host % self.hosts_per_t0

    @staticmethod
    def packet_bytes(payload: int) -> int:
        """IPv6 packet bytes of a DATA packet carrying ``payload`` bytes (see mrc.packet)."""
        return DATA_HEADER_BYTES + payload

    def serialization_ps(self, ip_bytes: int) -> int:
        """Time to put an IPv6 packet of ``ip_bytes`` on one link, Ethernet framing included
        (rounded up, as the simulator's ports do)."""
        return -(-(ip_bytes + ETHERNET_OVERHEAD_BYTES) * 8_000_000_000_000 // self.link_bps)

    def base_rtt_ps(self, payload: int | None = None) -> int:
        """Unloaded round trip between hosts under different T0s: a DATA packet out over 4
        links and 3 switches (store and forward), its ACK back the same way."""
        data = self.serialization_ps(self.packet_bytes(self.mtu_bytes if payload is None
                                                       else payload))
        ack = self.serialization_ps(ACK_BYTES)
        one_way = 4 * self.link_delay_ps + 3 * self.switch_latency_ps
        return 2 * one_way + 4 * (data + ack)

    def goodput_ceiling_fraction(self) -> float:
        """Payload share of the wire for full-MTU DATA packets (all headers and Ethernet)."""
        wire = self.packet_bytes(self.mtu_bytes) + ETHERNET_OVERHEAD_BYTES
        return self.mtu_bytes / wire

    def goodput_ceiling_gbps(self, ports: int | None = None) -> float:
        """Best payload rate of ``ports`` NIC ports (default: the whole NIC)."""
        ports = self.planes if ports is None else ports
        return ports * self.link_gbps * self.goodput_ceiling_fraction()

    def with_(self, **changes: Any) -> FabricSpec:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # The post's figure 1: 512-port 100 GbE switches, 512 T0 x 256 NICs, 8 planes.
    "fairwater": dict(planes=8, hosts=131_072, hosts_per_t0=256, t1_per_plane=256,
                      link_gbps=100.0, switch_radix=512),
    # Small fabrics that keep every mechanism but run in seconds.
    "lab-small": dict(planes=4, hosts=8, hosts_per_t0=2, t1_per_plane=4),
    "lab-8plane": dict(planes=8, hosts=16, hosts_per_t0=4, t1_per_plane=4),
}


def preset(name: str, **overrides: Any) -> FabricSpec:
    """A named fabric, optionally with some fields overridden."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise FabricError(
            f"unknown fabric preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
    return FabricSpec(**{**base, **overrides, "name": name})
