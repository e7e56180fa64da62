"""The lab-file reference, generated from the schema itself.

Every section, key, type, unit, default and bound comes from the field tables
(:func:`mrc.labs.schema.lab_file.field_tables`), the fault kinds with their targets from
:mod:`mrc.labs.schema.faults`, the rules from the tables' :class:`~mrc.labs.schema.fields.Rule`
entries. ``mrc-lab labs --reference`` prints it; ``docs/lab-reference.md`` is the same text
(a test regenerates it and fails on any difference, and fails when a key of the schema is
missing from it). To refresh the page: ``mrc-lab labs --reference > docs/lab-reference.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mrc.labs.schema import connection_matrix
from mrc.labs.schema import faults as fault_section
from mrc.labs.schema import workload as workload_section
from mrc.labs.schema.fields import REQUIRED, Derived, Field, Rule, number
from mrc.labs.schema.lab_file import field_tables

_TITLES = {
    "": "Top level",
    "fabric": "`[fabric]`",
    "run": "`[run]`",
    "routing": "`[routing]`",
}
_TARGET_WORDS = {"link": "link", "host": "host", "nic_port": "NIC port", "t0": "T0 switch",
                 "t1": "T1 switch"}


def _title(path: str) -> str:
    if path in _TITLES:
        return _TITLES[path]
    if m := re.fullmatch(r"workload\(kind=(\w+)\)", path):
        return f'`[workload]` kind = "{m[1]}"'
    if m := re.fullmatch(r"transport\.NAME\(kind=(\w+)\)\.cc", path):
        return f'`[transport.NAME.cc]` (kind = "{m[1]}")'
    if m := re.fullmatch(r"transport\.NAME\(kind=(\w+)\)", path):
        return f'`[transport.NAME]` kind = "{m[1]}"'
    if m := re.fullmatch(r"fault\.N\(kind=(\w+)\)", path):
        return f'`[[fault]]` kind = "{m[1]}"'
    return f"`{path}`"


def _default(f: Field) -> str:
    if f.default is REQUIRED:
        return "**required**"
    if isinstance(f.default, Derived):
        return f"derived: {f.default.text}"
    if f.default is None:
        return "none"
    if isinstance(f.default, bool):
        return "true" if f.default else "false"
    if isinstance(f.default, str):
        return f'"{f.default}"'
    if isinstance(f.default, dict) and not f.default:
        return "{}"
    if isinstance(f.default, list) and not f.default:
        return "[]"
    return number(f.default) if isinstance(f.default, int | float) else str(f.default)


def _bounds(f: Field) -> str:
    parts = []
    if f.minimum is not None:
        parts.append(f">= {number(f.minimum)}")
    if f.gt is not None:
        parts.append(f"> {number(f.gt)}")
    if f.range is not None:
        r = f.range
        for word, value in (("minimum", r.minimum), ("gt", r.gt)):
            if value is not None:
                parts.append(f"{'>=' if word == 'minimum' else '>'} {number(value / f.scale)}")
    upper = f.upper
    if upper is not None:
        parts.append(upper)
    if f.choices is not None:
        parts.append("one of " + ", ".join(f"`{c}`" for c in f.choices))
    if f.range is not None and f.range.choices is not None:
        parts.append("one of " + ", ".join(f"`{c}`" for c in f.range.choices))
    if "> 0" in parts and ">= 0" in parts:
        parts.remove(">= 0")
    return "; ".join(dict.fromkeys(parts)) or "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(path: str, entries: Iterable[Field | Rule]) -> list[str]:
    lines = ["| key | type | unit | default | bounds | meaning |", "|---|---|---|---|---|---|"]
    rules = []
    for e in entries:
        if isinstance(e, Rule):
            rules.append(e)
            continue
        lines.append(f"| `{e.key}` | {e.type} | {e.unit or '-'} | {_cell(_default(e))} | "
                     f"{_cell(_bounds(e))} | {_cell(e.doc)} |")
    if rules:
        lines.append("")
        lines.append("Rules on several keys: " + "; ".join(
            f"{r.doc} ({', '.join(f'`{k}`' for k in r.keys)})" for r in rules) + ".")
    return lines


def _targets(kind: str) -> str:
    return ", ".join(_TARGET_WORDS.get(t, t) for t in fault_section.FAULT_TARGETS[kind])


def reference() -> str:
    """The whole reference as Markdown."""
    out = [
        "# Lab file reference",
        "",
        "Generated from the schema by `mrc-lab labs --reference` (the same text as this page; "
        "a test fails when they differ or when a key is missing). A lab file is TOML; units "
        "are in the key names; every key below is addressable by its dotted path with "
        "`--set` and in sweeps (`transport.mrc.ev_count`, `fault.0.at_us`). Bad input is "
        "refused before anything runs with one line, `FILE: dotted.key: problem`, exit "
        "status 2.",
        "",
        "Bounds: `>=`/`>` and `<=`/`<` are checked on the key itself; an upper bound in words "
        "is enforced by a rule on other keys, or says why none is needed.",
        "",
    ]
    tables = field_tables()
    fault_paths = [p for p in tables if p.startswith("fault.")]
    for path, entries in tables.items():
        if path.startswith("fault."):
            continue
        out.append(f"## {_title(path)}")
        out.append("")
        if path == "workload(kind=connection_matrix)":
            out.append("The matrix is htsim's connection-matrix format; see "
                       "[connection-matrix files](#connection-matrix-files).")
            out.append("")
        out.extend(_table(path, entries))
        out.append("")
        if path == "run":
            out.extend(_faults(tables, fault_paths))
    out.extend(_matrix_section())
    return "\n".join(out).rstrip() + "\n"


def _faults(tables: dict[str, Any], fault_paths: list[str]) -> list[str]:
    out = ["## `[[fault]]` entries", "",
           "Any number of entries, each a `kind`, a `target` (an element name or a selector, "
           "see `topology.names`) and a time. The kinds and what they may target:", "",
           "| kind | target | keys beyond kind, target, at_us |", "|---|---|---|"]
    for kind in fault_section.FAULT_KINDS:
        keys = ", ".join(f"`{k}`" for k in fault_section.FAULT_KEYS[kind]) or "-"
        out.append(f"| `{kind}` | {_targets(kind)} | {keys} |")
    out.append("")
    for path in fault_paths:
        out.append(f"### {_title(path)}")
        out.append("")
        out.extend(_table(path, tables[path]))
        out.append("")
    return out


def _matrix_section() -> list[str]:
    keys = ", ".join(f"`{k}`" for k in (*connection_matrix._NUMBER_KEYS,
                                        *connection_matrix._TRIGGER_KEYS))
    refused = "; ".join(f"`{k}`: {why}" for k, why in connection_matrix._REFUSED_KEYS.items())
    return [
        "## Connection-matrix files",
        "",
        "htsim's format, as its own loader reads it. Header lines `Nodes N` (inferred as the "
        "largest node + 1 when missing), `Connections C`, `Triggers T`, `Failures F`; `#` "
        "comments. A flow per line: `SRC->DST` then " + keys + " (`start` in microseconds, "
        "or `trigger K` instead). A trigger per line: `trigger id K "
        + "|".join(connection_matrix.TRIGGER_KINDS) + " [count N]` (count for barriers). "
        "Both `send_done_trigger` and `recv_done_trigger` activate when the flow is done, "
        "which here is when its receiver has placed and verified every byte (htsim's "
        "sender is done about one one-way delay later). Refused with the line number: "
        + refused + "; `failure` lines (schedule failures with `[[fault]]`); triggers that "
        "cannot all fire. At most "
        f"{workload_section.MAX_MESSAGE_BYTES:,} bytes per flow.",
        "",
    ]


def schema_keys() -> list[str]:
    """Every (section, key) of the schema as ``section: key`` (what the reference must name)."""
    out = []
    for path, entries in field_tables().items():
        for e in entries:
            if isinstance(e, Field):
                out.append(f"{path}: {e.key}")
    return out
