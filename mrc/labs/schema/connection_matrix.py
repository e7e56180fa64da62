"""htsim's connection-matrix format: timed and triggered flows for the ``connection_matrix``
workload.

The format, as htsim's own loader reads it (``ConnectionMatrix::load`` in htsim's datacenter
code, which its generators write):

* header lines ``Nodes N``, ``Connections C``, ``Triggers T``, ``Failures F`` (a colon after
  the word is tolerated), blank lines and ``#`` comments anywhere;
* a flow per line, ``SRC->DST`` then ``key value`` pairs: ``id I`` (not 0), ``size BYTES``,
  and either ``start T`` (microseconds) or ``trigger K`` (start when trigger K fires), plus
  ``send_done_trigger K`` / ``recv_done_trigger K`` (activate trigger K when this flow is
  done);
* a trigger per line, ``trigger id K oneshot|multishot|barrier [count N]``: a oneshot starts
  all its flows when activated (htsim asserts on a second activation); a multishot starts its
  next flow, in file order, per activation; a barrier starts all its flows on its N-th
  activation.

Accepted with one difference, said here and in the lab-file reference: a flow is done in this
lab when its receiver has placed and verified every byte, and both ``send_done_trigger`` and
``recv_done_trigger`` activate then. (htsim's sender is done a little later, when the last
ACK comes back: about one one-way delay.)

Refused, with the line number and why: ``prio`` (flows here have no priority: each is its own
connection), ``failure`` lines (htsim's static failures of fat-tree switches from time zero;
this lab schedules failures in time with ``[[fault]]`` entries), unknown keys, and files whose
triggers cannot all fire (a trigger no flow activates, a oneshot activated twice, a barrier
without a count, a flow that waits for itself): htsim would hang or abort on those.

A missing ``Nodes`` header is inferred as the largest node number + 1. Errors are
:class:`LabError` on the lab key that held the text (``workload.file`` or ``workload.text``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from mrc.labs.errors import LabError
from mrc.labs.schema.lab import Flow, TriggerSpec

_HEADER_RE = re.compile(r"(Nodes|Connections|Triggers|Failures)\s*:?\s+(\S+)\s*", re.IGNORECASE)
_FLOW_RE = re.compile(r"(\d+)\s*->\s*(\d+)(.*)")
_NUMBER_KEYS = ("id", "start", "size")
_TRIGGER_KEYS = ("trigger", "send_done_trigger", "recv_done_trigger")
_REFUSED_KEYS = {
    "prio": "flow priorities are not modelled (each flow is its own connection)",
}
TRIGGER_KINDS = ("oneshot", "multishot", "barrier")


class MatrixFile(NamedTuple):
    nodes: int
    flows: list[Flow]
    triggers: list[TriggerSpec]


def parse_connection_matrix(text: str, where: str = "connection matrix") -> MatrixFile:
    """``(nodes, flows, triggers)`` from htsim's connection-matrix format (module docstring)."""
    nodes: int | None = None
    counts: dict[str, tuple[int, int]] = {}  # header word -> (count, line)
    flows: list[Flow] = []
    ids: dict[int, int] = {}
    triggers: dict[int, TriggerSpec] = {}
    seen_flow = False

    def fail(lineno: int, message: str) -> LabError:
        return LabError(f"line {lineno}: {message}", where)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split()[0].lower()
        if word == "failure":
            raise fail(lineno, "failure lines are not supported: they are htsim's static "
                               "failures of fat-tree switches from time zero; schedule "
                               "failures in time with [[fault]] entries")
        if word == "trigger":
            spec = _trigger_line(line.split()[1:], lineno, fail)
            if spec.trigger_id in triggers:
                raise fail(lineno, f"trigger {spec.trigger_id} defined twice (first on line "
                                   f"{triggers[spec.trigger_id].line})")
            triggers[spec.trigger_id] = spec
            continue
        if match := _HEADER_RE.fullmatch(line):
            name, value = match[1].capitalize(), match[2]
            if not value.isdigit():
                raise fail(lineno, f"{name} needs a non-negative integer, got {value!r}")
            if name in counts or (name == "Nodes" and nodes is not None):
                raise fail(lineno, f"{name} given twice")
            if name == "Nodes":
                if seen_flow:
                    raise fail(lineno, "Nodes after the first connection (htsim reads the "
                                       "header first)")
                nodes = int(value)
            else:
                counts[name] = (int(value), lineno)
            continue
        if match := _FLOW_RE.fullmatch(line):
            seen_flow = True
            flows.append(_flow_line(match, lineno, nodes, ids, len(flows), fail))
            continue
        raise fail(lineno, f"cannot read {line[:40]!r} (expected Nodes, Connections, "
                           "Triggers, SRC->DST id I start T size BYTES, or trigger id K TYPE)")
    if not flows:
        raise LabError("no connections", where)
    if nodes is None:  # inferred, as the note in the docstring says
        nodes = max(max(f.src, f.dst) for f in flows) + 1
    for f in flows:
        for end, host in (("source", f.src), ("destination", f.dst)):
            if host >= nodes:
                raise fail(f.line, f"{end} {host} outside 0..{nodes - 1} (Nodes {nodes})")
    for name, got in (("Connections", len(flows)), ("Triggers", len(triggers)),
                      ("Failures", 0)):
        if name in counts and counts[name][0] != got:
            raise LabError(f"'{name} {counts[name][0]}' but {got} "
                           f"{'connection' if name == 'Connections' else name.lower()[:-1]} "
                           "lines", where)
    _check_triggers(flows, triggers, fail)
    return MatrixFile(nodes, flows, sorted(triggers.values(), key=lambda t: t.line))


def _flow_line(match: re.Match[str], lineno: int, nodes: int | None, ids: dict[int, int],
               index: int, fail: Callable[[int, str], LabError]) -> Flow:
    src, dst = int(match[1]), int(match[2])
    fields = _flow_fields(match[3].split(), lineno, fail)
    if nodes is not None:
        for end, host in (("source", src), ("destination", dst)):
            if host >= nodes:
                raise fail(lineno, f"{end} {host} outside 0..{nodes - 1} (Nodes {nodes})")
    if src == dst:
        raise fail(lineno, f"a flow from node {src} to itself")
    if "start" in fields and "trigger" in fields:
        raise fail(lineno, "both 'start' and 'trigger' (a flow starts at a time or on a "
                           "trigger)")
    if "start" not in fields and "trigger" not in fields:
        raise fail(lineno, "missing 'start T' (microseconds) or 'trigger K'")
    if "size" not in fields:
        raise fail(lineno, "missing 'size BYTES'")
    if "trigger" in fields and "id" not in fields:
        raise fail(lineno, "a triggered flow needs an 'id' (htsim's triggers list flow ids)")
    flow_id = int(fields.get("id", index + 1))
    if flow_id == 0:
        raise fail(lineno, "flow id 0 is not allowed (htsim reserves it)")
    if flow_id in ids:
        raise fail(lineno, f"flow id {flow_id} already used on line {ids[flow_id]}")
    ids[flow_id] = lineno
    size = fields["size"]
    if size <= 0 or not float(size).is_integer():
        raise fail(lineno, f"size must be a positive whole number of bytes, got {size:g}")
    trig = {k: int(fields[k]) if k in fields else None for k in _TRIGGER_KEYS}
    return Flow(src=src, dst=dst, size_bytes=int(size),
                start_us=float(fields["start"]) if "start" in fields else None,
                flow_id=flow_id, line=lineno, trigger=trig["trigger"],
                send_done_trigger=trig["send_done_trigger"],
                recv_done_trigger=trig["recv_done_trigger"])


def _flow_fields(tokens: list[str], lineno: int,
                 fail: Callable[[int, str], LabError]) -> dict[str, float]:
    fields: dict[str, float] = {}
    i = 0
    while i < len(tokens):
        key = tokens[i].lower()
        if key in _REFUSED_KEYS:
            raise fail(lineno, f"'{key}' is not supported: {_REFUSED_KEYS[key]}")
        if key not in _NUMBER_KEYS and key not in _TRIGGER_KEYS:
            raise fail(lineno, f"unknown field {tokens[i]!r} (expected id, start, size, "
                               "trigger, send_done_trigger, recv_done_trigger)")
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
        if key in ("id", *_TRIGGER_KEYS) and not value.is_integer():
            raise fail(lineno, f"{key} must be an integer, got {tokens[i + 1]}")
        if key in _TRIGGER_KEYS and value == 0:
            raise fail(lineno, f"{key} 0 is not allowed (htsim reserves it)")
        fields[key] = value
        i += 2
    return fields


def _trigger_line(tokens: list[str], lineno: int,
                  fail: Callable[[int, str], LabError]) -> TriggerSpec:
    trigger_id: int | None = None
    kind: str | None = None
    count: int | None = None
    i = 0
    while i < len(tokens):
        word = tokens[i].lower()
        if word in TRIGGER_KINDS:
            if kind is not None:
                raise fail(lineno, f"trigger type given twice ({kind}, {word})")
            kind = word
            i += 1
            continue
        if word not in ("id", "count"):
            raise fail(lineno, f"unknown trigger field {tokens[i]!r} (expected id K, "
                               "oneshot, multishot, barrier, count N)")
        if i + 1 >= len(tokens) or not tokens[i + 1].isdigit():
            raise fail(lineno, f"'{word}' needs a non-negative integer")
        value = int(tokens[i + 1])
        if word == "id":
            trigger_id = value
        else:
            count = value
        i += 2
    if not trigger_id:
        raise fail(lineno, "a trigger needs 'id K' (not 0)")
    if kind is None:
        raise fail(lineno, f"trigger {trigger_id} has no type (oneshot, multishot or barrier)")
    if kind == "barrier" and not count:
        raise fail(lineno, f"barrier trigger {trigger_id} needs 'count N' (N >= 1 "
                           "activations)")
    if kind != "barrier" and count is not None:
        raise fail(lineno, f"'count' is for barrier triggers, not {kind}")
    return TriggerSpec(trigger_id=trigger_id, kind=kind, count=count or 0, line=lineno)


def done_triggers(flow: Flow) -> list[int]:
    """The triggers a flow activates when it is done, in htsim's order (send, then recv; a
    trigger named by both is activated twice)."""
    return [t for t in (flow.send_done_trigger, flow.recv_done_trigger) if t is not None]


def _check_triggers(flows: list[Flow], triggers: dict[int, TriggerSpec],
                    fail: Callable[[int, str], LabError]) -> None:
    """Every trigger a flow names is defined, and every flow can start (htsim would hang or
    abort otherwise): a dry run of the triggers from the timed flows."""
    for f in flows:
        for key in _TRIGGER_KEYS:
            tid = getattr(f, key)
            if tid is not None and tid not in triggers:
                raise fail(f.line, f"{key} {tid}: no 'trigger id {tid} ...' line defines it")
    activators: dict[int, list[Flow]] = {}
    for f in flows:
        for tid in done_triggers(f):
            activators.setdefault(tid, []).append(f)
    for tid, spec in triggers.items():
        if spec.kind == "oneshot" and len(activators.get(tid, [])) > 1:
            lines = ", ".join(str(f.line) for f in activators[tid][:3])
            raise fail(spec.line, f"oneshot trigger {tid} is activated by several flows (lines "
                                  f"{lines}); htsim aborts on its second activation: use a "
                                  "barrier or multishot trigger")
    started = {f.flow_id for f in flows if f.trigger is None}
    fired: dict[int, int] = {}  # trigger id -> flows of it started so far
    activations: dict[int, int] = {}
    waiting = {tid: [f for f in flows if f.trigger == tid] for tid in triggers}
    changed = True
    while changed:
        changed = False
        activations = {}
        for f in flows:
            if f.flow_id in started:
                for tid in done_triggers(f):
                    activations[tid] = activations.get(tid, 0) + 1
        for tid, spec in triggers.items():
            n = activations.get(tid, 0)
            if spec.kind == "oneshot":
                can = len(waiting[tid]) if n else 0
            elif spec.kind == "multishot":
                can = min(n, len(waiting[tid]))
            else:
                can = len(waiting[tid]) if n >= spec.count else 0
            if can > fired.get(tid, 0):
                for f in waiting[tid][:can]:
                    started.add(f.flow_id)
                fired[tid] = can
                changed = True
    for f in flows:
        if f.flow_id not in started:
            spec = triggers[f.trigger]  # type: ignore[index]
            why = (f"barrier trigger {spec.trigger_id} needs {spec.count} activations"
                   if spec.kind == "barrier" else
                   f"{spec.kind} trigger {spec.trigger_id} is not activated often enough")
            raise fail(f.line, f"flow {f.flow_id} would never start: {why} by flows that "
                               "start (send_done_trigger / recv_done_trigger)")
