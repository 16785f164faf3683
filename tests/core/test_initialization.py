"""Initial values (mogp_surprise.core.initialization): the seeded randomized SVD against LAPACK's SVD, and
the PCA start, bilinear factors, inducing points and lengthscales of ``initialise``."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from mogp_surprise.core import initialization
from mogp_surprise.core.errors import MWGPNumericalWarning
from mogp_surprise.core.initialization import (INIT_SCALE, SPREAD_SHARE, inducing_rows, initialise,
                                               randomized_svd)
from mogp_surprise.core.terms.bilinear import MF_INIT_SCALE
from tests.core._modules import features, module, table

N_USERS, N_ITEMS = 40, 30


def _low_rank_ratings(rank: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Every (user, item) pair of a double-centred rank-``rank`` matrix (so the centring in ``initialise``
    keeps it), as (index, y) and the dense matrix."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(N_USERS, rank)), rng.normal(size=(N_ITEMS, rank))
    dense = (a - a.mean(0)) @ (b - b.mean(0)).T
    users, items = np.meshgrid(np.arange(N_USERS), np.arange(N_ITEMS), indexing="ij")
    index = torch.as_tensor(np.stack([users.ravel(), items.ravel()], 1))
    return index, torch.as_tensor(dense.ravel()), dense


def test_randomized_svd_recovers_the_leading_singular_triplets_and_leaves_the_global_rng_alone() -> None:
    rng = np.random.default_rng(1)
    dense = rng.normal(size=(50, 3)) @ np.diag([5.0, 2.0, 1.0]) @ rng.normal(size=(3, 20)) \
        + 1e-3 * rng.normal(size=(50, 20))
    sparse = torch.as_tensor(dense).to_sparse()
    state = torch.get_rng_state()
    u, s, v = randomized_svd(sparse, 3, torch.Generator().manual_seed(0))
    assert torch.equal(torch.get_rng_state(), state)
    want_u, want_s, want_vh = np.linalg.svd(dense, full_matrices=False)
    np.testing.assert_allclose(s.numpy(), want_s[:3], rtol=1e-8)
    # the same singular vectors up to sign
    np.testing.assert_allclose(np.abs((u.numpy() * want_u[:, :3]).sum(0)), 1.0, rtol=1e-8)
    np.testing.assert_allclose(np.abs((v.numpy() * want_vh[:3].T).sum(0)), 1.0, rtol=1e-8)
    again = randomized_svd(sparse, 3, torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip((u, s, v), again))


def test_pca_start_reproduces_a_low_rank_rating_matrix() -> None:
    """The user and item embeddings' inner products are proportional to the centred ratings, each table is
    scaled to an overall std of INIT_SCALE with centred columns."""
    index, y, dense = _low_rank_ratings()
    mod = module((N_USERS, N_ITEMS), 2, 8).double()
    initialise(mod, index, y, "pca", torch.Generator().manual_seed(0))
    a, b = (table(mod, "gp_input", f"embedding_{f}").detach().numpy() for f in range(2))
    product = a @ b.T
    scale = (product * dense).sum() / (dense * dense).sum()
    np.testing.assert_allclose(product, scale * dense, atol=1e-8 * np.abs(product).max())
    for values in (a, b):
        assert values.std(ddof=1) == pytest.approx(INIT_SCALE, rel=1e-10)  # torch.std: unbiased
        np.testing.assert_allclose(values.mean(0), 0.0, atol=1e-12)


def test_initial_factors_inducing_points_and_lengthscales() -> None:
    index, y, _ = _low_rank_ratings()
    r, m = 3, 16
    mod = module((N_USERS, N_ITEMS), r, m, mf_rank=4).double()
    initialise(mod, index, y, "random", torch.Generator().manual_seed(2))
    assert table(mod, "bilinear", "factor_0").abs().max() == 0  # p_u = 0: the mean function starts as the bias model
    assert float(table(mod, "bilinear", "factor_1").detach().std()) == pytest.approx(MF_INIT_SCALE, rel=0.25)
    assert float(table(mod, "gp_input", "embedding_0").detach().std()) == pytest.approx(INIT_SCALE, rel=0.2)
    np.testing.assert_allclose(mod.gp.lengthscale().detach().numpy(), INIT_SCALE * math.sqrt(2 * r), rtol=1e-12)
    # every inducing point is a training tuple's GP input plus a little noise (0.05 * INIT_SCALE per entry)
    inducing = mod.gp.inducing.detach()
    nearest = torch.cdist(inducing, features(mod, index).detach()).min(1).values
    assert float(nearest.max()) < 0.05 * INIT_SCALE * 5 * math.sqrt(2 * r)
    assert float(torch.cdist(inducing, inducing).add(torch.eye(m)).min()) > 0
    same = module((N_USERS, N_ITEMS), r, m, mf_rank=4).double()
    initialise(same, index, y, "random", torch.Generator().manual_seed(2))
    assert all(torch.equal(p, q) for p, q in zip(mod.parameters(), same.parameters()))


def _one_heavy_user(seed: int = 0) -> torch.Tensor:
    """4,500 ratings: user 0 has 3,000 of them, 299 users share the rest, over 4,000 items."""
    gen = torch.Generator().manual_seed(seed)
    users = torch.cat([torch.zeros(3000, dtype=torch.long), torch.randint(1, 300, (1500,), generator=gen)])
    return torch.stack([users, torch.randint(0, 4000, (4500,), generator=gen)], 1)


def test_no_level_fills_the_inducing_points() -> None:
    """At most m // SPREAD_SHARE inducing points share a level (a random draw gave the heavy user about 85 of 128);
    where no level is that frequent the rows are a random permutation's first m, as before."""
    index = _one_heavy_user()
    rows = inducing_rows(index, 128, torch.Generator().manual_seed(1))
    assert rows.unique().numel() == 128
    assert int(torch.bincount(index[rows, 0]).max()) == 128 // SPREAD_SHARE
    assert int(torch.bincount(index[rows, 1]).max()) <= 128 // SPREAD_SHARE
    gen = torch.Generator().manual_seed(2)
    spread = torch.stack([torch.randint(0, 943, (80000,), generator=gen),
                          torch.randint(0, 1682, (80000,), generator=gen)], 1)
    want = torch.randperm(80000, generator=torch.Generator().manual_seed(1))[:128]
    assert torch.equal(inducing_rows(spread, 128, torch.Generator().manual_seed(1)), want)


@pytest.mark.parametrize("spread", [True, False], ids=["inducing-rows-spread", "random-rows-singular"])
def test_one_heavy_user_leaves_kmm_factorable_in_float32(monkeypatch, spread) -> None:
    """The PCA start of the data above in float32: with the inducing rows spread K_mm factorises with the default
    jitter; with random rows (the check that this data shows the problem) it did not, and the fit warned."""
    index = _one_heavy_user()
    y = torch.randn(index.shape[0], generator=torch.Generator().manual_seed(3))
    if not spread:
        monkeypatch.setattr(initialization, "inducing_rows",
                            lambda index, m, gen: torch.randperm(index.shape[0], generator=gen)[:m])
    mod = module((300, 4000), 8, 128)
    initialise(mod, index, y, "pca", torch.Generator().manual_seed(4))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mod.gp.whitened_terms(1e-5)
    assert bool([w for w in record if issubclass(w.category, MWGPNumericalWarning)]) is not spread


def _ml_spread(means, noise, floor):
    """t2 maximising the likelihood of level means ~ N(mu, t2 + noise) (mu profiled out), by scipy's bounded
    scalar search over log t2: an independent reference for the fixed point of ``bias._variances``."""
    from scipy.optimize import minimize_scalar

    def nll(log_t2):
        v = np.exp(log_t2) + noise
        mu = np.sum(means / v) / np.sum(1 / v)
        return 0.5 * np.sum(np.log(v) + (means - mu) ** 2 / v)

    top = np.log(10 * np.var(means) + floor)
    best = minimize_scalar(nll, bounds=(np.log(floor), top), method="bounded", options={"xatol": 1e-12})
    return float(np.exp(best.x)) if nll(best.x) < nll(np.log(floor)) else floor


def _reference_bias_start(index, y, n_levels, sweeps=5, spreads=None):
    """The biases' empirical-Bayes start written out in numpy: per factor, level means of the residual shrunk
    by n / (n + s2 / t2), s2 the within-level residual variance pooled over the factors (each factor's squares
    about its levels' means, from its latest residual, on N - L degrees of freedom each; a factor is passed over
    while no factor has any), t2 the maximum-likelihood variance of the level means' true values given s2
    (:func:`_ml_spread`) (each factor's t2 of the last sweep appended to ``spreads``, when given)."""
    values = [np.zeros(n) for n in n_levels]
    last = {f: 1e-4 for f in range(len(n_levels))}
    squares = {}
    for _ in range(sweeps):
        for f, n_f in enumerate(n_levels):
            residual = y - sum(values[g][index[:, g]] for g in range(len(n_levels)) if g != f)
            counts = np.bincount(index[:, f], minlength=n_f).astype(float)
            sums = np.bincount(index[:, f], weights=residual, minlength=n_f)
            seen = counts > 0
            means = sums[seen] / counts[seen]
            squares[f] = (np.sum((residual - sums[index[:, f]] / counts[index[:, f]]) ** 2), len(y) - seen.sum())
            dof = sum(d for _, d in squares.values())
            if not dof:
                continue
            within = sum(q for q, _ in squares.values()) / dof
            last[f] = _ml_spread(means, within / counts[seen], 1e-6 * within)
            values[f] = sums / (counts + within / last[f])
    if spreads is not None:
        spreads.extend(last[f] for f in range(len(n_levels)))
    return values


def test_biases_start_at_their_empirical_bayes_least_squares_values():
    from mogp_surprise.core.initialization import InitContext
    from mogp_surprise.core.terms.bias import Bias

    rng = np.random.default_rng(0)
    n_levels = (120, 60)
    true_u, true_i = rng.normal(0, 0.5, n_levels[0]), rng.normal(0, 0.5, n_levels[1])
    index = np.stack([rng.integers(0, n_levels[0], 3000), rng.integers(0, n_levels[1], 3000)], 1)
    y = true_u[index[:, 0]] + true_i[index[:, 1]] + rng.normal(0, 0.7, 3000)
    y[index[:, 1] == 7] = 2.0  # a constant item: its ratings agree, so it starts near their value
    term = Bias(n_levels, {"bias_reg": 1.0}).double()
    init = InitContext(torch.as_tensor(index), torch.as_tensor(y), n_levels, "pca", torch.Generator(),
                       torch.float64, torch.device("cpu"))
    term.initialise_from_data(init)
    expected = _reference_bias_start(index, y, n_levels)
    np.testing.assert_allclose(term.bias_0.detach().numpy(), expected[0], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(term.bias_1.detach().numpy(), expected[1], rtol=1e-7, atol=1e-10)
    assert np.corrcoef(expected[0], true_u)[0, 1] > 0.9
    implied = term.bias_1[7].item() + term.bias_0.detach().numpy()[index[index[:, 1] == 7, 0]].mean()
    assert abs(implied - 2.0) < 0.2


def test_with_one_rating_per_user_the_items_biases_are_learned_and_the_users_shrunk():
    """Every user rated one item (2,000 users, 50 items): the users' own levels say nothing of the noise (N - L =
    0), so their s2 comes from the items' within-level squares. Alone they took s2 = 0: the users' biases took every
    residual (t2 = the ratings' variance), the items' started at 0 under a prior of precision 1e4, and a new user
    was predicted the global mean for every item (RMSE 1.12 against BaselineOnly's 0.74-0.76 on such data)."""
    from mogp_surprise.core.initialization import InitContext
    from mogp_surprise.core.terms.bias import AUTO_PRECISION_MAX, Bias

    rng = np.random.default_rng(1)
    n_levels = (2000, 50)
    true_i = rng.normal(0, 1.0, n_levels[1])
    index = np.stack([np.arange(2000), rng.integers(0, 50, 2000)], 1)
    y = true_i[index[:, 1]] + rng.normal(0, 0.7, 2000)
    term = Bias(n_levels, {"bias_reg": "auto"}).double()
    init = InitContext(torch.as_tensor(index), torch.as_tensor(y), n_levels, "pca", torch.Generator(),
                       torch.float64, torch.device("cpu"))
    term.initialise_from_data(init)
    spreads = []
    expected = _reference_bias_start(index, y, n_levels, spreads=spreads)
    np.testing.assert_allclose(term.bias_1.detach().numpy(), expected[1], rtol=1e-7, atol=1e-10)
    items = term.bias_1.detach().numpy()
    assert np.corrcoef(items, true_i)[0, 1] > 0.95 and abs(items.std() - true_i.std()) < 0.15
    assert np.abs(term.bias_0.detach().numpy()).max() < 0.05
    precision = term.options["bias_precision"]
    assert precision[0] == AUTO_PRECISION_MAX and 0.7 < precision[1] < 1.4, precision
    np.testing.assert_allclose(precision[1], 1 / spreads[1], rtol=1e-6)


def test_the_variances_of_the_bias_start_are_unbiased_with_few_ratings_a_level():
    """s2 on N - L degrees of freedom and t2 by maximum likelihood: with 4 ratings a level both near the truth
    (dividing the within-level squares by N gave s2 = 0.75 and t2 = 0.31 for these 1 and 0.25)."""
    from mogp_surprise.core.terms.bias import _variances

    rng = np.random.default_rng(5)
    levels = np.repeat(np.arange(5000), 4)
    residual = rng.normal(0, 0.5, 5000)[levels] + rng.normal(0, 1.0, levels.size)
    lv = torch.as_tensor(levels)
    sums = torch.zeros(5000, dtype=torch.float64).index_add_(0, lv, torch.as_tensor(residual))
    within, spread = _variances(torch.as_tensor(residual), sums, torch.full((5000,), 4.0, dtype=torch.float64), lv)
    assert abs(within - 1.0) < 0.03 and abs(spread - 0.25) < 0.03, (within, spread)


def test_the_spread_of_the_biases_is_the_maximum_likelihood_one():
    """Equal counts: the closed form mean((mean - grand mean)^2) - s2 / n. Unequal counts: scipy's maximum of the
    same likelihood, and nearer the truth than the moments estimate, which weighs a level of one rating as one of
    fifty (over 40 draws, mean squared error of t2 against the true 0.09)."""
    from mogp_surprise.core.terms.bias import _variances

    def estimate(counts, rng):
        levels = np.repeat(np.arange(len(counts)), counts)
        residual = rng.normal(0, 0.3, len(counts))[levels] + rng.normal(0, 1.0, levels.size)
        lv = torch.as_tensor(levels)
        sums = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, lv, torch.as_tensor(residual))
        n = torch.as_tensor(counts, dtype=torch.float64)
        within, spread = _variances(torch.as_tensor(residual), sums, n, lv)
        means = sums.numpy() / counts
        moments = max(means.var(ddof=1) - within * np.mean(1 / counts), 1e-6 * within)
        return within, spread, means, moments

    rng = np.random.default_rng(3)
    within, spread, means, _ = estimate(np.full(300, 5), rng)
    assert spread == pytest.approx(np.mean((means - means.mean()) ** 2) - within / 5, rel=1e-6)
    counts = np.where(np.arange(200) % 4 == 0, 50, 1)
    errors = []
    for _ in range(40):
        within, spread, means, moments = estimate(counts, rng)
        assert spread == pytest.approx(_ml_spread(means, within / counts, 1e-6 * within), rel=1e-6)
        errors.append(((spread - 0.09) ** 2, (moments - 0.09) ** 2))
    ml, mom = np.mean(errors, axis=0)
    assert ml < 0.7 * mom, (ml, mom)


def test_bias_reg_auto_sets_each_factors_prior_to_the_estimated_variance_of_its_biases():
    """bias_reg="auto": each factor's prior precision is 1 / t2 of the closed-form start's last sweep (the reference
    above), near 1 / the true variance of the biases on data that determine it; kept in the options (saved)."""
    from mogp_surprise.core.initialization import InitContext
    from mogp_surprise.core.terms.bias import AUTO_PRECISION_MAX, Bias

    rng = np.random.default_rng(1)
    n_levels = (400, 300)
    true_u, true_i = rng.normal(0, 0.5, n_levels[0]), rng.normal(0, 1.0, n_levels[1])
    index = np.stack([rng.integers(0, n_levels[0], 40_000), rng.integers(0, n_levels[1], 40_000)], 1)
    y = true_u[index[:, 0]] + true_i[index[:, 1]] + rng.normal(0, 0.8, 40_000)
    term = Bias(n_levels, {"bias_reg": "auto"}).double()
    assert [term.specs[f"bias_{f}"].prior_precision for f in range(2)] == [1.0, 1.0]  # before the data are seen
    init = InitContext(torch.as_tensor(index), torch.as_tensor(y), n_levels, "pca", torch.Generator(),
                       torch.float64, torch.device("cpu"))
    term.initialise_from_data(init)
    spreads: list[float] = []
    _reference_bias_start(index, y, n_levels, spreads=spreads)
    precisions = [term.specs[f"bias_{f}"].prior_precision for f in range(2)]
    np.testing.assert_allclose(precisions, [1 / t2 for t2 in spreads], rtol=1e-7)
    np.testing.assert_allclose(precisions, [1 / true_u.var(), 1 / true_i.var()], rtol=0.1)
    assert term.options["bias_precision"] == precisions
    assert term.prior_precision(0) == precisions[0]
    # a definition rebuilt from the saved options has the same priors
    again = Bias(n_levels, dict(term.options), parameters=False)
    assert [again.specs[f"bias_{f}"].prior_precision for f in range(2)] == precisions
    # a factor without biases (every user alike): its estimate is capped, not infinite
    flat = Bias(n_levels, {"bias_reg": "auto"}).double()
    flat.initialise_from_data(InitContext(torch.as_tensor(index), torch.as_tensor(true_i[index[:, 1]]), n_levels,
                                          "pca", torch.Generator(), torch.float64, torch.device("cpu")))
    assert flat.specs["bias_0"].prior_precision == AUTO_PRECISION_MAX
    # a number is used as given and nothing is estimated
    fixed = Bias(n_levels, {"bias_reg": 2.5}).double()
    fixed.initialise_from_data(init)
    assert [fixed.specs[f"bias_{f}"].prior_precision for f in range(2)] == [2.5, 2.5]
    assert "bias_precision" not in fixed.options
