"""Switches: a T0 or T1 of one plane, forwarding by uSID shift-and-forward.

Switches forward only by shift-and-forward on the outer destination (``pkt.da``), exactly as the
uSID plan in :mod:`topology.usid` says; there is no routing shortcut. Forwarding takes one off
the outer hop limit, as any IPv6 router does. :meth:`Switch.forward` is the one copy of the
shift-and-forward: the arriving port calls it (``OutPort._arrive_switch`` and the PFC ports'
versions, which differ only in how they send), as does :meth:`Switch.receive`.
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
from topology import names, tables, usid
from topology.tables import Rule

#: masks of the halves of a 128-bit address (C integers when compiled)
_LOW64 = cython.declare(cython.ulonglong, 0xFFFFFFFFFFFFFFFF)
_HIGH32 = cython.declare(cython.ulonglong, 0xFFFFFFFF00000000)
_LOW32 = cython.declare(cython.ulonglong, 0xFFFFFFFF)


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
        return port

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
