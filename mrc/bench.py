"""Simulator benchmark suite (``mrc-lab bench``, ``benchmarks/bench_suite.py``).

Scenarios (issue 6):

``perm128``
    Permutation traffic, 128 hosts on one plane (16 T0 x 8 hosts, 8 T1), 100 Gb/s, 1 us
    links, 4096 B MTU, every host writes 2,000,000 bytes to its image under a seeded
    derangement at t=0, MRC.
``perm1024``
    The same with 1024 hosts (32 T0 x 32 hosts, 32 T1).
``planes8``
    256 hosts x 8 planes (16 T0 x 16 hosts, 16 T1 per plane), permutation, 2 MB per
    flow, MRC and RC.
``rc8x512``, ``rc8x1024``
    RC as deployed (lossless, DCQCN, defaults) on 512 / 1024 hosts x 8 planes (32 T0 x 16
    hosts / 32 T0 x 32 hosts, 16 / 32 T1 per plane), permutation, 2 MB per flow: the scale at
    which the ECN ACK stall of issue 15 left flows waiting for the 4.3 s local ACK timeout.
    Reports flows completed, FCTs, aggregate goodput and PFC/DCQCN counters.
``perm1024x8``
    1024 hosts x 8 planes (32 T0 x 32 hosts, 32 T1 per plane), permutation, 2 MB per flow,
    MRC and RC (not in the default set: minutes in pure Python).
``labs``
    Every bundled lab, each transport on its own (``run_lab`` wall time, summary included).

Every case reports wall and CPU seconds of the event loop (``setup_s`` is building the
fabric and opening the connections), simulated microseconds, delivered DATA packets
(unique packets placed in receivers' memory), events processed, wall and CPU microseconds
per delivered packet, events per wall second, peak RSS and, for flow workloads, the flow
completion times against the ideal ``size / NIC rate + base RTT``.

Each case runs in a fresh child interpreter (``python -m mrc.bench --child CASE``), so peak
RSS is that case's own and no case warms the allocator for the next; ``repeat`` runs a case
that many times and keeps the fastest (the machine is shared: best-of is the stable number).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mrc import _build
from mrc.units import PS_PER_US
from topology.spec import FabricSpec

if TYPE_CHECKING:
    from mrc.stack.stack import SimStack

#: Bytes each permutation flow writes.
FLOW_BYTES = 2_000_000
#: Simulated-time bound of a permutation run (it stops when the last flow completes).
DEADLINE_US = 100_000.0
SCENARIOS = ("perm128", "perm1024", "planes8", "rc8x512", "rc8x1024", "perm1024x8", "labs")
#: What ``mrc-lab bench`` runs without ``--scenario``.
DEFAULT_SCENARIOS = ("perm128", "perm1024", "planes8", "rc8x512", "rc8x1024", "labs")


def perm_spec(hosts: int, hosts_per_t0: int, t1: int, planes: int = 1,
              name: str | None = None) -> FabricSpec:
    """The benchmark fabric: 100 Gb/s, 1 us links, 4096 B MTU, other knobs at defaults."""
    return FabricSpec(planes=planes, hosts=hosts, hosts_per_t0=hosts_per_t0,
                      t1_per_plane=t1, link_gbps=100.0, link_delay_ns=1000.0,
                      mtu_bytes=4096, name=name or f"bench-{hosts}x{planes}")


#: Fabric of each permutation scenario.
SPECS: dict[str, FabricSpec] = {
    "perm128": perm_spec(128, 8, 8, name="perm128"),
    "perm1024": perm_spec(1024, 32, 32, name="perm1024"),
    "planes8": perm_spec(256, 16, 16, planes=8, name="planes8"),
    "rc8x512": perm_spec(512, 16, 16, planes=8, name="rc8x512"),
    "rc8x1024": perm_spec(1024, 32, 32, planes=8, name="rc8x1024"),
    "perm1024x8": perm_spec(1024, 32, 32, planes=8, name="perm1024x8"),
}


# ====================================================================== results
@dataclass
class CaseResult:
    """One timed run of one case (one transport of one scenario)."""

    case: str
    kind: str
    hosts: int
    planes: int
    setup_s: float
    wall_s: float
    cpu_s: float
    sim_us: float
    packets: int
    events: int
    peak_rss_mb: float
    us_per_packet: float = 0.0
    cpu_us_per_packet: float = 0.0
    events_per_s: float = 0.0
    events_per_cpu_s: float = 0.0
    events_per_packet: float = 0.0
    flows: int = 0
    flows_ok: int = 0
    fct_p50_us: float | None = None
    fct_p99_us: float | None = None
    fct_max_us: float | None = None
    ideal_us: float | None = None
    p50_vs_ideal: float | None = None
    repeats: int = 1
    wall_all_s: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = max(self.packets, 1)
        self.us_per_packet = self.wall_s * 1e6 / n
        self.cpu_us_per_packet = self.cpu_s * 1e6 / n
        self.events_per_s = self.events / self.wall_s if self.wall_s > 0 else 0.0
        self.events_per_cpu_s = self.events / self.cpu_s if self.cpu_s > 0 else 0.0
        self.events_per_packet = self.events / n
        if not self.wall_all_s:
            self.wall_all_s = [self.wall_s]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports kB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


# ====================================================================== permutation
def open_permutation(spec: FabricSpec, kind: str, size: int = FLOW_BYTES, seed: int = 1,
                     completion: Callable[[int], Callable[[int, bool], None]] | None = None,
                     every: int = 1) -> SimStack:
    """The permutation's fabric and connections: every host (``every``: every n-th host,
    the others idle) posts a write of ``size`` bytes to its image under a seeded
    derangement of the writing hosts at t=0 (``completion(src)``, when given, is the
    callback of host ``src``'s write). Built with the cycle collector paused (``collector.py``
    says why); nothing has run yet."""
    from mrc.labs.run.workloads import derangement
    from mrc.sim.collector import collection_paused
    from mrc.stack.stack import SimStack

    writers = range(0, spec.hosts, every)
    with collection_paused(building=True):
        stack = SimStack(spec, seed=seed, bin_ps=10 * PS_PER_US, transport_name=kind)
        peers = derangement(list(writers), seed)
        conns = [(src, stack.open(kind, src, peers[src], {})) for src in writers]
        for src, conn in conns:
            conn.write(0, size, completion(src) if completion else _ignore_completion)
    return stack


def _ignore_completion(now: int, good: bool) -> None:
    pass


def run_permutation(case: str, spec: FabricSpec, kind: str, size: int = FLOW_BYTES,
                    seed: int = 1, deadline_us: float = DEADLINE_US,
                    every: int = 1) -> CaseResult:
    """Every host (``every``: every n-th host) writes ``size`` bytes to its image under a
    seeded derangement at t=0; the run stops when the last write completes (or at
    ``deadline_us``)."""
    # imported before the clock starts: setup_s is the building, not the imports
    import mrc.labs.run.workloads  # noqa: F401
    import mrc.stack.stack  # noqa: F401

    wall0 = time.perf_counter()
    done: list[int | None] = [None] * spec.hosts
    ok = [False] * spec.hosts
    flows = len(range(0, spec.hosts, every))
    remaining = [flows]

    def completion(src: int) -> Callable[[int, bool], None]:
        def complete(now: int, good: bool) -> None:
            done[src] = now
            ok[src] = good
            remaining[0] -= 1
            if not remaining[0]:
                sim.stop()
        return complete

    stack = open_permutation(spec, kind, size, seed, completion, every)
    sim = stack.net.sim  # the engine itself (events_processed)
    wall1 = time.perf_counter()
    cpu1 = time.process_time()
    sim.run(int(deadline_us * PS_PER_US))
    cpu_s = time.process_time() - cpu1
    wall_s = time.perf_counter() - wall1
    fcts = [t / PS_PER_US for t in done if t is not None]
    ideal = size * 8 / (spec.nic_gbps * 1e3) + spec.base_rtt_ps() / PS_PER_US
    p50 = percentile(fcts, 50) if fcts else None
    totals = stack.totals()
    last = max(fcts) if fcts and len(fcts) == flows else sim.now / PS_PER_US
    return CaseResult(
        case=case, kind=kind, hosts=spec.hosts, planes=spec.planes,
        setup_s=wall1 - wall0, wall_s=wall_s, cpu_s=cpu_s, sim_us=sim.now / PS_PER_US,
        packets=stack.recorder.packets_delivered, events=sim.events_processed,
        peak_rss_mb=peak_rss_mb(), flows=flows, flows_ok=sum(ok),
        fct_p50_us=p50, fct_p99_us=percentile(fcts, 99) if fcts else None,
        fct_max_us=max(fcts) if fcts else None, ideal_us=ideal,
        p50_vs_ideal=None if p50 is None else p50 / ideal,
        extra={"retransmissions": totals["retransmitted_packets"],
               "trims": stack.net.totals()["trims"],
               # all flows' bytes over the time to the last completion (or the deadline)
               "goodput_gbps": round(stack.recorder.bytes_delivered * 8 / (last * 1e3), 1),
               "drops": totals["dropped_packets"], "cnps": totals.get("cnps_sent", 0),
               "pause_frames": totals.get("pause_frames_sent", 0)})


# ====================================================================== labs
def run_bundled_lab(name: str, kind: str) -> CaseResult:
    """One bundled lab with one of its transports, timed end to end through ``run_lab``
    (validation, simulation, tables and summary; no files written)."""
    from mrc.labs.run.runner import run_lab, sim_stack_factory

    stacks: list[Any] = []

    def factory(spec: FabricSpec, seed: int, bin_ps: int, transport_name: str) -> Any:
        stack = sim_stack_factory(spec, seed, bin_ps, transport_name)
        stacks.append(stack)
        return stack

    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    result = run_lab(name, transports=kind, progress=False, stack_factory=factory)
    cpu_s = time.process_time() - cpu0
    wall_s = time.perf_counter() - wall0
    stack = stacks[0]
    spec = stack.spec
    entry = result.summary["transports"][kind]
    return CaseResult(
        case=f"labs.{name}.{kind}", kind=kind, hosts=spec.hosts, planes=spec.planes,
        setup_s=0.0, wall_s=wall_s, cpu_s=cpu_s, sim_us=stack.sim.now / PS_PER_US,
        packets=stack.recorder.packets_delivered, events=stack.sim.events_processed,
        peak_rss_mb=peak_rss_mb(),
        extra={"outcome": entry["outcome"], "goodput_before_gbps":
               entry["goodput_gbps"].get("before")})


# ====================================================================== cases
def lab_names() -> list[str]:
    from mrc.labs.schema.files import bundled_names

    return bundled_names()


def cases(scenario: str) -> list[str]:
    """The atomic cases of a scenario (``labs`` has one per bundled lab and transport;
    ``lab:NAME`` runs one lab with both transports)."""
    if scenario in ("perm128", "perm1024"):
        return [scenario]
    if scenario in ("planes8", "perm1024x8"):
        return [f"{scenario}.mrc", f"{scenario}.rc"]
    if scenario in ("rc8x512", "rc8x1024"):
        return [scenario]
    if scenario == "labs":
        return [f"labs.{name}.{kind}" for name in lab_names() for kind in ("mrc", "rc")]
    if scenario.startswith("lab:"):
        name = scenario[4:]
        if name not in lab_names():
            raise ValueError(f"unknown bundled lab {name!r}; known: {', '.join(lab_names())}")
        return [f"labs.{name}.{kind}" for kind in ("mrc", "rc")]
    raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}, lab:NAME")


def run_case(case: str) -> CaseResult:
    """Run one case in this process."""
    if case in ("perm128", "perm1024"):
        return run_permutation(case, SPECS[case], "mrc", FLOW_BYTES)
    if case.startswith(("planes8.", "perm1024x8.")):
        scenario, kind = case.split(".", 1)
        return run_permutation(case, SPECS[scenario], kind, FLOW_BYTES)
    if case in ("rc8x512", "rc8x1024"):
        return run_permutation(case, SPECS[case], "rc", FLOW_BYTES)
    if case.startswith("labs."):
        _, rest = case.split(".", 1)
        name, kind = rest.rsplit(".", 1)
        return run_bundled_lab(name, kind)
    raise ValueError(f"unknown case {case!r}")


def run_isolated(case: str) -> CaseResult:
    """Run one case in a fresh interpreter (own peak RSS, cold allocator)."""
    # the child imports the same mrc as this process, wherever it was started from
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # -P: the working directory does not shadow that mrc (a checkout's pure sources)
    proc = subprocess.run([sys.executable, "-P", "-m", "mrc.bench", "--child", case],
                          capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark case {case} failed:\n{proc.stderr}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return CaseResult(**{k: v for k, v in data.items() if k in _INIT_FIELDS})


_INIT_FIELDS = ("case", "kind", "hosts", "planes", "setup_s", "wall_s", "cpu_s", "sim_us",
                "packets", "events", "peak_rss_mb", "flows", "flows_ok", "fct_p50_us",
                "fct_p99_us", "fct_max_us", "ideal_us", "p50_vs_ideal", "extra")


def best_of(case: str, repeat: int, isolated: bool = True) -> CaseResult:
    """The fastest of ``repeat`` runs; peak RSS is the largest seen."""
    runs = [run_isolated(case) if isolated else run_case(case) for _ in range(max(1, repeat))]
    best = min(runs, key=lambda r: r.wall_s)
    best.repeats = len(runs)
    best.wall_all_s = [round(r.wall_s, 4) for r in runs]
    best.peak_rss_mb = max(r.peak_rss_mb for r in runs)
    return best


def run_suite(scenarios: Iterable[str] | None = None, repeat: int = 1, isolated: bool = True,
              progress: Callable[[CaseResult], None] | None = None) -> dict[str, Any]:
    """Every case of ``scenarios`` (default: all) as one JSON-ready document."""
    results = []
    for scenario in scenarios or DEFAULT_SCENARIOS:
        for case in cases(scenario):
            r = best_of(case, repeat, isolated)
            results.append(r)
            if progress is not None:
                progress(r)
    return {
        "machine": {"python": platform.python_version(), "implementation":
                    platform.python_implementation(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "compiled": compiled_modules(),
                    "build": _build.describe()},
        "repeat": repeat,
        "results": [asdict(r) for r in results],
    }


def compiled_modules() -> list[str]:
    """The modules the cases run compiled (children import the same build as this process:
    same environment, same install); empty when everything is pure Python."""
    return _build.compiled_modules() if _build.BUILD == "compiled" else []


def targets(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The development targets (issue 17's compiled core), checked against whatever cases
    were run. Not part of ``mrc-lab bench``'s output (a user measures; targets are the
    developers' business): ``python -m mrc.bench --targets`` prints them."""
    by = {r.case: r for r in results}
    out: dict[str, Any] = {}
    p128 = by.get("perm128")
    if p128 is not None:
        out["perm128_us_per_packet<=8"] = p128.us_per_packet <= 8.0
        if p128.p50_vs_ideal is not None:
            out["perm128_p50_within_15pct"] = p128.p50_vs_ideal <= 1.15
    p1024 = by.get("perm1024")
    if p1024 is not None:
        out["perm1024_us_per_packet<=19"] = p1024.us_per_packet <= 19.0
        out["perm1024_peak_rss<=400MB"] = p1024.peak_rss_mb <= 400
        if p128 is not None:
            ratio = p1024.cpu_us_per_packet / p128.cpu_us_per_packet
            out["perm1024/perm128_cpu_cost_ratio"] = round(ratio, 3)
            out["perm1024_cost<=1.5x_perm128"] = ratio <= 1.5
    big = [r for r in results if r.case.startswith("perm1024x8.")]
    if big:
        out["perm1024x8_max_wall_s"] = round(max(r.wall_s for r in big), 2)
        out["perm1024x8_each<30s"] = all(r.wall_s < 30 for r in big)
    labs = [r for r in results if r.case.startswith("labs.")]
    if labs:
        out["labs_max_wall_s"] = round(max(r.wall_s for r in labs), 2)
        out["every_lab<5s"] = all(r.wall_s < 5 for r in labs)
    return out


# ====================================================================== output
_COLUMNS = (("case", "{:<34}"), ("setup_s", "{:>7.2f}"), ("wall_s", "{:>8.2f}"),
            ("cpu_s", "{:>8.2f}"),
            ("sim_us", "{:>9.0f}"), ("packets", "{:>9d}"), ("events", "{:>10d}"),
            ("us_per_packet", "{:>8.2f}"), ("cpu_us_per_packet", "{:>8.2f}"),
            ("events_per_s", "{:>10.0f}"), ("peak_rss_mb", "{:>7.0f}"))
_HEADS = ("case", "setup_s", "wall_s", "cpu_s", "sim_us", "packets", "events", "us/pkt",
          "cpu/pkt", "events/s", "rss_MB")


def header() -> str:
    widths = [len(fmt.format(0 if name not in ("case",) else "")) for name, fmt in _COLUMNS]
    return " ".join(h.rjust(w) if i else h.ljust(w)
                    for i, (h, w) in enumerate(zip(_HEADS, widths, strict=True)))


def format_row(r: CaseResult) -> str:
    """One line of the human-readable table (plus FCTs for flow workloads)."""
    line = " ".join(fmt.format(getattr(r, name)) for name, fmt in _COLUMNS)
    if r.fct_p50_us is not None:
        line += (f"\n{'':<4}FCT p50 {r.fct_p50_us:.1f} / p99 {r.fct_p99_us:.1f} / max "
                 f"{r.fct_max_us:.1f} us vs ideal {r.ideal_us:.1f} us (p50 x"
                 f"{r.p50_vs_ideal:.3f}); flows ok {r.flows_ok}/{r.flows}")
    if "outcome" in r.extra:
        line += f"  [{r.extra['outcome']}]"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_suite", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append",
                        help=f"one of {', '.join(SCENARIOS)} or lab:NAME (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs per case")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--output", metavar="FILE", help="also write the JSON document here")
    parser.add_argument("--in-process", action="store_true",
                        help="run cases in this process (profiling; RSS is then cumulative)")
    parser.add_argument("--targets", action="store_true",
                        help="developers: also check the cases against issue 6's targets")
    parser.add_argument("--child", metavar="CASE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asdict(run_case(args.child))))
        from mrc.sim.collector import spare_exit_collection

        spare_exit_collection()  # the child exits next; its wall time is the whole process's
        return 0
    return report(args.scenario, repeat=args.repeat, as_json=args.json, output=args.output,
                  isolated=not args.in_process, check_targets=args.targets)


def report(scenarios: Sequence[str] | None, *, repeat: int = 1, as_json: bool = False,
           output: str | None = None, isolated: bool = True,
           echo: Callable[[str], None] = print, check_targets: bool = False) -> int:
    """Run and print (table, or JSON with ``as_json``); the CLI's body. ``check_targets``
    (developers, ``python -m mrc.bench --targets``) adds the development targets."""
    for s in scenarios or ():
        cases(s)  # unknown names fail before anything runs
    progress = None
    if not as_json:
        echo(f"build: {_build.describe()}")
        echo(header())
        progress = lambda r: echo(format_row(r))  # noqa: E731
    doc = run_suite(scenarios, repeat=repeat, isolated=isolated, progress=progress)
    if check_targets:
        doc["targets"] = targets([CaseResult(**r) for r in doc["results"]])
    text = json.dumps(doc, indent=2)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if as_json:
        echo(text)
    elif check_targets:
        for key, value in doc["targets"].items():
            echo(f"target {key}: {value}")
    return 0


@click.command("bench")
@click.option("--scenario", "scenarios", multiple=True, metavar="NAME",
              help=f"Run only this scenario ({', '.join(SCENARIOS)}, or lab:NAME); repeatable.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per case; the fastest is reported (the machine may be shared).")
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON document.")
@click.option("--output", metavar="FILE", help="Also write the JSON document to FILE.")
@click.option("--in-process", is_flag=True,
              help="Run cases in this process (for profilers; peak RSS is then cumulative).")
def bench_command(scenarios: tuple[str, ...], repeat: int, as_json: bool, output: str | None,
                  in_process: bool) -> None:
    """Time the simulator: permutation traffic at 128 and 1024 hosts, 8 planes with MRC and
    RC, and every bundled lab with both transports (see mrc/bench.py). The output says which
    build ran (compiled core or pure Python)."""
    try:
        for name in scenarios:
            cases(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--scenario") from None
    sys.exit(report(list(scenarios) or None, repeat=repeat, as_json=as_json, output=output,
                    isolated=not in_process, echo=click.echo))


if __name__ == "__main__":
    sys.exit(main())
