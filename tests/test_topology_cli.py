"""``mrc-lab fabric``: the Fairwater oracle, JSON keys, paths, and one-line errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mrc.cli import main
from topology.counts import COUNT_KEYS
from topology.spec import preset
from topology.tables import walk
from topology.usid import parse_address


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["fabric", *args])
    return result.exit_code, result.stdout, result.stderr


def test_fairwater_json_oracle() -> None:
    code, out, err = run("--preset", "fairwater", "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == list(COUNT_KEYS)
    assert data == {"planes": 8, "hosts": 131072, "t0_per_plane": 512, "t1_per_plane": 256,
                    "switches": 6144, "links": 2097152, "paths_same_t0": 8,
                    "paths_between_t0s": 2048, "nic_gbps": 800, "bisection_tbps": 52428.8}


def test_fairwater_table() -> None:
    code, out, _ = run("--preset", "fairwater")
    assert code == 0
    for text in ("6,144", "2,097,152", "2,048", "800", "52,428.8", "131,072"):
        assert text in out
    lines = out.splitlines()[1:]
    assert len(lines) == len(COUNT_KEYS)
    assert len({line.rindex("(") for line in lines}) == 1  # aligned columns


def test_explicit_spec_and_override() -> None:
    code, out, _ = run("--planes", "4", "--hosts", "8", "--hosts-per-t0", "2",
                       "--t1-per-plane", "4", "--link-gbps", "400", "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["switches"], data["links"], data["nic_gbps"], data["bisection_tbps"]) == (
        4 * (4 + 4), 8 * 4 + 4 * 4 * 4, 1600, 8 * 1600 / 2000)
    code, out, _ = run("--preset", "fairwater", "--t1-per-plane", "128", "--json")
    assert code == 0 and json.loads(out)["bisection_tbps"] == 26214.4


def test_paths_json_walks() -> None:
    code, out, _ = run("--preset", "fairwater", "--paths", "h0", "h300", "--json")
    assert code == 0
    found = json.loads(out)
    assert len(found) == 2048
    assert set(found[0]) == {"src", "dst", "plane", "t1", "ev", "address", "hops", "links"}
    assert found[5]["address"] == "fcbb:0:1000:2005:1001:e02c::"
    spec = preset("fairwater")
    for p in found[::97]:
        assert list(walk(spec, parse_address(p["address"]), 0).hops) == p["hops"]


def test_paths_table() -> None:
    code, out, _ = run("--preset", "lab-small", "--paths", "h0", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "4 paths h0 -> h1 (same T0)"
    assert len(lines) == 2 + 4
    assert "fcbb:3:1000:e001::" in lines[-1] and "h0.p3 > p3.t0.0 > h1.p3" in lines[-1]


@pytest.mark.parametrize(("args", "message"), [
    (("--preset", "nope"), "unknown fabric preset 'nope'"),
    (("--hosts", "10", "--hosts-per-t0", "4"), "must be a multiple of hosts_per_t0"),
    (("--preset", "fairwater", "--switch-radix", "300"), "switch_radix is 300"),
    (("--preset", "fairwater", "--paths", "h0", "h131072"), "h131072"),
    (("--paths", "h0", "p0.t0.1"), "not a host"),
    (("--paths", "h2", "h2"), "itself"),
    (("--paths", "h2", "bogus"), "not an element name"),
])
def test_bad_input_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    assert err.startswith("mrc-lab: error: ") and message in err  # as every command says it
    assert err.count("\n") == 1 and "Traceback" not in err
