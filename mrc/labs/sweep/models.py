"""The models a lab-like file can run through, as sweeps see them: ``packet`` (the simulator,
:func:`mrc.labs.run.runner.run_lab`), ``flow`` (the flow-level model,
:func:`mrc.labs.run.flow.run_flow_lab`) and ``fleet`` (a fleet file,
:func:`mrc.labs.fleet.run_fleet`). A sweep validates every grid point with :func:`check_point`
before anything runs and runs each with :func:`runner`; the result of every runner has
``summary`` (with a ``transports`` table) and ``write(dir)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.lab import Lab, TransportSpec

MODELS = ("packet", "flow", "fleet")
LAB_MODELS = ("packet", "flow")


def check_point(model: str, raw: dict[str, Any], base: Any,
                transports: Sequence[str] | None) -> tuple[Any, list[TransportSpec]]:
    """A grid point validated for ``model``, and the transports its run produces."""
    if model == "fleet":
        from mrc.labs.fleet.schema import validate as validate_fleet

        if transports is not None:
            raise LabError("a fleet run always compares its MRC and RC transports",
                           "transports")
        fleet = validate_fleet(copy.deepcopy(raw), name=base.name, source=base.source)
        return fleet, list(fleet.transports.values())
    from mrc.labs.run.runner import prepare, select_transports
    from mrc.labs.schema.lab_file import validate

    lab = validate(copy.deepcopy(raw), name=base.name, source=base.source,
                   base_dir=base.base_dir)
    if model == "flow":
        from mrc.labs.run.flow import check_flow, prepare_flow

        checked = prepare_flow(lab)
        selected = select_transports(checked, transports)
        check_flow(checked, selected)  # refusals and the memory estimate, before any run
        return checked, selected
    checked = prepare(lab)
    return checked, select_transports(checked, transports)


def fleet_base(spec: Any, base_dir: Path) -> Any:
    """The sweep's base as a fleet (a fleet file beside the sweep, a path, a bundled fleet
    name, or an inline table with ``kind = "fleet"``), or None when it is not one."""
    from mrc.labs.fleet.schema import bundled_dir, is_fleet, load_fleet
    from mrc.labs.schema.files import parse_toml, read_lab_text

    if isinstance(spec, dict):
        return load_fleet(spec, name=str(spec.get("name", "fleet"))) if is_fleet(spec) else None
    if not isinstance(spec, str):
        return None
    for path in (base_dir / spec, Path(spec), bundled_dir() / f"{spec.removesuffix('.toml')}.toml"):
        if path.is_file():
            raw = parse_toml(read_lab_text(path), str(path))
            return load_fleet(path) if is_fleet(raw) else None
    return None


def materialize(base: Any) -> dict[str, Any]:
    """The base's raw dict with defaulted sections written out (``schema.materialize`` for
    labs; a fleet file's raw dict as it is)."""
    from mrc.labs.schema.keys import materialize as materialize_lab

    return materialize_lab(base) if isinstance(base, Lab) else copy.deepcopy(base.raw)


def load(model: str, raw: dict[str, Any], name: str, source: str | None,
         base_dir: Path | None) -> Any:
    """A grid point as its runner takes it (in a worker process: plain data in)."""
    if model == "fleet":
        from mrc.labs.fleet.schema import validate as validate_fleet

        return validate_fleet(copy.deepcopy(raw), name=name, source=source)
    from mrc.labs.schema.lab_file import validate

    return validate(copy.deepcopy(raw), name=name, source=source, base_dir=base_dir)


def _packet(lab: Lab, transports: list[str] | None) -> Any:
    from mrc.labs.run.runner import run_lab

    return run_lab(lab, transports=transports, progress=False)


def _flow(lab: Lab, transports: list[str] | None) -> Any:
    from mrc.labs.run.flow import run_flow_lab

    return run_flow_lab(lab, transports=transports)


def _fleet(fleet: Any, transports: list[str] | None) -> Any:
    from mrc.labs.fleet.run import run_fleet

    return run_fleet(fleet)


_RUNNERS: dict[str, Callable[[Any, list[str] | None], Any]] = {
    "packet": _packet, "flow": _flow, "fleet": _fleet}


def runner(model: str) -> Callable[[Any, list[str] | None], Any]:
    return _RUNNERS[model]
