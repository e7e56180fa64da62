"""mrc.verbs as an application uses it (``mrc.h``): context, CQs, a QP's states and the
WRITEs it posts, over the simulator.

Each test scripts part of a QP's life on lab-small (4 planes x 8 hosts, 2 per T0, 4 T1 per
plane) and checks what the API hands back: the state and errno of every transition, bytes
placed, completion statuses and times. tests/test_verbs_control.py covers the controller;
docs/verbs.md runs the whole life once more as the documentation shows it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from verbs_support import DST, PROFILE, SRC, Pair, connect, errno_of, rst_qp

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
    Fabric,
    RecvWr,
    SendWr,
    VerbsError,
    WorkCompletion,
)


@pytest.fixture
def pair() -> Pair:
    """SRC <-> DST in RTS with the default attributes."""
    return connect(Fabric("lab-small", seed=1))


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


# ---------------------------------------------------------------------- QP states
def test_qp_walks_rst_init_rtr_rts_and_query_reports_each_step() -> None:
    fab = Fabric("lab-small", seed=1)
    qp = rst_qp(fab)
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
    qp = rst_qp(fab)
    attrs: dict[str, dict[str, Any]] = {INIT: {"ev_profile_id": PROFILE, "cc_profile_id": PROFILE},
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
    qp = rst_qp(fab)
    ctl = fab.controller(SRC)
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
    qp = rst_qp(Fabric("lab-small", seed=1), max_send_wr=2, max_recv_wr=1)
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
    pair = connect(fab, sq_sig_all=False)
    for wr_id in range(1, 5):
        pair.a.post_send(SendWr(wr_id, length=8192, signaled=wr_id % 2 == 0))
    fab.run_for_us(30)
    assert sorted(wc.wr_id for wc in pair.cq_a.poll(8)) == [2, 4]
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


# ---------------------------------------------------------------------- the documentation
def test_docs_verbs_example_runs() -> None:
    """docs/verbs.md's script of a QP's whole life, as written there (on lab-8plane)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "verbs.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/verbs.md", "exec"), {})  # noqa: S102 (our own doc)
