"""Lab keys as data: every key of a lab file is one :class:`Field` in its section's table.

A field says what the key takes (a TOML type word), its unit, its default, its bounds and
one line of documentation; a section reads every value through its field, so what a key
accepts is written once and the messages come from one place. The tables stay queryable
(:func:`mrc.labs.schema.lab_file.field_tables`): a lab-file reference can be generated from them.

Bounds come in two kinds:

* generic bounds (``minimum``, ``gt``...) are checked together with the type and worded by
  :mod:`mrc.labs.schema.checks` ("must not be negative, got -1");
* a :class:`Range` is a transport config's own range check, with the config's wording, on
  the value the config will hold (picoseconds for a ``*_us`` key): read from the config
  field's knob (:mod:`mrc.knobs`) where it has one. The configs keep their
  ``__post_init__`` checks as invariants, but a lab is refused here first, on the exact
  key, before any config object is built.

Conditions on several keys, or on a key and the fabric, are :class:`Rule` entries of a
table; a table is checked in its order, so it also fixes which problem is reported first.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import (
    check_bool,
    check_float,
    check_int,
    check_keys,
    check_list,
    check_str,
    check_table,
)

#: The type words a field may have (TOML's own words, as users read them in messages).
TYPES = ("integer", "number", "boolean", "string", "table", "array")


def type_word(hint: Any) -> str:
    """The type word of a config field's type hint (``X | None`` reads as X: TOML has no
    null, so None is only ever a default)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if args else hint
    return {int: "integer", float: "number", bool: "boolean", str: "string"}[base]


def number(value: float) -> str:
    """A bound as people read it: ``1,099,511,627,776``, ``0.5``, ``1e+09`` for a big float."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a key the file must give.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Derived:
    """A default computed when the lab is read, from other keys or from the fabric."""

    text: str


@dataclass(frozen=True)
class Range:
    """A transport config's own range check in the lab layer, with the config's wording.

    ``problem`` is formatted with ``value``, the value as the config would hold it.
    """

    problem: str
    minimum: float | None = None
    maximum: float | None = None
    gt: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None

    def holds(self, value: Any) -> bool:
        return not ((self.minimum is not None and value < self.minimum)
                    or (self.maximum is not None and value > self.maximum)
                    or (self.gt is not None and value <= self.gt)
                    or (self.lt is not None and value >= self.lt)
                    or (self.choices is not None and value not in self.choices))


@dataclass(frozen=True)
class Field:
    """One lab key: its type, unit, default, bounds and documentation."""

    key: str
    type: str  # one of TYPES
    doc: str
    default: Any = REQUIRED  # a value, REQUIRED, or Derived(how)
    unit: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    gt: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] | None = None
    missing: str = ""  # what the key is, said after "missing required key"
    range: Range | None = None
    #: a bad value (for ``range``) is reported on the enclosing table: the key says what the
    #: whole table configures (``cc.algorithm``)
    report_on_table: bool = False
    config_name: str | None = None  # the transport config field it sets, when named otherwise
    scale: int = 1  # config value = round(lab value x scale): microseconds to picoseconds
    fields: tuple[Field | Rule, ...] | None = None  # a sub-table's own table (``cc``)
    #: a number's upper bound when it is not ``maximum``/``lt``: where it is enforced (a rule
    #: on other keys), or why none is needed. Every numeric key has one or the other.
    limit: str | None = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"{self.key}: unknown field type {self.type!r}")
        bounds = {"minimum": self.minimum, "maximum": self.maximum, "gt": self.gt, "lt": self.lt}
        allowed = {"integer": ("minimum", "maximum", "gt"),
                   "number": ("minimum", "maximum", "gt", "lt")}.get(self.type, ())
        unused = [name for name, bound in bounds.items()
                  if bound is not None and name not in allowed]
        if unused or (self.choices is not None and self.type != "string"):
            raise ValueError(f"{self.key}: a {self.type} field cannot check {unused or 'choices'}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def upper(self) -> str | None:
        """The key's upper bound in words (None for a non-number without one)."""
        if self.maximum is not None:
            return f"<= {number(self.maximum)}"
        if self.lt is not None:
            return f"< {number(self.lt)}"
        if self.range is not None and self.range.maximum is not None:
            return f"<= {number(self.range.maximum / self.scale)}"
        if self.range is not None and self.range.lt is not None:
            return f"< {number(self.range.lt / self.scale)}"
        return self.limit

    def check(self, value: Any, key: str) -> Any:
        """The value with its type and generic bounds checked (a ``range`` comes later)."""
        if self.type == "integer":
            return check_int(value, key, minimum=self.minimum, maximum=self.maximum, gt=self.gt)
        if self.type == "number":
            return check_float(value, key, minimum=self.minimum, maximum=self.maximum,
                               gt=self.gt, lt=self.lt)
        if self.type == "boolean":
            return check_bool(value, key)
        if self.type == "string":
            return check_str(value, key, self.choices)
        if self.type == "table":
            return check_table(value, key)
        return check_list(value, key)

    def read(self, table: Mapping[str, Any], prefix: str, default: Any = REQUIRED) -> Any:
        """The checked value of this key in ``table``; when absent, ``default`` (the caller
        computes a :class:`Derived` one) or the field's own. A default is checked like a
        given value: a derived one (``max_bytes`` = ``min_bytes``) must fit the bounds too."""
        key = f"{prefix}.{self.key}" if prefix else self.key
        if self.key in table:
            value = table[self.key]
        elif default is not REQUIRED:
            value = default
        elif self.required:
            raise LabError(f"missing required key{self.missing}", key)
        elif isinstance(self.default, Derived):
            raise TypeError(f"{key}: a derived default is computed by the caller")
        else:
            value = self.default
        return self.check(value, key)

    def config_value(self, value: Any) -> Any:
        """The value as the transport config holds it (picoseconds for a ``*_us`` key)."""
        return int(round(value * self.scale)) if self.scale != 1 else value


@dataclass(frozen=True)
class Rule:
    """A condition on several keys of a table, or on a key and the fabric.

    ``keys`` are the keys it is about: the first of them that the file sets is blamed (none:
    the table itself). ``holds`` and ``problem`` see the table's :class:`Values`.
    """

    keys: tuple[str, ...]
    doc: str
    holds: Callable[[Values, Any], bool]
    problem: Callable[[Values, Any], str]


class Values(dict[str, Any]):
    """A table's values as the config will hold them: the file's, else the defaults. A
    default is computed when a rule first asks for it, since a fabric-derived default
    (RC's window) is only meaningful once the keys it depends on have been checked."""

    def __init__(self, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        super().__init__(given)
        self._defaults = defaults

    def __missing__(self, key: str) -> Any:
        default = self._defaults[key]
        value = default() if callable(default) else default
        self[key] = value
        return value


def field_map(entries: Iterable[Field | Rule]) -> dict[str, Field]:
    """The fields of a table by key, in table order (its rules left out)."""
    return {e.key: e for e in entries if isinstance(e, Field)}


def check_types(entries: Iterable[Field | Rule], table: Mapping[str, Any],
                prefix: str) -> dict[str, Any]:
    """First pass over a table: the first unknown key, then each value's type and generic
    bounds, in file order; sub-tables recurse. Returns the checked values."""
    fields = field_map(entries)
    check_keys(table, fields, prefix)
    out: dict[str, Any] = {}
    for k, v in table.items():
        f, key = fields[k], f"{prefix}.{k}"
        if f.fields is not None:
            out[k] = check_types(f.fields, check_table(v, key), key)
        else:
            out[k] = f.check(v, key)
    return out


def check_ranges(entries: Iterable[Field | Rule], given: Mapping[str, Any], prefix: str,
                 values: Values, context: Any,
                 sub_values: Callable[[Field, Mapping[str, Any]], Values] | None = None
                 ) -> None:
    """Second pass, in table order: the ranges of the keys the file sets and the rules.

    ``given`` holds the checked values in file order (what blame follows); ``values`` the
    table as the config will hold it; ``sub_values`` gives a sub-table's :class:`Values`.
    """
    for entry in entries:
        if isinstance(entry, Rule):
            if not entry.holds(values, context):
                blamed = next((k for k in given if k in entry.keys), None)
                raise LabError(entry.problem(values, context),
                               f"{prefix}.{blamed}" if blamed else prefix)
            continue
        if entry.key not in given:
            continue
        key = f"{prefix}.{entry.key}"
        if entry.fields is not None:
            sub = given[entry.key]
            inner = sub_values(entry, sub) if sub_values is not None else Values(sub, {})
            check_ranges(entry.fields, sub, key, inner, context)
        elif entry.range is not None:
            value = entry.config_value(given[entry.key])
            if not entry.range.holds(value):
                raise LabError(entry.range.problem.format(value=value),
                               prefix if entry.report_on_table else key)
