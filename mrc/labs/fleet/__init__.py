"""The fleet model: job interruptions and training throughput under fleet failure rates.

``mrc-lab fleet [FILE]`` answers the question a packet run cannot: at the failure rates of a
real fleet, how often is a job of N GPUs interrupted, and what share of ideal training does it
get, on MRC and on RC? A seeded Monte Carlo (:mod:`mrc.labs.fleet.montecarlo`) draws years of
faults per element class on the job's footprint (:mod:`mrc.labs.fleet.rates` for the default
rates and their sources), and the flow model (:mod:`mrc.flow`, via
:mod:`mrc.labs.fleet.impact`) says what each fault does to the job on each transport: RC's
job restarts whenever a fault kills a path one of its QPs uses for longer than its retry
time; MRC's continues at reduced bandwidth unless every path of a connection dies.

Not modelled: correlated failures (a power domain, a bad firmware roll-out), faults while the
job restarts, repairs that need the job's hosts, silent data corruption and stragglers, and
MRC's own detection transients (microseconds: invisible at this scale). "1,000 GPUs, a failure
every 2-3 days" (an infrastructure talk in the project's sources) is a calibration check the
default rates pass, not an input.

The fleet file format is :mod:`mrc.labs.fleet.schema`; the bundled example is
``labs/fleet/default.toml``. The package sits in the labs layer (it reads its TOML with the
labs' checkers and errors, and sweeps run it) and uses the flow model below it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mrc.labs.fleet.run import FleetResult, run_fleet
    from mrc.labs.fleet.schema import Fleet, load_fleet

__all__ = ["Fleet", "FleetResult", "load_fleet", "run_fleet"]

#: where each public name lives: imported on first use (PEP 562), because ``run`` brings
#: pandas, and every ``mrc-lab`` command imports this package to register ``fleet``
#: (``mrc-lab --help`` took 0.35 s, two thirds of it pandas)
_HOMES = {"FleetResult": "run", "run_fleet": "run", "Fleet": "schema", "load_fleet": "schema"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
