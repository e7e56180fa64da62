"""The ``mrc-lab`` command. Each subcommand lives next to the feature it drives."""

from __future__ import annotations

import click

from mrc import __version__, _build


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mrc-lab",
                      message=f"%(prog)s %(version)s, {_build.describe()}")
def main() -> None:
    """Emulate MRC multipath transport and single-path RoCE RC on a multi-plane SRv6 fabric."""


def _register() -> None:
    from mrc.bench import bench_command
    from mrc.labs.cli.fleet import fleet
    from mrc.labs.cli.labs import labs
    from mrc.labs.cli.run import run
    from mrc.labs.cli.sweep import sweep
    from topology.cli import fabric

    for command in (fabric, labs, run, sweep, fleet, bench_command):
        main.add_command(command)


_register()


def entry() -> None:
    """The console script: run the command, then exit without freeing the simulation."""
    try:
        main(prog_name="mrc-lab")
    finally:
        from mrc.sim.collector import spare_exit_collection

        spare_exit_collection()


if __name__ == "__main__":  # python -m mrc.cli
    entry()
