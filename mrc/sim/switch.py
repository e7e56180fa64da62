"""Switches: a T0 or T1 of one plane, forwarding by uSID shift-and-forward or by route.

Two kinds of destination share one fabric, as MRC and RoCE RC share one in a mixed run:

* **uSID carriers** (MRC's static SRv6 source routes): shift-and-forward on the outer
  destination (``pkt.da``), exactly as the uSID plan in :mod:`topology.usid` says, from
  static tables; there is no routing shortcut.
* **Routed addresses** (RC's plain IPv6 destinations, :mod:`topology.routed`): a T0 sends a
  packet for one of its own hosts down that host's port and a packet for another T0 to one
  member of that T0's ECMP group (the uplinks routing currently advertises for it,
  :mod:`mrc.sim.routing` keeps them); a T1 sends it down to the destination T0. The member
  is the 5-tuple hash (:func:`ecmp_hash`, with the switch's own seed) modulo the group's
  length: the group is the live members themselves (``plain`` ECMP) or a fixed table of
  buckets naming them (``resilient``), so one lookup serves both.

Forwarding takes one off the outer hop limit, as any IPv6 router does. A black hole
(:meth:`Switch.set_blackhole`) drops a fraction of what the switch forwards, on the whole
switch or on one egress port, with its links up and its routes advertised. :meth:`Switch.forward`
is the one copy of both lookups: the arriving port calls it (``OutPort._arrive_switch`` and
the PFC ports' versions, which differ only in how they send), as does :meth:`Switch.receive`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.packet import Packet
from mrc.sim.element import Fabric
from mrc.sim.link import Egress
from topology import names, routed, tables, usid
from topology.tables import Rule

#: masks of the halves of a 128-bit address (C integers when compiled)
_LOW64 = cython.declare(cython.ulonglong, 0xFFFFFFFFFFFFFFFF)
_HIGH32 = cython.declare(cython.ulonglong, 0xFFFFFFFF00000000)
_LOW32 = cython.declare(cython.ulonglong, 0xFFFFFFFF)
#: the interface ID's mark bit (topology.routed: HOST_IID_MARK | host)
_IID_MARK = cython.declare(cython.ulonglong, usid.HOST_IID_MARK)
#: the 5-tuple's fixed part: destination port 4791 and protocol 17, below the source port
_PORTS_FIXED = cython.declare(cython.ulonglong, (routed.ROCE_DPORT << 8) | routed.PROTO_UDP)
#: SplitMix64's finalizer constants (Steele, Lea, Flood, "Fast splittable pseudorandom
#: number generators", OOPSLA 2014; the widely used variant of the constants by S. Vigna)
_MIX1 = cython.declare(cython.ulonglong, 0xBF58476D1CE4E5B9)
_MIX2 = cython.declare(cython.ulonglong, 0x94D049BB133111EB)


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def mix64(x: cython.ulonglong) -> cython.ulonglong:
    """A 64-bit integer mix (SplitMix64's finalizer): every input bit moves every output bit.
    Written with masks so that pure Python computes exactly what C's wrapping arithmetic
    does."""
    x = ((x ^ (x >> 30)) * _MIX1) & _LOW64
    x = ((x ^ (x >> 27)) * _MIX2) & _LOW64
    return x ^ (x >> 31)


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def ecmp_hash(seed: cython.ulonglong, sa_hi: cython.ulonglong, sa_lo: cython.ulonglong,
              da_hi: cython.ulonglong, da_lo: cython.ulonglong,
              sport: cython.ulonglong) -> cython.ulonglong:
    """A switch's ECMP hash of a RoCEv2 5-tuple: source and destination address (as their
    64-bit halves), UDP source port, destination port 4791, protocol 17, folded word by word
    through :func:`mix64` from the switch's ``seed`` (each switch has its own, as real
    switches do against hash polarisation)."""
    h: cython.ulonglong = mix64(seed ^ sa_hi)
    h = mix64(h ^ sa_lo)
    h = mix64(h ^ da_hi)
    h = mix64(h ^ da_lo)
    return mix64(h ^ ((sport << 24) | _PORTS_FIXED))


def switch_seed(plane: int, tier: int, index: int) -> int:
    """The ECMP hash seed of one switch: a mix of its identity (mrc-lab's own choice; a real
    switch's seed is configuration, and operators set them apart per tier and device)."""
    return mix64((plane << 32) | (tier << 24) | index | 0x5EED000000000000)


@cython.cclass
class Switch:
    """A T0 or T1 of one plane, forwarding by uSID shift-and-forward from static tables."""

    # What forwarding reads first, in the C struct's first cache line; the rest after.
    up: cython.bint
    usid: cython.longlong
    _block: cython.longlong
    _next_first: cython.longlong
    _ua_first: cython.longlong
    #: the two tables (below) as lists indexed by uSID - first key (None: no entry), which
    #: ``forward`` reads: a list index costs less than boxing a uSID for a dict lookup
    _next_ports: list[Egress | None]
    _ua_ports: list[Egress | None]
    name: str
    net: Fabric
    plane: cython.longlong
    tier: cython.longlong
    index: cython.longlong
    #: lookup of the (possibly shifted) active uSID -> output port, no shift (T0: T1
    #: uSIDs -> uplinks; T1: T0 uSIDs -> downlinks)
    _next: dict[int, Egress]
    #: uA entries (T0 only): local port uSID -> downlink, shifted once more
    _ua: dict[int, Egress]
    uplinks: list[Egress]
    downlinks: list[Egress]
    drops: dict[str, int]
    #: routed forwarding: the plane's routed block (``da_hi >> 32``), the ECMP seed, the
    #: groups by destination T0 (T0 only: live members, or a bucket table of them), and
    #: what names a source address (hosts per T0) and this T0's first host
    _rtag: cython.ulonglong
    seed: cython.ulonglong
    _groups: list[list[Egress]]
    _hpt0: cython.longlong
    _first_host: cython.longlong
    #: black hole: the share of everything forwarded that is dropped, and per egress port
    _bh_on: cython.bint
    _bh: cython.double
    _bh_ports: dict[Egress, float]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Fabric, name: str, plane: int, tier: int, index: int) -> None:
        self.name = name
        self.net = net
        self.plane = plane
        self.tier = tier  # 0 = leaf (T0), 1 = spine (T1)
        self.index = index
        self.usid = usid.t0_usid(index) if tier == 0 else usid.t1_usid(index)
        self._block = usid.block(plane)
        self._next = {}
        self._ua = {}
        self._next_first = 0
        self._next_ports = []
        self._ua_first = 0
        self._ua_ports = []
        self.uplinks = []
        self.downlinks = []
        self.up = True  # a dead switch also holds all its links down (mrc.sim.faults)
        self.drops = {}
        self._rtag = routed.block(plane)
        self.seed = switch_seed(plane, tier, index)
        self._groups = []
        self._hpt0 = net.spec.hosts_per_t0
        self._first_host = index * net.spec.hosts_per_t0 if tier == 0 else 0
        self._bh_on = False
        self._bh = 0.0
        self._bh_ports = {}

    def __repr__(self) -> str:
        return f"<Switch {self.name}{'' if self.up else ' DOWN'}>"

    def build_tables(self, rules: Iterable[Rule]) -> None:
        """Expand the plan's static rules (:func:`topology.tables.switch_table`) into direct
        ``uSID -> port`` dicts, once, so forwarding is one dict lookup per hop."""
        self._next.clear()
        self._ua.clear()
        for rule in rules:
            for value in range(rule.first, rule.last + 1):
                if rule.action == tables.UN:
                    if value != self.usid:
                        raise ValueError(f"{self.name}: uN rule for foreign uSID {value:#06x}")
                    continue
                target = rule.next_base + (value - rule.first)
                if rule.next_kind == names.T1 and self.tier == 0:
                    port = self.uplinks[target]
                elif rule.next_kind == names.T0 and self.tier == 1:
                    port = self.downlinks[target]
                elif rule.next_kind == names.NIC_PORT and self.tier == 0:
                    port = self.downlinks[self.net.spec.port_of(target)]
                else:
                    raise ValueError(f"{self.name}: cannot reach {rule.next_kind} {target}")
                if rule.action == tables.FORWARD:
                    self._next[value] = port
                elif rule.action == tables.UA:
                    self._ua[value] = port
                else:
                    raise ValueError(f"{self.name}: unknown action {rule.action!r}")
        self._next_first, self._next_ports = _dense(self._next)
        self._ua_first, self._ua_ports = _dense(self._ua)

    @cython.ccall
    @cython.annotation_typing(True)
    def receive(self, pkt: Packet) -> None:
        """A packet injected directly (tests, tools): dropped if this switch is down, else
        :meth:`forward`. Packets that cross a link call :meth:`forward` from their arrival
        (``OutPort._arrive_switch``), one call less per hop."""
        if not self.up:
            self._count_drop(pkt, "down")
            return
        port = self.forward(pkt)
        if port is not None:
            port.send(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def forward(self, pkt: Packet) -> Any:  # Egress | None
        """Shift-and-forward, the one copy every arrival uses: own uSID active -> shift (uN);
        look the active uSID up; a local port uSID (uA) shifts once more and leaves on that
        downlink. Rewrites the destination (``pkt.da_hi``/``da_lo``, once, however many
        uSIDs it consumed), takes one off the hop limit and returns the egress port;
        anything else is counted as ``no_route`` and gives None. The caller sends (a PFC
        port with its ingress)."""
        top: cython.ulonglong = pkt.da_hi  # the block and the first two uSIDs
        if top >> 32 != self._block:
            if top >> 32 == self._rtag:
                return self._route_ip(pkt, top)
            self._no_route(pkt)
            return None
        active: cython.longlong = (top >> 16) & 0xFFFF
        own: cython.longlong = self.usid
        shift: cython.int = 0  # bits the carrier moves left: 16 per uSID consumed
        while active == own:  # uN (a carrier may name the same switch twice)
            shift += 16
            if shift == 16:
                active = top & 0xFFFF
            elif shift <= 80:  # a uSID of the low 64 bits
                active = (pkt.da_lo >> (80 - shift)) & 0xFFFF
            else:
                active = 0
        port = None
        i: cython.Py_ssize_t = active - self._next_first
        if 0 <= i < len(self._next_ports):
            port = self._next_ports[i]
        if port is None:
            i = active - self._ua_first
            if 0 <= i < len(self._ua_ports):
                port = self._ua_ports[i]
            if port is None:
                self._no_route(pkt)
                return None
            shift += 16
        if shift:  # one rewrite of the 128-bit address, on its two 64-bit halves: the
            # value usid.shift gives applied shift // 16 times (the block stays; the
            # carrier's 96 bits move left and zeros come in; every result is masked, so
            # the bits a C shift loses never matter)
            low: cython.ulonglong = pkt.da_lo
            carrier: cython.ulonglong
            if shift < 64:
                carrier = (top << shift) | (low >> (64 - shift))
                low = (low << shift) & _LOW64
            else:
                carrier = low << (shift - 64)
                low = 0
            pkt.da_hi = (top & _HIGH32) | (carrier & _LOW32)
            pkt.da_lo = low
        pkt.hop_limit -= 1  # IPv6 forwarding (at most 3 switches: never reaches 0)
        if self._bh_on and self._blackholed(pkt, port):
            return None
        return port

    @cython.ccall
    @cython.annotation_typing(True)
    def _route_ip(self, pkt: Packet, top: cython.ulonglong) -> Any:  # Egress | None
        """Routed forwarding of a plain IPv6 destination (see the module docstring)."""
        t0: cython.Py_ssize_t = (top >> 16) & 0xFFFF
        i: cython.Py_ssize_t
        n: cython.Py_ssize_t
        port = None
        if self.tier != 0:
            if t0 < len(self.downlinks):
                port = self.downlinks[t0]
        elif t0 == self.index:
            i = cython.cast(cython.Py_ssize_t, pkt.da_lo & _LOW32) - self._first_host
            if 0 <= i < len(self.downlinks):
                port = self.downlinks[i]
        elif t0 < len(self._groups):
            group = self._groups[t0]
            n = len(group)
            if n:
                port = group[self._ecmp(pkt, n)]
        if port is None:
            self._no_route(pkt)
            return None
        pkt.hop_limit -= 1
        if self._bh_on and self._blackholed(pkt, port):
            return None
        return port

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _ecmp(self, pkt: Packet, n: cython.Py_ssize_t) -> cython.Py_ssize_t:
        """The member of an ``n``-entry group ``pkt`` hashes to at this switch. The source
        address is the routed plan's (``topology.routed.host_address``: the plane's block,
        the source's T0, its interface ID); the source port is the packet's entropy field
        (RC: its QP's UDP source port, ``mrc.transport.rc.entropy``)."""
        src: cython.ulonglong = pkt.src
        sa_hi: cython.ulonglong = (self._rtag << 32) | (
            (src // cython.cast(cython.ulonglong, self._hpt0)) << 16)
        h: cython.ulonglong = ecmp_hash(self.seed, sa_hi, _IID_MARK | src, pkt.da_hi,
                                        pkt.da_lo, cython.cast(cython.ulonglong, pkt.ev))
        return cython.cast(cython.Py_ssize_t, h % cython.cast(cython.ulonglong, n))

    @cython.ccall
    @cython.annotation_typing(True)
    def _blackholed(self, pkt: Packet, port: Any) -> cython.bint:
        """Whether the black hole eats this packet: always at fraction 1, else one draw of the
        simulator's seeded generator per packet."""
        frac: cython.double = self._bh
        if self._bh_ports:
            f = self._bh_ports.get(port)
            if f is not None and f > frac:
                frac = f
        if frac <= 0.0:
            return False
        if frac < 1.0 and self.net.sim.rng.random() >= frac:
            return False
        self._count_drop(pkt, "blackhole")
        return True

    # ------------------------------------------------------------------ control plane
    def set_groups(self, groups: list[list[Egress]]) -> None:
        """Install the ECMP groups by destination T0 (``mrc.sim.routing`` computes them)."""
        self._groups = groups

    def set_group(self, t0: int, members: list[Egress]) -> None:
        """Replace the group toward one destination T0."""
        self._groups[t0] = members

    def group(self, t0: int) -> list[Egress]:
        """The group toward destination T0 ``t0`` as installed (tests, tools)."""
        return list(self._groups[t0])

    def set_blackhole(self, fraction: float, port: Egress | None = None) -> None:
        """Drop ``fraction`` of what this switch forwards (0 ends it), on every egress port
        or on ``port`` only; its links and routes are untouched."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"black-hole fraction {fraction} outside 0..1")
        if port is None:
            self._bh = fraction
        elif fraction > 0.0:
            self._bh_ports[port] = fraction
        else:
            self._bh_ports.pop(port, None)
        self._bh_on = self._bh > 0.0 or bool(self._bh_ports)

    def route(self, da: int) -> tuple[Egress | None, int]:
        """The port and rewritten address :meth:`receive` would use (tests, tools)."""
        if da >> 96 != self._block:
            return None, da
        active = (da >> 80) & 0xFFFF
        while active == self.usid:
            da = usid.shift(da)
            active = usid.active(da)
        port = self._next.get(active)
        if port is None:
            port = self._ua.get(active)
            if port is None:
                return None, da
            da = usid.shift(da)
        return port, da

    @cython.ccall
    @cython.annotation_typing(True)
    def _no_route(self, pkt: Packet) -> None:
        self._count_drop(pkt, "no_route")

    @cython.ccall
    @cython.annotation_typing(True)
    def _count_drop(self, pkt: Packet, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if self.net.observer is not None:
            self.net.observer(self.net.sim.now, self.name, pkt, reason)

    @property
    def ports(self) -> list[Egress]:
        return [*self.downlinks, *self.uplinks]

    def stats(self) -> dict[str, object]:
        row: dict[str, object] = {"switch": self.name, "plane": self.plane,
                                  "tier": f"t{self.tier}", "index": self.index, "up": self.up}
        row["drop_no_route"] = self.drops.get("no_route", 0)
        row["drop_down"] = self.drops.get("down", 0)
        if "blackhole" in self.drops:
            row["drop_blackhole"] = self.drops["blackhole"]
        for key in ("tx_packets", "trims", "ecn_marks"):
            row[key] = sum(getattr(p, key) for p in self.ports)
        row["drops"] = (sum(sum(p.drops.values()) for p in self.ports)
                        + sum(self.drops.values()))
        row["peak_queue_bytes"] = max((p.peak_qbytes for p in self.ports), default=0)
        return row


def _dense(table: dict[int, Egress]) -> tuple[int, list[Egress | None]]:
    """``table`` as (first key, list by key - first key), None where a key is missing."""
    if not table:
        return 0, []
    first = min(table)
    ports: list[Egress | None] = [None] * (max(table) - first + 1)
    for key, port in table.items():
        ports[key - first] = port
    return first, ports
