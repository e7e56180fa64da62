"""The lab file format (TOML): loading, validation, defaults and dotted-path addressing.

A lab is validated completely before anything runs, and every problem is reported as one
line ``FILE: dotted.key.path: problem`` (a :class:`LabError`, exit status 2). Units live in
key names (``at_us``, ``size_bytes``, ``link_gbps``), so a value is always a plain number.

Layout (``mrc-lab labs NAME`` prints a bundled example)::

    name = "t0-switch-down"              # optional, default: the file name
    description = "one line"             # shown by `mrc-lab labs`

    [fabric]                             # optional, default preset "lab-small"
    preset = "lab-8plane"                # a topology.spec preset, and/or FabricSpec fields:
    planes = 8                           # hosts, hosts_per_t0, t1_per_plane, link_gbps,
                                         # link_delay_ns, switch_latency_ns, buffer_bytes,
                                         # trimming, trim_threshold_bytes, trim_size_bytes,
                                         # header_queue_bytes, ecn_threshold_bytes, mtu_bytes,
                                         # switch_radix
    [workload]
    kind = "write_bw"                    # write_bw | sendrecv | all_reduce | all_to_all |
                                         # permutation | connection_matrix (keys: WORKLOAD_KEYS)
    [transport.mrc]                      # one table per transport compared; NAME unique;
    ev_count = 128                       # kind = "mrc" | "rc" unless NAME is a kind; other keys
    [transport.rc]                       # are the transport's Config fields
    timeout_exp = 4

    [[fault]]                            # any number; kinds and keys: FAULT_KEYS
    kind = "switch_down"
    target = "h0.p3.t0"                  # element name or selector (topology.names)
    at_us = 200

    [run]
    duration_us = 1000                   # required
    bin_us = 10                          # default: about duration / 100
    seed = 1
    grace_us = 1000                      # write_bw: time after the end for the messages in
                                         # flight to finish (default: duration_us); finite
                                         # workloads end the run when they are done

Every key, including defaulted ones, is addressable by its dotted path in the resolved lab
(:meth:`Lab.to_dict`), e.g. ``transport.mrc.probe_interval_us`` or ``fault.0.target``;
:func:`get_key` and :func:`set_key` are the helpers that sweeps reuse.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mrc.labs.errors import LabError
from topology import names
from topology.spec import PRESETS, FabricError, FabricSpec, preset

TRANSPORT_KINDS = ("mrc", "rc")
DEFAULT_PRESET = "lab-small"
MAX_BINS = 200_000
MAX_LAB_BYTES = 4 * 1024 * 1024  # a lab file larger than this is not a lab file
MAX_MESSAGE_BYTES = 1 << 40  # 1 TiB: beyond anything a packet-level run can carry

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


# ====================================================================== value checkers
def toml_type(value: Any) -> str:
    """The TOML word for a value's type, as users see it in their file."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return "date/time" if hasattr(value, "isoformat") else type(value).__name__


def _show(value: Any) -> str:
    text = value.isoformat() if hasattr(value, "isoformat") else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(x: float) -> str:
    """A bound as people write it: 4096, 1,099,511,627,776, 0.5."""
    if float(x).is_integer():
        return f"{int(x):,}" if abs(x) >= 10_000 else str(int(x))
    return f"{x:g}"


def _bounds(value: float, key: str, minimum: float | None, maximum: float | None,
            gt: float | None, lt: float | None) -> None:
    if minimum is not None and value < minimum:
        word = "negative" if minimum == 0 else f"below {_num(minimum)}"
        raise LabError(f"must not be {word}, got {_show(value)}", key)
    if gt is not None and value <= gt:
        raise LabError(f"must be greater than {_num(gt)}, got {_show(value)}", key)
    if maximum is not None and value > maximum:
        raise LabError(f"must be at most {_num(maximum)}, got {_show(value)}", key)
    if lt is not None and value >= lt:
        raise LabError(f"must be less than {_num(lt)}, got {_show(value)}", key)


def check_int(value: Any, key: str, *, minimum: float | None = None,
              maximum: float | None = None, gt: float | None = None) -> int:
    """An integer; an integral float (``1e6``) is accepted because TOML has no int exponent."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LabError(f"expected an integer, got {toml_type(value)} {_show(value)}", key)
    _bounds(value, key, minimum, maximum, gt, None)
    return value


def check_float(value: Any, key: str, *, minimum: float | None = None,
                maximum: float | None = None, gt: float | None = None,
                lt: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LabError(f"expected a number, got {toml_type(value)} {_show(value)}", key)
    if not math.isfinite(value):
        raise LabError(f"must be a finite number, got {value}", key)
    _bounds(value, key, minimum, maximum, gt, lt)
    return float(value)


def check_bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise LabError(f"expected true or false, got {toml_type(value)} {_show(value)}", key)
    return value


def check_str(value: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise LabError(f"expected a string, got {toml_type(value)} {_show(value)}", key)
    if choices is not None and value not in choices:
        raise LabError(f"{value!r} is not one of {', '.join(choices)}{_suggest(value, choices)}",
                       key)
    return value


def check_list(value: Any, key: str, *, min_len: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise LabError(f"expected an array, got {toml_type(value)} {_show(value)}", key)
    if len(value) < min_len:
        raise LabError(f"needs at least {min_len} entr{'y' if min_len == 1 else 'ies'}", key)
    return value


def check_table(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LabError(f"expected a table, got {toml_type(value)} {_show(value)}", key)
    return value


def check_host(value: Any, key: str, spec: FabricSpec) -> int:
    """A host as an index (``3``) or a name (``"h3"``)."""
    if isinstance(value, str):
        try:
            element = names.resolve(spec, value)
        except names.UnknownElementError as exc:
            raise LabError(str(exc), key) from None
        if element.kind != names.HOST:
            raise LabError(f"{value!r} is a {element.kind}, expected a host like 'h3'", key)
        return int(element.index)  # type: ignore[arg-type]
    host = check_int(value, key, minimum=0)
    if host >= spec.hosts:
        raise LabError(f"host {host} outside 0..{spec.hosts - 1} (fabric has {spec.hosts} hosts)",
                       key)
    return host


def check_hosts(value: Any, key: str, spec: FabricSpec, *, min_len: int = 2) -> tuple[int, ...]:
    items = check_list(value, key, min_len=min_len)
    hosts = tuple(check_host(v, f"{key}.{i}", spec) for i, v in enumerate(items))
    seen: dict[int, int] = {}
    for i, host in enumerate(hosts):
        if host in seen:
            raise LabError(f"host h{host} is listed twice (entries {seen[host]} and {i})", key)
        seen[host] = i
    return hosts


def _suggest(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(table: Mapping[str, Any], allowed: Any, prefix: str) -> None:
    """Refuse the first key (in file order) that is not in ``allowed``."""
    for k in table:
        if k not in allowed:
            known = ", ".join(sorted(allowed))
            raise LabError(f"unknown key{_suggest(k, allowed)}; known keys: {known}",
                           f"{prefix}.{k}" if prefix else k)


def _require(table: Mapping[str, Any], k: str, prefix: str, what: str = "") -> Any:
    if k not in table:
        raise LabError(f"missing required key{what}", f"{prefix}.{k}" if prefix else k)
    return table[k]


# ====================================================================== spec objects
@dataclass(frozen=True)
class WriteBw:
    """perftest-style ``ib_write_bw``: keep ``tx_depth`` messages in flight per direction."""

    pairs: tuple[tuple[int, int], ...]
    bidirectional: bool = True
    message_bytes: int = 1 << 20
    tx_depth: int = 4
    start_us: float = 0.0
    kind: str = "write_bw"


@dataclass(frozen=True)
class Collective:
    """nccl-tests-style ``sendrecv``/``all_reduce`` (ring)/``all_to_all`` over ranked hosts."""

    kind: str
    hosts: tuple[int, ...]
    sizes_bytes: tuple[int, ...]
    iters: int = 5
    warmup_iters: int = 1
    start_us: float = 0.0


@dataclass(frozen=True)
class Permutation:
    """Every host sends ``size_bytes`` to a distinct peer drawn from the run's seed."""

    hosts: tuple[int, ...]
    size_bytes: int = 2 << 20
    start_us: float = 0.0
    kind: str = "permutation"


@dataclass(frozen=True)
class Flow:
    """One connection-matrix line."""

    src: int
    dst: int
    size_bytes: int
    start_us: float
    flow_id: int
    line: int = 0


@dataclass(frozen=True)
class ConnectionMatrix:
    """Flows from an htsim connection-matrix file (``file``) or inline text (``text``)."""

    flows: tuple[Flow, ...]
    nodes: int
    file: str | None = None
    text: str | None = None
    kind: str = "connection_matrix"


Workload = WriteBw | Collective | Permutation | ConnectionMatrix


@dataclass(frozen=True)
class TransportSpec:
    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultSpec:
    """One ``[[fault]]`` entry, resolved: canonical ``target`` and the window it covers.

    ``until_us`` is the end of the window (None: lasts to the end of the run, or the fault is
    a down whose matching up is another entry; :func:`fault_windows` pairs those).
    """

    index: int
    kind: str
    target: str
    element: names.Element
    at_us: float
    until_us: float | None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    duration_us: float
    bin_us: float
    seed: int = 1
    grace_us: float = 0.0


@dataclass(frozen=True)
class Lab:
    """A validated lab. ``raw`` is the file as parsed; :meth:`to_dict` is the resolved form."""

    name: str
    description: str
    fabric: FabricSpec
    fabric_preset: str | None
    workload: Workload
    transports: dict[str, TransportSpec]
    faults: tuple[FaultSpec, ...]
    run: RunSpec
    raw: dict[str, Any]
    source: str | None = None
    base_dir: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every key with its resolved value (defaults filled in, targets canonical)."""
        fabric = {k: v for k, v in self.fabric.to_dict().items()
                  if k != "name" and v is not None}  # TOML has no null
        if self.fabric_preset is not None:
            fabric = {"preset": self.fabric_preset, **fabric}
        workload = {k: _plain(v) for k, v in dataclasses.asdict(self.workload).items()}
        if isinstance(self.workload, ConnectionMatrix):
            workload.pop("flows")
            workload.pop("nodes")
            workload = {k: v for k, v in workload.items() if v is not None}
        workload = {"kind": workload.pop("kind"), **workload}
        faults = []
        for f in self.faults:
            entry: dict[str, Any] = {"kind": f.kind, "target": f.target, "at_us": f.at_us}
            entry.update(f.params)
            faults.append(entry)
        return {
            "name": self.name,
            "description": self.description,
            "fabric": fabric,
            "workload": workload,
            "transport": {n: {"kind": t.kind, **t.params} for n, t in self.transports.items()},
            "fault": faults,
            "run": dataclasses.asdict(self.run),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


# ====================================================================== keys per section
TOP_KEYS = ("name", "description", "fabric", "workload", "transport", "fault", "run")
RUN_KEYS = ("duration_us", "bin_us", "seed", "grace_us")

WORKLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "write_bw": ("kind", "pairs", "bidirectional", "message_bytes", "tx_depth", "start_us"),
    "sendrecv": ("kind", "hosts", "sizes_bytes", "min_bytes", "max_bytes", "step_factor",
                 "iters", "warmup_iters", "start_us"),
    "permutation": ("kind", "hosts", "size_bytes", "start_us"),
    "connection_matrix": ("kind", "file", "text"),
}
WORKLOAD_KEYS["all_reduce"] = WORKLOAD_KEYS["sendrecv"]
WORKLOAD_KEYS["all_to_all"] = WORKLOAD_KEYS["sendrecv"]
WORKLOAD_KINDS = ("write_bw", "sendrecv", "all_reduce", "all_to_all", "permutation",
                  "connection_matrix")
COLLECTIVE_KINDS = ("sendrecv", "all_reduce", "all_to_all")

_COMMON_FAULT_KEYS = ("kind", "target", "at_us")
FAULT_KEYS: dict[str, tuple[str, ...]] = {
    "link_down": (),
    "link_up": (),
    "link_flap": ("period_us", "down_us", "count"),
    "switch_down": (),
    "switch_up": (),
    "switch_reboot": ("duration_us",),
    "port_down": (),
    "port_up": (),
    "loss": ("probability", "duration_us"),
    "degrade": ("rate_fraction", "duration_us"),
    "drain": ("duration_us",),
}
FAULT_KINDS = tuple(FAULT_KEYS)
#: What each fault kind may point at (element kinds from topology.names).
FAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "link_down": (names.LINK,), "link_up": (names.LINK,), "link_flap": (names.LINK,),
    "switch_down": (names.T0, names.T1), "switch_up": (names.T0, names.T1),
    "switch_reboot": (names.T0, names.T1),
    "port_down": (names.NIC_PORT,), "port_up": (names.NIC_PORT,),
    "loss": (names.LINK,), "degrade": (names.LINK,),
    "drain": (names.T1,),
}
_KIND_WORDS = {names.HOST: "host", names.NIC_PORT: "NIC port", names.T0: "T0 switch",
               names.T1: "T1 switch", names.LINK: "link"}
_TARGET_WORDS = {
    (names.LINK,): "a link (h3.p0--p0.t0.1 or p0.t0.1--p0.t1.2; selector h3.p0.uplink)",
    (names.T0, names.T1): "a switch (p0.t0.1, p0.t1.2; selector h3.p0.t0)",
    (names.NIC_PORT,): "a NIC port (h3.p0)",
    (names.T1,): "a T1 switch (p0.t1.2): a drain denies the EVs that cross it",
}

# Fallback transport keys, used only while mrc.transport.params cannot be imported.
_FALLBACK_TRANSPORT_KEYS: dict[str, tuple[str, ...]] = {
    "mrc": ("ev_count", "probe_interval_us", "probes_to_reintegrate", "rto_exp", "rto_floor_us",
            "retry_cnt_exp", "cc", "spray"),
    "rc": ("qps_per_plane", "timeout_exp", "retry_cnt", "reroute_after_us", "window_pkts"),
}


# ====================================================================== loading
def read_lab_text(path: Path, *, kind: str = "lab file", missing: str = "no such file",
                  max_bytes: int = MAX_LAB_BYTES) -> str:
    """The file's text, refusing what cannot be a lab (missing, directory, binary, huge);
    ``kind`` and ``missing`` word the errors for other TOML inputs such as sweep files."""
    shown = str(path)
    if not path.exists():
        raise LabError(missing, source=shown)
    if path.is_dir():
        raise LabError(f"is a directory, not a {kind}", source=shown)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LabError(f"cannot read: {exc.strerror or exc}", source=shown) from None
    if len(data) > max_bytes:
        raise LabError(f"{len(data):,} bytes is too large for a {kind}", source=shown)
    return decode_lab_bytes(data, shown)


def decode_lab_bytes(data: bytes, source: str | None) -> str:
    if b"\x00" in data:
        raise LabError("binary data (NUL bytes), not a TOML lab file", source=source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LabError(f"not UTF-8 text (bad byte at offset {exc.start}), not a TOML lab file",
                       source=source) from None


def parse_toml(text: str, source: str | None) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LabError(f"TOML syntax error: {exc}", source=source) from None
    except RecursionError:
        raise LabError("TOML syntax error: values nested too deeply", source=source) from None


def load_lab(lab: str | Path | Mapping[str, Any] | Lab, *, name: str | None = None,
             base_dir: Path | None = None) -> Lab:
    """A validated :class:`Lab` from a path, a bundled lab name, TOML text or a dict."""
    if isinstance(lab, Lab):
        return lab
    if isinstance(lab, Mapping):
        return validate(dict(lab), name=name or "lab", base_dir=base_dir)
    path = resolve_lab_path(lab)
    text = read_lab_text(path)
    return validate(parse_toml(text, str(lab)), name=name or path.stem, source=str(lab),
                    base_dir=path.parent)


def _bundled_dir() -> Any:
    """The installed ``mrc.bundled_labs`` package, or ``labs/`` of a source checkout (when
    ``mrc`` is imported from the repository itself, the install-time mapping does not apply)."""
    from importlib.resources import files

    try:
        return files("mrc.bundled_labs")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "labs"


def _is_sweep(text: str) -> bool:
    """Sweep files (``mrc-lab sweep``) share the folder; they name a base ``lab``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return "lab" in doc or "grid" in doc


def _bundled_files() -> list[tuple[str, bool]]:
    out = []
    for p in _bundled_dir().iterdir():
        if p.name.endswith(".toml") and _NAME_RE.fullmatch(p.name[:-5]):
            out.append((p.name[:-5], _is_sweep(p.read_text(encoding="utf-8"))))
    return sorted(out)


def bundled_names() -> list[str]:
    """Names of the labs shipped in the package (``labs/*.toml``, sweeps excluded), sorted."""
    return [name for name, sweep in _bundled_files() if not sweep]


def bundled_sweep_names() -> list[str]:
    """Names of the sweep files shipped next to the labs."""
    return [name for name, sweep in _bundled_files() if sweep]


def find_bundled(name: str) -> Path | None:
    """The bundled lab file called ``name`` (with or without ``.toml``), if any."""
    stem = name[:-5] if name.endswith(".toml") else name
    if not _NAME_RE.fullmatch(stem):
        return None
    candidate = _bundled_dir() / f"{stem}.toml"
    return Path(str(candidate)) if candidate.is_file() else None


def resolve_lab_path(lab: str | Path) -> Path:
    """A lab file path: an existing path as given, else a bundled lab of that name."""
    path = Path(lab)
    if path.exists():
        return path
    found = find_bundled(str(lab))
    if found is not None:
        return found
    known = ", ".join(bundled_names())
    raise LabError(f"no such lab file, and no bundled lab of that name (bundled: {known})",
                   source=str(lab))


def validate(raw: dict[str, Any], *, name: str = "lab", source: str | None = None,
             base_dir: Path | None = None) -> Lab:
    """Check a parsed lab and fill in defaults; raises :class:`LabError` (one line)."""
    try:
        return _validate(raw, name, source, base_dir)
    except LabError as exc:
        raise exc.with_source(source) from None


def _validate(raw: dict[str, Any], default_name: str, source: str | None,
              base_dir: Path | None) -> Lab:
    check_table(raw, "lab")
    if ("lab" in raw or "grid" in raw) and "workload" not in raw:
        raise LabError("this is a sweep file, not a lab: run it with `mrc-lab sweep`")
    check_keys(raw, TOP_KEYS, "")
    lab_name = check_str(raw.get("name", default_name), "name")
    if not _NAME_RE.fullmatch(lab_name):
        raise LabError(f"{lab_name!r} must be letters, digits, '-' or '_' (it names the output "
                       "folder)", "name")
    description = check_str(raw.get("description", ""), "description")
    if "\n" in description.strip():
        raise LabError("must be one line (it is listed by `mrc-lab labs`)", "description")
    spec, preset_name = _fabric(raw.get("fabric", {}))
    run = _run(_require(raw, "run", "", " (a [run] table with duration_us)"))
    workload = _workload(_require(raw, "workload", "", " (a [workload] table with kind)"),
                         spec, base_dir)
    _check_workload_in_run(workload, run)
    transports = _transports(raw.get("transport"), spec)
    faults = _faults(raw.get("fault", []), spec, run)
    return Lab(name=lab_name, description=description.strip(), fabric=spec,
               fabric_preset=preset_name, workload=workload, transports=transports,
               faults=faults, run=run, raw=raw, source=source, base_dir=base_dir)


# ---------------------------------------------------------------------- [fabric]
def _fabric_fields() -> dict[str, Any]:
    hints = typing.get_type_hints(FabricSpec)
    return {f.name: hints[f.name] for f in dataclasses.fields(FabricSpec) if f.name != "name"}


def _fabric(table: Any) -> tuple[FabricSpec, str | None]:
    table = check_table(table, "fabric")
    fields = _fabric_fields()
    check_keys(table, ("preset", *fields), "fabric")
    values: dict[str, Any] = {}
    for k, v in table.items():
        if k == "preset":
            check_str(v, "fabric.preset", tuple(sorted(PRESETS)))
            continue
        values[k] = check_hint(v, fields[k], f"fabric.{k}")
    preset_name = table.get("preset")
    if preset_name is None and not values:
        preset_name = DEFAULT_PRESET
    try:
        if preset_name is not None:
            spec = preset(preset_name, **values)
        else:
            spec = FabricSpec(**values)
    except FabricError as exc:
        raise LabError(str(exc), "fabric") from None
    return spec, preset_name


def check_hint(value: Any, hint: Any, key: str) -> Any:
    """Check a TOML value against a dataclass field's type hint (int, float, bool, str,
    Literal, X | None, tuple/list of X); anything more exotic is passed through."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        errors: list[LabError] = []
        for option in options:
            try:
                return check_hint(value, option, key)
            except LabError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return value
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices or isinstance(value, bool) != isinstance(choices[0], bool):
            raise LabError(f"{_show(value)} is not one of {', '.join(map(repr, choices))}", key)
        return value
    if origin in (tuple, list):
        items = check_list(value, key)
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if args:
            return [check_hint(v, args[0], f"{key}.{i}") for i, v in enumerate(items)]
        return items
    if hint is bool:
        return check_bool(value, key)
    if hint is int:
        return check_int(value, key)
    if hint is float:
        return check_float(value, key)
    if hint is str:
        return check_str(value, key)
    return value


# ---------------------------------------------------------------------- [run]
def nice_bin_us(duration_us: float) -> float:
    """A round bin width (1-2-5 series) giving about 100 bins."""
    target = duration_us / 100
    exponent = math.floor(math.log10(target))
    options = [m * 10.0 ** e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
    best = min(options, key=lambda x: abs(math.log(x / target)))
    return float(f"{best:.6g}")


def _run(table: Any) -> RunSpec:
    table = check_table(table, "run")
    check_keys(table, RUN_KEYS, "run")
    duration = check_float(_require(table, "duration_us", "run"), "run.duration_us", gt=0)
    if "bin_us" in table:
        bin_us = check_float(table["bin_us"], "run.bin_us", gt=0)
    else:
        bin_us = nice_bin_us(duration)
    check_bin(bin_us, duration)
    seed = check_int(table.get("seed", 1), "run.seed", minimum=0, maximum=2**63 - 1)
    grace = check_float(table.get("grace_us", duration), "run.grace_us", minimum=0)
    return RunSpec(duration_us=duration, bin_us=bin_us, seed=seed, grace_us=grace)


def check_bin(bin_us: float, duration_us: float, key: str = "run.bin_us") -> None:
    if bin_us < 0.001:
        raise LabError(f"{bin_us:g} us is below the 1 ns resolution of the bins", key)
    if bin_us > duration_us:
        raise LabError(f"{bin_us:g} us is longer than the run ({duration_us:g} us)", key)
    if duration_us / bin_us > MAX_BINS:
        raise LabError(f"{duration_us / bin_us:,.0f} bins is too many (at most {MAX_BINS:,}); "
                       "use a wider bin", key)


# ---------------------------------------------------------------------- [workload]
def _workload(table: Any, spec: FabricSpec, base_dir: Path | None) -> Workload:
    table = check_table(table, "workload")
    kind = check_str(_require(table, "kind", "workload"), "workload.kind", WORKLOAD_KINDS)
    check_keys(table, WORKLOAD_KEYS[kind], "workload")
    start = check_float(table.get("start_us", 0.0), "workload.start_us", minimum=0)
    if kind == "write_bw":
        return _write_bw(table, spec, start)
    if kind in COLLECTIVE_KINDS:
        hosts = _hosts_or_all(table, spec)
        return Collective(kind=kind, hosts=hosts, sizes_bytes=_sizes(table),
                          iters=check_int(table.get("iters", 5), "workload.iters", minimum=1),
                          warmup_iters=check_int(table.get("warmup_iters", 1),
                                                 "workload.warmup_iters", minimum=0),
                          start_us=start)
    if kind == "permutation":
        hosts = _hosts_or_all(table, spec)
        size = check_int(table.get("size_bytes", 2 << 20), "workload.size_bytes", gt=0,
                          maximum=MAX_MESSAGE_BYTES)
        return Permutation(hosts=hosts, size_bytes=size, start_us=start)
    return _connection_matrix(table, spec, base_dir)


def _hosts_or_all(table: Mapping[str, Any], spec: FabricSpec) -> tuple[int, ...]:
    if "hosts" in table:
        return check_hosts(table["hosts"], "workload.hosts", spec)
    if spec.hosts < 2:
        raise LabError("needs at least 2 hosts", "workload")
    return tuple(range(spec.hosts))


def _check_workload_in_run(workload: Workload, run: RunSpec) -> None:
    """Traffic that would start after the run ends is a mistake, not an empty result."""
    if isinstance(workload, ConnectionMatrix):
        for flow in workload.flows:
            if flow.start_us >= run.duration_us:
                where = "workload.file" if workload.file else "workload.text"
                raise LabError(f"line {flow.line}: flow {flow.flow_id} starts at "
                               f"{flow.start_us:g} us, after the run ends "
                               f"(duration_us = {run.duration_us:g})", where)
    elif workload.start_us >= run.duration_us:
        raise LabError(f"{workload.start_us:g} us is not inside the run "
                       f"(duration_us = {run.duration_us:g})", "workload.start_us")


def default_pair(spec: FabricSpec) -> tuple[int, int]:
    """Host 0 and the first host under another T0, so traffic crosses the T1 tier."""
    if spec.hosts < 2:
        raise LabError("write_bw needs at least 2 hosts", "workload")
    return (0, spec.hosts_per_t0 if spec.t0_per_plane > 1 else 1)


def _write_bw(table: Mapping[str, Any], spec: FabricSpec, start: float) -> WriteBw:
    if "pairs" in table:
        pairs = []
        for i, pair in enumerate(check_list(table["pairs"], "workload.pairs", min_len=1)):
            key = f"workload.pairs.{i}"
            items = check_list(pair, key)
            if len(items) != 2:
                raise LabError(f"expected [src, dst], got {len(items)} entries", key)
            src, dst = (check_host(v, f"{key}.{j}", spec) for j, v in enumerate(items))
            if src == dst:
                raise LabError(f"a host cannot write to itself (h{src})", key)
            pairs.append((src, dst))
    else:
        pairs = [default_pair(spec)]
    return WriteBw(
        pairs=tuple(pairs),
        bidirectional=check_bool(table.get("bidirectional", True), "workload.bidirectional"),
        message_bytes=check_int(table.get("message_bytes", 1 << 20), "workload.message_bytes",
                                gt=0, maximum=MAX_MESSAGE_BYTES),
        tx_depth=check_int(table.get("tx_depth", 4), "workload.tx_depth", minimum=1,
                           maximum=4096),
        start_us=start)


def size_series(min_bytes: int, max_bytes: int, step_factor: int) -> tuple[int, ...]:
    """nccl-tests' ``-b MIN -e MAX -f FACTOR`` sizes."""
    sizes = [min_bytes]
    while sizes[-1] * step_factor <= max_bytes:
        sizes.append(sizes[-1] * step_factor)
    return tuple(sizes)


def _sizes(table: Mapping[str, Any]) -> tuple[int, ...]:
    ranged = [k for k in ("min_bytes", "max_bytes", "step_factor") if k in table]
    if "sizes_bytes" in table:
        if ranged:
            raise LabError("give either sizes_bytes or min_bytes/max_bytes/step_factor, not both",
                           f"workload.{ranged[0]}")
        items = check_list(table["sizes_bytes"], "workload.sizes_bytes", min_len=1)
        return tuple(check_int(v, f"workload.sizes_bytes.{i}", gt=0, maximum=MAX_MESSAGE_BYTES)
                     for i, v in enumerate(items))
    if not ranged:
        return (1 << 20,)
    lo = check_int(_require(table, "min_bytes", "workload", " (with max_bytes)"),
                   "workload.min_bytes", gt=0)
    hi = check_int(table.get("max_bytes", lo), "workload.max_bytes", gt=0,
                   maximum=MAX_MESSAGE_BYTES)
    factor = check_int(table.get("step_factor", 2), "workload.step_factor", minimum=2)
    if hi < lo:
        raise LabError(f"{hi} is below min_bytes ({lo})", "workload.max_bytes")
    return size_series(lo, hi, factor)


def _connection_matrix(table: Mapping[str, Any], spec: FabricSpec,
                       base_dir: Path | None) -> ConnectionMatrix:
    from mrc.labs.workloads import parse_connection_matrix

    has_file, has_text = "file" in table, "text" in table
    if has_file == has_text:
        raise LabError("give exactly one of file (an htsim connection-matrix path) or text",
                       "workload")
    if has_text:
        text = check_str(table["text"], "workload.text")
        matrix = parse_connection_matrix(text, "workload.text")
        file = None
    else:
        file = check_str(table["file"], "workload.file")
        path = Path(file)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise LabError(f"no such connection-matrix file: {path}", "workload.file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise LabError(f"cannot read {path}: {exc.strerror or exc}", "workload.file") from None
        if b"\x00" in data:
            raise LabError(f"{path.name}: binary data (NUL bytes), not a connection matrix",
                           "workload.file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LabError(f"{path.name}: not UTF-8 text (bad byte at offset {exc.start})",
                           "workload.file") from None
        matrix = parse_connection_matrix(text, f"workload.file ({path.name})")
    nodes, flows = matrix
    if nodes > spec.hosts:
        raise LabError(f"the matrix has {nodes} nodes but the fabric only {spec.hosts} hosts",
                       "workload.file" if file else "workload.text")
    return ConnectionMatrix(flows=tuple(flows), nodes=nodes, file=file,
                            text=None if file else text)


# ---------------------------------------------------------------------- [transport.NAME]
def _transports(table: Any, spec: FabricSpec) -> dict[str, TransportSpec]:
    if table is None:
        return {k: TransportSpec(k, k, {}) for k in TRANSPORT_KINDS}
    table = check_table(table, "transport")
    if not table:
        raise LabError("no transports: add a [transport.mrc] and/or [transport.rc] table",
                       "transport")
    return {tname: check_transport(tname, body, spec) for tname, body in table.items()}


def check_transport(tname: str, body: Any, spec: FabricSpec) -> TransportSpec:
    """Kind, key names and value types here (with dotted paths); ranges are the transport's
    own checks (``mrc.transport.params``), run now so a bad value stops the lab up front."""
    prefix = f"transport.{tname}"
    if not _NAME_RE.fullmatch(tname):
        raise LabError("a transport name is letters, digits, '-' or '_'", prefix)
    body = check_table(body, prefix)
    if "kind" in body:
        kind = check_str(body["kind"], f"{prefix}.kind", TRANSPORT_KINDS)
        if tname in TRANSPORT_KINDS and kind != tname:
            raise LabError(f"{kind!r} contradicts the table name {tname!r}", f"{prefix}.kind")
    elif tname in TRANSPORT_KINDS:
        kind = tname
    else:
        raise LabError(f"missing required key (kind = \"mrc\" or \"rc\"; {tname!r} is not a kind)",
                       f"{prefix}.kind")
    params = {k: v for k, v in body.items() if k != "kind"}
    try:
        from mrc.transport import params as tparams
    except ImportError:
        check_keys(params, _FALLBACK_TRANSPORT_KEYS[kind], prefix)
        return TransportSpec(tname, kind, params)
    checked = _typed_params(params, kind, prefix, tparams)
    try:
        if kind == "mrc":
            tparams.mrc_config(spec, checked, prefix)
        else:
            tparams.rc_config(spec, checked, prefix)
    except (tparams.ParamError, ValueError, TypeError) as exc:
        raise _param_error(exc, prefix, checked) from None
    return TransportSpec(tname, kind, checked)


def _config_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _typed_params(params: dict[str, Any], kind: str, prefix: str, tparams: Any) -> dict[str, Any]:
    """Check each key exists and its value has the config field's type (``*_us`` keys map
    to ``*_ps`` fields and take microseconds)."""
    if kind == "mrc":
        from mrc.transport.mrc.cc import CcConfig
        from mrc.transport.mrc.config import MrcConfig

        tables = {"": (tparams.MRC_KEYS, _config_hints(MrcConfig)),
                  "cc": (tparams.CC_KEYS, _config_hints(CcConfig))}
    else:
        from mrc.transport.rc_qp import RcConfig

        tables = {"": (tparams.RC_KEYS, {**_config_hints(RcConfig), "qps_per_plane": int})}

    def check(table: dict[str, Any], sub: str, where: str) -> dict[str, Any]:
        accepted, hints = tables[sub]
        allowed = dict(accepted)
        if sub == "" and "cc" in tables:
            allowed["cc"] = "cc"
        check_keys(table, allowed, where)
        out: dict[str, Any] = {}
        for k, v in table.items():
            key = f"{where}.{k}"
            if k == "cc" and sub == "":
                out[k] = check(check_table(v, key), "cc", key)
                continue
            field_name = accepted[k]
            if field_name.endswith("_ps") and k.endswith("_us"):
                out[k] = check_float(v, key, minimum=0)
            else:
                out[k] = check_hint(v, hints.get(field_name, Any), key)
        return out

    return check(params, "", prefix)


def _param_error(exc: BaseException, prefix: str, checked: dict[str, Any]) -> LabError:
    """A transport's range-check message as a LabError on the most specific dotted key."""
    message = _one_line(exc)
    key = prefix
    head, sep, rest = message.partition(": ")
    if sep and head.startswith(prefix):
        key, message = head, rest
    if key == prefix:
        flat = list(checked) + [f"cc.{k}" for k in checked.get("cc", {}) or {}]
        for lab_key in flat:
            leaf = lab_key.rsplit(".", 1)[-1]
            field = leaf[:-3] + "_ps" if leaf.endswith("_us") else leaf
            if re.search(rf"\b({re.escape(leaf)}|{re.escape(field)})\b", message):
                key = f"{prefix}.{lab_key}"
                break
    return LabError(message, key)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------------- [[fault]]
def _faults(items: Any, spec: FabricSpec, run: RunSpec) -> tuple[FaultSpec, ...]:
    if isinstance(items, dict):
        raise LabError("write faults as [[fault]] entries (an array of tables), not [fault]",
                       "fault")
    items = check_list(items, "fault")
    faults = tuple(_fault(i, body, spec, run) for i, body in enumerate(items))
    check_fault_consistency(faults)
    return faults


def _fault(i: int, body: Any, spec: FabricSpec, run: RunSpec) -> FaultSpec:
    prefix = f"fault.{i}"
    body = check_table(body, prefix)
    kind = check_str(_require(body, "kind", prefix), f"{prefix}.kind", FAULT_KINDS)
    allowed_keys = (*_COMMON_FAULT_KEYS, *FAULT_KEYS[kind])
    for k in body:
        users = [other for other, keys in FAULT_KEYS.items() if k in keys]
        if k not in allowed_keys and users:
            raise LabError(f"{kind} takes no {k} (it belongs to {', '.join(users)})",
                           f"{prefix}.{k}")
    check_keys(body, allowed_keys, prefix)
    target_text = check_str(_require(body, "target", prefix), f"{prefix}.target")
    try:
        element = names.resolve(spec, target_text)
    except names.UnknownElementError as exc:
        raise LabError(str(exc), f"{prefix}.target") from None
    allowed = FAULT_TARGETS[kind]
    if element.kind not in allowed:
        raise LabError(f"{kind} needs {_TARGET_WORDS[allowed]}; {element.name!r} is a "
                       f"{_KIND_WORDS[element.kind]}", f"{prefix}.target")
    at = check_float(_require(body, "at_us", prefix), f"{prefix}.at_us", minimum=0)
    if at >= run.duration_us:
        raise LabError(f"{at:g} us is not inside the run (duration_us = {run.duration_us:g})",
                       f"{prefix}.at_us")
    params: dict[str, Any] = {}
    until: float | None = None
    if kind == "link_flap":
        period = check_float(_require(body, "period_us", prefix), f"{prefix}.period_us", gt=0)
        down = check_float(_require(body, "down_us", prefix), f"{prefix}.down_us", gt=0)
        count = check_int(_require(body, "count", prefix), f"{prefix}.count", minimum=1,
                          maximum=100_000)
        if down >= period:
            raise LabError(f"down_us ({down:g}) must be shorter than period_us ({period:g}) so "
                           "the link comes back up between flaps", f"{prefix}.down_us")
        params = {"period_us": period, "down_us": down, "count": count}
        until = at + (count - 1) * period + down
    elif kind in ("switch_reboot", "loss", "degrade", "drain"):
        if kind == "loss":
            params["probability"] = check_float(_require(body, "probability", prefix),
                                                f"{prefix}.probability", gt=0, maximum=1)
        if kind == "degrade":
            params["rate_fraction"] = check_float(_require(body, "rate_fraction", prefix),
                                                  f"{prefix}.rate_fraction", gt=0, lt=1)
        if kind == "switch_reboot":
            duration = check_float(_require(body, "duration_us", prefix, " (how long it is down)"),
                                   f"{prefix}.duration_us", gt=0)
        elif "duration_us" in body:
            duration = check_float(body["duration_us"], f"{prefix}.duration_us", gt=0)
        else:
            duration = None
        if duration is not None:
            params["duration_us"] = duration
            until = at + duration
    if until is not None and until > run.duration_us:
        raise LabError(f"{kind} lasts until {until:g} us, after the run ends "
                       f"(duration_us = {run.duration_us:g})", prefix)
    return FaultSpec(index=i, kind=kind, target=element.name, element=element, at_us=at,
                     until_us=until, params=params)


@dataclass(frozen=True)
class FaultAction:
    """One timed primitive a fault expands to (``link_flap`` gives ``count`` down/up pairs)."""

    time_us: float
    action: str  # link_down link_up switch_down switch_up port_down port_up loss_start
    #              loss_end degrade_start degrade_end drain_start drain_end
    target: str
    fault: int  # index of the [[fault]] entry
    params: dict[str, Any] = field(default_factory=dict)


_ACTION_OF = {"link_down": "link_down", "link_up": "link_up", "switch_down": "switch_down",
              "switch_up": "switch_up", "port_down": "port_down", "port_up": "port_up"}
_WINDOW_ACTIONS = {"switch_reboot": ("switch_down", "switch_up"),
                   "loss": ("loss_start", "loss_end"),
                   "degrade": ("degrade_start", "degrade_end"),
                   "drain": ("drain_start", "drain_end")}


def expand(fault: FaultSpec) -> Iterator[FaultAction]:
    """The timed primitives of one fault, in time order."""
    if fault.kind in _ACTION_OF:
        yield FaultAction(fault.at_us, _ACTION_OF[fault.kind], fault.target, fault.index)
    elif fault.kind == "link_flap":
        p = fault.params
        for k in range(p["count"]):
            t = fault.at_us + k * p["period_us"]
            yield FaultAction(t, "link_down", fault.target, fault.index, {"flap": k})
            yield FaultAction(t + p["down_us"], "link_up", fault.target, fault.index, {"flap": k})
    else:
        start, end = _WINDOW_ACTIONS[fault.kind]
        extra = {k: v for k, v in fault.params.items() if k != "duration_us"}
        yield FaultAction(fault.at_us, start, fault.target, fault.index, extra)
        if fault.until_us is not None:
            yield FaultAction(fault.until_us, end, fault.target, fault.index)


def schedule(faults: tuple[FaultSpec, ...] | list[FaultSpec]) -> list[FaultAction]:
    """All primitives of a lab, sorted by time then by their order in the file."""
    actions = [a for f in faults for a in expand(f)]
    return sorted(actions, key=lambda a: (a.time_us, a.fault))


# (action -> (state family, new state)); an action must change its family's state.
_TRANSITIONS: dict[str, tuple[str, bool]] = {
    "link_down": ("down", True), "link_up": ("down", False),
    "switch_down": ("down", True), "switch_up": ("down", False),
    "port_down": ("down", True), "port_up": ("down", False),
    "loss_start": ("loss", True), "loss_end": ("loss", False),
    "degrade_start": ("degrade", True), "degrade_end": ("degrade", False),
    "drain_start": ("drain", True), "drain_end": ("drain", False),
}
_STATE_WORDS = {("down", True): "already down", ("down", False): "not down",
                ("loss", True): "already lossy", ("loss", False): "not lossy",
                ("degrade", True): "already degraded", ("degrade", False): "not degraded",
                ("drain", True): "already drained", ("drain", False): "not drained"}


def check_fault_consistency(faults: tuple[FaultSpec, ...]) -> None:
    """Refuse contradictory schedules: an element taken down twice, brought up while up,
    overlapping windows of the same kind on one element, or a down and up at one instant."""
    state: dict[tuple[str, str], tuple[bool, int, float]] = {}
    for action in schedule(faults):
        family, new = _TRANSITIONS[action.action]
        key = (family, action.target)
        current, by, since = state.get(key, (False, -1, 0.0))
        if current == new:
            word = _STATE_WORDS[(family, new)]
            because = f" (since {since:g} us, fault.{by})" if by >= 0 else ""
            raise LabError(f"{action.action.replace('_', ' ')} of {action.target} at "
                           f"{action.time_us:g} us contradicts the schedule: it is {word} then"
                           f"{because}", f"fault.{action.fault}")
        if by >= 0 and since == action.time_us and by != action.fault:
            raise LabError(f"{action.action.replace('_', ' ')} of {action.target} at "
                           f"{action.time_us:g} us happens at the same instant as fault.{by}; "
                           "the order would be ambiguous", f"fault.{action.fault}")
        state[key] = (new, action.fault, action.time_us)


def fault_windows(lab: Lab) -> list[dict[str, Any]]:
    """``[{kind, target, at_us, until_us}]`` per [[fault]] entry, for summaries and plots.

    A ``*_down`` lasts until the matching ``*_up`` of the same element (None if never);
    an ``*_up`` is an instant (``until_us == at_us``); windows end at ``at_us + duration``.
    """
    out = []
    ups = {"link_down": "link_up", "switch_down": "switch_up", "port_down": "port_up"}
    for f in lab.faults:
        until = f.until_us
        if f.kind in ups:
            later = [g.at_us for g in lab.faults
                     if g.kind == ups[f.kind] and g.target == f.target and g.at_us > f.at_us]
            until = min(later) if later else None
        elif f.kind in ups.values():
            until = f.at_us
        out.append({"kind": f.kind, "target": f.target, "at_us": f.at_us, "until_us": until})
    return out


# ====================================================================== dotted paths
def _split(path: str) -> list[str]:
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise LabError(f"not a dotted key path: {path!r}")
    return path.split(".")


def _step(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise LabError(f"no key {part!r}{_suggest(part, node)}", path)
        return node[part]
    if isinstance(node, list):
        index = _index(node, part, path)
        return node[index]
    raise LabError(f"{toml_type(node)} value has no key {part!r}", path)


def _index(node: list[Any], part: str, path: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", part):
        raise LabError(f"{part!r} is not an array index", path)
    index = int(part)
    if not -len(node) <= index < len(node):
        raise LabError(f"index {index} out of range (the array has {len(node)} entries)", path)
    return index


def get_key(lab: Mapping[str, Any] | Lab, path: str) -> Any:
    """The value at a dotted path (``transport.mrc.probe_interval_us``, ``fault.0.target``).

    On a :class:`Lab`, defaults are visible (the resolved form); on a dict, only what it holds.
    """
    node: Any = lab.to_dict() if isinstance(lab, Lab) else lab
    for part in _split(path):
        node = _step(node, part, path)
    return node


def set_key(lab: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``lab`` with ``value`` at ``path`` (tables on the way are created).

    Pure, so a sweep can derive many runs from one base lab; validate the result with
    :func:`validate` (an unknown key is reported there, with its path).
    """
    parts = _split(path)
    root: dict[str, Any] = copy.deepcopy(dict(lab))
    node: Any = root
    for depth, part in enumerate(parts[:-1]):
        here = ".".join(parts[: depth + 1])
        if isinstance(node, dict):
            node = node.setdefault(part, {})
        elif isinstance(node, list):
            node = node[_index(node, part, here)]
        else:
            raise LabError(f"{toml_type(node)} value has no key {part!r}", here)
    last = parts[-1]
    if isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    elif isinstance(node, list):
        node[_index(node, last, path)] = copy.deepcopy(value)
    else:
        raise LabError(f"{toml_type(node)} value has no key {last!r}", path)
    return root


def set_keys(lab: Mapping[str, Any], assignments: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(lab)
    for path, value in assignments.items():
        out = set_key(out, path, value)
    return out


def key_paths(lab: Mapping[str, Any] | Lab) -> list[str]:
    """Every leaf's dotted path, in document order (arrays of scalars are leaves)."""
    root = lab.to_dict() if isinstance(lab, Lab) else lab
    out: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else k)
        elif isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
            for i, v in enumerate(node):
                walk(v, f"{prefix}.{i}")
        else:
            out.append(prefix)

    walk(root, "")
    return out


def parse_assignment(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line; VALUE is read as TOML, else taken as a string."""
    if "=" not in text:
        raise LabError(f"expected KEY=VALUE, got {text!r}", "--set")
    path, _, value_text = text.partition("=")
    path = path.strip()
    _split(path)
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    return path, value


def materialize(base: Lab) -> dict[str, Any]:
    """The base lab's raw dict with defaulted sections written out, so that setting one key
    inside them keeps the rest of the default (setting ``transport.mrc.ev_count`` must not
    drop the default ``rc``; setting ``fabric.planes`` must keep the default preset)."""
    raw = copy.deepcopy(base.raw)
    if "transport" not in raw:
        raw["transport"] = {name: {} for name in base.transports}
    if "fabric" not in raw and base.fabric_preset is not None:
        raw["fabric"] = {"preset": base.fabric_preset}
    return raw
