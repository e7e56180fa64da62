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
      each plane pulled by its own NIC port; RC's QPs pinned by ``rc_connection.ecmp_t1`` and
      striped, so a connection moves at its slowest QP's pace (:mod:`mrc.flow.rates`).
    * Faults change the fabric at their instants; MRC stops using a dead path at once and
      uses a restored one again after its probes (``probes_to_reintegrate x
      probe_interval``); operator drains deny EVs at once (:mod:`mrc.flow.conditions`).
    * RC's local ACK timer and retries, MRC's watchdog, and NCCL's abort of the whole job on
      the first QP error, at the packet model's times (:mod:`mrc.flow.engine`).
    * Workloads: write_bw streams, finite flows (permutation, connection matrix: a finished
      flow frees its share), collectives at the pace of their slowest connection with an
      alpha-beta iteration time (:mod:`mrc.flow.workload`).
    * Random loss: resends on the wire (MRC ``1 / (1 - p)``; RC go-back-N ``1 + p x window``),
      and ACKs as load on every reverse path.

What is not
    Packets, queues, trimming, ECN and the congestion controls' dynamics (rates are their
    fixed point, not their transients); NACK and probe traffic; MRC's detection delay (tens
    of us) and its loss recovery; RC's drain of in-flight chunks after a stall and its
    restart ramp after a retry; RC re-convergence (``reroute_after_us``, refused). Counters
    that only packets have (retransmissions, trims, drops, probes) are 0 in the summary,
    which lists them under ``flow.not_modelled``.

Why max-min fairness: see :mod:`mrc.flow.rates`. In short, NIC ports serve their QPs round
robin and both transports' congestion controls share a bottleneck evenly while leaving a
flow limited elsewhere its own rate, which is the progressive-filling fixed point; the test
``tests/test_flow_crosscheck.py`` holds the flow model's steady goodput within 5% of the
packet model's before, during and after every bundled fault, except five windows dominated
by packet-level transients (named there, with the reason, under a looser bound).

Scale comes from symmetry (:mod:`mrc.flow.fabric`): links are grouped into bundles whose
members provably carry equal load (hosts no fault tells apart, T1s no fault touches), so an
all-to-all over 131,072 NICs is a problem over ~512 host classes, not 17 billion pairs.
Where a choice is random per pair (MRC's T1 order, RC's hash) and too many pairs exist to
enumerate, its expectation or a draw from its distribution stands in, and the summary says
which (``flow.<transport>.path_model``).

Layering: this package sits directly above the simulator (``mrc.sim < mrc.flow <
mrc.labs``): it imports ``topology``, ``mrc.units``, ``mrc.ev``, ``mrc.packet`` and the
transports' definitions (EV sets, ECMP pins, RC/MRC configs and the lab-parameter mapping,
which issue 13 moves from ``mrc.transport`` into ``mrc.sim``), never ``mrc.sim``'s engine and
never the labs layer; ``mrc.labs.flowrun`` adapts a lab to it.
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
