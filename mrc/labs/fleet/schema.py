"""The fleet file format (TOML): job sizes, failure rates and repair times, validated whole.

Bad input is one line ``FILE: dotted.key: problem`` (a :class:`LabError`, exit status 2), as
for lab files. Layout (``labs/fleet/default.toml`` is the documented example)::

    kind = "fleet"                       # required: tells a fleet file from a lab
    name = "fleet-default"               # optional, default: the file name
    description = "one line"

    [fabric]                             # as in a lab (a preset and/or FabricSpec fields)
    preset = "fairwater"

    [job]
    gpus = [1024, 2048, 131072]          # job sizes; one GPU per NIC, on hosts 0..N-1
    workload = "all_to_all"              # all_to_all | all_reduce: which paths its QPs use
    comm_fraction = 0.2                  # share of a step bound by the network at full rate
    checkpoint_interval_min = 30
    restart_min = 10                     # failure to training again (reschedule, reload)

    [transport.mrc]                      # as in a lab; timers decide what RC survives
    [transport.rc]
    [routing]                            # as in a lab: RC's routed fabric (real-world
                                         # timers: detection 1 ms, convergence 1 s)

    [rates.link_down]                    # per fault class (FAULT_CLASSES): events per
    per_year = 0.002                     # element per year and how long one lasts
    repair_h = 4                         # (mean, exponential) or down_s (fixed)

    [run]
    days = 365                           # horizon of one trial
    trials = 20                          # seeded Monte Carlo trials per job size
    seed = 1

Rates must be finite and not negative; durations positive; a repair longer than the horizon
is refused unless ``[run] allow_long_repairs = true`` says it is meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema import routing as routing_section
from mrc.labs.schema.checks import (
    NAME_RE,
    check_bool,
    check_float,
    check_int,
    check_keys,
    check_list,
    check_str,
    check_table,
)
from mrc.labs.schema.fabric import fabric as _fabric
from mrc.labs.schema.files import parse_toml, read_lab_text
from mrc.labs.schema.lab import TransportSpec
from mrc.labs.schema.transport import check_transport
from mrc.sim.routing import RoutingConfig
from topology.spec import FabricSpec

KIND = "fleet"
TOP_KEYS = ("kind", "name", "description", "fabric", "job", "transport", "routing", "rates",
            "run")
JOB_KEYS = ("gpus", "workload", "comm_fraction", "checkpoint_interval_min", "restart_min")
RUN_KEYS = ("days", "trials", "seed", "allow_long_repairs")
WORKLOADS = ("all_to_all", "all_reduce")
MAX_TRIALS = 10_000
MAX_DAYS = 36_500

#: fault class -> (what fails, duration key, extra keys). ``fatal`` classes stop the job on
#: either transport (the GPU or the whole NIC is gone); the others are network elements
#: whose effect each transport's model decides.
FAULT_CLASSES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "host": ("fatal", "repair_h", ()),
    "nic": ("fatal", "repair_h", ()),
    "nic_port": ("nic_port", "repair_h", ()),
    "link_down": ("link", "repair_h", ()),
    "link_flap": ("link", "down_s", ()),
    "optics_degrade": ("link", "repair_h", ("loss_probability",)),
    "t0_reboot": ("t0", "down_s", ()),
    "t0_failure": ("t0", "repair_h", ()),
    "t1_reboot": ("t1", "down_s", ()),
    "t1_failure": ("t1", "repair_h", ()),
    "t1_blackhole": ("t1", "repair_h", ()),
}


@dataclass(frozen=True)
class FaultRate:
    """One fault class: ``per_year`` events per element per year, each lasting
    ``duration_s`` (the mean of an exponential when ``exponential``, else fixed)."""

    name: str
    element: str
    per_year: float
    duration_s: float
    exponential: bool
    loss_probability: float = 0.0


@dataclass(frozen=True)
class Fleet:
    name: str
    description: str
    fabric: FabricSpec
    fabric_preset: str | None
    gpus: tuple[int, ...]
    workload: str
    comm_fraction: float
    checkpoint_s: float
    restart_s: float
    transports: dict[str, TransportSpec]
    rates: dict[str, FaultRate]
    days: float
    trials: int
    seed: int
    raw: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    base_dir: Path | None = None
    #: ``[routing]``: RC's routed fabric at real-world timers (mrc.sim.routing's defaults)
    routing: RoutingConfig = RoutingConfig()

    def to_dict(self) -> dict[str, Any]:
        """Every key with its resolved value (the file as it was understood)."""
        fabric = {k: v for k, v in self.fabric.to_dict().items() if k != "name" and v is not None}
        if self.fabric_preset is not None:
            fabric = {"preset": self.fabric_preset, **fabric}
        rates = {}
        for r in self.rates.values():
            entry: dict[str, Any] = {"per_year": r.per_year}
            key = FAULT_CLASSES[r.name][1]
            entry[key] = r.duration_s / 3600 if key == "repair_h" else r.duration_s
            if r.loss_probability:
                entry["loss_probability"] = r.loss_probability
            rates[r.name] = entry
        return {"kind": KIND, "name": self.name, "description": self.description,
                "fabric": fabric,
                "job": {"gpus": list(self.gpus), "workload": self.workload,
                        "comm_fraction": self.comm_fraction,
                        "checkpoint_interval_min": self.checkpoint_s / 60,
                        "restart_min": self.restart_s / 60},
                "transport": {n: {"kind": t.kind, **t.params} for n, t in self.transports.items()},
                "routing": {"ecmp": self.routing.ecmp,
                            "link_down_detect_us": self.routing.link_down_detect_us,
                            "routing_convergence_us": self.routing.routing_convergence_us},
                "rates": rates,
                "run": {"days": self.days, "trials": self.trials, "seed": self.seed}}


def is_fleet(raw: Mapping[str, Any]) -> bool:
    return raw.get("kind") == KIND


def bundled_dir() -> Path:
    """``labs/fleet/`` of this source checkout, else the installed package data
    (``mrc.bundled_labs/fleet``)."""
    checkout = Path(__file__).resolve().parents[3] / "labs" / "fleet"
    if checkout.is_dir():
        return checkout
    from importlib.resources import files

    try:
        return Path(str(files("mrc.bundled_labs"))) / "fleet"
    except ModuleNotFoundError:
        return checkout


def bundled_fleet_names() -> list[str]:
    folder = bundled_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def resolve_fleet_path(text: str | Path) -> Path:
    path = Path(text)
    if path.exists():
        return path
    stem = str(text)[:-5] if str(text).endswith(".toml") else str(text)
    candidate = bundled_dir() / f"{stem}.toml"
    if NAME_RE.fullmatch(stem) and candidate.is_file():
        return candidate
    raise LabError(f"no such fleet file, and no bundled fleet file of that name (bundled: "
                   f"{', '.join(bundled_fleet_names()) or 'none'})", source=str(text))


def load_fleet(fleet: str | Path | Mapping[str, Any] | Fleet, *, name: str | None = None
               ) -> Fleet:
    """A validated :class:`Fleet` from a path, a bundled name or a dict."""
    if isinstance(fleet, Fleet):
        return fleet
    if isinstance(fleet, Mapping):
        return validate(dict(fleet), name=name or "fleet")
    path = resolve_fleet_path(fleet)
    raw = parse_toml(read_lab_text(path, kind="fleet file"), str(fleet))
    return validate(raw, name=name or path.stem, source=str(fleet), base_dir=path.parent)


def validate(raw: dict[str, Any], *, name: str = "fleet", source: str | None = None,
             base_dir: Path | None = None) -> Fleet:
    try:
        return _validate(raw, name, source, base_dir)
    except LabError as exc:
        raise exc.with_source(source) from None


def _validate(raw: dict[str, Any], default_name: str, source: str | None,
              base_dir: Path | None) -> Fleet:
    check_table(raw, "fleet")
    if raw.get("kind") != KIND:
        if "workload" in raw:
            raise LabError("this is a lab file, not a fleet file: run it with `mrc-lab run`")
        raise LabError(f"missing or wrong file kind (a fleet file says kind = \"{KIND}\")",
                       "kind")
    check_keys(raw, TOP_KEYS, "")
    fleet_name = check_str(raw.get("name", default_name), "name")
    if not NAME_RE.fullmatch(fleet_name):
        raise LabError(f"{fleet_name!r} must be letters, digits, '-' or '_' (it names the "
                       "output folder)", "name")
    description = check_str(raw.get("description", ""), "description").strip()
    spec, preset_name = _fabric(raw.get("fabric", {"preset": "fairwater"}))
    job = check_table(raw.get("job", {}), "job")
    check_keys(job, JOB_KEYS, "job")
    gpus = _gpus(job.get("gpus", [1024, 4096, 16384, 65536, 131072]), spec)
    workload = check_str(job.get("workload", "all_to_all"), "job.workload", WORKLOADS)
    comm = check_float(job.get("comm_fraction", 0.2), "job.comm_fraction", gt=0, maximum=1)
    checkpoint = check_float(job.get("checkpoint_interval_min", 30),
                             "job.checkpoint_interval_min", gt=0) * 60
    restart = check_float(job.get("restart_min", 10), "job.restart_min", minimum=0) * 60
    transports = _transports(raw.get("transport"), spec)
    routing = routing_section.routing(raw.get("routing", {}))
    run = check_table(raw.get("run", {}), "run")
    check_keys(run, RUN_KEYS, "run")
    days = check_float(run.get("days", 365), "run.days", gt=0, maximum=MAX_DAYS)
    trials = check_int(run.get("trials", 20), "run.trials", minimum=1, maximum=MAX_TRIALS)
    seed = check_int(run.get("seed", 1), "run.seed", minimum=0, maximum=2**63 - 1)
    long_ok = check_bool(run.get("allow_long_repairs", False), "run.allow_long_repairs")
    rates = _rates(raw.get("rates", {}), days, long_ok)
    return Fleet(fleet_name, description, spec, preset_name, gpus, workload, comm, checkpoint,
                 restart, transports, rates, days, trials, seed, raw, source, base_dir,
                 routing)


def _gpus(value: Any, spec: FabricSpec) -> tuple[int, ...]:
    items = check_list(value, "job.gpus", min_len=1)
    out = []
    for i, v in enumerate(items):
        n = check_int(v, f"job.gpus.{i}", minimum=2)
        if n > spec.hosts:
            raise LabError(f"{n:,} GPUs do not fit the fabric's {spec.hosts:,} NICs "
                           "(one GPU per NIC)", f"job.gpus.{i}")
        out.append(n)
    if len(set(out)) != len(out):
        raise LabError("a job size is listed twice", "job.gpus")
    return tuple(sorted(out))


def _transports(table: Any, spec: FabricSpec) -> dict[str, TransportSpec]:
    if table is None:
        return {k: TransportSpec(k, k, {}) for k in ("mrc", "rc")}
    table = check_table(table, "transport")
    if not table:
        raise LabError("no transports: add a [transport.mrc] and/or [transport.rc] table",
                       "transport")
    return {name: check_transport(name, body, spec) for name, body in table.items()}


def _rates(table: Any, days: float, long_ok: bool) -> dict[str, FaultRate]:
    from mrc.labs.fleet.rates import DEFAULTS

    table = check_table(table, "rates")
    check_keys(table, FAULT_CLASSES, "rates")
    out: dict[str, FaultRate] = {}
    for cls, (element, duration_key, extra) in FAULT_CLASSES.items():
        given = check_table(table.get(cls, {}), f"rates.{cls}")
        check_keys(given, ("per_year", duration_key, *extra), f"rates.{cls}")
        merged = {**DEFAULTS[cls], **given}
        key = f"rates.{cls}"
        per_year = check_float(merged["per_year"], f"{key}.per_year", minimum=0)
        duration = check_float(merged[duration_key], f"{key}.{duration_key}", gt=0)
        seconds = duration * 3600 if duration_key == "repair_h" else duration
        if seconds > days * 86400 and not long_ok:
            raise LabError(f"{duration:g} {'h' if duration_key == 'repair_h' else 's'} is longer "
                           f"than the {days:g}-day horizon; set run.allow_long_repairs = true if "
                           "that is meant", f"{key}.{duration_key}")
        loss = 0.0
        if "loss_probability" in extra:
            loss = check_float(merged["loss_probability"], f"{key}.loss_probability", gt=0,
                               maximum=1)
        out[cls] = FaultRate(cls, element, per_year, seconds, duration_key == "repair_h", loss)
    return out
