"""``mrc-lab labs``: the bundled labs, one lab file to copy, or the lab-file reference."""

from __future__ import annotations

import click

from mrc.labs.cli.exits import guarded
from mrc.labs.errors import LabError


@click.command("labs")
@click.argument("name", required=False)
@click.option("--names", "names_only", is_flag=True,
              help="Only the names, one per line (for shell loops).")
@click.option("--reference", is_flag=True,
              help="Print the lab-file reference (every section, key, type, unit, default "
                   "and bound, the fault kinds and their targets), generated from the schema.")
def labs(name: str | None, names_only: bool, reference: bool = False) -> None:
    """List the bundled labs, print the lab file NAME (to copy and edit), or print the
    lab-file reference."""
    def go() -> int:
        from mrc.labs.schema.files import (
            bundled_names,
            bundled_sweep_names,
            find_bundled,
            read_lab_text,
        )
        from mrc.labs.schema.lab_file import load_lab

        if reference:
            if name or names_only:
                raise LabError("--reference takes no lab name and no --names", "--reference")
            from mrc.labs.schema.reference import reference as text

            click.echo(text(), nl=False)
            return 0
        if names_only:
            click.echo("\n".join(bundled_names()))
            return 0

        if name:
            path = find_bundled(name)
            if path is None:
                raise LabError(f"no bundled lab of that name (bundled: "
                               f"{', '.join(bundled_names() + bundled_sweep_names())})",
                               source=name)
            click.echo(read_lab_text(path), nl=False)
            return 0
        rows = []
        for lab_name in bundled_names():
            path = find_bundled(lab_name)
            assert path is not None
            rows.append((lab_name, load_lab(path).description))
        width = max((len(n) for n, _ in rows), default=0)
        for lab_name, description in rows:
            click.echo(f"{lab_name:<{width}}  {description}")
        click.echo("\nrun one with: mrc-lab run NAME   (print its file: mrc-lab labs NAME)")
        sweeps = bundled_sweep_names()
        if sweeps:
            click.echo(f"bundled sweeps (mrc-lab sweep NAME): {', '.join(sweeps)}")
        return 0

    guarded(go)
