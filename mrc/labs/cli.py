"""``mrc-lab run`` and ``mrc-lab labs``.

Exit status: 0 when the run completed (a transport's job failing is a result), 2 for bad
input (one line on stderr naming the file, the key and the problem, no traceback), 1 for an
internal error (our bug: the traceback is printed, then one summary line).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mrc.labs.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, LabError

DEFAULT_OUT_ROOT = Path("mrc-lab-out")


def _guarded(fn: Callable[[], int | None]) -> None:
    """Map outcomes to exit codes: LabError -> 2 (one line), other exceptions -> 1."""
    try:
        code = fn() or 0
    except LabError as exc:
        click.echo(f"mrc-lab: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("mrc-lab: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        # the reader went away (`mrc-lab labs | head`): not an error; silence the final flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 (the point is to catch everything else)
        traceback.print_exc(file=sys.stderr)
        text = " ".join(str(exc).split())
        click.echo(f"mrc-lab: internal error (a bug, please report it with the traceback "
                   f"above): {type(exc).__name__}: {text}", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(code)


def _parse_number(text: str | None, kind: type, option: str) -> Any:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        word = "an integer" if kind is int else "a number"
        raise LabError(f"expected {word}, got {text!r}", option) from None


@click.command("run")
@click.argument("lab", metavar="LAB")
@click.option("--out", "out", metavar="DIR",
              help="Output folder (default: ./mrc-lab-out/<lab name>/).")
@click.option("--seed", metavar="N", help="Override [run] seed.")
@click.option("--transport", "transports", metavar="NAMES",
              help="Comma-separated transports to run (default: every [transport.*]).")
@click.option("--bin-us", "bin_us", metavar="X", help="Override [run] bin_us.")
@click.option("--set", "assignments", metavar="KEY=VALUE", multiple=True,
              help="Override any lab key by dotted path, e.g. transport.mrc.ev_count=64.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no table.")
@click.option("--runtime", type=click.Choice(["sim", "live"]), default="sim", show_default=True,
              help="sim: the packet simulator; live: real UDP datagrams through the "
                   "user-space fabric, in wall-clock time slowed by --dilation.")
@click.option("--dilation", metavar="X",
              help="Live: modelled time runs X times slower than the wall clock (rates / X, "
                   "times x X); default: chosen from the workload.")
@click.option("--pcap", "pcap", metavar="FILE",
              help="Live: capture what crosses the fabric (FILE.<transport>.pcap when several "
                   "transports run).")
@click.option("--bind", "bind_host", metavar="ADDR", default="127.0.0.1", show_default=True,
              help="Live: address the fabric and hosts bind.")
@click.option("--allow-non-loopback", is_flag=True,
              help="Live: allow --bind to be an address other than loopback.")
@click.option("--model", type=click.Choice(["packet", "flow"]), default="packet",
              show_default=True,
              help="packet: every packet simulated (pod-sized fabrics); flow: steady-state "
                   "rates by max-min fairness, any fabric up to Fairwater's 131,072 NICs, "
                   "same outputs marked flow-level.")
def run(lab: str, out: str | None, seed: str | None, transports: str | None,
        bin_us: str | None, assignments: tuple[str, ...], quiet: bool, runtime: str = "sim",
        dilation: str | None = None, pcap: str | None = None, bind_host: str = "127.0.0.1",
        allow_non_loopback: bool = False, model: str = "packet") -> None:
    """Run LAB (a .toml path or a bundled lab name) for every transport and compare them.

    Writes timeseries.csv, events.csv, summary.json, bandwidth.png (and collective.csv for
    collectives) into --out, and prints a comparison table. With --model flow the same files
    come from the flow-level model (steady-state rates), at any fabric size.
    """
    def go() -> int:
        from mrc.labs.runner import prepare, run_lab
        from mrc.labs.schema import parse_assignment

        overrides = dict(parse_assignment(a) for a in assignments)
        seed_n = _parse_number(seed, int, "--seed")
        bin_x = _parse_number(bin_us, float, "--bin-us")
        if model == "flow" and runtime != "sim":
            raise LabError("--model flow computes rates; it has no --runtime live", "--model")
        prepared = prepare(lab, seed=seed_n, bin_us=bin_x, overrides=overrides,
                           **({"max_nic_ports": None} if model == "flow" else {}))
        out_dir = Path(out) if out else DEFAULT_OUT_ROOT / prepared.name
        if out_dir.exists() and not out_dir.is_dir():
            raise LabError("exists and is not a directory", "--out", str(out_dir))
        # a bar only makes sense on a terminal; piped output gets just the results
        show_bar = not quiet and sys.stderr.isatty()
        live: dict[str, Any] | None = None
        if runtime == "live":
            live = {"dilation": _parse_number(dilation, float, "--dilation"), "pcap": pcap,
                    "bind_host": bind_host, "allow_non_loopback": allow_non_loopback}
        elif dilation is not None or pcap is not None or allow_non_loopback or \
                bind_host != "127.0.0.1":
            raise LabError("--dilation, --pcap, --bind and --allow-non-loopback need "
                           "--runtime live", "--runtime")
        result: Any
        if model == "flow":
            from mrc.labs.flowrun import run_flow_lab

            result = run_flow_lab(prepared, transports=transports)
        else:
            result = run_lab(prepared, transports=transports, progress=show_bar,
                             runtime=runtime, live=live)
        result.write(out_dir)
        if not quiet:
            click.echo(result.table())
            text = result.collective_text()
            if text:
                click.echo("")
                click.echo(text)
            if runtime == "live":
                info = result.summary.get("live", {})
                click.echo(f"live: modelled time x{info.get('dilation'):g} "
                           f"({info.get('link_gbps_model'):g} Gb/s links ran at "
                           f"{info.get('link_gbps_wall'):g} Gb/s of wall clock); times above "
                           "are modelled")
            click.echo(f"\nresults in {out_dir}/ (bandwidth.png, summary.json, "
                       "timeseries.csv, events.csv)")
        return 0

    _guarded(go)


@click.command("labs")
@click.argument("name", required=False)
@click.option("--names", "names_only", is_flag=True,
              help="Only the names, one per line (for shell loops).")
def labs(name: str | None, names_only: bool) -> None:
    """List the bundled labs, or print the lab file NAME (to copy and edit)."""
    def go() -> int:
        from mrc.labs.schema import (
            bundled_names,
            bundled_sweep_names,
            find_bundled,
            load_lab,
            read_lab_text,
        )

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

    _guarded(go)
