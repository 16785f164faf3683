"""HomoscedasticBaseline: one out-of-sample residual variance for a point-estimate algorithm."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

surprise = pytest.importorskip("surprise", reason="scikit-surprise not installed")
from surprise import NMF, SVD, BaselineOnly, CoClustering, Dataset, KNNBaseline, KNNBasic, Reader, SlopeOne, SVDpp  # noqa: E402,E501
from surprise.model_selection import cross_validate, train_test_split  # noqa: E402

from mogp_surprise.comparison.homoscedastic import HomoscedasticBaseline  # noqa: E402
from mogp_surprise.evaluation import arrays_from_predictions, interval_coverage, qp_curve_from_predictions  # noqa: E402,E501


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


def test_variance_is_the_held_out_mse_of_a_copy_fitted_without_them(split):
    """Recomputed through Surprise's public API: a BaselineOnly (ALS: deterministic) fitted on the
    training ratings less the seeded 10 %, its clipped predictions of those 10 %."""
    trainset = split[0]
    fitted = HomoscedasticBaseline(BaselineOnly(verbose=False), holdout=0.1, random_state=3).fit(trainset)
    ratings = [(trainset.to_raw_uid(u), trainset.to_raw_iid(i), r) for u, i, r in trainset.all_ratings()]
    order = np.random.default_rng(3).permutation(len(ratings))
    n_out = round(0.1 * len(ratings))
    held, kept = [ratings[k] for k in order[:n_out]], [ratings[k] for k in order[n_out:]]
    part = Dataset.load_from_df(pd.DataFrame(kept, columns=["u", "i", "r"]), Reader(rating_scale=(1, 5)))
    probe = BaselineOnly(verbose=False).fit(part.build_full_trainset())
    expected = np.mean([(r - probe.predict(u, i, clip=True).est) ** 2 for u, i, r in held])
    assert fitted.var_ == pytest.approx(expected, rel=1e-9)
    assert fitted.std_ == pytest.approx(math.sqrt(fitted.var_))
    in_sample = np.mean([(r - fitted.algo.predict(u, i, clip=True).est) ** 2 for u, i, r in ratings])
    assert fitted.var_ > in_sample  # out of sample: worse than on the data it was fitted to


def test_an_over_fitting_baseline_gets_intervals_that_cover():
    """Dense ratings, an SVD with as many factors as items and no regularisation: its training residuals
    are far smaller than its test errors. The held-out variance matches the test errors."""
    rng = np.random.default_rng(1)
    n_u, n_i = 60, 40
    full = np.clip(3 + rng.normal(size=(n_u, 1)) * 0.5 + rng.normal(size=(1, n_i)) * 0.5
                   + rng.normal(size=(n_u, n_i)) * 0.8, 1, 5)
    users, items = np.nonzero(rng.uniform(size=full.shape) < 0.8)
    df = pd.DataFrame({"user": users, "item": items, "rating": full[users, items]})
    trainset, testset = train_test_split(Dataset.load_from_df(df, Reader(rating_scale=(1, 5))), test_size=0.25,
                                         random_state=0)
    algo = HomoscedasticBaseline(SVD(n_factors=40, n_epochs=200, reg_all=0.0, lr_all=0.02, random_state=0))
    algo.fit(trainset)
    y, mean, std = arrays_from_predictions(algo.test(testset))
    test_mse = float(np.mean((y - mean) ** 2))
    in_sample = np.mean([(r - algo.algo.predict(trainset.to_raw_uid(u), trainset.to_raw_iid(i)).est) ** 2
                         for u, i, r in trainset.all_ratings()])
    assert in_sample < 0.3 * test_mse  # the data set makes SVD over-fit
    assert 0.7 < algo.var_ / test_mse < 1.4
    assert 0.85 <= interval_coverage(y, mean, std, [0.9])[0.9] <= 0.95
    assert interval_coverage(y, mean, np.full_like(std, math.sqrt(in_sample)), [0.9])[0.9] < 0.2  # the old estimate


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
    mean, var = fitted.predict_dist(uid, iid)  # the mean is not clipped (one contract for every algorithm)
    assert mean == fitted.predict(uid, iid, clip=False).est and var == fitted.var_
    means, variances = fitted.predict_dist([uid, "nobody"], np.array([iid, iid]))
    assert means.shape == variances.shape == (2,) and np.all(variances == fitted.var_)
    assert means[1] == fitted.predict("nobody", iid, clip=False).est
    testset = [(trainset.to_raw_uid(u), trainset.to_raw_iid(i), r) for u, i, r in list(trainset.all_ratings())[:20]]
    np.testing.assert_allclose(fitted.predict_dist(testset)[0], [fitted.predict(u, i, clip=False).est
                                                               for u, i, _ in testset], rtol=1e-12)
    with pytest.raises(ValueError, match="`uid` and `iid` must have the same length, got 1 and 2"):
        fitted.predict_dist([uid], [iid, iid])
    with pytest.raises(ValueError, match="`uid` and `iid` must both be raw ids or both be sequences"):
        fitted.predict_dist(uid, [iid, iid])
    with pytest.raises(ValueError, match="no separate variance"):
        fitted.predict_dist(uid, iid, include_noise=False)


def test_wrapped_details_are_kept_and_impossible_training_predictions_fall_back(split):
    trainset, testset = split
    knn = KNNBasic(k=3, min_k=2, verbose=False)
    algo = HomoscedasticBaseline(knn).fit(trainset)
    pred = algo.test(testset[:5])[0]
    assert {"var", "std", "homoscedastic", "was_impossible"} <= set(pred.details)
    if not pred.details["was_impossible"]:
        assert "actual_k" in pred.details
    assert algo.var_ > 0


def test_name_repr_and_errors():
    algo = HomoscedasticBaseline(SVD())
    assert algo.name == repr(algo) == "SVD (homoscedastic)"
    with pytest.raises(ValueError, match="not fitted"):
        algo.predict("u0", 0)
    with pytest.raises(TypeError, match="`algo` must be a Surprise algorithm"):
        HomoscedasticBaseline("SVD").fit(None)
    with pytest.raises(ValueError, match=r"`holdout` must be a share of the training ratings in \(0, 1\), got 1.5"):
        HomoscedasticBaseline(SVD(), holdout=1.5).fit(None)


def test_works_with_surprise_cross_validate(data):
    algo = HomoscedasticBaseline(SVD(n_factors=2, n_epochs=5, random_state=0))
    result = cross_validate(algo, data, measures=["rmse", "mae"], cv=2, n_jobs=1)
    assert len(result["test_rmse"]) == 2 and np.all(result["test_rmse"] > 0)


@pytest.mark.parametrize("make", [lambda: BaselineOnly(verbose=False), lambda: SVDpp(n_epochs=3, random_state=0),
                                  SlopeOne, lambda: CoClustering(random_state=0), lambda: NMF(random_state=0),
                                  lambda: KNNBaseline(verbose=False)],
                         ids=["BaselineOnly", "SVDpp", "SlopeOne", "CoClustering", "NMF", "KNNBaseline"])
def test_sparse_data_where_the_holdout_takes_every_rating_of_some_users(make):
    """Held out, a user's or item's only ratings make it unknown to the copy, as at test time."""
    rng = np.random.default_rng(0)
    users = np.concatenate([np.arange(60), rng.integers(0, 20, 240)])  # users 20..59 have one rating
    df = pd.DataFrame({"user": users, "item": rng.integers(0, 30, len(users)), "rating": rng.integers(1, 6, len(users))})
    df = df.drop_duplicates(["user", "item"])
    trainset = Dataset.load_from_df(df, Reader(rating_scale=(1, 5))).build_full_trainset()
    algo = HomoscedasticBaseline(make(), holdout=0.2, random_state=0).fit(trainset)
    assert np.isfinite(algo.var_) and 0.3 < algo.var_ < 6  # ratings uniform on 1..5: variance 2, errors ~ 1.5-2.5
    mean, var = algo.predict_dist([(trainset.to_raw_uid(0), trainset.to_raw_iid(0)), ("nobody", "nothing")])
    assert np.isfinite(mean).all() and (var == algo.var_).all()
