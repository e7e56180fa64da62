"""Paths between two hosts and the SRv6 addresses that name them."""

from __future__ import annotations

from topology import usid
from topology.spec import FabricSpec


def address_for(spec: FabricSpec, src: int, dst: int, plane: int, t1: int) -> int:
    """Destination address that steers a packet from ``src`` to ``dst`` via plane/T1."""
    src_t0, dst_t0 = spec.t0_of(src), spec.t0_of(dst)
    if src_t0 == dst_t0:
        return usid.local_address(plane, src_t0, spec.port_of(dst))
    return usid.path_address(plane, src_t0, t1, dst_t0, spec.port_of(dst))


def ev_address(spec: FabricSpec, src: int, dst: int, ev: int) -> int:
    """The address an EV selects (the reverse direction uses the same plane and T1)."""
    return address_for(spec, src, dst, usid.ev_plane(ev), usid.ev_t1(ev))
