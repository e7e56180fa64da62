"""Which runs-table columns a sweep can plot, known before any run (``--plot METRIC``).

A sweep's table has a column per swept parameter and one per summary.json field
(:mod:`mrc.labs.report.summary_fields`, flattened with ``_``), so a metric is checked against
those before the first run: a typo must not cost the user the sweep. Light on purpose (no
pandas): the CLI checks its arguments before it imports the machinery.
"""

from __future__ import annotations

from mrc.labs.errors import LabError
from mrc.labs.report.summary_fields import TOP_FIELDS, TRANSPORT_FIELDS
from mrc.labs.sweep.plan import Sweep

#: Summary fields that hold text or tables, not numbers: nothing to plot.
TEXT_FIELDS = frozenset({"kind", "outcome", "failure_reason", "recovery", "collective", "live",
                         "lab", "runtime", "faults", "workload", "goodput_sum", "build",
                         "stalls.unit", "time_scale"})


def plottable_columns(sweep: Sweep) -> list[str]:
    """The numeric columns the runs table of ``sweep`` will have, known before any run: the
    swept parameters, ``job_failed``, and every numeric summary field (flattened with ``_``;
    a lab-wide field whose name a transport's field also uses gets ``lab_`` in front)."""
    own = [k.replace(".", "_") for k in TRANSPORT_FIELDS
           if k.split(".")[0] not in TEXT_FIELDS and k not in TEXT_FIELDS]
    top = [k if k not in own else f"lab_{k}" for k in TOP_FIELDS if k not in TEXT_FIELDS]
    numeric = [p for p in sweep.params if all(
        isinstance(r.params.get(p), int | float) and not isinstance(r.params.get(p), bool)
        for r in sweep.runs)]
    return list(dict.fromkeys([*numeric, "job_failed", *own, *top]))


def check_metric(sweep: Sweep, metric: str) -> str:
    """METRIC as a runs-table column, checked before anything runs (``--plot``)."""
    known = plottable_columns(sweep)
    for candidate in (metric, metric.replace(".", "_")):
        if candidate in known:
            return candidate
    if metric in ("outcome", "status") or metric in TEXT_FIELDS or metric in sweep.params:
        hint = " (for outcomes plot job_failed, the share of runs whose job failed)" \
            if metric == "outcome" else ""
        raise LabError(f"{metric!r} is not numeric{hint}; plottable: {', '.join(known)}",
                       "--plot")
    raise LabError(f"{metric!r} is not a column of the runs table; plottable: "
                   f"{', '.join(known)}", "--plot")
