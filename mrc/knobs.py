"""A config knob described once, on its dataclass field: what it means, its unit, its range
and the words that refuse a value outside it.

A transport config declares a knob as ``timeout: int = knob(20, "what it is", minimum=0,
maximum=24)``: the type and the default are the dataclass field's, the rest is a
:class:`Knob` in the field's metadata. The config checks its values against its knobs
(:func:`check_knobs`, from ``__post_init__``), and the labs layer derives each lab key from
the same metadata (type, unit, default, bounds, documentation), so a knob's range and its
wording are written in one place.

Plain definitions that import nothing of mrc: every layer may use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The metadata key of a knob on a dataclass field.
KNOB = "knob"


def _bound(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Knob:
    """What a config field means and which values it takes.

    ``problem`` words a value outside the range (``{value}`` is the value; default: worded
    from the bounds); ``none`` says what a ``None`` default stands for (the value is derived
    when the config is used). ``unit`` is for a field whose name does not say it.
    """

    doc: str
    unit: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    gt: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    problem: str | None = None
    none: str | None = None

    @property
    def bounded(self) -> bool:
        """Whether the knob has a range to check."""
        return any(b is not None for b in (self.minimum, self.maximum, self.gt, self.lt,
                                           self.choices))

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is in range (None, where the field allows it, always is)."""
        if value is None:
            return True
        return not ((self.minimum is not None and value < self.minimum)
                    or (self.maximum is not None and value > self.maximum)
                    or (self.gt is not None and value <= self.gt)
                    or (self.lt is not None and value >= self.lt)
                    or (self.choices is not None and value not in self.choices))

    def words(self, name: str) -> str:
        """The problem of a value out of range, ``{value}`` still to be filled in."""
        if self.problem is not None:
            return self.problem
        lo, hi = self.minimum, self.maximum
        if self.choices is not None:
            return (f"{name} must be one of {', '.join(map(str, self.choices))}, "
                    "got {value!r}")
        if lo is not None and hi is not None:
            return f"{name} must be in {_bound(lo)}..{_bound(hi)}, got {{value}}"
        if self.gt == 0 and (lo, hi, self.lt) == (None, None, None):
            return f"{name} must be positive"
        if lo is not None and (hi, self.gt, self.lt) == (None, None, None):
            return f"{name} must not be negative" if lo == 0 else f"{name} must be >= {_bound(lo)}"
        parts = [f"{op} {_bound(b)}" for op, b in ((">=", lo), ("<=", hi), (">", self.gt),
                                                    ("<", self.lt)) if b is not None]
        return f"{name} must be {' and '.join(parts)}, got {{value!r}}"


def knob(default: Any = dataclasses.MISSING, doc: str = "", *,
         default_factory: Callable[[], Any] | None = None, **described: Any) -> Any:
    """A dataclass field with a default and its :class:`Knob` (``described``: its fields)."""
    meta = {KNOB: Knob(doc, **described)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def knobs(config: Any) -> dict[str, Knob]:
    """Every knob of a config class (or instance), field name -> knob, in field order."""
    return {f.name: f.metadata[KNOB] for f in dataclasses.fields(config) if KNOB in f.metadata}


def knob_problem(config: Any, name: str) -> str:
    """How ``config`` refuses a value of knob ``name``: its ``KNOB_PREFIX`` (the class's name
    in some configs' messages) and the knob's words, ``{value}`` still to be filled in."""
    cls = config if isinstance(config, type) else type(config)
    return getattr(cls, "KNOB_PREFIX", "") + knobs(cls)[name].words(name)


def check_knobs(config: Any) -> None:
    """Raise :class:`ValueError` for the first knob of ``config``, in field order, whose
    value is out of its range."""
    for name, k in knobs(config).items():
        value = getattr(config, name)
        if k.bounded and not k.holds(value):
            raise ValueError(knob_problem(config, name).format(value=value))
