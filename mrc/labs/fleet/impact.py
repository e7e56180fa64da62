"""What one fault does to one job, per transport, from the flow model (:mod:`mrc.flow`).

For each job size the job's communication (an all-to-all or a ring all-reduce over hosts
0..N-1) is laid out once by the flow model; every fault class is then a change of the
fabric's view and the flow model's rates say how fast the job still goes:

* **MRC**: the job's pace (its slowest connection, as a synchronous job feels it) with the
  element down (or lossy) over its healthy pace. One element never takes every path of a
  connection (P planes), so an MRC job only stops for what stops a GPU (``host``, ``nic``).
* **RC** (on its routed fabric, :mod:`mrc.sim.routing`): a connection stalls when one of
  its QPs (or the ACKs coming back to it) is hashed through the element; the *exposure* is
  the chance that at least one of the job's QPs is: 1 for the job's own NIC ports, host links
  and T0s (every host has QPs on every plane), and for a T1 or a T0-T1 link
  ``1 - exp(-lambda)``, lambda the expected number of the job's QPs hashed through it (ECMP
  hashes are independent and uniform over T1s). What ends the stall is the fault's
  *repair* (:class:`Impact`): for a T1 (dead or rebooting) each T0 drops its own link to it
  after ``link_down_detect_us`` (1 ms); for a T0-T1 link the T0s at the far end learn it
  through routing after ``routing_convergence_us`` (1 s; the near T0 after detection, and a
  job exposed on the link has QPs on both sides); a NIC port, host link or T0 has no
  alternative (no repair but the element's return), nor has a black hole (routing never
  sees it: only the operator's drain, whose withdrawal takes convergence once more). The QP
  resumes at the first expiry of its retransmission ladder after the repair, or errors
  at its retry budget (:mod:`mrc.labs.fleet.montecarlo`). A lossy link an RC QP crosses
  slows its connection, and so the job, by the flow model's go-back-N cost
  (:func:`mrc.flow.rates.gbn_cost`: a round trip resent per loss, and the ladder's first
  timeout when the NAK is lost too); corruption is no routing failure, so it lasts until
  the optic is replaced.

The footprint counts (how many elements of each class the job can hit) are closed-form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mrc.flow import conditions as cond
from mrc.flow.fabric import make_view
from mrc.flow.paths import mrc_entries
from mrc.flow.rates import gbn_cost, liveness, mrc_rates
from mrc.flow.transport_model import TransportModel
from mrc.flow.workload import Collective, build, class_index
from mrc.sim.routing import RoutingConfig
from topology.spec import FabricSpec

#: Representative elements (the job starts at host 0): any element of a class in the
#: footprint is equivalent to these by the symmetry of the job and the fabric.
NIC_PORT = "h0.p0"
HOST_LINK = "h0.p0--p0.t0.0"
FABRIC_LINK = "p0.t0.0--p0.t1.0"
T0 = "p0.t0.0"
T1 = "p0.t1.0"


@dataclass(frozen=True)
class Footprint:
    """Elements of each kind a job of ``gpus`` GPUs can be hit by."""

    hosts: int
    nic_ports: int
    host_links: int
    fabric_links: int
    t0s: int
    t1s: int


def footprint(spec: FabricSpec, gpus: int) -> Footprint:
    t0s = -(-gpus // spec.hosts_per_t0)
    crosses = t0s > 1
    return Footprint(hosts=gpus, nic_ports=gpus * spec.planes, host_links=gpus * spec.planes,
                     fabric_links=t0s * spec.planes * spec.t1 if crosses else 0,
                     t0s=t0s * spec.planes, t1s=spec.planes * spec.t1 if crosses else 0)


@dataclass(frozen=True)
class Impact:
    """One fault class on one job: per element hit, for each transport."""

    mrc_fraction: float  # MRC job pace while it lasts (1 = unaffected)
    rc_exposure: float  # chance an RC QP of the job is hashed through the element
    rc_fraction: float  # RC job pace while it lasts, if exposed and not stalled (loss)
    #: seconds after the fault when routing moves the exposed QPs (None: only the
    #: element's return, or for a black hole the operator's drain, ends the stall)
    rc_repair_s: float | None = None
    #: seconds after the fault's end before the stall ends (a black hole's drain: routing
    #: withdraws the drained T1 after convergence)
    rc_after_end_s: float = 0.0


@dataclass(frozen=True)
class JobImpacts:
    gpus: int
    footprint: Footprint
    host_link: dict[str, Impact]  # per class, when the event lands on a host-side element
    fabric: dict[str, Impact]  # per class, on a fabric-side element (T0-T1 link)
    mrc_healthy_gbps: float  # the job's healthy pace per connection (for the record)


def job_impacts(spec: FabricSpec, gpus: int, workload: str, mrc: TransportModel,
                rc: TransportModel, ev_count: int, seed: int, loss: float,
                routing: RoutingConfig | None = None) -> JobImpacts:
    """Impacts of every fault class on a job of ``gpus`` GPUs (module docstring)."""
    routing = routing or RoutingConfig()
    detect_s = routing.link_down_detect_us / 1e6
    converge_s = routing.routing_convergence_us / 1e6
    fp = footprint(spec, gpus)
    crosses = fp.t1s > 0
    targets = [NIC_PORT, HOST_LINK, T0] + ([FABRIC_LINK, T1] if crosses else [])
    action = {NIC_PORT: "port_down", HOST_LINK: "link_down", T0: "switch_down",
              FABRIC_LINK: "link_down", T1: "switch_down"}
    named = [cond.Change(0, action[t], t) for t in targets]  # so the layout names them
    work = Collective(workload, np.arange(gpus, dtype=np.int64), ((1 << 30, 0, False),))
    layout, groups = build(spec, work, named, symmetric_t1s=True)
    entries = mrc_entries(spec, layout, groups, ev_count, seed, exact=False)
    index = class_index(layout, work, [0])
    running = np.ones(len(groups), dtype=bool)

    def pace(conditions: dict[tuple[str, str], float]) -> float:
        view = make_view(layout, cond.freeze(conditions), index)
        rates = mrc_rates(layout, groups, entries, view, liveness(layout, groups, entries, view),
                          running, reps=mrc.reps, ack_ratio=mrc.ack_ratio)
        live = groups.mult > 0
        return 0.0 if rates.dead[live].any() else float(rates.conn_gbps[live].min())

    healthy = pace({})

    def mrc_fraction(target: str, family: str = "down", value: float = 1.0) -> float:
        return pace({(family, target): value}) / healthy if healthy > 0 else 0.0

    qpp = rc.qps // spec.planes
    crossing = ~groups.local
    lam_t1 = float((groups.mult[crossing] * qpp).sum()) / spec.t1 if crosses else 0.0
    t0_group = layout.group_of_t0[0]
    ends = (layout.class_group[groups.src] == t0_group) | (layout.class_group[groups.dst]
                                                           == t0_group)
    lam_link = float((groups.mult[crossing & ends] * qpp).sum()) / spec.t1 if crosses else 0.0
    rc_loss = float(1.0 / gbn_cost(np.array([loss]), rc.resend_packets, rc.timeout_packets)[0])

    def exposure(lam: float) -> float:
        return 1.0 - math.exp(-lam)

    host_side = {
        "nic_port": Impact(mrc_fraction(NIC_PORT), 1.0, 0.0),
        "link_down": Impact(mrc_fraction(HOST_LINK), 1.0, 0.0),
        "link_flap": Impact(mrc_fraction(HOST_LINK), 1.0, 0.0),
        "optics_degrade": Impact(mrc_fraction(HOST_LINK, "loss", loss), 1.0, rc_loss),
        "t0_reboot": Impact(mrc_fraction(T0), 1.0, 0.0),
        "t0_failure": Impact(mrc_fraction(T0), 1.0, 0.0),
    }
    fabric: dict[str, Impact] = {}
    if crosses:
        down = mrc_fraction(FABRIC_LINK)
        fabric = {
            "link_down": Impact(down, exposure(lam_link), 0.0, converge_s),
            "link_flap": Impact(down, exposure(lam_link), 0.0, converge_s),
            "optics_degrade": Impact(mrc_fraction(FABRIC_LINK, "loss", loss),
                                     exposure(lam_link), rc_loss),
            "t1_reboot": Impact(mrc_fraction(T1), exposure(lam_t1), 0.0, detect_s),
            "t1_failure": Impact(mrc_fraction(T1), exposure(lam_t1), 0.0, detect_s),
            # forwards nothing with its links up: MRC maps its paths out as a dead T1's
            "t1_blackhole": Impact(mrc_fraction(T1), exposure(lam_t1), 0.0, None,
                                   converge_s),
        }
    return JobImpacts(gpus, fp, host_side, fabric, healthy)
