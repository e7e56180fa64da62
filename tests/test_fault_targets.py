"""Fault targets as classes drawn from the seed (mrc.labs.schema.targets)."""

from __future__ import annotations

import hashlib

import pytest

from mrc.labs.errors import LabError
from mrc.labs.run.runner import prepare
from mrc.labs.schema import targets


def _lab(target: str, **more: object):  # type: ignore[no-untyped-def]
    return prepare("t1-reboot", overrides={"fault.0.target": target, **more})


def test_classes_match_their_elements() -> None:
    spec = _lab("p1.t1.3").fabric
    assert len(targets.matches(spec, "t1")) == spec.planes * spec.t1
    assert targets.matches(spec, "p1.t1.*") == [f"p1.t1.{k}" for k in range(spec.t1)]
    assert len(targets.matches(spec, "t0-t1-link")) == spec.planes * spec.t0_per_plane * spec.t1
    assert targets.matches(spec, "p1.t0.2--p1.t1.*") == [f"p1.t0.2--p1.t1.{k}"
                                                          for k in range(spec.t1)]


def test_the_draw_is_the_documented_hash() -> None:
    lab = _lab("t1")
    found = targets.matches(lab.fabric, "t1")
    digest = hashlib.blake2b(b"1/t1", digest_size=8).digest()
    assert lab.faults[0].target == found[int.from_bytes(digest, "little") % len(found)]
    assert lab.faults[0].drawn_from == "t1"
    assert lab.to_dict()["fault"][0]["target"] == "t1"  # the resolved lab draws again


def test_the_draw_is_deterministic_and_follows_the_seed() -> None:
    first = _lab("t1").faults[0].target
    assert _lab("t1").faults[0].target == first
    drawn = {prepare(_lab("t1"), seed=s).faults[0].target for s in range(1, 30)}
    assert len(drawn) > 8  # --seed redraws: many T1s over 29 seeds
    assert all(t.startswith("p") and ".t1." in t for t in drawn)
    assert _lab("p1.t1.*").faults[0].target.startswith("p1.t1.")


def test_the_same_class_twice_names_the_same_element() -> None:
    lab = prepare("t1-reboot", overrides={
        "fault": [{"kind": "switch_down", "target": "t1", "at_us": 200},
                  {"kind": "switch_up", "target": "t1", "at_us": 400}]})
    assert lab.faults[0].target == lab.faults[1].target


@pytest.mark.parametrize("text", ["p9.t1.*", "x*", "p1.t2.*", "t1;*"])
def test_a_bad_class_names_the_key(text: str) -> None:
    with pytest.raises(LabError) as err:
        _lab(text)
    assert err.value.key == "fault.0.target"
    assert "\n" not in str(err.value)


def test_a_class_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(LabError) as err:
        _lab("t0-t1-link")  # switch_reboot acts on switches
    assert err.value.key == "fault.0.target" and "is a link" in str(err.value)
