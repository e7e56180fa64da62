"""Value checks for lab input: each returns the checked value or raises a :class:`LabError`
that names the dotted key and words the problem the way the user wrote the value.

TOML has its own words for types (integer, float, table...), so messages use them, not
Python's. These are the primitives the field tables (:mod:`mrc.labs.schema.fields`) run; sweeps and
the command line use them directly for their own keys and options.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Any

from mrc.labs.errors import LabError
from topology import names
from topology.spec import FabricSpec

#: Lab, sweep and transport names: they name folders, so no spaces, dots or slashes.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def toml_type(value: Any) -> str:
    """The TOML word for a value's type, as users see it in their file."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return "date/time" if hasattr(value, "isoformat") else type(value).__name__


def show(value: Any) -> str:
    """A value as quoted in a message, cut short so one line stays one line."""
    text = value.isoformat() if hasattr(value, "isoformat") else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def show_bound(x: float) -> str:
    """A bound as people write it: 4096, 1,099,511,627,776, 0.5."""
    if float(x).is_integer():
        return f"{int(x):,}" if abs(x) >= 10_000 else str(int(x))
    return f"{x:g}"


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def check_bounds(value: float, key: str, *, minimum: float | None = None,
                 maximum: float | None = None, gt: float | None = None,
                 lt: float | None = None) -> None:
    if minimum is not None and value < minimum:
        word = "negative" if minimum == 0 else f"below {show_bound(minimum)}"
        raise LabError(f"must not be {word}, got {show(value)}", key)
    if gt is not None and value <= gt:
        raise LabError(f"must be greater than {show_bound(gt)}, got {show(value)}", key)
    if maximum is not None and value > maximum:
        raise LabError(f"must be at most {show_bound(maximum)}, got {show(value)}", key)
    if lt is not None and value >= lt:
        raise LabError(f"must be less than {show_bound(lt)}, got {show(value)}", key)


def check_int(value: Any, key: str, *, minimum: float | None = None,
              maximum: float | None = None, gt: float | None = None) -> int:
    """An integer; an integral float (``1e6``) is accepted because TOML has no int exponent."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LabError(f"expected an integer, got {toml_type(value)} {show(value)}", key)
    check_bounds(value, key, minimum=minimum, maximum=maximum, gt=gt)
    return value


def check_float(value: Any, key: str, *, minimum: float | None = None,
                maximum: float | None = None, gt: float | None = None,
                lt: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LabError(f"expected a number, got {toml_type(value)} {show(value)}", key)
    if not math.isfinite(value):
        raise LabError(f"must be a finite number, got {value}", key)
    check_bounds(value, key, minimum=minimum, maximum=maximum, gt=gt, lt=lt)
    return float(value)


def check_bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise LabError(f"expected true or false, got {toml_type(value)} {show(value)}", key)
    return value


def check_str(value: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise LabError(f"expected a string, got {toml_type(value)} {show(value)}", key)
    if choices is not None and value not in choices:
        raise LabError(f"{value!r} is not one of {', '.join(choices)}{suggest(value, choices)}",
                       key)
    return value


def check_list(value: Any, key: str, *, min_len: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise LabError(f"expected an array, got {toml_type(value)} {show(value)}", key)
    if len(value) < min_len:
        raise LabError(f"needs at least {min_len} entr{'y' if min_len == 1 else 'ies'}", key)
    return value


def check_table(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LabError(f"expected a table, got {toml_type(value)} {show(value)}", key)
    return value


def check_host(value: Any, key: str, spec: FabricSpec) -> int:
    """A host as an index (``3``) or a name (``"h3"``)."""
    if isinstance(value, str):
        try:
            element = names.resolve(spec, value)
        except names.UnknownElementError as exc:
            raise LabError(str(exc), key) from None
        if element.kind != names.HOST:
            raise LabError(f"{value!r} is a {element.kind}, expected a host like 'h3'", key)
        return int(element.index)  # type: ignore[arg-type]
    host = check_int(value, key, minimum=0)
    if host >= spec.hosts:
        raise LabError(f"host {host} outside 0..{spec.hosts - 1} (fabric has {spec.hosts} hosts)",
                       key)
    return host


def check_hosts(value: Any, key: str, spec: FabricSpec, *, min_len: int = 2) -> tuple[int, ...]:
    items = check_list(value, key, min_len=min_len)
    hosts = tuple(check_host(v, f"{key}.{i}", spec) for i, v in enumerate(items))
    seen: dict[int, int] = {}
    for i, host in enumerate(hosts):
        if host in seen:
            raise LabError(f"host h{host} is listed twice (entries {seen[host]} and {i})", key)
        seen[host] = i
    return hosts


def suggest(word: str, options: Any) -> str:
    """`` (did you mean 'seed'?)`` when one option is close to ``word``, else nothing."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(table: Mapping[str, Any], allowed: Any, prefix: str) -> None:
    """Refuse the first key (in file order) that is not in ``allowed``."""
    for k in table:
        if k not in allowed:
            known = ", ".join(sorted(allowed))
            raise LabError(f"unknown key{suggest(k, allowed)}; known keys: {known}",
                           f"{prefix}.{k}" if prefix else k)


def require(table: Mapping[str, Any], k: str, prefix: str, what: str = "") -> Any:
    """``table[k]``, or a "missing required key" error (``what`` says what it is)."""
    if k not in table:
        raise LabError(f"missing required key{what}", f"{prefix}.{k}" if prefix else k)
    return table[k]
