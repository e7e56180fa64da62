"""Sweeps: one base lab, a grid of parameters, many runs, one tidy table.

One lab answers one question; a sweep answers "how does X move with Y, over N seeds". A sweep
file (TOML) names a base lab and the lab keys to vary, by their dotted paths (the same paths
``mrc-lab run --set`` takes)::

    name = "sweep-t1-reboot"             # optional, default: the file name
    description = "one line"
    lab = "t1-reboot"                    # base lab: a path (relative to this file), a bundled
                                         # lab name, or an inline [lab] table (a whole lab);
                                         # or a fleet file (kind = "fleet": mrc-lab fleet)
    model = "packet"                     # packet (default) | flow: the flow-level model
    transports = ["mrc", "rc"]           # optional subset of the lab's transports

    [set]                                # optional: fixed overrides applied to every run
    "run.duration_us" = 2000

    [grid]                               # the product of these lists (file order; the last
    "run.seed" = [1, 2, 3]               # varies fastest); nested tables work as well:
    fault.0.target = ["p0.t1.0", "p0.t1.1"]   # (unquoted = the same dotted path)

    [[zip]]                              # optional, any number: lists that advance together
    "fault.0.at_us" = [200, 400]         # (equal lengths); each [[zip]] is one axis of the
    "fault.0.duration_us" = [300, 600]   # product

Every grid point is validated as a full lab before anything runs (bad input: one line, exit
status 2). A run's id is a blake2b digest of the canonical JSON of its resolved lab and
transports, so it is stable across invocations and machines (never ``hash()``), and a sweep
re-run in the same folder skips the runs already complete (resume).

Outputs in ``DIR``: ``runs.csv`` (and ``runs.parquet`` when pyarrow is installed), one row per
(run, transport) with the grid parameters (columns named by their dotted path) and every
summary.json figure flattened with ``_`` (``goodput_gbps_before``, ``recovery_us``...);
``sweep.json`` (the expanded grid); ``runs/<run id>/`` with the run's own lab outputs and
``sweep-run.json``, the marker that says the run is complete. A run that raises is recorded
(``status = "error"``, its message in ``error``) and the sweep goes on.

Runs execute in a local process pool (``concurrent.futures``) or, given a scheduler address,
on an existing Dask distributed cluster; Dask workers must see ``DIR`` (a shared filesystem,
as on a Slurm cluster driven by dask-jobqueue).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs import models
from mrc.labs.errors import LabError
from mrc.labs.schema import (
    Lab,
    check_keys,
    check_list,
    check_str,
    check_table,
    find_bundled,
    load_lab,
    parse_toml,
    read_lab_text,
    resolve_lab_path,
    set_key,
    toml_type,
    validate,
)

SWEEP_KEYS = ("name", "description", "lab", "model", "transports", "set", "grid", "zip")
SEED_PARAM = "run.seed"
MAX_RUNS = 100_000
MAX_SWEEP_BYTES = 4 * 1024 * 1024
ID_BYTES = 6  # 12 hex digits: collisions are negligible for any grid we would run
MARKER = "sweep-run.json"
TABLE_CSV = "runs.csv"
TABLE_PARQUET = "runs.parquet"
FIRST_COLUMNS = ("run_id", "run_index")
RESULT_COLUMNS = ("transport", "kind", "status", "error", "outcome", "job_failed")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_INDEX_RE = re.compile(r"-?[0-9]+")
_ADDRESS_RE = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):[0-9]{1,5}")

#: ``runner(lab, transports)`` returns an object with ``.summary`` (a summary.json dict) and
#: ``.write(dir)``; tests inject a fake one, the default is :func:`lab_runner`.
Runner = Callable[[Lab, "list[str] | None"], Any]


# ====================================================================== the sweep file
@dataclass(frozen=True)
class SweepRun:
    """One grid point: the parameters it sets and the full lab it runs (a plain dict)."""

    run_id: str
    index: int
    params: dict[str, Any]
    lab: dict[str, Any]
    transports: tuple[str, ...]  # the transport names the run produces, in order
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: every run's lab has been checked."""

    name: str
    description: str
    source: str | None
    base: Any  # a Lab, or a Fleet when model == "fleet"
    fixed: dict[str, Any]
    axes: tuple[tuple[str, ...], ...]  # the parameter paths of each axis (a zip has several)
    transports: tuple[str, ...] | None  # the selection passed to the runner (None: all)
    runs: tuple[SweepRun, ...]
    model: str = "packet"  # packet | flow | fleet (mrc.labs.models)

    @property
    def params(self) -> list[str]:
        """The swept parameter paths, in file order (the table's parameter columns)."""
        return [p for axis in self.axes for p in axis]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "lab": self.base.name, "lab_source": self.base.source, "set": self.fixed,
                "params": self.params, "transports": list(self.transports or ()) or None,
                "model": self.model, "runs": [{"run_id": r.run_id, "index": r.index, "params": r.params}
                         for r in self.runs]}


def canonical_json(value: Any) -> str:
    """Key-order independent JSON: what run ids are hashed from."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def run_id(lab: Mapping[str, Any], lab_name: str, transports: Sequence[str] | None,
           model: str = "packet") -> str:
    """A stable id for one run: blake2b of its resolved lab, transport selection and (when
    not the packet model) model, so the same run gets the same folder on every invocation
    and machine (unlike ``hash()``)."""
    doc: dict[str, Any] = {"lab": lab, "name": lab_name,
                           "transports": list(transports) if transports else None}
    if model != "packet":
        doc["model"] = model
    payload = canonical_json(doc)
    return hashlib.blake2b(payload.encode(), digest_size=ID_BYTES).hexdigest()


def read_sweep_text(path: Path) -> str:
    return read_lab_text(path, kind="sweep file", max_bytes=MAX_SWEEP_BYTES,
                         missing="no such sweep file, and no bundled sweep of that name")


def load_sweep(sweep: str | Path | Mapping[str, Any], *, base_dir: Path | None = None,
               name: str | None = None) -> Sweep:
    """A validated :class:`Sweep` from a TOML path or a parsed dict; raises :class:`LabError`
    (one line: file, key, problem) before anything runs."""
    if isinstance(sweep, Mapping):
        return _guard(lambda: _build(dict(sweep), name or "sweep", None, base_dir or Path.cwd()),
                      None)
    path = Path(sweep)
    source = str(sweep)
    if not path.exists():  # a bundled sweep by name (labs/sweep-*.toml), like bundled labs
        path = find_bundled(source) or path
    raw = parse_toml(read_sweep_text(path), source)
    return _guard(lambda: _build(raw, name or path.stem, source, path.parent), source)


def _guard(build: Callable[[], Sweep], source: str | None) -> Sweep:
    try:
        return build()
    except LabError as exc:
        raise exc.with_source(source) from None


def _build(raw: dict[str, Any], default_name: str, source: str | None,
           base_dir: Path) -> Sweep:
    if "lab" not in raw and {"workload", "run"} & set(raw):
        raise LabError("this is a lab file, not a sweep file: a sweep names a base lab "
                       "(lab = \"t1-reboot\") and a [grid] of its keys to vary (mrc-lab run "
                       "runs a lab)")
    check_keys(raw, SWEEP_KEYS, "")
    sweep_name = check_str(raw.get("name", default_name), "name")
    if not _NAME_RE.fullmatch(sweep_name):
        raise LabError(f"{sweep_name!r} must be letters, digits, '-' or '_' (it names the "
                       "output folder)", "name")
    description = check_str(raw.get("description", ""), "description").strip()
    base = _base_lab(raw, base_dir)
    model = "fleet" if not isinstance(base, Lab) else check_str(
        raw.get("model", "packet"), "model", models.LAB_MODELS)
    transports = _transport_selection(raw.get("transports"))
    fixed = dict(_leaves(check_table(raw.get("set", {}), "set"), "", "set"))
    axes_values = _axes(raw)
    paths = [(where, p) for where, axis in axes_values for p in axis]
    _check_disjoint([(f"set.{p}", p) for p in fixed] + paths)
    start = models.materialize(base)
    for path, value in fixed.items():
        start = apply_param(start, path, value, f"set.{path}")
    runs = _expand(base, start, fixed, axes_values, transports, model)
    return Sweep(name=sweep_name, description=description, source=source, base=base,
                 fixed=fixed, axes=tuple(tuple(axis) for _, axis in axes_values),
                 transports=transports, runs=tuple(runs), model=model)


def _base_lab(raw: Mapping[str, Any], base_dir: Path) -> Any:
    if "lab" not in raw:
        raise LabError("missing required key (a lab file, a bundled lab name, or an inline "
                       "[lab] table)", "lab")
    spec = raw["lab"]
    try:
        fleet = models.fleet_base(spec, base_dir)
    except LabError as exc:
        raise LabError(f"base fleet {exc}", "lab") from None
    if fleet is not None:
        return fleet
    if isinstance(spec, dict):
        try:
            return validate(copy.deepcopy(spec), name=str(spec.get("name", "lab")),
                            base_dir=base_dir)
        except LabError as exc:
            raise LabError(exc.message, f"lab.{exc.key}" if exc.key else "lab") from None
    text = check_str(spec, "lab")
    beside = base_dir / text
    try:
        return load_lab(beside if beside.is_file() else resolve_lab_path(text))
    except LabError as exc:
        raise LabError(f"base lab {exc}", "lab") from None


def _transport_selection(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    items = check_list(value, "transports", min_len=1)
    names = tuple(check_str(v, f"transports.{i}") for i, v in enumerate(items))
    if len(set(names)) != len(names):
        raise LabError("a transport is listed twice", "transports")
    return names


def _leaves(table: Mapping[str, Any], prefix: str, where: str) -> Iterable[tuple[str, Any]]:
    """Dotted path -> value; quoted (``"run.seed"``) and nested (``run.seed``) keys agree."""
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if any(not part for part in path.split(".")):
            raise LabError("not a dotted key path", f"{where}.{path}" if where else path)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path, where)
        else:
            yield path, value


def _value_list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise LabError(f"expected an array of values to sweep, got {toml_type(value)} "
                       f"{value!r:.40} (a single fixed value goes in [set])", key)
    if not value:
        raise LabError("an empty array sweeps nothing", key)
    return value


def _axes(raw: Mapping[str, Any]) -> list[tuple[str, dict[str, list[Any]]]]:
    """``[(where, {path: values})]``: each [grid] key is one axis, each [[zip]] one axis."""
    axes: list[tuple[str, dict[str, list[Any]]]] = []
    for path, values in _leaves(check_table(raw.get("grid", {}), "grid"), "", "grid"):
        axes.append((f"grid.{path}", {path: _value_list(values, f"grid.{path}")}))
    zips = raw.get("zip", [])
    if isinstance(zips, dict):
        raise LabError("write zipped lists as [[zip]] entries (an array of tables)", "zip")
    for i, table in enumerate(check_list(zips, "zip")):
        where = f"zip.{i}"
        group = {p: _value_list(v, f"{where}.{p}")
                 for p, v in _leaves(check_table(table, where), "", where)}
        if not group:
            raise LabError("an empty [[zip]] sweeps nothing", where)
        lengths = {p: len(v) for p, v in group.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{p} has {n}" for p, n in lengths.items())
            raise LabError(f"zipped arrays must have equal lengths ({shown})", where)
        axes.append((where, group))
    if not axes:
        raise LabError("nothing to sweep: add a [grid] table (or [[zip]]) of dotted lab keys "
                       "with arrays of values", "grid")
    return axes


def _check_disjoint(paths: Sequence[tuple[str, str]]) -> None:
    """Refuse a path given twice, or one inside another: the result would depend on order."""
    for i, (where_a, a) in enumerate(paths):
        for where_b, b in paths[:i]:
            if a == b:
                raise LabError(f"{a!r} is also given in {where_b}", where_a)
            if a.startswith(b + ".") or b.startswith(a + "."):
                raise LabError(f"{a!r} overlaps {b!r} (set by {where_b}); the order would be "
                               "ambiguous", where_a)


def apply_param(lab: Mapping[str, Any], path: str, value: Any, key: str) -> dict[str, Any]:
    """``set_key`` with a clear error when the path walks into an array the lab lacks
    (``fault.0.target`` on a lab without faults) instead of inventing a table."""
    node: Any = lab
    parts = path.split(".")
    for depth, part in enumerate(parts[:-1]):
        nxt = parts[depth + 1]
        if isinstance(node, dict):
            if part not in node:
                if _INDEX_RE.fullmatch(nxt):
                    here = ".".join(parts[: depth + 1])
                    raise LabError(f"the base lab has no {here!r} array to index", key)
                break
            node = node[part]
        elif isinstance(node, list):
            if not _INDEX_RE.fullmatch(part) or not -len(node) <= int(part) < len(node):
                here = ".".join(parts[: depth + 1])
                raise LabError(f"{here!r} is not an entry of the base lab (its array has "
                               f"{len(node)} entries)", key)
            node = node[int(part)]
        else:
            break
    try:
        return set_key(lab, path, value)
    except LabError as exc:
        raise LabError(exc.message, key) from None


def _expand(base: Any, start: dict[str, Any], fixed: Mapping[str, Any],
            axes: list[tuple[str, dict[str, list[Any]]]],
            transports: tuple[str, ...] | None, model: str = "packet") -> list[SweepRun]:
    total = math.prod(len(next(iter(group.values()))) for _, group in axes)
    if total > MAX_RUNS:
        raise LabError(f"{total:,} runs is more than a sweep runs (at most {MAX_RUNS:,})", "grid")
    runs: list[SweepRun] = []
    seen: dict[str, int] = {}
    choices = [range(len(next(iter(group.values())))) for _, group in axes]
    for index, pick in enumerate(itertools.product(*choices)):
        lab = start
        params: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for (where, group), k in zip(axes, pick, strict=True):
            for path, values in group.items():
                key = f"{where}.{path}" if where.startswith("zip") else where
                lab = apply_param(lab, path, values[k], key)
                params[path] = values[k]
                origin[path] = key
        try:
            # a full check (the packet model's size limit included)
            _, selected = models.check_point(model, lab, base, transports)
        except LabError as exc:
            raise _point_error(exc, params, origin, fixed) from None
        rid = run_id(lab, base.name, transports, model)
        if rid in seen:
            raise LabError(f"runs {seen[rid]} and {index} are the same lab (a value is repeated "
                           f"in the grid): {_show_params(params)}", "grid")
        seen[rid] = index
        runs.append(SweepRun(run_id=rid, index=index, params=params, lab=lab,
                             transports=tuple(t.name for t in selected),
                             kinds=tuple(t.kind for t in selected)))
    return runs


def _show_params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def _point_error(exc: LabError, params: Mapping[str, Any], origin: Mapping[str, str],
                 fixed: Mapping[str, Any]) -> LabError:
    """Blame the grid (or [set]) entry behind a lab error, naming the offending value."""
    if exc.key == "--transport":
        return LabError(exc.message, "transports")
    if exc.key is not None:
        for path, value in params.items():
            if exc.key == path or exc.key.startswith(path + "."):
                return LabError(f"value {value!r}: {exc.message}", origin[path])
        for path in fixed:
            if exc.key == path or exc.key.startswith(path + "."):
                return LabError(exc.message, f"set.{path}")
    where = f"{exc.key}: " if exc.key else ""
    return LabError(f"with {_show_params(params)}: {where}{exc.message}", "grid")


# ====================================================================== running one grid point
@dataclass(frozen=True)
class RunTask:
    """What a worker needs for one run: plain data, so it pickles to processes and Dask."""

    run_id: str
    index: int
    lab: dict[str, Any]
    lab_name: str
    source: str | None
    base_dir: str | None
    transports: tuple[str, ...] | None
    out_dir: str
    model: str = "packet"


def lab_runner(lab: Lab, transports: list[str] | None) -> Any:
    """The real runner: the packet simulator through :func:`mrc.labs.runner.run_lab`."""
    from mrc.labs.runner import run_lab

    return run_lab(lab, transports=transports, progress=False)


# pyplot (used for bandwidth.png) keeps global state; Dask workers with threads share a process.
_WRITE_LOCK = threading.Lock()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def execute_run(task: RunTask, runner: Runner | None = None) -> dict[str, Any]:
    """Run one grid point and write its outputs; never raises, so one bad run cannot stop
    the sweep: an exception becomes ``status = "error"`` with its one-line message (the
    traceback goes to ``error.txt`` in the run's folder)."""
    wall0 = time.perf_counter()
    out = Path(task.out_dir)
    record: dict[str, Any] = {"run_id": task.run_id, "status": "ok", "error": None,
                              "summary": None}
    try:
        lab = models.load(task.model, task.lab, task.lab_name, task.source,
                          Path(task.base_dir) if task.base_dir else None)
        run = runner or (lab_runner if task.model == "packet" else models.runner(task.model))
        result = run(lab, list(task.transports) if task.transports else None)
        with _WRITE_LOCK:
            result.write(out)
        record["summary"] = json.loads(json.dumps(result.summary, default=_json_default))
    except Exception as exc:  # noqa: BLE001 (recorded, and the sweep goes on)
        record.update(status="error", error=_one_line(exc), summary=None)
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        except OSError:
            pass
    record["wall_s"] = round(time.perf_counter() - wall0, 3)
    return record


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)


# ====================================================================== the table
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
    """runs.csv always; runs.parquet too when pyarrow is installed (it is optional)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / TABLE_CSV]
    table.to_csv(written[0], index=False, float_format="%.9g")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return written
    try:
        table.to_parquet(out_dir / TABLE_PARQUET, index=False)
        written.append(out_dir / TABLE_PARQUET)
    except Exception as exc:  # noqa: BLE001 (the CSV is the table; parquet is a convenience)
        print(f"mrc-lab: warning: runs.parquet not written: {_one_line(exc)}", file=sys.stderr)
    return written


# ====================================================================== running a sweep
@dataclass
class SweepResult:
    """The table plus what happened: how many runs were done now, skipped, errored."""

    sweep: Sweep
    table: pd.DataFrame
    out_dir: Path
    ran: int = 0
    skipped: int = 0
    errors: int = 0
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)

    def plot(self, metric: str, by: str, path: str | Path | None = None) -> Path:
        target = Path(path) if path else self.out_dir / plot_name(metric, by)
        return plot_sweep(self.table, metric, by, target, params=self.sweep.params,
                          title=self.sweep.name)

    def overview(self) -> str:
        return overview(self.table)


def run_dir(out_dir: Path, rid: str) -> Path:
    return out_dir / "runs" / rid


def read_marker(out_dir: Path, rid: str) -> dict[str, Any] | None:
    """The record of a run completed earlier, or None (missing, unreadable, or errored:
    errored runs are retried)."""
    path = run_dir(out_dir, rid) / MARKER
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("run_id") != rid:
        return None
    if record.get("status") != "ok" or not isinstance(record.get("summary"), dict):
        return None
    return record


def _write_marker(out_dir: Path, run: SweepRun, record: Mapping[str, Any]) -> dict[str, Any]:
    """Written last and atomically: its presence is what makes a run complete."""
    folder = run_dir(out_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    data = {**record, "run_id": run.run_id, "index": run.index, "params": run.params}
    text = json.dumps(data, indent=2, default=_json_default) + "\n"
    tmp = folder / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / MARKER)
    if data.get("summary") and not (folder / "summary.json").exists():
        # a Dask worker without the shared folder wrote its files elsewhere; keep the summary
        (folder / "summary.json").write_text(json.dumps(data["summary"], indent=2) + "\n",
                                             encoding="utf-8")
    return json.loads(text)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_sweep(sweep: Sweep | str | Path | Mapping[str, Any], *, out: str | Path | None = None,
              workers: int | None = None, scheduler: str | None = None, client: Any = None,
              progress: bool = True, runner: Runner | None = None) -> SweepResult:
    """Run every grid point not already complete in ``out`` and write the runs table.

    Local runs use a process pool of ``workers`` (default: the CPUs available; 1 runs in
    this process). ``scheduler`` (an address) or ``client`` (a ``distributed.Client``)
    sends the runs to a Dask cluster instead. ``runner`` replaces the simulator (tests).
    """
    wall0 = time.perf_counter()
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    if workers is not None and (scheduler is not None or client is not None):
        raise LabError("give --workers or --scheduler, not both", "--workers")
    out_dir = Path(out) if out is not None else Path("mrc-lab-out") / sweep.name
    if out_dir.exists() and not out_dir.is_dir():
        raise LabError("exists and is not a directory", "--out", str(out_dir))
    own_client = client is None and scheduler is not None
    if own_client:  # before anything is written: a wrong address is bad input
        assert scheduler is not None
        client = connect(scheduler)
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(
        json.dumps(sweep.to_dict(), indent=2, default=_json_default) + "\n", encoding="utf-8")

    records: dict[str, dict[str, Any]] = {}
    pending: list[SweepRun] = []
    for run in sweep.runs:
        done = read_marker(out_dir, run.run_id)
        if done is not None:
            records[run.run_id] = done
        else:
            pending.append(run)
    result = SweepResult(sweep=sweep, table=pd.DataFrame(), out_dir=out_dir,
                         skipped=len(records))
    by_id = {run.run_id: run for run in sweep.runs}
    tasks = [RunTask(run_id=r.run_id, index=r.index, lab=r.lab, lab_name=sweep.base.name,
                     source=sweep.base.source,
                     base_dir=str(sweep.base.base_dir) if sweep.base.base_dir else None,
                     transports=sweep.transports, out_dir=str(run_dir(out_dir, r.run_id)),
                     model=sweep.model)
             for r in pending]
    bar = _progress_bar(len(sweep.runs), len(records), sweep.name) if progress else None

    def finish(record: dict[str, Any]) -> None:
        run = by_id[record["run_id"]]
        records[run.run_id] = _write_marker(out_dir, run, record)
        result.ran += 1
        if record.get("status") != "ok":
            result.errors += 1
        if bar is not None:
            bar.update(1)
            if result.errors:
                bar.set_postfix(errors=result.errors)

    try:
        if tasks:
            if client is not None:
                _run_dask(tasks, finish, client=client, runner=runner)
            else:
                _run_local(tasks, finish, workers=workers or default_workers(), runner=runner)
    finally:
        if own_client:
            client.close()
        if bar is not None:
            bar.close()
        result.table = build_table(sweep, records)
        result.files = write_table(result.table, out_dir)
        result.wall_s = round(time.perf_counter() - wall0, 3)
    return result


def _progress_bar(total: int, done: int, name: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="run", desc=f"sweep {name}", leave=False,
                file=sys.stderr, dynamic_ncols=True)


def _error_record(task: RunTask, exc: BaseException) -> dict[str, Any]:
    return {"run_id": task.run_id, "status": "error", "error": _one_line(exc), "summary": None,
            "wall_s": None}


def _run_local(tasks: Sequence[RunTask], finish: Callable[[dict[str, Any]], None], *,
               workers: int, runner: Runner | None) -> None:
    """A process pool (the simulator is pure Python: threads would share one GIL). One
    worker runs in this process: no start-up cost, and tracebacks stay readable."""
    workers = max(1, min(workers, len(tasks)))
    if workers == 1:
        for task in tasks:
            finish(execute_run(task, runner))
        return
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        futures = {pool.submit(execute_run, task, runner): task for task in tasks}
        for future in as_completed(futures):
            try:
                record = future.result()
            except Exception as exc:  # noqa: BLE001 (a dead worker process, say)
                record = _error_record(futures[future], exc)
            finish(record)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def connect(scheduler: str) -> Any:
    """A ``distributed.Client`` for ``scheduler``; distributed is an optional extra, imported
    only here so local sweeps never need it."""
    try:
        from distributed import Client
    except ImportError:
        raise LabError("needs the Dask 'distributed' package: pip install 'mrc-lab[dask]'",
                       "--scheduler") from None
    if not _ADDRESS_RE.fullmatch(scheduler) and not scheduler.startswith("inproc://"):
        raise LabError(f"{scheduler!r} is not a scheduler address (expected "
                       "[PROTOCOL://]HOST:PORT, e.g. tcp://10.0.0.5:8786)", "--scheduler")
    try:
        return Client(scheduler, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise LabError(f"cannot connect to the Dask scheduler at {scheduler!r}: "
                       f"{_one_line(exc)}", "--scheduler") from None


def _run_dask(tasks: Sequence[RunTask], finish: Callable[[dict[str, Any]], None], *,
              client: Any, runner: Runner | None) -> None:
    """Submit every run to the cluster and collect as they finish (Dask schedules)."""
    from distributed import as_completed as dask_completed

    token = uuid.uuid4().hex[:8]  # keys unique per invocation: never reuse another sweep's
    futures: dict[Any, RunTask] = {}
    try:
        for task in tasks:
            futures[client.submit(execute_run, task, runner, pure=False,
                                  key=f"mrc-lab-run-{task.run_id}-{token}")] = task
        for future in dask_completed(list(futures), loop=client.loop):
            try:
                record = future.result()
            except Exception as exc:  # noqa: BLE001 (a killed worker, a lost connection)
                record = _error_record(futures[future], exc)
            finish(record)
    except BaseException:
        client.cancel(list(futures))
        raise


# ====================================================================== reading results
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


def plot_name(metric: str, by: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"plot-{metric}-by-{by}")
    return f"{safe}.png"


def metric_column(table: pd.DataFrame, metric: str) -> str:
    """The column for METRIC: its name, or its summary.json path (``goodput_gbps.before``)."""
    for candidate in (metric, metric.replace(".", "_")):
        if candidate in table.columns:
            return candidate
    numeric = [c for c in table.columns if c not in FIRST_COLUMNS
               and pd.api.types.is_numeric_dtype(table[c]) and "." not in c]
    raise LabError(f"no such column in the runs table; numeric ones: {', '.join(numeric)}",
                   "--plot")


def plot_sweep(table: pd.DataFrame, metric: str, by: str, path: str | Path, *,
               params: Sequence[str] = (), title: str | None = None) -> Path:
    """METRIC against PARAM, one series per transport (and per value of any other swept
    parameter but the seed): the mean, with bars from min to max over the seeds and the
    individual runs as faint dots. Null values (a failed job's recovery time) are left out
    and counted under the point."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    column = metric_column(table, metric)
    if by not in table.columns:
        raise LabError(f"not a column of the runs table; swept parameters: "
                       f"{', '.join(params) or '(none)'}", "--by")
    data = table[table["status"] == "ok"].copy()
    if data.empty:
        raise LabError("no completed runs to plot", "--plot")
    values = pd.to_numeric(data[column], errors="coerce")
    if values.isna().all() and data[column].notna().any():
        raise LabError(f"{column!r} is not numeric (for outcomes plot job_failed, the share "
                       "of runs whose job failed)", "--plot")
    data["_y"] = values
    x_numeric = pd.api.types.is_numeric_dtype(data[by]) and data[by].notna().all()
    order = list(dict.fromkeys(data[by].tolist()))
    if x_numeric:
        order = sorted(order)
    positions = {v: (float(v) if x_numeric else float(i)) for i, v in enumerate(order)}
    steps = sorted(set(positions.values()))
    spacing = min((b - a for a, b in zip(steps, steps[1:], strict=False)), default=1.0)
    others = [p for p in params if p not in (by, SEED_PARAM) and p in data
              and data[p].nunique(dropna=False) > 1]
    keys = ["transport", *others]
    groups = list(data.groupby(keys, sort=False, dropna=False))
    seeds = data[SEED_PARAM].nunique() if SEED_PARAM in data else None

    fig = Figure(figsize=(9, 5.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.5 * spacing
    for i, (key, rows) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        label = str(key[0]) + "".join(f", {p}={v}" for p, v in zip(others, key[1:], strict=True))
        offset = (i - (len(groups) - 1) / 2) * width / max(len(groups), 1)
        stats = rows.groupby(by, sort=False)["_y"].agg(["mean", "min", "max", "count", "size"])
        stats = stats.reindex([v for v in order if v in stats.index])
        xs = [positions[v] + offset for v in stats.index]
        mean = stats["mean"].to_numpy(dtype=float)
        low = mean - stats["min"].to_numpy(dtype=float)
        high = stats["max"].to_numpy(dtype=float) - mean
        bars = ax.errorbar(xs, mean, yerr=[low, high], marker="o", capsize=4,
                           linewidth=1.5 if x_numeric else 0.8,
                           linestyle="-" if x_numeric else ":", label=label)
        color = bars[0].get_color()
        dots = rows.dropna(subset=["_y"])
        ax.scatter([positions[v] + offset for v in dots[by]], dots["_y"], s=12, alpha=0.35,
                   color=color, linewidths=0)
        for x, (_, s) in zip(xs, stats.iterrows(), strict=True):
            if s["count"] < s["size"]:
                ax.annotate(f"{int(s['size'] - s['count'])}/{int(s['size'])} null", (x, 0),
                            xytext=(0, 3),
                            textcoords="offset points", xycoords=("data", "axes fraction"),
                            ha="center", fontsize=7, color=color)
    ax.set_xlim(steps[0] - 0.6 * spacing, steps[-1] + 0.6 * spacing)
    if not x_numeric:
        ax.set_xticks([positions[v] for v in order], [str(v) for v in order],
                      rotation=30 if len(order) > 4 else 0, ha="right" if len(order) > 4 else
                      "center")
    ax.set_xlabel(by)
    ax.set_ylabel(column)
    spread = f"mean, bars min..max over {seeds} seeds" if seeds else "mean, bars min..max"
    ax.set_title(f"{title + ': ' if title else ''}{column} by {by} ({spread})", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="best")
    if data["_y"].isna().any():
        fig.text(0.01, 0.01, "null values (e.g. no recovery time for a failed job) are left out "
                 "and counted at the bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=120)
    return target

