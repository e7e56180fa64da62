"""One grid point of a sweep: run it, write its outputs, and mark it complete.

A worker (a local process or a Dask worker) gets a :class:`RunTask` of plain data, runs the
lab and writes the run's own outputs into ``DIR/runs/<run id>/`` as one result set (a
manifest, renamed into place when complete: :mod:`mrc.labs.output.folder`); the parent then writes
``sweep-run.json`` there, last and atomically: the marker that says the run is complete, so
a sweep re-run in the same folder skips it. A run that raises is recorded
(``status = "error"``, its message in ``error``) and the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrc.labs.output.durable import replace_file
from mrc.labs.output.folder import OutputFolder
from mrc.labs.run.runner import run_lab
from mrc.labs.schema.lab import Lab
from mrc.labs.sweep import models
from mrc.labs.sweep.plan import SweepRun
from mrc.labs.sweep.table import error_line

MARKER = "sweep-run.json"
ERROR_FILE = "error.txt"
#: Files of a run folder that are the sweep's own, not the run's result set (and the
#: temporary names they are written under).
RUN_OWN_FILES = (MARKER, ERROR_FILE, f".{MARKER}.*.tmp", f".{ERROR_FILE}.*.tmp",
                 ".summary.json.*.tmp")

#: ``runner(lab, transports)`` returns an object with ``.summary`` (a summary.json dict) and
#: ``.write_files(dir)`` (every output file into a folder, returning their paths); tests
#: inject a fake one, the default is :func:`lab_runner`.
Runner = Callable[[Lab, "list[str] | None"], Any]


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
    params: tuple[tuple[str, Any], ...] = ()
    model: str = "packet"  # packet | flow | fleet (mrc.labs.sweep.models)


def lab_runner(lab: Lab, transports: list[str] | None) -> Any:
    """The real runner: the packet simulator through :func:`mrc.labs.run.runner.run_lab`."""
    return run_lab(lab, transports=transports, progress=False)


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
        if isinstance(lab, Lab):
            lab = dataclasses.replace(lab, overrides=task.params)
        run = runner or (lab_runner if task.model == "packet" else models.runner(task.model))
        result = run(lab, list(task.transports) if task.transports else None)
        # the sweep holds the lock of the whole folder; each run is one result set, swapped
        # in whole (no pyplot lock needed: every figure is its own object)
        with OutputFolder(out, option="runs", own=RUN_OWN_FILES, lock=False) as folder:
            folder.commit(result.write_files(folder.staging),
                          {"lab": lab.name, "run_id": task.run_id, "model": task.model,
                           "seed": lab.seed if task.model == "fleet" else lab.run.seed,
                           "overrides": dict(task.params)})
        record["summary"] = json.loads(json.dumps(result.summary, default=json_default))
    except Exception as exc:  # noqa: BLE001 (recorded, and the sweep goes on)
        record.update(status="error", error=error_line(exc), summary=None)
        try:
            out.mkdir(parents=True, exist_ok=True)
            replace_file(out / ERROR_FILE, traceback.format_exc())
        except OSError:
            pass
    record["wall_s"] = round(time.perf_counter() - wall0, 3)
    return record


def json_default(value: Any) -> Any:
    """JSON for what summaries hold beyond JSON's types (numpy scalars, tuples)."""
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)


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


def write_marker(out_dir: Path, run: SweepRun, record: Mapping[str, Any]) -> dict[str, Any]:
    """Written last and atomically: its presence is what makes a run complete."""
    folder = run_dir(out_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    data = {**record, "run_id": run.run_id, "index": run.index, "params": run.params}
    text = json.dumps(data, indent=2, default=json_default) + "\n"
    if data.get("summary") and not (folder / "summary.json").exists():
        # a Dask worker without the shared folder wrote its files elsewhere; keep the summary
        # as a result set of its own (with its manifest), then mark the run
        with OutputFolder(folder, option="runs", own=RUN_OWN_FILES, lock=False) as kept:
            path = kept.staging / "summary.json"
            path.write_text(json.dumps(data["summary"], indent=2) + "\n", encoding="utf-8")
            kept.commit([path], {"run_id": run.run_id, "note": "summary only: the worker "
                                 "wrote its files where this folder is not"})
    replace_file(folder / MARKER, text)
    return json.loads(text)
