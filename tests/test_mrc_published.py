"""MRC as published: EV profiles (the OCP worked example's masks, bounds and deny masks), the
ev_min_active floor under a fault, the ev_deny lab action, the NCCL env table, verbs
completion semantics (CQE on ACK, tx_depth), QPs per connection, and fabric --evs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mrc.ev import EV_STATE_ASSUMED_BAD, EV_STATE_GOOD, make_ev
from mrc.ev.profile import EvDeny, EvField, EvProfile, EvProfileError, denied_by, deposit, extract
from mrc.labs.errors import LabError
from mrc.labs.run.runner import run_lab
from mrc.labs.run.workloads import WriteBwJob
from mrc.labs.schema import nccl_env
from mrc.labs.schema.lab_file import validate
from mrc.stack.stack import SimStack
from mrc.transport.base import ASSUMED_BAD, GOOD, PathChoice
from mrc.transport.mrc import MrcQueuePair
from mrc.transport.mrc.config import CcConfig, MrcConfig
from mrc.units import PS_PER_US
from topology import evs as fabric_evs
from topology.spec import preset

ROOT = Path(__file__).resolve().parent.parent
US = PS_PER_US

# The worked example of examples/ev_generated.md (OCP repository): 4 hops, plane lowest.
#   1st hop (plane) 3 bits max 7; 2nd hop 8 bits max 180 (first revision) / 179 (later);
#   3rd hop 4 bits max 15; 4th hop 4 bits max 15.
EXAMPLE_WIDTHS = (3, 8, 4, 4)


def example(second_hop_max: int, count: int = 128) -> EvProfile:
    maxima = (7, second_hop_max, 15, 15)
    return EvProfile(tuple(EvField(w, max_val=m) for w, m in zip(EXAMPLE_WIDTHS, maxima,
                                                                  strict=True)),
                     ev_count=count)


# ====================================================================== EV profiles
def test_ev_generation_reproduces_the_worked_example() -> None:
    first = example(180)
    assert first.allow_mask() == 0x000787F8
    assert first.max_allowed_vals() == 0x0007FDA7  # the figure (first revision)
    assert first.min_allowed_vals() == 0
    later = example(179)
    assert later.allow_mask() == 0x000787F8
    # the later revision's arithmetic (its "result: 0x0007fd97" comment is a slip)
    assert later.max_allowed_vals() == 0x0007FD9F
    # the older three words parse back into the same fields
    back = EvProfile.from_allow_mask(0x000787F8, 0x0007FDA7)
    assert [(f.width, f.min_val, f.top) for f in back.fields] == [
        (3, 0, 7), (8, 0, 180), (4, 0, 15), (4, 0, 15)]
    assert first.space == 8 * 181 * 16 * 16
    # generated EVs: distinct, every field inside its bounds, the plane lowest and fastest
    evs = first.generate()
    assert len(evs) == len(set(evs)) == 128
    for k, ev in enumerate(evs):
        plane, hop2, hop3, hop4 = first.unpack(ev)
        assert plane == k % 8 and 0 <= hop2 <= 180 and hop3 <= 15 and hop4 <= 15
        assert ev & ~0x7FFFF == 0 and ev & 7 == plane
        assert first.pack((plane, hop2, hop3, hop4)) == ev


def test_the_examples_deny_masks_deny_exactly_the_evs_they_name() -> None:
    """Deny entries of the example (mask, value): EV 1 on the 2nd hop, EV 3 on the 3rd, EV 15
    on the 4th. The 3rd-hop entry as published (value 0x300 under mask 0x7800) can match no
    EV and is refused; 3 on the 3rd hop is 0x1800."""
    prof = EvProfile(tuple(EvField(w, max_val=m) for w, m in zip(EXAMPLE_WIDTHS,
                                                                  (7, 4, 3, 15), strict=True)),
                     ev_count=8 * 5 * 4 * 16)
    evs = prof.generate()  # the whole space of this smaller profile of the same layout
    assert len(set(evs)) == prof.space
    hop = {ev: prof.unpack(ev) for ev in evs}
    for rule, field, value in ((EvDeny(0x000007F8, 0x00000008), 1, 1),
                               (EvDeny(0x00007800, 0x00001800), 2, 3),
                               (EvDeny(0x00078000, 0x00078000), 3, 15)):
        denied = set(denied_by(evs, [rule]))
        assert denied == {ev for ev in evs if hop[ev][field] == value}
        assert denied  # each names EVs that exist
    with pytest.raises(EvProfileError, match="outside its mask"):
        EvDeny(0x00007800, 0x00000300)
    both = denied_by(evs, [EvDeny(0x7F8, 0x8), EvDeny(0x78000, 0x78000)])
    assert set(both) == {ev for ev in evs if hop[ev][1] == 1 or hop[ev][3] == 15}


def test_field_masks_expand_as_the_header_says() -> None:
    # the generated value's bits land on the mask's bits, most significant first
    assert deposit(0b101, 0b1101_0000) == 0b1001_0000
    assert extract(0b1001_0000, 0b1101_0000) == 0b101
    f = EvField(8, init_val=0x0F, mask=0xF0)
    assert f.expand(0xA) == 0xAF and f.generated_value(0xAF) == 0xA
    fixed = EvField(4, init_val=9, max_val=0, mask=0)
    assert fixed.count == 1 and fixed.expand(0) == 9
    with pytest.raises(EvProfileError):
        EvField(4, max_val=16)
    with pytest.raises(EvProfileError):
        EvProfile((EvField(8),), ev_count=257)


def test_fabric_profile_is_the_evs_per_qp_shorthand() -> None:
    spec = preset("lab-8plane")  # 8 planes x 4 T1: 32 paths between T0s
    prof = fabric_evs.fabric_profile(spec, 128)
    assert [(f.name, f.width, f.top) for f in prof.fields] == [
        ("plane", 8, 7), ("t1", 12, 3), ("entropy", 12, 3)]
    assert prof.min_active == 32  # a quarter, as the OCP examples set it
    paths = fabric_evs.ev_paths(spec, 0, 4, prof, seed=1)
    groups = fabric_evs.sharing(paths)
    assert len(groups) == 32 and all(len(v) == 4 for v in groups.values())
    for p in paths:  # the uSID path follows the hop fields; the plane is the low byte
        assert (p.plane, p.t1) == fabric_evs.hops(prof, p.ev)
        assert p.ev == make_ev(p.plane, p.t1, p.ev >> 20)
    with pytest.raises(fabric_evs.EvPathError, match="max_val to 3"):  # 180 T1s? there are 4
        fabric_evs.check_fits(spec, example(180))


def test_a_simulated_ev_set_is_the_fabric_paths_and_both_directions_share_evs() -> None:
    """The simulator's EV set (``build_ev_set``, from plain rows) says what ``ev_paths``
    says, EV by EV; the reverse direction has the same EVs on the same (plane, T1), each
    with its own address (the pair's EVs are generated once for both)."""
    from mrc.stack.evset import build_ev_set

    spec = preset("lab-8plane")
    prof = fabric_evs.fabric_profile(spec, 128)
    fwd = build_ev_set(spec, 0, 4, 128, seed=3, profile=prof)
    rev = build_ev_set(spec, 4, 0, 128, seed=3, profile=prof)
    assert fwd == [PathChoice(p.ev, p.plane, p.t1, p.address)
                   for p in fabric_evs.ev_paths(spec, 0, 4, prof, seed=3)]
    assert [(c.ev, c.plane, c.t1) for c in fwd] == [(c.ev, c.plane, c.t1) for c in rev]
    assert all(f.address != r.address for f, r in zip(fwd, rev, strict=True))
    other = build_ev_set(spec, 0, 5, 128, seed=3, profile=prof)
    assert [c.ev for c in other] != [c.ev for c in fwd]  # another pair, another order


# ====================================================================== the floor
def _pair(cfg: MrcConfig, planes: int = 4) -> tuple[MrcQueuePair, MrcQueuePair, list[PathChoice]]:
    evs = [PathChoice(make_ev(p, t), p, t, 0) for p in range(planes) for t in range(2)]
    a = MrcQueuePair(2, 0, 1, 3, 4096, evs, config=cfg)
    b = MrcQueuePair(3, 1, 0, 2, 4096, evs, config=cfg)
    return a, b, evs


def test_min_active_floor_holds_under_a_fault_that_would_mark_more_evs_bad() -> None:
    """Three of four ports go down: 6 of 8 EVs would go ASSUMED_BAD; with ev_min_active 4
    the NIC marks only 4 and keeps at least 4 GOOD; without the floor all 6 go."""
    for floor, want_good in ((4, 4), (0, 2)):
        cfg = MrcConfig(ev_min_active=floor, cc=CcConfig(algorithm="fixed"))
        a, _, evs = _pair(cfg)
        a.post_write(0, 1, 1 << 20)
        for plane in (0, 1, 2):
            a.port_down(10, plane)
        states = a.ev_states()
        assert sum(s == GOOD for s in states.values()) == want_good
        assert sum(s == ASSUMED_BAD for s in states.values()) == 8 - want_good
        assert a.stats.bad_refused_min_active == (2 if floor else 0)


def test_min_active_floor_in_a_lab_t0_down() -> None:
    """The same floor on a fabric: a T0 dies (16 of 128 EVs lose their path); an
    ev_min_active of 120 lets only 8 go ASSUMED_BAD per QP. The other 8 stay GOOD and keep
    being sprayed into the dead plane (the floor's price: their losses are resent
    elsewhere, again and again), and the QP never errors."""
    base = run_lab("t0-switch-down", progress=False, transports="mrc",
                   overrides={"run.duration_us": 400, "fault.0.at_us": 150,
                              "transport.mrc.ev_min_active": 120})
    mrc = base.summary["transports"]["mrc"]
    assert mrc["outcome"] != "failed"
    ev = base.events[base.events["kind"] == "ev_state"]
    per_qp: dict[str, int] = {}
    for target, detail in zip(ev["target"], ev["detail"], strict=True):
        if json.loads(detail)["new"] == "ASSUMED_BAD":
            per_qp[target] = per_qp.get(target, 0) + 1
    assert per_qp and max(per_qp.values()) <= 128 - 120


# ====================================================================== lab actions and keys
def _tiny(**extra: Any) -> dict[str, Any]:
    lab: dict[str, Any] = {
        "name": "tiny", "fabric": {"preset": "lab-small"},
        "workload": {"kind": "write_bw", "pairs": [["h0", "h4"]], "message_bytes": 262144},
        "transport": {"mrc": {}, "rc": {"timeout_exp": 2, "retry_cnt": 2}},
        "run": {"duration_us": 200, "bin_us": 10}}
    lab.update(extra)
    return lab


def test_ev_deny_fault_denies_by_mask_and_value_then_allows() -> None:
    lab = _tiny(fault=[{"kind": "ev_deny", "target": "all", "at_us": 50, "duration_us": 80,
                        "deny_mask": 0xFF, "deny_value": 3}])
    r = run_lab(lab, progress=False)
    mrc = r.summary["transports"]["mrc"]
    assert mrc["outcome"] == "completed" and mrc["evs_marked_bad"] == 0
    rows = r.events[(r.events["transport"] == "mrc") & (r.events["kind"] == "ev_state")]
    details = [json.loads(d) for d in rows["detail"]]
    denied = [d for d in details if d["new"] == "DENIED"]
    allowed = [d for d in details if d["old"] == "DENIED" and d["new"] == "GOOD"]
    assert denied and all(d["ev"] & 0xFF == 3 and d["plane"] == 3 for d in denied)
    assert len(allowed) == len(denied)
    start = r.events[(r.events["transport"] == "mrc") & (r.events["kind"] == "ev_deny_start")]
    assert json.loads(start["detail"].iloc[0])["evs_changed"] == len(denied)
    with pytest.raises(LabError, match="outside deny_mask"):
        validate(_tiny(fault=[{"kind": "ev_deny", "target": "h0->h4", "at_us": 5,
                               "deny_mask": 0x7800, "deny_value": 0x300}]))
    with pytest.raises(LabError, match="fault.0.target"):
        validate(_tiny(fault=[{"kind": "ev_deny", "target": "p0.t1.0", "at_us": 5,
                               "deny_mask": 1, "deny_value": 1}]))


def test_nccl_env_is_taken_verbatim() -> None:
    env = {"NCCL_MRC_TIMEOUT": "4", "NCCL_MRC_RETRY_CNT_LINEAR": 7,
           "NCCL_MRC_RETRY_CNT_EXP": "25", "NCCL_IB_QPS_PER_CONNECTION": 2,
           "NCCL_IB_SPLIT_DATA_ON_QPS": 1, "NCCL_IB_TC": "4", "NCCL_IB_TIMEOUT": 20,
           "NCCL_MRC_CC_MIN_RATE": 100_000, "NCCL_DEBUG": "WARN"}
    lab = validate(_tiny(transport={"mrc": {"env": env}, "rc": {"env": env}}))
    mrc, rc = lab.transports["mrc"], lab.transports["rc"]
    assert mrc.params["timeout"] == 4 and mrc.params["qps_per_connection"] == 2
    assert mrc.params["cc"] == {"min_rate_mbps": 50_000}  # divided by the QPs, as the plugin
    assert rc.params["timeout_exp"] == 20 and rc.params["qps_per_plane"] == 2
    assert dict(mrc.ignored_env) .keys() == {"NCCL_IB_TC", "NCCL_IB_TIMEOUT", "NCCL_DEBUG"}
    assert "NCCL_MRC_TIMEOUT" in dict(rc.ignored_env)
    r = run_lab(_tiny(transport={"mrc": {"env": env}}), progress=False)
    rows = r.events[r.events["kind"] == "env_ignored"]
    assert set(json.loads(d)["variable"] for d in rows["detail"]) == {
        "NCCL_IB_TC", "NCCL_IB_TIMEOUT", "NCCL_DEBUG"}
    for bad, word in (({"NCCL_MRC_TIMEUOT": 4}, "unknown variable"),
                      ({"NCCL_MRC_TIMEOUT": "4us"}, "expected an integer"),
                      ({"NCCL_MRC_RETRY_CNT_EXP": 26}, "range 0..25")):
        with pytest.raises(LabError, match=word):
            validate(_tiny(transport={"mrc": {"env": bad}}))
    with pytest.raises(LabError, match="set twice"):
        validate(_tiny(transport={"mrc": {"timeout": 5, "env": {"NCCL_MRC_TIMEOUT": 4}}}))


def test_docs_env_table_is_generated_from_the_code() -> None:
    doc = (ROOT / "docs" / "nccl-env.md").read_text()
    assert nccl_env.markdown_table() in doc


# ====================================================================== completions
def test_sender_cqe_comes_on_the_ack_after_placement() -> None:
    """A WRITE completes at the receiver when placed and at the sender (its CQE) only when
    the ACK of its last byte comes back; for MRC and for RC."""
    for kind in ("mrc", "rc"):
        stack = SimStack(preset("lab-small"), seed=1)
        conn = stack.open(kind, 0, 4, {})
        seen: dict[str, int] = {}

        def note(what: str, seen: dict[str, int] = seen) -> Any:
            return lambda t, ok: seen.setdefault(what, t) if ok else None

        conn.write(0, 1 << 20, note("cqe"), on_placed=note("placed"))
        stack.sim.run(2000 * US)
        assert set(seen) == {"placed", "cqe"}, kind
        # the CQE follows the placement by at least the ACK's way back: 4 links of flight
        assert seen["cqe"] - seen["placed"] >= 4 * stack.spec.link_delay_ps, kind
        assert conn.messages_ok == 1 and conn.pending == 0


def test_write_bw_reposts_on_the_cqe_and_tx_depth_bounds_outstanding() -> None:
    stack = SimStack(preset("lab-small"), seed=1)
    lab = validate(_tiny())
    job = WriteBwJob(stack, "mrc", {}, 1, lab.workload)  # type: ignore[arg-type]
    job.start()
    stack.sim.run(150 * US)
    depth = lab.workload.tx_depth  # type: ignore[attr-defined]
    assert job.max_in_flight == depth and job.messages_completed > 2 * depth
    lat = job.cqe_latency_us()
    assert lat["p50"] is not None and lat["p50"] > 0
    r = run_lab(_tiny(), progress=False)
    assert r.summary["transports"]["mrc"]["cqe_latency_us"]["p99"] > 0


def test_qps_per_connection_split_data_for_mrc_and_rc() -> None:
    stack = SimStack(preset("lab-small"), seed=2)
    mrc = stack.open("mrc", 0, 4, {"qps_per_connection": 2, "split_data_on_qps": True})
    rc = stack.open("rc", 1, 5, {"qps_per_plane": 2, "split_data_on_qps": False})
    done: list[tuple[str, bool]] = []
    for conn, name in ((mrc, "mrc"), (rc, "rc")):
        for _ in range(2):
            conn.write(0, 1 << 20, lambda t, ok, n=name: done.append((n, ok)))
    stack.sim.run(3000 * US)
    assert sorted(done) == [("mrc", True)] * 2 + [("rc", True)] * 2
    senders = [s for s, _ in mrc.pairs]  # type: ignore[attr-defined]
    assert len(senders) == 2 and all(s.stats.messages_sent == 2 for s in senders)
    per_qp = [q.stats.data_sent for q in rc.conn.requesters]  # type: ignore[attr-defined]
    planes = stack.spec.planes  # split off: message 1 on the first QP of each plane, 2 on the second
    assert all(n > 0 for n in per_qp) and len(per_qp) == 2 * planes


def test_fabric_evs_cli_lists_paths_and_sharing() -> None:
    from topology.cli import fabric

    res = CliRunner().invoke(fabric, ["--preset", "lab-8plane", "--evs", "h0", "h4"])
    assert res.exit_code == 0, res.output
    assert "128 EVs h0 -> h4" in res.output and "32 distinct paths" in res.output
    assert "at most 4 per path" in res.output and "fcbb:0:1000:" in res.output
    res = CliRunner().invoke(fabric, ["--preset", "lab-8plane", "--evs", "h0", "h4",
                                      "--ev-count", "32", "--json"])
    rows = json.loads(res.output)
    assert len(rows) == 32 and len({(r["plane"], r["t1"]) for r in rows}) == 32
    bad = CliRunner().invoke(fabric, ["--preset", "lab-8plane", "--evs", "h0", "h99"])
    assert bad.exit_code == 2


def test_ev_state_codes_and_event_fields() -> None:
    cfg = MrcConfig(ev_min_active=0, cc=CcConfig(algorithm="fixed"))
    a, _, evs = _pair(cfg)
    a.port_down(5, 1)
    events = [e for e in a.events if e.kind == "ev_state"]
    assert events and all(e.port == 2 and e.new == ASSUMED_BAD
                          for e in events)
    assert (EV_STATE_GOOD, EV_STATE_ASSUMED_BAD) == (1, 2)


def test_fidelity_table_counts_are_the_tables() -> None:
    """docs/fidelity.md states its counts; they are recounted from the table itself."""
    import re as _re
    from collections import Counter

    doc = (ROOT / "docs" / "fidelity.md").read_text()
    rows = [line for line in doc.splitlines()
            if line.startswith("| ") and line.count(" | ") >= 6 and "public name" not in line
            and not line.startswith("|---")]
    statuses = Counter(line.split(" | ")[5].strip() for line in rows)
    kinds = ("same", "simplified", "own reading", "own model", "not modelled")
    assert set(statuses) <= set(kinds)
    stated = _re.search(r"\*\*Counts: (\d+) same, (\d+) simplified, (\d+) own reading, "
                        r"(\d+) own model, (\d+) not modelled\*\*", doc)
    assert stated is not None
    assert [int(x) for x in stated.groups()] == [statuses[k] for k in kinds]


@pytest.mark.parametrize("seed", range(40))
def test_generated_evs_are_the_packed_picks_in_mixed_radix(seed: int) -> None:
    """``generate`` places each field's values once and ORs them per EV (setup speed); it
    must give exactly ``pack`` of the mixed-radix picks, for any layout, mask and order."""
    import random

    rng = random.Random(seed)
    fields = []
    for _ in range(rng.randint(1, 4)):
        width = rng.randint(1, 6)
        mask = rng.randint(1, (1 << width) - 1) if rng.random() < 0.4 else None
        bits = bin(mask).count("1") if mask is not None else width
        top = rng.randint(0, (1 << bits) - 1)
        fields.append(EvField(width, init_val=rng.randint(0, (1 << width) - 1),
                              min_val=rng.randint(0, top), max_val=top, mask=mask))
    space = EvProfile(tuple(fields), ev_count=1).space
    prof = EvProfile(tuple(fields), ev_count=rng.randint(1, min(space, 200)))
    orders: list[list[int] | None] = [None] + [
        rng.sample(range(f.min_val, f.top + 1), f.count) for f in prof.fields[1:]]
    values = [list(range(f.min_val, f.top + 1)) if o is None else o
              for f, o in zip(prof.fields, orders, strict=True)]
    want = []
    for k in range(prof.ev_count):
        picks, rest = [], k
        for vals in values:
            rest, j = divmod(rest, len(vals))
            picks.append(vals[j])
        want.append(prof.pack(picks))
    assert prof.generate(orders) == want
