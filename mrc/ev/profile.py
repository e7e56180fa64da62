"""EV profiles as the OCP controller API (``mrc_ctl.h``) defines them: fields, generation,
explicit lists, the QP's EV limits, and deny masks.

An EV profile describes the EVs a QP sprays over:

* **fields** (``mrc_ctl_ev_field``): field 0 in the lowest bits, each with a ``width``, an
  ``init_val``, a ``min_val``/``max_val`` range for generated values and a ``mask`` of the
  bits that are generated (the other bits keep ``init_val``). A generated value ``g`` is
  *expanded* into its field by placing its bits, most significant first, on the mask's set
  bits, most significant first (a bit deposit); the expanded fields are concatenated into
  the EV. A fixed part of the EV is a field with ``min_val = max_val = mask = 0``.
* **mode**: ``generated`` (the NIC enumerates ``ev_count`` combinations of the field
  ranges) or ``explicit`` (a controller gives the list of EV values).
* ``ev_count`` (``max_ev_per_qp`` in the older QP-level API), ``min_active``
  (``ev_min_active`` / ``min_active_ev_per_qp``: the NIC never marks an EV ASSUMED_BAD when
  that would leave fewer usable EVs) and ``event_mask`` (which new states raise EV events;
  the header supports GOOD and ASSUMED_BAD).

The older shape of the same thing (the 2024-25 ``examples/ev_generated.md``) packs the
fields into three words: an *allow mask* whose runs of ones and zeros alternate field by
field (the highest field is ones), and the per-field maxima and minima at the fields'
offsets. :meth:`EvProfile.allow_mask`, :meth:`EvProfile.max_allowed_vals`,
:meth:`EvProfile.min_allowed_vals` and :meth:`EvProfile.from_allow_mask` convert; the
example's 3/8/4/4-bit fields give allow mask 0x000787f8 and maxima 0x0007fda7 (its first
revision, 180 as the 2nd hop's maximum) or 0x0007fd9f (later ones, 179).

**Deny masks** (``mrc_ev_deny``: ``deny_mask``/``deny_value``): an EV is denied when
``ev & deny_mask == deny_value``. A value with bits outside its mask can never match and is
refused (the published example's "EV 3 on 3rd hop" reads ``0x300`` under mask ``0x7800``:
3 on the 3rd hop is ``0x1800``).

The generation order is the NIC's choice (vendor-defined): here mixed radix, field 0
fastest, each field's values in an order the caller may permute (a seeded order per host
pair spreads different QPs over different T1s). Pure functions and frozen records only.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mrc.ev import EV_BITS, EV_STATE_ASSUMED_BAD, EV_STATE_GOOD

GENERATED = "generated"
EXPLICIT = "explicit"
EV_MODES = (GENERATED, EXPLICIT)
#: The states ``ev_event_mask`` may select (``mrc_ctl.h``: GOOD and ASSUMED_BAD only).
EVENT_MASK_STATES = EV_STATE_GOOD | EV_STATE_ASSUMED_BAD


class EvProfileError(ValueError):
    """A profile, field or deny entry that the controller API would refuse."""


def _popcount(x: int) -> int:
    return bin(x).count("1")


def deposit(value: int, mask: int) -> int:
    """Place the low ``popcount(mask)`` bits of ``value`` on the set bits of ``mask``, most
    significant first (the EV expansion of ``mrc_ctl.h``; a "pdep")."""
    out = 0
    bit = 0
    m = mask
    while m:
        low = m & -m
        if (value >> bit) & 1:
            out |= low
        bit += 1
        m ^= low
    return out


def extract(value: int, mask: int) -> int:
    """The inverse of :func:`deposit`: the bits of ``value`` under ``mask``, packed."""
    out = 0
    bit = 0
    m = mask
    while m:
        low = m & -m
        if value & low:
            out |= 1 << bit
        bit += 1
        m ^= low
    return out


@dataclass(frozen=True)
class EvField:
    """One field of an EV (``mrc_ctl_ev_field``). ``mask`` None: every bit of the width is
    generated; ``max_val`` None: the largest value the mask's bits hold."""

    width: int
    init_val: int = 0
    min_val: int = 0
    max_val: int | None = None
    mask: int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.width <= EV_BITS:
            raise EvProfileError(f"field width {self.width} outside 1..{EV_BITS}")
        full = (1 << self.width) - 1
        if self.init_val < 0 or self.init_val > full:
            raise EvProfileError(f"init_val {self.init_val:#x} is wider than {self.width} bits")
        if self.mask is not None and (self.mask < 0 or self.mask & ~full):
            raise EvProfileError(f"mask {self.mask:#x} has bits outside the {self.width}-bit "
                                 "field")
        top = (1 << _popcount(self.gen_mask)) - 1
        if self.max_val is not None and not 0 <= self.max_val <= top:
            raise EvProfileError(f"max_val {self.max_val} is wider than the mask's "
                                 f"{_popcount(self.gen_mask)} bit(s)")
        if not 0 <= self.min_val <= self.top:
            raise EvProfileError(f"min_val {self.min_val} above max_val {self.top}")

    @property
    def gen_mask(self) -> int:
        return (1 << self.width) - 1 if self.mask is None else self.mask

    @property
    def top(self) -> int:
        """The largest generated value."""
        return (1 << _popcount(self.gen_mask)) - 1 if self.max_val is None else self.max_val

    @property
    def count(self) -> int:
        """How many values the field takes."""
        return self.top - self.min_val + 1

    def expand(self, generated: int) -> int:
        """The field's bits for generated value ``generated``."""
        mask = self.gen_mask
        return (self.init_val & ~mask) | deposit(generated, mask)

    def generated_value(self, bits: int) -> int:
        """The generated value a field's bits hold (inverse of :meth:`expand`)."""
        return extract(bits, self.gen_mask)


@dataclass(frozen=True)
class EvDeny:
    """One deny entry: EVs with ``ev & mask == value`` become DENIED."""

    mask: int
    value: int

    def __post_init__(self) -> None:
        if self.mask < 0 or self.value < 0 or self.mask >> EV_BITS or self.value >> EV_BITS:
            raise EvProfileError("deny mask and value are 32-bit numbers")
        if self.value & ~self.mask:
            raise EvProfileError(
                f"deny value {self.value:#010x} has bits outside its mask {self.mask:#010x}: "
                f"it can match no EV (the bits under the mask are {self.value & self.mask:#x})")

    def matches(self, ev: int) -> bool:
        return ev & self.mask == self.value


def denied_by(evs: Iterable[int], denies: Sequence[EvDeny]) -> list[int]:
    """The EVs of ``evs`` that any of ``denies`` matches, in order."""
    return [ev for ev in evs if any(d.matches(ev) for d in denies)]


@functools.lru_cache(maxsize=16)
def _placed(fields: tuple[EvField, ...]) -> tuple[tuple[int, ...], ...]:
    """Each field's bits, at its offset, for every generated value 0..top: what
    :meth:`EvField.expand` gives, worked out once per layout rather than once per EV array
    (a 1024-host permutation generates 1,024 of them, each connection with a profile of its
    own but the same fields)."""
    out = []
    offset = 0
    for f in fields:
        out.append(tuple(f.expand(g) << offset for g in range(f.top + 1)))
        offset += f.width
    return tuple(out)


@dataclass(frozen=True)
class EvProfile:
    """An EV profile (see the module docstring). ``evs`` is the explicit list (explicit
    mode) and is empty for generated profiles; ``fields`` is the layout in both modes
    (an explicit EV is read through it: which bits name the plane and the T1)."""

    fields: tuple[EvField, ...]
    mode: str = GENERATED
    ev_count: int = 128
    min_active: int = 0
    event_mask: int = EVENT_MASK_STATES
    evs: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.mode not in EV_MODES:
            raise EvProfileError(f"unknown EV mode {self.mode!r}; known: {EV_MODES}")
        if not self.fields:
            raise EvProfileError("an EV profile needs at least one field")
        if self.width > EV_BITS:
            raise EvProfileError(f"fields add up to {self.width} bits; an EV has {EV_BITS}")
        if self.ev_count < 1:
            raise EvProfileError("ev_count must be at least 1")
        if not 0 <= self.min_active <= self.ev_count:
            raise EvProfileError(f"min_active {self.min_active} must lie in 0..ev_count "
                                 f"({self.ev_count})")
        if self.event_mask & ~EVENT_MASK_STATES:
            raise EvProfileError("the EV event mask may select only GOOD and ASSUMED_BAD")
        if self.mode == EXPLICIT:
            if len(self.evs) != self.ev_count:
                raise EvProfileError(f"an explicit profile of ev_count {self.ev_count} "
                                     f"lists {len(self.evs)} EVs")
            if len(set(self.evs)) != len(self.evs):
                raise EvProfileError("an explicit EV list names an EV twice")
            for ev in self.evs:
                if not 0 <= ev < 1 << self.width:
                    raise EvProfileError(f"EV {ev:#x} is wider than the profile's "
                                         f"{self.width}-bit fields")
        elif self.evs:
            raise EvProfileError("a generated profile takes no EV list")
        elif self.ev_count > self.space:
            raise EvProfileError(f"ev_count {self.ev_count} exceeds the {self.space} EVs the "
                                 "fields can generate")

    # ------------------------------------------------------------------ layout
    @property
    def width(self) -> int:
        return sum(f.width for f in self.fields)

    @property
    def offsets(self) -> tuple[int, ...]:
        out = []
        pos = 0
        for f in self.fields:
            out.append(pos)
            pos += f.width
        return tuple(out)

    @property
    def space(self) -> int:
        """How many distinct EVs the fields can generate."""
        n = 1
        for f in self.fields:
            n *= f.count
        return n

    def pack(self, generated: Sequence[int]) -> int:
        """The EV of one generated value per field."""
        if len(generated) != len(self.fields):
            raise EvProfileError(f"{len(generated)} values for {len(self.fields)} fields")
        ev = 0
        for f, off, g in zip(self.fields, self.offsets, generated, strict=True):
            if not f.min_val <= g <= f.top:
                raise EvProfileError(f"value {g} outside {f.min_val}..{f.top} of field "
                                     f"{f.name or self.fields.index(f)}")
            ev |= f.expand(g) << off
        return ev

    def field_bits(self, ev: int) -> tuple[int, ...]:
        """Each field's bits of ``ev`` (not yet read back through its mask)."""
        return tuple((ev >> off) & ((1 << f.width) - 1)
                     for f, off in zip(self.fields, self.offsets, strict=True))

    def unpack(self, ev: int) -> tuple[int, ...]:
        """The generated value of each field of ``ev``."""
        return tuple(f.generated_value(bits)
                     for f, bits in zip(self.fields, self.field_bits(ev), strict=True))

    # ------------------------------------------------------------------ the EV array
    def generate(self, orders: Sequence[Sequence[int] | None] | None = None) -> list[int]:
        """The profile's EV array: the explicit list, or ``ev_count`` generated EVs.

        Generated EVs enumerate the field ranges in mixed radix, field 0 fastest;
        ``orders[i]`` (optional) is the order of field i's values, a permutation of
        ``min_val..max_val``."""
        if self.mode == EXPLICIT:
            return list(self.evs)
        values: list[list[int]] = []
        for i, f in enumerate(self.fields):
            own = list(range(f.min_val, f.top + 1))
            given = None if orders is None else orders[i]
            if given is not None:
                order = list(given)
                if sorted(order) != own:
                    raise EvProfileError(f"order of field {i} is not a permutation of "
                                         f"{f.min_val}..{f.top}")
                own = order
            values.append(own)
        # each field's placed bits in the field's order: EV k takes one entry per field, in
        # mixed radix with field 0 fastest (the product of the fields, the last outermost),
        # and is their OR, which is their sum: no two fields share a bit (what ``pack``
        # computes, without redoing it per EV: a 1024-host fabric generates 262,144 EVs)
        placed = [[bits[g] for g in vals] for bits, vals in zip(_placed(self.fields), values,
                                                                 strict=True)]
        combos = itertools.islice(itertools.product(*reversed(placed)), self.ev_count)
        return [sum(combo) for combo in combos]

    # ------------------------------------------------------------------ the older words
    def allow_mask(self) -> int:
        """The older API's ``ev_allow_mask``: each field's bits all ones or all zeros,
        alternating, the highest field ones."""
        out = 0
        last = len(self.fields) - 1
        for i, (f, off) in enumerate(zip(self.fields, self.offsets, strict=True)):
            if (last - i) % 2 == 0:
                out |= ((1 << f.width) - 1) << off
        return out

    def max_allowed_vals(self) -> int:
        """The older API's ``ev_max_allowed_vals``: each field's maximum at its offset."""
        return sum(f.top << off for f, off in zip(self.fields, self.offsets, strict=True))

    def min_allowed_vals(self) -> int:
        """The older API's ``ev_min_allowed_vals``."""
        return sum(f.min_val << off for f, off in zip(self.fields, self.offsets, strict=True))

    @classmethod
    def from_allow_mask(cls, allow_mask: int, max_allowed_vals: int,
                        min_allowed_vals: int = 0, *, width: int | None = None,
                        ev_count: int = 128, min_active: int = 0) -> EvProfile:
        """A generated profile from the older three words: fields are the alternating runs
        of ``allow_mask`` over ``width`` bits (default: up to its highest one)."""
        total = allow_mask.bit_length() if width is None else width
        if total <= 0 or total > EV_BITS:
            raise EvProfileError(f"an allow mask over {total} bits names no fields")
        fields: list[EvField] = []
        start = 0
        for bit in range(1, total + 1):
            if bit == total or (allow_mask >> bit) & 1 != (allow_mask >> start) & 1:
                w = bit - start
                full = (1 << w) - 1
                fields.append(EvField(w, min_val=(min_allowed_vals >> start) & full,
                                      max_val=(max_allowed_vals >> start) & full))
                start = bit
        return cls(tuple(fields), GENERATED, ev_count=ev_count, min_active=min_active)
