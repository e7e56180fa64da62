"""The controller's side of libmrc (``mrc_ctl.h``): EV and CC profiles, EV state operations,
and the EV event queue.

A :class:`Controller` belongs to one host's NIC. It keeps numbered profiles that QPs name at
INIT (``ev_profile_id``, ``cc_profile_id``):

* an **EV profile** (:class:`mrc.ev.profile.EvProfile`: generated fields or an explicit
  list, ``ev_count``, ``min_active``, ``event_mask``) goes INIT -> OFFLINE -> ONLINE as the
  header's state machine says; only an ONLINE profile can be given to a QP;
* a **CC profile** names an algorithm the device lists (``uet-1.0-nscc``, or ``fixed``: a
  constant window, mrc-lab's baseline) and its configuration (:class:`CcConfig`);
* EV operations (``MODIFY_EV_STATE``, deny by mask and value, ``REPLACE_EV`` of a value not
  yet in use) apply to every QP of the profile;
* :meth:`Controller.create_ev_event_cq` makes an EV event CQ: every EV state change of a QP
  of a profile whose ``event_mask`` selects the new state lands there as an
  :class:`EvEvent` (profile, EV, port 1-based, state, drop count). The CQ does not overrun:
  what does not fit is dropped and the next event delivered says how many were
  (``MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from mrc.ev import EV_STATE_CODES, EV_STATE_DENIED, EV_STATE_GOOD
from mrc.ev.profile import EvDeny, EvProfile
from mrc.transport.base import DENIED, GOOD, EvState
from mrc.transport.mrc.config import CcConfig


class ProfiledQp(Protocol):
    """A QP attached to an EV profile, as the controller reaches it
    (:class:`mrc.verbs.objects.QueuePair` is one): read and set the states of its EVs."""

    def transport_ev_states(self) -> dict[int, EvState]: ...

    def set_ev_state(self, match: Any, state: str) -> int: ...

PROFILE_INIT = "INIT"
PROFILE_OFFLINE = "OFFLINE"
PROFILE_ONLINE = "ONLINE"
#: The CC algorithms the simulated device lists (``device_attr.cc.algorithms``).
CC_ALGORITHMS = ("uet-1.0-nscc", "fixed")


class VerbsError(ValueError):
    """What libmrc would return as an error (the header's errno names the reason)."""

    def __init__(self, errno: str, message: str) -> None:
        super().__init__(f"{errno}: {message}")
        self.errno = errno


@dataclass(frozen=True)
class EvEvent:
    """``mrc_ctl_ev_event``: one EV state change (port is 1-based, state a mrc_ctl state
    bit), with the events dropped just before it."""

    profile_id: int
    ev: int
    port: int
    state: int
    drop_count: int
    qp_num: int
    time_ps: int


class EvEventCq:
    """An EV event CQ: ``cqe`` entries, no overrun (see the module docstring)."""

    def __init__(self, cqe: int) -> None:
        if cqe < 1:
            raise VerbsError("EINVAL", "an EV event CQ needs at least one entry")
        self.cqe = cqe
        self._q: deque[EvEvent] = deque()
        self._dropped = 0

    def push(self, event: EvEvent) -> None:
        if len(self._q) >= self.cqe:
            self._dropped += 1
            return
        if self._dropped:
            event = EvEvent(event.profile_id, event.ev, event.port, event.state, self._dropped,
                            event.qp_num, event.time_ps)
            self._dropped = 0
        self._q.append(event)

    def poll(self, num_entries: int) -> list[EvEvent]:
        """``mrc_ctl_poll_ev_event``: up to ``num_entries`` events, oldest first."""
        out: list[EvEvent] = []
        while self._q and len(out) < num_entries:
            out.append(self._q.popleft())
        return out


@dataclass
class _EvProfileEntry:
    state: str = PROFILE_INIT
    profile: EvProfile | None = None
    qps: list[ProfiledQp] = field(default_factory=list)


@dataclass
class _CcProfileEntry:
    state: str = PROFILE_INIT
    algorithm: str | None = None
    config: CcConfig | None = None


class Controller:
    """The privileged controller of one host's NIC (``mrc_ctl``; see the module docstring)."""

    def __init__(self, host: int) -> None:
        self.host = host
        self._ev: dict[int, _EvProfileEntry] = {}
        self._cc: dict[int, _CcProfileEntry] = {}
        self._event_cqs: list[EvEventCq] = []

    # ------------------------------------------------------------------ EV profiles
    def modify_ev_profile(self, profile_id: int, *, state: str | None = None,
                          profile: EvProfile | None = None) -> None:
        """``mrc_ctl_modify_ev_profile``: give the profile its definition (while INIT or
        OFFLINE) and/or move it INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT."""
        entry = self._ev.setdefault(profile_id, _EvProfileEntry())
        if profile is not None:
            if entry.state == PROFILE_ONLINE:
                raise VerbsError("EBUSY", f"EV profile {profile_id} is ONLINE")
            entry.profile = profile
            if entry.state == PROFILE_INIT and state is None:
                entry.state = PROFILE_OFFLINE
        if state is not None:
            self._move(entry, state, f"EV profile {profile_id}",
                       ready=entry.profile is not None, busy=bool(entry.qps))

    def query_ev_profile(self, profile_id: int) -> tuple[str, EvProfile | None]:
        entry = self._ev_entry(profile_id)
        return entry.state, entry.profile

    def online_ev_profile(self, profile_id: int) -> EvProfile:
        entry = self._ev_entry(profile_id)
        if entry.state != PROFILE_ONLINE or entry.profile is None:
            raise VerbsError("EINVAL", f"EV profile {profile_id} is not ONLINE")
        return entry.profile

    def attach(self, profile_id: int, qp: ProfiledQp) -> None:
        self._ev_entry(profile_id).qps.append(qp)

    def detach(self, profile_id: int, qp: ProfiledQp) -> None:
        entry = self._ev.get(profile_id)
        if entry is not None and qp in entry.qps:
            entry.qps.remove(qp)

    # ------------------------------------------------------------------ EV operations
    def modify_ev_state(self, profile_id: int, ev: int, state: int) -> int:
        """``MRC_CTL_EV_OP_MODIFY_EV_STATE``: GOOD or DENIED (applications may set no
        other state) on every QP of the profile; returns how many QP EVs changed."""
        if state not in (EV_STATE_GOOD, EV_STATE_DENIED):
            raise VerbsError("EINVAL", "an EV's state may be set to GOOD or DENIED only")
        return self._apply(profile_id, lambda choice: choice.ev == ev, state)

    def deny(self, profile_id: int, mask: int, value: int, *, allow: bool = False) -> int:
        """Deny (``allow``: make GOOD again) every EV with ``ev & mask == value``."""
        rule = EvDeny(mask, value)
        return self._apply(profile_id, lambda choice: rule.matches(choice.ev),
                           EV_STATE_GOOD if allow else EV_STATE_DENIED)

    def replace_ev(self, profile_id: int, ev: int, new_ev: int) -> None:
        """``MRC_CTL_EV_OP_REPLACE_EV`` on an explicit profile not in use by any QP (the
        simulated device does not advertise MODIFY_ONLINE)."""
        entry = self._ev_entry(profile_id)
        prof = entry.profile
        if prof is None or prof.mode != "explicit":
            raise VerbsError("EINVAL", "REPLACE_EV needs an explicit EV profile")
        if entry.qps or entry.state == PROFILE_ONLINE:
            raise VerbsError("EBUSY", "the profile is ONLINE (no MODIFY_ONLINE capability)")
        if ev not in prof.evs:
            raise VerbsError("ENOENT", f"EV {ev:#x} is not in profile {profile_id}")
        evs = tuple(new_ev if x == ev else x for x in prof.evs)
        entry.profile = EvProfile(prof.fields, prof.mode, ev_count=prof.ev_count,
                                  min_active=prof.min_active, event_mask=prof.event_mask,
                                  evs=evs)

    def query_ev_state(self, profile_id: int, qp: ProfiledQp) -> dict[int, int]:
        """``MRC_CTL_EV_OP_QUERY_EV_STATE`` of one QP: EV -> state bit."""
        return {ev: EV_STATE_CODES[s] for ev, s in qp.transport_ev_states().items()}

    def _apply(self, profile_id: int, match: Any, state: int) -> int:
        entry = self._ev_entry(profile_id)
        changed = 0
        for qp in entry.qps:
            changed += qp.set_ev_state(match, DENIED if state == EV_STATE_DENIED else GOOD)
        return changed

    # ------------------------------------------------------------------ events
    def create_ev_event_cq(self, cqe: int) -> EvEventCq:
        cq = EvEventCq(cqe)
        self._event_cqs.append(cq)
        return cq

    def ev_event(self, profile_id: int, qp_num: int, time_ps: int, ev: int, port: int,
                 new_state: str) -> None:
        """A QP of ``profile_id`` saw an EV change state: queue it if the mask says so."""
        entry = self._ev.get(profile_id)
        if entry is None or entry.profile is None:
            return
        code = EV_STATE_CODES[new_state]
        if not entry.profile.event_mask & code:
            return
        for cq in self._event_cqs:
            cq.push(EvEvent(profile_id, ev, port, code, 0, qp_num, time_ps))

    # ------------------------------------------------------------------ CC profiles
    def modify_cc_profile(self, profile_id: int, *, state: str | None = None,
                          algorithm: str | None = None, config: CcConfig | None = None
                          ) -> None:
        """``mrc_ctl_modify_cc_profile``: algorithm (to OFFLINE), config (to ONLINE)."""
        entry = self._cc.setdefault(profile_id, _CcProfileEntry())
        if algorithm is not None:
            if algorithm not in CC_ALGORITHMS:
                raise VerbsError("EINVAL", f"unknown CC algorithm {algorithm!r}; the device "
                                 f"lists {', '.join(CC_ALGORITHMS)}")
            if entry.state == PROFILE_ONLINE:
                raise VerbsError("EBUSY", f"CC profile {profile_id} is ONLINE")
            entry.algorithm = algorithm
            if entry.state == PROFILE_INIT and state is None:
                entry.state = PROFILE_OFFLINE
        if config is not None:
            if entry.state == PROFILE_ONLINE:
                raise VerbsError("EBUSY", f"CC profile {profile_id} is ONLINE")
            entry.config = config
        if state is not None:
            self._move(entry, state, f"CC profile {profile_id}",
                       ready=entry.algorithm is not None and (
                           state != PROFILE_ONLINE or entry.config is not None), busy=False)

    def online_cc_profile(self, profile_id: int) -> CcConfig:
        entry = self._cc.get(profile_id)
        if entry is None or entry.state != PROFILE_ONLINE or entry.config is None:
            raise VerbsError("EINVAL", f"CC profile {profile_id} is not ONLINE")
        cfg = entry.config
        return cfg if cfg.algorithm == entry.algorithm else CcConfig(
            **{**cfg.__dict__, "algorithm": entry.algorithm})

    # ------------------------------------------------------------------ helpers
    def _ev_entry(self, profile_id: int) -> _EvProfileEntry:
        entry = self._ev.get(profile_id)
        if entry is None:
            raise VerbsError("EINVAL", f"no EV profile {profile_id}")
        return entry

    @staticmethod
    def _move(entry: Any, state: str, what: str, *, ready: bool, busy: bool) -> None:
        allowed = {PROFILE_INIT: (PROFILE_OFFLINE,),
                   PROFILE_OFFLINE: (PROFILE_ONLINE, PROFILE_INIT),
                   PROFILE_ONLINE: (PROFILE_OFFLINE,)}
        if state == entry.state:
            return
        if state not in allowed[entry.state]:
            raise VerbsError("EINVAL", f"{what}: {entry.state} -> {state} is not a transition "
                             "of INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT")
        if not ready:
            raise VerbsError("EINVAL", f"{what}: not configured enough for {state}")
        if busy and entry.state == PROFILE_ONLINE:
            raise VerbsError("EBUSY", f"{what}: active QPs use it")
        entry.state = state
