"""The scikit-learn adapter: estimator checks, DataFrame/ndarray input, pipelines, persistence."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from mogp_surprise import MWGP, MWGPRegressor
from tests.conftest import FAST, ON_CPU

TINY = {"n_epochs": 2, "n_inducing": 8, "batch_size": 64, "random_state": 0}
#: none on the CPU: every scikit-learn check passes. On a GPU (``device="auto"`` trains there) two fits from
#: one seed differ in the last float32 digits: CUDA's atomic additions sum in no fixed order.
EXPECTED_FAILED_CHECKS: dict[str, str] = {} if not torch.cuda.is_available() else {
    "check_fit_idempotent": "GPU training is not bit-reproducible (CUDA's atomic additions)"}


@parametrize_with_checks([MWGPRegressor()], expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_sklearn_estimator_checks(estimator, check):
    """Every scikit-learn check on the *default* estimator (the one users construct)."""
    check(estimator)


def test_predictions_do_not_depend_on_the_batch():
    """A prediction is the same whether computed with all rows, in chunks of 10 or alone (float64
    round-off): scikit-learn's ``check_methods_subset_invariance`` must not depend on the data."""
    rng = np.random.default_rng(0)
    X = np.stack([rng.integers(0, 40, 500), rng.integers(0, 60, 500)], axis=1)
    y = rng.normal(3.0, 1.0, 500)
    est = MWGPRegressor(random_state=0, **ON_CPU).fit(X, y)  # a GPU's float32 kernels depend on the batch's shape
    X_new = np.vstack([X, [[1000, 1], [2, 1000], [1000, 1000]]])  # with every unseen pattern
    mean, std = est.predict(X_new, return_std=True)
    chunks = [est.predict(X_new[k:k + 10], return_std=True) for k in range(0, len(X_new), 10)]
    np.testing.assert_allclose(np.concatenate([c[0] for c in chunks]), mean, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.concatenate([c[1] for c in chunks]), std, rtol=1e-12, atol=0)
    alone = np.array([est.predict(X_new[k:k + 1])[0] for k in range(0, len(X_new), 37)])
    np.testing.assert_allclose(alone, mean[::37], rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def xy(synthetic_df):
    X = synthetic_df[["user", "item"]]
    return train_test_split(X, synthetic_df["rating"], test_size=0.2, random_state=0)


@pytest.fixture(scope="module")
def fitted(xy):
    X_train, _, y_train, _ = xy
    return MWGPRegressor(**FAST).fit(X_train, y_train)


def test_same_hyper_parameters_as_surprise_adapter():
    assert MWGPRegressor().get_params() == {k: getattr(MWGP(), k) for k in MWGPRegressor().get_params()}
    assert set(MWGPRegressor().get_params()) == set(MWGP()._hyper_params())


def test_predict_std_and_dist_agree(fitted, xy):
    _, X_test, _, y_test = xy
    mean, std = fitted.predict(X_test, return_std=True)
    m2, var = fitted.predict_dist(X_test)
    np.testing.assert_array_equal(mean, m2)
    np.testing.assert_allclose(std ** 2, var, rtol=1e-12)
    np.testing.assert_array_equal(fitted.predict(X_test), mean)
    assert mean.shape == std.shape == (len(X_test),) and np.all(std > 0)
    rmse = np.sqrt(np.mean((mean - y_test.to_numpy()) ** 2))
    assert rmse < np.std(y_test.to_numpy())  # better than predicting the mean


def test_dataframe_and_ndarray_inputs_agree(fitted, xy):
    _, X_test, _, _ = xy
    from_df = fitted.predict(X_test)
    from_array = fitted.predict(X_test.to_numpy())
    np.testing.assert_array_equal(from_df, from_array)
    assert list(fitted.feature_names_in_) == ["user", "item"]
    with pytest.raises(ValueError, match="fitted with columns"):
        fitted.predict(X_test.rename(columns={"user": "u"}))
    with pytest.raises(ValueError, match="expecting 2 features"):
        fitted.predict(X_test.assign(extra=1))


def test_integer_ids_and_unseen_ids(synthetic_df):
    X = np.column_stack([synthetic_df["user"].str[1:].astype(int), synthetic_df["item"].str[1:].astype(int)])
    est = MWGPRegressor(**FAST).fit(X, synthetic_df["rating"].to_numpy())
    _, std_known = est.predict(X[:200], return_std=True)
    _, std_new = est.predict(np.column_stack([np.full(200, 10 ** 9), X[:200, 1]]), return_std=True)
    assert std_new.mean() > std_known.mean()


def test_context_column(synthetic_df):
    X = synthetic_df[["user", "item"]].assign(context=np.arange(len(synthetic_df)) % 3)
    est = MWGPRegressor(**FAST).fit(X, synthetic_df["rating"])
    assert est.posterior_.n_factors == 3 and est.n_features_in_ == 3
    assert np.isfinite(est.predict(X.iloc[:10])).all()


def test_not_fitted():
    with pytest.raises(NotFittedError):
        MWGPRegressor().predict([["u", "i"]])


def test_clone_pipeline_and_grid_search(xy):
    X_train, X_test, y_train, _ = xy
    pipe = make_pipeline(ColumnTransformer([("ids", "passthrough", ["user", "item"])]), MWGPRegressor(**TINY))
    assert clone(pipe).get_params()["mwgpregressor__n_inducing"] == 8
    gs = GridSearchCV(pipe, {"mwgpregressor__n_inducing": [4, 8], "mwgpregressor__latent_dim": [2, 3]}, cv=2)
    gs.fit(X_train, y_train)
    assert gs.best_params_["mwgpregressor__n_inducing"] in (4, 8)
    assert gs.predict(X_test).shape == (len(X_test),)


def test_pickle_round_trip(fitted, xy):
    _, X_test, _, _ = xy
    again = pickle.loads(pickle.dumps(fitted))
    for a, b in zip(fitted.predict(X_test, return_std=True), again.predict(X_test, return_std=True)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("X, y, error, match", [
    ([["u", "i"], ["v", "j"]], [1.0], ValueError, "inconsistent lengths"),
    ([["u"], ["v"]], [1.0, 2.0], ValueError, "1 feature"),
    ([["u", "i"], ["v", "j"]], [1.0, np.nan], ValueError, "finite"),
    ([["u", "i"], ["v", "j"]], ["a", "b"], ValueError, "numeric"),
    ([["u", "i"], [None, "j"]], [1.0, 2.0], ValueError, "None"),
    ([["u", "i"]], [1.0], ValueError, "at least 2 ratings"),
])
def test_bad_input(X, y, error, match):
    with pytest.raises(error, match=match):
        MWGPRegressor(**TINY).fit(X, y)


def test_mixed_int_and_str_ids_are_distinct_labels():
    """Ids are labels matched by value and type (as in Surprise): a column may mix ints and strings; one
    that holds both 3 and "3" is warned about, since that is usually a mix-up."""
    import warnings

    X = pd.DataFrame({"user": ["u", 3, "u", 4], "item": ["i", "j", "j", "i"]})
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*holds both")
        est = MWGPRegressor(**TINY).fit(X, [1.0, 2.0, 3.0, 4.0])
    assert est.encoders_[0].n_levels == 3
    with pytest.warns(UserWarning, match=r"id column 'user' holds both 3 and '3'.*two different levels"):
        MWGPRegressor(**TINY).fit(pd.DataFrame({"user": ["3", 3, 4], "item": ["i", "j", "i"]}), [1.0, 2.0, 3.0])


def test_str_ids_for_an_int_trained_model_warn_once():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"user": rng.integers(0, 20, 300), "item": rng.integers(0, 30, 300)})
    est = MWGPRegressor(**TINY).fit(X, rng.normal(size=300))
    with pytest.warns(UserWarning, match=r"user id '\d+' \(str\) is not in the training data, but \d+ \(int\) is") as record:
        cold = est.predict(X.astype(str).head(3))
    assert {w.filename for w in record} == {__file__}  # the warning points at the user's call
    assert not np.allclose(cold, est.predict(X.head(3)))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.predict(X.assign(user=X["user"].astype(str)).head(3))  # users already warned about


def test_a_checkpointed_fit_resumes_to_the_uninterrupted_model(tmp_path, monkeypatch):
    """``fit(X, y, checkpoint=...)`` as ``MWGP.fit``: a fit stopped after its second checkpoint and resumed from it
    equals one never stopped (string ids, early stopping's epoch choice on: its phase is in the checkpoint)."""
    from mogp_surprise.core import trainer

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"user": [f"u{k}" for k in rng.integers(0, 60, 1500)],
                      "item": [f"i{k}" for k in rng.integers(0, 40, 1500)]})
    y = rng.integers(1, 6, 1500).astype(float)
    params = {"n_epochs": 4, "n_inducing": 8, "random_state": 0, "early_stopping": True, **ON_CPU}
    whole = MWGPRegressor(**params).fit(X, y)
    path = tmp_path / "fit.ckpt"
    original, saves = trainer._Saver.save, []

    def save_then_stop(self, *args, **kwargs):
        original(self, *args, **kwargs)
        saves.append(1)
        if len(saves) == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(trainer._Saver, "save", save_then_stop)
        with pytest.raises(KeyboardInterrupt):
            MWGPRegressor(**params).fit(X, y, checkpoint=path)
    resumed = MWGPRegressor(**params).fit(X, y, checkpoint=path, resume=True)
    np.testing.assert_array_equal(resumed.predict(X, return_std=True), whole.predict(X, return_std=True))
    assert resumed.loss_history_ == whole.loss_history_
    with pytest.raises(ValueError, match="resume=True needs the checkpoint file"):
        MWGPRegressor(**params).fit(X, y, resume=True)
