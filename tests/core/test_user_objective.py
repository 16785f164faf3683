"""The per-user fold-in objective (mogp_surprise.core.user_objective): its parameter layout, fixed per-user data,
start and Laplace variances against the trained module's own quantities. The objective's value and gradient
against the training ELBO are checked through ``fold_in_objective`` in ``test_foldin.py``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.objective import noise_moments
from mogp_surprise.core.user_objective import FoldInContext
from tests.core._modules import features, fitted, parts, population
from tests.core.test_foldin import FACTOR, INPUT, ITEMS, LEVELS, R, USER, _implicit, _random_model


def _user_index() -> torch.Tensor:
    return torch.stack([torch.full((len(ITEMS),), USER), torch.as_tensor(ITEMS)], 1)


def test_population_fold_in_variance_and_start_of_the_bilinear_factor() -> None:
    """The folded user's factor variance is 1 / (1 / population var + sum_j q~_j^2 / sigma^2) (homoscedastic:
    lambda = 1 / sigma^2), computed here from the posterior's tables; a known user's fold-in starts from their
    trained factor (raw part: p~_u minus the implicit sum)."""
    mod, post = _random_model(False, True, True, mf_rank=2)
    user = fold_in(post, ITEMS, np.linspace(1.0, 5.0, len(ITEMS)))
    q = fitted(post, "bilinear", "factor_1").values[torch.as_tensor(ITEMS)].double()
    p_mean, p_var = population(post, "bilinear", "factor_0")
    want = 1.0 / (1.0 / p_var + (q * q).sum(0) / post.state.noise_variance)
    np.testing.assert_allclose(user.variances[FACTOR], want.numpy(), rtol=1e-10)
    ctx = FoldInContext(post)
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    block = next(b for b in ctx.blocks if b.key == FACTOR)
    implicit = torch.as_tensor(_implicit(post, "bilinear", ITEMS))
    np.testing.assert_allclose(block.of(ctx.start(data, USER)).numpy(),
                               (fitted(post, "bilinear", "factor_0").values[USER].double() - implicit).numpy(), rtol=1e-12)
    np.testing.assert_allclose(block.of(ctx.start(data, None)).numpy(), (p_mean - implicit).numpy(), rtol=1e-12)


def test_kernel_rows_and_noise_moments_are_those_of_the_trained_module() -> None:
    """At the trained user's own rows, the context's GP inputs, moments of f and (E log sigma_j^2, lambda_j)
    equal the module's for the same (user, item) tuples."""
    mod, post = _random_model(True, True, True, mf_rank=2)
    ctx = FoldInContext(post, prior="model")
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    index = _user_index()
    with torch.no_grad():
        theta = ctx.start(data, USER)
        user_parts = ctx.parts(data, theta)
        x = torch.cat([user_parts.inputs[0].value.expand(len(ITEMS), R), user_parts.inputs[1].value], dim=-1)
        np.testing.assert_allclose(x.numpy(), features(mod, index).numpy(), rtol=1e-10, atol=1e-14)
        gp = mod.gp
        k = paired_kernel(x, gp.inducing, gp.lengthscale(), gp.outputscale())
        mean, _ = ctx.f_moments(data, user_parts)
        np.testing.assert_allclose(mean.numpy(), (k @ gp.whitened_terms(1e-8).w).numpy(), rtol=1e-8, atol=1e-12)
        module_parts = parts(mod, index)
        np.testing.assert_allclose(user_parts.mean.numpy(), module_parts.mean.numpy(), rtol=1e-10)
        for a, b in zip(noise_moments(user_parts), noise_moments(module_parts)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)
    assert np.ptp(mean.numpy()) > 0  # E_q[f_j] varies over the items: the check is not trivial


def test_the_parameter_layout_and_the_start() -> None:
    """Every term's user tables in term order: the GP input (R), the bias, the bilinear factor (2) and the
    noise offset's [mu, log v]; the start is the prior mean, or a known user's fitted values (raw parts)."""
    mod, post = _random_model(True, True, True, mf_rank=2)
    ctx = FoldInContext(post)
    assert [(b.key, b.width) for b in ctx.blocks] == [(INPUT, R), ("bias.bias_0", 1), (FACTOR, 2),
                                                      ("noise_offset.offset_0", 2)]
    assert ctx.dim == R + 1 + 2 + 2 and [b.key for b in ctx.laplace_blocks] == [INPUT, "bias.bias_0", FACTOR]
    data = ctx.user_data(ITEMS, np.zeros(len(ITEMS)))
    blocks = {b.key: b for b in ctx.blocks}
    start = ctx.start(data, None)
    np.testing.assert_allclose((blocks[INPUT].of(start) + data.implicit[INPUT]).numpy(),
                               population(post, "gp_input", "embedding_0")[0].double().numpy(), rtol=1e-12)
    assert float(blocks["bias.bias_0"].of(start)) == float(population(post, "bias", "bias_0")[0])
    pop = post.term("noise_offset").extras["user_population"]
    np.testing.assert_allclose(blocks["noise_offset.offset_0"].of(start).numpy(),
                               [float(pop[0]), float(torch.log(pop[1].double()))])
    known = ctx.start(data, USER)
    np.testing.assert_allclose((blocks[INPUT].of(known) + data.implicit[INPUT]).numpy(),
                               fitted(post, "gp_input", "embedding_0").values[USER].numpy(), rtol=1e-12)
    assert float(blocks["bias.bias_0"].of(known)) == float(fitted(post, "bias", "bias_0").values[USER])
    np.testing.assert_allclose(blocks["noise_offset.offset_0"].of(known).numpy(),
                               fitted(post, "noise_offset", "offset_0").values[USER].numpy())


@pytest.mark.parametrize("implicit,mf_rank", [(True, 2), (False, 0)])
def test_the_mean_jacobian_equals_forward_mode_differentiation_of_the_per_rating_means(implicit, mf_rank) -> None:
    """mean_jacobian's closed-form GP part (one input for every rating) against torch.func.jacfwd of the
    predictive means of the general per-rating form (f_moments), at a point away from the start."""
    from torch.func import jacfwd

    _, post = _random_model(True, implicit, True, mf_rank)
    ctx = FoldInContext(post)
    data = ctx.catalogue_data(ctx.user_data(ITEMS, np.linspace(-1.0, 1.0, len(ITEMS))))
    theta = ctx.start(data, None) + 0.3 * torch.randn(ctx.dim, generator=torch.Generator().manual_seed(4),
                                                      dtype=torch.float64)

    def means(t):
        parts = ctx.parts(data, t)
        return parts.mean + ctx.f_moments(data, parts)[0]

    want = jacfwd(means)(theta)
    want = torch.cat([want[:, b.start:b.start + b.width] for b in ctx.laplace_blocks], dim=1)
    got, _ = ctx.mean_jacobian(data, theta)
    assert got.shape == (LEVELS[1], sum(b.width for b in ctx.laplace_blocks))
    assert float(want[:, :R].abs().max()) > 1e-3  # the GP input's part is not trivially zero
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
