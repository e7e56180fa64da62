"""Regenerate the committed reference outputs: every bundled lab, both transports.

    python results/regenerate.py            # all labs (about half a minute on 2 cores)
    python results/regenerate.py t1-reboot  # just some
    python results/regenerate.py --check    # regenerate in memory; exit 1 if any file differs
    python -P results/regenerate.py --check --installed  # the same with the installed mrc
                                            # (its compiled core) instead of this checkout's

Each lab keeps ``summary.json`` and ``bandwidth.png`` (plus ``collective.csv`` for the
collectives) under ``results/<lab>/``; ``results/README.md`` gets the headline table. Runs
are seeded, so every kept file is identical on every machine: the run's wall time, the one
machine-dependent field, and which build ran (compiled core or pure Python: the same
results) are left out of the reference ``summary.json``. ``--check`` is how a
change proves it moved no result (a refactoring must pass it).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

if "--installed" not in sys.argv:  # else the installed mrc (e.g. its compiled core)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc.labs.run.runner import run_lab
from mrc.labs.schema.files import bundled_names

HERE = Path(__file__).resolve().parent
KEEP = ("summary.json", "bandwidth.png", "collective.csv", "busbw.png")


def _fmt(value: object, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)  # type: ignore[arg-type]


def table(summaries: dict[str, dict]) -> str:
    lines = [
        "| lab | transport | outcome | goodput before | during | kept | min | detect (us) "
        "| settle (us) | recovery (us) | retransmitted | drops data / ctl / probe "
        "| EVs bad / back |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lab, summary in summaries.items():
        for name, t in summary["transports"].items():
            g = t["goodput_gbps"]
            outcome = t["outcome"]
            if t.get("failed_at_us") is not None:
                outcome += f" at {t['failed_at_us']:.0f} us"
            kept = "-" if t["retained_pct"] is None else f"{t['retained_pct']:.1f}%"
            recovery = {"recovered": _fmt(t["recovery_us"]), "no dip": "0 (no dip)",
                        "no fault": "-"}.get(t["recovery"], t["recovery"])
            d = t["dropped_packets"]
            lines.append(
                f"| [{lab}]({lab}/bandwidth.png) | {name} | {outcome} | {_fmt(g['before'])} "
                f"| {_fmt(g['during'])} | {kept} | {_fmt(g['min'])} | {_fmt(t['detect_us'])} "
                f"| {_fmt(t['settle_us'])} | {recovery} | {t['retransmitted_packets']} "
                f"| {d['data']} / {d['control']} / {d['probe']} "
                f"| {t['evs_marked_bad']} / {t['evs_reintegrated']} |")
    return "\n".join(lines)


def pfc_table(summaries: dict[str, dict]) -> str:
    """PFC and DCQCN per lab and transport (fabrics with PFC only): PAUSE frames sent, time
    ports spent paused (summed), CNPs, watchdog storms, lossless drops (must be 0)."""
    lines = [
        "| lab | transport | PAUSE frames | paused (us, all ports) | CNPs | watchdog storms "
        "| lossless-overflow drops |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for lab, summary in summaries.items():
        for name, t in summary["transports"].items():
            pfc = t.get("pfc")
            if pfc is None:
                continue
            lines.append(
                f"| {lab} | {name} | {pfc['pause_frames_sent']} | {_fmt(pfc['paused_us'])} "
                f"| {t.get('cnps_sent', 0)} | {pfc['watchdog_storms']} "
                f"| {pfc['lossless_overflow_drops']} |")
    return "\n".join(lines)


def _reference_bytes(tmp: Path, file: str) -> bytes:
    data = (tmp / file).read_bytes()
    if file == "summary.json":  # drop the wall time and the build: they are not results
        summary = json.loads(data)
        summary.pop("wall_s", None)
        summary.pop("build", None)
        data = (json.dumps(summary, indent=2) + "\n").encode()
    return data


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a not in ("--check", "--installed")]
    names = args or bundled_names()
    summaries: dict[str, dict] = {}
    differ: list[str] = []

    def keep(path: Path, data: bytes) -> None:
        if check:
            if not path.exists() or path.read_bytes() != data:
                differ.append(str(path.relative_to(HERE)))
        else:
            path.write_bytes(data)

    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_lab(name, out=tmp, progress=False)
            dest = HERE / name
            if not check:
                dest.mkdir(exist_ok=True)
            for file in KEEP:
                if (Path(tmp) / file).exists():
                    keep(dest / file, _reference_bytes(Path(tmp), file))
            summaries[name] = result.summary
            print(f"{name}: {result.summary['wall_s']:.1f} s", file=sys.stderr, flush=True)
    if not args:  # the table covers every lab only on a full run
        ceiling = {n: s["goodput_ceiling_gbps"] for n, s in summaries.items()}
        text = (HERE / "README.template.md").read_text().format(
            table=table(summaries), pfc_table=pfc_table(summaries),
            ceilings="\n".join(f"- {n}: {c:.1f} Gb/s" for n, c in ceiling.items()))
        keep(HERE / "README.md", text.encode())
    if check:
        if differ:
            print("results differ: " + ", ".join(differ), file=sys.stderr)
            return 1
        build = next(iter(summaries.values()), {}).get("build", "?")
        print(f"results unchanged: {len(names)} labs, every kept file byte-identical "
              f"({build} build)", file=sys.stderr)
        return 0
    json.dump({n: s["transports"] for n, s in summaries.items()}, sys.stdout, indent=None,
              default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
