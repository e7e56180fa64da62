"""The labs layer: lab files in, comparable runs of every transport out.

Its packages, each importing only the ones listed after it (``lint-imports`` holds them so):

* :mod:`mrc.labs.cli`: the ``mrc-lab run``, ``labs``, ``sweep`` and ``fleet`` commands;
* :mod:`mrc.labs.sweep`: parameter grids over a lab, run locally or on a Dask cluster;
* :mod:`mrc.labs.run`: one lab through the packet simulator, the live or kernel runtime,
  or the flow-level model (workload drivers, fault binding, the runner, the result);
  :mod:`mrc.labs.fleet`: job interruptions under fleet failure rates (beside it);
* :mod:`mrc.labs.report`: what a run's tables say (summary.json, the printed table, plots);
* :mod:`mrc.labs.schema`: the lab file format, validated into a :class:`Lab` (every key a
  field of a table; the generated reference); :mod:`mrc.labs.output`: result folders that
  are filled as a whole or not at all (beside it);
* :mod:`mrc.labs.errors`: the one error of bad input, and the exit codes.

``from mrc.labs import run_lab`` is the Python API (it is
:func:`mrc.labs.run.runner.run_lab`, imported on first use so that ``import mrc.labs``
stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mrc.labs.run.runner import run_lab

__all__ = ["run_lab"]


def __getattr__(name: str) -> Any:
    if name == "run_lab":
        from mrc.labs.run.runner import run_lab

        return run_lab
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
