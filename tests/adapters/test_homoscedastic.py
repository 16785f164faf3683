"""HomoscedasticBaseline: one training residual variance for a point-estimate algorithm."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

surprise = pytest.importorskip("surprise", reason="scikit-surprise not installed")
from surprise import SVD, Dataset, KNNBasic, Reader  # noqa: E402
from surprise.model_selection import cross_validate, train_test_split  # noqa: E402

from mogp_surprise.adapters.homoscedastic import HomoscedasticBaseline  # noqa: E402
from mogp_surprise.evaluation import arrays_from_predictions, qp_curve_from_predictions  # noqa: E402


@pytest.fixture(scope="module")
def data():
    """40 users x 25 items, rank-2 ratings on a 1-5 scale, about 60% observed."""
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(40, 2)), rng.normal(size=(25, 2))
    full = np.clip(np.rint(3 + u @ v.T + 0.5 * rng.normal(size=(40, 25))), 1, 5)
    users, items = np.nonzero(rng.uniform(size=full.shape) < 0.6)
    df = pd.DataFrame({"user": [f"u{k}" for k in users], "item": items, "rating": full[users, items]})
    return Dataset.load_from_df(df, Reader(rating_scale=(1, 5)))


@pytest.fixture(scope="module")
def split(data):
    return train_test_split(data, test_size=0.25, random_state=0)


@pytest.fixture(scope="module")
def fitted(split):
    return HomoscedasticBaseline(SVD(n_factors=2, n_epochs=10, random_state=0)).fit(split[0])


def test_variance_is_mean_squared_training_residual_of_clipped_predict(fitted, split):
    trainset = split[0]
    residuals = [
        r - fitted.algo.predict(trainset.to_raw_uid(u), trainset.to_raw_iid(i), clip=True).est
        for u, i, r in trainset.all_ratings()
    ]
    assert fitted.var_ == pytest.approx(np.mean(np.square(residuals)), rel=1e-12)
    assert fitted.std_ == pytest.approx(math.sqrt(fitted.var_))
    assert 0 < fitted.var_ < 2


def test_test_returns_wrapped_predictions_with_variance(fitted, split):
    _, testset = split
    preds = fitted.test(testset)
    plain = fitted.algo.test(testset)
    assert [p.est for p in preds] == [p.est for p in plain]
    assert [p[:3] for p in preds] == [p[:3] for p in plain]
    for p in preds:
        assert p.details["var"] == fitted.var_ and p.details["std"] == fitted.std_
        assert p.details["homoscedastic"] is True and "was_impossible" in p.details
    y, mean, std = arrays_from_predictions(preds)
    assert np.all(std == fitted.std_)
    curve = qp_curve_from_predictions(preds, quantiles=4)
    assert curve["std_threshold"].nunique() == 1


def test_unknown_ids_get_the_same_variance(fitted, split):
    pred = fitted.predict("nobody", 10_000, r_ui=3.0)
    assert pred.est == pytest.approx(split[0].global_mean)  # SVD's own fallback, not impossible
    assert pred.details["var"] == fitted.var_
    knn = HomoscedasticBaseline(KNNBasic(verbose=False)).fit(split[0])
    pred = knn.predict("nobody", 10_000, r_ui=3.0)
    assert pred.details["was_impossible"] is True
    assert pred.est == knn.algo.default_prediction() == knn.default_prediction()
    assert pred.details["var"] == knn.var_


def test_estimate_and_predict_dist(fitted, split):
    trainset = split[0]
    est, details = fitted.estimate(0, 0)
    assert est == pytest.approx(fitted.algo.estimate(0, 0))
    assert details == {"var": fitted.var_, "std": fitted.std_, "homoscedastic": True}
    uid, iid = trainset.to_raw_uid(0), trainset.to_raw_iid(0)
    mean, var = fitted.predict_dist(uid, iid)
    assert mean == fitted.predict(uid, iid).est and var == fitted.var_
    means, variances = fitted.predict_dist([uid, "nobody"], np.array([iid, iid]))
    assert means.shape == variances.shape == (2,) and np.all(variances == fitted.var_)
    with pytest.raises(ValueError, match="`uid` and `iid` must both be"):
        fitted.predict_dist([uid], [iid, iid])


def test_wrapped_details_are_kept_and_impossible_training_predictions_fall_back(split):
    trainset, testset = split
    knn = KNNBasic(k=3, min_k=2, verbose=False)
    algo = HomoscedasticBaseline(knn).fit(trainset)
    pred = algo.test(testset[:5])[0]
    assert {"var", "std", "homoscedastic", "was_impossible"} <= set(pred.details)
    if not pred.details["was_impossible"]:
        assert "actual_k" in pred.details
    expected = [
        r - knn.predict(trainset.to_raw_uid(u), trainset.to_raw_iid(i), clip=True).est
        for u, i, r in trainset.all_ratings()
    ]
    assert algo.var_ == pytest.approx(np.mean(np.square(expected)))


def test_name_repr_and_errors():
    algo = HomoscedasticBaseline(SVD())
    assert algo.name == repr(algo) == "SVD (homoscedastic)"
    with pytest.raises(ValueError, match="not fitted"):
        algo.predict("u0", 0)
    with pytest.raises(TypeError, match="`algo` must be a Surprise algorithm"):
        HomoscedasticBaseline("SVD").fit(None)


def test_works_with_surprise_cross_validate(data):
    algo = HomoscedasticBaseline(SVD(n_factors=2, n_epochs=5, random_state=0))
    result = cross_validate(algo, data, measures=["rmse", "mae"], cv=2, n_jobs=1)
    assert len(result["test_rmse"]) == 2 and np.all(result["test_rmse"] > 0)
