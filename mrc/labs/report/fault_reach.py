"""Which faults lie on no path of a lab's traffic.

A fault on an element that no packet of the workload crosses cannot change the run, and a
table that then reads "kept 100%, no dip" for both transports says nothing about either:
``t1-fail-restore`` moved to the Fairwater preset (256 hosts under each T0) fails a T1 that
its two hosts, now under one T0, never reach. The summary marks such a fault and the table
says why, so that nobody reads immunity into it.

Paths in a two-tier Clos, per pair of hosts and in every plane (MRC sprays over all of them;
RC, as NCCL drives it, has a QP per plane): the two NIC ports, their host links and T0s and,
when the T0s differ, the T0s' uplinks and every T1. Permutations and collectives are taken
as every pair of their hosts (a superset of the pairs they use, so a fault is only ever
called off-path when it is). ACKs, probes and PAUSE frames follow the same elements.
"""

from __future__ import annotations

from mrc.labs.schema.lab import ConnectionMatrix, Lab, WriteBw, workload_hosts
from topology import names


def _pairs(lab: Lab) -> list[tuple[int, int]] | None:
    """The workload's host pairs; None: every pair of its hosts (see the module doc)."""
    w = lab.workload
    if isinstance(w, WriteBw):
        return list(w.pairs)
    if isinstance(w, ConnectionMatrix):
        return [(f.src, f.dst) for f in w.flows]
    return None


def off_path_faults(lab: Lab) -> dict[int, str]:
    """``{index in lab.faults: why no traffic crosses its target}`` (faults on the paths,
    and ``ev_deny``, which names connections rather than an element, are left out)."""
    per_t0 = lab.fabric.hosts_per_t0
    hosts = workload_hosts(lab.workload)
    t0s = {h // per_t0 for h in hosts}
    pairs = _pairs(lab)
    if pairs is None:
        crossing = t0s if len(t0s) > 1 else set()
    else:
        crossing = {h // per_t0 for a, b in pairs if a // per_t0 != b // per_t0
                    for h in (a, b)}
    off: dict[int, str] = {}
    for i, fault in enumerate(lab.faults):
        e = fault.element
        if e is None:
            continue
        if e.host is not None:  # a host, a NIC port or a host link
            if e.host not in hosts:
                off[i] = f"h{e.host} sends and receives none of the workload's traffic"
        elif e.kind == names.T0:
            if e.index not in t0s:
                off[i] = f"no host of the workload is under T0 {e.index}"
        elif not crossing:  # a T1 or a fabric link: only traffic between T0s reaches them
            off[i] = ("every pair of the workload's hosts shares its T0, so no traffic "
                      "reaches a T1")
        elif e.kind == names.LINK and e.t0 not in crossing:
            off[i] = f"no traffic between T0s leaves or enters T0 {e.t0}"
    return off
