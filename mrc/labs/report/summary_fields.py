"""What every field of summary.json means, in one sentence each: data, importable without
pandas (the sweep checks a ``--plot`` metric against it before any run).

:mod:`mrc.labs.report.summary` computes the fields and its docstring gives the definitions that
need more than a sentence; the README's "Summary fields" section says the same, and
``tests/test_docs.py`` holds them together.
"""

from __future__ import annotations

from mrc.labs.report.stall_fields import STALL_FIELDS

#: The causes ``dropped_packets`` is split by (``mrc.stack.recorder.DROP_SERIES``).
DROP_CAUSES = ("data", "control", "probe")
#: The outcomes of a transport's job (the ``outcome`` field).
OUTCOMES = {
    "completed": "every message the workload posted was placed and verified",
    "failed": "a connection failed (a QP error: retries exhausted, or no path left), and the "
              "job with it, as NCCL aborts on any QP error",
    "running": "neither: the run ended (duration_us, plus grace_us for write_bw) with "
               "messages still in flight and no failure; a slow or stalled transport, not "
               "a lost one",
}

#: Every field of a transport's entry in summary.json, in order: what it means.
TRANSPORT_FIELDS: dict[str, str] = {
    "kind": "the transport kind (mrc or rc)",
    "outcome": "completed, failed or running (see OUTCOMES)",
    "failed_at_us": "when the job failed (null unless outcome is failed)",
    "failure_reason": "the first QP error that failed the job",
    "bytes_delivered": "unique payload bytes placed in receivers' memory over the whole run",
    "goodput_gbps.before": "mean goodput of the steady bins before the first fault",
    "goodput_gbps.during": "mean goodput from the first fault's start to the last fault's end",
    "goodput_gbps.after": "mean goodput after the last fault's end (null if a fault never ends)",
    "goodput_gbps.min": "the lowest bin after the ramp-up",
    "retained_pct": "during as a percentage of before",
    "detect_us": "first fault to the transport's first reaction: an EV marked ASSUMED_BAD "
                 "(MRC), an RC retry or QP error; null if it never reacted",
    "settle_us": "first fault until goodput stays within 10% of its level under the fault",
    "recovery_us": "first fault until goodput is back to 90% of before for good (at least "
                   "the fault window's last 50 us); 0 with no dip, null when not recovered",
    "recovery": "recovered, no dip, not recovered, job failed, no fault, no baseline or "
                "ended first (the run ended before the first fault)",
    "retransmitted_packets": "DATA packets sent again (MRC and RC retransmissions)",
    "trimmed_packets": "packets switches trimmed to their headers (congestion), fabric-wide",
    "dropped_packets.data": "DATA packets the fabric dropped (payload to resend)",
    "dropped_packets.control": "ACK and NACK packets the fabric dropped",
    "dropped_packets.probe": "MRC PROBE and PROBE_REPLY packets the fabric dropped (probes "
                             "of paths already believed broken)",
    "dropped_packets.unattributed": "kernel runs: drops the kernel counted without saying "
                                    "what they were (data, control and probe are then null)",
    "probes_sent": "MRC probes sent (of EVs ASSUMED_BAD, until K answers reintegrate them)",
    "evs_marked_bad": "EV state changes GOOD to ASSUMED_BAD, both ends of every QP (an EV "
                      "marked bad twice counts twice; several EVs can share a path)",
    "evs_reintegrated": "EV state changes ASSUMED_BAD to GOOD after answered probes",
    "sim_end_us": "simulated time when this transport's run ended (grace time included)",
    **STALL_FIELDS,
    "flows.count": "flows of the workload (flow workloads only)",
    "flows.completed": "flows whose every byte was placed and verified",
    "flows.p50_fct_us": "median flow completion time of the completed flows",
    "flows.mean_fct_us": "mean flow completion time of the completed flows",
    "flows.p99_fct_us": "99th percentile flow completion time (linear interpolation)",
    "flows.max_fct_us": "the longest flow completion time",
    "flows.ideal_fct_us": "the fluid ideal FCT (mrc.labs.report.ideal): the healthy ideal over the "
                          "capacity share the degrade faults at the start leave; only for "
                          "flows of one size and one start",
    "flows.ideal_done_us": "when every flow would be done on that ideal (the first start plus "
                           "ideal_fct_us)",
    "flows.p50_vs_ideal": "p50_fct_us / ideal_fct_us",
    "flows.p99_vs_ideal": "p99_fct_us / ideal_fct_us",
    "flows.max_vs_ideal": "max_fct_us / ideal_fct_us",
    "collective": "per size: time_us, algbw_GBps, busbw_GBps, busbw_pct_ceiling, status "
                  "(collective workloads only)",
    "messages_verified": "live and kernel runs: messages whose SHA-256 matched at the "
                         "receiver",
    "messages_corrupt": "live and kernel runs: messages whose SHA-256 did not match",
    "live": "live runs: what the live machinery did (wall time, fabric and host counters)",
    "kernel": "kernel runs: what the kernel fabric did (counters, fault timing)",
}
#: Every top-level field of summary.json (beyond ``transports``): what it means.
TOP_FIELDS: dict[str, str] = {
    "lab": "the lab's name",
    "seed": "the seed of every random draw (QPNs, EV order, losses, permutations)",
    "runtime": "sim (the packet simulator) or live (UDP datagrams in dilated wall time)",
    "sim_time_us": "the longest simulated time of the transports' runs",
    "wall_s": "wall-clock seconds the whole run took (the one machine-dependent figure)",
    "build": "which build ran: compiled (the compiled core) or pure (Python); same results",
    "goodput_ceiling_gbps": "the best payload rate of the workload's NICs at full MTU",
    "faults": "the fault windows: kind, target, at_us, until_us, and off_path (why no "
              "traffic of the workload crosses the target) for a fault on none of its paths, "
              "drawn_from (the class) for a target drawn from the seed",
    "time_scale": "the factor on the lab's real-world control timers (run.time_scale) and, "
                  "when it is not 1, which config fields it scaled (per transport and run "
                  "config) and which it took below the base RTT (below_rtt, base_rtt_us)",
    "workload": "the workload kind",
    "duration_us": "the lab's duration",
    "bin_us": "the width of the timeseries bins",
    "nic_goodput_ceiling_gbps": "the best payload rate of one NIC at full MTU",
    "ceiling_nics": "how many NICs the goodput ceiling counts",
    "goodput_sum": "what the goodput figures add up (which directions and receivers)",
    "live": "live runs: dilation, wall and modelled units, and whether the runtime kept pace",
    "kernel": "kernel runs: scale, units, limits of the kernel fabric",
}
