"""Predictive moments of every pattern of known and unseen levels (mogp_surprise.core.predictive).

Cold-start moments are checked against a Monte Carlo over the moment-matched Gaussian of the
unknown embedding and bias, using the law of total variance Var[f] = E[Var[f | a]] + Var[E[f | a]],
with the known-pair moments computed by an independent dense numpy whitened-SVGP reference
(``test_posterior._DenseReference``).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.terms import Table, Term
from tests.core._modules import population, table
from tests.core.test_posterior import (N_ITEMS, RATING_MEAN, RATING_STD, _all_pairs, _DenseReference,
                                       _mf_module, _mixed_index, _post, _random_module)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_prediction_does_not_depend_on_the_other_rows(dtype) -> None:
    """Every row gets bit-identical moments alone, in chunks of any size, or in another order (float32
    too: BLAS sums in another order for products with few rows, which the row blocks prevent)."""
    post = _post(_random_module(), chunk_size=7).to(dtype=dtype)
    index = _mixed_index()
    mean, var = post.predict(index)
    for size in (1, 5, 64, 100):
        parts = [post.predict(index[k:k + size]) for k in range(0, len(index), size)]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), mean)
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), var)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(index))
    m2, v2 = post.predict(index[order], chunk_size=1000)
    np.testing.assert_array_equal(m2, mean[order])
    np.testing.assert_array_equal(v2, var[order])
    big = index[rng.integers(0, len(index), 5000)]  # several row blocks, and blocks of every padded size
    m3, v3 = post.predict(big, chunk_size=3000)
    for size in (1, 63, 65, 1023, 1025):
        start = int(rng.integers(0, len(big) - size))
        m4, v4 = post.predict(big[start:start + size])
        np.testing.assert_array_equal(m4, m3[start:start + size])
        np.testing.assert_array_equal(v4, v3[start:start + size])


N_MC = 200_000


def _mc_cold_start(mod: MWGPModule, user: int | None, item: int | None, seed: int) -> tuple[float, float]:
    """Monte Carlo moments (rating scale, latent f) when user and/or item is None (unknown)."""
    ref = _DenseReference(mod)
    rng = np.random.default_rng(seed)

    def draw(emb: np.ndarray, bias: np.ndarray, known: int | None) -> tuple[np.ndarray, np.ndarray]:
        if known is not None:
            return np.repeat(emb[known][None], N_MC, 0), np.full(N_MC, bias[known])
        # the moment-matched Gaussian of the learned embeddings and biases (population moments)
        e = emb.mean(0) + emb.std(0) * rng.standard_normal((N_MC, emb.shape[1]))
        return e, bias.mean() + bias.std() * rng.standard_normal(N_MC)

    a, ba = draw(ref.a, ref.bias_a, user)
    b, bb = draw(ref.b, ref.bias_b, item)
    cond_mean, cond_var = ref.moments(a, b, ba + bb)
    # law of total variance
    mean, var = cond_mean.mean(), cond_var.mean() + cond_mean.var()
    return RATING_MEAN + RATING_STD * mean, RATING_STD ** 2 * var


@pytest.mark.parametrize("user, item", [(None, 2), (3, None), (None, None)],
                         ids=["unknown-user", "unknown-item", "both-unknown"])
def test_cold_start_matches_monte_carlo(user, item) -> None:
    mod = _random_module(seed=4)
    post = _post(mod)
    idx = np.array([[-1 if user is None else user, -1 if item is None else item]])
    mean, var = post.predict(idx, include_noise=False)
    mc_mean, mc_var = _mc_cold_start(mod, user, item, seed=7)
    # MC standard error of the mean is ~sqrt(var / 2e5) ~ 0.2 % of the predictive sd
    assert abs(mean[0] - mc_mean) <= 0.02 * max(abs(mc_mean), np.sqrt(mc_var))
    assert var[0] == pytest.approx(mc_var, rel=0.02)


def test_cold_start_uses_moment_matched_embedding_distribution() -> None:
    mod = _random_module(seed=4)
    post = _post(mod)
    for f in range(2):
        e = table(mod, "gp_input", f"embedding_{f}").detach()
        emb_mean, emb_var = population(post, "gp_input", f"embedding_{f}")
        np.testing.assert_allclose(emb_mean.numpy(), e.mean(0).numpy(), rtol=1e-12)
        np.testing.assert_allclose(emb_var.numpy(), e.var(0, unbiased=False).numpy(), rtol=1e-12)
        b = table(mod, "bias", f"bias_{f}").detach()
        bias_mean, bias_var = population(post, "bias", f"bias_{f}")
        assert float(bias_mean) == pytest.approx(float(b.mean()), rel=1e-12)
        assert float(bias_var) == pytest.approx(float(b.var(unbiased=False)), rel=1e-12)


def test_unknown_user_is_more_uncertain_than_known_pairs_when_q_is_tight() -> None:
    post = _post(_random_module(seed=5, q_scale=0.05))
    _, v_known = post.predict(_all_pairs(), include_noise=False)
    _, v_cold = post.predict(np.array([[-1, i] for i in range(N_ITEMS)]), include_noise=False)
    _, v_both = post.predict(np.array([[-1, -1]]), include_noise=False)
    assert v_cold.min() > v_known.mean()
    assert v_both[0] > v_known.mean()


def test_mixed_unknown_patterns_equal_separate_calls() -> None:
    post = _post(_random_module(seed=6))
    idx = _mixed_index()
    m_mixed, v_mixed = post.predict(idx)
    m_sep, v_sep = np.empty(len(idx)), np.empty(len(idx))
    patterns = (idx < 0).astype(int) @ np.array([1, 2])
    assert len(np.unique(patterns)) == 4
    for p in np.unique(patterns):
        rows = np.flatnonzero(patterns == p)
        m_sep[rows], v_sep[rows] = post.predict(idx[rows])
    np.testing.assert_allclose(m_mixed, m_sep, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v_mixed, v_sep, rtol=1e-12, atol=1e-12)
    # unknown rows do not depend on which known index sits next to them
    assert len(np.unique(np.round(m_mixed[patterns == 3], 12))) == 1


def test_bilinear_term_enters_the_mean_of_known_pairs_and_is_integrated_for_unseen_levels() -> None:
    """Known pairs: the dense reference's mean plus p_u . q_i, its variance unchanged (no Laplace variances
    given). Unseen levels: Monte Carlo over the learned population of embeddings, biases and factors."""
    mod = _mf_module()
    post = _post(mod)
    ref = _DenseReference(mod)
    P, Q = (table(mod, "bilinear", f"factor_{f}").detach().numpy() for f in range(2))
    pairs = _all_pairs()
    u, i = pairs[:, 0], pairs[:, 1]
    mean, var = ref.moments(ref.a[u], ref.b[i], ref.bias_a[u] + ref.bias_b[i] + (P[u] * Q[i]).sum(1))
    got = post.predict(pairs, include_noise=False)
    np.testing.assert_allclose(got[0], RATING_MEAN + RATING_STD * mean, rtol=1e-10)
    np.testing.assert_allclose(got[1], RATING_STD ** 2 * var, rtol=1e-10)
    assert float(np.abs((P[u] * Q[i]).sum(1)).max()) > 0.1  # the term is not negligible here
    rng = np.random.default_rng(11)
    for user, item in ((None, 2), (3, None), (None, None)):
        def draw(emb, bias, factors, known):
            if known is not None:
                return (np.repeat(emb[known][None], N_MC, 0), np.full(N_MC, bias[known]),
                        np.repeat(factors[known][None], N_MC, 0))
            return (emb.mean(0) + emb.std(0) * rng.standard_normal((N_MC, emb.shape[1])),
                    bias.mean() + bias.std() * rng.standard_normal(N_MC),
                    factors.mean(0) + factors.std(0) * rng.standard_normal((N_MC, factors.shape[1])))
        a, ba, p = draw(ref.a, ref.bias_a, P, user)
        b, bb, q = draw(ref.b, ref.bias_b, Q, item)
        cond_mean, cond_var = ref.moments(a, b, ba + bb + (p * q).sum(1))
        mc_mean = RATING_MEAN + RATING_STD * cond_mean.mean()
        mc_var = RATING_STD ** 2 * (cond_var.mean() + cond_mean.var())
        idx = np.array([[-1 if user is None else user, -1 if item is None else item]])
        m, v = post.predict(idx, include_noise=False)
        assert abs(m[0] - mc_mean) <= 0.02 * np.sqrt(mc_var), (user, item)
        assert v[0] == pytest.approx(mc_var, rel=0.02), (user, item)


def test_population_is_the_spread_of_the_learned_values_plus_their_mean_laplace_variance() -> None:
    """Law of total variance, per factor and dimension; the spread is floored, the Laplace term is not."""
    gen = torch.Generator().manual_seed(1)
    f64 = {"generator": gen, "dtype": torch.float64}
    tables = [torch.randn(6, 3, **f64), torch.randn(4, 3, **f64)]
    tables[1][:, 2] = 0.25  # no spread in one dimension
    laplace = [torch.rand(6, 3, **f64), torch.rand(4, 3, **f64)]
    term = Term.__new__(Term)  # the default population of any term's table (no term needed to hold it)
    spec = Table("t", 0, 3, population_floor=1e-3)
    for f, t in enumerate(tables):
        mean, var = Term.population(term, spec, t, None)
        np.testing.assert_allclose(mean.numpy(), t.numpy().mean(0), rtol=1e-12)
        np.testing.assert_allclose(var.numpy(), np.maximum(t.numpy().var(0), 1e-3), rtol=1e-12)
        _, total = Term.population(term, spec, t, laplace[f])
        want = np.maximum(t.numpy().var(0), 1e-3) + laplace[f].numpy().mean(0)
        np.testing.assert_allclose(total.numpy(), want, rtol=1e-12)
