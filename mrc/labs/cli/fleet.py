"""``mrc-lab fleet``: job interruptions and training throughput under fleet failure rates.

Exit status as for ``mrc-lab run``: 0 done, 2 bad input (one line: file, key, problem), 1 an
internal error.
"""

from __future__ import annotations

from pathlib import Path

import click

from mrc.labs.cli.exits import DEFAULT_OUT_ROOT, guarded, parse_number


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

    Writes fleet.csv, trials.csv, impacts.csv, summary.json, fleet.json (the inputs as
    understood) and fleet.png into --out.
    """
    def go() -> int:
        from mrc.labs.fleet.run import run_fleet
        from mrc.labs.fleet.schema import resolve_fleet_path, validate
        from mrc.labs.output.folder import OutputFolder
        from mrc.labs.output.manifest import MANIFEST
        from mrc.labs.report.table import files_line
        from mrc.labs.schema.files import parse_toml, read_lab_text
        from mrc.labs.schema.keys import parse_assignment, set_keys

        path = resolve_fleet_path(fleet_file)
        raw = parse_toml(read_lab_text(path, kind="fleet file"), fleet_file)
        overrides = dict(parse_assignment(a) for a in assignments)
        n = parse_number(trials, int, "--trials")
        s = parse_number(seed, int, "--seed")
        if n is not None:
            overrides["run.trials"] = n
        if s is not None:
            overrides["run.seed"] = s
        if overrides:
            raw = set_keys(raw, overrides)
        spec = validate(raw, name=path.stem, source=fleet_file)
        # the folder before the run: a path that cannot hold results costs one line
        folder = OutputFolder(Path(out) if out else DEFAULT_OUT_ROOT / spec.name).open()
        try:
            result = run_fleet(spec)
            files = result.write(folder)
        finally:
            folder.close()
        if not quiet:
            click.echo(result.text())
            click.echo("\n" + files_line(folder.path, [*files, folder.path / MANIFEST]))
        return 0

    guarded(go)
