"""A validated sweep as objects: its runs, each a full lab (a plain dict) and the parameters
that made it. Built only by :func:`mrc.labs.sweep.file.load_sweep`; the runs table and the
executors read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SweepRun:
    """One grid point: the parameters it sets and the full lab it runs (a plain dict)."""

    run_id: str
    index: int
    params: dict[str, Any]
    lab: dict[str, Any]
    transports: tuple[str, ...]  # the transport names the run produces, in order
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: every run's lab has been checked."""

    name: str
    description: str
    source: str | None
    base: Any  # a Lab, or a Fleet when model == "fleet" (mrc.labs.sweep.models)
    fixed: dict[str, Any]
    axes: tuple[tuple[str, ...], ...]  # the parameter paths of each axis (a zip has several)
    transports: tuple[str, ...] | None  # the selection passed to the runner (None: all)
    runs: tuple[SweepRun, ...]
    model: str = "packet"  # packet | flow | fleet (mrc.labs.sweep.models)

    @property
    def params(self) -> list[str]:
        """The swept parameter paths, in file order (the table's parameter columns)."""
        return [p for axis in self.axes for p in axis]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "lab": self.base.name, "lab_source": self.base.source, "set": self.fixed,
                "params": self.params, "transports": list(self.transports or ()) or None,
                "model": self.model, "runs": [{"run_id": r.run_id, "index": r.index, "params": r.params}
                         for r in self.runs]}
