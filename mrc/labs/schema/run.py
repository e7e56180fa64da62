"""``[run]``: how long the lab runs, how finely it is binned, its seed, and the factor that
scales its real-world control timers (``time_scale``: :mod:`mrc.labs.run.time_scale`)."""

from __future__ import annotations

import math
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import check_keys, check_table
from mrc.labs.schema.fields import Derived, Field, field_map
from mrc.labs.schema.lab import RunSpec

MAX_BINS = 200_000
MAX_SEED = 2**63 - 1
#: 1,000 simulated seconds: a packet-level run of that length would take years of wall time.
MAX_DURATION_US = 1e9

FIELDS = (
    Field("duration_us", "number", "simulated time the lab runs", unit="us", gt=0,
          maximum=MAX_DURATION_US),
    Field("bin_us", "number", "width of the timeseries bins", unit="us", gt=0,
          default=Derived("a round number giving about 100 bins"),
          limit=f"at most duration_us, and at most {MAX_BINS:,} bins"),
    Field("seed", "integer", "seed of every random draw: QPN allocation (so RC's ECMP "
          "pinning), each pair's EV order, random loss, permutation peers; a run is a pure "
          "function of it", default=1, minimum=0, maximum=MAX_SEED),
    Field("grace_us", "number", "write_bw: time after the end for the messages in flight to "
          "finish (finite workloads end the run when they are done)", unit="us", minimum=0,
          maximum=MAX_DURATION_US, default=Derived("duration_us")),
    Field("time_scale", "number", "factor on every real-world control timer the lab runs "
          "with (RC's local ACK timeout, which caps its retransmission ladder and sets its "
          "retry budget, and routing detection and convergence), so a lab that compresses "
          "them to run in simulated microseconds compresses all of them alike; not link rates, "
          "RTTs, congestion control, the adaptive ladder's first rungs, MRC's QP watchdog, or "
          "MRC's per-EV path timer and loss evidence (mrc.labs.run.time_scale: why each "
          "verdict survives it)", gt=0, maximum=1, default=1.0),
    Field("mixed", "boolean", "run every transport at once on one fabric, each on its own "
          "traffic class, instead of one after the other on identical fabrics",
          default=False),
)
_F = field_map(FIELDS)


def nice_bin_us(duration_us: float) -> float:
    """A round bin width (1-2-5 series) giving about 100 bins."""
    target = duration_us / 100
    exponent = math.floor(math.log10(target))
    options = [m * 10.0 ** e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
    best = min(options, key=lambda x: abs(math.log(x / target)))
    return float(f"{best:.6g}")


def check_bin(bin_us: float, duration_us: float, key: str = "run.bin_us") -> None:
    if bin_us < 0.001:
        raise LabError(f"{bin_us:g} us is below the 1 ns resolution of the bins", key)
    if bin_us > duration_us:
        raise LabError(f"{bin_us:g} us is longer than the run ({duration_us:g} us)", key)
    if duration_us / bin_us > MAX_BINS:
        raise LabError(f"{duration_us / bin_us:,.0f} bins is too many (at most {MAX_BINS:,}); "
                       "use a wider bin", key)


def run(table: Any) -> RunSpec:
    """The ``[run]`` table, checked, with its defaults."""
    table = check_table(table, "run")
    check_keys(table, _F, "run")
    duration = _F["duration_us"].read(table, "run")
    if "bin_us" in table:
        bin_us = _F["bin_us"].read(table, "run")
    else:
        bin_us = nice_bin_us(duration)
    check_bin(bin_us, duration)
    seed = _F["seed"].read(table, "run")
    grace = _F["grace_us"].read(table, "run", default=duration)
    mixed = _F["mixed"].read(table, "run")
    scale = float(_F["time_scale"].read(table, "run"))
    return RunSpec(duration_us=duration, bin_us=bin_us, seed=seed, grace_us=grace, mixed=mixed,
                   time_scale=scale)
