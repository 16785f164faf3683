"""The ELBO and its terms (mogp_surprise.core.objective).

References are independent: GPyTorch's ``VariationalELBO`` with a ``FixedNoiseGaussianLikelihood``
(per-rating known noise) for the heteroscedastic expected log likelihood, a Monte Carlo over the
log-noise offsets for its closed form in their variance, ``torch.distributions`` for the KL terms and
the Gaussian priors, and finite differences for the gradients. The trainer applies the prior term as
Adam's weight decay: checked here against the explicit :func:`log_prior`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig
from mogp_surprise.core.model import MWGPModule
from mogp_surprise.core.objective import (elbo, expected_log_lik, expected_log_lik_of_moments,
                                          gaussian_expected_log_lik, gaussian_log_prior, log_prior)
from mogp_surprise.core.optim import TrainingOptimizer
from mogp_surprise.core.rows import Batch
from mogp_surprise.core.terms.noise_offset import offset_kl
from tests.core._modules import features, latent_moments, mean_function, module, offsets, parts, random_module
from tests.core.test_model import JITTER, N_ITEMS, N_USERS, M, R, _index, _module


def _offset_module(offset_logvar: float, heteroscedastic: bool = True) -> MWGPModule:
    mod = _module(heteroscedastic=heteroscedastic)
    with torch.no_grad():
        for f in range(2):
            offsets(mod, f)[1].fill_(offset_logvar)
    return mod


def noise_kl(mod: MWGPModule) -> torch.Tensor:
    """sum_f KL(q(s_f) || N(0, tau_f)): minus the noise term's penalty (0 without it)."""
    penalty = mod.penalty()
    return torch.zeros((), dtype=torch.float64) if penalty is None else -penalty


# -- expected log likelihood and the noise-offset KL ----------------------------------------------------

def test_heteroscedastic_elbo_matches_gpytorch_fixed_noise_likelihood() -> None:
    """With (almost) no posterior variance in the offsets, the expected log likelihood is GPyTorch's
    with each rating's known noise sigma^2 exp(s_u + t_i); our ELBO also subtracts the offsets' KL."""
    gpytorch = pytest.importorskip("gpytorch")
    from tests.core.test_reference_gpytorch import _gpytorch_copy

    mod = _offset_module(math.log(1e-14))
    index = _index(30)
    gen = torch.Generator().manual_seed(4)
    y = torch.randn(30, generator=gen, dtype=torch.float64)
    n_data = 90
    ours = (elbo(mod, Batch(index), y, n_data=n_data, jitter=JITTER) + noise_kl(mod)) / n_data
    gp, _ = _gpytorch_copy(mod)
    with torch.no_grad():
        noise = mod.noise_variance() * torch.exp(offsets(mod, 0)[0][index[:, 0]] + offsets(mod, 1)[0][index[:, 1]])
    lik = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(noise=noise.detach()).double()
    x = features(mod, index).detach()
    target = y - mean_function(mod, index).detach()
    mll = gpytorch.mlls.VariationalELBO(lik, gp, num_data=n_data)
    with gpytorch.settings.variational_cholesky_jitter(JITTER):
        ref = mll(gp(x), target)
    assert float(ours.detach()) == pytest.approx(float(ref.detach()), rel=1e-6, abs=1e-9)


def test_expected_log_lik_integrates_the_offsets_in_closed_form() -> None:
    """E over f ~ q and s_u, t_i ~ q(s) of log N(y | f, sigma^2 e^{s_u + t_i}), against Monte Carlo over s."""
    mod = _offset_module(math.log(0.3))
    index, y = _index(12, seed=1), torch.linspace(-1.5, 1.5, 12, dtype=torch.float64)
    terms = mod.gp.whitened_terms(JITTER)
    ours = float(expected_log_lik(mod, Batch(index), y, terms).detach())
    with torch.no_grad():
        f_mean, f_var = latent_moments(mod, index, terms)
        sq = ((y - f_mean) ** 2 + f_var).numpy()  # E_f[(y - f)^2]
        (m0, lv0), (m1, lv1) = offsets(mod, 0), offsets(mod, 1)
        mu = (m0[index[:, 0]] + m1[index[:, 1]]).numpy()
        sd = torch.sqrt(torch.exp(lv0[index[:, 0]]) + torch.exp(lv1[index[:, 1]])).numpy()
        log_s2 = math.log(float(mod.noise_variance()))
    rng = np.random.default_rng(0)
    s = mu + sd * rng.standard_normal((400_000, len(mu)))
    log_var = log_s2 + s
    mc = (-0.5 * (np.log(2 * np.pi) + log_var + sq * np.exp(-log_var))).mean(0).sum()
    assert ours == pytest.approx(mc, rel=2e-3)


def test_noise_kl_matches_torch_distributions() -> None:
    mod = _module()
    want = 0.0
    for f in range(2):
        mean, logvar = offsets(mod, f)
        q = torch.distributions.Normal(mean, torch.exp(0.5 * logvar))
        p = torch.distributions.Normal(0.0, torch.exp(0.5 * mod.term("noise_offset").prior_logvar[f]))
        want += float(torch.distributions.kl_divergence(q, p).sum().detach())
    assert float(noise_kl(mod).detach()) == pytest.approx(want, rel=1e-12)
    assert float(noise_kl(_module(heteroscedastic=False))) == 0.0


def test_homoscedastic_module_has_no_offset_parameters_and_its_elbo_is_unchanged() -> None:
    het = _module(heteroscedastic=True)
    homo = _module(heteroscedastic=False)
    assert homo.term("noise_offset") is None and not any("offset" in name for name, _ in homo.named_parameters())
    with torch.no_grad():  # zero offsets with (almost) no variance: the same likelihood as one scalar noise
        for name, p in homo.named_parameters():
            dict(het.named_parameters())[name].copy_(p)
        for f in range(2):
            offsets(het, f)[0].zero_()
            offsets(het, f)[1].fill_(math.log(1e-15))
    index, y = _index(20, seed=2), torch.randn(20, dtype=torch.float64)
    terms = homo.gp.whitened_terms(JITTER)
    assert float(expected_log_lik(het, Batch(index), y, terms).detach()) == pytest.approx(
        float(expected_log_lik(homo, Batch(index), y, terms).detach()), rel=1e-10)


@pytest.mark.parametrize("heteroscedastic", [False, True])
def test_the_fused_data_term_equals_the_shared_predictive(heteroscedastic) -> None:
    """Training's fused expected log likelihood is the one fold-in and the checks use, from the moments of f."""
    mod = _offset_module(math.log(0.2), heteroscedastic) if heteroscedastic else _module(heteroscedastic=False)
    index, y = _index(25, seed=6), torch.randn(25, dtype=torch.float64)
    terms = mod.gp.whitened_terms(JITTER)
    p = parts(mod, index)
    k = mod.gp.kernel()(torch.cat([r.value for r in p.inputs], dim=-1), mod.gp.inducing)
    shared = expected_log_lik_of_moments(p, y, k @ terms.w, mod.gp.outputscale() + ((k @ terms.M) * k).sum(-1))
    assert float(expected_log_lik(mod, Batch(index), y, terms).detach()) == pytest.approx(float(shared.detach()), rel=1e-12)


def test_heteroscedastic_elbo_gradient_passes_gradcheck() -> None:
    mod = _offset_module(math.log(0.2))
    index, y = Batch(_index(15, seed=3)), torch.randn(15, dtype=torch.float64)
    noise = mod.term("noise_offset")
    params = [noise.table("offset_0"), noise.table("offset_1"), mod.raw_noise, noise.prior_logvar,
              mod.term("gp_input").table("embedding_0"), mod.gp.q_mean]

    def fn(*values):
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        return elbo(mod, index, y, n_data=45, jitter=JITTER)

    # compare the analytic gradient with central differences parameter by parameter
    base = [p.detach().clone() for p in params]
    grads = torch.autograd.grad(elbo(mod, index, y, n_data=45, jitter=JITTER), params)
    eps = 1e-6
    for p, b, g in zip(params, base, grads):
        flat = b.reshape(-1)
        for j in range(min(flat.numel(), 4)):
            up, down = flat.clone(), flat.clone()
            up[j] += eps
            down[j] -= eps
            with torch.no_grad():
                p.copy_(up.view_as(b))
                f_up = float(elbo(mod, index, y, n_data=45, jitter=JITTER))
                p.copy_(down.view_as(b))
                f_down = float(elbo(mod, index, y, n_data=45, jitter=JITTER))
                p.copy_(b)
            assert g.reshape(-1)[j].item() == pytest.approx((f_up - f_down) / (2 * eps), rel=1e-5, abs=1e-6)


def test_gaussian_expected_log_lik_of_a_deterministic_f_is_the_normal_log_density() -> None:
    """With Var[f] = 0 and one known noise variance per rating, the expected log likelihood is
    sum_n log N(y_n | f_n, sigma_n^2)."""
    gen = torch.Generator().manual_seed(0)
    y, f = torch.randn(9, generator=gen, dtype=torch.float64), torch.randn(9, generator=gen, dtype=torch.float64)
    log_noise = torch.randn(9, generator=gen, dtype=torch.float64)
    e = y - f
    ours = gaussian_expected_log_lik(9, log_noise.sum(), (torch.exp(-log_noise) * e * e).sum())
    want = torch.distributions.Normal(f, torch.exp(0.5 * log_noise)).log_prob(y).sum()
    assert float(ours) == pytest.approx(float(want), rel=1e-12)


def test_noise_offset_kl_with_a_prior_mean_matches_torch_distributions() -> None:
    """The fold-in form: one offset, prior N(mu_0, tau) with a non-zero mean; and a vector of offsets."""
    mean, logvar = torch.tensor(0.4, dtype=torch.float64), torch.tensor(-1.3, dtype=torch.float64)
    prior_mean, prior_logvar = torch.tensor(-0.2, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64)
    q = torch.distributions.Normal(mean, torch.exp(0.5 * logvar))
    p = torch.distributions.Normal(prior_mean, torch.exp(0.5 * prior_logvar))
    want = float(torch.distributions.kl_divergence(q, p))
    assert float(offset_kl(mean, logvar, prior_logvar, prior_mean)) == pytest.approx(want, rel=1e-12)
    f64 = {"dtype": torch.float64}
    means, logvars = torch.linspace(-1, 1, 5, **f64), torch.linspace(-2, 0.5, 5, **f64)
    q = torch.distributions.Normal(means, torch.exp(0.5 * logvars))
    prior = torch.distributions.Normal(torch.tensor(0.0, **f64), torch.tensor(math.exp(0.35), **f64))
    want = float(torch.distributions.kl_divergence(q, prior).sum())
    assert float(offset_kl(means, logvars, torch.tensor(0.7, dtype=torch.float64))) == pytest.approx(
        want, rel=1e-12)


def test_gaussian_log_prior_is_the_normal_log_density_up_to_its_constant() -> None:
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    mean = torch.tensor([0.1, 0.0, -0.5], dtype=torch.float64)
    var = torch.tensor([0.5, 2.0, 1.5], dtype=torch.float64)
    normal = torch.distributions.Normal(mean, var.sqrt())
    want = float((normal.log_prob(x) - normal.log_prob(mean)).sum())
    assert float(gaussian_log_prior(x, var, mean)) == pytest.approx(want, rel=1e-12)
    zero = torch.zeros(3, dtype=torch.float64)
    scalar = torch.distributions.Normal(zero, 0.5)  # var 0.25, mean 0 (the model's priors)
    assert float(gaussian_log_prior(x, 0.25)) == pytest.approx(
        float((scalar.log_prob(x) - scalar.log_prob(zero)).sum()), rel=1e-12)


# -- the prior term: explicit, and as Adam's weight decay ---------------------------------------

@pytest.mark.parametrize("extras", [{}, {"heteroscedastic": True, "implicit": True, "mf_rank": 3}])
def test_priors_as_weight_decay_give_the_same_adam_steps_as_the_explicit_log_prior(extras) -> None:
    """The trainer moves the Gaussian priors into Adam's weight decay; the steps must be identical."""
    regs = {"embedding_reg": 3.0, "bias_reg": 1.0, "mf_reg": 2.0}
    n, cfg = 500, MWGPConfig(**regs, lr=0.05, lr_schedule="constant")
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, 7, (n,), generator=gen), torch.randint(0, 5, (n,), generator=gen)], 1)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    modules = []
    for _ in range(2):
        mod = module((7, 5), 2, 4, **extras, **regs).to(torch.float64)
        mod.set_implicit_graph(index)
        torch.manual_seed(1)
        with torch.no_grad():
            for p in mod.parameters():
                p.add_(0.3 * torch.randn_like(p))
        modules.append(mod)
    ours = TrainingOptimizer(modules[0], cfg, n, total_steps=3, sparse=False)
    assert len(ours.optimizers) == 1
    reference = torch.optim.Adam(modules[1].parameters(), lr=cfg.lr)  # plain Adam, prior in the loss
    groups = {round(g["weight_decay"] * n, 12) for g in ours.optimizers[0].param_groups}
    assert groups == ({3.0, 2.0, 1.0, 0.0} if extras else {3.0, 1.0, 0.0})
    for step in range(3):
        rows = slice(100 * step, 100 * step + 100)
        loss = -elbo(modules[0], Batch(index[rows]), y[rows], n, 1e-6) / n
        ours.zero_grad()
        loss.backward()
        ours.step()
        loss = -elbo(modules[1], Batch(index[rows]), y[rows], n, 1e-6, priors=True) / n
        reference.zero_grad()
        loss.backward()
        reference.step()
    for (name, a), (_, b) in zip(modules[0].named_parameters(), modules[1].named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def _full_module() -> MWGPModule:
    """Heteroscedastic, implicit feedback and a bilinear term: every table the priors cover."""
    mod = random_module((N_USERS, N_ITEMS), R, M, seed=2, scale=0.5, q_diag=1.2, heteroscedastic=True,
                        implicit=True, mf_rank=2, embedding_reg=3.0, bias_reg=1.0, mf_reg=2.0)
    mod.set_implicit_graph(_index(60, seed=9))
    return mod


def test_log_prior_is_the_sum_of_the_normal_log_densities_of_every_table() -> None:
    """Up to constants: N(0, 1/3) on embeddings and implicit factors, N(0, 1/2) on the bilinear factors and
    their implicit factors, N(0, 1) on the biases; tables named here, not taken from the module's lists."""
    mod = _full_module()
    precision = {("gp_input", "embedding"): 3.0, ("gp_input", "implicit"): 3.0, ("bilinear", "factor"): 2.0,
                 ("bilinear", "implicit"): 2.0, ("bias", "bias"): 1.0}
    want, covered = 0.0, set()
    for term in mod.terms:
        for name, p in term.named_parameters():
            table = (term.name, name.rsplit("_", 1)[0])
            if table not in precision:  # the noise offsets: no Gaussian prior (their KL is a penalty)
                continue
            zero = torch.zeros_like(p.detach())
            normal = torch.distributions.Normal(zero, precision[table] ** -0.5)
            want += float((normal.log_prob(p.detach()) - normal.log_prob(zero)).sum())
            covered.add(table)
    assert covered == set(precision)
    assert float(log_prior(mod).detach()) == pytest.approx(want, rel=1e-12)


def test_weight_decay_of_every_parameter_is_the_gradient_of_the_explicit_log_prior() -> None:
    """The trainer's loss is -ELBO / n without the prior; Adam adds weight_decay * param to each gradient:
    that must be the gradient of -log_prior / n, parameter by parameter (0 where there is no prior)."""
    mod, n = _full_module(), 500
    optimizer = TrainingOptimizer(mod, MWGPConfig(embedding_reg=3.0, bias_reg=1.0, mf_reg=2.0), n, 10, sparse=False)
    decay = {id(p): group["weight_decay"] for group in optimizer.optimizers[0].param_groups for p in group["params"]}
    params = list(mod.parameters())
    assert set(decay) == {id(p) for p in params}  # every parameter exactly once
    grads = torch.autograd.grad(-log_prior(mod) / n, params, allow_unused=True)
    for (name, p), g in zip(mod.named_parameters(), grads):
        got = torch.zeros_like(p) if g is None else g
        np.testing.assert_allclose((decay[id(p)] * p).detach().numpy(), got.numpy(), rtol=1e-12, atol=0,
                                   err_msg=name)
    assert sum(d > 0 for d in decay.values()) == 10  # 2 embeddings, 2 implicit, 2 + 2 bilinear, 2 biases


def test_elbo_adds_the_kl_weight_and_the_priors_as_documented() -> None:
    """ELBO(kl_weight=1) - ELBO(kl_weight=0.3) = -0.7 KL(q(v) || N(0, I)) (torch.distributions), and the
    priors add exactly log_prior."""
    mod = _full_module()
    index, y = Batch(_index(20, seed=5)), torch.linspace(-1.0, 1.0, 20, dtype=torch.float64)
    with torch.no_grad():
        full = float(elbo(mod, index, y, 80, JITTER))
        weighted = float(elbo(mod, index, y, 80, JITTER, kl_weight=0.3))
        with_priors = float(elbo(mod, index, y, 80, JITTER, kl_weight=0.3, priors=True))
        q = torch.distributions.MultivariateNormal(mod.gp.q_mean, scale_tril=torch.tril(mod.gp.q_sqrt))
        p = torch.distributions.MultivariateNormal(torch.zeros(M, dtype=torch.float64),
                                                   torch.eye(M, dtype=torch.float64))
        kl = float(torch.distributions.kl_divergence(q, p))
        prior = float(log_prior(mod))
    assert full - weighted == pytest.approx(-0.7 * kl, rel=1e-9)
    assert with_priors - weighted == pytest.approx(prior, rel=1e-9)
