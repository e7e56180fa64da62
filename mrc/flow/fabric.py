"""The fabric as the flow model's resources: host classes, T1 types and their state.

Resources are directed link *bundles* with a capacity in goodput Gb/s:

* ``host_up[c, p]`` / ``host_down[c, p]``: the plane-p NIC ports of host class ``c`` toward /
  from their T0 (a class is one host, or a set of hosts that are interchangeable);
* ``t0_up[o, g]`` / ``t0_down[o, g]``: the links between the T0s of *T0 group* ``o`` and the
  T1s of *type* ``g`` (a group is one T0 or a set of interchangeable T0s, a type one T1 or a
  set of interchangeable T1s of one plane), up and down.

Why bundles are exact: when every flow that crosses a bundle spreads over its members in
the same proportions, every member carries the same load and saturates at the same instant,
so max-min fairness over the bundle equals max-min fairness over its members (the max-min
allocation is unique, so it inherits every symmetry of the problem). Hosts and T0s are
grouped only when the workload treats them alike (an all-to-all) and no fault of the whole
schedule tells them apart; T1s of a plane are grouped only when no fault touches them and
the transport spreads evenly over them (MRC's expected EV spread, :mod:`mrc.flow.paths`).
Anything a fault names gets its own class, group or type. With a class per host, a group
per T0 and a type per T1, nothing is grouped.

Capacities are payload rates: ``link_gbps x FabricSpec.goodput_ceiling_fraction()`` (full-MTU
DATA packets with all their headers and Ethernet framing), the same ceiling the packet runs
report. ACKs, probes and NACKs share the links in the packet model; here they are left out
(a few percent of the reverse direction).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from mrc.flow.conditions import Change, Conditions
from topology import names
from topology.spec import FabricSpec


@dataclass(frozen=True)
class Layout:
    """Host classes, T0 groups and T1 types of one run (fixed for the whole schedule).

    A T0 *group* is a set of T0s the workload and the schedule cannot tell apart (one T0
    each when connections are enumerated); a host class lives in one T0 group and has the
    same number of hosts under each of its T0s.
    """

    spec: FabricSpec
    class_group: np.ndarray  # T0 group of each host class
    class_size: np.ndarray  # hosts in each class (over all T0s of its group)
    class_host: np.ndarray  # a representative host of each class
    group_size: np.ndarray  # T0s in each T0 group
    group_of_t0: np.ndarray  # [t0] -> its T0 group
    type_plane: np.ndarray  # plane of each T1 type (global type ids, plane by plane)
    type_size: np.ndarray  # T1s in each type
    type_t1: np.ndarray  # a representative T1 of each type
    type_of: np.ndarray  # [plane, t1] -> global type id

    @property
    def classes(self) -> int:
        return len(self.class_group)

    @property
    def t0_groups(self) -> int:
        return len(self.group_size)

    @property
    def types(self) -> int:
        return len(self.type_plane)

    @property
    def link_gbps(self) -> float:
        """Goodput capacity of one link."""
        return self.spec.link_gbps * self.spec.goodput_ceiling_fraction()

    # resource ids: host_up | host_down | t0_up | t0_down
    @property
    def resources(self) -> int:
        return 2 * self.classes * self.spec.planes + 2 * self.t0_groups * self.types

    def host_up(self, cls: np.ndarray, plane: np.ndarray | int) -> np.ndarray:
        return cls * self.spec.planes + plane

    def host_down(self, cls: np.ndarray, plane: np.ndarray | int) -> np.ndarray:
        return (self.classes + cls) * self.spec.planes + plane

    def t0_up(self, group: np.ndarray, gtype: np.ndarray) -> np.ndarray:
        return 2 * self.classes * self.spec.planes + group * self.types + gtype

    def t0_down(self, group: np.ndarray, gtype: np.ndarray) -> np.ndarray:
        return (2 * self.classes * self.spec.planes + self.t0_groups * self.types
                + group * self.types + gtype)


def touched(spec: FabricSpec, changes: Iterable[Change]
            ) -> tuple[dict[int, set[str]], set[tuple[int, int]], set[int]]:
    """What the schedule names, which cannot be grouped with what it does not: hosts (with
    the host-level targets that touch them), (plane, T1)s, and T0s (by index, any plane)."""
    hosts: dict[int, set[str]] = {}
    t1s: set[tuple[int, int]] = set()
    t0s: set[int] = set()
    for change in changes:
        element = names.resolve(spec, change.target)
        if element.kind == names.T1 or (element.kind == names.LINK and element.t1 is not None):
            t1s.add((int(element.plane), int(element.t1)))  # type: ignore[arg-type]
        if element.kind == names.T0 or (element.kind == names.LINK and element.t1 is not None):
            t0s.add(int(element.t0))  # type: ignore[arg-type]
        elif element.host is not None:  # a NIC port or a host link
            hosts.setdefault(int(element.host), set()).add(element.name)
            t0s.add(spec.t0_of(int(element.host)))
    return hosts, t1s, t0s


def _types(spec: FabricSpec, t1_faults: set[tuple[int, int]], group_t1s: bool
           ) -> tuple[np.ndarray, ...]:
    type_of = np.empty((spec.planes, spec.t1), dtype=np.int64)
    plane_l: list[int] = []
    size_l: list[int] = []
    rep_l: list[int] = []
    for p in range(spec.planes):
        if group_t1s:
            clean = [k for k in range(spec.t1) if (p, k) not in t1_faults]
            if clean:
                type_of[p, clean] = len(plane_l)
                plane_l.append(p)
                size_l.append(len(clean))
                rep_l.append(clean[0])
            for k in sorted(k for q, k in t1_faults if q == p):
                type_of[p, k] = len(plane_l)
                plane_l.append(p)
                size_l.append(1)
                rep_l.append(k)
        else:
            type_of[p] = np.arange(len(plane_l), len(plane_l) + spec.t1)
            plane_l.extend([p] * spec.t1)
            size_l.extend([1] * spec.t1)
            rep_l.extend(range(spec.t1))
    return (np.array(plane_l, dtype=np.int64), np.array(size_l, dtype=np.int64),
            np.array(rep_l, dtype=np.int64), type_of)


def make_layout(spec: FabricSpec, hosts: np.ndarray, changes: list[Change], *,
                group_hosts: bool, group_t1s: bool) -> tuple[Layout, np.ndarray]:
    """The layout for the workload's ``hosts`` and the schedule; also each host's class.

    ``group_hosts``: T0s that no change names and that hold as many of ``hosts`` form one T0
    group, and the hosts of a group with the same host-level faults (none, outside named
    T0s) one class; otherwise every T0 is its own group and every host its own class.
    ``group_t1s``: the T1s of a plane that no change names form one type; otherwise one type
    per T1.
    """
    host_faults, t1_faults, t0_faults = touched(spec, changes)
    hosts = np.asarray(hosts, dtype=np.int64)
    t0_of_host = hosts // spec.hosts_per_t0
    t0s = spec.t0_per_plane
    if group_hosts:
        ranks_per_t0 = np.bincount(t0_of_host, minlength=t0s)
        keys: dict[tuple[str, int], int] = {}
        group_of_t0 = np.empty(t0s, dtype=np.int64)
        for i in range(t0s):
            t0_key = ("t0", i) if i in t0_faults else ("ranks", int(ranks_per_t0[i]))
            group_of_t0[i] = keys.setdefault(t0_key, len(keys))
        group_size = np.bincount(group_of_t0, minlength=len(keys)).astype(np.int64)
        host_group = group_of_t0[t0_of_host]
        special = {h: frozenset(v) for h, v in host_faults.items()}
        class_keys: dict[tuple[int, frozenset[str]], int] = {}
        cls = np.empty(len(hosts), dtype=np.int64)
        for grp in np.unique(host_group).tolist():  # plain classes first, in group order
            class_keys.setdefault((grp, frozenset()), len(class_keys))
        plain = np.array([class_keys.get((g, frozenset()), -1) for g in range(len(keys))])
        cls[:] = plain[host_group]
        for n in np.flatnonzero(np.isin(hosts, list(special))).tolist():
            key = (int(host_group[n]), special[int(hosts[n])])
            cls[n] = class_keys.setdefault(key, len(class_keys))
        class_group = np.array([k[0] for k in class_keys], dtype=np.int64)
        class_size = np.bincount(cls, minlength=len(class_keys)).astype(np.int64)
        class_host = np.full(len(class_keys), -1, dtype=np.int64)
        class_host[cls[::-1]] = hosts[::-1]  # the first host of each class
    else:
        cls = np.arange(len(hosts), dtype=np.int64)
        group_of_t0 = np.arange(t0s, dtype=np.int64)
        group_size = np.ones(t0s, dtype=np.int64)
        class_group = t0_of_host
        class_size = np.ones(len(hosts), dtype=np.int64)
        class_host = hosts.copy()
    type_plane, type_size, type_t1, type_of = _types(spec, t1_faults, group_t1s)
    layout = Layout(spec, class_group, class_size, class_host, group_size, group_of_t0,
                    type_plane, type_size, type_t1, type_of)
    return layout, cls


@dataclass(frozen=True)
class View:
    """The fabric under one set of active conditions, per class, T0 and type."""

    host_ok: np.ndarray  # [class, plane] the host link and NIC port carry traffic
    host_cap: np.ndarray  # [class, plane] rate fraction (degrade)
    host_loss: np.ndarray  # [class, plane] loss probability
    t0_ok: np.ndarray  # [plane, T0 group]
    type_ok: np.ndarray  # [T0 group, type] every link and T1 of the bundle is up
    type_cap: np.ndarray  # [T0 group, type] rate fraction
    type_loss: np.ndarray  # [T0 group, type] loss probability
    drained: np.ndarray  # [type] an operator drain denies MRC's EVs through it


def make_view(layout: Layout, conditions: Conditions,
              class_index: Mapping[int, int]) -> View:
    """The state of every resource under ``conditions`` (see :class:`View`).

    ``class_index``: the class of each host a host-level condition can name (touched hosts).
    """
    spec = layout.spec
    planes, t0s = spec.planes, layout.t0_groups
    host_ok = np.ones((layout.classes, planes), dtype=bool)
    host_cap = np.ones((layout.classes, planes))
    host_loss = np.zeros((layout.classes, planes))
    t0_ok = np.ones((planes, t0s), dtype=bool)
    type_ok = np.ones((t0s, layout.types), dtype=bool)
    type_cap = np.ones((t0s, layout.types))
    type_loss = np.zeros((t0s, layout.types))
    drained = np.zeros(layout.types, dtype=bool)
    for (family, target), value in sorted(conditions):
        e = names.resolve(spec, target)
        plane = int(e.plane) if e.plane is not None else 0
        if e.kind == names.T0:  # a named T0 is a group of its own
            grp = int(layout.group_of_t0[e.index or 0])
            if family == "degrade":  # every link of it: its T0-T1 links and host links
                type_cap[grp, layout.type_plane == plane] = value
                host_cap[layout.class_group == grp, plane] = value
            elif family == "blackhole" and value < 1:  # drops a share of what it forwards
                type_loss[grp, layout.type_plane == plane] = value
            else:
                t0_ok[plane][grp] = False
        elif e.kind == names.T1:
            g = int(layout.type_of[plane][e.index or 0])
            if family == "drain":
                drained[g] = True
            elif family == "degrade":  # every link of it, to every T0
                type_cap[:, g] = value
            elif family == "blackhole" and value < 1:
                type_loss[:, g] = value
            else:  # down, or a black hole that forwards nothing
                type_ok[:, g] = False
        elif e.host is not None:  # NIC port, host link or (nic_stall) a host
            c = class_index.get(int(e.host))
            if c is None:
                continue  # a host the workload does not use
            if family == "stall":  # its NIC drops what it receives, on every plane
                host_ok[c, :] = False
            elif family == "down":
                host_ok[c, plane] = False
            elif family == "degrade":
                host_cap[c, plane] = value
            elif family == "loss":
                host_loss[c, plane] = value
        else:  # a T0-T1 link
            g = int(layout.type_of[plane][e.t1 or 0])
            i = int(layout.group_of_t0[e.t0 or 0])
            if family == "down" or (family == "blackhole" and value >= 1):
                type_ok[i, g] = False
            elif family == "degrade":
                type_cap[i, g] = value
            elif family in ("loss", "blackhole"):
                type_loss[i, g] = value
    return View(host_ok, host_cap, host_loss, t0_ok, type_ok, type_cap, type_loss, drained)
