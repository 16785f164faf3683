"""MWGPModule: the heteroscedastic likelihood, the log-noise KL, implicit feedback and the weighted data term.

References are independent: GPyTorch's ``VariationalELBO`` with a ``FixedNoiseGaussianLikelihood``
(per-rating known noise) for the heteroscedastic expected log likelihood, a Monte Carlo over the
log-noise offsets for its closed form in their variance, ``torch.distributions`` for the KL, explicit
Python loops for the SVD++-style implicit sums, and autograd / finite differences for the
hand-written gradients.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mogp_surprise.core.kernels import Workspace, data_fit, paired_kernel
from mogp_surprise.core.model import MWGPModule, implicit_graph
from tests.core._modules import random_module

JITTER = 1e-8
N_USERS, N_ITEMS, R, M = 7, 5, 2, 6


def _index(n: int = 40, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, N_USERS, (n,), generator=gen),
                        torch.randint(0, N_ITEMS, (n,), generator=gen)], 1)


def _module(heteroscedastic: bool = True, implicit: bool = False, seed: int = 0,
            offset_logvar: float | None = None) -> MWGPModule:
    mod = random_module((N_USERS, N_ITEMS), R, M, seed=seed, scale=0.5, q_diag=1.2,
                        heteroscedastic=heteroscedastic, implicit=implicit)
    with torch.no_grad():
        if offset_logvar is not None:
            for lv in mod.noise_offset_logvar:
                lv.fill_(offset_logvar)
    if implicit:
        mod.set_implicit_graph(_index(60, seed=9))
    return mod


# -- the weighted data term ----------------------------------------------------------------------------

def _data_fit_inputs(n: int = 11, m: int = 5, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=gen, dtype=torch.float64)
    z = torch.randn(m, 4, generator=gen, dtype=torch.float64)
    ls = 0.6 + torch.rand(4, generator=gen, dtype=torch.float64)
    s = torch.tensor(1.3, dtype=torch.float64)
    w = torch.randn(m, generator=gen, dtype=torch.float64)
    a = torch.randn(m, m, generator=gen, dtype=torch.float64)
    big_m = a @ a.T / m - torch.eye(m, dtype=torch.float64)
    r0 = torch.randn(n, generator=gen, dtype=torch.float64)
    lam = torch.rand(n, generator=gen, dtype=torch.float64) * 2 + 0.1
    return x, z, ls, s, w, big_m, r0, lam


def test_weighted_data_fit_matches_autograd_numpy_and_finite_differences() -> None:
    args = _data_fit_inputs()
    leaves = [a.clone().requires_grad_(True) for a in args]
    x, z, ls, s, w, big_m, r0, lam = leaves
    fused = data_fit(x, z, ls, s, w, big_m, r0, Workspace(), weights=lam)
    k = paired_kernel(x, z, ls, s)
    e = r0 - k @ w
    reference = (lam * (e * e + ((k @ big_m) * k).sum(1))).sum()
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    kn = k.detach().numpy()
    en = r0.detach().numpy() - kn @ w.detach().numpy()
    by_hand = (lam.detach().numpy() * (en ** 2 + np.einsum("ij,jk,ik->i", kn, big_m.detach().numpy(), kn))).sum()
    assert float(fused.detach()) == pytest.approx(by_hand, rel=1e-12)
    g_fused = torch.autograd.grad(fused, leaves)
    g_ref = torch.autograd.grad(reference, leaves)
    for name, a, b in zip("x z ls s w M r0 weights".split(), g_fused, g_ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)

    def fn(*t):
        return data_fit(*t[:7], weights=t[7])
    assert torch.autograd.gradcheck(fn, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_unit_weights_equal_the_unweighted_data_term() -> None:
    x, z, ls, s, w, big_m, r0, _ = _data_fit_inputs(seed=5)
    ones = torch.ones(x.shape[0], dtype=torch.float64)
    assert float(data_fit(x, z, ls, s, w, big_m, r0, weights=ones)) == pytest.approx(
        float(data_fit(x, z, ls, s, w, big_m, r0)), rel=1e-13)


# -- heteroscedastic likelihood ------------------------------------------------------------------------

def test_heteroscedastic_elbo_matches_gpytorch_fixed_noise_likelihood() -> None:
    """With (almost) no posterior variance in the offsets, the expected log likelihood is GPyTorch's
    with each rating's known noise sigma^2 exp(s_u + t_i); our ELBO also subtracts the offsets' KL."""
    gpytorch = pytest.importorskip("gpytorch")
    from tests.core.test_reference_gpytorch import _gpytorch_copy

    mod = _module(offset_logvar=math.log(1e-14))
    index = _index(30)
    gen = torch.Generator().manual_seed(4)
    y = torch.randn(30, generator=gen, dtype=torch.float64)
    n_data = 90
    ours = (mod.elbo(index, y, n_data=n_data, jitter=JITTER) + mod.noise_kl()) / n_data
    gp, _ = _gpytorch_copy(mod)
    with torch.no_grad():
        noise = mod.noise() * torch.exp(mod.noise_offset_mean[0][index[:, 0]] + mod.noise_offset_mean[1][index[:, 1]])
    lik = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(noise=noise.detach()).double()
    x = mod.features(index).detach()
    target = y - mod.prior_mean(index).detach()
    mll = gpytorch.mlls.VariationalELBO(lik, gp, num_data=n_data)
    with gpytorch.settings.variational_cholesky_jitter(JITTER):
        ref = mll(gp(x), target)
    assert float(ours.detach()) == pytest.approx(float(ref.detach()), rel=1e-6, abs=1e-9)


def test_expected_log_lik_integrates_the_offsets_in_closed_form() -> None:
    """E over f ~ q and s_u, t_i ~ q(s) of log N(y | f, sigma^2 e^{s_u + t_i}), against Monte Carlo over s."""
    mod = _module(offset_logvar=math.log(0.3))
    index, y = _index(12, seed=1), torch.linspace(-1.5, 1.5, 12, dtype=torch.float64)
    terms = mod.whitened_terms(JITTER)
    ours = float(mod.expected_log_lik(index, y, terms).detach())
    with torch.no_grad():
        f_mean, f_var = mod.latent_moments(index, terms)
        sq = ((y - f_mean) ** 2 + f_var).numpy()  # E_f[(y - f)^2]
        mu = (mod.noise_offset_mean[0][index[:, 0]] + mod.noise_offset_mean[1][index[:, 1]]).numpy()
        sd = torch.sqrt(torch.exp(mod.noise_offset_logvar[0][index[:, 0]])
                        + torch.exp(mod.noise_offset_logvar[1][index[:, 1]])).numpy()
        log_s2 = math.log(float(mod.noise()))
    rng = np.random.default_rng(0)
    s = mu + sd * rng.standard_normal((400_000, len(mu)))
    log_var = log_s2 + s
    mc = (-0.5 * (np.log(2 * np.pi) + log_var + sq * np.exp(-log_var))).mean(0).sum()
    assert ours == pytest.approx(mc, rel=2e-3)


def test_noise_kl_matches_torch_distributions() -> None:
    mod = _module()
    want = 0.0
    for f in range(2):
        q = torch.distributions.Normal(mod.noise_offset_mean[f], torch.exp(0.5 * mod.noise_offset_logvar[f]))
        p = torch.distributions.Normal(0.0, torch.exp(0.5 * mod.noise_prior_logvar[f]))
        want += float(torch.distributions.kl_divergence(q, p).sum().detach())
    assert float(mod.noise_kl().detach()) == pytest.approx(want, rel=1e-12)
    assert float(_module(heteroscedastic=False).noise_kl()) == 0.0


def test_homoscedastic_module_has_no_offset_parameters_and_its_elbo_is_unchanged() -> None:
    het = _module(heteroscedastic=True)
    homo = _module(heteroscedastic=False)
    assert len(homo.noise_offset_mean) == 0 and homo.noise_prior_logvar.numel() == 0
    with torch.no_grad():  # zero offsets with (almost) no variance: the same likelihood as one scalar noise
        for name, p in homo.named_parameters():
            if name != "noise_prior_logvar":
                dict(het.named_parameters())[name].copy_(p)
        for f in range(2):
            het.noise_offset_mean[f].zero_()
            het.noise_offset_logvar[f].fill_(math.log(1e-15))
    index, y = _index(20, seed=2), torch.randn(20, dtype=torch.float64)
    terms = homo.whitened_terms(JITTER)
    assert float(het.expected_log_lik(index, y, terms).detach()) == pytest.approx(
        float(homo.expected_log_lik(index, y, terms).detach()), rel=1e-10)


def test_heteroscedastic_elbo_gradient_passes_gradcheck() -> None:
    mod = _module(offset_logvar=math.log(0.2))
    index, y = _index(15, seed=3), torch.randn(15, dtype=torch.float64)
    params = [mod.noise_offset_mean[0], mod.noise_offset_logvar[1], mod.raw_noise, mod.noise_prior_logvar,
              mod.embeddings[0], mod.q_mean]

    def fn(*values):
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        return mod.elbo(index, y, n_data=45, jitter=JITTER)

    # compare the analytic gradient with central differences parameter by parameter
    base = [p.detach().clone() for p in params]
    grads = torch.autograd.grad(mod.elbo(index, y, n_data=45, jitter=JITTER), params)
    eps = 1e-6
    for p, b, g in zip(params, base, grads):
        flat = b.reshape(-1)
        for j in range(min(flat.numel(), 4)):
            up, down = flat.clone(), flat.clone()
            up[j] += eps
            down[j] -= eps
            with torch.no_grad():
                p.copy_(up.view_as(b))
                f_up = float(mod.elbo(index, y, n_data=45, jitter=JITTER))
                p.copy_(down.view_as(b))
                f_down = float(mod.elbo(index, y, n_data=45, jitter=JITTER))
                p.copy_(b)
            assert g.reshape(-1)[j].item() == pytest.approx((f_up - f_down) / (2 * eps), rel=1e-5, abs=1e-6)


# -- implicit feedback -----------------------------------------------------------------------------------

def test_implicit_tables_are_normalised_sums_over_rated_levels() -> None:
    mod = _module(heteroscedastic=False, implicit=True)
    index = _index(60, seed=9).numpy()
    tables = [t.detach().numpy() for t in mod.factor_tables()]
    emb = [e.detach().numpy() for e in mod.embeddings]
    y_items, x_users = (t.detach().numpy() for t in mod.implicit_factors)
    for u in range(N_USERS):
        rated = sorted({int(i) for uu, i in index if uu == u})
        want = emb[0][u] + (y_items[rated].sum(0) / math.sqrt(len(rated)) if rated else 0.0)
        np.testing.assert_allclose(tables[0][u], want, rtol=1e-12, atol=1e-12)
    for i in range(N_ITEMS):
        raters = sorted({int(uu) for uu, ii in index if ii == i})
        want = emb[1][i] + (x_users[raters].sum(0) / math.sqrt(len(raters)) if raters else 0.0)
        np.testing.assert_allclose(tables[1][i], want, rtol=1e-12, atol=1e-12)


def test_implicit_gradient_matches_dense_autograd() -> None:
    index = _index(60, seed=9)
    nu, _, ni, _ = implicit_graph(index, (N_USERS, N_ITEMS), torch.float64)
    mod = _module(heteroscedastic=True, implicit=True)
    y = torch.randn(60, dtype=torch.float64)
    loss = mod.elbo(index, y, n_data=60, jitter=JITTER)
    g_items, g_users = torch.autograd.grad(loss, list(mod.implicit_factors))
    # the same objective with dense normalised matrices and torch's own autograd
    dense_u, dense_i = nu.to_dense(), ni.to_dense()
    yi, xu = (t.detach().clone().requires_grad_(True) for t in mod.implicit_factors)
    tables = [mod.embeddings[0] + dense_u @ yi, mod.embeddings[1] + dense_i @ xu]
    x = mod.features(index, tables)
    terms = mod.whitened_terms(JITTER)
    log_noise, inv_noise = mod.noise_terms(index)
    k = paired_kernel(x, mod.inducing, mod.lengthscale(), mod.outputscale())
    e = y - mod.prior_mean(index) - k @ terms.w
    ell = -0.5 * (60 * math.log(2 * math.pi) + log_noise.sum()
                  + (inv_noise * (mod.outputscale() + e * e + ((k @ terms.M) * k).sum(1))).sum())
    ref = ell - terms.kl - mod.noise_kl()
    r_items, r_users = torch.autograd.grad(ref, [yi, xu])
    np.testing.assert_allclose(g_items.numpy(), r_items.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(g_users.numpy(), r_users.numpy(), rtol=1e-9, atol=1e-12)


def test_implicit_graph_counts_repeated_pairs_once() -> None:
    index = torch.tensor([[0, 1], [0, 1], [0, 2], [1, 2]])
    nu, _, ni, _ = implicit_graph(index, (2, 3), torch.float64)
    np.testing.assert_allclose(nu.to_dense().numpy(), [[0, 2 ** -0.5, 2 ** -0.5], [0, 0, 1]])
    np.testing.assert_allclose(ni.to_dense().numpy(), [[0, 0], [1, 0], [2 ** -0.5, 2 ** -0.5]])


def test_implicit_module_without_graph_raises_a_clear_error() -> None:
    mod = MWGPModule((3, 4), 2, 3, implicit=True)
    with pytest.raises(RuntimeError, match="set_implicit_graph"):
        mod.factor_tables()
