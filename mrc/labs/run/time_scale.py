"""One honest time scale: a lab's ``[run] time_scale`` on every real-world control timer.

A lab that runs in simulated microseconds cannot wait a real RC local ACK timeout (NCCL's
2^20 x 4.096 us, 4.3 s) or a BGP convergence (about a second). Compressing one of them and not
the others would change who gives up first; so one factor multiplies **all** of them, and
only them:

* RC: the local ACK timeout (``timeout_exp``, so the fixed IBA timer, the cap of the adaptive
  ladder and the retry budget ``(retry_cnt + 1) x timeout``), and every time of the adaptive
  retransmission ladder declared a real-world timer;
* routing: link-down detection and routing convergence (the routed fabric's config);
* MRC: the published QP timeout (``timeout``: the no-progress watchdog and its retries).

Not scaled, because they are not compressed real-world timers but the fabric and mrc-lab's
own microsecond mechanisms, modelled at full speed: link rates and RTTs, serialisation and
queues, DCQCN's and NSCC's congestion-control timers, the responder's ACK coalescing timer,
and MRC's per-EV path timer, loss evidence, probe intervals and reorder window (those react in
tens of microseconds in the real NIC too: docs/fidelity.md).

**Why a verdict survives the factor.** Every timer that decides whether a QP stalls, fails or
recovers is multiplied by the same factor, so their order is unchanged: if detection (1 ms)
comes before RC's retry budget (seconds) in the real world, ``time_scale x`` detection comes
before ``time_scale x`` budget in the lab, and the QP that outlives or outruns another at full
scale does so scaled. That holds against what is *not* scaled (the fabric's RTT, serialisation,
MRC's per-EV timers: microseconds) only while every scaled timer that is longer than an RTT
at full scale stays longer than one scaled: a timer the factor pushes below the base RTT fires
before the fabric can answer (an adaptive retransmission ladder whose first rung is 131 us
becomes 2 ns at 2^-16, and the scaled QP resends its window again and again where the
full-scale one waits), and a stall bounded by the RTT is then no longer a scaled real-world
stall. The summary lists every such timer (``time_scale.below_rtt``) and the table warns;
a lab should choose a factor that leaves the list empty, or say in its header why the
collapsed timers do not matter to its verdict. Stall lengths are reported twice: as simulated
and divided by the factor (the real-world stall they stand for, meaningful when the stall is
made of scaled timers).

Where a config field declares itself a real-world timer: ``knob(..., real_timer=True)`` on
its dataclass field, or its name in the config class's ``REAL_TIMERS`` tuple (a config
without knobs); :func:`mrc.knobs.scale_timers` applies the factor once, where the lab's
configs are built (:mod:`mrc.stack.transport_params`; the routed fabric's config where the
stack is built). Here: the factor reaches the builders, and the summary states it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from mrc.knobs import real_timers, scale_timers
from mrc.labs.schema.lab import Lab, TransportSpec
from mrc.stack import transport_params as tparams
from mrc.stack.transport_params import TIME_SCALE_KEY
from mrc.units import PS_PER_US

#: Configs of the run beside the transports' whose real-world timers the factor scales:
#: name -> how to get the lab's config (runtimes build with :func:`scaled`).
RUN_CONFIGS: dict[str, Callable[[Lab], Any]] = {"routing": lambda lab: lab.routing}


def scaled_specs(lab: Lab, specs: Sequence[TransportSpec]) -> list[TransportSpec]:
    """``specs`` with the lab's time scale in their parameters (unchanged at 1), for the
    config builders to apply (:mod:`mrc.stack.transport_params`)."""
    factor = lab.run.time_scale
    if factor == 1:
        return list(specs)
    return [dataclasses.replace(s, params={**s.params, TIME_SCALE_KEY: factor}) for s in specs]


def transport_config(lab: Lab, spec: TransportSpec) -> Any:
    """The full-scale config of one transport of the lab (its parameters as written)."""
    params = {k: v for k, v in spec.params.items() if k != TIME_SCALE_KEY}
    if spec.kind == "rc":
        return tparams.rc_config(lab.fabric, params)[0]
    return tparams.mrc_config(lab.fabric, params)


def _full_ps(config: Any, name: str) -> int | None:
    """A declared timer's full-scale time in ps: a ``*_ps``/``*_us`` field's value, an
    encoded one's decoded time (the config's ``timeout_ps``)."""
    value = getattr(config, name)
    if value is None:
        return None
    if name.endswith("_ps"):
        return int(value)
    if name.endswith("_us"):
        return int(round(value * PS_PER_US))
    return getattr(config, "timeout_ps", None)


def summary_block(lab: Lab, specs: Sequence[TransportSpec]) -> dict[str, Any]:
    """summary.json's ``time_scale``: the factor; when it is not 1, which config fields it
    multiplied (per transport that ran, ``specs``, and per run config) and ``below_rtt``:
    every scaled timer that the factor takes from above the fabric's base RTT to below it,
    where the order the verdict rests on no longer holds (module doc)."""
    factor = lab.run.time_scale
    if factor == 1:
        return {"factor": factor, "scaled": {}}
    configs = {spec.name: transport_config(lab, spec) for spec in specs}
    configs.update({name: get(lab) for name, get in RUN_CONFIGS.items()})
    rtt = lab.fabric.base_rtt_ps()
    below = []
    for owner, config in configs.items():
        for name in real_timers(config):
            full = _full_ps(config, name)
            if full is not None and full >= rtt > full * factor:
                below.append({"timer": f"{owner}.{name}", "full_us": full / PS_PER_US,
                              "scaled_us": round(full * factor / PS_PER_US, 6)})
    return {"factor": factor,
            "scaled": {owner: list(real_timers(c)) for owner, c in configs.items()},
            "below_rtt": below, "base_rtt_us": round(rtt / PS_PER_US, 3)}


def scaled(lab: Lab, config: Any) -> Any:
    """``config`` (a dataclass with declared real-world timers: the routed fabric's, say)
    with the lab's factor applied, for a runtime to build its stack with."""
    return scale_timers(config, lab.run.time_scale)


def real_world_us(simulated_us: float | None, factor: float) -> float | None:
    """A simulated time of the scaled timers' world, in the real world's: divided by the
    factor (None stays None)."""
    return None if simulated_us is None else simulated_us / factor
