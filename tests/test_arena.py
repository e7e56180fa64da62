"""Huge-page arenas (mrc/sim/arena.py): off unless asked for or when it cannot be, and when on, the
small objects a run makes live in the region, on huge pages, and survive being freed and made
again. Each case that switches allocators runs in a child process (the switch is for good)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mrc import _build
from mrc.sim import arena


def _child(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter (same mrc); it prints one JSON document last."""
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, arena.ENV: "", **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


STATE = ("import json, mrc._build as b; from mrc.sim import arena as a; "
         "on = a.use_huge_page_arenas(); "
         "print(json.dumps([on, a.use_huge_page_arenas(), a.huge_page_arenas_active(), "
         "a.status(), a.region()['size'], b.describe()]))")

compiled_with_thp = pytest.mark.skipif(
    _build.BUILD != "compiled" or arena._thp_mode() not in ("always", "madvise")
    or os.environ.get("PYTHONMALLOC", "").startswith("malloc"),
    reason="needs the compiled build, pymalloc and transparent huge pages")


def test_a_second_call_changes_nothing() -> None:
    first = arena.use_huge_page_arenas()
    assert arena.use_huge_page_arenas() == first == arena.huge_page_arenas_active()
    if first:
        assert arena.status() == "on" and arena.region()["size"] >= 1 << 30
    else:
        assert arena.status().startswith("off (") and arena.region()["size"] == 0


def test_off_when_turned_off() -> None:
    for value in ("0", "yes"):
        on, again, active, status, size, described = _child(STATE, **{arena.ENV: value})
        assert (on, again, active, size) == (False, False, False, 0)
        if _build.BUILD == "compiled":
            assert status == f"off ({arena.ENV}={value})"
            assert described.endswith(f"huge-page arenas off ({arena.ENV}={value})")
        else:
            assert status == "off (pure Python)"


@compiled_with_thp
def test_on_by_default_and_when_asked_for() -> None:
    for value in ("", "1"):
        on, again, active, status, size, described = _child(STATE, **{arena.ENV: value})
        assert (on, again, active) == (True, True, True) and size >= 1 << 30
        assert status == "on" and described.endswith("huge-page arenas on")


def test_pure_python_never_uses_it() -> None:
    on, again, active, status, size, described = _child(STATE, **{_build.ENV_PURE: "1",
                                                                   arena.ENV: "1"})
    assert (on, again, active, size) == (False, False, False, 0)
    assert status == "off (pure Python)"
    assert described.startswith("pure Python") and "arenas" not in described


# objects made before the switch (old arenas), freed after it; then a few hundred thousand
# made in the region, freed, and made again from the arenas the region kept
REGION = """
import json, re, time
from mrc.sim import arena as a

def huge_kb():
    with open("/proc/self/smaps_rollup") as fh:
        return int(re.search(r"AnonHugePages:\\s+(\\d+) kB", fh.read()).group(1))

def inside(objs, r):
    return sum(r["start"] <= id(o) < r["start"] + r["size"] for o in objs)

before = [(i, str(i)) for i in range(100_000)]
kb0 = huge_kb()
on = a.use_huge_page_arenas()
del before
made = [[i, float(i)] for i in range(300_000)]
r = a.region()
kb1, used1, n_in = huge_kb(), r["used"], inside(made, r)
del made
freed = a.region()["free_arenas"]
again = [[i, float(i)] for i in range(300_000)]
ok = all(x[0] == i and x[1] == i for i, x in enumerate(again))
r = a.region()
deadline = time.monotonic() + 5  # the populate thread catches up (at about 1 GB/s)
while (a.region()["prefaulted"] <= r["used"] < r["size"]
       and time.monotonic() < deadline):
    time.sleep(0.01)
r["prefaulted"] = a.region()["prefaulted"]
print(json.dumps({"on": on, "kb0": kb0, "kb1": kb1, "used1": used1, "in": n_in,
                  "freed": freed, "used2": r["used"], "in2": inside(again, r),
                  "free2": r["free_arenas"], "fallbacks": r["fallbacks"], "ok": ok,
                  "prefaulted": r["prefaulted"], "prefaulting": r["prefaulting"]}))
"""


@compiled_with_thp
def test_objects_live_on_huge_pages_and_arenas_are_reused() -> None:
    got = _child(REGION, **{arena.ENV: "1"})
    assert got["on"] and got["ok"]
    # nearly every list made after the switch (the rest filled older arenas' free pools)
    assert got["in"] > 270_000 and got["in2"] > 270_000, got
    assert got["kb1"] - got["kb0"] >= 2048, got  # the region is backed by huge pages
    assert got["freed"] > 0  # pymalloc gave arenas back; the region kept them
    # and handed them out again (the second batch needs at most a few more)
    assert got["free2"] < got["freed"] and got["used2"] < 1.1 * got["used1"], got
    assert got["fallbacks"] == 0
    # the populate thread ran ahead of the arenas handed out, by at most its margin
    assert got["prefaulting"] == 1
    assert got["used2"] < got["prefaulted"] <= got["used2"] + (34 << 20), got


@compiled_with_thp
def test_a_used_up_region_falls_back_to_the_previous_allocator() -> None:
    # a 4 MiB region (two huge pages) holds 4 arenas; the rest come from pymalloc's own
    code = REGION.replace("on = a.use", "a._RESERVE = (4 << 20,); on = a.use")
    got = _child(code, **{arena.ENV: "1"})
    assert got["on"] and got["ok"]
    assert got["used1"] == got["used2"] == 4 << 20, got
    assert 0 < got["in"] < 300_000 and got["fallbacks"] > 0, got


# a child made by fork has no populate thread: it makes and frees objects in the region (its
# own copy) all the same, and its parent's thread goes on
FORKED = """
import json, os
from mrc.sim import arena as a
on = a.use_huge_page_arenas()
before = a.region()["prefaulting"]
pid = os.fork()
if pid == 0:
    made = [[i, float(i)] for i in range(300_000)]
    ok = all(x[0] == i for i, x in enumerate(made)) and a.region()["prefaulting"] == 0
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
made = [[i, float(i)] for i in range(300_000)]
print(json.dumps({"on": on, "before": before, "child": os.waitstatus_to_exitcode(status),
                  "after": a.region()["prefaulting"], "used": a.region()["used"]}))
"""


@compiled_with_thp
def test_a_forked_child_allocates_without_the_populate_thread() -> None:
    got = _child(FORKED)
    assert got["on"] and got["before"] == got["after"] == 1, got
    assert got["child"] == 0 and got["used"] > 0, got
