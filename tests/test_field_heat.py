"""benchmarks/field_heat.py: Cython's struct layout, DHAT's counts and the report that joins
them (the run itself needs valgrind and is not run here)."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load

fh = load("field_heat")

_C = """
struct __pyx_obj_3mrc_3sim_6engine_Handler {
  PyObject_HEAD
  struct __pyx_vtabstruct_3mrc_3sim_6engine_Handler *__pyx_vtab;
};

struct __pyx_obj_3mrc_3sim_5ports_OutPort {
  struct __pyx_obj_3mrc_3sim_6engine_Handler __pyx_base;
  int up;
  PY_LONG_LONG busy_until;
  PyObject *_ring[4];
  double loss_p;
  int trimming;
};
"""


def _structs(tmp_path: Path) -> dict[str, str]:
    c_dir = tmp_path / "build" / "temp.linux" / "cython" / "mrc" / "sim"
    c_dir.mkdir(parents=True, exist_ok=True)
    (c_dir / "ports.c").write_text(_C)
    return fh.c_structs(tmp_path / "build")


def test_layout_follows_c_alignment_through_the_base(tmp_path: Path) -> None:
    members, size, chain = fh.layout(_structs(tmp_path), "3mrc_3sim_5ports_OutPort")
    assert [(m.offset, m.size, m.name) for m in members] == [
        (0, 16, "HEAD"), (16, 8, "__pyx_vtab"), (24, 4, "up"), (32, 8, "busy_until"),
        (40, 32, "_ring"), (72, 8, "loss_p"), (80, 4, "trimming")]
    assert size == 88  # 84 rounded up to the struct's 8-byte alignment
    assert chain == ["3mrc_3sim_5ports_OutPort", "3mrc_3sim_6engine_Handler"]


def test_names_counts_and_the_allocating_class() -> None:
    assert fh.python_name("3mrc_3sim_9pfc_ports_PfcPort") == "mrc.sim.pfc_ports.PfcPort"
    assert fh.python_name("3mrc_9transport_3mrc_7records_Ev") == "mrc.transport.mrc.records.Ev"
    assert fh.decode([3, -4, 0, 7]) == [3, 0, 0, 0, 0, 7]
    frames = ["0x1: malloc", "0x2: PyType_GenericAlloc (typeobject.c:1148)",
              "0x3: __pyx_tp_new_vectorcall_3mrc_3sim_6engine_Handler (in engine.so)",
              "0x4: __Pyx_CallTpnewAsVectorcall (in engine.so)",
              "0x5: __pyx_tp_new_3mrc_3sim_5ports_OutPort (in ports.so)",
              "0x6: type_call (typeobject.c:1091)",
              "0x7: __pyx_tp_new_3mrc_6packet_Packet (in packet.so)"]
    assert fh.allocating_class(frames) == "3mrc_3sim_5ports_OutPort"
    assert fh.allocating_class(frames[:2]) is None


def test_report_puts_each_site_on_its_fields(tmp_path: Path) -> None:
    names = ["0x0: malloc", "0x1: __pyx_tp_new_3mrc_3sim_5ports_OutPort (in ports.so)",
             "0x2: type_call"]
    # a tracked OutPort: 16 bytes of collector header, then the 88-byte struct
    counts = [0] * 16 + [2] * 16 + [0] * 8 + [5] * 4 + [0] * 4 + [1] * 8 + [0] * 48
    counts[16 + 72:16 + 80] = [0xFFFF] * 8  # loss_p at DHAT's cap
    sites = [{"tbk": 3, "rb": 300, "wb": 100, "acc": counts, "fs": [0, 1, 2]},
             {"tbk": 1, "rb": 50, "wb": 0, "acc": [1] * 104, "fs": [0, 1, 2]},
             {"tbk": 9, "rb": 9, "wb": 9, "acc": [1] * 40, "fs": [0, 1, 2]},  # other size
             {"tbk": 1, "rb": 1, "wb": 1, "fs": [0, 1, 2]}]  # over 1 KB: no histogram
    text = fh.report({"ftbl": names, "pps": sites}, _structs(tmp_path), packets=2)
    assert text.splitlines() == [
        "mrc.sim.ports.OutPort: 88 bytes + 16 of collector header, "
        "225 bytes read or written per packet",
        "      0  line 0     24.00   HEAD",
        "     16  line 0      4.00   __pyx_vtab",
        "     24  line 0     12.00   up",
        "     32  line 0      8.00   busy_until",
        "     40  line 0     16.00   _ring",
        "     72  line 1  262144.00+  loss_p",
        "     80  line 1      2.00   trimming"]
    assert fh.report({"ftbl": names, "pps": sites}, _structs(tmp_path), packets=2,
                     classes=["Packet"]) == ""
