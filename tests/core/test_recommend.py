"""Uncertainty-aware top-N in the core: agrees with brute-force ranking, exclusions, strategies."""
from __future__ import annotations

import numpy as np
import pytest

from mogp_surprise.core.recommend import top_n

from tests.core._modules import random_ratings_posterior

N_USERS, N_ITEMS = 30, 25


@pytest.fixture(scope="module")
def posterior():
    return random_ratings_posterior(N_USERS, N_ITEMS)


def _brute(posterior, user, strategy, kappa):
    index = np.stack([np.full(N_ITEMS, user), np.arange(N_ITEMS)], 1)
    mean, var = posterior.predict(index)
    sign = {"mean": 0.0, "lcb": -1.0, "ucb": 1.0}[strategy]
    return mean + sign * kappa * np.sqrt(var), mean, np.sqrt(var)


@pytest.mark.parametrize("strategy", ["mean", "lcb", "ucb"])
def test_top_n_matches_brute_force(posterior, strategy):
    users = np.array([0, 5, 7, -1])
    res = top_n(posterior, users, n=6, strategy=strategy, kappa=1.5, chunk_size=40)  # several chunks
    for row, user in enumerate(users):
        score, mean, std = _brute(posterior, user, strategy, 1.5)
        expected = np.argsort(-score, kind="stable")[:6]
        np.testing.assert_allclose(res.score[row], score[expected], rtol=1e-5)
        np.testing.assert_allclose(np.sort(res.score[row])[::-1], res.score[row])  # best first
        np.testing.assert_allclose(res.mean[row], mean[res.items[row]], rtol=1e-5)
        np.testing.assert_allclose(res.std[row], std[res.items[row]], rtol=1e-5)


def test_lcb_and_ucb_reorder_by_uncertainty(posterior):
    lcb = top_n(posterior, np.array([3]), n=N_ITEMS, strategy="lcb", kappa=1000.0)
    ucb = top_n(posterior, np.array([3]), n=N_ITEMS, strategy="ucb", kappa=1000.0)
    # with a huge kappa the ranking is by std: LCB puts the most certain item first, UCB the least
    assert lcb.std[0, 0] == pytest.approx(lcb.std[0].min())
    assert ucb.std[0, 0] == pytest.approx(ucb.std[0].max())


def test_exclusions_and_short_lists(posterior):
    banned = np.arange(N_ITEMS - 3)
    res = top_n(posterior, np.array([1, 2]), n=5, exclude=[banned, np.array([], dtype=np.int64)])
    assert set(res.items[0][:3]) == {N_ITEMS - 3, N_ITEMS - 2, N_ITEMS - 1}
    assert (res.items[0][3:] == -1).all() and np.isnan(res.score[0][3:]).all()
    assert (res.items[1] >= 0).all()


@pytest.mark.parametrize("kwargs, match", [
    ({"strategy": "best"}, "strategy"), ({"kappa": -1.0}, "kappa"), ({"kappa": float("nan")}, "kappa"),
    ({"n": 0}, "`n`"), ({"exclude": [np.array([0])]}, "one array per user"),
])
def test_bad_arguments(posterior, kwargs, match):
    with pytest.raises(ValueError, match=match):
        top_n(posterior, np.array([0, 1]), **kwargs)


def test_user_out_of_range(posterior):
    with pytest.raises(ValueError, match="user indices"):
        top_n(posterior, np.array([N_USERS]))


def test_means_alone_equal_the_full_predictive(posterior):
    """Ranking by the mean computes the means without the variances: they are the same numbers, for a known and an unseen user."""
    import torch
    for user in (0, 4, -1):
        mean_only, none = posterior.catalogue_moments(user, variance=False)
        mean, var = posterior.catalogue_moments(user)
        assert none is None
        np.testing.assert_array_equal(mean_only.cpu().numpy(), mean.cpu().numpy())
    res = top_n(posterior, np.array([2, -1]), n=5, strategy="mean")
    np.testing.assert_array_equal(res.score, res.mean)  # reported from the full predictive
    for user in (2, -1):  # each catalogue in one product: the batched values up to rounding
        mean, var = posterior.catalogue_moments(user)
        index = torch.as_tensor(np.stack([np.full(N_ITEMS, user), np.arange(N_ITEMS)], 1))
        ref_mean, ref_var = posterior.moments(index)
        np.testing.assert_allclose(mean.cpu().numpy(), ref_mean.cpu().numpy(), rtol=1e-6)
        np.testing.assert_allclose(var.cpu().numpy(), ref_var.cpu().numpy(), rtol=1e-4)


def test_one_strategy_per_user(posterior):
    users = np.array([0, 1, -1])
    mixed = top_n(posterior, users, n=4, strategy=["lcb", "mean", "ucb"])
    for row, strategy in enumerate(["lcb", "mean", "ucb"]):
        alone = top_n(posterior, users[row:row + 1], n=4, strategy=strategy)
        np.testing.assert_array_equal(mixed.items[row], alone.items[0])
        np.testing.assert_allclose(mixed.score[row], alone.score[0])
    with pytest.raises(ValueError, match="one strategy or one per user"):
        top_n(posterior, users, strategy=["lcb"])


@pytest.mark.parametrize("strategy", ["mean", "lcb", "thompson"])
def test_lists_by_pairs_report_what_predict_pair_gives(posterior, strategy):
    """``by_pairs``: the same items, their mean and std exactly those of one pair's prediction (float64), the batch's
    up to float32 rounding; the score formed from them as in a batch."""
    users = np.array([3, -1])
    pairs = top_n(posterior, users, n=7, strategy=strategy, by_pairs=True, random_state=0,
                  exclude=[np.array([1, 2]), np.array([], dtype=np.int64)])
    batch = top_n(posterior, users, n=7, strategy=strategy, by_pairs=False, random_state=0,
                  exclude=[np.array([1, 2]), np.array([], dtype=np.int64)])
    np.testing.assert_array_equal(pairs.items, batch.items)
    assert not np.isin(pairs.items[0], [1, 2]).any()
    for row, user in enumerate(users):
        one = np.array([posterior.predict_pair((int(user), int(item))) for item in pairs.items[row]])
        np.testing.assert_array_equal(pairs.mean[row], one[:, 0])
        np.testing.assert_array_equal(pairs.std[row], np.sqrt(one[:, 1]))
    np.testing.assert_allclose(pairs.mean, batch.mean, rtol=1e-5)
    np.testing.assert_allclose(pairs.std, batch.std, rtol=1e-4)
    if strategy == "lcb":
        np.testing.assert_array_equal(pairs.score, pairs.mean - pairs.std)
    if strategy == "thompson":  # the draw ranks and scores
        np.testing.assert_array_equal(pairs.score, batch.score)


@pytest.mark.parametrize("strategy", ["mean", "lcb", "ucb"])
def test_every_list_is_in_the_order_of_its_reported_scores(posterior, strategy):
    """The catalogue's float32 moments rank the items, the float64 predictive is reported: neighbours whose
    scores differ by ~1e-5 could come out of order (ML-100K, lcb: 5 swaps in a top 300)."""
    import copy

    import torch

    rounded = copy.copy(posterior)  # its catalogue's moments off by up to 1e-3 (float32's cancellation, magnified)
    noise = torch.Generator().manual_seed(0)

    def catalogue_moments(user, variance=True):
        mean, var = posterior.catalogue_moments(user, variance=variance)
        jitter = lambda x: x + 1e-3 * torch.rand(x.shape, generator=noise, dtype=x.dtype)  # noqa: E731
        return jitter(mean), (jitter(var) if variance else var)

    rounded.catalogue_moments = catalogue_moments
    users = np.arange(-1, N_USERS)
    for kappa in (0.5, 1.0, 2.0):
        res = top_n(rounded, users, n=N_ITEMS, strategy=strategy, kappa=kappa)
        assert (np.diff(res.score, axis=1) <= 0).all()
        np.testing.assert_array_equal(np.sort(res.items, axis=1), np.tile(np.arange(N_ITEMS), (len(users), 1)))


@pytest.mark.parametrize("strategy", ["lcb", "ucb"])
def test_one_list_by_pairs_holds_the_best_items_by_the_float64_scores(posterior, strategy):
    """One user's lcb / ucb list (``recommend``) holds the n best items by the scores ``predict`` gives, although
    the catalogue's float32 variance ranks them with errors (ML-100K, lcb, kappa 2.5: an item 1.7e-4 lower in
    float64 took the 25th place): twice as many are scored pair by pair."""
    import copy

    import torch

    rounded = copy.copy(posterior)
    noise = torch.Generator().manual_seed(1)

    def catalogue_moments(user, variance=True):
        mean, var = posterior.catalogue_moments(user, variance=variance)
        return mean, var + 2e-2 * torch.rand(var.shape, generator=noise, dtype=var.dtype)

    rounded.catalogue_moments = catalogue_moments
    swapped = 0
    for user in range(-1, N_USERS):
        exact = np.array([posterior.predict_pair((user, item)) for item in range(N_ITEMS)])
        score = exact[:, 0] + (1.0 if strategy == "ucb" else -1.0) * 2.5 * np.sqrt(exact[:, 1])
        res = top_n(rounded, np.array([user]), n=5, strategy=strategy, kappa=2.5, by_pairs=True)
        np.testing.assert_array_equal(res.items[0], np.argsort(-score, kind="stable")[:5])
        # the same float64 sum to its last place (torch may fuse it into one multiply-add: 1 ulp on some CPUs)
        np.testing.assert_allclose(res.score[0], score[res.items[0]], rtol=0, atol=1e-12)
        plain = top_n(rounded, np.array([user]), n=5, strategy=strategy, kappa=2.5)  # the batch: float32's ranking
        swapped += set(plain.items[0]) != set(res.items[0])
    assert swapped  # the jitter did move items across the edge


def test_kappa_takes_any_real_number(posterior):
    expected = top_n(posterior, np.array([2]), n=5, strategy="lcb", kappa=2.0)
    for kappa in (np.int64(2), np.float32(2), 2):
        np.testing.assert_array_equal(top_n(posterior, np.array([2]), n=5, strategy="lcb", kappa=kappa).items,
                                      expected.items)
    for bad in (np.bool_(True), True, "2", np.nan, 1e39, -1):
        with pytest.raises(ValueError, match=r"`kappa` must be None or a number in \[0, 1e\+30\]"):
            top_n(posterior, np.array([2]), n=5, strategy="lcb", kappa=bad)


def test_users_and_exclude_are_checked(posterior):
    """Float or 2-D users, and excluded items outside the catalogue, are refused (-1 banned the last item, 0.9 was
    read as user 0, 99 ended in torch's IndexError)."""
    for users, match in ((np.array([0.9]), "ints of shape"), (np.array([[0, 1]]), r"got shape \(1, 2\)")):
        with pytest.raises(ValueError, match=f"`users` must be inner user indices.*{match}"):
            top_n(posterior, users, n=3)
    for banned in (np.array([-1]), np.array([N_ITEMS])):
        with pytest.raises(ValueError, match=rf"`exclude` holds inner item indices outside \[0, {N_ITEMS}\)"):
            top_n(posterior, np.array([0]), n=3, exclude=[banned])
    with pytest.raises(ValueError, match="`exclude` must hold arrays of inner item indices"):
        top_n(posterior, np.array([0]), n=3, exclude=[np.array([1.5])])
    assert top_n(posterior, np.array([0]), n=3, exclude=[[]]).items.shape == (1, 3)


def test_lists_beyond_memory_name_n_and_the_users(posterior, monkeypatch):
    full = np.full

    def limited(shape, *args, **kwargs):  # as if the machine had room for 100 entries
        if int(np.prod(shape)) > 100:
            raise MemoryError("Unable to allocate")
        return full(shape, *args, **kwargs)

    monkeypatch.setattr(np, "full", limited)
    with pytest.raises(MemoryError, match=r"31 lists of 25 items \(n=1000000000\) need .* GiB for the result alone"):
        top_n(posterior, np.arange(-1, N_USERS), n=10 ** 9)


def test_each_users_catalogue_temporaries_are_handed_back(posterior, monkeypatch):
    """After every user's catalogue, the freed temporaries go back to the system (``memory.release_freed``, which
    acts from a few megabytes on: a heap grown by 10 MB a user reached 10 GB over 1,000 users of 30,000 items)."""
    from mogp_surprise.core import recommend

    seen = []
    monkeypatch.setattr(recommend, "release_freed", seen.append)
    top_n(posterior, np.arange(3), n=2, strategy="lcb")
    n_items, m = posterior.n_levels[1], posterior.state.gp.inducing.shape[0]
    assert seen == [n_items * m * 8] * 3
