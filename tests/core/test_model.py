"""MWGPModule: its tables with implicit feedback (SVD++-style sums) and their gradient.

References are independent: explicit Python loops for the implicit sums, dense matrices and torch's
own autograd for the gradient. The ELBO's terms are tested in ``test_objective.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mogp_surprise.core.implicit import implicit_graph
from mogp_surprise.core.kernels import paired_kernel
from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.objective import elbo, noise_moments
from mogp_surprise.core.rows import Batch
from tests.core._modules import module, random_module

JITTER = 1e-8
N_USERS, N_ITEMS, R, M = 7, 5, 2, 6


def _index(n: int = 40, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, N_USERS, (n,), generator=gen),
                        torch.randint(0, N_ITEMS, (n,), generator=gen)], 1)


def _module(heteroscedastic: bool = True, implicit: bool = False, seed: int = 0) -> MWGPModule:
    mod = random_module((N_USERS, N_ITEMS), R, M, seed=seed, scale=0.5, q_diag=1.2,
                        heteroscedastic=heteroscedastic, implicit=implicit)
    if implicit:
        mod.set_implicit_graph(_index(60, seed=9))
    return mod


# -- implicit feedback -----------------------------------------------------------------------------------

def test_implicit_tables_are_normalised_sums_over_rated_levels() -> None:
    mod = _module(heteroscedastic=False, implicit=True)
    index = _index(60, seed=9).numpy()
    tables = {k: t.detach().numpy() for k, t in mod.effective_tables().items()}
    inputs = mod.term("gp_input")
    emb = [inputs.table(f"embedding_{f}").detach().numpy() for f in (0, 1)]
    y_items, x_users = (inputs.table(f"implicit_{side}").detach().numpy() for side in (0, 1))
    for u in range(N_USERS):
        rated = sorted({int(i) for uu, i in index if uu == u})
        want = emb[0][u] + (y_items[rated].sum(0) / math.sqrt(len(rated)) if rated else 0.0)
        np.testing.assert_allclose(tables[("gp_input", "embedding_0")][u], want, rtol=1e-12, atol=1e-12)
    for i in range(N_ITEMS):
        raters = sorted({int(uu) for uu, ii in index if ii == i})
        want = emb[1][i] + (x_users[raters].sum(0) / math.sqrt(len(raters)) if raters else 0.0)
        np.testing.assert_allclose(tables[("gp_input", "embedding_1")][i], want, rtol=1e-12, atol=1e-12)


def test_implicit_gradient_matches_dense_autograd() -> None:
    index = _index(60, seed=9)
    nu, _, ni, _ = implicit_graph(index, (N_USERS, N_ITEMS), torch.float64)
    mod = _module(heteroscedastic=True, implicit=True)
    inputs = mod.term("gp_input")
    implicit = [inputs.table("implicit_0"), inputs.table("implicit_1")]
    y = torch.randn(60, dtype=torch.float64)
    loss = elbo(mod, Batch(index), y, n_data=60, jitter=JITTER)
    g_items, g_users = torch.autograd.grad(loss, implicit)
    # the same objective with dense normalised matrices and torch's own autograd
    dense_u, dense_i = nu.to_dense(), ni.to_dense()
    yi, xu = (t.detach().clone().requires_grad_(True) for t in implicit)
    x = torch.cat([(inputs.table("embedding_0") + dense_u @ yi)[index[:, 0]],
                   (inputs.table("embedding_1") + dense_i @ xu)[index[:, 1]]], dim=1)
    gp = mod.gp
    terms = gp.whitened_terms(JITTER)
    parts = mod.rating_parts(Batch(index))
    log_noise, inv_noise = noise_moments(parts)
    k = paired_kernel(x, gp.inducing, gp.lengthscale(), gp.outputscale())
    e = y - parts.mean - k @ terms.w
    ell = -0.5 * (60 * math.log(2 * math.pi) + log_noise.sum()
                  + (inv_noise * (gp.outputscale() + e * e + ((k @ terms.M) * k).sum(1))).sum())
    ref = ell - terms.kl + mod.penalty()
    r_items, r_users = torch.autograd.grad(ref, [yi, xu])
    np.testing.assert_allclose(g_items.numpy(), r_items.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(g_users.numpy(), r_users.numpy(), rtol=1e-9, atol=1e-12)


def test_implicit_module_without_graph_raises_a_clear_error() -> None:
    mod = module((3, 4), 2, 3, implicit=True)
    with pytest.raises(RuntimeError, match="set_implicit_graph"):
        mod.effective_tables()


def test_the_noise_alone_is_formed_without_the_mean_only_terms() -> None:
    """``rating_parts(noise_only=True)`` (the variances' closed-form update reads lambda_n from it) gives every
    rating the noise moments of the full parts, without the mean-only terms' parts (biases, bilinear)."""
    mod = random_module((6, 5), 2, 4, seed=1, heteroscedastic=True, mf_rank=2)
    index = torch.stack([torch.arange(12) % 6, torch.arange(12) % 5], 1)
    full = mod.rating_parts(Batch(index))
    alone = mod.rating_parts(Batch(index), noise_only=True)
    for a, b in zip(noise_moments(full), noise_moments(alone)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(full.mean, alone.mean)
    torch.testing.assert_close(alone.mean, mod.global_mean.expand(12))
