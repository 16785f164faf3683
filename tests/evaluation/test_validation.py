"""Bad input raises ValueError naming the argument, the rule and the value."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mogp_surprise import evaluation as E

Y, MEAN, STD = [1.0, 2.0, 3.0], [1.5, 2.0, 2.5], [0.5, 1.0, 1.5]

BAD_INPUTS = [
    ("length mismatch", lambda: E.rmse(Y, MEAN[:2]), r"same length; got \{'y': 3, 'mean': 2\}"),
    ("std length", lambda: E.gaussian_nll(Y, MEAN, STD[:1]), r"same length.*'std': 1"),
    ("NaN in y", lambda: E.mae([1.0, np.nan], [1.0, 2.0]), r"`y` must be finite.*nan at position 1"),
    ("inf in mean", lambda: E.rmse([1.0], [np.inf]), r"`mean` must be finite.*inf"),
    ("negative std", lambda: E.interval_coverage(Y, MEAN, [0.5, -1.0, 1.0]),
     r"`std` must be >= 0 everywhere; got -1.0 at position 1"),
    ("zero std nll", lambda: E.gaussian_nll(Y, MEAN, [0.5, 0.0, 1.0]), r"`std` must be > 0.*got 0.0"),
    ("zero std crps", lambda: E.crps_gaussian(Y, MEAN, [0.0, 1.0, 1.0]), r"`std` must be > 0.*got 0.0"),
    ("negative sharpness", lambda: E.sharpness([-0.1]), r"`std` must be >= 0.*-0.1"),
    ("empty arrays", lambda: E.rmse([], []), r"`y` must not be empty"),
    ("empty qp", lambda: E.qp_curve([], [], []), r"`y_true` must not be empty"),
    ("2-D", lambda: E.rmse(np.ones((2, 2)), np.ones((2, 2))), r"`y` must be 1-D; got .*\(2, 2\)"),
    ("not numbers", lambda: E.rmse(["a", "b"], [1.0, 2.0]), r"`y` must hold numbers, not strings or bools; got 'a'"),
    ("bools", lambda: E.rmse([True, False], [1.0, 2.0]), r"`y` must hold numbers, not strings or bools; got True"),
    ("number strings", lambda: E.rmse(np.array(["4", "5"]), [1.0, 2.0]), r"`y` must hold numbers.*got np.str_"),
    ("None rating", lambda: E.rmse([1.0, None], [1.0, 2.0]), r"`y` must be finite"),
    ("unknown metric", lambda: E.qp_curve(Y, MEAN, STD, metrics=("rmse", "ndcg")),
     r"`metrics` entries must be one of \['mae', 'rmse'\].*got 'ndcg'"),
    ("no metric", lambda: E.qp_curve(Y, MEAN, STD, metrics=()), r"`metrics` must name at least one"),
    ("quantile 0", lambda: E.qp_curve(Y, MEAN, STD, quantiles=[0.0, 1.0]),
     r"`quantiles` must lie in \(0, 1\]; got \[0.0\]"),
    ("quantile > 1", lambda: E.qp_curve(Y, MEAN, STD, quantiles=[0.5, 1.5]), r"\(0, 1\]; got \[1.5\]"),
    ("quantile NaN", lambda: E.qp_curve(Y, MEAN, STD, quantiles=[np.nan]), r"`quantiles` must be finite"),
    ("quantiles empty", lambda: E.qp_curve(Y, MEAN, STD, quantiles=[]), r"`quantiles` must not be empty"),
    ("quantiles int 0", lambda: E.qp_curve(Y, MEAN, STD, quantiles=0), r"as an int must be >= 1; got 0"),
    ("quantiles bool", lambda: E.qp_curve(Y, MEAN, STD, quantiles=True), r"`quantiles`.*got True"),
    ("coverage level", lambda: E.interval_coverage(Y, MEAN, STD, levels=(0.5, 1.2)),
     r"`levels` must lie in \(0, 1\]; got \[1.2\]"),
    ("calibration level", lambda: E.calibration_curve(Y, MEAN, STD, levels=[-0.1]),
     r"`levels` must lie in \(0, 1\]; got \[-0.1\]"),
    ("summary at", lambda: E.qp_summary(E.qp_curve(Y, MEAN, STD, 2), at=(1.0, 2.0)),
     r"`at` must lie in \(0, 1\]; got \[2.0\]"),
    ("metric name case", lambda: E.register_metric("NDCG", E.rmse), r"`name` must be a non-empty lower-case"),
    ("metric callable", lambda: E.register_metric("ndcg", 3), r"`func` must be callable"),
]


@pytest.mark.parametrize("call, match", [case[1:] for case in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_evaluation_import_is_light():
    """The evaluation layer must not pull in torch, surprise or matplotlib."""
    code = (
        "import sys, mogp_surprise.evaluation\n"
        "bad = [m for m in ('torch', 'surprise', 'matplotlib', 'sklearn') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
