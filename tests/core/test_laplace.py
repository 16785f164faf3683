"""The Laplace (Gauss-Newton) variances of every level's GP input, bias and bilinear factor, and their use in
cold start and in the predictive variance of known levels."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.laplace import level_variances
from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.posterior import MWGPPosterior
from mogp_surprise.core.objective import noise_moments
from tests.core._modules import random_module

JITTER = 1e-8
LEVELS, R, M, K = (6, 4), 2, 5, 3


def _module(implicit: bool) -> tuple[MWGPModule, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, LEVELS[0], (40,), generator=gen),
                         torch.randint(0, LEVELS[1], (40,), generator=gen)], 1)
    index[:2] = torch.tensor([[5, 0], [5, 1]])  # user 5 has at least these ratings
    mod = random_module(LEVELS, R, M, seed=1, scale=0.6, q_diag=1.0, heteroscedastic=True, implicit=implicit,
                        mf_rank=K)
    mod.set_implicit_graph(index)
    return mod, index


@pytest.mark.parametrize("implicit", [False, True])
def test_gauss_newton_precision_matches_autograd(implicit: bool) -> None:
    mod, index = _module(implicit)
    input_var, bias_var, mf_var = level_variances(mod, index, JITTER, embedding_reg=3.0, bias_reg=2.0, chunk_size=7,
                                                  mf_reg=4.0)
    terms = mod.whitened_terms(JITTER)
    tables = [t.detach().clone().requires_grad_(True) for t in mod.input_tables()[0]]
    lam = noise_moments(mod, index)[1].detach()
    prec = [torch.full_like(t, 3.0) for t in tables]
    bias_prec = [torch.full((t.shape[0],), 2.0, dtype=torch.float64) for t in tables]
    mf_prec = [torch.full_like(t, 4.0).detach() for t in mod.mf_factors]
    for n in range(index.shape[0]):  # one rating at a time: its mean's gradient w.r.t. its two inputs
        x = mod.features(index[n:n + 1], tables)
        mean = (paired_kernel(x, mod.inducing, mod.lengthscale(), mod.outputscale()) @ terms.w).sum()
        grads = torch.autograd.grad(mean, tables)
        mf_grads = torch.autograd.grad(mod.prior_mean(index[n:n + 1]).sum(), list(mod.mf_factors))
        for f in range(2):
            row = int(index[n, f])
            prec[f][row] += float(lam[n]) * grads[f][row].detach() ** 2
            bias_prec[f][row] += float(lam[n])
            mf_prec[f][row] += float(lam[n]) * mf_grads[f][row] ** 2
    for f in range(2):
        np.testing.assert_allclose(input_var[f].numpy(), (1.0 / prec[f]).numpy(), rtol=1e-9)
        np.testing.assert_allclose(bias_var[f].numpy(), (1.0 / bias_prec[f]).numpy(), rtol=1e-12)
        np.testing.assert_allclose(mf_var[f].numpy(), (1.0 / mf_prec[f]).numpy(), rtol=1e-12)
    unrated = sorted(set(range(LEVELS[1])) - set(index[:, 1].tolist()))
    for i in unrated:  # no rating: the prior variance
        np.testing.assert_allclose(input_var[1][i].numpy(), 1 / 3.0)


def test_without_a_prior_no_correction_is_made() -> None:
    mod, index = _module(False)
    input_var, bias_var, mf_var = level_variances(mod, index, JITTER, embedding_reg=0.0, bias_reg=0.0, mf_reg=0.0)
    assert len(mf_var) == 2
    assert all(float(v.abs().max()) == 0.0 for v in [*input_var, *bias_var, *mf_var])


def test_cold_start_spread_adds_the_average_posterior_variance() -> None:
    mod, index = _module(False)
    spread = level_variances(mod, index, JITTER, embedding_reg=3.0, bias_reg=2.0, mf_reg=4.0)
    plain = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER)
    wider = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, level_variances=spread, embedding_uncertainty=False)
    for f in range(2):
        np.testing.assert_allclose((wider.emb_var[f] - plain.emb_var[f]).numpy(), spread[0][f].mean(0).numpy(),
                                   rtol=1e-10)
        assert float(wider.bias_var[f] - plain.bias_var[f]) == pytest.approx(float(spread[1][f].mean()))
        np.testing.assert_allclose((wider.mf_var[f] - plain.mf_var[f]).numpy(), spread[2][f].mean(0).numpy(),
                                   rtol=1e-10)
    pairs = np.array([[-1, 0], [2, -1], [-1, -1], [1, 1]])
    var_plain, var_wider = plain.predict(pairs)[1], wider.predict(pairs)[1]
    assert (var_wider[:3] > var_plain[:3]).all()  # unseen levels: wider
    assert var_wider[3] == pytest.approx(var_plain[3], rel=1e-12)  # known pairs: unchanged
    assert math.isfinite(float(var_wider.sum()))


def test_known_levels_add_their_estimation_variance_by_the_delta_method() -> None:
    """Var gains J^T diag(v) J + the bias variances, J the gradient of the latent mean w.r.t. the known
    inputs and bilinear factors (finite differences on the posterior's own mean), plus sum_d v_p v_q of the
    bilinear factors (exact for a product of independent Gaussians); unseen factors' terms are as before."""
    mod, index = _module(True)
    spread = level_variances(mod, index, JITTER, embedding_reg=3.0, bias_reg=2.0, mf_reg=4.0)
    plain = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, level_variances=spread, embedding_uncertainty=False)
    own = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, level_variances=spread)
    pairs = np.array([[0, 1], [5, 0], [3, 2], [-1, 2], [4, -1]])
    extra = own.predict(pairs, include_noise=False)[1] - plain.predict(pairs, include_noise=False)[1]
    eps = 1e-6
    for row, (u, i) in enumerate(pairs):
        want = 0.0
        for f, level in ((0, u), (1, i)):
            if level < 0:
                continue
            for table, var in ((plain.embeddings[f], spread[0][f]), (plain.mf_factors[f], spread[2][f])):
                for d in range(table.shape[1]):
                    value = float(table[level, d])
                    table[level, d] = value + eps
                    up = plain.predict(pairs[row:row + 1])[0][0]
                    table[level, d] = value - eps
                    down = plain.predict(pairs[row:row + 1])[0][0]
                    table[level, d] = value  # exactly: the tables are compared bit for bit below
                    want += ((up - down) / (2 * eps)) ** 2 * float(var[level, d])
            want += float(spread[1][f][level])
        # the product of the two factors' variances: the known level's own, the population's for an unseen one
        vp, vq = (spread[2][f][level] if level >= 0 else own.mf_var[f] for f, level in ((0, u), (1, i)))
        want += float((vp * vq).sum())
        assert extra[row] == pytest.approx(want, rel=1e-6)
    # saved and loaded with the model; a state without these entries predicts without them
    again = MWGPPosterior.from_state_dict(own.state_dict())
    np.testing.assert_array_equal(again.predict(pairs)[1], own.predict(pairs)[1])
    old = {k: v for k, v in own.state_dict().items() if k not in ("input_var", "level_bias_var", "mf_level_var")}
    np.testing.assert_array_equal(MWGPPosterior.from_state_dict(old).predict(pairs)[1], plain.predict(pairs)[1])
