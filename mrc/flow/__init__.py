"""The flow-level model: steady-state rates of every flow of a lab, at any fabric size.

The packet simulator covers a pod; the post is about 100K+ GPUs. This package answers the
same lab (fabric, workload, transports, fault schedule) with rates instead of packets, so a
Fairwater fabric (8 planes x 131,072 NICs, 2,048 paths between two T0s) runs in seconds.
``mrc-lab run LAB --model flow`` writes the same tables and plot as a packet run, marked
flow-level (``runtime = "flow"`` in summary.json).

What is modelled
    * Each interval between events has constant rates: max-min fair over every link
      (:mod:`mrc.flow.solver`, progressive filling on a sparse load matrix), with each
      transport's path usage from the packet model's own definitions (:mod:`mrc.flow.paths`):
      MRC's EV set (``evset.build_ev_set``) sprayed round robin over GOOD EVs plane by plane,
      each plane pulled by its own NIC port; RC's QPs hashed as the routed fabric's T0s
      hash them (``rc_connection.ecmp_hash_of``: DATA by the source T0, ACKs by the
      destination T0, each on its own T1) and striped, so a connection moves at its slowest
      QP's pace (:mod:`mrc.flow.rates`).
    * Faults change the fabric at their instants; MRC uses a restored path again after its
      probes (``probes_to_reintegrate x probe_interval``); operator drains deny EVs at once
      (:mod:`mrc.flow.conditions`). A dead path costs MRC its detection delay
      (:mod:`mrc.flow.detection`, from ``MrcConfig``'s own timers): a stream loses the dead
      EVs' share for a round of its EV cycle (REPS) or until overdue evidence (~25 us on
      lab-8plane, round robin); a collective's step in flight waits for the per-EV timer
      (``ev_timeout``, 65.5 us), and once more for the dead EVs its message had already
      passed when the fault hit. A black hole is a dead (or, at a fraction, lossy) path
      that MRC maps out like a dead one.
    * RC as deployed (issue 15: lossless with PFC, paced by DCQCN; issue 36: on its routed
      fabric, with the NIC's adaptive retransmission and RoCEv2's packet sizes), at the
      packet model's times (:mod:`mrc.flow.timers`, :mod:`mrc.flow.rc_rate`,
      :mod:`mrc.flow.routing`): no congestion loss (PFC), so rates are max-min on each QP's
      one hashed path; DCQCN holds a QP at its share while a switch queue limits it and,
      once that bottleneck is gone, climbs back as ``DcqcnRp`` itself does. Routing moves
      the QPs off a dead or drained T1 as ``mrc.sim.routing`` does (a T0's own dead uplink
      after ``link_down_detect_us``, anything else after ``routing_convergence_us``; a
      black hole never). A QP whose DATA or ACK path is dead stalls its striped connection
      (whose other QPs still place their posted chunks once); when its paths are back while
      it still sends, the NAK rewinds it 1.5 round trips later (unless that NAK went into a
      dead ACK path), else its next retransmission does (the ladder of
      ``retry_schedule``); with no progress by its retry budget it errors and NCCL aborts
      the whole job. MRC's watchdog likewise.
    * Workloads: write_bw streams, finite flows (permutation, connection matrix: a finished
      flow frees its share), collectives at the pace of their slowest connection with an
      alpha-beta iteration time (:mod:`mrc.flow.workload`).
    * Random (gray) loss: resends on the wire (MRC ``1 / (1 - p)``; RC go-back-N ``1 + p x
      (round trip + p x timeout)`` packets per packet, :func:`mrc.flow.rates.gbn_cost`), and
      ACKs as priority load on every reverse path.
    * ``nic_stall``: the stuck host's connections stop (it drops what it receives). On a PFC
      fabric RC's lossless traffic would instead spread pause frames (a PFC storm): refused
      for RC there, with the reason (``mrc.labs.run.flow.check_flow``).

What is not
    Packets, queues, trimming, ECN and the congestion controls' dynamics beyond DCQCN's
    recovery (rates are their fixed point; under many ECMP collisions the packet model's
    DCQCN, with the lab's slow timing, stays well below that fixed point: README); RC run
    lossy (``pfc = false``) loses no packets to congestion here; PFC pause spreading; NACK and probe traffic;
    MRC's loss recovery beyond its detection waves (congestion control's cuts after the
    losses, overdue strikes between a ring's chains: allreduce-t1-reboot's hit iteration
    takes 207-322 us in the packet model depending on when the T1 dies, 265 in the flow
    model); RC's ACK load on its own ACK path (ACKs load the DATA path's reverse, 0.5%),
    ACK paths of aggregated collectives, mixed runs, htsim triggers, ``ev_deny`` masks and RC messages taking turns over QPs
    (``split_data_on_qps = false``): each refused with one line naming its key. Counters
    that only packets have (retransmissions, trims, drops, probes) are 0 in the summary,
    which lists them under ``flow.not_modelled``.

Why max-min fairness: see :mod:`mrc.flow.rates`. In short, NIC ports serve their QPs round
robin and both transports' congestion controls share a bottleneck evenly while leaving a
flow limited elsewhere its own rate, which is the progressive-filling fixed point; the test
``tests/test_flow_crosscheck.py`` holds the flow model's steady goodput within 5% of the
packet model's before, during and after every bundled fault, except three windows (named
there, each with its reason and a looser bound) and RC in the two PFC-storm labs (refused).

Scale comes from symmetry (:mod:`mrc.flow.fabric`): links are grouped into bundles whose
members provably carry equal load (hosts no fault tells apart, T1s no fault touches), so an
all-to-all over 131,072 NICs is a problem over ~512 host classes, not 17 billion pairs.
Where a choice is random per pair (MRC's T1 order, RC's hash) and too many pairs exist to
enumerate, its expectation or a draw from its distribution stands in, and the summary says
which (``flow.<transport>.path_model``).

Layering: this package sits directly above the simulator (``mrc.sim < mrc.flow <
mrc.labs``): it imports ``topology``, ``mrc.units``, ``mrc.ev``, ``mrc.packet`` and the
transports' definitions (``mrc.stack.evset``, ``mrc.stack.rc_connection``, ``mrc.stack.qpn``,
``mrc.stack.transport_params``; ``DcqcnRp`` from ``mrc.transport.rc.dcqcn``), never
``mrc.sim``'s engine and never the labs layer; ``mrc.labs.run.flow`` adapts a lab to it. The layers contract in
``pyproject.toml`` places it beside ``mrc.live`` (above ``mrc.sim``, below ``mrc.kernel``
and ``mrc.labs``).
"""

from mrc.flow.model import (
    MAX_BYTES,
    FlowRun,
    TooLarge,
    check_size,
    estimate_bytes,
    plan,
    run,
    transport_model,
)

__all__ = ["MAX_BYTES", "FlowRun", "TooLarge", "check_size", "estimate_bytes", "plan", "run",
           "transport_model"]
