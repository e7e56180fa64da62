"""A transport knob is written once (mrc.knobs): the config checks its values from the knob,
and the lab key of ``[transport.NAME]`` is derived from it, so a new knob needs nothing in
the labs layer. A made-up config stands for a transport's here."""

from __future__ import annotations

import dataclasses

import pytest

from mrc.knobs import Knob, check_knobs, knob, knob_problem, knobs
from mrc.labs.schema import transport as transport_section
from mrc.labs.schema.fields import Derived, Field, Rule
from mrc.transport.mrc.config import MrcConfig
from mrc.transport.rc.config import RcConfig
from mrc.units import PS_PER_US


@dataclasses.dataclass(frozen=True)
class _Config:
    KNOB_PREFIX = "_Config: "

    depth: int = knob(4, "own model: how deep", minimum=1, maximum=64)
    hold_ps: int = knob(3 * PS_PER_US, "own model: how long", gt=0)
    ratio: float = knob(0.5, "own model: a share", minimum=0, problem="ratio is {value}?")
    limit: int | None = knob(None, "own model: derived when None", minimum=0, none="depth x 2")
    plain: int = 7  # not a knob: not a lab key

    def __post_init__(self) -> None:
        check_knobs(self)


def test_a_config_checks_its_knobs_in_their_own_words() -> None:
    _Config()
    with pytest.raises(ValueError, match=r"^_Config: depth must be in 1\.\.64, got 65$"):
        _Config(depth=65)
    with pytest.raises(ValueError, match="^_Config: hold_ps must be positive$"):
        _Config(hold_ps=0)
    with pytest.raises(ValueError, match=r"^_Config: ratio is -1\?$"):
        _Config(ratio=-1)
    _Config(limit=None)
    with pytest.raises(ValueError, match="^_Config: limit must not be negative$"):
        _Config(limit=-1)
    assert list(knobs(_Config)) == ["depth", "hold_ps", "ratio", "limit"]
    assert knob_problem(_Config, "depth") == "_Config: depth must be in 1..64, got {value}"


def test_a_knob_becomes_a_lab_key_with_nothing_restated() -> None:
    table = transport_section._knob_table(_Config)
    fields = {f.key: f for f in table if isinstance(f, Field)}
    assert list(fields) == ["depth", "hold_us", "ratio", "limit"]
    depth = fields["depth"]
    assert (depth.type, depth.default, depth.doc) == ("integer", 4, "own model: how deep")
    assert depth.range is not None and (depth.range.minimum, depth.range.maximum) == (1, 64)
    assert depth.range.problem == "_Config: depth must be in 1..64, got {value}"
    hold = fields["hold_us"]  # picoseconds in the config, microseconds in the lab
    assert (hold.type, hold.unit, hold.default, hold.config_name) == ("number", "us", 3.0,
                                                                       "hold_ps")
    assert hold.range is not None and hold.range.gt == 0
    assert fields["limit"].default == Derived("depth x 2")


def test_the_lab_places_its_own_keys_and_rules_around_the_knobs() -> None:
    rule = Rule(("depth",), "a rule", lambda v, s: True, lambda v, s: "")
    own = Field("extra", "boolean", "a key only the lab has", default=True)
    table = transport_section._knob_table(_Config, first=(own,), after={"depth": (rule,)})
    assert [getattr(e, "key", "rule") for e in table] == ["extra", "depth", "rule", "hold_us",
                                                          "ratio", "limit"]
    with pytest.raises(TypeError, match="not knobs"):
        transport_section._knob_table(_Config, after={"plain": (rule,)})


@pytest.mark.parametrize("config", [MrcConfig, RcConfig])
def test_every_knob_of_a_transport_config_is_a_lab_key(config: type) -> None:
    kind = "mrc" if config is MrcConfig else "rc"
    lab = {f.config_name or f.key for f in transport_section.FIELDS[kind]
           if isinstance(f, Field)}
    assert set(knobs(config)) <= lab
    for name, k in knobs(config).items():
        assert isinstance(k, Knob) and k.doc.strip(), name
