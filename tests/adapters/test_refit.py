"""A refit that fails (a diverged fit, an interrupt, a checkpoint of other data) leaves the fitted model whole."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from mogp_surprise import MWGP, MWGPRegressor
from mogp_surprise.adapters import sklearn_estimator, surprise_algo
from mogp_surprise.core.errors import NumericalError
from mogp_surprise.datasets import to_surprise_dataset
from tests.conftest import FAST


def _other_users(df: pd.DataFrame) -> pd.DataFrame:
    """The same ratings by other users (new ids): a refit on them maps ids to rows the old posterior lacks."""
    return df.assign(user=df["user"].astype(str) + "-other").iloc[: len(df) // 2]


@pytest.mark.parametrize("failure", [NumericalError("the fit diverged"), KeyboardInterrupt()])
def test_a_failed_refit_keeps_the_model_as_it_was(synthetic_df, monkeypatch, failure):
    df = synthetic_df
    other = _other_users(df)
    algo = MWGP(**FAST).fit(to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset())
    est = MWGPRegressor(**FAST).fit(df[["user", "item"]], df["rating"])
    pairs = df[["user", "item"]].head(20)
    before = ([algo.predict(u, i).est for u, i in pairs.itertuples(index=False)], est.predict(pairs))
    fitted = {"algo": dict(algo.__dict__), "est": dict(est.__dict__)}

    def fail(*args, **kwargs):
        raise failure

    for module in (surprise_algo, sklearn_estimator):
        monkeypatch.setattr(module, "fit_mwgp", fail)
    with pytest.raises(type(failure)):
        algo.fit(to_surprise_dataset(other, rating_scale=(1, 5)).build_full_trainset())
    with pytest.raises(type(failure)):
        est.fit(other[["user", "item"]], other["rating"])
    for name, model in (("algo", algo), ("est", est)):
        assert {k: v for k, v in model.__dict__.items() if not k.startswith("_")} == \
            {k: v for k, v in fitted[name].items() if not k.startswith("_")}
    assert [algo.predict(u, i).est for u, i in pairs.itertuples(index=False)] == before[0]
    np.testing.assert_array_equal(est.predict(pairs), before[1])
    user = other["user"].iloc[0]  # a user of the failed refit's data: unknown, as before it
    assert algo.predict(user, other["item"].iloc[0]).details["unknown_user"]


def test_fit_time_counts_the_whole_fit(synthetic_df, monkeypatch):
    """``fit_time_`` is the time spent in ``fit``: reading the ids and ratings included, not the training alone."""
    df = synthetic_df
    for module in (surprise_algo, sklearn_estimator):
        real = module.fit_mwgp

        def slow_ids(*args, real=real, **kwargs):
            result = real(*args, **kwargs)
            result.fit_time = 0.0  # the training's own clock says nothing of the rest
            return result
        monkeypatch.setattr(module, "fit_mwgp", slow_ids)
    started = time.perf_counter()
    algo = MWGP(**FAST).fit(to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset())
    est = MWGPRegressor(**FAST).fit(df[["user", "item"]], df["rating"])
    elapsed = time.perf_counter() - started
    assert 0 < algo.fit_time_ and 0 < est.fit_time_ and algo.fit_time_ + est.fit_time_ <= elapsed


@pytest.mark.parametrize("kwargs, error", [({"distributed": "no"}, "`distributed` must be True or False, got 'no'"),
                                           ({"resume": "no", "checkpoint": "c.pt"}, "`resume` must be True or False")])
def test_fit_options_of_another_type_are_refused(synthetic_data, kwargs, error):
    with pytest.raises(ValueError, match=error):
        MWGP(**FAST).fit(synthetic_data.build_full_trainset(), **kwargs)
