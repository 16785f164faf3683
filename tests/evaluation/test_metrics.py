"""Metrics against closed forms, scipy and simulated Gaussian data."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from mogp_surprise.evaluation import metrics as M


def test_rmse_mae_known_values():
    y, mean = [1.0, 2.0, 3.0], [2.0, 2.0, 5.0]  # errors 1, 0, 2
    assert M.rmse(y, mean) == pytest.approx(math.sqrt(5 / 3))
    assert M.mae(y, mean) == pytest.approx(1.0)


def test_accepts_pandas_series():
    y = pd.Series([1.0, 2.0])
    assert M.rmse(y, np.array([1.0, 4.0])) == pytest.approx(math.sqrt(2.0))


def test_gaussian_nll_matches_scipy_logpdf():
    rng = np.random.default_rng(0)
    y, mean = rng.normal(3, 1, 50), rng.normal(3, 1, 50)
    std = rng.uniform(0.2, 2.0, 50)
    expected = -np.mean(stats.norm.logpdf(y, loc=mean, scale=std))
    assert M.gaussian_nll(y, mean, std) == pytest.approx(expected, rel=1e-12)


def test_gaussian_nll_includes_normalising_constant():
    assert M.gaussian_nll([0.0], [0.0], [1.0]) == pytest.approx(0.5 * math.log(2 * math.pi))


def _crps_by_quadrature(y: float, mean: float, std: float) -> float:
    cdf = stats.norm(mean, std).cdf
    below, _ = integrate.quad(lambda x: cdf(x) ** 2, -np.inf, y)
    above, _ = integrate.quad(lambda x: (1.0 - cdf(x)) ** 2, y, np.inf)
    return below + above


@pytest.mark.parametrize(
    "y, mean, std",
    [(0.0, 0.0, 1.0), (3.0, 3.5, 0.8), (5.0, 2.0, 0.5), (1.0, 4.2, 2.5), (-2.0, 1.0, 0.1)],
)
def test_crps_closed_form_matches_numerical_integration(y, mean, std):
    assert M.crps_gaussian([y], [mean], [std]) == pytest.approx(
        _crps_by_quadrature(y, mean, std), rel=1e-6, abs=1e-9
    )


def test_crps_is_mean_over_ratings_and_tends_to_mae():
    y, mean, std = [0.0, 3.0], [0.0, 3.5], [1.0, 0.8]
    single = [M.crps_gaussian([a], [b], [c]) for a, b, c in zip(y, mean, std)]
    assert M.crps_gaussian(y, mean, std) == pytest.approx(np.mean(single))
    assert M.crps_gaussian([1.0, 2.0], [2.0, 4.0], [1e-8, 1e-8]) == pytest.approx(1.5, abs=1e-6)


@pytest.fixture(scope="module")
def calibrated():
    rng = np.random.default_rng(12345)
    n = 200_000
    mean = rng.uniform(1, 5, n)
    std = rng.uniform(0.3, 1.5, n)
    y = mean + std * rng.standard_normal(n)
    return y, mean, std


def test_coverage_of_calibrated_model_is_nominal(calibrated):
    coverage = M.interval_coverage(*calibrated)
    assert list(coverage) == [0.5, 0.8, 0.9, 0.95]
    for level, observed in coverage.items():
        assert abs(observed - level) < 0.005, (level, observed)


def test_coverage_of_overconfident_model_is_below_nominal(calibrated):
    y, mean, std = calibrated
    coverage = M.interval_coverage(y, mean, std / 2)
    for level, observed in coverage.items():
        nominal_halved = 2 * stats.norm.cdf(stats.norm.ppf((1 + level) / 2) / 2) - 1
        assert observed < level - 0.1
        assert abs(observed - nominal_halved) < 0.005


def test_coverage_edge_cases():
    assert M.interval_coverage([1.0, 9.0], [0.0, 0.0], [1.0, 1.0], levels=[1.0]) == {1.0: 1.0}
    # std == 0: the interval is the point itself (bounds included)
    assert M.interval_coverage([1.0, 2.0], [1.0, 1.0], [0.0, 0.0], levels=(0.5, 1.0)) == {
        0.5: 0.5, 1.0: 1.0}
    assert M.interval_coverage([0.0], [0.0], [1.0], levels=0.5) == {0.5: 1.0}


def test_calibration_curve_of_calibrated_data_is_near_diagonal(calibrated):
    curve = M.calibration_curve(*calibrated)
    assert list(curve.columns) == ["expected", "observed"]
    expected = [round(0.05 * k, 2) for k in range(1, 20)] + [0.99]
    np.testing.assert_allclose(curve["expected"], expected)
    assert np.max(np.abs(curve["observed"] - curve["expected"])) < 0.006
    custom = M.calibration_curve(*calibrated, levels=[0.25, 0.75])
    assert custom["expected"].tolist() == [0.25, 0.75]


def test_sharpness_is_mean_std():
    assert M.sharpness([0.5, 1.0, 1.5]) == pytest.approx(1.0)


def test_uncertainty_report_keys_and_values(calibrated):
    y, mean, std = (a[:1000] for a in calibrated)
    report = M.uncertainty_report(y, mean, std)
    assert list(report) == ["rmse", "mae", "nll", "crps", "coverage_50", "coverage_80",
                            "coverage_90", "coverage_95", "sharpness", "n"]
    assert report["n"] == 1000 and isinstance(report["n"], int)
    assert report["rmse"] == M.rmse(y, mean)
    assert report["crps"] == M.crps_gaussian(y, mean, std)
    assert report["coverage_90"] == M.interval_coverage(y, mean, std, [0.9])[0.9]


def test_metric_registry(monkeypatch):
    assert M.METRICS["rmse"] is M.rmse and M.METRICS["mae"] is M.mae
    monkeypatch.setattr(M, "METRICS", dict(M.METRICS))
    M.register_metric("max_error", lambda y, m: float(np.max(np.abs(y - m))))
    assert M.get_metric("max_error")[1]([1.0, 2.0], np.array([1.0, 5.0])) == 3.0
    assert M.get_metric("RMSE") == ("rmse", M.rmse)
    with pytest.raises(ValueError, match="already registered"):
        M.register_metric("rmse", M.mae)
    M.register_metric("rmse", M.mae, overwrite=True)
    assert M.METRICS["rmse"] is M.mae
