"""The flow model against the packet model on every bundled fault lab with a healthy stretch
before its first fault (lab-8plane): steady goodput before, during and after the faults
within 5% of the packet model's healthy level.

The packet model's levels come from ``tests/data/flow_crosscheck.json``, written by
``python benchmarks/flow_crosscheck.py --write`` from real packet runs of today's packet
model (RC lossless with PFC and DCQCN; about 30 s; the slow test below reruns them). The
windows that miss 5% are named here, each with its bound and the reason the flow model
differs there, so a regression still shows; so are the transports the flow model refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrc.labs.run.crosscheck import comparable, compare, flow_levels, steady_levels

REFERENCE = Path(__file__).resolve().parent / "data" / "flow_crosscheck.json"
TOLERANCE = 0.05
#: Issue 36: the packet model's RC rides a routed fabric (its T0s move a QP off a dead or
#: drained T1); the flow model's RC keeps the healthy fabric's T1 (``ecmp_t1``) and stalls or
#: fails with it, until a later part of issue 36 redoes the flow model on routed RC.
_NO_REROUTE = ("the flow model does not re-route RC yet: its QPs keep the healthy fabric's "
               "T1 and stall or fail with it, where the packet model's routing moves them")
#: (lab, transport, window) -> (bound, why the packet model differs there)
NOT_WITHIN_5: dict[tuple[str, str, str], tuple[float, str]] = {
    ("allreduce-t1-reboot", "rc", "before"): (
        0.12, "ECMP collisions between ring hops: the flow model runs every hop at once at "
              "max-min rates, the packet model's chained ring steps drift apart and collide "
              "only part of the time (healthy iteration 213 us flow, 194 us packet)"),
    ("degraded-link", "rc", "after"): (
        0.10, "with the routed fabric's hash only h4->h0's plane-1 QP crosses the degraded "
              "link (h0->h4's ACKs do not): after the degrade the packet model's DCQCN "
              "climbs back more slowly than the flow model's (823 against 957 Gb/s); not yet "
              "investigated: issue 36's first part left the flow model as it was"),
    **{(lab, "rc", window): (bound, _NO_REROUTE) for lab, window, bound in (
        ("allreduce-t1-reboot", "during", 0.95), ("t0-t1-link-flap", "during", 0.27),
        ("t1-drain", "during", 0.70), ("t1-drain", "after", 1.0),
        ("t1-fail-restore", "during", 0.70), ("t1-fail-restore", "after", 1.0),
        ("t1-reboot", "during", 0.81), ("t1-reboot", "after", 1.01))},
}
#: (lab, transport) the flow model refuses, and why
REFUSED = {
    ("pfc-storm", "rc"): "PFC storm (pause spreading) is not modelled",
    ("pfc-storm-watchdog", "rc"): "PFC storm (pause spreading) is not modelled",
}


def reference() -> dict[str, dict[str, dict[str, float | None]]]:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("lab", sorted(reference()))
def test_flow_within_five_percent_of_packet(lab: str) -> None:
    flow, refused = flow_levels(lab)
    assert sorted(refused) == sorted(t for (name, t) in REFUSED if name == lab)
    rows = compare({k: v for k, v in reference()[lab].items() if k in flow}, flow)
    assert rows
    for row in rows:
        bound, _why = NOT_WITHIN_5.get((lab, row["transport"], row["window"]),
                                       (TOLERANCE, ""))
        assert row["gap_of_healthy"] <= bound, (lab, row)


def test_every_exception_is_still_needed() -> None:
    """A named exception that now passes within 5% must be removed (no stale excuses)."""
    for (lab, transport, window) in NOT_WITHIN_5:
        flow, _ = flow_levels(lab)
        rows = [r for r in compare(reference()[lab], flow)
                if r["transport"] == transport and r["window"] == window]
        assert rows and rows[0]["gap_of_healthy"] > TOLERANCE, (lab, transport, window)


def test_the_reference_covers_every_bundled_fault_lab() -> None:
    from mrc.labs.schema.files import bundled_names
    from mrc.labs.schema.lab_file import load_lab

    assert sorted(reference()) == sorted(n for n in bundled_names() if comparable(load_lab(n)))


@pytest.mark.slow
@pytest.mark.parametrize("lab", sorted(reference()))
def test_reference_matches_the_packet_model_now(lab: str) -> None:
    from mrc.labs.run.runner import run_lab

    packet = steady_levels(run_lab(lab, progress=False))
    stored = reference()[lab]
    for name, levels in packet.items():
        for window, value in levels.items():
            assert value == pytest.approx(stored[name][window], rel=1e-9, abs=1e-9)
