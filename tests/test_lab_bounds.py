"""Issue 16, item 5: every number a lab takes has an upper bound the code supports, checked
before anything runs.

Fast: each key with a stated maximum is refused just above it, on its own dotted key. Slow
(``--runslow``): each key whose reference says "none needed: any value runs" does run at
2**62 (integers) and 1e300 (numbers), or is refused as bad input: never a crash."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from mrc.labs.errors import LabError
from mrc.labs.run.runner import prepare, run_lab
from mrc.labs.schema.fields import Field
from mrc.labs.schema.lab_file import field_tables
from mrc.labs.schema.transport import ANY_VALUE

BASE: dict[str, Any] = {
    "fabric": {"preset": "lab-small"},
    "workload": {"kind": "write_bw", "message_bytes": 65536},
    "transport": {"mrc": {}, "rc": {}},
    "run": {"duration_us": 40, "bin_us": 10},
}


def addressable() -> list[tuple[str, str | None, Field]]:
    """(dotted key, transport to run, field) for the keys of the fabric, run and transport
    tables (workload and fault keys are bounded by the run, tested with their sections)."""
    out = []
    for path, entries in field_tables().items():
        for f in entries:
            if not isinstance(f, Field) or f.type not in ("integer", "number"):
                continue
            if path in ("fabric", "run"):
                out.append((f"{path}.{f.key}", None, f))
            elif m := re.fullmatch(r"transport\.NAME\(kind=(\w+)\)(\.cc)?", path):
                kind, cc = m.group(1), m.group(2) or ""
                out.append((f"transport.{kind}{cc}.{f.key}", kind, f))
    return out


def lab_with(key: str, value: Any) -> dict[str, Any]:
    lab = copy.deepcopy(BASE)
    *parents, last = key.split(".")
    table = lab
    for part in parents:
        table = table.setdefault(part, {})
    table[last] = value
    return lab


@pytest.mark.parametrize(("key", "field"), [(k, f) for k, _, f in addressable()
                                            if f.maximum is not None],
                         ids=[k for k, _, f in addressable() if f.maximum is not None])
def test_just_above_the_maximum_is_refused_on_the_key(key: str, field: Field) -> None:
    assert field.maximum is not None
    value: Any = int(field.maximum) + 1 if field.type == "integer" else field.maximum * 1.5
    with pytest.raises(LabError) as info:
        prepare(lab_with(key, value))
    assert key in str(info.value) and "at most" in str(info.value)


def test_every_number_has_an_upper_bound() -> None:
    for path, entries in field_tables().items():
        for f in entries:
            if isinstance(f, Field) and f.type in ("integer", "number"):
                assert f.upper is not None, f"{path}: {f.key}"


@pytest.mark.slow
@pytest.mark.parametrize(("key", "transport"), [(k, t) for k, t, f in addressable()
                                                if f.limit == ANY_VALUE],
                         ids=[k for k, _, f in addressable() if f.limit == ANY_VALUE])
def test_keys_without_a_maximum_run_at_any_value(key: str, transport: str | None) -> None:
    field = next(f for k, _, f in addressable() if k == key)
    for value in ([2**62] if field.type == "integer" else [1e18, 1e300]):
        try:
            result = run_lab(lab_with(key, value), transports=transport, progress=False)
        except LabError:
            continue  # refused as bad input (a rule on other keys): fine
        assert result.summary["transports"]
