"""The runs table of a sweep: one row per (run, transport), and its short digest.

Columns: ``run_id``, ``run_index``, the grid parameters (named by their dotted path), the
transport, its status (an errored run's message in ``error``), then every summary.json
figure flattened with ``_`` (``goodput_gbps_before``, ``recovery_us``...). Written as
``runs.csv``, and as ``runs.parquet`` too when pyarrow is installed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs.errors import LabError
from mrc.labs.output.durable import replace_file
from mrc.labs.sweep.plan import Sweep, SweepRun

TABLE_CSV = "runs.csv"
TABLE_PARQUET = "runs.parquet"
FIRST_COLUMNS = ("run_id", "run_index")
RESULT_COLUMNS = ("transport", "kind", "status", "error", "outcome", "job_failed")
SEED_PARAM = "run.seed"  # the parameter column that holds each run's seed


def error_line(exc: BaseException) -> str:
    """What a run's ``error`` column says: the exception's type and message, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cell(value: Any) -> Any:
    """A table cell: scalars as they are, arrays and tables as compact JSON."""
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return value


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"goodput_gbps": {"before": 1}}`` -> ``{"goodput_gbps_before": 1}``; arrays stay
    one JSON cell (a per-size collective table is not a column family)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = _cell(value)
    return out


def record_rows(run: SweepRun, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per transport of one run: id, parameters, status, then the summary flattened."""
    head = {"run_id": run.run_id, "run_index": run.index,
            **{p: _cell(v) for p, v in run.params.items()}}
    summary = record.get("summary")
    if record.get("status") != "ok" or not summary:
        return [{**head, "transport": name, "kind": kind, "status": "error",
                 "error": record.get("error") or "unknown error"}
                for name, kind in zip(run.transports, run.kinds, strict=True)]
    top = flatten({k: v for k, v in summary.items() if k != "transports"})
    rows = []
    for name, figures in summary.get("transports", {}).items():
        own = flatten(figures)
        row = {**head, "transport": name, "kind": figures.get("kind"), "status": "ok",
               "error": None, "outcome": figures.get("outcome"),
               "job_failed": float(figures.get("outcome") == "failed")}
        for key, value in top.items():
            row[f"lab_{key}" if key in own or key in row else key] = value
        for key, value in own.items():
            row.setdefault(key, value)
        rows.append(row)
    return rows


def build_table(sweep: Sweep, records: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The tidy runs table, in grid order (then transport order) whatever order runs finished
    in, so local and Dask execution give the same table."""
    rows = [row for run in sweep.runs if run.run_id in records
            for row in record_rows(run, records[run.run_id])]
    columns: dict[str, None] = dict.fromkeys([*FIRST_COLUMNS, *sweep.params, *RESULT_COLUMNS])
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pd.DataFrame(rows, columns=list(columns))


def write_table(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """runs.csv always; runs.parquet too when pyarrow is installed (it is optional). Each
    file is replaced atomically: a reader never sees half a table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / TABLE_CSV]
    replace_file(written[0], table.to_csv(index=False, float_format="%.9g"))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return written
    try:
        import io

        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        replace_file(out_dir / TABLE_PARQUET, buffer.getvalue())
        written.append(out_dir / TABLE_PARQUET)
    except Exception as exc:  # noqa: BLE001 (the CSV is the table; parquet is a convenience)
        print(f"mrc-lab: warning: runs.parquet not written: {error_line(exc)}", file=sys.stderr)
    return written


def overview(table: pd.DataFrame) -> str:
    """A short per-transport digest of the table (printed after a sweep)."""
    if table.empty:
        return "no runs"
    lines = [f"{'transport':<14}{'runs':>6}{'completed':>11}{'running':>9}{'failed':>8}"
             f"{'errors':>8}{'detect_us':>11}{'recovery_us':>13}{'min_gbps':>10}"]
    for name, rows in table.groupby("transport", sort=False):
        ok = rows[rows["status"] == "ok"]

        def med(column: str, frame: pd.DataFrame = ok) -> str:
            if column not in frame:
                return "-"
            values = pd.to_numeric(frame[column], errors="coerce").dropna()
            return "-" if values.empty else f"{values.median():.1f}"

        outcome = ok["outcome"] if "outcome" in ok else pd.Series(dtype=object)
        lines.append(f"{name:<14}{len(rows):>6}{int((outcome == 'completed').sum()):>11}"
                     f"{int((outcome == 'running').sum()):>9}"
                     f"{int((outcome == 'failed').sum()):>8}"
                     f"{int((rows['status'] != 'ok').sum()):>8}{med('detect_us'):>11}"
                     f"{med('recovery_us'):>13}{med('goodput_gbps_min'):>10}")
    lines.append("detect_us, recovery_us, min_gbps: medians over the runs that have a value")
    return "\n".join(lines)


def metric_column(table: pd.DataFrame, metric: str) -> str:
    """The column for METRIC: its name, or its summary.json path (``goodput_gbps.before``)."""
    for candidate in (metric, metric.replace(".", "_")):
        if candidate in table.columns:
            return candidate
    numeric = [c for c in table.columns if c not in FIRST_COLUMNS
               and pd.api.types.is_numeric_dtype(table[c]) and "." not in c]
    raise LabError(f"no such column in the runs table; numeric ones: {', '.join(numeric)}",
                   "--plot")
