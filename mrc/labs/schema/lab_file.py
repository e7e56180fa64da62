"""The lab file format (TOML): its top-level keys, and loading a file into a checked :class:`Lab`.

A lab is validated completely before anything runs, and every problem is reported as one
line ``FILE: dotted.key.path: problem`` (a :class:`LabError`, exit status 2). Units live in
key names (``at_us``, ``size_bytes``, ``link_gbps``), so a value is always a plain number.
Each section has its own module, whose field table describes its keys (:func:`field_tables`
lists them all).

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
                                         # permutation | connection_matrix (keys per kind:
                                         # mrc.labs.schema.workload.FIELDS)
    [transport.mrc]                      # one table per transport compared; NAME unique;
    ev_count = 128                       # kind = "mrc" | "rc" unless NAME is a kind; other keys
    [transport.rc]                       # are the transport's config fields
    timeout_exp = 4                      # (mrc.labs.schema.transport.FIELDS)

    [[fault]]                            # any number; kinds and keys:
    kind = "switch_down"                 # mrc.labs.schema.faults.FIELDS
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
:mod:`mrc.labs.schema.keys` has the helpers that ``--set`` and sweeps use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema import fabric as fabric_section
from mrc.labs.schema import faults as fault_section
from mrc.labs.schema import routing as routing_section
from mrc.labs.schema import run as run_section
from mrc.labs.schema import transport as transport_section
from mrc.labs.schema import workload as workload_section
from mrc.labs.schema.checks import NAME_RE, check_keys, check_table
from mrc.labs.schema.fields import Derived, Field, Rule, field_map
from mrc.labs.schema.files import parse_toml, read_lab_text, resolve_lab_path
from mrc.labs.schema.lab import Lab

FIELDS = (
    Field("name", "string", "names the output folder: letters, digits, '-' or '_'",
          default=Derived("the file name")),
    Field("description", "string", "one line, listed by `mrc-lab labs`", default=""),
    Field("fabric", "table", "the fabric (preset and/or numbers)",
          default=Derived(f"preset {fabric_section.DEFAULT_PRESET!r}")),
    Field("workload", "table", "the traffic", missing=" (a [workload] table with kind)"),
    Field("transport", "table", "the transports compared, one table each",
          default=Derived("mrc and rc with their defaults")),
    Field("fault", "array", "the faults, as [[fault]] entries", default=[]),
    Field("run", "table", "duration, bins and seed", missing=" (a [run] table with duration_us)"),
    Field("routing", "table", "how RoCE RC's routed fabric repairs itself (ECMP mode, "
          "detection and convergence times)", default=Derived("real-world defaults")),
)
_F = field_map(FIELDS)


def field_tables() -> dict[str, tuple[Field | Rule, ...]]:
    """Every table of the lab format, by its dotted path (``NAME`` and ``KIND`` stand for a
    transport's name and an entry's kind): what a generated lab-file reference reads."""
    out: dict[str, tuple[Field | Rule, ...]] = {"": FIELDS, "fabric": fabric_section.FIELDS}
    out.update({f"workload(kind={k})": t for k, t in workload_section.FIELDS.items()})
    out.update({f"transport.NAME(kind={k})": t for k, t in transport_section.FIELDS.items()})
    out["transport.NAME(kind=mrc).cc"] = transport_section.CC_FIELDS
    out.update({f"fault.N(kind={k})": t for k, t in fault_section.FIELDS.items()})
    out["run"] = run_section.FIELDS
    out["routing"] = routing_section.FIELDS
    return out


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
    check_keys(raw, _F, "")
    lab_name = _F["name"].read(raw, "", default=default_name)
    if not NAME_RE.fullmatch(lab_name):
        raise LabError(f"{lab_name!r} must be letters, digits, '-' or '_' (it names the output "
                       "folder)", "name")
    description = _F["description"].read(raw, "")
    if "\n" in description.strip():
        raise LabError("must be one line (it is listed by `mrc-lab labs`)", "description")
    spec, preset_name = fabric_section.fabric(raw.get("fabric", {}))
    run = run_section.run(_required(raw, "run"))
    workload = workload_section.workload(_required(raw, "workload"), spec, base_dir)
    workload_section.check_workload_in_run(workload, run)
    transports = transport_section.transports(raw.get("transport"), spec)
    faults = fault_section.faults(raw.get("fault", []), spec, run)
    routing = routing_section.routing(raw.get("routing", {}))
    return Lab(name=lab_name, description=description.strip(), fabric=spec,
               fabric_preset=preset_name, workload=workload, transports=transports,
               faults=faults, run=run, raw=raw, source=source, base_dir=base_dir,
               routing=routing)


def _required(raw: Mapping[str, Any], key: str) -> Any:
    """A required top-level table, as given (its section checks that it is a table)."""
    if key not in raw:
        raise LabError(f"missing required key{_F[key].missing}", key)
    return raw[key]
