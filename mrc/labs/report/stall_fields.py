"""What summary.json's ``stalls`` fields mean (data, importable without pandas; the
definitions are in :mod:`mrc.labs.report.stalls`)."""

from __future__ import annotations

#: What summary.json's ``stalls`` holds, in order: what each field means.
STALL_FIELDS: dict[str, str] = {
    "stalls.unit": "what is counted: QPs as receivers of data (one per direction of a pair)",
    "stalls.threshold_us": "no progress for longer than this is a stall (3 base RTTs)",
    "stalls.qps": "QPs that placed data in the run",
    "stalls.qps_hit": "QPs with a stall overlapping the fault span",
    "stalls.hit_pct": "qps_hit as a percentage of qps",
    "stalls.stall_max_us": "the longest stall of a hit QP (simulated time)",
    "stalls.stall_median_us": "the median over the hit QPs of each one's longest stall",
    "stalls.stall_max_real_us": "stall_max_us divided by the time scale (only when it is not 1)",
    "stalls.stall_median_real_us": "stall_median_us divided by the time scale (only when it "
                                   "is not 1)",
}
UNIT = "QP (receiver of data; one per direction of a QP pair)"
