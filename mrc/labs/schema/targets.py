"""Fault targets named by class, drawn from the lab's seed: ``target = "t1"``.

A lab that names the T1 its RC QPs happen to hash onto has chosen its verdict; a class names
*which kind* of element fails and lets the seed pick one, with no regard to RC's hash (or to
MRC's EVs). A class is either a shorthand or a pattern over canonical element names
(:mod:`topology.names`) in which ``*`` stands for any index::

    t0, t1              any T0 / T1 switch of any plane           p*.t0.*, p*.t1.*
    t0-t1-link          any T0-T1 link                            p*.t0.*--p*.t1.*
    host-link           any NIC-T0 link                           h*.p*--p*.t0.*
    nic-port            any NIC port                              h*.p*
    p1.t1.*             any T1 of plane 1
    p1.t0.2--p1.t1.*    any uplink of T0 2 of plane 1

**The draw.** The candidates are every element of the fabric the pattern matches, in
canonical order (plane, then index; a link by its T0, then its T1; a NIC port by host, then
plane), restricted to the kinds the fault acts on. The element picked is candidate
``blake2b(f"{seed}/{class}") mod count`` (8-byte digest, little-endian), ``seed`` the lab's
``run.seed`` and ``class`` the text as written: a pure function of the two, independent of
the QPNs (which RC's hash reads) and of the EV order (which MRC sprays over), the same in
every build and runtime. The same class written twice in one lab names the same element,
so a ``switch_down`` and its ``switch_up`` on ``"t1"`` pair up. The element drawn is the
fault's ``target`` from then on (the schedule, the fault log, summary.json's ``faults``),
and summary.json's ``faults`` entry says ``drawn_from`` the class.

A class that is not one (bad syntax), or that no element of the fabric the fault acts on
matches, is refused with one line naming the key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from mrc.labs.errors import LabError
from topology import names
from topology.spec import FabricSpec

#: Shorthand classes and the patterns they stand for.
SHORTHANDS = {"t0": "p*.t0.*", "t1": "p*.t1.*", "t0-t1-link": "p*.t0.*--p*.t1.*",
              "host-link": "h*.p*--p*.t0.*", "nic-port": "h*.p*"}
_INDEX = r"(?:0|[1-9][0-9]*)"
_PATTERN_CHARS = re.compile(r"[a-z0-9.*-]+")


class TargetClassError(ValueError):
    """A class that is malformed or matches no element (the message says which)."""


def is_class(text: object) -> bool:
    """Whether ``text`` names a class (a shorthand or a pattern with ``*``), not an element."""
    return isinstance(text, str) and (text in SHORTHANDS or "*" in text)


def _pattern_kind(pattern: str) -> str:
    """The element kind a pattern's shape denotes."""
    if names.LINK_SEPARATOR in pattern:
        return "host_link" if pattern.startswith("h") else "fabric_link"
    if ".t1." in pattern:
        return names.T1
    if ".t0." in pattern:
        return names.T0
    if pattern.startswith("h") and ".p" in pattern:
        return names.NIC_PORT
    return names.HOST


def _candidates(spec: FabricSpec, shape: str) -> Iterator[str]:
    """Every element name of one shape, in canonical order."""
    planes, t0s, t1s = range(spec.planes), range(spec.t0_per_plane), range(spec.t1)
    if shape == names.T1:
        yield from (names.t1_name(p, k) for p in planes for k in t1s)
    elif shape == names.T0:
        yield from (names.t0_name(p, i) for p in planes for i in t0s)
    elif shape == "fabric_link":
        yield from (names.fabric_link_name(p, i, k) for p in planes for i in t0s for k in t1s)
    elif shape == "host_link":
        yield from (names.uplink_name(spec, h, p) for h in range(spec.hosts) for p in planes)
    elif shape == names.NIC_PORT:
        yield from (names.nic_port_name(h, p) for h in range(spec.hosts) for p in planes)
    else:
        yield from (names.host_name(h) for h in range(spec.hosts))


def matches(spec: FabricSpec, text: str) -> list[str]:
    """The canonical names a class matches, in canonical order."""
    pattern = SHORTHANDS.get(text, text)
    if not _PATTERN_CHARS.fullmatch(pattern):
        raise TargetClassError(f"{text!r} is not a target class (a shorthand: "
                               f"{', '.join(SHORTHANDS)}; or a name with * for an index, "
                               "as p1.t1.*)")
    regex = re.compile(re.escape(pattern).replace(r"\*", _INDEX))
    return [name for name in _candidates(spec, _pattern_kind(pattern)) if regex.fullmatch(name)]


def draw_index(seed: int, text: str, count: int) -> int:
    """Which of ``count`` candidates the class ``text`` draws at ``seed`` (module doc)."""
    digest = hashlib.blake2b(f"{seed}/{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % count


def draw(spec: FabricSpec, text: str, seed: int) -> names.Element:
    """The element the class ``text`` draws at ``seed`` (whether the fault may act on its
    kind is the caller's check, worded as for a named element)."""
    found = matches(spec, text)
    if not found:
        raise TargetClassError(f"no element of this fabric matches {text!r} "
                               f"({spec.planes} planes, {spec.t0_per_plane} T0 and {spec.t1} "
                               "T1 per plane)")
    return names.resolve(spec, found[draw_index(seed, text, len(found))])


def resolve_target(spec: FabricSpec, text: str, seed: int, key: str
                   ) -> tuple[names.Element, str | None]:
    """``(element, drawn_from)`` of a fault's target: a name or selector (``drawn_from``
    None), or a class drawn at ``seed`` (``drawn_from`` the class); a bad one is a
    :class:`LabError` on ``key``."""
    try:
        if is_class(text):
            return draw(spec, text, seed), text
        return names.resolve(spec, text), None
    except (names.UnknownElementError, TargetClassError) as exc:
        raise LabError(str(exc), key) from None
