"""The Bayesian GPLVM baseline (GPyTorch): recovery of low-rank data, its predictive, Surprise's contract."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.datasets import to_surprise_dataset

gpytorch = pytest.importorskip("gpytorch", reason="the Bayesian GPLVM needs GPyTorch (pip install -e '.[bgplvm]')")
import torch  # noqa: E402

from mogp_surprise.comparison import bgplvm as bgplvm_algo  # noqa: E402
from mogp_surprise.comparison.bgplvm import BayesianGPLVMBaseline, fit_biases  # noqa: E402

TINY = {"n_epochs": 3, "n_inducing": 8, "batch_size": 64, "n_samples": 4}


@pytest.fixture(scope="module")
def low_rank():
    """150 users x 100 items, ratings = smooth function of 2-d user and item factors + noise 0.3;
    45 % of cells observed, a seeded fifth of them held out."""
    rng = np.random.default_rng(0)
    n_users, n_items = 150, 100
    a, b = rng.standard_normal((n_users, 2)), rng.standard_normal((n_items, 2))
    truth = 3.0 + 1.2 * np.tanh(a @ b.T)
    cells = np.argwhere(rng.random((n_users, n_items)) < 0.45)
    ratings = truth[cells[:, 0], cells[:, 1]] + 0.3 * rng.standard_normal(len(cells))
    df = pd.DataFrame({"user": [f"u{u}" for u in cells[:, 0]], "item": [f"i{i}" for i in cells[:, 1]],
                       "rating": ratings})
    test = rng.random(len(df)) < 0.2
    trainset = to_surprise_dataset(df[~test], rating_scale=(0, 6)).build_full_trainset()
    return trainset, list(df[test].itertuples(index=False, name=None))


@pytest.fixture(scope="module")
def fitted(low_rank):
    trainset, _ = low_rank
    return BayesianGPLVMBaseline(latent_dim=2, n_epochs=150, batch_size=50, lr=0.05, n_inducing=24).fit(trainset)


def _rmse(algo, testset):
    mean, _ = algo.predict_dist(testset)
    return float(np.sqrt(np.mean((mean - np.array([r for *_, r in testset])) ** 2)))


def test_recovers_held_out_entries_of_low_rank_data(low_rank, fitted):
    trainset, testset = low_rank
    y = np.array([r for *_, r in testset])
    global_mean = float(np.sqrt(np.mean((y - trainset.global_mean) ** 2)))
    users = np.array([trainset.to_inner_uid(u) if trainset.knows_user(u) else -1 for u, *_ in testset])
    items = np.array([trainset.to_inner_iid(i) if trainset.knows_item(i) else -1 for _, i, _ in testset])
    u, i, r = (np.array(c) for c in zip(*trainset.all_ratings()))
    mu, b_u, b_i = fit_biases(u.astype(int), i.astype(int), r, trainset.n_users, trainset.n_items)
    biases = np.sqrt(np.mean((mu + np.where(users >= 0, b_u[users], 0) + np.where(items >= 0, b_i[items], 0) - y) ** 2))
    gplvm = _rmse(fitted, testset)
    # the global mean is ~0.95 off, the bias baseline ~0.85; the truth is 0.3 off
    assert gplvm < 0.5 * global_mean and gplvm < 0.6 * biases, (gplvm, biases, global_mean)
    _, var = fitted.predict_dist(testset)
    z = np.abs(fitted.predict_dist(testset)[0] - y) / np.sqrt(var)
    assert 0.8 <= np.mean(z < 1.645) <= 0.98  # 90 % intervals cover about 90 %


def test_pair_predictive_equals_gpytorchs(low_rank):
    """The per-pair predictive at a fixed latent point is GPyTorch's own ``model(x)`` marginal."""
    trainset, _ = low_rank
    algo = BayesianGPLVMBaseline(latent_dim=2, **TINY)
    captured = {}
    original = bgplvm_algo.BayesianGPLVMBaseline._freeze

    def keep(self, model, likelihood, gen):
        original(self, model, likelihood, gen)
        captured["model"] = model

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bgplvm_algo.BayesianGPLVMBaseline, "_freeze", keep)
        algo.fit(trainset)
    model = captured["model"]
    x = torch.randn(7, 2, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(x)  # batch over items: (n_items, 7)
        items = torch.arange(trainset.n_items).repeat_interleave(7)
        mean, var = algo.latent_moments(x.repeat(trainset.n_items, 1), items)
    np.testing.assert_allclose(mean.reshape(trainset.n_items, 7), ref.mean, rtol=0, atol=2e-5)
    np.testing.assert_allclose(var.reshape(trainset.n_items, 7), ref.variance, rtol=0, atol=2e-5)


def test_unknown_users_and_items_get_the_prior(low_rank, fitted):
    trainset, testset = low_rank
    known_u, known_i = testset[0][0], testset[0][1]
    mean, var = fitted.predict_dist([(known_u, known_i), ("nobody", known_i), (known_u, "nothing"),
                                     ("nobody", "nothing")])
    assert np.all(np.isfinite(mean)) and var[1] > var[0] and var[2] > var[0]
    assert mean[3] == pytest.approx(trainset.global_mean, abs=0.05)  # no biases, GP prior mean ~0
    pred = fitted.predict("nobody", known_i)
    assert pred.details["unknown_user"] and not pred.details["was_impossible"]
    assert pred.details["std"] == pytest.approx(np.sqrt(var[1]))


def test_predictions_do_not_depend_on_the_batch_and_test_equals_predict(low_rank, fitted):
    _, testset = low_rank
    mean, var = fitted.predict_dist(testset)
    mean_one, var_one = fitted.predict_dist(testset[5:6])
    assert mean_one[0] == pytest.approx(mean[5], abs=1e-5) and var_one[0] == pytest.approx(var[5], abs=1e-5)
    pred = fitted.test(testset[:10])
    single = [fitted.predict(u, i, r) for u, i, r in testset[:10]]
    np.testing.assert_allclose([p.est for p in pred], [p.est for p in single], atol=1e-5)
    np.testing.assert_allclose([p.details["var"] for p in pred], [p.details["var"] for p in single], atol=1e-5)


def test_fit_is_seeded_and_leaves_the_global_generator_alone(low_rank):
    trainset, testset = low_rank
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = BayesianGPLVMBaseline(latent_dim=2, **TINY).fit(trainset).predict_dist(testset)
    after = torch.rand(1)
    second = BayesianGPLVMBaseline(latent_dim=2, **TINY).fit(trainset).predict_dist(testset)
    assert before == after
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


def test_survives_pickling(low_rank, fitted):
    _, testset = low_rank
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.predict_dist(testset[:20])[0], fitted.predict_dist(testset[:20])[0])


def test_cross_validate_smoke(synthetic_data):
    from surprise.model_selection import KFold, cross_validate

    from tests.conftest import constant_rmse

    out = cross_validate(BayesianGPLVMBaseline(**TINY), synthetic_data, measures=["rmse"], cv=KFold(2, random_state=0))
    assert len(out["test_rmse"]) == 2
    assert np.all(out["test_rmse"] < 0.98 * constant_rmse(synthetic_data, KFold(2, random_state=0)))


@pytest.mark.parametrize("name, value", [("latent_dim", 0), ("n_epochs", 1.5), ("batch_size", True),
                                         ("n_samples", -1), ("lr", 0.0), ("lr", float("nan"))])
def test_bad_hyper_parameters_are_named(low_rank, name, value):
    with pytest.raises(ValueError, match=re.escape(f"`{name}`")):
        BayesianGPLVMBaseline(**{name: value}).fit(low_rank[0])


def test_random_state_takes_what_surprise_takes(low_rank):
    trainset, testset = low_rank
    for state in (None, np.random.RandomState(0), np.int64(3)):
        assert np.all(np.isfinite(BayesianGPLVMBaseline(random_state=state, **TINY).fit(trainset)
                                  .predict_dist(testset[:5])[0]))
    with pytest.raises(ValueError, match="`random_state`"):
        BayesianGPLVMBaseline(random_state="seed", **TINY).fit(trainset)
    BayesianGPLVMBaseline(lr=np.float32(0.01), **TINY).fit(trainset)


def test_a_diverging_fit_is_a_clear_error(low_rank):
    with pytest.raises(ValueError, match="diverged.*lower `lr`"):
        BayesianGPLVMBaseline(lr=1e6, **TINY).fit(low_rank[0])


def test_repeated_ratings_of_one_pair_enter_as_their_mean(monkeypatch):
    """Surprise keeps both ratings of a repeated (user, item) pair: the GP's cell is their mean
    residual (not the sum)."""
    rng = np.random.default_rng(1)
    rows = [(f"u{u}", f"i{i}", float(rng.integers(1, 6))) for u in range(20) for i in range(15) if rng.random() < 0.5]
    df = pd.DataFrame(rows + [("u0", "i_x", 2.0), ("u0", "i_x", 5.0)], columns=["user", "item", "rating"])
    trainset = to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset()
    seen = {}
    original = bgplvm_algo.pca_init
    monkeypatch.setattr(bgplvm_algo, "pca_init", lambda table, *a: seen.setdefault("t", table) is not None
                        and original(table, *a))
    algo = BayesianGPLVMBaseline(latent_dim=2, **TINY).fit(trainset)
    u, i = trainset.to_inner_uid("u0"), trainset.to_inner_iid("i_x")
    expected = 3.5 - algo.global_mean_ - algo.user_bias_[u] - algo.item_bias_[i]
    assert seen["t"][u, i] == pytest.approx(expected) and seen["t"].nnz == len(df) - 1


def test_missing_gpytorch_names_the_install_command(monkeypatch, low_rank):
    monkeypatch.setattr(bgplvm_algo, "gpytorch_available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[bgplvm]'")):
        BayesianGPLVMBaseline().fit(low_rank[0])


def test_unfitted_predict_dist_says_so():
    from mogp_surprise.core.errors import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted"):
        BayesianGPLVMBaseline().predict_dist([("u", "i")])
