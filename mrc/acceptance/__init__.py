"""The transport acceptance scenarios (issue 3) on small fabrics, through the real simulator.

Each scenario builds a :class:`mrc.stack.stack.SimStack`, runs a workload and the faults of one
acceptance item, and returns its measurements as a dataclass; ``tests/test_acceptance_*.py``
hold them to the issue's targets and ``benchmarks/acceptance_transport.py`` prints them.

* :mod:`mrc.acceptance.workload`: WRITE workloads and their completions, the recorder's bins;
* :mod:`mrc.acceptance.transfer`: items 1-3 (healthy line rate, T0 down, T1 fail and restore);
* :mod:`mrc.acceptance.load`: items 4-6 (random loss, incast, permutation);
* :mod:`mrc.acceptance.schedules`: item 7 (fault schedules as data, and their property check).
"""

from mrc.acceptance.load import (
    PERMUTATION_SPEC,
    Incast,
    IncastSpread,
    Permutation,
    RandomLoss,
    incast,
    incast_over_seeds,
    permutation,
    random_loss,
)
from mrc.acceptance.schedules import (
    CUTS,
    SCHEDULE_MRC,
    Fault,
    ScheduleOutcome,
    cut_every_path,
    cut_schedule,
    episode,
    pair_elements,
    path_elements,
    random_schedule,
    run_schedule,
    schedule_error_after_us,
    schedule_sweep,
)
from mrc.acceptance.transfer import (
    RING_PAIRS,
    Healthy,
    T0Down,
    T1FailRestore,
    healthy,
    t0_down,
    t1_fail_restore,
)
from mrc.acceptance.workload import MB, RC_LAB, STREAM_DEPTH, Writes, transport_params

__all__ = [
    "CUTS", "MB", "PERMUTATION_SPEC", "RC_LAB", "RING_PAIRS", "SCHEDULE_MRC", "STREAM_DEPTH",
    "Fault", "Healthy", "Incast", "IncastSpread", "Permutation", "RandomLoss",
    "ScheduleOutcome", "T0Down", "T1FailRestore", "Writes", "cut_every_path", "cut_schedule",
    "episode", "healthy", "incast", "incast_over_seeds", "pair_elements", "path_elements",
    "permutation", "random_loss", "random_schedule", "run_schedule", "schedule_error_after_us",
    "schedule_sweep", "t0_down", "t1_fail_restore", "transport_params",
]
