"""Surprise Prediction lists -> arrays, without importing Surprise in the library."""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
import pytest

from mogp_surprise.evaluation import (
    arrays_from_predictions,
    qp_curve,
    qp_curve_from_predictions,
    uncertainty_report,
    uncertainty_report_from_predictions,
)

Prediction = namedtuple("Prediction", ["uid", "iid", "r_ui", "est", "details"])


def _preds(details_list, r_ui=(4.0, 2.0, 5.0)):
    return [Prediction(f"u{k}", f"i{k}", r, est, d)
            for k, (r, est, d) in enumerate(zip(r_ui, (3.5, 2.5, 4.0), details_list))]


def test_std_from_details():
    y, mean, std = arrays_from_predictions(_preds([{"std": 0.5}, {"std": 1.0}, {"std": 2.0}]))
    np.testing.assert_array_equal(y, [4.0, 2.0, 5.0])
    np.testing.assert_array_equal(mean, [3.5, 2.5, 4.0])
    np.testing.assert_array_equal(std, [0.5, 1.0, 2.0])


def test_var_only_and_std_preferred_over_var():
    preds = _preds([{"var": 0.25, "was_impossible": False}, {"var": 4.0}, {"std": 3.0, "var": 1.0}])
    _, _, std = arrays_from_predictions(preds)
    np.testing.assert_allclose(std, [0.5, 2.0, 3.0])


def test_real_surprise_predictions_and_plain_tuples():
    surprise = pytest.importorskip("surprise", reason="scikit-surprise not installed")
    preds = [surprise.Prediction("u", "i", 4.0, 3.0, {"var": 1.0}), ("u", "j", 2.0, 2.5, {"std": 0.1})]
    y, mean, std = arrays_from_predictions(iter(preds))
    np.testing.assert_allclose(std, [1.0, 0.1])


def test_neither_std_nor_var_points_to_homoscedastic_baseline():
    preds = _preds([{"std": 1.0}, {"was_impossible": False}, {"std": 1.0}])
    with pytest.raises(ValueError, match=r"predictions\[1\]\.details.*HomoscedasticBaseline"):
        arrays_from_predictions(preds)


@pytest.mark.parametrize(
    "preds, match",
    [
        ([], "`predictions` must not be empty"),
        (_preds([{"std": 1.0}] * 3, r_ui=(4.0, None, 5.0)), r"predictions\[1\]\.r_ui.*got None"),
        (_preds([{"var": -1.0}] * 3), r"details\['var'\]` must be >= 0; got -1.0"),
        (_preds([{"std": -1.0}] * 3), r"`std` must be >= 0 everywhere; got -1.0"),
        (_preds([None] * 3), r"details` must hold 'std' or 'var'; got NoneType"),
        ([("u", "i", 4.0)], r"predictions\[0\]` must be a Prediction"),
        (_preds([{"std": "abc"}] * 3), r"details\['std'\]` must be a number; got 'abc' \(str\)"),
        (_preds([{"std": np.array([1.0, 2.0])}] * 3), r"details\['std'\]` must be a number; got array"),
        (_preds([{"std": None, "var": None}] * 3), r"holds 'std' / 'var' as None: the algorithm gave no uncertainty"),
    ],
)
def test_bad_predictions(preds, match):
    with pytest.raises(ValueError, match=match):
        arrays_from_predictions(preds)


def test_wrappers_match_array_functions():
    preds = _preds([{"std": 0.5}, {"var": 1.0}, {"std": 2.0}])
    arrays = arrays_from_predictions(preds)
    assert qp_curve_from_predictions(preds, quantiles=3).equals(qp_curve(*arrays, quantiles=3))
    report = uncertainty_report_from_predictions(preds)
    assert report == uncertainty_report(*arrays)
    assert report["n"] == 3 and report["sharpness"] == pytest.approx((0.5 + 1.0 + 2.0) / 3)
    assert report["rmse"] == pytest.approx(math.sqrt((0.25 + 0.25 + 1.0) / 3))
