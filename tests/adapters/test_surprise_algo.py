"""The Surprise adapter: AlgoBase contract, batched paths, model selection, persistence."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from surprise import BaselineOnly, SVD, Prediction, dump
from surprise.model_selection import GridSearchCV, KFold, cross_validate, train_test_split

from mogp_surprise import MWGP
from mogp_surprise.core.errors import NotFittedError
from tests.conftest import FAST


@pytest.fixture(scope="module")
def split(synthetic_data):
    return train_test_split(synthetic_data, test_size=0.2, random_state=0)


@pytest.fixture(scope="module")
def fitted(split):
    trainset, _ = split
    return MWGP(**FAST).fit(trainset)


def test_hyper_parameters_are_stored_unchanged():
    algo = MWGP(n_inducing=64, latent_dim=4, lr=0.1)
    assert (algo.n_inducing, algo.latent_dim, algo.lr) == (64, 4, 0.1)
    assert algo.n_epochs == MWGP().n_epochs
    assert "n_inducing=64" in repr(algo)
    with pytest.raises(TypeError, match="n_inducng"):
        MWGP(n_inducng=3)


def test_invalid_hyper_parameter_fails_at_fit_naming_it(split):
    with pytest.raises(ValueError, match="n_inducing"):
        MWGP(n_inducing=0).fit(split[0])


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError, match="not fitted"):
        MWGP().predict_dist("u1", "i1")


def test_test_equals_per_pair_predict(fitted, split):
    _, testset = split
    testset = testset[:200] + [("never-seen-user", testset[0][1], 3.0), (testset[0][0], "never-seen-item", 4.0)]
    batched = fitted.test(testset)
    single = [fitted.predict(uid, iid, r) for uid, iid, r in testset]
    assert len(batched) == len(testset)
    for b, s, (uid, iid, r) in zip(batched, single, testset):
        assert isinstance(b, Prediction)
        assert (b.uid, b.iid, b.r_ui) == (uid, iid, r)
        assert b.est == pytest.approx(s.est, rel=1e-5)
        assert set(b.details) == set(s.details) == {"var", "std", "was_impossible"}
        assert b.details["was_impossible"] is False and s.details["was_impossible"] is False
        assert b.details["var"] == pytest.approx(s.details["var"], rel=1e-5)
        assert b.details["std"] == pytest.approx(np.sqrt(b.details["var"]))
        assert 1.0 <= b.est <= 5.0 and isinstance(b.est, float)


def test_unknown_ids_get_cold_start_not_impossible(split):
    trainset, testset = split
    fitted = MWGP(**{**FAST, "n_epochs": 30}).fit(trainset)  # trained enough to know its known users
    known = fitted.test(testset[:300])
    cold = fitted.test([("nobody", iid, r) for _, iid, r in testset[:300]])
    assert all(not p.details["was_impossible"] for p in cold)
    assert np.mean([p.details["std"] for p in cold]) > np.mean([p.details["std"] for p in known])
    both = fitted.predict("nobody", "nothing")
    assert both.details["was_impossible"] is False and np.isfinite(both.est)


def test_predict_dist_forms(fitted, split):
    trainset, testset = split
    uid, iid, _ = testset[0]
    mean, var = fitted.predict_dist(uid, iid)
    assert isinstance(mean, float) and var > 0
    pred = fitted.predict(uid, iid)
    assert pred.details["var"] == pytest.approx(var, rel=1e-5)
    means, variances = fitted.predict_dist([t[0] for t in testset[:10]], [t[1] for t in testset[:10]])
    assert means.shape == variances.shape == (10,)
    m2, v2 = fitted.predict_dist(testset[:10])
    np.testing.assert_allclose(m2, means)
    np.testing.assert_allclose(v2, variances)
    _, latent = fitted.predict_dist(testset[:10], include_noise=False)
    post = fitted.posterior_
    index = torch.as_tensor(np.array([[trainset.to_inner_uid(u), trainset.to_inner_iid(i)]
                                      for u, i, _ in testset[:10]]))
    noise = post.noise_var_at(index).double().numpy() * post.rating_std ** 2  # per user and item
    np.testing.assert_allclose(variances - latent, noise, rtol=1e-4)
    assert np.ptp(noise) > 0.01 * noise.mean()
    with pytest.raises(ValueError, match="same length"):
        fitted.predict_dist(["a", "b"], ["c"])


def test_fit_rebuilds_from_scratch(synthetic_data, split):
    algo = MWGP(**FAST)
    algo.fit(split[0])
    first = algo.test(split[1][:20])
    small = synthetic_data.build_full_trainset()
    algo.fit(small)
    assert algo.posterior_.n_levels == (small.n_users, small.n_items)
    algo.fit(split[0])
    again = algo.test(split[1][:20])
    assert [p.est for p in first] == [p.est for p in again]


def test_pickle_and_surprise_dump_round_trip(fitted, split, tmp_path):
    _, testset = split
    before = fitted.test(testset)
    clone = pickle.loads(pickle.dumps(fitted))
    assert [(p.est, p.details["var"]) for p in clone.test(testset)] == [(p.est, p.details["var"]) for p in before]
    path = tmp_path / "mwgp.dump"
    dump.dump(str(path), algo=fitted)
    _, loaded = dump.load(str(path))
    assert [p.est for p in loaded.test(testset)] == [p.est for p in before]


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_cross_validate(synthetic_data, n_jobs):
    res = cross_validate(MWGP(**FAST), synthetic_data, measures=["rmse", "mae"], cv=KFold(3, random_state=0),
                         n_jobs=n_jobs)
    assert res["test_rmse"].shape == (3,) and np.all(res["test_rmse"] < 1.5)


def test_grid_search(synthetic_data):
    gs = GridSearchCV(MWGP, {"n_inducing": [8, 16], "latent_dim": [2], "n_epochs": [2], "random_state": [0]},
                      measures=["rmse"], cv=2)
    gs.fit(synthetic_data)
    assert gs.best_params["rmse"]["n_inducing"] in (8, 16)
    assert isinstance(gs.best_estimator["rmse"], MWGP)


@pytest.mark.data
def test_short_fit_beats_baseline_only_on_ml100k(ml100k):
    trainset, testset = train_test_split(ml100k, test_size=0.2, random_state=0)
    ours = MWGP(n_epochs=8, random_state=0).fit(trainset).test(testset)
    base = BaselineOnly(verbose=False).fit(trainset).test(testset)

    def rmse(preds):
        return float(np.sqrt(np.mean([(p.est - p.r_ui) ** 2 for p in preds])))
    assert rmse(ours) < rmse(base) - 0.005


@pytest.mark.data
@pytest.mark.slow
def test_default_fit_beats_svd_in_3_fold_cv_on_ml100k(ml100k):
    folds = KFold(3, random_state=0)
    ours = cross_validate(MWGP(random_state=0), ml100k, measures=["rmse"], cv=folds)
    svd = cross_validate(SVD(random_state=0), ml100k, measures=["rmse"], cv=folds)
    assert ours["test_rmse"].mean() < svd["test_rmse"].mean() - 0.005
