"""Ranking metrics: hand-computed values, Surprise's FAQ recipe and scikit-learn's NDCG as gold standards."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from mogp_surprise.evaluation import (default_relevance_threshold, ndcg_at_k, precision_recall_at_k, ranking_per_user,
                                      ranking_report, top_k_mask)

L2, L3 = 1.0, 1.0 / math.log2(3)  # discounts of positions 1 and 2 (position 3: 1/2)


def _faq_recipe(users, y, est, k, threshold):
    """Surprise's FAQ "How to compute precision@k and recall@k", loop for loop (the definition under test)."""
    by_user = defaultdict(list)
    for uid, true_r, e in zip(users, y, est):
        by_user[uid].append((e, true_r))
    precisions, recalls = [], []
    for ratings in by_user.values():
        ratings.sort(key=lambda x: x[0], reverse=True)
        n_rel = sum(t >= threshold for _, t in ratings)
        n_rec_k = sum(e >= threshold for e, _ in ratings[:k])
        n_both = sum((t >= threshold) and (e >= threshold) for e, t in ratings[:k])
        precisions.append(n_both / n_rec_k if n_rec_k != 0 else 0)
        recalls.append(n_both / n_rel if n_rel != 0 else 0)
    return float(np.mean(precisions)), float(np.mean(recalls))


def test_hand_computed_users_fewer_than_k_items_no_relevant_nothing_recommended():
    users = ["a", "a", "a", "a", "b", "b", "c", "c", "d", "d"]
    y = [5, 3, 4, 2, 5, 4, 3, 2, 5, 4]
    est = [4.6, 4.4, 3.9, 4.2, 4.5, 4.2, 4.5, 4.1, 3.5, 3.0]
    per_user = ranking_per_user(users, y, est, k=3, threshold=4)
    # a: top 3 = (5, 4.6), (3, 4.4), (2, 4.2): all recommended, 1 relevant of the 2 relevant items
    # b: 2 items < k: both recommended and relevant; c: no relevant item; d: nothing scored >= 4
    assert list(per_user.index) == ["a", "b", "c", "d"]
    np.testing.assert_allclose(per_user["precision"], [1 / 3, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(per_user["recall"], [1 / 2, 1.0, 0.0, 0.0])
    assert per_user["n_recommended"].tolist() == [3, 2, 2, 0] and per_user["n_relevant"].tolist() == [2, 2, 0, 2]
    assert precision_recall_at_k(users, y, est, k=3, threshold=4) == pytest.approx(((1 / 3 + 1) / 4, 1.5 / 4))
    assert precision_recall_at_k(users, y, est, k=3, threshold=4) == pytest.approx(_faq_recipe(users, y, est, 3, 4))
    # every top-k item counts as recommended: d's two items are now recommended and relevant
    top_only = ranking_per_user(users, y, est, k=3, threshold=4, recommend_above_threshold=False)
    np.testing.assert_allclose(top_only["precision"], [1 / 3, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(top_only["recall"], [1 / 2, 1.0, 0.0, 1.0])
    # binary NDCG: a ranks relevant, -, - (ideal: relevant, relevant); b, d perfect; c has no relevant item
    np.testing.assert_allclose(per_user["ndcg"], [L2 / (L2 + L3), 1.0, 0.0, 1.0])


def test_ndcg_hand_computed_binary_and_graded():
    users, y, score = [7, 7, 7], [3, 5, 4], [0.9, 0.5, 0.1]  # ranked: 3, 5, 4
    assert ndcg_at_k(users, y, score, k=3) == pytest.approx((L3 + 0.5) / (L2 + L3))
    assert ndcg_at_k(users, y, score, k=2) == pytest.approx(L3 / (L2 + L3))
    assert ndcg_at_k(users, y, score, k=3, relevance="graded") == pytest.approx(
        (3 + 5 * L3 + 4 / 2) / (5 + 4 * L3 + 3 / 2))
    assert ndcg_at_k(users, y, score, k=1, relevance="graded") == pytest.approx(3 / 5)
    assert ndcg_at_k(users, y, [0.1, 0.9, 0.5], k=3) == pytest.approx(1.0)


def test_ties_keep_input_order():
    # the two items tie on 4.0: the first in the input is ranked first
    assert precision_recall_at_k(["u", "u", "u"], [5, 2, 4], [4.0, 4.0, 3.0], k=1) == (1.0, 0.5)
    assert precision_recall_at_k(["u", "u", "u"], [2, 5, 4], [4.0, 4.0, 3.0], k=1) == (0.0, 0.0)
    assert top_k_mask(["u", "v", "u", "u"], [1.0, 0.0, 1.0, 2.0], k=2).tolist() == [True, True, False, True]


def test_matches_the_faq_recipe_and_scikit_learn_on_random_data():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        sizes = rng.integers(1, 15, 12)
        users = np.repeat(rng.permutation(12).astype(str), sizes)
        order = rng.permutation(users.size)  # users' rows interleaved
        users, y = users[order], rng.integers(1, 6, users.size).astype(float)
        est = np.round(rng.uniform(1, 5, users.size) * 2) / 2  # many ties
        k = int(rng.integers(1, 8))
        assert precision_recall_at_k(users, y, est, k=k, threshold=4) == pytest.approx(
            _faq_recipe(users, y, est, k, 4))
        score = rng.normal(size=users.size)  # no ties: scikit-learn averages tied gains, we keep input order
        for relevance in ("binary", "graded"):
            ours = ranking_per_user(users, y, score, k=k, threshold=4, relevance=relevance)
            for user, row in ours.iterrows():
                mine = users == user
                gain = (y[mine] >= 4).astype(float) if relevance == "binary" else y[mine]
                if mine.sum() == 1:
                    expected = float(gain[0] > 0)
                else:
                    expected = ndcg_score([gain], [score[mine]], k=k) if gain.sum() > 0 else 0.0
                assert row["ndcg"] == pytest.approx(expected), (user, relevance)


def test_ranking_report_and_the_default_threshold():
    users, y, est = ["a", "a", "b"], [5, 1, 4], [4.5, 4.4, 4.0]
    report = ranking_report(users, y, est, k=10)
    assert report == pytest.approx({"precision_at_10": 0.75, "recall_at_10": 1.0, "top_precision_at_10": 0.75,
                                    "ndcg_at_10": 1.0, "n_users": 2})
    assert default_relevance_threshold((1, 5)) == 4.0
    assert default_relevance_threshold((0.5, 5.0)) == 3.875
    assert default_relevance_threshold((-10, 10)) == 5.0


def test_top_precision_counts_the_top_k_whatever_its_predicted_rating():
    """The FAQ's precision@k gives 0 to a user whose scores are all below the threshold, however well they are
    ranked; top-k precision scores that user's ranking. Shifting every score down by a constant keeps every
    ranking, so it keeps top-k precision and NDCG but not the FAQ's precision."""
    users = ["a"] * 4 + ["b"] * 4
    y = [5, 4, 2, 1, 5, 1, 4, 2]
    est = np.array([3.9, 3.8, 3.1, 2.0, 4.6, 4.2, 4.1, 3.0])  # a: nothing >= 4 but ranked right; b: 1 of 2 wrong
    report = ranking_report(users, y, est, k=2, threshold=4)
    assert report["precision_at_2"] == pytest.approx((0.0 + 0.5) / 2)
    assert report["top_precision_at_2"] == pytest.approx((1.0 + 0.5) / 2)
    per_user = ranking_per_user(users, y, est, k=2, threshold=4, recommend_above_threshold=False)
    assert report["top_precision_at_2"] == pytest.approx(per_user["precision"].mean())
    lower = ranking_report(users, y, est - 1.0, k=2, threshold=4)
    assert lower["precision_at_2"] == 0.0
    assert lower["top_precision_at_2"] == report["top_precision_at_2"] and lower["ndcg_at_2"] == report["ndcg_at_2"]


BAD = [
    (lambda: precision_recall_at_k(["a", "b"], [1, 2, 3], [1, 2, 3]), r"`users` must hold one id per score \(3\); got 2"),
    (lambda: precision_recall_at_k(["a"] * 3, [1, 2, 3], [1, 2]), r"`y_true` and `scores` must have the same length"),
    (lambda: precision_recall_at_k(["a"], [1], [np.nan]), r"`scores` must be finite"),
    (lambda: precision_recall_at_k([], [], []), r"`y_true` must not be empty"),
    (lambda: precision_recall_at_k(["a", None], [1, 2], [1, 2]), r"`users` must not hold missing ids.*position 1"),
    (lambda: precision_recall_at_k([["a"]], [1], [1]), r"`users` must be 1-D"),
    (lambda: precision_recall_at_k(["a"], [1], [1], k=0), r"`k` must be an int >= 1; got 0"),
    (lambda: precision_recall_at_k(["a"], [1], [1], k=True), r"`k` must be an int >= 1; got True"),
    (lambda: precision_recall_at_k(["a"], [1], [1], k=2.0), r"`k` must be an int >= 1; got 2.0"),
    (lambda: precision_recall_at_k(["a"], [1], [1], threshold=float("nan")), r"`threshold` must be a finite"),
    (lambda: ndcg_at_k(["a"], [1], [1], relevance="exp"), r"`relevance` must be 'binary' or 'graded'; got 'exp'"),
    (lambda: ndcg_at_k(["a"], [-3], [1], relevance="graded"), r"needs them >= 0; got -3.0"),
    (lambda: default_relevance_threshold((5, 1)), r"`rating_scale` must be.*low < high; got \(5, 1\)"),
]


@pytest.mark.parametrize("call, match", BAD)
def test_bad_input_raises_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("scale", ["15", (1, 3, 5), None, (True, 5), ("1", "5")])
def test_a_rating_scale_that_is_no_pair_of_numbers_is_refused(scale):
    with pytest.raises(ValueError, match="`rating_scale` must be two finite numbers"):
        default_relevance_threshold(scale)


def test_recommend_above_threshold_must_be_a_bool():
    with pytest.raises(ValueError, match="`recommend_above_threshold` must be True or False; got 'no'"):
        ranking_per_user([1, 1], [4, 5], [4, 5], recommend_above_threshold="no")


def test_tuple_big_endian_and_iterator_user_ids_are_ids():
    users, y, scores = [("u", 1), ("u", 1), ("v", 2)], [4, 5, 3], [1, 2, 3]
    want = ranking_per_user(["u1", "u1", "v2"], y, scores, k=1)
    got = ranking_per_user(users, y, scores, k=1)
    assert got.index.tolist() == [("u", 1), ("v", 2)]
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    np.testing.assert_array_equal(ranking_per_user(np.array([1, 1, 2], dtype=">i8"), y, scores, k=1).to_numpy(),
                                  want.to_numpy())
    np.testing.assert_array_equal(ranking_per_user(iter(["a", "a", "b"]), y, scores, k=1).to_numpy(), want.to_numpy())
    with pytest.raises(ValueError, match=r"`users` must be 1-D, one id per rating; got the list \['a'\]"):
        ranking_per_user([["a"], "b", "c"], y, scores, k=1)
