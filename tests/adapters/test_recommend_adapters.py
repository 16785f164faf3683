"""recommend / recommend_many on both adapters, and honest cold start on synthetic data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mogp_surprise import MWGP, MWGPRegressor
from mogp_surprise.datasets import make_synthetic_ratings, to_surprise_dataset
from tests.conftest import FAST


@pytest.fixture(scope="module")
def fitted_pair(synthetic_df):
    ts = to_surprise_dataset(synthetic_df[["user", "item", "rating"]], rating_scale=(1, 5)).build_full_trainset()
    return MWGP(**FAST).fit(ts), MWGPRegressor(**FAST).fit(synthetic_df[["user", "item"]], synthetic_df["rating"])


def test_surprise_recommend_excludes_rated_and_matches_predict_dist(fitted_pair):
    algo, _ = fitted_pair
    ts = algo.trainset
    uid = ts.to_raw_uid(0)
    rated = {ts.to_raw_iid(i) for i, _ in ts.ur[0]}
    top = algo.recommend(uid, n=5, strategy="lcb", kappa=1.0)
    assert list(top.columns) == ["rank", "item", "est", "mean", "std", "score"] and list(top["rank"]) == [1, 2, 3, 4, 5]
    assert not set(top["item"]) & rated
    mean, var = algo.predict_dist([uid] * 5, list(top["item"]))
    np.testing.assert_allclose(top["mean"], mean, rtol=1e-5)
    np.testing.assert_allclose(top["score"], mean - np.sqrt(var), rtol=1e-5)
    one = np.array([algo.predict_dist(uid, iid) for iid in top["item"]])  # one list: exactly what one pair gives
    np.testing.assert_array_equal(top["mean"], one[:, 0])
    np.testing.assert_array_equal(top["std"], np.sqrt(one[:, 1]))
    unseen = {ts.to_raw_iid(i) for i in range(ts.n_items)} - rated
    scores = {iid: algo.predict_dist(uid, iid) for iid in unseen}
    best = max(unseen, key=lambda i: scores[i][0] - np.sqrt(scores[i][1]))
    assert top["item"].iloc[0] == best
    with_rated = algo.recommend(uid, n=ts.n_items, exclude_rated=False)
    assert len(with_rated) == ts.n_items


def test_recommend_many_and_cold_user(fitted_pair):
    algo, est = fitted_pair
    for model in (algo, est):
        frame = model.recommend_many(["u1", "someone-new"], n=3)
        assert list(frame.columns) == ["user", "rank", "item", "est", "mean", "std", "score"]
        assert list(frame["user"]) == ["u1"] * 3 + ["someone-new"] * 3
        assert frame.groupby("user")["score"].apply(lambda s: s.is_monotonic_decreasing).all()


def test_sklearn_recommend_agrees_with_surprise_semantics(fitted_pair, synthetic_df):
    _, est = fitted_pair
    rated = set(synthetic_df.loc[synthetic_df["user"] == "u1", "item"])
    top = est.recommend("u1", n=4, strategy="ucb", kappa=0.5)
    assert not set(top["item"]) & rated
    mean, std = est.predict(np.column_stack([["u1"] * 4, top["item"]]), return_std=True)
    np.testing.assert_allclose(top["score"], mean + 0.5 * std, rtol=1e-5)


def test_recommend_needs_a_user_item_model(synthetic_df):
    est = MWGPRegressor(**FAST).fit(synthetic_df[["user", "item"]].assign(ctx=1), synthetic_df["rating"])
    with pytest.raises(ValueError, match="user, item"):
        est.recommend("u1")


def test_cold_start_users_get_wider_honest_intervals():
    """Hold out 15 % of users entirely: their std is clearly larger and their 90 % intervals cover
    as well as those of seen users, both close to 90 % (0.89 / 0.89 here; ML-1M 0.90 / 0.92,
    docs/benchmarks.md). Seen users' intervals include the estimation uncertainty of their own
    embedding and bias, so the cold/warm std ratio (1.16 here) is smaller than with point estimates
    (1.22) while both are calibrated."""
    df = make_synthetic_ratings(n_users=400, n_items=150, n_ratings=16000, random_state=3)
    rng = np.random.default_rng(0)
    cold = set(rng.choice(df["user"].unique(), 60, replace=False))
    is_cold = df["user"].isin(cold).to_numpy()
    train, test_cold = df[~is_cold], df[is_cold]
    warm_test = train.sample(frac=0.2, random_state=0)
    train = train.drop(warm_test.index)
    est = MWGPRegressor(random_state=0).fit(train[["user", "item"]], train["rating"])  # defaults: batch "auto"
    res = {}
    for name, part in (("warm", warm_test), ("cold", test_cold)):
        mean, std = est.predict(part[["user", "item"]], return_std=True)
        res[name] = (std.mean(), np.mean(np.abs(part["rating"].to_numpy() - mean) <= 1.645 * std))
    assert res["cold"][0] > 1.1 * res["warm"][0], res
    # ~2,400 cold ratings: a coverage estimate has a sampling std of ~0.007, so 0.03 is ~4 sigma
    assert res["cold"][1] >= res["warm"][1] - 0.03, res
    assert 0.85 <= res["warm"][1] <= 0.95 and 0.85 <= res["cold"][1] <= 0.95, res


def test_est_is_the_mean_clipped_to_the_scale(fitted_pair):
    algo, est = fitted_pair
    for model in (algo, est):
        frame = model.recommend_many(["u1", "u2", "someone-new"], n=20)
        np.testing.assert_allclose(frame["est"], np.clip(frame["mean"], 1, 5))
        assert frame["est"].between(1, 5).all()


def test_thompson_recommend_on_both_adapters(fitted_pair):
    algo, est = fitted_pair
    for model in (algo, est):
        one = model.recommend("u1", n=5, strategy="thompson", random_state=3)
        assert one.equals(model.recommend("u1", n=5, strategy="thompson", random_state=3))
        assert one["score"].is_monotonic_decreasing and list(one["rank"]) == [1, 2, 3, 4, 5]
        lists = {tuple(model.recommend("new", n=3, strategy="thompson", random_state=s)["item"]) for s in range(6)}
        assert len(lists) > 1  # draws explore


def test_kappa_with_the_mean_strategy_is_named_once_and_changes_nothing(fitted_pair):
    import warnings

    for model in fitted_pair:
        for call in (lambda **k: model.recommend("u1", n=4, **k), lambda **k: model.recommend("u1", n=4, ratings={
                "i2": 4.0}, **k), lambda **k: model.recommend_many(["u1", "u2"], n=4, **k)):
            with pytest.warns(UserWarning, match=r"kappa=2 is not used by strategy='mean'") as caught:
                ranked = call(strategy="mean", kappa=2)
            assert len(caught) == 1 and caught[0].filename == __file__  # the user's line
            assert ranked.equals(call(strategy="mean"))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                call(strategy="lcb", kappa=2), call(strategy="auto", kappa=2), call(strategy="mean", kappa=None)


def test_ask_on_both_adapters(fitted_pair, synthetic_df):
    algo, est = fitted_pair
    counts = synthetic_df["item"].value_counts()
    for model in (algo, est):
        q = model.ask("newcomer", n=4)
        assert list(q.columns) == ["rank", "item", "gain", "answer_prob", "est", "mean", "std"]
        assert len(q) == 4 and q["gain"].is_monotonic_decreasing and (q["gain"] > 0).all()
        users = algo.trainset.n_users
        np.testing.assert_allclose(q["answer_prob"], np.minimum(counts[q["item"]].to_numpy() / users, 1))
        items = model._item_encoder().transform(list(q["item"]))
        mean, var = model.posterior_.predict(np.stack([np.full(len(items), -1), items], 1))
        np.testing.assert_allclose(q["mean"], mean, rtol=1e-6)  # a new user without answers: the cold start
        # answers so far are folded in for the call; they are never asked again, and the model is not changed
        before = model.posterior_
        answered = {q["item"].iloc[0]: 5.0, q["item"].iloc[1]: 1.0}
        nxt = model.ask("newcomer", n=3, ratings=answered)
        assert not set(nxt["item"]) & set(answered) and model.posterior_ is before
        # with answers, the chance of an answer is the answered items' co-raters' share (averaged over the
        # answered items), shrunk towards the popularity with the weight of one answer
        raters = synthetic_df.groupby("item")["user"].apply(set)
        for item, prob in zip(nxt["item"], nxt["answer_prob"]):
            personal = np.mean([len(raters[a] & raters[item]) / len(raters[a]) for a in answered])
            pop = len(raters[item]) / users
            assert prob == pytest.approx((2 * personal + pop) / 3, rel=1e-12)
        folded = model.recommend("newcomer", n=1, ratings=answered)
        assert folded is not None
        # candidates: the choice among them, each answerable
        pool = list(counts.index[-6:])
        among = model.ask("newcomer", n=10, candidates=pool, exclude=pool[:2])
        assert sorted(among["item"]) == sorted(pool[2:]) and (among["answer_prob"] == 1).all()
        # a known user: their training ratings count, rated items are not asked
        rated = set(synthetic_df.loc[synthetic_df["user"] == "u1", "item"])
        known = model.ask("u1", n=5)
        assert not set(known["item"]) & rated
        assert known["gain"].iloc[0] < q["gain"].iloc[0]  # a known user has less to learn than a new one


@pytest.mark.parametrize("kwargs, match", [
    ({"n": 0}, "`n` must be"),
    ({"candidates": ["no-such-item"]}, r"`candidates` holds 1 item id\(s\) not in the training data"),
    ({"candidates": "i1"}, "`candidates` must be a list of item ids"),
    ({"ratings": {"i1": 9}}, r"rating scale \[1, 5\]"),
])
def test_ask_bad_input_is_named(fitted_pair, kwargs, match):
    algo, _ = fitted_pair
    with pytest.raises(ValueError, match=match):
        algo.ask("newcomer", **kwargs)


def test_auto_strategy_is_lcb_for_users_with_few_ratings_and_mean_otherwise(fitted_pair, synthetic_df):
    algo, est = fitted_pair
    counts = synthetic_df["user"].value_counts()
    heavy, light = counts.index[0], counts.index[-1]
    assert counts[heavy] >= 20 > counts[light]
    for model in (algo, est):
        mixed = model.recommend_many([heavy, "brand-new", light], n=4)
        for uid, strategy in ((heavy, "mean"), ("brand-new", "lcb"), (light, "lcb")):
            alone = model.recommend(uid, n=4, strategy=strategy)
            got = mixed[mixed["user"] == uid].drop(columns="user").reset_index(drop=True)
            pd.testing.assert_frame_equal(got, alone, check_dtype=False)
        assert model.recommend("brand-new", n=4).equals(model.recommend("brand-new", n=4, strategy="lcb"))
        with pytest.raises(ValueError, match="`strategy` must be one of"):
            model.recommend("u1", strategy="best")
