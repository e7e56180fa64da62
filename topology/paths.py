"""Paths between two hosts and the SRv6 addresses that name them.

A path is fixed by its plane and, for hosts under different T0s, its T1: hosts under the same
T0 have ``planes`` paths (NIC port, T0, NIC port), other pairs ``planes x t1_per_plane``
(NIC port, source T0, T1, destination T0, NIC port). Hop lists start and end at NIC ports
because a NIC port is a fault target of its own and names the plane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topology import names, usid
from topology.spec import FabricSpec


class PathError(ValueError):
    """A path request that has no answer (same host twice, plane or T1 out of range)."""


def address_for(spec: FabricSpec, src: int, dst: int, plane: int, t1: int) -> int:
    """Destination address that steers a packet from ``src`` to ``dst`` via plane/T1."""
    src_t0, dst_t0 = spec.t0_of(src), spec.t0_of(dst)
    if src_t0 == dst_t0:
        return usid.local_address(plane, src_t0, spec.port_of(dst))
    return usid.path_address(plane, src_t0, t1, dst_t0, spec.port_of(dst))


def addresses_for(spec: FabricSpec, src: int, dst: int, plane: int,
                  t1s: Sequence[int]) -> list[int]:
    """:func:`address_for` of each T1 of ``t1s`` in one plane (hosts under one T0 have one
    path per plane, whatever the T1)."""
    src_t0, dst_t0 = spec.t0_of(src), spec.t0_of(dst)
    if src_t0 == dst_t0:
        return [usid.local_address(plane, src_t0, spec.port_of(dst))] * len(t1s)
    return usid.path_addresses(plane, src_t0, t1s, dst_t0, spec.port_of(dst))


def ev_address(spec: FabricSpec, src: int, dst: int, ev: int) -> int:
    """The address an EV selects (the reverse direction uses the same plane and T1)."""
    return address_for(spec, src, dst, usid.ev_plane(ev), usid.ev_t1(ev))


@dataclass(frozen=True, slots=True)
class Path:
    """One path from host ``src`` to host ``dst``; ``t1`` is None under a shared T0."""

    src: int
    dst: int
    plane: int
    t1: int | None
    hops: tuple[str, ...]
    links: tuple[str, ...]
    address: int
    address_text: str
    ev: int  # the EV of this path with instance 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the address as text: 128-bit integers do not survive JSON readers)."""
        return {"src": names.host_name(self.src), "dst": names.host_name(self.dst),
                "plane": self.plane, "t1": self.t1, "ev": self.ev,
                "address": self.address_text, "hops": list(self.hops),
                "links": list(self.links)}


def host_index(spec: FabricSpec, host: int | str) -> int:
    """A host given as an index or a name (``h17``; selectors are not hosts), range-checked."""
    if isinstance(host, str):
        element = names.resolve(spec, host)
        if element.kind != names.HOST:
            raise names.UnknownElementError(host, f"is a {element.kind}, not a host")
        return element.index  # type: ignore[return-value]
    if isinstance(host, bool) or not isinstance(host, int):
        raise names.UnknownElementError(repr(host), "a host is an index or a name like h17")
    if not 0 <= host < spec.hosts:
        raise names.UnknownElementError(
            names.host_name(host), f"host index {host} outside 0..{spec.hosts - 1}")
    return host


def path(spec: FabricSpec, src: int | str, dst: int | str, plane: int,
         t1: int | None = None) -> Path:
    """The path from ``src`` to ``dst`` in ``plane`` via ``t1`` (ignored under a shared T0)."""
    s, d = host_index(spec, src), host_index(spec, dst)
    if s == d:
        raise PathError(f"{names.host_name(s)} to itself does not cross the fabric")
    if not 0 <= plane < spec.planes:
        raise PathError(f"plane {plane} outside 0..{spec.planes - 1}")
    s_t0, d_t0 = spec.t0_of(s), spec.t0_of(d)
    if s_t0 == d_t0:
        return _local(spec, s, d, plane, s_t0)
    if t1 is None or not 0 <= t1 < spec.t1:
        raise PathError(
            f"{names.host_name(s)} and {names.host_name(d)} are under different T0s: "
            f"give a T1 in 0..{spec.t1 - 1}, not {t1!r}")
    return _crossing(spec, s, d, plane, t1, s_t0, d_t0)


def path_for_ev(spec: FabricSpec, src: int | str, dst: int | str, ev: int) -> Path:
    """The path an EV selects (its instance bits do not change the path)."""
    return path(spec, src, dst, usid.ev_plane(ev), usid.ev_t1(ev))


def paths_between(spec: FabricSpec, src: int | str, dst: int | str) -> list[Path]:
    """All paths from ``src`` to ``dst``, plane by plane, then T1 by T1."""
    s, d = host_index(spec, src), host_index(spec, dst)
    if s == d:
        raise PathError(f"{names.host_name(s)} to itself does not cross the fabric")
    s_t0, d_t0 = spec.t0_of(s), spec.t0_of(d)
    if s_t0 == d_t0:
        return [_local(spec, s, d, plane, s_t0) for plane in range(spec.planes)]
    return [_crossing(spec, s, d, plane, t1, s_t0, d_t0)
            for plane in range(spec.planes) for t1 in range(spec.t1)]


def _local(spec: FabricSpec, s: int, d: int, plane: int, t0: int) -> Path:
    src_port, dst_port = names.nic_port_name(s, plane), names.nic_port_name(d, plane)
    switch = names.t0_name(plane, t0)
    address = usid.local_address(plane, t0, spec.port_of(d))
    return Path(s, d, plane, None, (src_port, switch, dst_port),
                (names.host_link_name(s, plane, t0), names.host_link_name(d, plane, t0)),
                address, usid.format_address(address), usid.make_ev(plane, 0))


def _crossing(spec: FabricSpec, s: int, d: int, plane: int, t1: int, s_t0: int,
              d_t0: int) -> Path:
    address = usid.path_address(plane, s_t0, t1, d_t0, spec.port_of(d))
    hops = (names.nic_port_name(s, plane), names.t0_name(plane, s_t0),
            names.t1_name(plane, t1), names.t0_name(plane, d_t0),
            names.nic_port_name(d, plane))
    links = (names.host_link_name(s, plane, s_t0), names.fabric_link_name(plane, s_t0, t1),
             names.fabric_link_name(plane, d_t0, t1), names.host_link_name(d, plane, d_t0))
    return Path(s, d, plane, t1, hops, links, address, usid.format_address(address),
                usid.make_ev(plane, t1))
