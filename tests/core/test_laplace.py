"""The Laplace (Gauss-Newton) variances of every level's GP input, bias and bilinear factor, and their use in
cold start and in the predictive variance of known levels."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.laplace import laplace_variances
from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.objective import noise_moments
from mogp_surprise.core.posterior import MWGPPosterior
from tests.core._modules import fitted, mean_function, parts, population, random_module, table

JITTER = 1e-8
LEVELS, R, M, K = (6, 4), 2, 5, 3


def _module(implicit: bool, embedding_reg: float = 3.0, bias_reg: float = 2.0,
            mf_reg: float = 4.0) -> tuple[MWGPModule, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, LEVELS[0], (40,), generator=gen),
                         torch.randint(0, LEVELS[1], (40,), generator=gen)], 1)
    index[:2] = torch.tensor([[5, 0], [5, 1]])  # user 5 has at least these ratings
    mod = random_module(LEVELS, R, M, seed=1, scale=0.6, q_diag=1.0, heteroscedastic=True, implicit=implicit,
                        mf_rank=K, embedding_reg=embedding_reg, bias_reg=bias_reg, mf_reg=mf_reg)
    mod.set_implicit_graph(index)
    return mod, index


@pytest.mark.parametrize("implicit", [False, True])
def test_gauss_newton_precision_matches_autograd(implicit: bool) -> None:
    mod, index = _module(implicit)
    variances = laplace_variances(mod, index, JITTER, chunk_size=7)
    input_var, bias_var, mf_var = ([variances[(term, f"{name}_{f}")] for f in range(2)]
                                   for term, name in (("gp_input", "embedding"), ("bias", "bias"), ("bilinear", "factor")))
    gp = mod.gp
    terms = gp.whitened_terms(JITTER)
    effective = mod.effective_tables()
    tables = [effective[("gp_input", f"embedding_{f}")].detach().clone().requires_grad_(True) for f in range(2)]
    factors = [table(mod, "bilinear", f"factor_{f}") for f in range(2)]
    lam = noise_moments(parts(mod, index))[1].detach()
    prec = [torch.full_like(t, 3.0) for t in tables]
    bias_prec = [torch.full((t.shape[0],), 2.0, dtype=torch.float64) for t in tables]
    mf_prec = [torch.full_like(t, 4.0).detach() for t in factors]
    for n in range(index.shape[0]):  # one rating at a time: its mean's gradient w.r.t. its two inputs
        x = torch.cat([tables[f][index[n:n + 1, f]] for f in range(2)], dim=1)
        mean = (paired_kernel(x, gp.inducing, gp.lengthscale(), gp.outputscale()) @ terms.w).sum()
        grads = torch.autograd.grad(mean, tables)
        mf_grads = torch.autograd.grad(mean_function(mod, index[n:n + 1]).sum(), factors)
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


@pytest.mark.parametrize("implicit", [False, True])
def test_extra_tuples_add_their_curvature_as_training_tuples(implicit: bool) -> None:
    mod, index = _module(implicit)
    whole = laplace_variances(mod, index, JITTER, chunk_size=7)
    split = laplace_variances(mod, index[:25], JITTER, chunk_size=7, extra=index[25:])
    alone = laplace_variances(mod, index[:25], JITTER, chunk_size=7)
    assert whole.keys() == split.keys()
    for key in whole:
        np.testing.assert_allclose(split[key].numpy(), whole[key].numpy(), rtol=1e-12)
    # (the extra tuples count: without them a level they rate has the larger variance)
    assert any(bool((alone[key] > whole[key] * (1 + 1e-6)).any()) for key in whole)


def test_without_a_prior_no_correction_is_made() -> None:
    mod, index = _module(False, 0.0, 0.0, 0.0)
    variances = laplace_variances(mod, index, JITTER)
    assert len(variances) == 6  # the GP inputs, biases and bilinear factors of users and items
    assert all(float(v.abs().max()) == 0.0 for v in variances.values())


def test_cold_start_spread_adds_the_average_posterior_variance() -> None:
    mod, index = _module(False)
    spread = laplace_variances(mod, index, JITTER)
    plain = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER)
    wider = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, laplace=spread, embedding_uncertainty=False)
    for term, name in (("gp_input", "embedding"), ("bias", "bias"), ("bilinear", "factor")):
        for f in range(2):
            added = population(wider, term, f"{name}_{f}")[1] - population(plain, term, f"{name}_{f}")[1]
            np.testing.assert_allclose(added.numpy(), spread[(term, f"{name}_{f}")].mean(0).numpy(), rtol=1e-10)
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
    spread = laplace_variances(mod, index, JITTER)
    plain = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, laplace=spread, embedding_uncertainty=False)
    own = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER, laplace=spread)
    pairs = np.array([[0, 1], [5, 0], [3, 2], [-1, 2], [4, -1]])
    extra = own.predict(pairs, include_noise=False)[1] - plain.predict(pairs, include_noise=False)[1]
    eps = 1e-6
    for row, (u, i) in enumerate(pairs):
        want = 0.0
        for f, level in ((0, u), (1, i)):
            if level < 0:
                continue
            for term, name in (("gp_input", "embedding"), ("bilinear", "factor")):
                values, var = fitted(plain, term, f"{name}_{f}").values, spread[(term, f"{name}_{f}")]
                for d in range(values.shape[1]):
                    value = float(values[level, d])
                    values[level, d] = value + eps
                    up = plain.predict(pairs[row:row + 1])[0][0]
                    values[level, d] = value - eps
                    down = plain.predict(pairs[row:row + 1])[0][0]
                    values[level, d] = value  # exactly: the tables are compared bit for bit below
                    want += ((up - down) / (2 * eps)) ** 2 * float(var[level, d])
            want += float(spread[("bias", f"bias_{f}")][level])
        # the product of the two factors' variances: the known level's own, the population's for an unseen one
        vp, vq = (spread[("bilinear", f"factor_{f}")][level] if level >= 0 else population(own, "bilinear", f"factor_{f}")[1]
                  for f, level in ((0, u), (1, i)))
        want += float((vp * vq).sum())
        assert extra[row] == pytest.approx(want, rel=1e-6)
    # saved and loaded with the model; a state without these entries predicts without them
    again = MWGPPosterior.from_state_dict(own.state_dict())
    np.testing.assert_array_equal(again.predict(pairs)[1], own.predict(pairs)[1])
    old = own.state_dict()
    for term in old["terms"]:
        for entry in term["tables"].values():
            entry.pop("laplace_var", None)
    np.testing.assert_array_equal(MWGPPosterior.from_state_dict(old).predict(pairs)[1], plain.predict(pairs)[1])


def test_variances_under_a_scaled_noise_are_those_of_a_module_with_that_noise() -> None:
    from mogp_surprise.core.laplace import noise_scaled

    mod, index = _module(implicit=True)
    before = laplace_variances(mod, index, JITTER)
    mod.scale_noise(1.7)
    after = laplace_variances(mod, index, JITTER)
    scaled = noise_scaled(mod, before, 1.7)
    assert set(scaled) == set(after)
    for key in after:
        torch.testing.assert_close(scaled[key], after[key], rtol=1e-9, atol=0)
    assert any(bool((after[key] > before[key]).any()) for key in after)
