"""Running a sweep: every grid point not already complete, locally or on a Dask cluster.

Runs execute in a local process pool (``concurrent.futures``) or, given a scheduler address,
on an existing Dask distributed cluster; Dask workers must see ``DIR`` (a shared filesystem,
as on a Slurm cluster driven by dask-jobqueue). Outputs in ``DIR``: ``runs.csv`` (the table,
:mod:`mrc.labs.sweep.table`), ``sweep.json`` (the expanded grid) and ``runs/<run id>/`` with
each run's own lab outputs and its completion marker (:mod:`mrc.labs.sweep.point`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs.errors import LabError
from mrc.labs.output.durable import replace_file
from mrc.labs.output.lock import FolderLock
from mrc.labs.sweep.file import load_sweep
from mrc.labs.sweep.plan import Sweep, SweepRun
from mrc.labs.sweep.plot import plot_name, plot_sweep
from mrc.labs.sweep.point import (
    Runner,
    RunTask,
    execute_run,
    json_default,
    read_marker,
    run_dir,
    write_marker,
)
from mrc.labs.sweep.table import build_table, error_line, overview, write_table

SWEEP_FILE = "sweep.json"  # the expanded grid; also what marks a folder as a sweep's
_ADDRESS_RE = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):[0-9]{1,5}")


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
        """METRIC against the swept parameter BY (:func:`mrc.labs.sweep.plot.plot_sweep`)."""
        target = Path(path) if path else self.out_dir / plot_name(metric, by)
        return plot_sweep(self.table, metric, by, target, params=self.sweep.params,
                          title=self.sweep.name)

    def overview(self) -> str:
        return overview(self.table)


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
    lock = open_sweep_folder(out_dir, sweep)  # checked and locked before anything runs
    try:
        return _run_sweep(sweep, out_dir.resolve(), workers=workers, scheduler=scheduler,
                          client=client, progress=progress, runner=runner, wall0=wall0)
    finally:
        lock.release()


def open_sweep_folder(out_dir: Path, sweep: Sweep) -> FolderLock:
    """A sweep folder is new, empty, or one this sweep made (its ``sweep.json`` names it);
    anything else is refused, since a sweep writes its tables there. Returns the held lock
    (one sweep per folder at a time)."""
    shown = str(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise LabError("exists and is not a folder", "--out", shown)
    if out_dir.is_dir():
        try:
            entries = os.listdir(out_dir)
        except OSError as exc:
            raise LabError(f"cannot read: {exc.strerror or exc}", "--out", shown) from None
        if entries:
            try:
                made = json.loads((out_dir / SWEEP_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                made = None
            if not isinstance(made, dict) or not isinstance(made.get("runs"), list):
                raise LabError(f"is not empty and was not made by mrc-lab sweep (no "
                               f"{SWEEP_FILE}); choose a new or empty folder: mrc-lab never "
                               "deletes files it did not write", "--out", shown)
            if made.get("name") != sweep.name:
                raise LabError(f"holds the results of sweep {made.get('name')!r}, not "
                               f"{sweep.name!r}; choose another folder", "--out", shown)
    out_dir = Path(os.path.abspath(out_dir))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create: {exc.strerror or exc}", "--out", shown) from None
    lock = FolderLock(out_dir, "--out")
    lock.acquire()
    return lock


def _run_sweep(sweep: Sweep, out_dir: Path, *, workers: int | None, scheduler: str | None,
               client: Any, progress: bool, runner: Runner | None,
               wall0: float) -> SweepResult:
    own_client = client is None and scheduler is not None
    if own_client:  # before anything is written: a wrong address is bad input
        assert scheduler is not None
        client = connect(scheduler)
    replace_file(out_dir / SWEEP_FILE,
                 json.dumps(sweep.to_dict(), indent=2, default=json_default) + "\n")

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
                     params=tuple(r.params.items()), model=sweep.model)
             for r in pending]
    bar = _progress_bar(len(sweep.runs), len(records), sweep.name) if progress else None

    def finish(record: dict[str, Any]) -> None:
        run = by_id[record["run_id"]]
        records[run.run_id] = write_marker(out_dir, run, record)
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
    return {"run_id": task.run_id, "status": "error", "error": error_line(exc), "summary": None,
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
                       f"{error_line(exc)}", "--scheduler") from None


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
