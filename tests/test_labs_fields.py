"""The lab keys as data (mrc.labs.schema.fields): every table is well formed, the transport tables
cover exactly the keys the transport configs accept, and the lab layer's ranges (read from
the configs' knobs, or restated for the cc and DCQCN keys) agree with the configs' own checks, so a bad transport value is refused on its own key
before any config is built (the configs' checks stay invariants that never fire first)."""

from __future__ import annotations

from typing import Any

import pytest

from mrc.labs.errors import LabError
from mrc.labs.schema import transport as transport_section
from mrc.labs.schema.faults import FAULT_KINDS
from mrc.labs.schema.faults import FIELDS as FAULT_FIELDS
from mrc.labs.schema.fields import TYPES, Derived, Field, Rule, field_map
from mrc.labs.schema.lab_file import field_tables, validate
from mrc.stack import transport_params as tparams
from topology.spec import preset

SPEC = preset("lab-small")
VALUES: list[Any] = [-(2**63), -1, 0, 1, 2, 3, 7, 8, 24, 25, 31, 32, 64, 4096, 2**22, 2**24,
                     -0.5, 0.0, 1e-9, 1e-7, 0.25, 0.5, 0.75, 1.0, 1.5, 100.0, True, False,
                     "", "reps", "round_robin", "nscc", "fixed", "bbr"]


def test_every_table_is_well_formed() -> None:
    for path, table in field_tables().items():
        keys = [e.key for e in table if isinstance(e, Field)]
        assert len(keys) == len(set(keys)), path
        for entry in table:
            assert entry.doc.strip(), (path, entry)
            if isinstance(entry, Rule):
                assert set(entry.keys) <= set(keys), (path, entry.keys)
                continue
            assert entry.type in TYPES, (path, entry.key)
            assert entry.default is not None or entry.key in ("file", "text"), (path, entry.key)


def test_fault_kinds_in_one_order() -> None:
    assert tuple(FAULT_FIELDS) == FAULT_KINDS


@pytest.mark.parametrize(("kind", "accepted"), [
    ("mrc", {**tparams.MRC_KEYS, "cc": "cc", "ev_profile": "ev_profile", "env": "env"}),
    ("rc", {**tparams.RC_KEYS, "env": "env"})])
def test_transport_tables_cover_the_config_keys(kind: str, accepted: dict[str, str]) -> None:
    fields = field_map(transport_section.FIELDS[kind])
    assert set(fields) == set(accepted)
    for key, f in fields.items():
        assert (f.config_name or key) == accepted[key], key
    assert set(field_map(transport_section.CC_FIELDS)) == set(tparams.CC_KEYS)


def test_transport_defaults_are_the_configs() -> None:
    fields = field_map(transport_section.MRC_FIELDS)
    assert fields["probe_interval_us"].default == 10.0  # MrcConfig: 10 us in picoseconds
    assert fields["ev_count"].default == 128
    assert isinstance(field_map(transport_section.RC_FIELDS)["window_pkts"].default, Derived)


def _lab(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"workload": {"kind": "write_bw"}, "run": {"duration_us": 100},
            "transport": {"t": {"kind": kind, **params}}}


def _keys() -> list[tuple[str, str]]:
    out = [(kind, key) for kind in ("mrc", "rc")
           for key in field_map(transport_section.FIELDS[kind])
           if key not in ("cc", "ev_profile", "env")]
    return out + [("mrc", f"cc.{key}") for key in field_map(transport_section.CC_FIELDS)]


def _params(key: str, value: Any) -> dict[str, Any]:
    if key.startswith("cc."):
        return {"cc": {key[3:]: value}}
    return {key: value}


@pytest.mark.parametrize(("kind", "key"), _keys())
def test_lab_ranges_agree_with_the_configs(kind: str, key: str) -> None:
    """Whatever the lab layer accepts, the transport builds; whatever it refuses for its
    range, the transport refuses too, and the lab layer names the key itself."""
    build = tparams.mrc_config if kind == "mrc" else tparams.rc_config
    for value in VALUES:
        params = _params(key, value)
        try:
            checked = validate(_lab(kind, params)).transports["t"].params
        except LabError as exc:
            if exc.message.startswith(("expected ", "must ")):  # the lab layer's type checks
                continue
            with pytest.raises((tparams.ParamError, ValueError, TypeError)):
                build(SPEC, params, "transport.t")
            if kind == "rc" and key == "ack_every" and value >= 2**21:
                assert exc.key is None  # the derived window: the builder names the table
                assert exc.message.startswith("transport.t: RcConfig: window_pkts")
            elif key == "cc.algorithm":
                assert exc.key == "transport.t.cc"  # said about the whole cc table
            else:
                assert exc.key == f"transport.t.{key}", (value, exc.key, exc.message)
            continue
        build(SPEC, checked, "transport.t")
