"""``mrc-lab fleet``: job interruptions and training throughput under fleet failure rates.

Exit status as for ``mrc-lab run``: 0 done, 2 bad input (one line: file, key, problem), 1 an
internal error.
"""

from __future__ import annotations

from pathlib import Path

import click

from mrc.labs.cli import DEFAULT_OUT_ROOT, _guarded, _parse_number
from mrc.labs.errors import LabError


@click.command("fleet")
@click.argument("fleet_file", metavar="[FLEET.toml]", required=False, default="default")
@click.option("--out", "out", metavar="DIR",
              help="Output folder (default: ./mrc-lab-out/<fleet name>/).")
@click.option("--trials", metavar="N", help="Override [run] trials.")
@click.option("--seed", metavar="N", help="Override [run] seed.")
@click.option("--set", "assignments", metavar="KEY=VALUE", multiple=True,
              help="Override any fleet key by dotted path, e.g. rates.t1_reboot.per_year=0.1.")
@click.option("--quiet", "-q", is_flag=True, help="No table.")
def fleet(fleet_file: str, out: str | None, trials: str | None, seed: str | None,
          assignments: tuple[str, ...], quiet: bool) -> None:
    """Monte Carlo of job interruptions per day and effective training throughput against
    job size, MRC vs RC, at the failure rates of FLEET.toml (default: the bundled
    labs/fleet/default.toml; its comments say where every rate comes from).

    Writes fleet.csv, trials.csv, impacts.csv, summary.json and fleet.png into --out.
    """
    def go() -> int:
        from mrc.labs.fleet.run import run_fleet
        from mrc.labs.fleet.schema import resolve_fleet_path, validate
        from mrc.labs.schema import parse_assignment, parse_toml, read_lab_text, set_keys

        path = resolve_fleet_path(fleet_file)
        raw = parse_toml(read_lab_text(path, kind="fleet file"), fleet_file)
        overrides = dict(parse_assignment(a) for a in assignments)
        n = _parse_number(trials, int, "--trials")
        s = _parse_number(seed, int, "--seed")
        if n is not None:
            overrides["run.trials"] = n
        if s is not None:
            overrides["run.seed"] = s
        if overrides:
            raw = set_keys(raw, overrides)
        spec = validate(raw, name=path.stem, source=fleet_file)
        out_dir = Path(out) if out else DEFAULT_OUT_ROOT / spec.name
        if out_dir.exists() and not out_dir.is_dir():
            raise LabError("exists and is not a directory", "--out", str(out_dir))
        result = run_fleet(spec, out=out_dir)
        if not quiet:
            click.echo(result.text())
            click.echo(f"\nresults in {out_dir}/ (fleet.png, fleet.csv, trials.csv, "
                       "impacts.csv, summary.json)")
        return 0

    _guarded(go)
