"""The ``mrc-lab`` command. Each subcommand lives next to the feature it drives."""

from __future__ import annotations

import click

from mrc import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mrc-lab")
def main() -> None:
    """Emulate MRC multipath transport and single-path RoCE RC on a multi-plane SRv6 fabric."""


def _register() -> None:
    from mrc.labs.cli import labs, run
    from topology.cli import fabric

    main.add_command(fabric)
    main.add_command(run)
    main.add_command(labs)
    main.add_command(__import__("mrc.labs.sweep_cli", fromlist=["sweep"]).sweep)
    main.add_command(__import__("mrc.bench", fromlist=["bench_command"]).bench_command)


_register()
