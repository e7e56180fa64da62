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
    #: a real-world control timer: a lab's ``run.time_scale`` multiplies it (:func:`scale_timers`)
    real_timer: bool = False

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


#: The class attribute that names a config's real-world timers among fields without a knob.
REAL_TIMERS = "REAL_TIMERS"
#: The config field an encoded real-world timer (an exponent, as ``timeout_exp``) is scaled
#: through: the config multiplies the time it decodes by it (:func:`scaled_ps`).
TIME_SCALE = "time_scale"


def real_timers(config: Any) -> tuple[str, ...]:
    """The fields of ``config`` (class or instance) that are real-world control timers: a
    knob declared with ``real_timer=True``, or a name in the class's ``REAL_TIMERS`` tuple (a
    config whose fields are not knobs). A lab's time scale multiplies exactly these."""
    named = tuple(getattr(config, REAL_TIMERS, ()))
    flagged = tuple(name for name, k in knobs(config).items() if k.real_timer)
    return flagged + tuple(n for n in named if n not in flagged)


def scaled_ps(ps: int, factor: float) -> int:
    """``ps`` x ``factor`` to the nearest picosecond, at least 1 (exactly ``ps`` at 1)."""
    return ps if factor == 1 else max(1, int(round(ps * factor)))


def scale_timers(config: Any, factor: float) -> Any:
    """A copy of the dataclass ``config`` with every real-world timer (:func:`real_timers`)
    multiplied by ``factor``: a ``*_ps`` field to the nearest picosecond (at least 1), a
    ``*_us`` field (or a knob whose unit is us) as a number; None stays None. A timer that is
    not a time (an exponent such as ``timeout_exp``) is scaled through the config's
    ``time_scale`` field, which the config applies to what it decodes; a config with such a
    timer and no ``time_scale`` is a programming error (TypeError). ``factor == 1`` returns
    ``config`` itself."""
    if factor == 1:
        return config
    fields = {f.name for f in dataclasses.fields(config)}
    marks = knobs(config)
    changes: dict[str, Any] = {}
    encoded = False
    for name in real_timers(config):
        value = getattr(config, name)
        unit = marks[name].unit if name in marks else None
        if name.endswith("_ps"):
            changes[name] = None if value is None else scaled_ps(value, factor)
        elif name.endswith("_us") or unit == "us":
            changes[name] = None if value is None else value * factor
        else:
            encoded = True
    if encoded:
        if TIME_SCALE not in fields:
            raise TypeError(f"{type(config).__name__}: an encoded real-world timer needs a "
                            f"{TIME_SCALE} field to be scaled through")
        changes[TIME_SCALE] = getattr(config, TIME_SCALE) * factor
    return dataclasses.replace(config, **changes)


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
