"""A sweep's stall distribution: per transport, the share of QPs hit and the longest stall
over the runs (min / median / max), e.g. over every T1 of a plane rebooting in turn
(``labs/sweep-t1-stall.toml``). Read from the runs table's ``stalls_*`` columns."""

from __future__ import annotations

from typing import Any

import pandas as pd

#: The runs-table columns summarised, and how they are named in the text.
COLUMNS = {"stalls_hit_pct": "QPs hit %", "stalls_stall_max_us": "longest stall us",
           "stalls_stall_max_real_us": "longest stall, real-world us"}


def stall_distribution(table: pd.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """transport -> column -> ``{"runs", "min", "median", "max"}`` over the runs that have it
    (a run with no stall counts 0 for the longest stall; the real-world column only when
    the runs were scaled)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if table.empty or "stalls_hit_pct" not in table.columns:
        return out
    ok = table[table["status"] == "ok"]
    for name, rows in ok.groupby("transport", sort=False):
        entry = {}
        for column in COLUMNS:
            if column not in rows.columns:
                continue
            values = rows[column]
            if column != "stalls_hit_pct":
                if values.isna().all() and column.endswith("real_us"):
                    continue
                values = values.fillna(0.0)
            values = values.dropna().astype(float)
            if values.empty:
                continue
            entry[column] = {"runs": int(values.size), "min": round(float(values.min()), 3),
                             "median": round(float(values.median()), 3),
                             "max": round(float(values.max()), 3)}
        out[str(name)] = entry
    return out


def distribution_text(table: pd.DataFrame) -> str | None:
    """The distribution as lines for the sweep's printout (None: no stall columns)."""
    dist = stall_distribution(table)
    if not dist:
        return None
    lines = ["stalls over the runs (min / median / max):"]
    for name, entry in dist.items():
        for column, d in entry.items():
            lines.append(f"  {name:<8} {COLUMNS[column]:<30} {d['min']:g} / {d['median']:g} / "
                         f"{d['max']:g}  ({d['runs']} runs)")
    return "\n".join(lines)
