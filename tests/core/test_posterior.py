"""MWGPPosterior: construction, prediction API, chunking, noise and dtype, against an independent dense
numpy whitened-SVGP reference (also used by ``test_predictive.py`` and ``test_posterior_state.py``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.posterior import MWGPPosterior
from tests.core._modules import module, offsets, random_module

JITTER = 1e-8
N_USERS, N_ITEMS, R, M = 6, 5, 2, 7
RATING_MEAN, RATING_STD = 0.5, 2.0


def _random_module(seed: int = 0, q_scale: float | None = None) -> MWGPModule:
    gen = torch.Generator().manual_seed(seed)
    mod = module((N_USERS, N_ITEMS), R, M, use_biases=True).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.7)
        if q_scale is None:
            mod.gp.q_sqrt.copy_(torch.tril(mod.gp.q_sqrt) + 1.5 * torch.eye(M, dtype=torch.float64))
        else:  # tight q(v): S = q_scale^2 I
            mod.gp.q_sqrt.copy_(q_scale * torch.eye(M, dtype=torch.float64))
    return mod


def _post(mod: MWGPModule, **kw) -> MWGPPosterior:
    return MWGPPosterior.from_module(mod, rating_mean=RATING_MEAN, rating_std=RATING_STD, jitter=JITTER, **kw)


def _all_pairs() -> np.ndarray:
    return np.array([(u, i) for u in range(N_USERS) for i in range(N_ITEMS)])


class _DenseReference:
    """Whitened SVGP moments of f on standardised ratings, in numpy float64."""

    def __init__(self, mod: MWGPModule) -> None:
        det = {k: v.detach().numpy() for k, v in mod.named_parameters()}
        self.a, self.b = det["terms.0.embedding_0"], det["terms.0.embedding_1"]
        self.bias_a, self.bias_b = det["terms.1.bias_0"], det["terms.1.bias_1"]
        self.c = float(det["global_mean"])
        self.z = det["gp.inducing"]
        self.ls = mod.gp.lengthscale().detach().numpy()
        self.s = float(mod.gp.outputscale().detach())
        self.noise = float(mod.noise_variance().detach())
        chol = np.linalg.cholesky(self.kern(self.z, self.z) + JITTER * np.eye(M))
        self.linv = np.linalg.inv(chol)
        self.q_mean = det["gp.q_mean"]
        self.q_chol = np.tril(det["gp.q_sqrt"])

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
    expected_noise = float(mod.noise_variance().detach()) * RATING_STD ** 2
    assert post.noise_var == pytest.approx(expected_noise, rel=1e-12)
    np.testing.assert_array_equal(m_f, m_y)
    np.testing.assert_allclose(v_f + expected_noise, v_y, rtol=1e-12)


@pytest.mark.parametrize("bad", [np.zeros(4, dtype=np.int64), np.zeros((4, 3), dtype=np.int64),
                                 np.zeros((2, 2, 2), dtype=np.int64)])
def test_wrong_index_shape_raises(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="index"):
        _post(_random_module()).predict(bad)


# -- cold start ---------------------------------------------------------------------------------------


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


def test_to_takes_dtype_names_and_refuses_what_it_cannot_be() -> None:
    post = _post(_random_module())
    assert post.to(dtype="float32").dtype == torch.float32 and post.to(device="cpu").dtype == torch.float64
    assert post.to(device=torch.device("cpu", 0)).device.type == "cpu"
    for dtype in (torch.int64, "int64", "half"):
        with pytest.raises(ValueError, match=r"`dtype` must be one of \('float32', 'float64'\)"):
            post.to(dtype=dtype)
    with pytest.raises(ValueError, match="`device` must be one of"):
        post.to(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="`device`='cuda' was requested but CUDA is not available"):
            post.to(device="cuda")


def test_include_noise_must_be_a_bool() -> None:
    post = _post(_random_module())
    for call in (lambda: post.predict(_mixed_index(), include_noise="no"),
                 lambda: post.predict_pair((0, 1), include_noise="no"), lambda: post.predict_pair((0, 1), 1)):
        with pytest.raises(ValueError, match="`include_noise` must be True or False"):
            call()
    with pytest.raises(ValueError, match="`index` must hold 2 inner indices, got 3"):
        post.predict_pair((0, 1, 2))
    assert post.predict_pair((0, 1), np.True_) == post.predict_pair((0, 1), True)
    assert post.predict_pair((0, 1), np.False_) == post.predict_pair((0, 1), False)


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
        sigma2 = float(mod.noise_variance())
        scale = [torch.exp(m + 0.5 * torch.exp(lv)).numpy() for m, lv in (offsets(mod, f) for f in range(2))]
        unseen = [sc.mean() for sc in scale]  # E[e^s] over the mixture of the learned q(s)
    want = [sigma2 * (scale[0][u] if u >= 0 else unseen[0]) * (scale[1][i] if i >= 0 else unseen[1])
            for u, i in pairs]
    np.testing.assert_allclose(noise, want, rtol=1e-10)
    assert len(set(np.round(noise[:3], 8))) == 3  # every known pair has its own noise


# -- the bilinear term p_u . q_i --------------------------------------------------------------------------
K_MF = 3


def _mf_module(seed: int = 5) -> MWGPModule:
    mod = random_module((N_USERS, N_ITEMS), R, M, seed=seed, scale=0.7, q_diag=1.5, mf_rank=K_MF)
    return mod


