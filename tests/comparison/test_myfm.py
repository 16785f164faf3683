"""MyFMBaseline and MyFMFlippedBaseline: myFM's Bayesian FMs with the shared predictive surface (optional dependency)."""
from __future__ import annotations

import re
import types

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.comparison import compare
from mogp_surprise.comparison.myfm import myfm_available

needs_myfm = pytest.mark.skipif(not myfm_available(), reason="myFM is optional (pip install -e '.[myfm]')")


@needs_myfm
def test_myfm_baselines_in_compare(synthetic_data):
    from surprise.model_selection import KFold

    from tests.conftest import constant_rmse

    result = compare(synthetic_data, algos=["myfm", "myfm_flipped"], n_folds=2)
    constant = constant_rmse(synthetic_data, KFold(2, random_state=0, shuffle=True))  # compare's folds
    for _, row in result.summary().iterrows():
        assert row["uncertainty"] == "predictive" and 0.1 < row["sharpness_mean"] < 2.0, row["algo"]
        assert row["rmse_q100_mean"] < 0.95 * constant.mean() and 0.8 < row["coverage_90_mean"] < 0.97, row["algo"]


def _trainset(rows):
    from surprise import Dataset, Reader

    frame = pd.DataFrame(rows, columns=["user", "item", "rating"])
    return Dataset.load_from_df(frame, Reader(rating_scale=(1, 5))).build_full_trainset()


def _feature_rows(algo, pairs):
    """The full feature rows [user one-hot | items the user rated | item one-hot | its raters] of raw pairs."""
    index = algo._inner_index([u for u, _ in pairs], [i for _, i in pairs])
    X, blocks = algo._features(index)
    assert X.shape == (len(pairs), 0)
    return [block.data[np.asarray(block.original_to_block)].toarray() for block in blocks], index


@needs_myfm
def test_flipped_implicit_features_come_from_the_training_fold_only():
    from mogp_surprise.comparison.myfm import MyFMFlippedBaseline

    train = [("a", "x", 5), ("a", "y", 3), ("b", "y", 4), ("b", "z", 1), ("c", "z", 2)]
    held_out = ("a", "z", 4)  # a rated z only in the test fold
    algo = MyFMFlippedBaseline(n_iter=3, n_kept_samples=2).fit(_trainset(train))
    (users, items), index = _feature_rows(algo, [held_out[:2], ("nobody", "x"), ("b", "nothing")])
    ts = algo.trainset
    u, i = {r: ts.to_inner_uid(r) for r in "abc"}, {r: ts.to_inner_iid(r) for r in "xyz"}
    n_u, n_i = ts.n_users, ts.n_items
    expected_a = np.zeros(n_u + n_i)
    expected_a[u["a"]] = 1.0
    expected_a[n_u + i["x"]] = expected_a[n_u + i["y"]] = 1 / np.sqrt(2)  # x and y, not z
    np.testing.assert_allclose(users[0], expected_a)
    expected_z = np.zeros(n_i + n_u)
    expected_z[i["z"]] = 1.0
    expected_z[n_i + u["b"]] = expected_z[n_i + u["c"]] = 1 / np.sqrt(2)  # b and c, not a
    np.testing.assert_allclose(items[0], expected_z)
    assert index[1, 0] == -1 and not users[1].any() and index[2, 1] == -1 and not items[2].any()  # unknown: nothing
    # the same rating in the training data does enter both blocks (so the check above can fail)
    with_it = MyFMFlippedBaseline(n_iter=3, n_kept_samples=2).fit(_trainset(train + [held_out]))
    (users, items), _ = _feature_rows(with_it, [held_out[:2]])
    assert users[0][n_u + with_it.trainset.to_inner_iid("z")] == pytest.approx(1 / np.sqrt(3))
    assert items[0][n_i + with_it.trainset.to_inner_uid("a")] == pytest.approx(1 / np.sqrt(3))


@needs_myfm
def test_flipped_answers_for_unknown_users_and_items(synthetic_data):
    from mogp_surprise.comparison.myfm import MyFMFlippedBaseline

    trainset = synthetic_data.build_full_trainset()
    algo = MyFMFlippedBaseline(n_iter=20, n_kept_samples=10).fit(trainset)
    assert algo.rank_ == 16 and algo.name == "myFM BFM flipped (rank 16, implicit)"  # "auto" below 500,000
    known_user, known_item = trainset.to_raw_uid(0), trainset.to_raw_iid(0)
    mean, var = algo.predict_dist([("nobody", known_item), (known_user, "nothing"), ("nobody", "nothing")])
    assert np.isfinite(mean).all() and (var > 0).all() and np.isfinite(var).all()
    assert abs(mean[2] - trainset.global_mean) < 0.5  # no features at all: about the global mean
    pred = algo.predict("nobody", "nothing")
    assert pred.details["unknown_user"] and pred.details["unknown_item"] and not pred.details["was_impossible"]


def _groups_revealed_by_what_they_rate(n_users=400, n_items=60, per_user=6, p_own=0.9, noise=0.5, seed=0):
    """Two user groups and two item pools: a user rates 90 % of the time from the own pool, and rates the own
    pool's items high (4.2) and the other pool's low (1.8). With 6 ratings a user's group is known better from
    which items were rated (together with everyone else's) than from the user's own few ratings."""
    from mogp_surprise.datasets import to_surprise_dataset

    rng = np.random.default_rng(seed)
    group, pool = rng.integers(0, 2, n_users), np.arange(n_items) % 2
    rows = []
    for u in range(n_users):
        own, other = np.flatnonzero(pool == group[u]), np.flatnonzero(pool != group[u])
        n_own = rng.binomial(per_user, p_own)
        for i in np.concatenate([rng.choice(own, n_own, replace=False),
                                 rng.choice(other, per_user - n_own, replace=False)]):
            rating = (4.2 if pool[i] == group[u] else 1.8) + noise * rng.normal()
            rows.append((f"u{u}", f"i{i}", float(np.clip(rating, 1, 5))))
    return to_surprise_dataset(pd.DataFrame(rows, columns=["user", "item", "rating"]), rating_scale=(1, 5))


@needs_myfm
def test_flipped_beats_one_hot_myfm_when_what_users_rate_carries_signal():
    from surprise.model_selection import train_test_split

    from mogp_surprise.comparison.myfm import MyFMBaseline, MyFMFlippedBaseline

    trainset, testset = train_test_split(_groups_revealed_by_what_they_rate(), test_size=0.25, random_state=0)
    y = np.array([r for *_, r in testset])
    rmse = {}
    for algo in (MyFMBaseline(rank=8, n_iter=100, n_kept_samples=80),
                 MyFMFlippedBaseline(rank=8, n_iter=100, n_kept_samples=80)):
        mean, _ = algo.fit(trainset).predict_dist(testset)
        rmse[type(algo).__name__] = float(np.sqrt(np.mean((np.clip(mean, 1, 5) - y) ** 2)))
    # measured 0.58-0.63 vs 0.64-0.74 over eight seeds (ratio <= 0.913)
    assert rmse["MyFMFlippedBaseline"] < 0.95 * rmse["MyFMBaseline"], rmse


@needs_myfm
def test_flipped_rank_auto_and_bad_ranks():
    from mogp_surprise.comparison.myfm import MyFMFlippedBaseline

    for n, rank in ((499_999, 16), (500_000, 32)):
        algo = MyFMFlippedBaseline()
        algo.trainset = types.SimpleNamespace(n_users=2, n_items=2)
        algo._prepare(np.zeros((n, 2), dtype=np.int64))
        assert algo.rank_ == rank
    for bad in (0, "big", 2.5, True):
        with pytest.raises(ValueError, match=re.escape(f"`rank` must be an int >= 1 or 'auto'; got {bad!r}")):
            MyFMFlippedBaseline(rank=bad, n_iter=2, n_kept_samples=1).fit(_trainset([("a", "x", 5)]))


def test_flipped_names_the_install_command_without_myfm(monkeypatch):
    import mogp_surprise.comparison.myfm as myfm_algo

    monkeypatch.setattr(myfm_algo, "myfm_available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[myfm]'")):
        myfm_algo.MyFMFlippedBaseline().fit(None)
