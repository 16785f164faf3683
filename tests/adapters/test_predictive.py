"""PredictiveAlgo: one Surprise surface (estimate, predict, test, predict_dist) over an algorithm's moments."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.adapters.predictive import PredictiveAlgo
from mogp_surprise.core.errors import NotFittedError
from mogp_surprise.datasets import to_surprise_dataset


class _Linear(PredictiveAlgo):
    """mean = 2 * inner user id - inner item id (unknown: 10), var = 1 + inner item id (unknown: 50)."""

    _fitted_attr = "fitted_"

    def fit(self, trainset):
        PredictiveAlgo.fit(self, trainset)
        self.fitted_ = True
        return self

    def _moments(self, index, include_noise=True):
        users, items = index[:, 0], index[:, 1]
        mean = np.where((users >= 0) & (items >= 0), 2.0 * users - items, 10.0)
        var = np.where(items >= 0, 1.0 + items, 50.0)
        return mean, var


@pytest.fixture(scope="module")
def algo():
    df = pd.DataFrame({"user": ["a", "a", "b", "c"], "item": ["x", "y", "x", "z"], "rating": [1, 2, 3, 4]})
    return _Linear().fit(to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset())


def test_predict_dist_is_unclipped_and_test_clips_like_surprise(algo):
    trainset = algo.trainset
    pairs = [("c", "x", 3.0), ("a", "z", 1.0), ("nobody", "x", 2.0), ("a", "nothing", 5.0)]
    mean, var = algo.predict_dist(pairs)
    u = [trainset.to_inner_uid(x) for x in "ca"]
    i = [trainset.to_inner_iid(x) for x in "xz"]
    np.testing.assert_array_equal(mean, [2.0 * u[0] - i[0], 2.0 * u[1] - i[1], 10.0, 10.0])
    np.testing.assert_array_equal(var, [1 + i[0], 1 + i[1], 1 + i[0], 50.0])
    preds = algo.test(pairs)
    assert [p.est for p in preds] == list(np.clip(mean, 1, 5))
    assert [p.details["std"] for p in preds] == pytest.approx(np.sqrt(var))
    flags = [(p.details["unknown_user"], p.details["unknown_item"]) for p in preds]
    assert flags == [(False, False), (False, False), (True, False), (False, True)]
    assert not any(p.details["was_impossible"] for p in preds)


def test_single_predict_equals_test(algo):
    pairs = [("c", "x", 3.0), ("nobody", "x", 2.0), ("a", "nothing", 5.0)]
    assert [(p.est, p.details) for p in algo.test(pairs)] == [(p.est, p.details) for p in
                                                             (algo.predict(u, i, r) for u, i, r in pairs)]


def test_verbose_test_writes_each_prediction(algo, capsys):
    algo.test([("c", "x", 3.0)], verbose=True)
    assert "user: c" in capsys.readouterr().out


def test_unfitted_says_so():
    with pytest.raises(NotFittedError, match="_Linear instance is not fitted"):
        _Linear().predict_dist([("a", "x")])
    with pytest.raises(NotFittedError, match="not fitted"):
        _Linear().test([("a", "x", 1.0)])


def test_mixed_int_and_str_ids_give_each_pair_the_same_answer_whatever_else_is_asked():
    """Raw ids keep their type in a batch: user 1 is found next to user "a", and "1" is another id."""
    from surprise import Dataset, Reader

    df = pd.DataFrame({"user": [1, 1, "a", 2], "item": [10, "x", 10, "x"], "rating": [1, 2, 3, 4]})
    algo = _Linear().fit(Dataset.load_from_df(df, Reader(rating_scale=(1, 5))).build_full_trainset())
    pairs = [(1, 10, 3.0), ("a", "x", 3.0), (2, 10, 1.0), ("1", 10, 2.0)]
    batch = algo.test(pairs)
    assert [(p.est, p.details) for p in batch] == [(p.est, p.details) for p in (algo.predict(*t) for t in pairs)]
    assert [p.details["unknown_user"] for p in batch] == [False, False, False, True]
    mean, var = algo.predict_dist((1, "a"), (10, "x"))  # tuples (and lists, arrays) hold several ids
    np.testing.assert_array_equal(mean, [algo.predict(1, 10, clip=False).est, algo.predict("a", "x", clip=False).est])
    assert var.shape == (2,)


def test_tuple_ids_fit_and_a_tuple_is_one_id_where_the_training_ids_are_tuples():
    """Tuple raw ids (e.g. (shop, customer)): fit checks them as ids, predict_dist reads a tuple as one id."""
    from surprise import Dataset, Reader

    from mogp_surprise import MWGP

    df = pd.DataFrame({"user": [(1, "a"), (1, "a"), (2, "b")], "item": [(10, 0), (11, 1), (10, 0)],
                       "rating": [1, 2, 3]})
    ts = Dataset.load_from_df(df, Reader(rating_scale=(1, 5))).build_full_trainset()
    algo = MWGP(n_epochs=1, random_state=0).fit(ts)  # (a 2-D array of tuples once broke the id check)
    mean, var = algo.predict_dist((2, "b"), (11, 1))
    assert isinstance(mean, float) and isinstance(var, float)
    assert algo.predict((2, "b"), (11, 1), clip=False).est == mean
    assert not algo.predict((2, "b"), (11, 1)).details["unknown_user"]
    unseen = algo.predict_dist((9, "z"), (11, 1))  # an unseen tuple is one unseen id too
    assert isinstance(unseen[0], float) and algo.predict((9, "z"), (11, 1)).details["unknown_user"]
    both = algo.predict_dist([(2, "b"), (1, "a")], [(11, 1), (10, 0)])
    assert both[0].shape == (2,) and both[0][0] == pytest.approx(mean, rel=1e-6)
