"""htsim's triggers at run time: which flows of a connection matrix start when a flow is done.

The parser (:mod:`mrc.labs.schema.connection_matrix`) has already checked that every trigger is
defined and every flow can start; this is the state machine the flow workload drives: a flow
that is done activates its ``send_done_trigger`` and ``recv_done_trigger``, and an activation
returns the flows to start now (a oneshot: all its flows, once; a multishot: its next flow in
file order; a barrier: all its flows on its ``count``-th activation).
"""

from __future__ import annotations

from collections.abc import Sequence

from mrc.labs.schema.connection_matrix import done_triggers
from mrc.labs.schema.lab import Flow, TriggerSpec


class Triggers:
    """The triggers of one run of a connection matrix."""

    def __init__(self, specs: Sequence[TriggerSpec], flows: Sequence[Flow]) -> None:
        self.specs = {t.trigger_id: t for t in specs}
        self.targets = {tid: [f.flow_id for f in flows if f.trigger == tid]
                        for tid in self.specs}
        self.activations = dict.fromkeys(self.specs, 0)
        self.started = dict.fromkeys(self.specs, 0)

    def activate(self, trigger_id: int) -> list[int]:
        """One activation of ``trigger_id``: the flow ids to start now."""
        spec = self.specs[trigger_id]
        self.activations[trigger_id] += 1
        targets = self.targets[trigger_id]
        done = self.started[trigger_id]
        if spec.kind == "multishot":
            upto = min(done + 1, len(targets))
        elif spec.kind == "barrier":
            upto = len(targets) if self.activations[trigger_id] >= spec.count else 0
        else:  # oneshot
            upto = len(targets)
        if upto <= done:
            return []
        self.started[trigger_id] = upto
        return targets[done:upto]

    def flow_done(self, flow: Flow) -> list[int]:
        """``flow`` is done: activate its triggers; the flow ids to start now, in order."""
        out: list[int] = []
        for tid in done_triggers(flow):
            out.extend(self.activate(tid))
        return out
