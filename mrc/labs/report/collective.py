"""nccl-tests-style results for collective workloads: the table people already read.

Per size: ``time`` is the mean over the timed (non-warm-up) iterations, ``algbw`` =
size / time, and ``busbw`` = algbw x a factor that makes it comparable with the link rate
whatever the rank count (nccl-tests' PERFORMANCE.md convention): 2(n-1)/n for a ring
all-reduce, (n-1)/n for all-to-all, 1 for send/recv. Bandwidths are in GB/s as nccl-tests
prints them; ``busbw_pct_ceiling`` compares busbw with one NIC's goodput ceiling (the best
payload rate its ports allow). We report what the model gives; nothing is tuned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

FLOAT_BYTES = 4  # nccl-tests' default data type is float32: count = size / 4

COLUMNS = ["transport", "size_bytes", "count", "iters", "time_us", "min_time_us",
           "max_time_us", "algbw_GBps", "busbw_GBps", "busbw_pct_ceiling", "failed_iters",
           "status"]


def busbw_factor(kind: str, ranks: int) -> float:
    """algbw -> busbw multiplier for ``ranks`` participants."""
    if ranks < 1:
        raise ValueError(f"ranks must be positive, got {ranks}")
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if kind == "all_to_all":
        return (ranks - 1) / ranks
    if kind == "sendrecv":
        return 1.0
    raise ValueError(f"not a collective: {kind!r}")


def algbw_gbytes(size_bytes: int, time_us: float) -> float:
    """Bytes per microsecond / 1e3 = GB/s (10^9 bytes per second)."""
    return size_bytes / time_us / 1e3 if time_us > 0 else math.nan


def collective_table(iterations: pd.DataFrame, *, kind: str, ranks: int,
                     nic_ceiling_gbps: float) -> pd.DataFrame:
    """One row per (transport, size) from per-iteration rows.

    ``iterations`` columns: transport, size_bytes, iteration, warmup, time_us (None when the
    iteration did not finish), ok (True, False, or None when still running at the end).
    """
    factor = busbw_factor(kind, ranks)
    rows = []
    if iterations is None or iterations.empty:
        return pd.DataFrame(columns=COLUMNS)
    for (transport, size), group in iterations.groupby(["transport", "size_bytes"], sort=False):
        timed = group[~group["warmup"].astype(bool)]
        good = timed[timed["ok"] == True]  # noqa: E712 (column may hold None)
        failed = int((timed["ok"] == False).sum())  # noqa: E712
        times = good["time_us"].to_numpy(dtype=float)
        if times.size:
            mean = float(times.mean())
            alg = algbw_gbytes(int(size), mean)
            bus = alg * factor
            pct = bus * 8 / nic_ceiling_gbps * 100 if nic_ceiling_gbps > 0 else math.nan
            lo, hi = float(times.min()), float(times.max())
        else:
            mean = alg = bus = pct = lo = hi = math.nan
        if failed:
            status = "failed"
        elif len(good) < len(timed) or len(timed) == 0:
            status = "incomplete"
        else:
            status = "ok"
        rows.append({"transport": transport, "size_bytes": int(size),
                     "count": int(size) // FLOAT_BYTES, "iters": len(good), "time_us": mean,
                     "min_time_us": lo, "max_time_us": hi, "algbw_GBps": alg,
                     "busbw_GBps": bus, "busbw_pct_ceiling": pct, "failed_iters": failed,
                     "status": status})
    return pd.DataFrame(rows, columns=COLUMNS)


def _size(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _num(value: float, fmt: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, fmt)


def format_table(table: pd.DataFrame, *, kind: str, ranks: int,
                 nic_ceiling_gbps: float) -> str:
    """The printed nccl-tests-style table, one block per transport."""
    lines = [f"# {kind}, {ranks} ranks, busbw factor {busbw_factor(kind, ranks):.3g}, "
             f"NIC goodput ceiling {nic_ceiling_gbps:.1f} Gb/s "
             f"({nic_ceiling_gbps / 8:.2f} GB/s)"]
    header = (f"#{'transport':>13} {'size':>8} {'count':>11} {'time(us)':>10} "
              f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'%ceiling':>9} {'status':>10}")
    lines.append(header)
    for row in table.to_dict("records"):
        lines.append(
            f" {row['transport']:>13} {_size(row['size_bytes']):>8} {row['count']:>11} "
            f"{_num(row['time_us'], '.1f'):>10} {_num(row['algbw_GBps'], '.2f'):>12} "
            f"{_num(row['busbw_GBps'], '.2f'):>12} {_num(row['busbw_pct_ceiling'], '.1f'):>9} "
            f"{row['status']:>10}")
    return "\n".join(lines)


def iteration_frame(rows: Sequence[dict[str, object]]) -> pd.DataFrame:
    cols = ["transport", "size_bytes", "iteration", "warmup", "start_us", "time_us", "ok"]
    return pd.DataFrame(list(rows), columns=cols)
