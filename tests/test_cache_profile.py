"""benchmarks/cache_profile.py: the callgrind reader, Cython's names and the C-to-Python line
map it reports with (the profile itself needs valgrind and is not run here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_scripts import load

cp = load("cache_profile")


def _callgrind(tmp_path: Path, c_file: Path) -> Path:
    text = f"""version: 1
creator: callgrind-3.19.0
positions: line
events: Ir DLmr DLmw
fl=(1) {c_file}
fn=(1) __pyx_f_3mrc_3sim_5ports_4Fifo_popleft
10 100 2 1
+2 50 1
fi=(2) /usr/include/python3.11/object.h
502 5 0 3
fe=(1)
cfl=(3) /lib/object.c
cfn=(2) PyObject_IsTrue
calls=1 0
12 999 999 999
* 1 0 0
fl=(3)
fn=(2)
5 20 4 0
"""
    path = tmp_path / "callgrind.out"
    path.write_text(text)
    return path


def _c_file(tmp_path: Path) -> Path:
    lines = ["/* generated */"] * 20
    lines[7] = '/* "mrc/sim/ports.py":83'
    lines[10] = '  /* "mrc/sim/ports.py":84'
    path = tmp_path / "ports.c"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_self_costs_by_function_and_line(tmp_path: Path) -> None:
    c_file = _c_file(tmp_path)
    profile = cp.parse_callgrind(_callgrind(tmp_path, c_file))
    assert profile.events == ["Ir", "DLmr", "DLmw"]
    # the call's inclusive cost (999s) is not the caller's; "+2" and "*" are relative
    assert profile.by_function["__pyx_f_3mrc_3sim_5ports_4Fifo_popleft"] == [156, 3, 4]
    assert profile.by_function["PyObject_IsTrue"] == [20, 4, 0]
    assert profile.by_line[str(c_file), 10, ""] == [100, 2, 1]
    assert profile.by_line[str(c_file), 12, ""] == [51, 1, 0]
    # inlined from a header: kept with the function it was inlined into
    assert profile.by_line["/usr/include/python3.11/object.h", 502,
                           "__pyx_f_3mrc_3sim_5ports_4Fifo_popleft"] == [5, 0, 3]
    assert profile.total("DLmr") == 7 and profile.total("Ir") == 176


def test_report_per_packet_with_python_names_and_lines(tmp_path: Path) -> None:
    c_file = _c_file(tmp_path)
    text = cp.report(cp.parse_callgrind(_callgrind(tmp_path, c_file)), packets=2)
    assert text.startswith("2 delivered packets; per packet: 88 instructions, "
                           "5.5 last-level data misses (3.5 reads, 2.0 writes)")
    assert "      3.50    1.50    2.00       78.0  mrc.sim.ports.Fifo.popleft" in text
    assert "      1.50    1.00    0.50       50.0  mrc/sim/ports.py:83" in text
    assert "      0.50    0.50    0.00       25.5  mrc/sim/ports.py:84" in text
    assert "object.h:502 in mrc.sim.ports.Fifo.popleft" in text


def test_python_names() -> None:
    assert cp.python_name("__pyx_f_3mrc_3sim_6engine_9Simulator__loop") == \
        "mrc.sim.engine.Simulator._loop"
    assert cp.python_name("__pyx_f_3mrc_9transport_3mrc_7records_new_seg") == \
        "mrc.transport.mrc.records.new_seg"
    assert cp.python_name("__pyx_tp_dealloc_3mrc_6packet_Packet") == \
        "mrc.packet.Packet (tp_dealloc)"
    assert cp.python_name("_PyObject_Malloc") == "_PyObject_Malloc"


def test_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "not.out"
    bad.write_text("hello\n")
    with pytest.raises(ValueError, match="not a callgrind output file"):
        cp.parse_callgrind(bad)
    instr = tmp_path / "instr.out"
    instr.write_text("positions: instr line\nevents: Ir\n")
    with pytest.raises(ValueError, match="need --dump-line only"):
        cp.parse_callgrind(instr)
