"""Regenerate the committed reference outputs: every bundled lab, both transports.

    python results/regenerate.py            # all labs (a few minutes on 2 cores)
    python results/regenerate.py t1-reboot  # just some

Each lab keeps ``summary.json`` and ``bandwidth.png`` (plus ``collective.csv`` for the
collectives) under ``results/<lab>/``; ``results/README.md`` gets the headline table. Runs
are seeded, so the numbers are identical on every machine (only ``wall_s`` differs).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc.labs.runner import run_lab
from mrc.labs.schema import bundled_names

HERE = Path(__file__).resolve().parent
KEEP = ("summary.json", "bandwidth.png", "collective.csv")


def _fmt(value: object, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)  # type: ignore[arg-type]


def table(summaries: dict[str, dict]) -> str:
    lines = [
        "| lab | transport | outcome | goodput before | during | min | detect (us) "
        "| recovery (us) | retransmitted | paths bad / reintegrated |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lab, summary in summaries.items():
        for name, t in summary["transports"].items():
            g = t["goodput_gbps"]
            outcome = t["outcome"]
            if t.get("failed_at_us") is not None:
                outcome += f" at {t['failed_at_us']:.0f} us"
            lines.append(
                f"| [{lab}]({lab}/bandwidth.png) | {name} | {outcome} | {_fmt(g['before'])} "
                f"| {_fmt(g['during'])} | {_fmt(g['min'])} | {_fmt(t['detect_us'])} "
                f"| {_fmt(t['recovery_us'])} | {t['retransmitted_packets']} "
                f"| {t['paths_marked_bad']} / {t['paths_reintegrated']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names = argv or bundled_names()
    summaries: dict[str, dict] = {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_lab(name, out=tmp, progress=False)
            dest = HERE / name
            dest.mkdir(exist_ok=True)
            for file in KEEP:
                if (Path(tmp) / file).exists():
                    shutil.copy(Path(tmp) / file, dest / file)
            summaries[name] = result.summary
            print(f"{name}: {result.summary['wall_s']:.1f} s", flush=True)
    if not argv:  # the table covers every lab only on a full run
        ceiling = {n: s["goodput_ceiling_gbps"] for n, s in summaries.items()}
        text = (HERE / "README.template.md").read_text().format(
            table=table(summaries),
            ceilings="\n".join(f"- {n}: {c:.1f} Gb/s" for n, c in ceiling.items()))
        (HERE / "README.md").write_text(text)
    json.dump({n: s["transports"] for n, s in summaries.items()}, sys.stdout, indent=None,
              default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
