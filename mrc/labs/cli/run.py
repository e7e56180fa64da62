"""``mrc-lab run``: one lab, every transport, in the packet simulator (or the live or kernel
runtime) or the flow-level model; exit status as :mod:`mrc.labs.cli.exits` says.

The output folder is checked, locked and prepared before anything else
(:mod:`mrc.labs.output.folder`: a folder that is new, empty or made by mrc-lab; results
replace results as a whole), so a folder that cannot hold results costs one line, not a run.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import click

from mrc.labs.cli.exits import DEFAULT_OUT_ROOT, guarded, parse_number
from mrc.labs.errors import LabError

LOOPBACK = "127.0.0.1"


def default_out(name: str, runtime: str) -> Path:
    """``./mrc-lab-out/<lab>-<runtime>/``: a live run never lands on a simulated run's results."""
    return DEFAULT_OUT_ROOT / f"{name}-{runtime}"


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The command line of one ``mrc-lab run``, as given (numbers still text)."""

    lab: str
    out: str | None
    seed: str | None
    transports: str | None
    bin_us: str | None
    assignments: tuple[str, ...]
    quiet: bool
    runtime: str = "sim"
    dilation: str | None = None
    pcap: str | None = None
    pcap_point: str = "delivered"
    pcap_snaplen: str | None = None
    pcap_every: str | None = None
    pcap_kinds: str | None = None
    bind_host: str = LOOPBACK
    allow_non_loopback: bool = False
    pcap_on: str | None = None
    model: str = "packet"


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
    opts = RunOptions(lab, out, seed, transports, bin_us, assignments, quiet, runtime,
                      dilation, pcap, pcap_point, pcap_snaplen, pcap_every, pcap_kinds,
                      bind_host, allow_non_loopback, pcap_on, model)

    def go() -> int:
        from mrc.labs.output.folder import OutputFolder

        # the folder first: a path that cannot hold results costs one line, not a run
        folder = OutputFolder(out).open() if out else None
        try:
            return _run(opts, folder)
        finally:
            if folder is not None:
                folder.close()

    guarded(go)


def _run(opts: RunOptions, folder: Any) -> int:
    from mrc.labs.schema.keys import parse_assignment

    overrides = dict(parse_assignment(a) for a in opts.assignments)
    seed_n = parse_number(opts.seed, int, "--seed")
    bin_x = parse_number(opts.bin_us, float, "--bin-us")
    if opts.model == "flow":
        return _run_flow(opts, folder, overrides, seed_n, bin_x)
    return _run_packet(opts, folder, overrides, seed_n, bin_x)


def _runtime_options(opts: RunOptions) -> dict[str, Any] | None:
    """The ``live`` options of ``run_lab`` for the chosen runtime, after refusing the options
    that runtime does not take."""
    runtime, loopback = opts.runtime, opts.bind_host == LOOPBACK
    live: dict[str, Any] | None = None
    if runtime == "live":
        live = {"dilation": parse_number(opts.dilation, float, "--dilation"),
                "bind_host": opts.bind_host, "allow_non_loopback": opts.allow_non_loopback}
    elif runtime == "kernel":
        if opts.allow_non_loopback or not loopback:
            raise LabError("--bind and --allow-non-loopback need --runtime live",
                           "--runtime")
        live = {"scale": parse_number(opts.dilation, float, "--dilation"), "pcap": opts.pcap,
                "capture": opts.pcap_on.split(",") if opts.pcap_on else None}
    elif opts.dilation is not None or opts.allow_non_loopback or not loopback:
        raise LabError("--dilation, --bind and --allow-non-loopback need "
                       "--runtime live", "--runtime")
    if opts.pcap_on is not None and runtime != "kernel":
        raise LabError("--pcap-on needs --runtime kernel", "--runtime")
    return live


def _run_packet(opts: RunOptions, folder: Any, overrides: dict[str, Any], seed_n: int | None,
                bin_x: float | None) -> int:
    """The packet model, in the simulator or the live or kernel runtime."""
    from mrc.labs.output.folder import OutputFolder
    from mrc.labs.run.runner import prepare, run_lab

    runtime = opts.runtime
    live = _runtime_options(opts)
    capture = None if runtime == "kernel" else _capture_options(
        opts.pcap, opts.pcap_point, opts.pcap_snaplen, opts.pcap_every, opts.pcap_kinds)
    if opts.pcap is not None:
        _check_pcap(opts.pcap)
    prepared = prepare(opts.lab, seed=seed_n, bin_us=bin_x, overrides=overrides)
    if runtime == "live":  # what the live runtime cannot carry, before any folder
        from mrc.labs.run.pace import check_live_lab

        check_live_lab(prepared, opts.bind_host)
    if folder is None:
        folder = OutputFolder(default_out(prepared.name, runtime)).open()
    try:
        folder.refuse_inside(opts.pcap, "--pcap")
        # a bar only makes sense on a terminal; piped output gets just the results
        show_bar = not opts.quiet and sys.stderr.isatty()
        result = run_lab(prepared, transports=opts.transports, progress=show_bar,
                         runtime=runtime, live=live, capture=capture)
        previous = folder.previous
        files = result.write(folder)
    finally:
        folder.close()
    pace = (result.summary.get(runtime) or {}).get("pace_warning")
    if pace:
        click.echo(f"mrc-lab: warning: {pace}", err=True)
    if not opts.quiet:
        _print_tables(result)
        _print_runtime(runtime, result.summary)
        _print_files(folder, files)
        if previous and previous.get("files"):
            click.echo(f"(replaced the earlier results: {previous.get('runtime', '?')} "
                       f"run of {previous.get('lab', '?')}, seed {previous.get('seed', '?')})")
    return 0


def _run_flow(opts: RunOptions, folder: Any, overrides: dict[str, Any], seed_n: int | None,
              bin_x: float | None) -> int:
    """The flow-level model: it takes none of the packet runtimes' options."""
    from mrc.labs.output.folder import OutputFolder
    from mrc.labs.run.flow import prepare_flow, run_flow_lab

    packet_only = {"--runtime": opts.runtime != "sim", "--dilation": opts.dilation is not None,
                   "--pcap": opts.pcap is not None, "--pcap-on": opts.pcap_on is not None,
                   "--bind": opts.bind_host != LOOPBACK,
                   "--allow-non-loopback": opts.allow_non_loopback}
    for option, given in packet_only.items():
        if given:
            raise LabError("the flow model computes rates, not packets: it takes no "
                           f"{option}", "--model")
    prepared = prepare_flow(opts.lab, seed=seed_n, bin_us=bin_x, overrides=overrides)
    if folder is None:
        folder = OutputFolder(default_out(prepared.name, "flow")).open()
    try:
        result = run_flow_lab(prepared, transports=opts.transports)
        files = result.write(folder)
    finally:
        folder.close()
    if not opts.quiet:
        _print_tables(result)
        click.echo("flow-level model: steady-state rates (summary.json: flow)")
        _print_files(folder, files)
    return 0


def _print_tables(result: Any) -> None:
    click.echo(result.table())
    text = result.collective_text()
    if text:
        click.echo("")
        click.echo(text)


def _print_runtime(runtime: str, summary: dict[str, Any]) -> None:
    """What the times of a live or kernel run mean (nothing for a simulated run)."""
    if runtime == "live":
        info = summary.get("live", {})
        click.echo(f"live: modelled time x{info.get('dilation'):g} "
                   f"({info.get('link_gbps_model'):g} Gb/s links ran at "
                   f"{info.get('link_gbps_wall'):g} Gb/s of wall clock); times above "
                   "are modelled")
    if runtime == "kernel":
        info = summary.get("kernel", {})
        click.echo(f"kernel: modelled time x{info.get('scale'):g} "
                   f"({info.get('link_gbps_model'):g} Gb/s links ran at "
                   f"{info.get('link_mbps_wall'):g} Mb/s through Linux seg6local "
                   "switches); not modelled: trimming, ECN, propagation delay "
                   "(summary.json: kernel.limits)")


def _print_files(folder: Any, files: list[Path]) -> None:
    from mrc.labs.output.manifest import MANIFEST
    from mrc.labs.report.table import files_line

    click.echo("\n" + files_line(folder.path, [*files, folder.path / MANIFEST]))


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
    n_snap = parse_number(snaplen, int, "--pcap-snaplen")
    n_every = parse_number(every, int, "--pcap-every")
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
