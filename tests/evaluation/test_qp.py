"""QP-curves (paper section 4.5): hand examples, ties, monotonicity, folds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.evaluation import mae, metrics, qp_curve, qp_curves_over_folds, qp_summary, rmse
from mogp_surprise.evaluation.qp import n_kept, resolve_quantiles


def test_hand_computed_example():
    # sorted by std: errors 0 (s=.1), 1 (s=.2), 0 (s=.3), 3 (s=.4)
    y = [4.0, 1.0, 2.0, 3.0]
    mean = [1.0, 1.0, 3.0, 3.0]
    std = [0.4, 0.1, 0.2, 0.3]
    curve = qp_curve(y, mean, std, quantiles=4)
    assert list(curve.columns) == ["quantile", "n", "std_threshold", "rmse", "mae"]
    np.testing.assert_allclose(curve["quantile"], [0.25, 0.5, 0.75, 1.0])
    assert curve["n"].tolist() == [1, 2, 3, 4]
    np.testing.assert_allclose(curve["std_threshold"], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(curve["rmse"], [0.0, np.sqrt(1 / 2), np.sqrt(1 / 3), np.sqrt(10 / 4)])
    np.testing.assert_allclose(curve["mae"], [0.0, 0.5, 1 / 3, 1.0])


def test_n_is_ceil_of_q_times_n():
    curve = qp_curve(np.zeros(7), np.zeros(7), np.arange(7.0), quantiles=3)
    assert curve["n"].tolist() == [3, 5, 7]  # ceil(7/3), ceil(14/3), 7
    assert n_kept(0.7, 10).tolist() == 7  # 0.7 * 10 == 7.000000000000001 in floats
    assert n_kept(np.array([0.01, 0.71]), 10).tolist() == [1, 8]


def test_ties_follow_input_order_and_are_deterministic():
    std = np.ones(4)
    y = np.array([1.0, 1.0, 3.0, 3.0])
    mean = np.ones(4)  # errors 0, 0, 2, 2
    first = qp_curve(y, mean, std, quantiles=2)
    assert first["rmse"].tolist() == [0.0, np.sqrt(2.0)]
    pd.testing.assert_frame_equal(first, qp_curve(y, mean, std, quantiles=2))
    flipped = qp_curve(y[::-1], mean, std, quantiles=2)  # tied large errors now come first
    assert flipped["rmse"].tolist() == [2.0, np.sqrt(2.0)]
    # untied predictions are unaffected by permutations
    std2 = np.array([0.1, 0.2, 0.9, 0.9])
    perm = np.array([3, 1, 0, 2])
    a = qp_curve(y, mean, std2, quantiles=4)
    b = qp_curve(y[perm], mean[perm], std2[perm], quantiles=4)
    pd.testing.assert_frame_equal(a.iloc[:2], b.iloc[:2])


def test_last_point_equals_overall_metrics():
    rng = np.random.default_rng(1)
    y, mean, std = rng.normal(size=101), rng.normal(size=101), rng.uniform(size=101)
    last = qp_curve(y, mean, std, quantiles=7).iloc[-1]
    assert last["quantile"] == 1.0 and last["n"] == 101
    assert last["rmse"] == pytest.approx(rmse(y, mean))
    assert last["mae"] == pytest.approx(mae(y, mean))
    assert last["std_threshold"] == std.max()


def test_curve_rises_when_error_grows_with_std():
    rng = np.random.default_rng(2)
    n = 20_000
    mean = rng.uniform(1, 5, n)
    std = rng.uniform(0.2, 2.0, n)
    y = mean + std * rng.standard_normal(n)
    curve = qp_curve(y, mean, std, quantiles=10)
    assert np.all(np.diff(curve["rmse"]) > 0)
    assert np.all(np.diff(curve["mae"]) > 0)
    # a useless (shuffled) uncertainty gives a roughly flat curve
    flat = qp_curve(y, mean, rng.permutation(std), quantiles=10)
    assert flat["rmse"].max() - flat["rmse"].min() < 0.1


def test_int_and_explicit_quantiles_agree():
    rng = np.random.default_rng(3)
    y, mean, std = rng.normal(size=30), rng.normal(size=30), rng.uniform(size=30)
    explicit = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    pd.testing.assert_frame_equal(qp_curve(y, mean, std, 10), qp_curve(y, mean, std, explicit))
    # explicit quantiles are sorted and de-duplicated
    pd.testing.assert_frame_equal(qp_curve(y, mean, std, [1.0, 0.5, 0.5]), qp_curve(y, mean, std, 2))
    np.testing.assert_allclose(resolve_quantiles(np.int64(4)), [0.25, 0.5, 0.75, 1.0])


def test_metric_selection_and_callables(monkeypatch):
    y, mean, std = [1.0, 2.0], [1.0, 4.0], [0.1, 0.2]
    assert list(qp_curve(y, mean, std, 2, metrics="mae").columns)[-1] == "mae"

    def max_error(a, b):
        return float(np.max(np.abs(a - b)))

    curve = qp_curve(y, mean, std, 2, metrics=["rmse", max_error])
    assert curve["max_error"].tolist() == [0.0, 2.0]
    monkeypatch.setitem(metrics.METRICS, "bias", lambda a, b: float(np.mean(b - a)))
    assert qp_curve(y, mean, std, 1, metrics=("bias",))["bias"].tolist() == [1.0]


def _fold_curves():
    a = pd.DataFrame({"quantile": [0.5, 1.0], "n": [2, 4], "std_threshold": [0.2, 0.4],
                      "rmse": [0.8, 1.0], "mae": [0.6, 0.8]})
    b = a.assign(n=[3, 5], rmse=[0.6, 1.2], mae=[0.4, 0.8])
    return a, b


def test_qp_curves_over_folds_mean_and_std():
    a, b = _fold_curves()
    out = qp_curves_over_folds([a, b])
    assert list(out.columns) == ["quantile", "n_folds", "n_mean", "n_std", "std_threshold_mean",
                                 "std_threshold_std", "rmse_mean", "rmse_std", "mae_mean", "mae_std"]
    np.testing.assert_allclose(out["rmse_mean"], [0.7, 1.1])
    np.testing.assert_allclose(out["rmse_std"], [0.1, 0.1])  # ddof=0 as Surprise's cross_validate
    np.testing.assert_allclose(out["mae_std"], [0.1, 0.0], atol=1e-15)
    np.testing.assert_allclose(out["n_mean"], [2.5, 4.5])
    np.testing.assert_allclose(qp_curves_over_folds([a, b], ddof=1)["rmse_std"], [np.sqrt(0.02)] * 2)
    assert out["n_folds"].tolist() == [2, 2]
    assert qp_curves_over_folds([a], ddof=1)["rmse_std"].isna().all()


def test_qp_curves_over_folds_rejects_mismatched_folds():
    a, b = _fold_curves()
    with pytest.raises(ValueError, match=r"`curves\[1\]` must have the quantiles"):
        qp_curves_over_folds([a, b.assign(quantile=[0.4, 1.0])])
    with pytest.raises(ValueError, match=r"`curves\[1\]` must have the columns"):
        qp_curves_over_folds([a, b.drop(columns="mae")])
    with pytest.raises(ValueError, match="non-empty list"):
        qp_curves_over_folds([])


def test_qp_summary_single_and_folds():
    rng = np.random.default_rng(4)
    y, mean, std = rng.normal(size=50), rng.normal(size=50), rng.uniform(size=50)
    curve = qp_curve(y, mean, std, 10)
    summary = qp_summary(curve)
    assert list(summary.index) == ["rmse_q100", "rmse_q90", "rmse_q80", "mae_q100", "mae_q90", "mae_q80"]
    assert summary["rmse_q100"] == pytest.approx(rmse(y, mean))
    assert summary["mae_q80"] == curve.loc[7, "mae"]
    folds = qp_curves_over_folds([curve, qp_curve(y[::-1], mean[::-1], std, 10)])
    fsum = qp_summary(folds, at=(1.0, 0.5))
    assert list(fsum.index)[:4] == ["rmse_q100", "rmse_q100_std", "rmse_q50", "rmse_q50_std"]
    table = pd.DataFrame({"model": summary, "other": summary}).T
    assert table.shape == (2, 6)
    with pytest.raises(ValueError, match=r"`at` must be a quantile of `curve`.*got 0.33$"):
        qp_summary(curve, at=(0.33,))


def test_ddof_and_metric_names_are_checked():
    curve = qp_curve([1, 2, 3, 4], [1, 2, 3, 6], [0.1, 0.2, 0.3, 0.4], quantiles=4)
    with pytest.raises(ValueError, match="`ddof` must be an int >= 0; got -1"):
        qp_curves_over_folds([curve, curve], ddof=-1)
    for name in ("n", "quantile", "std_threshold", "n_folds"):
        with pytest.raises(ValueError, match=f"`name` '{name}' is a column every QP curve has already"):
            metrics.register_metric(name, lambda y, m: 0.0)
