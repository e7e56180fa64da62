"""Fabric model: multi-plane two-tier Clos specs, element names, paths and the SRv6 uSID plan.

Everything except :func:`build_graph` is closed-form and works at Fairwater scale; the graph
(and networkx) is loaded only when asked for.
"""

from __future__ import annotations

from typing import Any

from topology.counts import COUNT_KEYS, Counts, counts
from topology.names import Element, UnknownElementError, parse, resolve
from topology.paths import (
    Path,
    PathError,
    address_for,
    ev_address,
    path,
    path_for_ev,
    paths_between,
)
from topology.spec import PRESETS, FabricError, FabricSpec, preset
from topology.tables import (
    Decision,
    NoRouteError,
    SwitchTable,
    Walk,
    all_tables,
    switch_table,
    walk,
)

__all__ = [
    "COUNT_KEYS", "Counts", "Decision", "Element", "FabricError", "FabricSpec", "NoRouteError",
    "PRESETS", "Path", "PathError", "SwitchTable", "UnknownElementError", "Walk", "address_for",
    "all_tables", "build_graph", "counts", "ev_address", "parse", "path", "path_for_ev",
    "paths_between", "preset", "resolve", "switch_table", "walk",
]


def __getattr__(name: str) -> Any:
    # networkx costs a noticeable import; only graph users pay for it.
    if name == "build_graph":
        from topology.graph import build_graph

        return build_graph
    raise AttributeError(f"module 'topology' has no attribute {name!r}")
