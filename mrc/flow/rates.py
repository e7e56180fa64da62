"""Steady rates of one transport's connections under one fabric view.

The transport's usage of paths is data (:class:`mrc.flow.paths.Entries`); here it meets the
fabric's state (:class:`mrc.flow.fabric.View`) and becomes a max-min problem:

* **MRC** (``MrcQueuePair``): every NIC port pulls its plane's packets on its own, so each
  (connection, plane) is a variable of its own; within a plane the QP sprays round robin over
  its GOOD EVs, so a path carries its share of the plane's GOOD EVs. With ``spray = "reps"``
  the share is also weighted by the path's rate fraction: REPS keeps reusing the EVs whose
  packets come back unmarked, which in steady state loads paths in proportion to what they
  can carry (a link at 25% gets a quarter of its round-robin share). Lost packets are resent:
  the wire carries ``1 / (1 - loss)`` per unit of goodput on a lossy path. A plane with no
  GOOD EV carries nothing; MRC's view of which EVs are GOOD lags the fabric on restores
  (:mod:`mrc.flow.conditions`).
* **RC** (``RcConnection``): a message is striped in equal chunks over all the connection's
  QPs and completes when the last chunk does, so the QPs move at one pace (the slowest's):
  one variable per connection, the per-QP rate. A QP on a dead path stalls its whole
  connection. Random loss costs go-back-N about ``loss x BDP`` packets resent per packet
  sent: everything in flight behind the lost one, i.e. the QP's window (``rc_config_for``
  sizes it at one BDP plus the ACK coalescing slack), so the wire carries
  ``1 + loss x window`` per unit of goodput.

ACKs are load too: every ``ack_every`` DATA packets the receiver sends one ACK back along the
same plane and T1, about 1% (MRC) or 0.5% (RC) of the data rate on the reverse path, which a
bidirectional test feels on every link.

Why max-min fairness is a fair stand-in for the packet model's steady state: each NIC port
serves the QPs of its plane round robin (``Nic``, ``poll_round_robin``), which is max-min at
the port; MRC's switches trim and its congestion control cuts the window of whoever crosses a
full queue, RC's AIMD halves on ECN, so competing flows converge to equal shares of a shared
bottleneck and a flow limited elsewhere leaves its share to the others: the progressive
filling fixed point. Its known gaps: probes and NACKs are not counted, queues are assumed
drained (no queueing delay, no incast overshoot), and CC transients are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mrc.flow.fabric import Layout, View
from mrc.flow.paths import LOCAL, Entries, Groups
from mrc.flow.solver import max_min


@dataclass(frozen=True)
class Rates:
    """One solve: per group, the goodput of one of its connections (Gb/s) and its split over
    planes; which groups had no live path; the EVs not GOOD (MRC)."""

    conn_gbps: np.ndarray  # [group]
    plane_share: np.ndarray  # [group, plane], rows sum to 1 where conn_gbps > 0
    dead: np.ndarray  # [group] RC: a QP's path is down; MRC: no usable EV on any plane
    bad_evs: float  # MRC: EVs of running senders whose path is down in MRC's view
    rounds: int
    #: RC: the group's pace is set by a full switch queue it crosses (where ECN marks and
    #: DCQCN cuts), not by its own NIC port or its DCQCN cap
    congested: np.ndarray | None = None


@dataclass(frozen=True)
class Alive:
    """Per entry: its path is up; and the pieces of the problem that do not depend on which
    groups are running (so the liveness scan runs once per view)."""

    up: np.ndarray
    src_t0: np.ndarray  # the T0 group at each end
    dst_t0: np.ndarray
    loss: np.ndarray


def liveness(layout: Layout, groups: Groups, entries: Entries, view: View) -> Alive:
    """Which entries' paths are up in ``view``, and each path's loss probability."""
    g, p, t = entries.group, entries.plane, entries.gtype
    sc, dc = groups.src[g], groups.dst[g]
    si, di = layout.class_group[sc], layout.class_group[dc]
    up = view.host_ok[sc, p] & view.host_ok[dc, p] & view.t0_ok[p, si] & view.t0_ok[p, di]
    keep = 1.0 - (1.0 - view.host_loss[sc, p]) * (1.0 - view.host_loss[dc, p])
    cross = t != LOCAL
    tc = np.where(cross, t, 0)
    up &= ~cross | (view.type_ok[si, tc] & view.type_ok[di, tc])
    loss_t = 1.0 - (1.0 - view.type_loss[si, tc]) * (1.0 - view.type_loss[di, tc])
    loss = np.where(cross, 1.0 - (1.0 - keep) * (1.0 - loss_t), keep)
    return Alive(up, si, di, loss)


def _capacity(layout: Layout, view: View) -> np.ndarray:
    link = layout.link_gbps
    host = layout.class_size[:, None] * link * view.host_cap  # [class, plane]
    fab = layout.group_size[:, None] * layout.type_size[None, :] * link * view.type_cap
    return np.concatenate([host.ravel(), host.ravel(), fab.ravel(), fab.ravel()])


def _coo(layout: Layout, groups: Groups, entries: Entries, alive: Alive, sel: np.ndarray,
         var_of: np.ndarray, wire: np.ndarray, ack_ratio: float
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and coefficients of the selected entries: each loads its path's two host
    bundles and, crossing T0s, its two fabric bundles; its ACKs load the reverse path (the
    receiver's NIC port up, the same T1 back, the sender's port down) by ``ack_ratio``."""
    g, p, t = entries.group[sel], entries.plane[sel], entries.gtype[sel]
    src, dst = groups.src[g], groups.dst[g]
    cross = t != LOCAL
    si, di, tc = alive.src_t0[sel][cross], alive.dst_t0[sel][cross], t[cross]
    vc, wc = var_of[cross], wire[cross]
    ack, ackc = wire * ack_ratio, wc * ack_ratio
    rows = np.concatenate([layout.host_up(src, p), layout.host_down(dst, p),
                           layout.t0_up(si, tc), layout.t0_down(di, tc),
                           layout.host_up(dst, p), layout.host_down(src, p),
                           layout.t0_up(di, tc), layout.t0_down(si, tc)])
    cols = np.concatenate([var_of, var_of, vc, vc, var_of, var_of, vc, vc])
    coef = np.concatenate([wire, wire, wc, wc, ack, ack, ackc, ackc])
    return rows, cols, coef


def _data_entries(rows: np.ndarray) -> np.ndarray:
    """Which of :func:`_coo`'s entries are DATA (its first half; the second half is the
    ACKs, which ride the control queue ahead of DATA and so never hold a sender back)."""
    return np.arange(len(rows)) < len(rows) // 2


def mrc_rates(layout: Layout, groups: Groups, entries: Entries, view: View, alive: Alive,
              running: np.ndarray, *, reps: bool, ack_ratio: float) -> Rates:
    """MRC: a variable per (running group, plane) with a GOOD EV (module docstring)."""
    planes = layout.spec.planes
    t = entries.gtype
    cross = t != LOCAL
    tc = np.where(cross, t, 0)
    good = alive.up & ~(cross & view.drained[tc])
    weight = entries.count * good
    if reps:
        cap = np.minimum(view.type_cap[alive.src_t0, tc], view.type_cap[alive.dst_t0, tc])
        weight = weight * np.where(cross, cap, 1.0)
    var_key = entries.group * planes + entries.plane
    plane_weight = np.bincount(var_key, weights=weight, minlength=len(groups) * planes)
    usable = (plane_weight > 0).reshape(len(groups), planes)
    dead = np.asarray(~usable.any(axis=1))
    sel = np.flatnonzero((weight > 0) & running[entries.group])
    share = weight[sel] / plane_weight[var_key[sel]]
    wire = share / (1.0 - np.minimum(alive.loss[sel], 0.999)) * groups.mult[entries.group[sel]]
    var_ids, var_of = np.unique(var_key[sel], return_inverse=True)
    rows, cols, coef = _coo(layout, groups, entries, alive, sel, var_of, wire, ack_ratio)
    alloc = max_min(rows, cols, coef, _capacity(layout, view), len(var_ids),
                    binds=_data_entries(rows))
    flat = np.zeros(len(groups) * planes)
    flat[var_ids] = alloc.rates
    per_plane = flat.reshape(len(groups), planes)
    conn = per_plane.sum(axis=1)
    share_p = np.divide(per_plane, conn[:, None], out=np.zeros_like(per_plane),
                        where=conn[:, None] > 0)
    lost = entries.count * ~alive.up * running[entries.group] * groups.mult[entries.group]
    return Rates(conn, share_p, dead, float(lost.sum()), alloc.rounds)


def gbn_cost(loss: np.ndarray, resend_packets: float, timeout_packets: float) -> np.ndarray:
    """Wire packets per packet placed for RC's go-back-N at loss ``p`` per packet.

    Each loss costs what the requester sent after it until the sequence-error NAK comes
    back (``resend_packets``: one round trip at the line plus the packet that shows the gap;
    ``RcRequester`` resends all of it), and with probability ``p`` that NAK (or the resent
    packet's NAK episode) is lost as well, in which case the QP sends nothing useful until
    its local ACK timer (``timeout_packets`` at the line, capped by its window): the
    responder sends one NAK per gap and then drops silently. The idle time of that wait is
    charged as wire load on the QP's path (the pace it leaves is right; other flows on the
    same links are squeezed a little more than they would be)."""
    per_loss = resend_packets + loss * timeout_packets
    return 1.0 + loss * per_loss


def rc_rates(layout: Layout, groups: Groups, entries: Entries, view: View, alive: Alive,
             running: np.ndarray, *, qps: int, resend_packets: float, ack_ratio: float,
             timeout_packets: float = 0.0, cap: np.ndarray | None = None,
             wire_per_payload: float = 1.0) -> Rates:
    """RC: a variable per running group whose QPs are all on live paths (module docstring).

    ``wire_per_payload``: RoCEv2's wire bytes per payload byte over MRC's (capacities are in
    MRC's payload rate, :mod:`mrc.flow.fabric`; RC's smaller header carries more payload).

    ``cap``: per group, the per-QP rate DCQCN allows while it climbs back after a bottleneck
    went away (inf: the line); see :class:`mrc.flow.rc_rate.Dcqcn`."""
    planes = layout.spec.planes
    dead = np.bincount(entries.group, weights=(entries.count > 0) & ~alive.up,
                       minlength=len(groups)) > 0
    live = running & ~dead
    sel = np.flatnonzero(live[entries.group] & (entries.count > 0))
    g = entries.group[sel]
    wire = (entries.count[sel] * gbn_cost(alive.loss[sel], resend_packets, timeout_packets)
            * groups.mult[g] * wire_per_payload)
    var_ids, var_of = np.unique(g, return_inverse=True)
    rows, cols, coef = _coo(layout, groups, entries, alive, sel, var_of, wire, ack_ratio)
    capacity = _capacity(layout, view)
    demand = None if cap is None else cap[var_ids]
    alloc = max_min(rows, cols, coef, capacity, len(var_ids), demand,
                    binds=_data_entries(rows))
    conn = np.zeros(len(groups))
    conn[var_ids] = alloc.rates * qps  # the per-QP pace times the QPs striped over
    share_p = np.zeros((len(groups), planes))
    share_p[live] = 1.0 / planes  # every plane has qps_per_plane QPs at the same pace
    # a switch queue (T0 to host, T0 to T1, T1 to T0) builds, marks ECN and has DCQCN hold
    # the groups it limits near their share when it is full and their own NIC port is not
    # (a flow at line rate into a line-rate link fills it without a queue)
    assert alloc.remaining is not None
    full = alloc.remaining <= 1e-6 * np.maximum(capacity, 1e-300)
    switch = np.arange(len(capacity)) >= layout.classes * planes
    n_data = len(sel)
    cross = entries.gtype[sel] != LOCAL
    data_rows = np.concatenate([rows[n_data:2 * n_data],  # host_down of the receiver
                                rows[2 * n_data:2 * n_data + 2 * int(cross.sum())]])
    data_vars = np.concatenate([var_of, np.tile(var_of[cross], 2)])
    hit = np.zeros(len(var_ids), dtype=bool)
    hit[data_vars[full[data_rows] & switch[data_rows]]] = True
    own = rows[:n_data]  # the sender's NIC ports
    hit[var_of[full[own]]] = False
    congested = np.zeros(len(groups), dtype=bool)
    congested[var_ids] = hit
    return Rates(conn, share_p, dead, 0.0, alloc.rounds, congested)
