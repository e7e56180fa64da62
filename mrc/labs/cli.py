"""``mrc-lab run`` and ``mrc-lab labs``.

Exit status: 0 when the run completed (a transport's job failing is a result), 2 for bad
input (one line on stderr naming the file, the key and the problem, no traceback), 1 for an
internal error (our bug: the traceback is printed, then one summary line), 130 / 143 when
interrupted by SIGINT / SIGTERM (the previous results, if any, are left as they were).

The output folder is checked, locked and prepared before anything else (:mod:`mrc.labs.outdir`:
a folder that is new, empty or made by mrc-lab; results replace results as a whole), so a
folder that cannot hold results costs one line, not a run.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from mrc.labs.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, LabError

DEFAULT_OUT_ROOT = Path("mrc-lab-out")
EXIT_SIGINT = 128 + 2
EXIT_SIGTERM = 128 + 15


def default_out(name: str, runtime: str) -> Path:
    """``./mrc-lab-out/<lab>-<runtime>/``: a live run never lands on a simulated run's results."""
    return DEFAULT_OUT_ROOT / f"{name}-{runtime}"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so cleanup runs as for Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _guarded(fn: Callable[[], int | None]) -> None:
    """Map outcomes to exit codes: LabError -> 2 (one line), other exceptions -> 1."""
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread (tests): leave the default
        pass
    try:
        code = fn() or 0
    except LabError as exc:
        click.echo(f"mrc-lab: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except BrokenPipeError:
        # the reader went away (`mrc-lab labs | head`): not an error; silence the final flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 (the point is to catch everything else)
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            _interrupted(interrupt)
        traceback.print_exc(file=sys.stderr)
        text = " ".join(str(exc).split())
        click.echo(f"mrc-lab: internal error (a bug, please report it with the traceback "
                   f"above): {type(exc).__name__}: {text}", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(code)


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    click.echo("mrc-lab: interrupted; earlier results, if any, are as they were", err=True)
    sys.exit(EXIT_SIGTERM if isinstance(exc, _Terminated) else EXIT_SIGINT)


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) that caused ``exc``, if one did. A signal that lands while a C
    extension initialises its module (pandas, imported late, when the tables are written)
    comes out as an ImportError or SystemError whose cause or context is the interrupt: that
    is an interrupt, not an internal error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _capture_options(path: str | None, point: str, snaplen: str | None, every: str | None,
                     kinds: str | None) -> Any:
    """The run's capture from the --pcap options (None without --pcap)."""
    from mrc.pcap import CAPTURE_KINDS, DEFAULT_SNAPLEN, CaptureOptions

    if path is None:
        for option, given in (("--pcap-snaplen", snaplen), ("--pcap-every", every),
                              ("--pcap-kinds", kinds)):
            if given is not None:
                raise LabError("needs --pcap", option)
        return None
    n_snap = _parse_number(snaplen, int, "--pcap-snaplen")
    n_every = _parse_number(every, int, "--pcap-every")
    for option, value in (("--pcap-snaplen", n_snap), ("--pcap-every", n_every)):
        if value is not None and value < 1:
            raise LabError(f"must be at least 1, got {value}", option)
    chosen = None
    if kinds is not None:
        chosen = frozenset(k.strip() for k in kinds.split(",") if k.strip())
        unknown = sorted(chosen - set(CAPTURE_KINDS))
        if unknown or not chosen:
            raise LabError(f"unknown kinds {unknown}; known: {', '.join(CAPTURE_KINDS)}",
                           "--pcap-kinds")
    return CaptureOptions(path, point=point, snaplen=n_snap or DEFAULT_SNAPLEN,
                          every=n_every or 1, kinds=chosen)


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
              help="Output folder (default: ./mrc-lab-out/<lab name>-<runtime>/). It must be "
                   "new, empty, or made by mrc-lab (it holds mrc-lab-manifest.json); results "
                   "replace results as a whole, and files mrc-lab did not write are never "
                   "deleted.")
@click.option("--seed", metavar="N", help="Override [run] seed.")
@click.option("--transport", "transports", metavar="NAMES",
              help="Comma-separated transports to run (default: every [transport.*]).")
@click.option("--bin-us", "bin_us", metavar="X", help="Override [run] bin_us.")
@click.option("--set", "assignments", metavar="KEY=VALUE", multiple=True,
              help="Override any lab key by dotted path, e.g. transport.mrc.ev_count=64.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no table.")
@click.option("--runtime", type=click.Choice(["sim", "live", "kernel"]), default="sim",
              show_default=True,
              help="sim: the packet simulator; live: real UDP datagrams through the "
                   "user-space fabric, in wall-clock time slowed by --dilation; kernel: real "
                   "IPv6 packets through Linux seg6local switches in network namespaces "
                   "(needs root).")
@click.option("--dilation", metavar="X",
              help="Live and kernel: modelled time runs X times slower than the wall clock "
                   "(rates / X, times x X); default: chosen from the workload.")
@click.option("--pcap", "pcap", metavar="FILE",
              help="Capture packets to a pcapng file (FILE.<transport>.pcapng when several "
                   "transports run); sim or live; kernel: the kernel's own capture (pcap).")
@click.option("--pcap-on", "pcap_on", metavar="LINKS",
              help="Kernel: comma-separated links or NIC ports to capture on (default: the "
                   "workload hosts' links).")
@click.option("--pcap-point", type=click.Choice(["delivered", "sent", "every_hop"]),
              default="delivered", show_default=True,
              help="Where: each datagram once as delivered to its host, once as sent, or at "
                   "every link (each record names its port).")
@click.option("--pcap-snaplen", metavar="BYTES", help="Bytes kept per datagram [default: 256, "
              "every header].")
@click.option("--pcap-every", metavar="N", help="Keep one datagram in N [default: 1].")
@click.option("--pcap-kinds", metavar="LIST", help="Only these kinds: data, ack, nack, probe, "
              "probe_reply, trimmed (comma-separated).")
@click.option("--bind", "bind_host", metavar="ADDR", default="127.0.0.1", show_default=True,
              help="Live: address the fabric and hosts bind.")
@click.option("--allow-non-loopback", is_flag=True,
              help="Live: allow --bind to be an address other than loopback.")
@click.option("--model", type=click.Choice(["packet", "flow"]), default="packet",
              show_default=True,
              help="packet: every packet simulated (pod-sized fabrics); flow: steady-state "
                   "rates by max-min fairness, any fabric up to Fairwater's 131,072 NICs, "
                   "the same outputs marked flow-level (summary.json: runtime = flow).")
def run(lab: str, out: str | None, seed: str | None, transports: str | None,
        bin_us: str | None, assignments: tuple[str, ...], quiet: bool, runtime: str = "sim",
        dilation: str | None = None, pcap: str | None = None, pcap_point: str = "delivered",
        pcap_snaplen: str | None = None, pcap_every: str | None = None,
        pcap_kinds: str | None = None, bind_host: str = "127.0.0.1",
        allow_non_loopback: bool = False, pcap_on: str | None = None,
        model: str = "packet") -> None:
    """Run LAB (a .toml path or a bundled lab name) for every transport and compare them.

    Writes timeseries.csv, events.csv, summary.json, lab.json, bandwidth.png and
    mrc-lab-manifest.json (plus collective.csv, iterations.csv and busbw.png for collectives,
    flows.csv for flow workloads) into --out, and prints a comparison table. With --model
    flow the same files come from the flow-level model (steady-state rates), at any size.
    """
    def go() -> int:
        from mrc.labs.outdir import OutputFolder

        # the folder first: a path that cannot hold results costs one line, not a run
        folder = OutputFolder(out).open() if out else None
        try:
            return _run(folder)
        finally:
            if folder is not None:
                folder.close()

    def _run(folder: Any) -> int:
        from mrc.labs.keys import parse_assignment
        from mrc.labs.outdir import OutputFolder
        from mrc.labs.report import files_line
        from mrc.labs.runner import prepare, run_lab

        overrides = dict(parse_assignment(a) for a in assignments)
        seed_n = _parse_number(seed, int, "--seed")
        bin_x = _parse_number(bin_us, float, "--bin-us")
        if model == "flow":
            return _run_flow(folder, overrides, seed_n, bin_x)
        live: dict[str, Any] | None = None
        if runtime == "live":
            live = {"dilation": _parse_number(dilation, float, "--dilation"),
                    "bind_host": bind_host, "allow_non_loopback": allow_non_loopback}
        elif runtime == "kernel":
            if allow_non_loopback or bind_host != "127.0.0.1":
                raise LabError("--bind and --allow-non-loopback need --runtime live",
                               "--runtime")
            live = {"scale": _parse_number(dilation, float, "--dilation"), "pcap": pcap,
                    "capture": pcap_on.split(",") if pcap_on else None}
        elif dilation is not None or allow_non_loopback or bind_host != "127.0.0.1":
            raise LabError("--dilation, --bind and --allow-non-loopback need "
                           "--runtime live", "--runtime")
        if pcap_on is not None and runtime != "kernel":
            raise LabError("--pcap-on needs --runtime kernel", "--runtime")
        capture = None if runtime == "kernel" else _capture_options(
            pcap, pcap_point, pcap_snaplen, pcap_every, pcap_kinds)
        if pcap is not None:
            _check_pcap(pcap)
        prepared = prepare(lab, seed=seed_n, bin_us=bin_x, overrides=overrides)
        if runtime == "live":  # what the live runtime cannot carry, before any folder
            from mrc.labs.live_pace import check_live_lab

            check_live_lab(prepared, bind_host)
        if folder is None:
            folder = OutputFolder(default_out(prepared.name, runtime)).open()
        try:
            folder.refuse_inside(pcap, "--pcap")
            # a bar only makes sense on a terminal; piped output gets just the results
            show_bar = not quiet and sys.stderr.isatty()
            result = run_lab(prepared, transports=transports, progress=show_bar,
                             runtime=runtime, live=live, capture=capture)
            previous = folder.previous
            files = result.write(folder)
        finally:
            folder.close()
        pace = (result.summary.get(runtime) or {}).get("pace_warning")
        if pace:
            click.echo(f"mrc-lab: warning: {pace}", err=True)
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
            if runtime == "kernel":
                info = result.summary.get("kernel", {})
                click.echo(f"kernel: modelled time x{info.get('scale'):g} "
                           f"({info.get('link_gbps_model'):g} Gb/s links ran at "
                           f"{info.get('link_mbps_wall'):g} Mb/s through Linux seg6local "
                           "switches); not modelled: trimming, ECN, propagation delay "
                           "(summary.json: kernel.limits)")
            from mrc.labs.outdir import MANIFEST

            click.echo("\n" + files_line(folder.path, [*files, folder.path / MANIFEST]))
            if previous and previous.get("files"):
                click.echo(f"(replaced the earlier results: {previous.get('runtime', '?')} "
                           f"run of {previous.get('lab', '?')}, seed {previous.get('seed', '?')})")
        return 0

    def _run_flow(folder: Any, overrides: dict[str, Any], seed_n: int | None,
                  bin_x: float | None) -> int:
        from mrc.labs.flowrun import prepare_flow, run_flow_lab
        from mrc.labs.outdir import MANIFEST, OutputFolder
        from mrc.labs.report import files_line

        packet_only = {"--runtime": runtime != "sim", "--dilation": dilation is not None,
                       "--pcap": pcap is not None, "--pcap-on": pcap_on is not None,
                       "--bind": bind_host != "127.0.0.1",
                       "--allow-non-loopback": allow_non_loopback}
        for option, given in packet_only.items():
            if given:
                raise LabError("the flow model computes rates, not packets: it takes no "
                               f"{option}", "--model")
        prepared = prepare_flow(lab, seed=seed_n, bin_us=bin_x, overrides=overrides)
        if folder is None:
            folder = OutputFolder(default_out(prepared.name, "flow")).open()
        try:
            result = run_flow_lab(prepared, transports=transports)
            files = result.write(folder)
        finally:
            folder.close()
        if not quiet:
            click.echo(result.table())
            text = result.collective_text()
            if text:
                click.echo("")
                click.echo(text)
            click.echo("flow-level model: steady-state rates (summary.json: flow)")
            click.echo("\n" + files_line(folder.path, [*files, folder.path / MANIFEST]))
        return 0

    _guarded(go)


def _check_pcap(pcap: str) -> None:
    """``--pcap FILE`` must be writable before a live run starts (it is written as packets
    go; like tcpdump -w, an existing FILE is replaced)."""
    path = Path(pcap)
    if path.is_dir():
        raise LabError("is a folder, not a file", "--pcap", pcap)
    parent = path.parent if str(path.parent) else Path(".")
    probe = parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise LabError(f"{probe} is not a folder", "--pcap", pcap)
    if not os.access(probe, os.W_OK | os.X_OK) or (path.exists() and
                                                   not os.access(path, os.W_OK)):
        raise LabError("cannot write there", "--pcap", pcap)


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
        from mrc.labs.files import bundled_names, bundled_sweep_names, find_bundled, read_lab_text
        from mrc.labs.lab_file import load_lab

        if reference:
            if name or names_only:
                raise LabError("--reference takes no lab name and no --names", "--reference")
            from mrc.labs.reference import reference as text

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

    _guarded(go)
