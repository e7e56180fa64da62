"""Lab file validation: good labs load with their defaults, and bad ones give exit status 2
with one line that names the file, the dotted key path and the problem (no traceback)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from mrc.labs.cli.run import run
from mrc.labs.errors import LabError
from mrc.labs.schema.lab import Collective, WriteBw
from mrc.labs.schema.lab_file import load_lab, validate
from mrc.labs.schema.run import nice_bin_us
from mrc.labs.schema.schedule import fault_windows, schedule
from mrc.labs.schema.workload import size_series

BASE = """\
[fabric]
preset = "lab-8plane"
[workload]
kind = "write_bw"
[transport.mrc]
[transport.rc]
timeout_exp = 4
[run]
duration_us = 1000
"""


def lab_text(extra: str = "", base: str = BASE) -> str:
    return base + textwrap.dedent(extra)


def test_minimal_lab_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mini.toml"
    path.write_text('[workload]\nkind = "write_bw"\n[run]\nduration_us = 500\n')
    lab = load_lab(path)
    assert lab.name == "mini"
    assert lab.fabric_preset == "lab-small"
    assert isinstance(lab.workload, WriteBw)
    # default pair crosses the T1 tier: host 0 and the first host of the next T0
    assert lab.workload.pairs == ((0, lab.fabric.hosts_per_t0),)
    assert set(lab.transports) == {"mrc", "rc"}
    assert lab.run.bin_us == 5.0 and lab.run.seed == 1
    assert lab.faults == ()


def test_full_lab_resolves_selectors_and_windows(tmp_path: Path) -> None:
    path = tmp_path / "full.toml"
    path.write_text(lab_text("""
        [[fault]]
        kind = "switch_reboot"
        target = "h5.p2.t0"
        at_us = 100
        duration_us = 300
        [[fault]]
        kind = "link_flap"
        target = "p1.t1.2--p1.t0.0"
        at_us = 50
        period_us = 100
        down_us = 20
        count = 3
        [[fault]]
        kind = "link_down"
        target = "h0.p4.uplink"
        at_us = 600
        [[fault]]
        kind = "link_up"
        target = "h0.p4--p4.t0.0"
        at_us = 700
    """))
    lab = load_lab(path)
    assert [f.target for f in lab.faults] == ["p2.t0.1", "p1.t0.0--p1.t1.2", "h0.p4--p4.t0.0",
                                              "h0.p4--p4.t0.0"]
    windows = fault_windows(lab)
    assert windows[0] == {"kind": "switch_reboot", "target": "p2.t0.1", "at_us": 100.0,
                          "until_us": 400.0}
    assert windows[1]["until_us"] == 50 + 2 * 100 + 20
    assert windows[2]["until_us"] == 700.0  # paired with the link_up entry
    actions = schedule(lab.faults)
    assert [(a.time_us, a.action) for a in actions][:4] == [
        (50.0, "link_down"), (70.0, "link_up"), (100.0, "switch_down"), (150.0, "link_down")]
    assert sum(a.action == "link_down" for a in actions) == 4


def test_collective_size_series() -> None:
    assert size_series(65536, 268435456, 4) == (65536, 262144, 1048576, 4194304, 16777216,
                                               67108864, 268435456)
    lab = validate({"workload": {"kind": "all_reduce", "hosts": ["h0", 2, "h4", 6],
                                 "min_bytes": 1024, "max_bytes": 4096},
                    "run": {"duration_us": 100}})
    assert isinstance(lab.workload, Collective)
    assert lab.workload.hosts == (0, 2, 4, 6)
    assert lab.workload.sizes_bytes == (1024, 2048, 4096)


def test_nice_bins() -> None:
    assert nice_bin_us(1000) == 10
    assert nice_bin_us(3000) == 20 or nice_bin_us(3000) == 50
    assert nice_bin_us(70) == 0.5 or nice_bin_us(70) == 1


def test_integral_float_accepted_for_integers() -> None:
    lab = validate({"workload": {"kind": "permutation", "size_bytes": 2e6},
                    "run": {"duration_us": 100}})
    assert lab.workload.size_bytes == 2_000_000  # type: ignore[union-attr]


def test_rc_params_checked_by_the_transport_config() -> None:
    lab = validate({"workload": {"kind": "write_bw"}, "run": {"duration_us": 100},
                    "transport": {"rc_slow": {"kind": "rc", "timeout_exp": 2, "retry_cnt": 1,
                                              "qps_per_plane": 2}}})
    assert lab.transports["rc_slow"].params == {"timeout_exp": 2, "retry_cnt": 1,
                                                "qps_per_plane": 2}


# ---------------------------------------------------------------------- malformed labs
def _fault(body: str) -> str:
    return lab_text("[[fault]]\n" + textwrap.dedent(body))


BAD_LABS: list[tuple[str, str | bytes, str]] = [
    ("toml-syntax", "[run\nduration_us = 1\n", "TOML syntax error"),
    ("toml-duplicate-key", BASE + "[run]\nseed = 2\n", "TOML syntax error"),
    ("binary-garbage", bytes(range(256)) * 4, "binary data"),
    ("not-utf8", b"name = \"\xff\xfe\"\n", "not UTF-8"),
    ("empty-file", "", "run: missing required key"),
    ("missing-workload", "[run]\nduration_us = 10\n", "workload: missing required key"),
    ("unknown-top-key", BASE + "[runn]\nseed = 1\n", "runn: unknown key (did you mean 'run'?)"),
    ("unknown-run-key", BASE.replace("duration_us", "duraton_us"),
     "run.duraton_us: unknown key (did you mean 'duration_us'?)"),
    ("unknown-rc-key", BASE.replace("timeout_exp", "timeout_expo"),
     "transport.rc.timeout_expo: unknown key"),
    ("unknown-workload-key", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\nsize = 4'),
     "workload.size: unknown key"),
    ("unknown-fabric-key", BASE.replace('preset = "lab-8plane"', 'preset = "lab-8plane"\n'
                                        'plains = 4'), "fabric.plains: unknown key"),
    ("duration-string", BASE.replace("duration_us = 1000", 'duration_us = "1000"'),
     "run.duration_us: expected a number, got string"),
    ("duration-negative", BASE.replace("duration_us = 1000", "duration_us = -5"),
     "run.duration_us: must be greater than 0"),
    ("duration-nan", BASE.replace("duration_us = 1000", "duration_us = nan"),
     "run.duration_us: must be a finite number"),
    ("duration-date", BASE.replace("duration_us = 1000", "duration_us = 1979-05-27"),
     "run.duration_us: expected a number, got date/time 1979-05-27"),
    ("message-negative", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\n'
                                      'message_bytes = -4096'),
     "workload.message_bytes: must be greater than 0"),
    ("tx-depth-bool", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\ntx_depth = true'),
     "workload.tx_depth: expected an integer, got boolean"),
    ("size-fraction", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\n'
                                   'message_bytes = 1.5'), "workload.message_bytes: expected an "
                                                           "integer, got float"),
    ("workload-kind-typo", BASE.replace('"write_bw"', '"allreduce"'),
     "workload.kind: 'allreduce' is not one of"),
    ("pair-self", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\npairs = [[1, 1]]'),
     "workload.pairs.0: a host cannot write to itself"),
    ("pair-host-range", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\npairs = [[0, 99]]'),
     "workload.pairs.0.1: host 99 outside 0..15"),
    ("pair-shape", BASE.replace('kind = "write_bw"', 'kind = "write_bw"\npairs = [[0, 1, 2]]'),
     "workload.pairs.0: expected [src, dst]"),
    ("collective-duplicate-host",
     BASE.replace('kind = "write_bw"', 'kind = "all_reduce"\nhosts = [0, 4, "h4"]'),
     "workload.hosts: host h4 is listed twice"),
    ("collective-sizes-twice",
     BASE.replace('kind = "write_bw"', 'kind = "sendrecv"\nsizes_bytes = [1024]\n'
                  'min_bytes = 1024'), "workload.min_bytes: give either sizes_bytes"),
    ("fault-kind-typo", _fault('kind = "switch_fail"\ntarget = "p0.t1.0"\nat_us = 10\n'),
     "fault.0.kind: 'switch_fail' is not one of"),
    ("fault-unknown-key", _fault('kind = "switch_down"\ntarget = "p0.t1.0"\nat_us = 10\n'
                                 'duration_us = 5\n'), "fault.0.duration_us: switch_down takes no duration_us (it belongs to switch_reboot"),
    ("fault-missing-target", _fault('kind = "switch_down"\nat_us = 10\n'),
     "fault.0.target: missing required key"),
    ("unknown-plane", _fault('kind = "switch_down"\ntarget = "p9.t1.0"\nat_us = 10\n'),
     "fault.0.target: unknown element 'p9.t1.0': plane 9 outside 0..7"),
    ("unknown-t1", _fault('kind = "switch_down"\ntarget = "p0.t1.4"\nat_us = 10\n'),
     "fault.0.target: unknown element 'p0.t1.4': T1 index 4 outside 0..3"),
    ("garbage-element", _fault('kind = "switch_down"\ntarget = "spine-3"\nat_us = 10\n'),
     "fault.0.target: unknown element 'spine-3': not an element name"),
    ("wrong-target-kind", _fault('kind = "switch_down"\ntarget = "p0.t0.0--p0.t1.1"\n'
                                 'at_us = 10\n'), "fault.0.target: switch_down needs a switch"),
    ("port-on-switch", _fault('kind = "port_down"\ntarget = "p0.t0.0"\nat_us = 10\n'),
     "fault.0.target: port_down needs a NIC port (h3.p0); 'p0.t0.0' is a T0 switch"),
    ("drain-on-t0", _fault('kind = "drain"\ntarget = "p0.t0.1"\nat_us = 10\n'),
     "fault.0.target: drain needs a T1 switch"),
    ("fault-after-run", _fault('kind = "switch_down"\ntarget = "p0.t1.0"\nat_us = 5000\n'),
     "fault.0.at_us: 5000 us is not inside the run"),
    ("fault-negative-time", _fault('kind = "switch_down"\ntarget = "p0.t1.0"\nat_us = -1\n'),
     "fault.0.at_us: must not be negative"),
    ("reboot-past-end", _fault('kind = "switch_reboot"\ntarget = "p0.t1.0"\nat_us = 900\n'
                               'duration_us = 500\n'), "fault.0: switch_reboot lasts until 1400"),
    ("reboot-no-duration", _fault('kind = "switch_reboot"\ntarget = "p0.t1.0"\nat_us = 100\n'),
     "fault.0.duration_us: missing required key"),
    ("flap-down-ge-period", _fault('kind = "link_flap"\ntarget = "p0.t0.0--p0.t1.0"\n'
                                   'at_us = 10\nperiod_us = 20\ndown_us = 20\ncount = 3\n'),
     "fault.0.down_us: down_us (20) must be shorter than period_us (20)"),
    ("loss-probability", _fault('kind = "loss"\ntarget = "p0.t0.0--p0.t1.0"\nat_us = 10\n'
                                'probability = 1.5\n'), "fault.0.probability: must be at most 1"),
    ("degrade-fraction", _fault('kind = "degrade"\ntarget = "p0.t0.0--p0.t1.0"\nat_us = 10\n'
                                'rate_fraction = 0\n'),
     "fault.0.rate_fraction: must be greater than 0"),
    ("double-down", _fault('kind = "switch_down"\ntarget = "p0.t1.0"\nat_us = 10\n'
                           '[[fault]]\nkind = "switch_reboot"\ntarget = "p0.t1.0"\n'
                           'at_us = 20\nduration_us = 10\n'),
     "fault.1: switch down of p0.t1.0 at 20 us contradicts the schedule: it is already down"),
    ("up-without-down", _fault('kind = "link_up"\ntarget = "p0.t0.0--p0.t1.0"\nat_us = 10\n'),
     "fault.0: link up of p0.t0.0--p0.t1.0 at 10 us contradicts the schedule: it is not down"),
    ("overlapping-loss", _fault('kind = "loss"\ntarget = "p0.t0.0--p0.t1.0"\nat_us = 10\n'
                                'probability = 0.01\nduration_us = 100\n[[fault]]\nkind = "loss"\n'
                                'target = "p0.t1.0--p0.t0.0"\nat_us = 50\nprobability = 0.1\n'),
     "fault.1: loss start of p0.t0.0--p0.t1.0 at 50 us contradicts the schedule"),
    ("same-instant", _fault('kind = "switch_down"\ntarget = "p0.t1.0"\nat_us = 10\n'
                            '[[fault]]\nkind = "switch_up"\ntarget = "p0.t1.0"\nat_us = 10\n'),
     "fault.1: switch up of p0.t1.0 at 10 us happens at the same instant as fault.0"),
    ("fault-as-table", BASE + '[fault]\nkind = "switch_down"\n',
     "fault: write faults as [[fault]] entries"),
    ("impossible-fabric", BASE.replace('preset = "lab-8plane"',
                                       'planes = 2\nhosts = 10\nhosts_per_t0 = 4'),
     "fabric: hosts (10) must be a multiple of hosts_per_t0 (4)"),
    ("fabric-radix", BASE.replace('preset = "lab-8plane"', 'hosts = 8\nhosts_per_t0 = 4\n'
                                  'switch_radix = 6'), "fabric: a T0 needs 8 ports"),
    ("preset-typo", BASE.replace('"lab-8plane"', '"lab-8planes"'),
     "fabric.preset: 'lab-8planes' is not one of"),
    ("fabric-type", BASE.replace('preset = "lab-8plane"', 'planes = "eight"'),
     "fabric.planes: expected an integer, got string"),
    ("fabric-too-big", BASE.replace('"lab-8plane"', '"fairwater"'),
     "fabric: 1,048,576 NIC ports is more than the packet simulator runs"),
    ("transport-no-kind", BASE + "[transport.fast]\ntimeout_exp = 3\n",
     "transport.fast.kind: missing required key"),
    ("transport-kind-contradiction", BASE.replace("[transport.mrc]", '[transport.mrc]\n'
                                                  'kind = "rc"'),
     "transport.mrc.kind: 'rc' contradicts the table name 'mrc'"),
    ("rc-retry-range", BASE.replace("timeout_exp = 4", "retry_cnt = 9"),
     "transport.rc.retry_cnt: RcConfig: retry_cnt is a 3-bit verbs field"),
    ("rc-type", BASE.replace("timeout_exp = 4", 'timeout_exp = "4"'),
     "transport.rc.timeout_exp: expected an integer, got string"),
    ("bin-longer-than-run", BASE.replace("duration_us = 1000", "duration_us = 1000\n"
                                         "bin_us = 2000"), "run.bin_us: 2000 us is longer"),
    ("too-many-bins", BASE.replace("duration_us = 1000", "duration_us = 1000\n"
                                   "bin_us = 0.001"), "run.bin_us: 1,000,000 bins is too many"),
    ("bad-name", 'name = "my lab"\n' + BASE, "name: 'my lab' must be letters"),
    ("sweep-file", 'lab = "t1-reboot"\n[grid]\n"run.seed" = [1, 2]\n',
     "this is a sweep file, not a lab: run it with `mrc-lab sweep`"),
    ("matrix-missing-file", BASE.replace('kind = "write_bw"', 'kind = "connection_matrix"\n'
                                         'file = "nope.cm"'),
     "workload.file: no such connection-matrix file"),
    ("matrix-trigger", BASE.replace('kind = "write_bw"', 'kind = "connection_matrix"\n'
                                    'text = """\nNodes 4\nConnections 1\n'
                                    '0->1 id 1 start 0 size 100 send_done_trigger 2\n"""'),
     "workload.text: line 3: send_done_trigger 2: no 'trigger id 2 ...' line defines it"),
    ("matrix-failure-line", BASE.replace('kind = "write_bw"', 'kind = "connection_matrix"\n'
                                         'text = """\nNodes 4\nConnections 1\n'
                                         '0->1 start 0 size 100\nfailure 1 switch 2\n"""'),
     "workload.text: line 4: failure lines are not supported"),
]


@pytest.mark.parametrize(("case", "content", "expected"), BAD_LABS, ids=[c[0] for c in BAD_LABS])
def test_bad_lab_exit_2_one_line(tmp_path: Path, case: str, content: str | bytes,
                                 expected: str) -> None:
    path = tmp_path / f"{case}.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(run, [str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in lines[0], lines[0]
    assert str(path) in lines[0]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


BAD_INVOCATIONS = [
    (["does-not-exist.toml"], "no such lab file, and no bundled lab of that name"),
    (["{dir}"], "is a directory"),
    (["{lab}", "--seed", "abc"], "--seed: expected an integer, got 'abc'"),
    (["{lab}", "--seed", "-1"], "--seed: must not be negative"),
    (["{lab}", "--bin-us", "0"], "--bin-us: must be greater than 0"),
    (["{lab}", "--transport", "mrc,tcp"], "--transport: unknown transport 'tcp'"),
    (["{lab}", "--set", "run.seeds=3"], "run.seeds: unknown key (did you mean 'seed'?)"),
    (["{lab}", "--set", "transport.rc.timeout_exp=big"],
     "transport.rc.timeout_exp: expected an integer, got string 'big'"),
    (["{lab}", "--set", "noequals"], "--set: expected KEY=VALUE"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INVOCATIONS,
                         ids=[a[1][:24] for a in BAD_INVOCATIONS])
def test_bad_invocation_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    lab = tmp_path / "ok.toml"
    lab.write_text(BASE)
    args = [a.format(lab=lab, dir=tmp_path) for a in args]
    result = CliRunner().invoke(run, [*args, "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_lab_error_is_one_line() -> None:
    err = LabError("bad\nthing", "a.b", "f.toml")
    assert str(err) == "f.toml: a.b: bad thing"


def test_traffic_must_start_inside_the_run() -> None:
    with pytest.raises(LabError, match="workload.start_us: 2000 us is not inside the run"):
        validate({"workload": {"kind": "write_bw", "start_us": 2000}, "run": {"duration_us": 100}})
    with pytest.raises(LabError, match="workload.text: line 2: flow 1 starts at 500 us"):
        validate({"workload": {"kind": "connection_matrix",
                               "text": "Nodes 4\n0->1 start 500 size 10\n"},
                  "run": {"duration_us": 100}})
