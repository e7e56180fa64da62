"""mrc.verbs as a controller uses it (``mrc_ctl.h``): EV and CC profiles, EV operations
(deny by mask and value, MODIFY_EV_STATE, REPLACE_EV) and the EV event queue, seen from a
pair of QPs on lab-small (tests/test_verbs.py has the application's side).

The checks are on real values: which EVs a deny marks (and which it leaves), the state bits
the controller reads back, the EV events a T0's death and repair raise (EV, port, state,
QP, time) and the drop count of an event queue too small for them.
"""

from __future__ import annotations

import pytest
from verbs_support import (
    EV_FIELDS,
    EVS_PER_PLANE,
    PROFILE,
    SRC,
    Pair,
    connect,
    errno_of,
    ev_profile,
)

from mrc.ev import EV_STATE_ASSUMED_BAD, EV_STATE_DENIED, EV_STATE_GOOD
from mrc.ev.profile import EvProfile, EvProfileError
from mrc.verbs import PROFILE_INIT as EV_PROFILE_INIT
from mrc.verbs import (
    PROFILE_OFFLINE,
    PROFILE_ONLINE,
    WC_SUCCESS,
    EvEvent,
    EvEventCq,
    Fabric,
    SendWr,
)


def test_ev_event_cq_drops_instead_of_overrunning_and_counts_the_drops() -> None:
    cq = EvEventCq(2)
    events = [EvEvent(PROFILE, ev, 1, EV_STATE_ASSUMED_BAD, 0, 9, t)
              for t, ev in enumerate((10, 11, 12, 13, 14))]
    for event in events[:4]:
        cq.push(event)  # the 3rd and 4th do not fit
    assert cq.poll(8) == events[:2]
    cq.push(events[4])
    (late,) = cq.poll(8)
    assert (late.ev, late.drop_count, late.time_ps) == (14, 2, 4)
    cq.push(events[0])
    assert cq.poll(8)[0].drop_count == 0  # the count was handed over once


@pytest.fixture
def pair() -> Pair:
    """SRC <-> DST in RTS with the default attributes."""
    return connect(Fabric("lab-small", seed=1))


# ---------------------------------------------------------------------- controller profiles
def test_ev_profile_moves_init_offline_online_and_back() -> None:
    ctl = Fabric("lab-small").controller("h0")
    assert errno_of(ctl.query_ev_profile, PROFILE) == "EINVAL"  # never defined
    assert errno_of(ctl.modify_ev_profile, PROFILE, state=PROFILE_OFFLINE) == "EINVAL"  # empty
    ctl.modify_ev_profile(PROFILE, profile=ev_profile())
    assert ctl.query_ev_profile(PROFILE) == (PROFILE_OFFLINE, ev_profile())
    ctl.modify_ev_profile(PROFILE, state=PROFILE_ONLINE)
    assert ctl.online_ev_profile(PROFILE).ev_count == 32
    # ONLINE: the definition is frozen, and ONLINE -> INIT skips OFFLINE
    assert errno_of(ctl.modify_ev_profile, PROFILE, profile=ev_profile(EV_STATE_GOOD)) == "EBUSY"
    assert errno_of(ctl.modify_ev_profile, PROFILE, state=EV_PROFILE_INIT) == "EINVAL"
    ctl.modify_ev_profile(PROFILE, state=PROFILE_OFFLINE)
    assert errno_of(ctl.online_ev_profile, PROFILE) == "EINVAL"
    ctl.modify_ev_profile(PROFILE, state=EV_PROFILE_INIT)
    assert ctl.query_ev_profile(PROFILE)[0] == EV_PROFILE_INIT


def test_an_ev_profile_in_use_cannot_go_offline(pair: Pair) -> None:
    ctl = pair.fab.controller(SRC)
    assert errno_of(ctl.modify_ev_profile, PROFILE, state=PROFILE_OFFLINE) == "EBUSY"
    pair.a.context.destroy_qp(pair.a)  # the profile's last QP on SRC
    ctl.modify_ev_profile(PROFILE, state=PROFILE_OFFLINE)
    assert ctl.query_ev_profile(PROFILE)[0] == PROFILE_OFFLINE


def test_cc_profile_takes_a_listed_algorithm_and_needs_a_config_to_go_online() -> None:
    fab = Fabric("lab-small")
    ctl = fab.controller("h1")
    assert errno_of(ctl.modify_cc_profile, 2, algorithm="cubic") == "EINVAL"
    ctl.modify_cc_profile(2, algorithm="fixed")
    assert errno_of(ctl.modify_cc_profile, 2, state=PROFILE_ONLINE) == "EINVAL"  # no config
    assert errno_of(ctl.online_cc_profile, 2) == "EINVAL"
    cfg = fab.default_cc()  # NSCC's
    ctl.modify_cc_profile(2, config=cfg, state=PROFILE_ONLINE)
    got = ctl.online_cc_profile(2)
    assert got.algorithm == "fixed"  # the profile's algorithm wins over the config's
    assert (got.line_rate_gbps, got.mtu_bytes) == (cfg.line_rate_gbps, cfg.mtu_bytes) == (
        400.0, 4096)  # the NIC: 4 planes x 100G
    assert errno_of(ctl.modify_cc_profile, 2, algorithm="uet-1.0-nscc") == "EBUSY"
    assert errno_of(ctl.modify_cc_profile, 2, config=cfg) == "EBUSY"


def test_replace_ev_on_an_explicit_profile_not_in_use() -> None:
    ctl = Fabric("lab-small").controller("h0")
    explicit = EvProfile(EV_FIELDS, "explicit", ev_count=2, min_active=0, evs=(0x001, 0x102))
    ctl.modify_ev_profile(3, profile=explicit)
    ctl.replace_ev(3, 0x102, 0x203)
    assert ctl.query_ev_profile(3)[1].evs == (0x001, 0x203)  # type: ignore[union-attr]
    assert errno_of(ctl.replace_ev, 3, 0x102, 0x300) == "ENOENT"
    ctl.modify_ev_profile(3, state=PROFILE_ONLINE)
    assert errno_of(ctl.replace_ev, 3, 0x001, 0x300) == "EBUSY"
    ctl.modify_ev_profile(4, profile=ev_profile())
    assert errno_of(ctl.replace_ev, 4, 0, 1) == "EINVAL"  # generated: no list to edit


# ---------------------------------------------------------------------- EVs: deny and events
def test_deny_by_mask_marks_exactly_the_matching_evs_and_allow_restores_them(
        pair: Pair) -> None:
    fab, a = pair.fab, pair.a
    ctl = fab.controller(SRC)
    assert ctl.deny(PROFILE, mask=0xFF, value=1) == EVS_PER_PLANE  # plane 1 of SRC's QP
    codes = ctl.query_ev_state(PROFILE, a)
    assert len(codes) == 32
    assert {ev for ev, code in codes.items() if code == EV_STATE_DENIED} == {
        ev for ev in codes if ev & 0xFF == 1}
    assert all(code == EV_STATE_GOOD for ev, code in codes.items() if ev & 0xFF != 1)
    assert pair.ev_cq.poll(64) == []  # DENIED is not a state the event mask can select
    # DST's QP belongs to DST's controller: untouched
    assert set(pair.b.transport_ev_states().values()) == {"GOOD"}
    # the WRITE sprays over the three other planes only
    uplinks = [fab.stack.net.ports[f"h0.p{p}->p{p}.t0.0"] for p in range(4)]
    a.post_send(SendWr(1, length=256 << 10))
    fab.run_for_us(40)
    assert [(wc.wr_id, wc.status) for wc in pair.cq_a.poll(4)] == [(1, WC_SUCCESS)]
    sent = [port.tx_packets for port in uplinks]
    assert sent[1] == 0 and min(sent[0], sent[2], sent[3]) > 0, sent
    assert ctl.deny(PROFILE, mask=0xFF, value=1, allow=True) == EVS_PER_PLANE
    assert set(ctl.query_ev_state(PROFILE, a).values()) == {EV_STATE_GOOD}
    with pytest.raises(EvProfileError, match="outside its mask"):  # it could match no EV
        ctl.deny(PROFILE, mask=0xFF, value=0x100)


def test_modify_ev_state_sets_good_or_denied_only(pair: Pair) -> None:
    ctl = pair.fab.controller(SRC)
    ev = sorted(pair.a.transport_ev_states())[5]
    assert ctl.modify_ev_state(PROFILE, ev, EV_STATE_DENIED) == 1
    assert pair.a.transport_ev_states()[ev] == "DENIED"
    assert ctl.modify_ev_state(PROFILE, ev, EV_STATE_DENIED) == 0  # already
    assert errno_of(ctl.modify_ev_state, PROFILE, ev, EV_STATE_ASSUMED_BAD) == "EINVAL"
    assert ctl.modify_ev_state(PROFILE, ev, EV_STATE_GOOD) == 1
    assert pair.a.transport_ev_states()[ev] == "GOOD"
    assert ctl.modify_ev_state(PROFILE, 0xDEAD, EV_STATE_DENIED) == 0  # not one of its EVs


def test_a_t0_fault_reaches_the_ev_event_queue_and_its_repair_too(pair: Pair) -> None:
    fab, a = pair.fab, pair.a
    a.post_send(SendWr(1, length=1 << 20))
    fab.run_for_us(10)
    fault_ps = fab.now
    fab.fault("switch_down", "h0.p2.t0")
    fab.run_for_us(200)
    bad = pair.ev_cq.poll(64)
    plane2 = {ev for ev in a.transport_ev_states() if ev & 0xFF == 2}
    assert len(plane2) == EVS_PER_PLANE
    assert sorted(e.ev for e in bad) == sorted(plane2)  # each once
    assert {(e.port, e.state, e.profile_id, e.qp_num, e.drop_count) for e in bad} == {
        (3, EV_STATE_ASSUMED_BAD, PROFILE, a.qp_num, 0)}  # port: 1-based
    assert all(fault_ps <= e.time_ps <= fab.now for e in bad)
    codes = fab.controller(SRC).query_ev_state(PROFILE, a)
    assert {ev for ev, c in codes.items() if c == EV_STATE_ASSUMED_BAD} == plane2
    assert [(wc.wr_id, wc.status) for wc in pair.cq_a.poll(4)] == [(1, WC_SUCCESS)]
    repair_ps = fab.now
    fab.fault("switch_up", "h0.p2.t0")
    fab.run_for_us(400)
    good = pair.ev_cq.poll(64)
    assert sorted(e.ev for e in good) == sorted(plane2)
    assert all(e.state == EV_STATE_GOOD and e.time_ps > repair_ps for e in good)
    assert set(a.transport_ev_states().values()) == {"GOOD"}


def test_the_event_mask_filters_and_a_small_cq_counts_what_it_dropped() -> None:
    fab = Fabric("lab-small", seed=1)
    pair = connect(fab, ev_cqe=3)
    only_good = fab.controller(SRC).create_ev_event_cq(64)  # sees what the mask selects
    fab.run_for_us(5)
    fab.fault("switch_down", "h0.p0.t0")
    fab.run_for_us(100)
    small = pair.ev_cq.poll(64)
    assert len(small) == 3 and all(e.drop_count == 0 for e in small)  # 5 of 8 dropped
    assert len(only_good.poll(64)) == EVS_PER_PLANE
    fab.fault("switch_up", "h0.p0.t0")
    fab.run_for_us(400)
    after = pair.ev_cq.poll(64)
    assert after[0].state == EV_STATE_GOOD and after[0].drop_count == EVS_PER_PLANE - 3
    assert len(after) == 3  # the CQ filled again: the rest dropped


def test_a_profile_whose_mask_selects_no_state_raises_no_event() -> None:
    fab = Fabric("lab-small", seed=1)
    pair = connect(fab, src_profile=ev_profile(0))
    fab.fault("switch_down", "h0.p1.t0")
    fab.run_for_us(100)
    assert pair.ev_cq.poll(64) == []
    states = pair.a.transport_ev_states()
    assert sum(s == "ASSUMED_BAD" for s in states.values()) == EVS_PER_PLANE  # yet marked
