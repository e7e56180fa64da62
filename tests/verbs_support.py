"""What the mrc.verbs tests share: lab-small with EV and CC profiles ONLINE on both hosts of
one pair, QPs on them, and the errno of a refused call (tests/test_verbs*.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mrc.ev import EV_STATE_ASSUMED_BAD, EV_STATE_GOOD
from mrc.ev.profile import EvField, EvProfile
from mrc.verbs import (
    INIT,
    PROFILE_ONLINE,
    RTR,
    RTS,
    CompletionQueue,
    Controller,
    EvEventCq,
    Fabric,
    QueuePair,
    VerbsError,
)

PROFILE = 1
SRC, DST = "h0", "h2"  # under different T0s: 16 paths (4 planes x 4 T1)
#: 2 EVs per (plane, T1): 32 EVs, 8 per plane, plane in the low byte
EV_FIELDS = (EvField(8, max_val=3, name="plane"), EvField(12, max_val=3, name="t1"),
             EvField(12, max_val=1, name="entropy"))
EVS_PER_PLANE = 8


def ev_profile(event_mask: int = EV_STATE_GOOD | EV_STATE_ASSUMED_BAD) -> EvProfile:
    return EvProfile(EV_FIELDS, ev_count=32, min_active=4, event_mask=event_mask)


def online(fab: Fabric, host: str, profile: EvProfile | None = None) -> Controller:
    """``host``'s controller with EV and CC profile PROFILE ONLINE."""
    ctl = fab.controller(host)
    ctl.modify_ev_profile(PROFILE, profile=profile or ev_profile())
    ctl.modify_ev_profile(PROFILE, state=PROFILE_ONLINE)
    ctl.modify_cc_profile(PROFILE, algorithm="uet-1.0-nscc", config=fab.default_cc())
    ctl.modify_cc_profile(PROFILE, state=PROFILE_ONLINE)
    return ctl


@dataclass
class Pair:
    fab: Fabric
    a: QueuePair  # on SRC
    b: QueuePair  # on DST
    cq_a: CompletionQueue
    cq_b: CompletionQueue
    ev_cq: EvEventCq  # SRC's controller


def connect(fab: Fabric, *, cqe: int = 64, ev_cqe: int = 256, sq_sig_all: bool = True,
            src_profile: EvProfile | None = None, **rts: int) -> Pair:
    """Two QPs SRC <-> DST in RTS (``rts``: the RTS attributes; ``sq_sig_all``: SRC's)."""
    online(fab, SRC, src_profile)
    online(fab, DST)
    ev_cq = fab.controller(SRC).create_ev_event_cq(ev_cqe)
    ctx_a, ctx_b = fab.open_device(SRC), fab.open_device(DST)
    cq_a, cq_b = ctx_a.create_cq(cqe), ctx_b.create_cq(cqe)
    a = ctx_a.create_qp(send_cq=cq_a, recv_cq=cq_a, sq_sig_all=sq_sig_all)
    b = ctx_b.create_qp(send_cq=cq_b, recv_cq=cq_b)
    for qp, peer, dest in ((a, b, DST), (b, a, SRC)):
        qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
        qp.modify(RTR, dest=dest, dest_qp_num=peer.qp_num)
    for qp in (a, b):
        qp.modify(RTS, **rts)
    return Pair(fab, a, b, cq_a, cq_b, ev_cq)


def rst_qp(fab: Fabric, **create: Any) -> QueuePair:
    """A QP in RST on SRC, both hosts' profiles ONLINE (``create``: create_qp's limits)."""
    online(fab, SRC)
    online(fab, DST)
    ctx = fab.open_device(SRC)
    cq = ctx.create_cq(8)
    return ctx.create_qp(send_cq=cq, recv_cq=cq, **create)


def errno_of(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The errno of the VerbsError that ``call(*args, **kwargs)`` raises."""
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno
