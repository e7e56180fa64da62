"""Sweep files: one base lab, a grid of parameters, many runs.

One lab answers one question; a sweep answers "how does X move with Y, over N seeds". A sweep
file (TOML) names a base lab and the lab keys to vary, by their dotted paths (the same paths
``mrc-lab run --set`` takes)::

    name = "sweep-t1-reboot"             # optional, default: the file name
    description = "one line"
    lab = "t1-reboot"                    # base lab: a path (relative to this file), a bundled
                                         # lab name, or an inline [lab] table (a whole lab);
                                         # or a fleet file (kind = "fleet": mrc-lab fleet)
    model = "packet"                     # packet (default) | flow: the flow-level model
    transports = ["mrc", "rc"]           # optional subset of the lab's transports

    [set]                                # optional: fixed overrides applied to every run
    "run.duration_us" = 2000

    [grid]                               # the product of these lists (file order; the last
    "run.seed" = [1, 2, 3]               # varies fastest); nested tables work as well:
    fault.0.target = ["p0.t1.0", "p0.t1.1"]   # (unquoted = the same dotted path)

    [[zip]]                              # optional, any number: lists that advance together
    "fault.0.at_us" = [200, 400]         # (equal lengths); each [[zip]] is one axis of the
    "fault.0.duration_us" = [300, 600]   # product

Every grid point is validated as a full lab before anything runs (bad input: one line, exit
status 2). A run's id is a blake2b digest of the canonical JSON of its resolved lab and
transports (and model, when not the packet model), so it is stable across invocations and machines (never ``hash()``), and a sweep
re-run in the same folder skips the runs already complete (resume,
:mod:`mrc.labs.sweep.execute`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import (
    NAME_RE,
    check_keys,
    check_list,
    check_str,
    check_table,
    toml_type,
)
from mrc.labs.schema.files import find_bundled, parse_toml, read_lab_text, resolve_lab_path
from mrc.labs.schema.keys import set_key
from mrc.labs.schema.lab import Lab
from mrc.labs.schema.lab_file import load_lab, validate
from mrc.labs.sweep import models
from mrc.labs.sweep.plan import Sweep, SweepRun

SWEEP_KEYS = ("name", "description", "lab", "model", "transports", "set", "grid", "zip")
MAX_RUNS = 100_000
MAX_SWEEP_BYTES = 4 * 1024 * 1024
ID_BYTES = 6  # 12 hex digits: collisions are negligible for any grid we would run

_INDEX_RE = re.compile(r"-?[0-9]+")


def canonical_json(value: Any) -> str:
    """Key-order independent JSON: what run ids are hashed from."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def run_id(lab: Mapping[str, Any], lab_name: str, transports: Sequence[str] | None,
           model: str = "packet") -> str:
    """A stable id for one run: blake2b of its resolved lab, transport selection and (when
    not the packet model) model, so the same run gets the same folder on every invocation
    and machine (unlike ``hash()``), and a packet run's id is what it was before models."""
    doc: dict[str, Any] = {"lab": lab, "name": lab_name,
                           "transports": list(transports) if transports else None}
    if model != "packet":
        doc["model"] = model
    payload = canonical_json(doc)
    return hashlib.blake2b(payload.encode(), digest_size=ID_BYTES).hexdigest()


def read_sweep_text(path: Path) -> str:
    return read_lab_text(path, kind="sweep file", max_bytes=MAX_SWEEP_BYTES,
                         missing="no such sweep file, and no bundled sweep of that name")


def load_sweep(sweep: str | Path | Mapping[str, Any], *, base_dir: Path | None = None,
               name: str | None = None) -> Sweep:
    """A validated :class:`Sweep` from a TOML path or a parsed dict; raises :class:`LabError`
    (one line: file, key, problem) before anything runs."""
    if isinstance(sweep, Mapping):
        return _guard(lambda: _build(dict(sweep), name or "sweep", None, base_dir or Path.cwd()),
                      None)
    path = Path(sweep)
    source = str(sweep)
    if not path.exists():  # a bundled sweep by name (labs/sweep-*.toml), like bundled labs
        path = find_bundled(source) or path
    raw = parse_toml(read_sweep_text(path), source)
    return _guard(lambda: _build(raw, name or path.stem, source, path.parent), source)


def _guard(build: Callable[[], Sweep], source: str | None) -> Sweep:
    try:
        return build()
    except LabError as exc:
        raise exc.with_source(source) from None


def _build(raw: dict[str, Any], default_name: str, source: str | None,
           base_dir: Path) -> Sweep:
    if "lab" not in raw and {"workload", "run"} & set(raw):
        raise LabError("this is a lab file, not a sweep file: a sweep names a base lab "
                       "(lab = \"t1-reboot\") and a [grid] of its keys to vary (mrc-lab run "
                       "runs a lab)")
    check_keys(raw, SWEEP_KEYS, "")
    sweep_name = check_str(raw.get("name", default_name), "name")
    if not NAME_RE.fullmatch(sweep_name):
        raise LabError(f"{sweep_name!r} must be letters, digits, '-' or '_' (it names the "
                       "output folder)", "name")
    description = check_str(raw.get("description", ""), "description").strip()
    base = _base_lab(raw, base_dir)
    model = "fleet" if not isinstance(base, Lab) else check_str(
        raw.get("model", "packet"), "model", models.LAB_MODELS)
    if model == "fleet" and "model" in raw:
        raise LabError("a fleet file runs the fleet model; model is for lab files", "model")
    transports = _transport_selection(raw.get("transports"))
    fixed = dict(_leaves(check_table(raw.get("set", {}), "set"), "", "set"))
    axes_values = _axes(raw)
    paths = [(where, p) for where, axis in axes_values for p in axis]
    _check_disjoint([(f"set.{p}", p) for p in fixed] + paths)
    start = models.materialize(base)
    for path, value in fixed.items():
        start = apply_param(start, path, value, f"set.{path}")
    runs = _expand(base, start, fixed, axes_values, transports, model)
    return Sweep(name=sweep_name, description=description, source=source, base=base,
                 fixed=fixed, axes=tuple(tuple(axis) for _, axis in axes_values),
                 transports=transports, runs=tuple(runs), model=model)


def _base_lab(raw: Mapping[str, Any], base_dir: Path) -> Any:
    """The base lab, or a fleet file (:func:`mrc.labs.sweep.models.fleet_base`)."""
    if "lab" not in raw:
        raise LabError("missing required key (a lab file, a bundled lab name, or an inline "
                       "[lab] table)", "lab")
    spec = raw["lab"]
    try:
        fleet = models.fleet_base(spec, base_dir)
    except LabError as exc:
        raise LabError(f"base fleet {exc}", "lab") from None
    if fleet is not None:
        return fleet
    if isinstance(spec, dict):
        try:
            return validate(copy.deepcopy(spec), name=str(spec.get("name", "lab")),
                            base_dir=base_dir)
        except LabError as exc:
            raise LabError(exc.message, f"lab.{exc.key}" if exc.key else "lab") from None
    text = check_str(spec, "lab")
    beside = base_dir / text
    try:
        return load_lab(beside if beside.is_file() else resolve_lab_path(text))
    except LabError as exc:
        raise LabError(f"base lab {exc}", "lab") from None


def _transport_selection(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    items = check_list(value, "transports", min_len=1)
    names = tuple(check_str(v, f"transports.{i}") for i, v in enumerate(items))
    if len(set(names)) != len(names):
        raise LabError("a transport is listed twice", "transports")
    return names


def _leaves(table: Mapping[str, Any], prefix: str, where: str) -> Iterable[tuple[str, Any]]:
    """Dotted path -> value; quoted (``"run.seed"``) and nested (``run.seed``) keys agree."""
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if any(not part for part in path.split(".")):
            raise LabError("not a dotted key path", f"{where}.{path}" if where else path)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path, where)
        else:
            yield path, value


def _value_list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise LabError(f"expected an array of values to sweep, got {toml_type(value)} "
                       f"{value!r:.40} (a single fixed value goes in [set])", key)
    if not value:
        raise LabError("an empty array sweeps nothing", key)
    for i, item in enumerate(value):
        same = next((earlier for earlier in value[:i] if earlier == item), _NONE)
        if same is not _NONE:  # (1 and 1.0 are one value: the same run twice)
            raise LabError(f"{same!r} and {item!r} are the same value: each run would repeat",
                           key)
    return value


_NONE = object()


def _axes(raw: Mapping[str, Any]) -> list[tuple[str, dict[str, list[Any]]]]:
    """``[(where, {path: values})]``: each [grid] key is one axis, each [[zip]] one axis."""
    axes: list[tuple[str, dict[str, list[Any]]]] = []
    for path, values in _leaves(check_table(raw.get("grid", {}), "grid"), "", "grid"):
        axes.append((f"grid.{path}", {path: _value_list(values, f"grid.{path}")}))
    zips = raw.get("zip", [])
    if isinstance(zips, dict):
        raise LabError("write zipped lists as [[zip]] entries (an array of tables)", "zip")
    for i, table in enumerate(check_list(zips, "zip")):
        where = f"zip.{i}"
        group = {p: _value_list(v, f"{where}.{p}")
                 for p, v in _leaves(check_table(table, where), "", where)}
        if not group:
            raise LabError("an empty [[zip]] sweeps nothing", where)
        lengths = {p: len(v) for p, v in group.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{p} has {n}" for p, n in lengths.items())
            raise LabError(f"zipped arrays must have equal lengths ({shown})", where)
        axes.append((where, group))
    if not axes:
        raise LabError("nothing to sweep: add a [grid] table (or [[zip]]) of dotted lab keys "
                       "with arrays of values", "grid")
    return axes


def _check_disjoint(paths: Sequence[tuple[str, str]]) -> None:
    """Refuse a path given twice, or one inside another: the result would depend on order."""
    for i, (where_a, a) in enumerate(paths):
        for where_b, b in paths[:i]:
            if a == b:
                raise LabError(f"{a!r} is also given in {where_b}", where_a)
            if a.startswith(b + ".") or b.startswith(a + "."):
                raise LabError(f"{a!r} overlaps {b!r} (set by {where_b}); the order would be "
                               "ambiguous", where_a)


def apply_param(lab: Mapping[str, Any], path: str, value: Any, key: str) -> dict[str, Any]:
    """``set_key`` with a clear error when the path walks into an array the lab lacks
    (``fault.0.target`` on a lab without faults) instead of inventing a table."""
    node: Any = lab
    parts = path.split(".")
    for depth, part in enumerate(parts[:-1]):
        nxt = parts[depth + 1]
        if isinstance(node, dict):
            if part not in node:
                if _INDEX_RE.fullmatch(nxt):
                    here = ".".join(parts[: depth + 1])
                    raise LabError(f"the base lab has no {here!r} array to index", key)
                break
            node = node[part]
        elif isinstance(node, list):
            if not _INDEX_RE.fullmatch(part) or not -len(node) <= int(part) < len(node):
                here = ".".join(parts[: depth + 1])
                raise LabError(f"{here!r} is not an entry of the base lab (its array has "
                               f"{len(node)} entries)", key)
            node = node[int(part)]
        else:
            break
    try:
        return set_key(lab, path, value)
    except LabError as exc:
        raise LabError(exc.message, key) from None


def _expand(base: Any, start: dict[str, Any], fixed: Mapping[str, Any],
            axes: list[tuple[str, dict[str, list[Any]]]],
            transports: tuple[str, ...] | None, model: str = "packet") -> list[SweepRun]:
    total = math.prod(len(next(iter(group.values()))) for _, group in axes)
    if total > MAX_RUNS:
        raise LabError(f"{total:,} runs is more than a sweep runs (at most {MAX_RUNS:,})", "grid")
    runs: list[SweepRun] = []
    seen: dict[str, int] = {}
    choices = [range(len(next(iter(group.values())))) for _, group in axes]
    for index, pick in enumerate(itertools.product(*choices)):
        lab = start
        params: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for (where, group), k in zip(axes, pick, strict=True):
            for path, values in group.items():
                key = f"{where}.{path}" if where.startswith("zip") else where
                lab = apply_param(lab, path, values[k], key)
                params[path] = values[k]
                origin[path] = key
        try:
            # a full check for the model (the packet simulator's size limit included)
            _, selected = models.check_point(model, lab, base, transports)
        except LabError as exc:
            raise _point_error(exc, params, origin, fixed) from None
        rid = run_id(lab, base.name, transports, model)
        if rid in seen:
            raise LabError(f"runs {seen[rid]} and {index} are the same lab (a value is repeated "
                           f"in the grid): {_show_params(params)}", "grid")
        seen[rid] = index
        runs.append(SweepRun(run_id=rid, index=index, params=params, lab=lab,
                             transports=tuple(t.name for t in selected),
                             kinds=tuple(t.kind for t in selected)))
    return runs


def _show_params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def _point_error(exc: LabError, params: Mapping[str, Any], origin: Mapping[str, str],
                 fixed: Mapping[str, Any]) -> LabError:
    """Blame the grid (or [set]) entry behind a lab error, naming the offending value."""
    if exc.key == "--transport":
        return LabError(exc.message, "transports")
    if exc.key is not None:
        for path, value in params.items():
            if exc.key == path or exc.key.startswith(path + "."):
                return LabError(f"value {value!r}: {exc.message}", origin[path])
        for path in fixed:
            if exc.key == path or exc.key.startswith(path + "."):
                return LabError(exc.message, f"set.{path}")
    where = f"{exc.key}: " if exc.key else ""
    return LabError(f"with {_show_params(params)}: {where}{exc.message}", "grid")
