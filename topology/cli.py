"""``mrc-lab fabric``: the counts of a fabric, the paths between two of its hosts, or a host
pair's EVs (``--evs``: each EV of the generated profile with the uSID path its hop fields
select, and how many EVs share each path).

Everything printed comes from closed forms (:mod:`topology.counts`, :mod:`topology.paths`),
so the Fairwater preset answers at once. Bad input is one ``error: ...`` line on stderr and
exit status 2 (a usage error), never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from topology import evs as fabric_evs
from topology.counts import COUNT_KEYS, counts
from topology.names import UnknownElementError
from topology.paths import Path, PathError, host_index, paths_between
from topology.seg6 import switch_routes
from topology.spec import PRESETS, FabricError, FabricSpec, preset
from topology.usid import UsidError

_USER_ERRORS = (FabricError, UnknownElementError, PathError, UsidError,
                fabric_evs.EvPathError)

_LABELS = {
    "planes": "planes",
    "hosts": "hosts",
    "t0_per_plane": "T0 per plane",
    "t1_per_plane": "T1 per plane",
    "switches": "switches",
    "links": "links (host + T0-T1)",
    "paths_same_t0": "paths, same T0",
    "paths_between_t0s": "paths, different T0s",
    "nic_gbps": "NIC Gb/s",
    "bisection_tbps": "bisection Tb/s",
}


def build_spec(preset_name: str | None, **fields: Any) -> FabricSpec:
    """A spec from a preset and/or explicit fields (explicit fields override the preset)."""
    given = {key: value for key, value in fields.items() if value is not None}
    if preset_name is not None:
        return preset(preset_name, **given)
    return FabricSpec(**given)


def _number(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.6f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def _counts_table(spec: FabricSpec) -> str:
    data = counts(spec).as_dict()
    shown = {key: _number(data[key]) for key in COUNT_KEYS}
    label_width = max(len(_LABELS[key]) for key in COUNT_KEYS)
    value_width = max(len(text) for text in shown.values())
    lines = [f"fabric {spec.name}: {spec.planes} planes, {spec.hosts:,} hosts, "
             f"{spec.hosts_per_t0} per T0, {spec.t1} T1 per plane, {_number(spec.link_gbps)} "
             "Gb/s links"]
    lines += [f"  {_LABELS[key]:<{label_width}}  {shown[key]:>{value_width}}  ({key})"
              for key in COUNT_KEYS]
    return "\n".join(lines)


def _paths_table(found: list[Path]) -> str:
    first = found[0]
    where = ("same T0" if first.t1 is None else "different T0s")
    header = ("plane", "t1", "ev", "address", "hops")
    rows = [(str(p.plane), "-" if p.t1 is None else str(p.t1), f"{p.ev:#010x}", p.address_text,
             " > ".join(p.hops)) for p in found]
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(4)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells[:4])) + \
            "  " + cells[4]

    out = [f"{len(found):,} paths h{first.src} -> h{first.dst} ({where})", line(header)]
    out += [line(row) for row in rows]
    return "\n".join(out)


def _evs_table(spec: FabricSpec, src: int, dst: int, found: list[fabric_evs.EvPath],
               profile: Any) -> str:
    groups = fabric_evs.sharing(found)
    shared = sum(len(v) for v in groups.values() if len(v) > 1)
    most = max(len(v) for v in groups.values())
    fields = ", ".join(f"{f.name or i}: {f.width} bits {f.min_val}..{f.top}"
                       for i, f in enumerate(profile.fields))
    head = [f"{len(found)} EVs h{src} -> h{dst} (generated profile; fields low to high: "
            f"{fields}; ev_min_active {profile.min_active})",
            f"{len(groups)} distinct paths; {shared} EVs share a path with another EV "
            f"(at most {most} per path)",
            "ev          plane  t1    port  EVs on path  uSID path"]
    rows = [f"{p.ev:#010x}  {p.plane:<5}  {'-' if p.t1 is None else p.t1:<4}  "
            f"{p.plane + 1:<4}  {len(groups[(p.plane, p.t1)]):<11}  "
            f"{fabric_evs.format_path(spec, p)}" for p in found]
    return "\n".join(head + rows)


@click.command("fabric")
@click.option("--preset", "preset_name", metavar="NAME",
              help=f"Named fabric ({', '.join(sorted(PRESETS))}); other options override it.")
@click.option("--planes", type=int, help="Planes (NIC ports per host).")
@click.option("--hosts", type=int, help="Hosts (NICs).")
@click.option("--hosts-per-t0", type=int, help="Hosts under each T0.")
@click.option("--t1-per-plane", type=int, help="T1 switches per plane [default: hosts per T0].")
@click.option("--link-gbps", type=float, help="Link rate in Gb/s [default: 100].")
@click.option("--switch-radix", type=int, help="Ports per switch; refuse specs that need more.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--paths", nargs=2, metavar="SRC DST", default=None,
              help="List the paths between two hosts (e.g. h0 h300) with their uSID addresses.")
@click.option("--kernel-routes", "kernel_routes", metavar="SWITCH", default=None,
              help="Print the Linux routes the kernel runtime installs in SWITCH (e.g. p3.t0.1 "
                   "or h5.p3.t0), as `ip -6 route` shows them.")
@click.option("--evs", nargs=2, metavar="SRC DST", default=None,
              help="List a host pair's EVs (the generated profile of --ev-count EVs per QP) "
                   "with the uSID path each selects and how many EVs share a path.")
@click.option("--ev-count", type=int, default=128, show_default=True,
              help="EVs per QP for --evs.")
def fabric(preset_name: str | None, planes: int | None, hosts: int | None,
           hosts_per_t0: int | None, t1_per_plane: int | None, link_gbps: float | None,
           switch_radix: int | None, as_json: bool, paths: tuple[str, str] | None,
           kernel_routes: str | None = None, evs: tuple[str, str] | None = None,
           ev_count: int = 128) -> None:
    """Print a fabric's counts (planes, switches, links, paths, bandwidth), or its paths."""
    try:
        spec = build_spec(preset_name, planes=planes, hosts=hosts, hosts_per_t0=hosts_per_t0,
                          t1_per_plane=t1_per_plane, link_gbps=link_gbps,
                          switch_radix=switch_radix)
        if kernel_routes:
            routes = switch_routes(spec, kernel_routes)
            text = (json.dumps([{"prefix": r.prefix, "action": r.action, "dev": r.dev,
                                 "next_hop": r.next_hop, "route": r.text()} for r in routes],
                               indent=2) if as_json else "\n".join(r.text() for r in routes))
        elif evs:
            s, d = (host_index(spec, int(h) if h.isdecimal() else h) for h in evs)
            profile = fabric_evs.fabric_profile(spec, ev_count)
            ev_found = fabric_evs.ev_paths(spec, s, d, profile)
            text = (json.dumps([{"ev": p.ev, "plane": p.plane, "t1": p.t1, "port": p.plane + 1,
                                 "address": fabric_evs.format_path(spec, p)} for p in ev_found],
                               indent=2) if as_json
                    else _evs_table(spec, s, d, ev_found, profile))
        elif paths:
            src, dst = (int(h) if h.isdecimal() else h for h in paths)
            found = paths_between(spec, src, dst)
            text = (json.dumps([p.to_dict() for p in found], indent=2) if as_json
                    else _paths_table(found))
        else:
            text = (json.dumps(counts(spec).as_dict(), indent=2) if as_json
                    else _counts_table(spec))
    except _USER_ERRORS as exc:
        click.echo(f"mrc-lab: error: {exc}", err=True)
        sys.exit(2)
    click.echo(text)
