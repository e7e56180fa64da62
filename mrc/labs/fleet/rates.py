"""Default failure rates of the fleet model: what each number is and where it comes from.

Rates are events per element per year (an annualised failure rate; ``0.026`` is 2.6% of
elements per year); durations are a mean repair time (exponential) or a fixed down time.
Elements are counted in the job's footprint on the fabric: its hosts, their NIC ports and
host links, the T0s above them and, when the job spans more than one T0, the T0-T1 links of
those T0s and every T1.

Sourced
    * ``host`` (GPU, HBM, host hardware, software, unplanned host maintenance: anything that
      stops a GPU, whatever the network): Llama 3 (Dubey et al., "The Llama 3 Herd of
      Models", 2024, table 5): 419 unexpected interruptions in 54 days on 16,384 H100s, of
      which 35 network switch/cable and 7 NIC. The other 377 give 377 / (54 x 16,384) =
      4.26e-4 per GPU per day = 0.156 per GPU per year. At 1,000 GPUs that alone is one
      interruption every 2.3 days: the seeds' "1,000 GPUs, a failure every 2-3 days" comes
      out of the rates, it is not put in.
    * ``nic`` (a whole NIC, all its ports): the same table, 7 / (54 x 16,384) per NIC-day =
      0.0029 per NIC per year.
    * ``t0_failure`` / ``t1_failure`` (hardware) and ``t0_reboot`` / ``t1_reboot`` (software
      and other, down minutes): Singh et al., "Surviving switch failures in cloud
      datacenters" (SIGCOMM CCR 51(2), 2021), 180,000 switches: a 2% chance of failing within
      3 months (about 8% a year), 32% of failures hardware. So 0.026 per switch-year
      hardware, 0.054 the rest. Gill et al. (SIGCOMM 2011) report ToR and aggregation switch
      failure probabilities of about 5% and 10% a year: the same order.

Derived (stated so it can be changed)
    * ``link_down`` (optics or cable dead until replaced): Llama 3's 35 switch/cable
      interruptions on 16,384 GPUs in 54 days, half attributed to cables and optics, over
      about 4 links per GPU in its three-tier RoCE fabric: 17.5 / (54 x 65,536) per link-day
      = 0.0018 per link per year; rounded to 0.002.
    * ``nic_port`` (one port's electronics; its cable and optics are ``link_down``): taken
      equal to ``link_down``.

Assumed (no public measurement found; change them in the fleet file)
    * ``link_flap``: ten times ``link_down``, each 2 s down (long enough for RoCE to notice,
      far shorter than a repair).
    * ``optics_degrade``: a link that corrupts packets until repaired (CorrOpt, Zhuo et al.,
      SIGCOMM 2017: corruption is stable over time and concentrated on few links), 0.005
      per link per year, 0.1% loss, 24 h to repair.
    * ``t1_blackhole``: a T1 that stops forwarding with its links up and its routes
      advertised (the MRC paper's hard case: one T1 in a 75K-GPU job, about a quarter of
      the QPs hit; it gives no rate). 0.005 per T1 per year (mrc-lab's choice: about a tenth
      of Singh et al.'s non-hardware switch failures), until an operator finds and drains it:
      1 h (mrc-lab's choice). Routing never repairs it, so an RC QP through it errors at its
      retry budget (seconds) unless the drain comes first.
    * Repair times: switches 8 h, links and NIC ports 4 h, NICs and hosts 4 h (the host is
      replaced, the job restarts without it); reboots 5 min.
    * Job: 30 min between checkpoints, 10 min to restart, 20% of a step bound by the
      network (``[job]`` in the fleet file).
"""

from __future__ import annotations

from typing import Any

DAYS = 54
GPUS = 16_384
_HOST = 377 / (DAYS * GPUS) * 365
_NIC = 7 / (DAYS * GPUS) * 365

DEFAULTS: dict[str, dict[str, Any]] = {
    "host": {"per_year": round(_HOST, 4), "repair_h": 4},
    "nic": {"per_year": round(_NIC, 4), "repair_h": 4},
    "nic_port": {"per_year": 0.002, "repair_h": 4},
    "link_down": {"per_year": 0.002, "repair_h": 4},
    "link_flap": {"per_year": 0.02, "down_s": 2},
    "optics_degrade": {"per_year": 0.005, "repair_h": 24, "loss_probability": 0.001},
    "t0_reboot": {"per_year": 0.054, "down_s": 300},
    "t0_failure": {"per_year": 0.026, "repair_h": 8},
    "t1_reboot": {"per_year": 0.054, "down_s": 300},
    "t1_failure": {"per_year": 0.026, "repair_h": 8},
    "t1_blackhole": {"per_year": 0.005, "repair_h": 1},
}
