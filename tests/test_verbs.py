"""mrc.verbs as an application and a controller use it: libmrc's objects over the simulator.

Each test scripts part of a QP's life on lab-small (4 planes x 8 hosts, 2 per T0, 4 T1 per
plane) and checks what the API hands back: states and errno of every transition, bytes
placed, completion statuses and times, EV states after a deny, and the EV events a fault
raises. docs/verbs.md runs the whole life once more as the documentation shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mrc.ev import EV_STATE_ASSUMED_BAD, EV_STATE_DENIED, EV_STATE_GOOD
from mrc.ev.profile import EvField, EvProfile, EvProfileError
from mrc.verbs import (
    ERR,
    INIT,
    PROFILE_OFFLINE,
    PROFILE_ONLINE,
    RST,
    RTR,
    RTS,
    WC_RECV_RDMA_WITH_IMM,
    WC_RETRY_EXC_ERR,
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    WR_RDMA_WRITE,
    WR_RDMA_WRITE_WITH_IMM,
    CompletionQueue,
    Controller,
    EvEvent,
    EvEventCq,
    Fabric,
    QueuePair,
    RecvWr,
    SendWr,
    VerbsError,
    WorkCompletion,
)
from mrc.verbs import PROFILE_INIT as EV_PROFILE_INIT

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


def connect(fab: Fabric, *, cqe: int = 64, ev_cqe: int = 256, **rts: int) -> Pair:
    """Two QPs SRC <-> DST in RTS (``rts``: the RTS attributes)."""
    for host in (SRC, DST):
        online(fab, host)
    ev_cq = fab.controller(SRC).create_ev_event_cq(ev_cqe)
    ctx_a, ctx_b = fab.open_device(SRC), fab.open_device(DST)
    cq_a, cq_b = ctx_a.create_cq(cqe), ctx_b.create_cq(cqe)
    a = ctx_a.create_qp(send_cq=cq_a, recv_cq=cq_a)
    b = ctx_b.create_qp(send_cq=cq_b, recv_cq=cq_b)
    for qp, peer, dest in ((a, b, DST), (b, a, SRC)):
        qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
        qp.modify(RTR, dest=dest, dest_qp_num=peer.qp_num)
    for qp in (a, b):
        qp.modify(RTS, **rts)
    return Pair(fab, a, b, cq_a, cq_b, ev_cq)


@pytest.fixture
def pair() -> Pair:
    return connect(Fabric("lab-small", seed=1))


def errno_of(call: object, *args: object, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno


# ---------------------------------------------------------------------- context and CQ
def test_device_attributes_and_cq_sizes() -> None:
    ctx = Fabric("lab-small").open_device("h3")
    attr = ctx.query_device()
    assert attr.mrc_protocol_version == 1 and "TRIM_NACK" in attr.cap
    assert ctx.host == 3
    assert errno_of(ctx.create_cq, 0) == "EINVAL"
    assert errno_of(Fabric("lab-small").open_device, "h8") == "EINVAL"  # 8 hosts: h0..h7
    assert errno_of(Fabric("lab-small").open_device, "p0.t0.0") == "EINVAL"  # not a host


def test_cq_polls_oldest_first_and_refuses_an_overrun() -> None:
    cq = CompletionQueue(2)
    wcs = [WorkCompletion(i, WC_SUCCESS, WR_RDMA_WRITE, 10 * i, 7, 100 * i) for i in (1, 2, 3)]
    cq.push(wcs[0])
    cq.push(wcs[1])
    assert errno_of(cq.push, wcs[2]) == "EOVERFLOW" and cq.overrun
    assert cq.poll(1) == [wcs[0]]
    assert cq.poll(5) == [wcs[1]]
    assert cq.poll(5) == []


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


# ---------------------------------------------------------------------- QP states
def test_qp_walks_rst_init_rtr_rts_and_query_reports_each_step() -> None:
    fab = Fabric("lab-small", seed=1)
    for host in (SRC, DST):
        online(fab, host)
    ctx = fab.open_device(SRC)
    cq = ctx.create_cq(8)
    qp = ctx.create_qp(send_cq=cq, recv_cq=cq)
    assert qp.query() == {"qp_state": RST, "qp_num": qp.qp_num}
    qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
    assert qp.query()["qp_state"] == INIT and qp.transport is None
    qp.modify(RTR, dest=DST, dest_qp_num=qp.qp_num + 1, mpr_dest=16, max_wimm_dest=64)
    got = qp.query()
    assert (got["qp_state"], got["ev_count"], got["mpr_dest"], got["max_wimm_dest"]) == (
        RTR, 32, 16, 64)
    assert got["dest"] == DST and qp.transport is not None
    assert set(qp.transport_ev_states().values()) == {"GOOD"}
    qp.modify(RTS, mpr=4, timeout=10, retry_linear_cnt=3, retry_exp_cnt=5)
    got = qp.query()
    assert (got["qp_state"], got["mpr"], got["timeout"], got["retry_linear_cnt"],
            got["retry_exp_cnt"]) == (RTS, 4, 10, 3, 5)
    qp.modify(timeout=12, mpr_dest=32)  # RTS -> RTS changes attributes in place
    assert (qp.query()["timeout"], qp.query()["mpr_dest"], qp.state) == (12, 32, RTS)


@pytest.mark.parametrize(("path", "target"), [
    ((), RTR), ((), RTS), ((INIT,), RTS), ((INIT,), "SQD"),  # a verbs state MRC lacks
    ((INIT, RTR), INIT), ((INIT, RTR, RTS), INIT), ((INIT, RTR, RTS), RTR),
    ((INIT, RTR, RTS, ERR), INIT), ((INIT, RTR, RTS, ERR), RTS),
])
def test_illegal_transitions_are_refused_and_leave_the_state(path: tuple[str, ...],
                                                             target: str) -> None:
    fab = Fabric("lab-small", seed=1)
    for host in (SRC, DST):
        online(fab, host)
    ctx = fab.open_device(SRC)
    cq = ctx.create_cq(8)
    qp = ctx.create_qp(send_cq=cq, recv_cq=cq)
    attrs = {INIT: {"ev_profile_id": PROFILE, "cc_profile_id": PROFILE},
             RTR: {"dest": DST, "dest_qp_num": 1}, RTS: {}, ERR: {}}
    for state in path:
        qp.modify(state, **attrs[state])
    before = qp.state
    with pytest.raises(VerbsError) as info:
        qp.modify(target, **attrs.get(target, {}))
    assert info.value.errno == "EINVAL" and "is not a transition" in str(info.value)
    assert qp.state == before


def test_transitions_refuse_missing_or_wrong_attributes() -> None:
    fab = Fabric("lab-small", seed=1)
    ctl = online(fab, SRC)
    ctx = fab.open_device(SRC)
    cq = ctx.create_cq(8)
    qp = ctx.create_qp(send_cq=cq, recv_cq=cq)
    assert errno_of(qp.modify, INIT, ev_profile_id=PROFILE) == "EINVAL"  # no CC profile
    assert errno_of(qp.modify, INIT, ev_profile_id=9, cc_profile_id=PROFILE) == "EINVAL"
    ctl.modify_cc_profile(5, algorithm="fixed")  # OFFLINE: not usable
    assert errno_of(qp.modify, INIT, ev_profile_id=PROFILE, cc_profile_id=5) == "EINVAL"
    assert qp.state == RST
    qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
    assert errno_of(qp.modify, RTR, dest=DST) == "EINVAL"  # no dest_qp_num
    assert errno_of(qp.modify, RTR, dest=SRC, dest_qp_num=1) == "EINVAL"  # itself
    assert errno_of(qp.modify, RTR, dest="h99", dest_qp_num=1) == "EINVAL"
    assert qp.state == INIT
    qp.modify(RTR, dest=DST, dest_qp_num=1)
    qp.modify(RTS)
    assert errno_of(qp.modify, dest="h3") == "EINVAL"  # the peer is fixed at RTR
    assert errno_of(qp.modify, ev_profile_id=2) == "EINVAL"
    assert errno_of(qp.modify, mpr=-1) == "EINVAL"  # the transport's own check


def test_work_requests_are_refused_outside_their_states_and_limits() -> None:
    fab = Fabric("lab-small", seed=1)
    for host in (SRC, DST):
        online(fab, host)
    ctx = fab.open_device(SRC)
    cq = ctx.create_cq(8)
    qp = ctx.create_qp(send_cq=cq, recv_cq=cq, max_send_wr=2, max_recv_wr=1)
    assert errno_of(qp.post_recv, RecvWr(1)) == "EINVAL"  # RST
    assert errno_of(qp.post_send, SendWr(1, length=8)) == "EINVAL"  # not RTS
    qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
    qp.post_recv(RecvWr(1))
    assert errno_of(qp.post_recv, RecvWr(2)) == "ENOMEM"
    qp.modify(RTR, dest=DST, dest_qp_num=1)
    assert errno_of(qp.post_send, SendWr(1, length=8)) == "EINVAL"  # RTR
    qp.modify(RTS)
    assert errno_of(qp.post_send, SendWr(1, opcode="SEND", length=8)) == "EINVAL"
    assert errno_of(qp.post_send, SendWr(1, opcode="RDMA_READ", length=8)) == "EINVAL"
    assert errno_of(qp.post_send, SendWr(1, opcode=WR_RDMA_WRITE_WITH_IMM, length=8)) == (
        "EINVAL")  # no imm_data
    qp.post_send(SendWr(1, length=1 << 20))
    qp.post_send(SendWr(2, length=1 << 20))
    assert errno_of(qp.post_send, SendWr(3, length=8)) == "ENOMEM"  # 2 outstanding


def test_reset_then_reuse_the_qp(pair: Pair) -> None:
    a, fab = pair.a, pair.fab
    qpn = a.qp_num
    a.modify(RST)
    assert a.query() == {"qp_state": RST, "qp_num": qpn} and a.transport is None
    # detached from the profile: SRC's EV profile may go OFFLINE now
    fab.controller(SRC).modify_ev_profile(PROFILE, state=PROFILE_OFFLINE)
    fab.controller(SRC).modify_ev_profile(PROFILE, state=PROFILE_ONLINE)
    a.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
    a.modify(RTR, dest=DST, dest_qp_num=pair.b.qp_num)
    a.modify(RTS)
    a.post_send(SendWr(5, length=4096))
    fab.run_for_us(30)
    assert [(wc.wr_id, wc.status) for wc in pair.cq_a.poll(4)] == [(5, WC_SUCCESS)]


# ---------------------------------------------------------------------- writes
def test_writes_place_every_byte_and_complete_each_wr_once(pair: Pair) -> None:
    fab, a, b = pair.fab, pair.a, pair.b
    b.post_recv(RecvWr(70))
    b.post_recv(RecvWr(71))
    payload = bytes(range(256)) * 20  # 5120 B: two packets
    a.post_send(SendWr(1, length=100_000))
    a.post_send(SendWr(2, WR_RDMA_WRITE_WITH_IMM, payload=payload, imm_data=0xBEEF))
    a.post_send(SendWr(3, length=1))
    fab.run_for_us(50)
    # a CQE when the WRITE's last byte is acknowledged: MRC sprays, so a short WRITE
    # posted last may complete first
    sent = sorted(pair.cq_a.poll(8), key=lambda wc: wc.wr_id)
    assert [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num) for wc in sent] == [
        (1, WC_SUCCESS, WR_RDMA_WRITE, 100_000, a.qp_num),
        (2, WC_SUCCESS, WR_RDMA_WRITE_WITH_IMM, 5120, a.qp_num),
        (3, WC_SUCCESS, WR_RDMA_WRITE, 1, a.qp_num)]
    assert all(wc.latency_ps == wc.time_ps for wc in sent)  # all posted at t=0
    # at least a round trip: 2 x (3 links x 500 ns + 2 switches x 400 ns); no later than the run
    assert all(4_600_000 < wc.time_ps <= fab.now for wc in sent)
    got = pair.cq_b.poll(8)  # one receive WR consumed, by the WRITE with immediate only
    assert [(wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data, wc.qp_num)
            for wc in got] == [(70, WC_SUCCESS, WC_RECV_RDMA_WITH_IMM, 5120, 0xBEEF, b.qp_num)]
    assert got[0].time_ps < sent[1].time_ps  # placed before its ACK got back
    # every byte placed once at the responder, nothing malformed
    assert fab.stack.recorder.bytes_delivered == 100_000 + 5120 + 1
    assert b.transport is not None
    stats = b.transport.stats
    assert (stats.messages_received, stats.duplicates, stats.bad_packets) == (3, 0, 0)
    assert pair.cq_a.poll(8) == [] and pair.cq_b.poll(8) == []


def test_only_signaled_writes_complete_when_sq_sig_all_is_off() -> None:
    fab = Fabric("lab-small", seed=2)
    for host in (SRC, DST):
        online(fab, host)
    ctx_a, ctx_b = fab.open_device(SRC), fab.open_device(DST)
    cq_a, cq_b = ctx_a.create_cq(8), ctx_b.create_cq(8)
    a = ctx_a.create_qp(send_cq=cq_a, recv_cq=cq_a, sq_sig_all=False)
    b = ctx_b.create_qp(send_cq=cq_b, recv_cq=cq_b)
    for qp, peer, dest in ((a, b, DST), (b, a, SRC)):
        qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
        qp.modify(RTR, dest=dest, dest_qp_num=peer.qp_num)
        qp.modify(RTS)
    for wr_id in range(1, 5):
        a.post_send(SendWr(wr_id, length=8192, signaled=wr_id % 2 == 0))
    fab.run_for_us(30)
    assert [wc.wr_id for wc in cq_a.poll(8)] == [2, 4]
    assert fab.stack.recorder.bytes_delivered == 4 * 8192


def test_a_write_with_immediate_and_no_receive_wr_is_a_qp_error(pair: Pair) -> None:
    a, b = pair.a, pair.b
    a.post_send(SendWr(1, WR_RDMA_WRITE_WITH_IMM, length=64, imm_data=1))
    pair.fab.run_for_us(20)
    assert b.state == ERR and "no receive WR" in (b.error_reason or "")  # MRC has no RNR
    assert pair.cq_b.poll(4) == []


def test_moving_to_err_flushes_every_outstanding_wr(pair: Pair) -> None:
    a, b = pair.a, pair.b
    b.post_recv(RecvWr(80))
    b.post_recv(RecvWr(81))
    b.modify(ERR)
    assert b.state == ERR and b.transport is not None
    assert [(wc.wr_id, wc.status, wc.opcode) for wc in pair.cq_b.poll(4)] == [
        (80, WC_WR_FLUSH_ERR, WC_RECV_RDMA_WITH_IMM), (81, WC_WR_FLUSH_ERR,
                                                         WC_RECV_RDMA_WITH_IMM)]
    for wr_id in (1, 2, 3):
        a.post_send(SendWr(wr_id, length=1 << 20))
    a.modify(ERR)
    assert [(wc.wr_id, wc.status, wc.byte_len) for wc in pair.cq_a.poll(8)] == [
        (1, WC_RETRY_EXC_ERR, 0), (2, WC_WR_FLUSH_ERR, 0), (3, WC_WR_FLUSH_ERR, 0)]
    assert errno_of(a.post_send, SendWr(4, length=8)) == "EINVAL"
    assert errno_of(a.post_recv, RecvWr(5)) == "EINVAL"


def test_every_path_cut_errors_the_qp_after_its_retries() -> None:
    # T = 4.096 us x 2^4 = 16.4 us; one linear retry and two exponential ones
    pair = connect(Fabric("lab-small", seed=1), timeout=4, retry_linear_cnt=1,
                   retry_exp_cnt=2)
    fab, a = pair.fab, pair.a
    assert a.transport is not None
    after = a.transport.config.error_after_ps()
    assert after is not None
    a.post_send(SendWr(1, length=16 << 10))
    fab.run_for_us(20)
    assert [wc.wr_id for wc in pair.cq_a.poll(4)] == [1]
    cut = fab.now
    for plane in range(fab.spec.planes):
        fab.fault("nic_port_down", f"h0.p{plane}")
    a.post_send(SendWr(2, length=1 << 20))
    a.post_send(SendWr(3, length=4096))
    fab.run_for_us(400)
    assert a.state == ERR and a.error_reason
    flushed = pair.cq_a.poll(8)
    assert [(wc.wr_id, wc.status) for wc in flushed] == [(2, WC_RETRY_EXC_ERR),
                                                         (3, WC_WR_FLUSH_ERR)]
    # not before the retries ran out, and within one more timeout of the formula
    assert cut + after <= flushed[0].time_ps <= cut + after + 20_000_000
    assert flushed[0].time_ps == flushed[1].time_ps


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
    for host, mask in ((SRC, 0), (DST, EV_STATE_GOOD | EV_STATE_ASSUMED_BAD)):
        online(fab, host, ev_profile(mask))
    cq_events = fab.controller(SRC).create_ev_event_cq(64)
    ctx_a, ctx_b = fab.open_device(SRC), fab.open_device(DST)
    cq_a, cq_b = ctx_a.create_cq(8), ctx_b.create_cq(8)
    a = ctx_a.create_qp(send_cq=cq_a, recv_cq=cq_a)
    b = ctx_b.create_qp(send_cq=cq_b, recv_cq=cq_b)
    for qp, peer, dest in ((a, b, DST), (b, a, SRC)):
        qp.modify(INIT, ev_profile_id=PROFILE, cc_profile_id=PROFILE)
        qp.modify(RTR, dest=dest, dest_qp_num=peer.qp_num)
        qp.modify(RTS)
    fab.fault("switch_down", "h0.p1.t0")
    fab.run_for_us(100)
    assert cq_events.poll(64) == []
    states = a.transport_ev_states()
    assert sum(s == "ASSUMED_BAD" for s in states.values()) == EVS_PER_PLANE  # yet marked
