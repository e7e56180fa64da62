"""Acceptance of the transports (issue 3, items 1-6) through the real simulator.

The scenarios are the product's (:mod:`mrc.acceptance`; ``benchmarks/acceptance_transport.py``
prints their numbers for the closing note); these tests run them on small fabrics and hold
them to the issue's targets. Item 7 (fault-schedule properties) is in ``test_acceptance_properties.py``.
"""

from __future__ import annotations

import pytest

import mrc.acceptance as acc
from topology import preset

LOSS_RATES = (0.001, 0.01, 0.05)


# ---------------------------------------------------------------------- 1. healthy
def test_healthy_mrc_single_qp_reaches_90_percent_of_the_nic() -> None:
    r = acc.healthy("mrc")
    assert r.nic_gbps == 800
    assert r.all_ok
    assert r.goodput_gbps >= 0.9 * r.nic_gbps
    assert r.goodput_gbps <= r.ceiling_gbps


def test_healthy_rc_one_qp_per_plane_is_near_line_rate() -> None:
    r = acc.healthy("rc")
    assert r.all_ok
    assert r.goodput_gbps >= 0.9 * r.nic_gbps


# ---------------------------------------------------------------------- 2. T0 down
def test_t0_down_mrc_keeps_its_share_and_delivers_every_byte() -> None:
    r = acc.t0_down("mrc")
    assert r.kept == pytest.approx(r.expected, abs=0.05)
    assert r.completed and r.all_ok
    assert r.bytes_delivered == r.bytes_posted  # unique bytes: nothing lost or counted twice
    assert r.messages_corrupt == 0


def test_t0_down_rc_qp_errors_exactly_when_the_timeout_formula_says() -> None:
    r = acc.t0_down("rc")
    assert r.failed and "retry count exceeded" in (r.failure_reason or "")
    assert r.failed_messages > 0 and not r.all_ok
    # last progress = the last ACK seen on the wire, just before the fault
    assert r.last_progress_us is not None
    assert r.fault_us - 10 < r.last_progress_us <= r.fault_us
    # adaptive retransmission (the default): the budget is retry_cnt (7) x the QP's timeout
    assert r.error_after_us == pytest.approx(7 * 4.096 * 2**3)
    assert r.qp_error_us == r.predicted_error_us  # to the picosecond


# ---------------------------------------------------------------------- 3. T1 fail + restore
def test_t1_fail_restore_mrc_dips_less_than_10_percent_and_reintegrates() -> None:
    r = acc.t1_fail_restore("mrc")
    assert r.dip < 0.10
    assert r.affected_evs > 0
    assert r.marked_bad == r.affected_evs
    assert r.max_mark_delay_us is not None and r.max_mark_delay_us <= 100
    assert r.returned_good == r.affected_evs


def test_t1_fail_restore_rc_qps_routed_through_it_recover() -> None:
    """Issue 36: RC rides a routed fabric. Its QPs through the dead T1 lose what was in
    flight; the T0s drop the T1 after detection and the QPs go on over other T1s (before, on
    static SRv6 paths, every one of them errored after its retries)."""
    r = acc.t1_fail_restore("rc")
    assert r.rc_qps_on_t1, "the chosen T1 carries no RC QP"
    assert r.rc_qps_errored == [] and r.rc_connections_failed == 0


# ---------------------------------------------------------------------- 4. random loss
@pytest.mark.parametrize("p", LOSS_RATES)
def test_random_loss_rc_follows_the_go_back_n_model(p: float) -> None:
    r = acc.random_loss("rc", p)
    assert r.all_ok
    assert r.qp_kept == pytest.approx(r.model, rel=0.15)
    assert r.job_kept == pytest.approx(r.model, rel=0.15)  # the slowest QP gates the job


@pytest.mark.parametrize("p", LOSS_RATES)
def test_random_loss_mrc_keeps_90_percent(p: float) -> None:
    r = acc.random_loss("mrc", p)
    assert r.all_ok
    assert r.job_kept >= 0.90


# ---------------------------------------------------------------------- 5. incast
def test_incast_recovers_trims_by_nack_and_keeps_queues_bounded() -> None:
    r = acc.incast()
    assert r.all_ok
    assert r.trims > 0
    assert r.timeouts == 0 and r.qp_timeouts == 0 and r.losses == 0
    assert r.nacks_received == r.trims  # every trim answered by one NACK ...
    assert r.retransmissions == r.nacks_received  # ... and one resend, nothing else
    assert r.goodput_gbps >= 0.9 * r.nic_gbps
    # the receiver is done before the sender learns it: placement, then the ACK's trip back
    assert r.placed_us < r.duration_us and r.placed_gbps > r.goodput_gbps
    assert r.peak_queue_bytes <= r.buffer_bytes
    assert r.peak_queue_after_warmup_bytes < r.buffer_bytes
    assert r.mean_queue_bytes <= r.buffer_bytes / 2
    assert r.trim_rate_after_warmup <= 0.01
    # window-limited senders still spread over every plane (the NIC wakes ports fairly)
    assert r.plane_imbalance <= 1.1


# ---------------------------------------------------------------------- 6. permutation
def test_permutation_mean_fct_within_20_percent_of_ideal() -> None:
    r = acc.permutation("mrc")
    assert r.flows == 32 and r.all_ok
    assert r.ratio == pytest.approx(1.0, abs=0.20)


# ---------------------------------------------------------------------- slow, larger runs
@pytest.mark.slow
def test_t1_fail_restore_mrc_on_8_planes() -> None:
    pairs = ((0, 4), (4, 8), (8, 12), (12, 0))
    r = acc.t1_fail_restore("mrc", spec=preset("lab-8plane"), pairs=pairs)
    assert r.dip < 0.10
    assert r.marked_bad == r.affected_evs > 0
    assert r.max_mark_delay_us is not None and r.max_mark_delay_us <= 100
    assert r.returned_good == r.affected_evs


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_random_loss_rc_model_holds_across_seeds(seed: int) -> None:
    r = acc.random_loss("rc", 0.05, seed=seed)
    assert r.qp_kept == pytest.approx(r.model, rel=0.15)
