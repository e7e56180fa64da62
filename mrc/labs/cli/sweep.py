"""``mrc-lab sweep``: run a parameter grid over a lab, locally or on a Dask cluster.

Exit status, as for ``mrc-lab run``: 0 when every run completed (a transport's job failing
is a result), 2 for bad input (one line naming the file, the key and the problem), 1 when a
run raised (the others still ran; the table's ``error`` column has each message).
"""

from __future__ import annotations

from pathlib import Path

import click

from mrc.labs.cli.exits import guarded, parse_number
from mrc.labs.errors import EXIT_INTERNAL, LabError


@click.command("sweep")
@click.argument("sweep_file", metavar="SWEEP.toml")
@click.option("--out", "out", metavar="DIR",
              help="Output folder (default: ./mrc-lab-out/<sweep name>/). Runs already "
                   "complete there are skipped.")
@click.option("--workers", "-j", metavar="N",
              help="Local worker processes (default: the CPUs available).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run on an existing Dask cluster, e.g. tcp://host:8786 (needs the "
                   "'dask' extra; workers must see --out).")
@click.option("--plot", "metric", metavar="METRIC",
              help="Also draw METRIC (a runs-table column, e.g. recovery_us) against --by.")
@click.option("--by", "by", metavar="PARAM", help="The swept parameter for --plot's x axis.")
@click.option("--dry-run", is_flag=True, help="Validate and list the runs; run nothing.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no digest.")
def sweep(sweep_file: str, out: str | None, workers: str | None, scheduler: str | None,
          metric: str | None, by: str | None, dry_run: bool, quiet: bool) -> None:
    """Run every point of the grid in SWEEP.toml and collect one table (runs.csv).

    Each run's own outputs land in DIR/runs/<run id>/; re-running skips completed runs.
    """
    def go() -> int:
        from mrc.labs.sweep.file import load_sweep
        from mrc.labs.sweep.metrics import check_metric

        if (metric is None) != (by is None):
            raise LabError("--plot METRIC and --by PARAM go together",
                           "--by" if metric else "--plot")
        n = parse_number(workers, int, "--workers")
        if n is not None and n < 1:
            raise LabError(f"must be at least 1, got {n}", "--workers")
        spec = load_sweep(sweep_file)
        if by is not None and by not in spec.params:
            raise LabError(f"{by!r} is not a swept parameter; swept: {', '.join(spec.params)}",
                           "--by")
        if metric is not None:  # before any run: a typo must not cost the sweep
            check_metric(spec, metric)
        from mrc.labs.sweep.execute import default_workers, run_sweep
        from mrc.labs.sweep.plot import plot_name
        from mrc.labs.sweep.point import read_marker

        out_dir = Path(out) if out else Path("mrc-lab-out") / spec.name
        if dry_run:
            for run in spec.runs:
                done = out_dir.is_dir() and read_marker(out_dir, run.run_id) is not None
                shown = ", ".join(f"{k}={v!r}" for k, v in run.params.items())
                click.echo(f"{run.run_id}  {'done' if done else '    '}  {shown}")
            click.echo(f"{len(spec.runs)} runs of {spec.base.name} x "
                       f"{', '.join(spec.runs[0].transports)} -> {out_dir}/")
            return 0
        if not quiet:
            finished = sum(out_dir.is_dir() and read_marker(out_dir, r.run_id) is not None
                           for r in spec.runs)
            where = f"Dask scheduler {scheduler}" if scheduler else \
                f"{n or default_workers()} local worker(s)"
            click.echo(f"sweep {spec.name}: {len(spec.runs)} runs of {spec.base.name} "
                       f"({finished} already complete) on {where}")
        result = run_sweep(spec, out=out_dir, workers=n, scheduler=scheduler,
                           progress=not quiet)
        plot_path = None
        if metric is not None and by is not None:
            plot_path = result.plot(metric, by, result.out_dir / plot_name(metric, by))
        if not quiet:
            click.echo(result.overview())
            from mrc.labs.sweep.stalls import distribution_text

            stalls = distribution_text(result.table)
            if stalls:
                click.echo(stalls)
            click.echo(f"\n{result.ran} run(s) now, {result.skipped} already complete, "
                       f"{result.errors} error(s), {result.wall_s:.1f} s")
            click.echo(f"table: {result.files[0]} ({len(result.table)} rows); "
                       f"per-run outputs: {result.out_dir / 'runs'}/")
            if plot_path is not None:
                click.echo(f"plot: {plot_path}")
        failed = int((result.table["status"] != "ok").sum()) if not result.table.empty else 0
        if failed:
            click.echo(f"mrc-lab: {failed} row(s) errored; see the error column of "
                       f"{result.files[0]} and error.txt in each run's folder", err=True)
            return EXIT_INTERNAL
        return 0

    guarded(go)
