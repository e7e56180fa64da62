"""htsim's connection-matrix format: timed flows for the ``connection_matrix`` workload.

Errors are :class:`LabError` on the lab key that held the text (``workload.file`` or
``workload.text``), with the line number.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mrc.labs.errors import LabError
from mrc.labs.model import Flow

_HEADER_RE = re.compile(r"(Nodes|Connections|Triggers|Failures)\s*:?\s+(\S+)\s*", re.IGNORECASE)
_FLOW_RE = re.compile(r"(\d+)\s*->\s*(\d+)(.*)")
_UNSUPPORTED_TOKENS = {
    "trigger": "trigger-started flows",
    "send_done_trigger": "triggers",
    "recv_done_trigger": "triggers",
    "priority": "flow priorities",
}


def parse_connection_matrix(text: str, where: str = "connection matrix") -> tuple[int, list[Flow]]:
    """``(nodes, flows)`` from htsim's connection-matrix format.

    Supported: ``Nodes N``, ``Connections C``, ``Triggers 0``, ``Failures 0`` and lines
    ``SRC->DST [id I] start T size BYTES`` (T in microseconds), blank lines and ``#`` comments.
    Triggers and failures change what the flows mean, so they are refused with their line
    number instead of being skipped (this lab schedules failures with ``[[fault]]``).
    """
    nodes: int | None = None
    connections: int | None = None
    flows: list[Flow] = []
    ids: dict[int, int] = {}

    def fail(lineno: int, message: str) -> LabError:
        return LabError(f"line {lineno}: {message}", where)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split()[0].lower()
        if word in ("trigger", "failure"):
            what = "trigger definitions" if word == "trigger" else "failure lines"
            raise fail(lineno, f"{what} are not supported (use [[fault]] entries for failures; "
                               "flows start at fixed times)")
        if match := _HEADER_RE.fullmatch(line):
            name, value = match[1].capitalize(), match[2]
            if not value.isdigit():
                raise fail(lineno, f"{name} needs a non-negative integer, got {value!r}")
            count = int(value)
            if name == "Nodes":
                if nodes is not None:
                    raise fail(lineno, "Nodes given twice")
                nodes = count
            elif name == "Connections":
                if connections is not None:
                    raise fail(lineno, "Connections given twice")
                connections = count
            elif count:
                raise fail(lineno, f"{name} {count}: {name.lower()} are not supported")
            continue
        if match := _FLOW_RE.fullmatch(line):
            if nodes is None:
                raise fail(lineno, "a connection before the 'Nodes N' header")
            src, dst = int(match[1]), int(match[2])
            fields = _flow_fields(match[3].split(), lineno, fail)
            for end, host in (("source", src), ("destination", dst)):
                if host >= nodes:
                    raise fail(lineno, f"{end} {host} outside 0..{nodes - 1} (Nodes {nodes})")
            if src == dst:
                raise fail(lineno, f"a flow from node {src} to itself")
            if "start" not in fields:
                raise fail(lineno, "missing 'start T' (microseconds)")
            if "size" not in fields:
                raise fail(lineno, "missing 'size BYTES'")
            flow_id = int(fields.get("id", len(flows) + 1))
            if flow_id in ids:
                raise fail(lineno, f"flow id {flow_id} already used on line {ids[flow_id]}")
            ids[flow_id] = lineno
            size = fields["size"]
            if size <= 0 or not float(size).is_integer():
                raise fail(lineno, f"size must be a positive whole number of bytes, got {size:g}")
            flows.append(Flow(src=src, dst=dst, size_bytes=int(size), start_us=float(
                fields["start"]), flow_id=flow_id, line=lineno))
            continue
        raise fail(lineno, f"cannot read {line[:40]!r} (expected Nodes, Connections or "
                           "SRC->DST id I start T size BYTES)")
    if nodes is None:
        raise LabError("missing the 'Nodes N' header", where)
    if not flows:
        raise LabError("no connections", where)
    if connections is not None and connections != len(flows):
        raise LabError(f"'Connections {connections}' but {len(flows)} connection lines", where)
    return nodes, flows


def _flow_fields(tokens: list[str], lineno: int,
                 fail: Callable[[int, str], LabError]) -> dict[str, float]:
    fields: dict[str, float] = {}
    i = 0
    while i < len(tokens):
        key = tokens[i].lower()
        if key in _UNSUPPORTED_TOKENS:
            raise fail(lineno, f"'{key}' is not supported ({_UNSUPPORTED_TOKENS[key]})")
        if key not in ("id", "start", "size"):
            raise fail(lineno, f"unknown field {tokens[i]!r} (expected id, start, size)")
        if i + 1 >= len(tokens):
            raise fail(lineno, f"'{key}' needs a value")
        if key in fields:
            raise fail(lineno, f"'{key}' given twice")
        try:
            value = float(tokens[i + 1])
        except ValueError:
            raise fail(lineno, f"'{key}' needs a number, got {tokens[i + 1]!r}") from None
        if not value >= 0 or value == float("inf"):
            raise fail(lineno, f"'{key}' must be a non-negative number, got {tokens[i + 1]}")
        if key == "id" and not value.is_integer():
            raise fail(lineno, f"flow id must be an integer, got {tokens[i + 1]}")
        fields[key] = value
        i += 2
    return fields
