"""orchmllm.fit_quadratic_cost and orchmllm.CostCalibration: a stage's cost model from profiled
items or from the per-rank stage times of warmup steps."""

from __future__ import annotations

import numpy as np
import pytest

import orchmllm


def rank_times(truth, overhead, offsets, lengths, policy="packed", pad_multiple=1):
    """Each rank's stage time under the model, from its definition."""
    out = []
    for r in range(len(offsets) - 1):
        ls = lengths[offsets[r]:offsets[r + 1]]
        if len(ls) == 0:
            out.append(overhead)
        elif policy == "packed":
            out.append(overhead + sum(truth(int(v)) for v in ls))
        else:
            p = -(-int(ls.max()) // pad_multiple) * pad_multiple
            out.append(overhead + len(ls) * truth(p))
    return np.array(out)


def warmup_step(rng, ranks, max_items, max_len):
    counts = rng.integers(0, max_items + 1, size=ranks)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    lengths = rng.integers(1, max_len + 1, size=int(offsets[-1])).astype(np.int64)
    return offsets, lengths


@pytest.mark.parametrize("policy,pad_multiple", [("packed", 1), ("padded", 1), ("padded", 64)])
def test_calibration_recovers_the_model(policy, pad_multiple):
    truth = orchmllm.QuadraticCost(2e-3, 3e-6, 4e-10)
    rng = np.random.default_rng(7)
    calib = orchmllm.CostCalibration(policy, pad_multiple=pad_multiple)
    for step in range(4):
        offsets, lengths = warmup_step(rng, 16, 6, 30000 >> (2 * step))
        calib.add_step(offsets, lengths,
                       rank_times(truth, 0.01, offsets, lengths, policy, pad_multiple))
    assert calib.observations == 64
    fit = calib.fit()
    assert fit.observations == 64
    assert fit.cost.constant == pytest.approx(truth.constant, rel=1e-7)
    assert fit.cost.linear == pytest.approx(truth.linear, rel=1e-7)
    assert fit.cost.quadratic == pytest.approx(truth.quadratic, rel=1e-7)
    assert fit.overhead_seconds == pytest.approx(0.01, rel=1e-7)
    assert fit.rms_seconds < 1e-12
    assert "CalibrationResult(cost=QuadraticCost(" in repr(fit)


def test_calibration_model_balances_like_the_truth():
    # Noisy per-item times observed only as rank sums; the fitted model's plan is as good as
    # the true model's when judged by the true model.
    truth = orchmllm.QuadraticCost(1e-3, 2e-6, 5e-10)
    rng = np.random.default_rng(3)
    calib = orchmllm.CostCalibration()
    for _ in range(8):
        offsets, lengths = warmup_step(rng, 64, 8, 16000)
        noisy = [truth(int(v)) * (1 + 0.1 * (rng.random() - 0.5)) for v in lengths]
        seconds = [0.004 + sum(noisy[offsets[r]:offsets[r + 1]]) for r in range(64)]
        calib.add_step(offsets, lengths, seconds)
    fitted = calib.fit().cost
    offsets, lengths = warmup_step(rng, 64, 8, 16000)
    with_fit = orchmllm.balance(offsets, lengths, cost=fitted)
    with_truth = orchmllm.balance(offsets, lengths, cost=truth)
    loads = np.bincount(with_fit.dst_rank, weights=[truth(int(v)) for v in lengths],
                        minlength=64)
    assert loads.max() <= with_truth.makespan * 1.01


def test_add_rank_matches_add_step():
    rng = np.random.default_rng(1)
    a, b = orchmllm.CostCalibration(degree=1), orchmllm.CostCalibration(degree=1)
    for _ in range(3):
        offsets, lengths = warmup_step(rng, 8, 4, 2000)
        seconds = rng.random(8)
        a.add_step(offsets, lengths, seconds)
        for r in range(8):
            b.add_rank(lengths[offsets[r]:offsets[r + 1]].tolist(), seconds[r])
    fa, fb = a.fit(), b.fit()
    assert fa.cost == fb.cost and fa.overhead_seconds == fb.overhead_seconds
    assert fa.cost.quadratic == 0.0


def test_fit_quadratic_cost():
    lengths = np.array([256, 512, 1024, 2048, 4096, 8192])
    truth = orchmllm.QuadraticCost(0.01, 4e-5, 3e-9)
    q = orchmllm.fit_quadratic_cost(lengths, [truth(int(v)) for v in lengths])
    assert q.constant == pytest.approx(0.01, rel=1e-8)
    assert q.linear == pytest.approx(4e-5, rel=1e-8)
    assert q.quadratic == pytest.approx(3e-9, rel=1e-8)
    line = orchmllm.fit_quadratic_cost(lengths, 0.5 + 0.25 * lengths, degree=1)
    assert line.quadratic == 0.0 and line.linear == pytest.approx(0.25)


def test_bad_inputs():
    with pytest.raises(orchmllm.InvalidArgumentError, match="degree is 3"):
        orchmllm.CostCalibration(degree=3)
    with pytest.raises(orchmllm.InvalidArgumentError, match="policy"):
        orchmllm.CostCalibration("ragged")
    with pytest.raises(TypeError, match="degree must be an int"):
        orchmllm.CostCalibration(degree=2.0)
    calib = orchmllm.CostCalibration()
    with pytest.raises(orchmllm.InvalidArgumentError, match="negative length -2"):
        calib.add_rank([1, -2], 1.0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="finite"):
        calib.add_rank([1], float("nan"))
    with pytest.raises(ValueError, match="seconds has 1 entries, expected 2"):
        calib.add_step([0, 2, 3], [1, 2, 3], [1.0])
    with pytest.raises(TypeError, match="lengths must hold integers"):
        calib.add_step([0, 2, 3], [1.5, 2, 3], [1.0, 2.0])
    with pytest.raises(orchmllm.InvalidArgumentError, match="offsets"):
        calib.add_step([0, 3, 2], [1, 2, 3], [1.0, 2.0])
    assert calib.observations == 0
    calib.add_step([0, 2, 3], [1, 2, 3], [1.0, 2.0])
    with pytest.raises(orchmllm.InvalidArgumentError, match="2 observations for 4 unknowns"):
        calib.fit()
    with pytest.raises(orchmllm.InvalidArgumentError, match="distinct lengths"):
        orchmllm.fit_quadratic_cost([5, 5, 7], [1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="seconds has 2 entries, expected 3"):
        orchmllm.fit_quadratic_cost([1, 2, 3], [1.0, 2.0])
