"""Which items to ask a user about (core.elicit): the greedy covariance updates equal the Laplace posterior with
those ratings, the gain is the drop of the weighted catalogue variance, the chance of an answer and the item
sets are respected, bad inputs are named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core.elicit import RatingGraph, answer_probability, ask
from mogp_surprise.core.user_objective import context_for

N_USERS, N_ITEMS = 40, 30


@pytest.fixture(scope="module")
def posterior():
    rng = np.random.default_rng(1)
    index = np.stack([rng.integers(0, N_USERS, 900), rng.integers(0, N_ITEMS, 900)], 1)
    users, items = rng.normal(size=(N_USERS, 2)), rng.normal(size=(N_ITEMS, 2))
    y = np.clip(np.round(3 + (users[index[:, 0]] * items[index[:, 1]]).sum(1) + rng.normal(0, 0.5, 900)), 1, 5)
    return fit_mwgp(index, y, (N_USERS, N_ITEMS), MWGPConfig(n_epochs=4, n_inducing=16, batch_size=128,
                                                             random_state=0, dtype="float64")).posterior


def _weighted_variance(posterior, jac, weights, sigma):
    return float(((jac @ sigma) * jac * weights[:, None]).sum()) * posterior.rating_std ** 2


def test_each_gain_is_the_drop_of_the_laplace_catalogue_variance(posterior):
    """Independent route: the Laplace covariance of the user with the asked items rated (autograd on those
    ratings' own data), at the same parameters, gives the catalogue variance after each answer."""
    items, ratings = np.array([0, 3, 7]), np.array([4.0, 2.0, 5.0])
    weights = np.arange(1, N_ITEMS + 1, dtype=float)
    q = ask(posterior, items, ratings, n=4, weights=weights)
    assert q.items.size == 4 and not set(q.items) & set(items) and len(set(q.items)) == 4
    ctx = context_for(posterior)
    theta = torch.cat([torch.as_tensor(np.asarray(q.folded.raw[b.key])).reshape(-1) for b in ctx.blocks]).to(ctx.device)
    data = ctx.user_data(items, (ratings - ctx.rating_mean) / ctx.rating_std)
    jac, _ = ctx.mean_jacobian(ctx.catalogue_data(data), theta)
    w = torch.as_tensor(weights / weights.sum(), device=ctx.device)
    before = _weighted_variance(posterior, jac, w, ctx.laplace(data, theta)[1])
    assert q.variance_before == pytest.approx(before, rel=1e-9)
    for k in range(1, 5):  # the values of the answers do not matter: the precision does not depend on them
        asked = np.concatenate([items, q.items[:k]])
        answered = ctx.user_data(asked, np.zeros(asked.size))
        answered.implicit = data.implicit  # the same parameters: the user's implicit sums as before the answers
        after = _weighted_variance(posterior, jac, w, ctx.laplace(answered, theta)[1])
        assert before - after == pytest.approx(q.gain[k - 1], rel=1e-7)
        before = after
    assert q.variance_after == pytest.approx(before, rel=1e-9)
    assert (np.diff(q.gain) <= 1e-12).all()  # greedy gains of a submodular criterion do not grow


def test_the_first_question_maximises_the_gain_over_every_candidate(posterior):
    q = ask(posterior, np.array([], dtype=int), np.array([]), n=1)
    gains = []
    for j in range(N_ITEMS):
        gains.append(ask(posterior, np.array([], dtype=int), np.array([]), n=1, candidates=[j],
                         weights=np.ones(N_ITEMS)).gain[0])  # (the default weighs the candidates only)
    assert q.items[0] == int(np.argmax(gains)) and q.gain[0] == pytest.approx(max(gains))
    assert min(gains) > 0  # every item teaches something about a new user


def test_answer_probability_candidates_and_exclusions(posterior):
    first = ask(posterior, np.array([], dtype=int), np.array([]), n=1).items[0]
    p = np.ones(N_ITEMS)
    p[first] = 0.0  # an item nobody can answer teaches nothing
    assert first not in ask(posterior, np.array([], dtype=int), np.array([]), n=5, answer_prob=p).items
    half = np.full(N_ITEMS, 0.5)
    full = ask(posterior, np.array([], dtype=int), np.array([]), n=1)
    assert ask(posterior, np.array([], dtype=int), np.array([]), n=1, answer_prob=half).gain[0] < full.gain[0]
    q = ask(posterior, np.array([1]), np.array([3.0]), n=10, candidates=[1, 2, 4, 5], exclude=[5])
    assert sorted(q.items.tolist()) == [2, 4]  # rated and excluded items never asked; fewer than n left
    assert ask(posterior, np.array([], dtype=int), np.array([]), n=3, candidates=[]).items.size == 0


def test_with_candidates_the_variance_that_counts_is_the_candidates_by_default(posterior):
    items, ratings, candidates = np.array([1]), np.array([3.0]), [1, 2, 4, 5, 8, 13]
    askable = np.zeros(N_ITEMS)
    askable[[2, 4, 8, 13]] = 1.0  # the candidates not rated (1) and not excluded (5)
    got = ask(posterior, items, ratings, n=3, candidates=candidates, exclude=[5])
    want = ask(posterior, items, ratings, n=3, candidates=candidates, exclude=[5], weights=askable)
    np.testing.assert_array_equal(got.items, want.items)
    np.testing.assert_allclose(got.gain, want.gain, rtol=1e-12)
    assert got.variance_before == pytest.approx(want.variance_before, rel=1e-12)
    every = ask(posterior, items, ratings, n=3, candidates=candidates, exclude=[5], weights=np.ones(N_ITEMS))
    # the weights matter (so the equalities above, at 1e-12, are not those of weights without effect)
    assert abs(every.variance_before - got.variance_before) > 1e-4 * got.variance_before


def test_a_known_user_as_fitted(posterior):
    q = ask(posterior, np.array([], dtype=int), np.array([]), n=2, init_user=5, refit=False)
    assert q.folded is None and q.items.size == 2 and q.variance_after < q.variance_before


@pytest.mark.parametrize("kwargs, match", [
    ({"n": 0}, "`n` must be"),
    ({"candidates": [N_ITEMS]}, r"`candidates` must lie in \[0, 30\)"),
    ({"exclude": [0.5]}, "`exclude` must hold inner item indices"),
    ({"answer_prob": np.full(N_ITEMS, 1.5)}, r"`answer_prob` must hold finite values \[0, 1\]"),
    ({"answer_prob": np.ones(3)}, r"shape \(30,\)"),
    ({"weights": np.zeros(N_ITEMS)}, "positive sum"),
    ({"init_user": N_USERS}, "`init_user` must be None or a user index"),
])
def test_bad_arguments_are_named(posterior, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ask(posterior, np.array([], dtype=int), np.array([]), **kwargs)


# -- the chance of an answer ------------------------------------------------------------------------------------
def _graph() -> RatingGraph:
    """4 users x 5 items: u0 {0, 1, 2}, u1 {0, 1}, u2 {2, 3}, u3 {3} (and u0 rates item 0 twice)."""
    users = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3])
    items = np.array([0, 1, 2, 0, 0, 1, 2, 3, 3])
    return RatingGraph.from_pairs(users, items, 4, 5)


@pytest.mark.parametrize("row, items", [(4, [3, 0, 4, 3]), (4, []), (0, [4, 1]), (0, []), (3, [0, 1, 2, 3, 4])])
def test_a_user_replaced_or_added_gives_the_graph_built_from_the_changed_pairs(row, items):
    users, rated = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3]), np.array([0, 1, 2, 0, 0, 1, 2, 3, 3])
    keep = users != row
    expected = RatingGraph.from_pairs(np.concatenate([users[keep], np.full(len(items), row)]),
                                      np.concatenate([rated[keep], items]).astype(np.int64), max(4, row + 1), 5)
    got = _graph().with_user(row, np.array(items, dtype=np.int64))
    assert (got.n_users, got.n_items) == (expected.n_users, expected.n_items)
    for name in ("indptr", "items", "entry_user", "item_indptr", "item_users"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    with pytest.raises(ValueError, match=r"`row` must lie in \[0, 4\], got 6"):
        _graph().with_user(6, np.array([0]))


def test_many_users_replaced_one_after_another_keep_the_graph_built_from_scratch():
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 50, 600), rng.integers(0, 30, 600)
    graph, pairs = RatingGraph.from_pairs(users, items, 50, 30), {u: set() for u in range(50)}
    for u, i in zip(users.tolist(), items.tolist()):
        pairs[u].add(i)
    for step in range(40):
        row = int(rng.integers(0, graph.n_users + 1))
        pairs[row] = set(rng.choice(30, int(rng.integers(0, 12)), replace=True).tolist())
        graph = graph.with_user(row, np.array(sorted(pairs[row]), dtype=np.int64))
    flat = [(u, i) for u, rated in pairs.items() for i in rated]
    expected = RatingGraph.from_pairs(np.array([u for u, _ in flat]), np.array([i for _, i in flat]), len(pairs), 30)
    for name in ("indptr", "items", "entry_user", "item_indptr", "item_users"):
        np.testing.assert_array_equal(getattr(graph, name), getattr(expected, name), err_msg=name)


def test_without_answers_the_chance_of_an_answer_is_the_items_popularity():
    np.testing.assert_allclose(answer_probability(_graph(), np.array([], dtype=np.int64)),
                               [2 / 4, 2 / 4, 2 / 4, 2 / 4, 0.0])


def test_with_answers_it_is_the_co_raters_share_shrunk_towards_popularity():
    """Answered {0}: item 0's raters are u0, u1; of them 2/2 rated item 1, 1/2 item 2, 0 item 3; with one
    answer and strength 1 the estimate is the mean of that and the popularity. Answered {0, 3}: the average of
    P(j | 0) and P(j | 3) (item 3's raters u2, u3: item 2 1/2, item 3 2/2), shrunk with k = 2."""
    graph, pop = _graph(), np.array([0.5, 0.5, 0.5, 0.5, 0.0])
    one = np.array([1.0, 1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(answer_probability(graph, np.array([0])), (one + pop) / 2)
    both = (one + np.array([0.0, 0.0, 0.5, 1.0, 0.0])) / 2
    np.testing.assert_allclose(answer_probability(graph, np.array([3, 0, 0]), strength=1.0), (2 * both + pop) / 3)
    np.testing.assert_allclose(answer_probability(graph, np.array([0]), strength=0.0), one)
    # an item nobody rated in training says nothing: popularity
    np.testing.assert_allclose(answer_probability(graph, np.array([4])), pop)
