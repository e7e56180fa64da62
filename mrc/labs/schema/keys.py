"""Dotted key paths into a lab: ``transport.mrc.probe_interval_us``, ``fault.0.target``.

Every key of a lab, defaulted ones included, is addressable by its path in the resolved lab
(:meth:`mrc.labs.schema.lab.Lab.to_dict`); ``mrc-lab run --set`` and sweeps change a lab through
these paths and then validate the result, so an unknown key is reported with its path.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from mrc.labs.errors import LabError
from mrc.labs.schema.checks import suggest, toml_type
from mrc.labs.schema.lab import Lab


def _split(path: str) -> list[str]:
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise LabError(f"not a dotted key path: {path!r}")
    return path.split(".")


def _step(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise LabError(f"no key {part!r}{suggest(part, node)}", path)
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
    :func:`mrc.labs.schema.lab_file.validate` (an unknown key is reported there, with its path).
    """
    parts = _split(path)
    root: dict[str, Any] = copy.deepcopy(dict(lab))
    node: Any = root
    for depth, part in enumerate(parts[:-1]):
        here = ".".join(parts[: depth + 1])
        if isinstance(node, dict):
            if part not in node and parts[depth + 1].lstrip("-").isdigit():
                raise LabError(f"the lab has no {part} entries: an override changes an entry "
                               f"of an array, it cannot add one (write [[{part}]] in the file)",
                               ".".join(parts[: depth + 2]))
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
