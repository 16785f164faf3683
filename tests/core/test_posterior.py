"""MWGPPosterior: prediction API, chunking, noise, cold start (unknown levels), dtype and persistence.

Cold-start moments are checked against a Monte Carlo over the moment-matched Gaussian of the
unknown embedding and bias, using the law of total variance Var[f] = E[Var[f | a]] + Var[E[f | a]],
with the known-pair moments computed by an independent dense numpy whitened-SVGP reference.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.posterior import MWGPPosterior
from tests.core._modules import random_module

JITTER = 1e-8
N_USERS, N_ITEMS, R, M = 6, 5, 2, 7
RATING_MEAN, RATING_STD = 0.5, 2.0


def _random_module(seed: int = 0, q_scale: float | None = None) -> MWGPModule:
    gen = torch.Generator().manual_seed(seed)
    mod = MWGPModule((N_USERS, N_ITEMS), R, M, use_biases=True).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.7)
        if q_scale is None:
            mod.q_sqrt.copy_(torch.tril(mod.q_sqrt) + 1.5 * torch.eye(M, dtype=torch.float64))
        else:  # tight q(v): S = q_scale^2 I
            mod.q_sqrt.copy_(q_scale * torch.eye(M, dtype=torch.float64))
    return mod


def _post(mod: MWGPModule, **kw) -> MWGPPosterior:
    return MWGPPosterior.from_module(mod, rating_mean=RATING_MEAN, rating_std=RATING_STD, jitter=JITTER, **kw)


def _all_pairs() -> np.ndarray:
    return np.array([(u, i) for u in range(N_USERS) for i in range(N_ITEMS)])


class _DenseReference:
    """Whitened SVGP moments of f on standardised ratings, in numpy float64."""

    def __init__(self, mod: MWGPModule) -> None:
        det = {k: v.detach().numpy() for k, v in mod.named_parameters()}
        self.a, self.b = det["embeddings.0"], det["embeddings.1"]
        self.bias_a, self.bias_b = det["biases.0"], det["biases.1"]
        self.c = float(det["global_mean"])
        self.z = det["inducing"]
        self.ls = mod.lengthscale().detach().numpy()
        self.s = float(mod.outputscale().detach())
        self.noise = float(mod.noise().detach())
        chol = np.linalg.cholesky(self.kern(self.z, self.z) + JITTER * np.eye(M))
        self.linv = np.linalg.inv(chol)
        self.q_mean = det["q_mean"]
        self.q_chol = np.tril(det["q_sqrt"])

    def kern(self, x: np.ndarray, z: np.ndarray) -> np.ndarray:
        return self.s * np.exp(-0.5 * (((x[:, None, :] - z[None, :, :]) / self.ls) ** 2).sum(-1))

    def moments(self, a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of f for rows of embeddings a, b and total bias (mean function minus c)."""
        proj = self.kern(np.concatenate([a, b], 1), self.z) @ self.linv.T  # K_nm L^{-T}
        mean = self.c + bias + proj @ self.q_mean
        var = self.s - (proj ** 2).sum(1) + ((proj @ self.q_chol) ** 2).sum(1)
        return mean, var


def _to_rating_scale(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return RATING_MEAN + RATING_STD * mean, RATING_STD ** 2 * var


# -- basic API -----------------------------------------------------------------------------------------

def test_shapes_dtypes_and_known_pairs_match_dense_reference() -> None:
    mod = _random_module()
    post = _post(mod)
    assert post.dtype == torch.float64 and post.n_levels == (N_USERS, N_ITEMS)
    assert post.n_factors == 2 and post.latent_dim == R and post.n_inducing == M
    idx = _all_pairs()
    mean, var = post.predict(idx, include_noise=False)
    assert mean.shape == var.shape == (len(idx),)
    assert mean.dtype == var.dtype == np.float64
    assert (var > 0).all()
    ref = _DenseReference(mod)
    rm, rv = _to_rating_scale(*ref.moments(ref.a[idx[:, 0]], ref.b[idx[:, 1]],
                                           ref.bias_a[idx[:, 0]] + ref.bias_b[idx[:, 1]]))
    np.testing.assert_allclose(mean, rm, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, rv, rtol=1e-8, atol=1e-12)


def test_empty_index_gives_empty_output() -> None:
    mean, var = _post(_random_module()).predict(np.zeros((0, 2), dtype=np.int64))
    assert mean.shape == var.shape == (0,)


def test_float32_module_gives_float32_posterior() -> None:
    mod = _random_module().float()
    post = MWGPPosterior.from_module(mod, rating_mean=0.0, rating_std=1.0, jitter=1e-6)
    assert post.dtype == torch.float32
    mean, var = post.predict(_all_pairs())
    assert mean.dtype == np.float64 and np.isfinite(mean).all() and (var > 0).all()


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


def _mixed_index() -> np.ndarray:
    """Known pairs and every unknown pattern, interleaved."""
    rows = []
    for u in range(N_USERS):
        for i in range(N_ITEMS):
            rows.append((u, i))
            rows.append((-1, i) if (u + i) % 3 == 0 else (u, -1) if (u + i) % 3 == 1 else (-1, -1))
    return np.array(rows)


def test_chunking_invariance() -> None:
    post = _post(_random_module())
    idx = _mixed_index()
    m_default, v_default = post.predict(idx)
    m_chunk, v_chunk = post.predict(idx, chunk_size=3)
    # identical up to BLAS blocking round-off
    np.testing.assert_allclose(m_chunk, m_default, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v_chunk, v_default, rtol=1e-12, atol=1e-12)
    # the fitted chunk_size is used when none is given
    m_small, v_small = _post(_random_module(), chunk_size=1).predict(idx)
    np.testing.assert_allclose(m_small, m_default, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v_small, v_default, rtol=1e-12, atol=1e-12)


def test_include_noise_adds_noise_on_rating_scale() -> None:
    mod = _random_module()
    post = _post(mod)
    idx = _mixed_index()
    m_f, v_f = post.predict(idx, include_noise=False)
    m_y, v_y = post.predict(idx, include_noise=True)
    expected_noise = float(mod.noise().detach()) * RATING_STD ** 2
    assert post.noise_var == pytest.approx(expected_noise, rel=1e-12)
    np.testing.assert_array_equal(m_f, m_y)
    np.testing.assert_allclose(v_f + expected_noise, v_y, rtol=1e-12)


@pytest.mark.parametrize("bad", [np.zeros(4, dtype=np.int64), np.zeros((4, 3), dtype=np.int64),
                                 np.zeros((2, 2, 2), dtype=np.int64)])
def test_wrong_index_shape_raises(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="index"):
        _post(_random_module()).predict(bad)


# -- cold start ---------------------------------------------------------------------------------------

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
    for f, emb in enumerate(mod.embeddings):
        e = emb.detach()
        np.testing.assert_allclose(post.emb_mean[f].numpy(), e.mean(0).numpy(), rtol=1e-12)
        np.testing.assert_allclose(post.emb_var[f].numpy(), e.var(0, unbiased=False).numpy(), rtol=1e-12)
        b = mod.biases[f].detach()
        assert float(post.bias_mean[f]) == pytest.approx(float(b.mean()), rel=1e-12)
        assert float(post.bias_var[f]) == pytest.approx(float(b.var(unbiased=False)), rel=1e-12)


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


# -- conversion and persistence ------------------------------------------------------------------------

def test_to_float32_is_close_to_float64() -> None:
    post64 = _post(_random_module())
    post32 = post64.to(dtype=torch.float32)
    assert post32.dtype == torch.float32 and post64.dtype == torch.float64  # a copy
    idx = _mixed_index()
    m64, v64 = post64.predict(idx)
    m32, v32 = post32.predict(idx)
    np.testing.assert_allclose(m32, m64, rtol=1e-5, atol=1e-5 * RATING_STD)
    np.testing.assert_allclose(v32, v64, rtol=1e-5, atol=1e-5 * RATING_STD ** 2)
    back = post32.to(dtype=torch.float64)
    assert back.dtype == torch.float64


def test_state_dict_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module(), chunk_size=5)
    state = post.state_dict()
    assert all(isinstance(t, torch.Tensor) for t in state["embeddings"])
    restored = MWGPPosterior.from_state_dict(state)
    assert restored.chunk_size == 5 and restored.rating_std == RATING_STD
    idx = _mixed_index()
    for a, b in zip(post.predict(idx), restored.predict(idx)):
        np.testing.assert_array_equal(a, b)


def test_state_dict_missing_entries_raise() -> None:
    state = _post(_random_module()).state_dict()
    del state["embeddings"]
    with pytest.raises(ValueError, match="embeddings"):
        MWGPPosterior.from_state_dict(state)


def test_pickle_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module())
    restored = pickle.loads(pickle.dumps(post))
    assert isinstance(restored, MWGPPosterior)
    idx = _mixed_index()
    for a, b in zip(post.predict(idx), restored.predict(idx)):
        np.testing.assert_array_equal(a, b)
    assert restored.noise_var == post.noise_var


def test_out_of_range_known_index_raises() -> None:
    post = _post(_random_module())
    for bad in ([[N_USERS, 0]], [[0, N_ITEMS]]):
        with pytest.raises(ValueError, match="must lie in"):
            post.predict(np.array(bad))
    with pytest.raises(ValueError, match="-1 = unseen"):
        post.predict(np.array([[-2, 0]]))


def test_negative_chunk_size_is_rejected() -> None:
    post = _post(_random_module())
    with pytest.raises(ValueError, match="chunk_size"):
        post.predict(_all_pairs(), chunk_size=-1)


def test_negative_fitted_chunk_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        _post(_random_module(), chunk_size=-3).predict(_all_pairs())


# -- heteroscedastic noise -----------------------------------------------------------------------------

def _het_module(seed: int = 0) -> MWGPModule:
    return random_module((N_USERS, N_ITEMS), R, M, seed=seed, heteroscedastic=True)


def test_heteroscedastic_noise_is_per_user_and_item_and_integrated_for_unseen_levels() -> None:
    mod = _het_module()
    post = _post(mod)
    pairs = np.array([[0, 0], [0, 1], [3, 1], [-1, 2], [2, -1], [-1, -1]])
    _, var_y = post.predict(pairs)
    _, var_f = post.predict(pairs, include_noise=False)
    noise = (var_y - var_f) / RATING_STD ** 2
    with torch.no_grad():
        sigma2 = float(mod.noise())
        scale = [torch.exp(m + 0.5 * torch.exp(lv)).numpy()
                 for m, lv in zip(mod.noise_offset_mean, mod.noise_offset_logvar)]
        unseen = [sc.mean() for sc in scale]  # E[e^s] over the mixture of the learned q(s)
    want = [sigma2 * (scale[0][u] if u >= 0 else unseen[0]) * (scale[1][i] if i >= 0 else unseen[1])
            for u, i in pairs]
    np.testing.assert_allclose(noise, want, rtol=1e-10)
    assert len(set(np.round(noise[:3], 8))) == 3  # every known pair has its own noise


def test_heteroscedastic_state_round_trip_and_old_states_load_as_homoscedastic() -> None:
    post = _post(_het_module(seed=3))
    pairs = np.array([[u, i] for u in range(-1, N_USERS) for i in range(-1, N_ITEMS)])
    again = MWGPPosterior.from_state_dict(post.state_dict())
    for a, b in zip(post.predict(pairs), again.predict(pairs)):
        np.testing.assert_array_equal(a, b)
    # a state written before per-level noise existed (no noise_scales / noise_scale_unseen entries)
    homo = _post(_random_module(seed=3))
    old = {k: v for k, v in homo.state_dict().items() if k not in ("noise_scales", "noise_scale_unseen")}
    restored = MWGPPosterior.from_state_dict(old)
    for a, b in zip(homo.predict(pairs), restored.predict(pairs)):
        np.testing.assert_array_equal(a, b)


# -- the bilinear term p_u . q_i --------------------------------------------------------------------------
K_MF = 3


def _mf_module(seed: int = 5) -> MWGPModule:
    mod = random_module((N_USERS, N_ITEMS), R, M, seed=seed, scale=0.7, q_diag=1.5, mf_rank=K_MF)
    return mod


def test_bilinear_term_enters_the_mean_of_known_pairs_and_is_integrated_for_unseen_levels() -> None:
    """Known pairs: the dense reference's mean plus p_u . q_i, its variance unchanged (no Laplace variances
    given). Unseen levels: Monte Carlo over the learned population of embeddings, biases and factors."""
    mod = _mf_module()
    post = _post(mod)
    ref = _DenseReference(mod)
    P, Q = (t.detach().numpy() for t in mod.mf_factors)
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


def test_bilinear_state_round_trip_and_old_states_load_without_the_term() -> None:
    pairs = np.array([[u, i] for u in range(-1, N_USERS) for i in range(-1, N_ITEMS)])
    post = _post(_mf_module())
    assert post.mf_rank == K_MF
    again = MWGPPosterior.from_state_dict(post.state_dict())
    for a, b in zip(post.predict(pairs), again.predict(pairs)):
        np.testing.assert_array_equal(a, b)
    plain = _post(_random_module(seed=3))
    assert plain.mf_rank == 0
    old = {k: v for k, v in plain.state_dict().items()
           if k not in ("mf_mean", "mf_var", "mf_factors", "mf_level_var")}  # written before the term existed
    restored = MWGPPosterior.from_state_dict(old)
    assert restored.mf_rank == 0
    for a, b in zip(plain.predict(pairs), restored.predict(pairs)):
        np.testing.assert_array_equal(a, b)


def test_incomplete_bilinear_states_and_variances_are_refused() -> None:
    from mogp_surprise.core.laplace import level_variances

    mod = _mf_module()
    index = torch.as_tensor(_all_pairs())
    with pytest.raises(ValueError, match="pass `mf_reg`"):
        level_variances(mod, index, JITTER, embedding_reg=1.0, bias_reg=1.0)
    spread = level_variances(mod, index, JITTER, embedding_reg=1.0, bias_reg=1.0, mf_reg=2.0)
    with pytest.raises(ValueError, match="variances of its factors"):
        _post(mod, level_variances=spread[:2])
    state = _post(mod, level_variances=spread).state_dict()
    with pytest.raises(ValueError, match="not its two factor tables"):
        MWGPPosterior.from_state_dict({k: v for k, v in state.items() if k != "mf_factors"})
    with pytest.raises(ValueError, match="not those of its bilinear factors"):
        MWGPPosterior.from_state_dict({k: v for k, v in state.items() if k != "mf_level_var"})
