"""The MW-GP objective: every term of the evidence lower bound (ELBO) that training maximises.

Whitened SVGP (Hensman et al. 2015): u = L v with L L^T = K_mm, q(v) = N(m, S), p(v) = N(0, I), and
for a minibatch B of the N training ratings (:func:`elbo`)::

    ELBO = (N / |B|) sum_{n in B} E_q[log N(y_n | mu_n + f_n, sigma_n^2)]     expected_log_lik
           - kl_weight * KL(q(v) || p(v))                                     WhitenedTerms.kl
           - sum_f sum_l KL(q(s_fl) || N(0, tau_f))                           noise_kl
           + log p(embeddings, implicit factors, bilinear factors, biases)   log_prior

with mu_n the mean function (``MWGPModule.prior_mean``) and E_q[f_n] = k_n^T w, Var_q[f_n] =
outputscale + k_n^T M k_n (``MWGPModule.whitened_terms``).

Expected log likelihood. With lambda_n = E_q[1 / sigma_n^2] and r_n = y_n - mu_n
(:func:`gaussian_expected_log_lik`)::

    sum_n E_q[log N(y_n | mu_n + f_n, sigma_n^2)]
        = -1/2 sum_n [log 2 pi + E_q[log sigma_n^2] + lambda_n ((r_n - k_n^T w)^2 + outputscale + k_n^T M k_n)]

Homoscedastic (the paper): sigma_n^2 = sigma^2. Heteroscedastic: log sigma_n^2 = log sigma^2 +
sum_f s_f[index_f] with q(s) = N(mu_s, v_s), so E_q[log sigma_n^2] = log sigma^2 + sum_f mu_s and
lambda_n = exp(sum_f v_s / 2 - E_q[log sigma_n^2]) (:func:`noise_moments_from_offsets`). The sums over
the B x m cross-covariance come from :func:`~.kernels.data_fit` (kernel, products and gradients fused).

``KL(q(v) || p(v)) = 1/2 [tr S + m^T m - m - log det S]`` is formed by :func:`~.linalg.inducing_terms`
together with w and M (one autograd node with a closed-form backward): ``WhitenedTerms.kl``.

Noise-offset KL (:func:`noise_offset_kl`): KL(N(mu, v) || N(mu_0, tau)) = 1/2 [((mu - mu_0)^2 + v) / tau
- 1 + log tau - log v], per level; the prior variances tau_f are learned (empirical Bayes).

Log priors (:func:`log_prior`, up to constants): N(0, 1 / embedding_reg) on the embeddings and implicit
factors, N(0, 1 / mf_reg) on the bilinear factors and their implicit factors, N(0, 1 / bias_reg) on the
biases: -1/2 reg ||theta||^2 each.

**The trainer applies the prior term through the optimiser** (:mod:`.optim`): it maximises
:func:`elbo` with ``embedding_reg = bias_reg = mf_reg = 0`` and gives Adam ``weight_decay = reg / N``
on those tables, the same gradient of -ELBO / N without a forward and backward pass over every table
row per step (measured faster); ``tests/core/test_objective.py`` checks that the two agree. With
row-sparse updates of a large catalogue, a row receives the prior's gradient lazily, when it is next
touched, for every step it missed (:class:`~.optim.RowAdam`; checked against a plain reference in
``tests/core/test_optim.py``).

Fold-in (:mod:`.foldin`) maximises the part of this ELBO that involves one user, from the same terms.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import Tensor

from .kernels import data_fit
from .model import MWGPModule, WhitenedTerms

LOG_2PI = math.log(2.0 * math.pi)


# -- expected log likelihood ---------------------------------------------------------------------------
def noise_moments_from_offsets(log_noise: Tensor, n: int,
                               offsets: Iterable[tuple[Tensor, Tensor]] = ()) -> tuple[Tensor, Tensor]:
    """E_q[log sigma_n^2] and lambda_n = E_q[1 / sigma_n^2] of n ratings, (n,) each.

    ``offsets``: the (mean, variance) of q of every log-noise offset a rating carries (none:
    homoscedastic, sigma_n^2 = exp(log_noise)).
    """
    mean, var = log_noise, None
    for m, v in offsets:
        mean = mean + m
        var = v if var is None else var + v
    if var is None:
        return log_noise.expand(n), torch.exp(-log_noise).expand(n)
    return mean, torch.exp(0.5 * var - mean)


def noise_moments(module: MWGPModule, index: Tensor) -> tuple[Tensor, Tensor]:
    """E_q[log sigma_n^2] and lambda_n = E_q[1 / sigma_n^2] of every rating in the batch, (B,) each."""
    offsets = ((module.noise_offset_mean[f].index_select(0, index[:, f]),
                torch.exp(module.noise_offset_logvar[f].index_select(0, index[:, f])))
               for f in range(module.n_factors)) if module.heteroscedastic else ()
    return noise_moments_from_offsets(torch.log(module.noise()), index.shape[0], offsets)


def gaussian_expected_log_lik(n: int, log_noise_sum: Tensor, *weighted_sums: Tensor) -> Tensor:
    """-1/2 [n log 2 pi + sum_n E_q[log sigma_n^2] + sum_n lambda_n (e_n^2 + v_n)] from its sums: the
    sum of E_q[log N(y_n | f_n, sigma_n^2)] with e_n = y_n - E_q[f_n] and v_n = Var_q[f_n]
    (``weighted_sums`` add up to the last sum)."""
    out = n * LOG_2PI + log_noise_sum
    for part in weighted_sums:
        out = out + part
    return -0.5 * out


def expected_log_lik(module: MWGPModule, index: Tensor, y: Tensor, terms: WhitenedTerms) -> Tensor:
    """sum_n E_q[log N(y_n | mu_n + f_n, sigma_n^2)] over the batch (module docstring)."""
    outputscale = module.outputscale()
    inputs, mf = module.input_tables()
    x = module.features(index, inputs)
    resid = y - module.prior_mean(index, mf)
    n = index.shape[0]
    if not module.heteroscedastic:  # one scalar noise: the unweighted (faster) data term
        sums = data_fit(x, module.inducing, module.lengthscale(), outputscale, terms.w, terms.M, resid,
                        module.workspace)
        noise = module.noise()
        return -0.5 * n * (LOG_2PI + torch.log(noise)) - 0.5 * (n * outputscale + sums) / noise
    log_noise, inv_noise = noise_moments(module, index)
    sums = data_fit(x, module.inducing, module.lengthscale(), outputscale, terms.w, terms.M, resid,
                    module.workspace, weights=inv_noise)
    return gaussian_expected_log_lik(n, log_noise.sum(), outputscale * inv_noise.sum(), sums)


# -- KL terms and priors ---------------------------------------------------------------------------------
def noise_offset_kl(mean: Tensor, logvar: Tensor, prior_logvar: Tensor, prior_mean: Tensor | None = None) -> Tensor:
    """sum_l KL(N(mean_l, exp(logvar_l)) || N(prior_mean, exp(prior_logvar))) (prior_mean: 0 by default)."""
    d = mean if prior_mean is None else mean - prior_mean
    n = mean.numel()
    return 0.5 * ((d * d + torch.exp(logvar)).sum() * torch.exp(-prior_logvar) - n + n * prior_logvar - logvar.sum())


def noise_kl(module: MWGPModule) -> Tensor:
    """sum_f KL(q(s_f) || N(0, tau_f)) over every level's log-noise offset (0 if homoscedastic)."""
    out = module.global_mean.new_zeros(())
    for f in range(len(module.noise_offset_mean)):
        out = out + noise_offset_kl(module.noise_offset_mean[f], module.noise_offset_logvar[f],
                                    module.noise_prior_logvar[f])
    return out


def gaussian_log_prior(x: Tensor, var: Tensor | float, mean: Tensor | None = None) -> Tensor:
    """log N(x | mean, diag(var)) up to constants: -1/2 sum_d (x_d - mean_d)^2 / var_d (mean: 0 by default)."""
    d = x if mean is None else x - mean
    return -0.5 * (d * d / var).sum()


def log_prior(module: MWGPModule, embedding_reg: float, bias_reg: float, mf_reg: float = 0.0) -> Tensor:
    """Gaussian log prior (up to constants) of embeddings and implicit factors (precision
    ``embedding_reg``), biases (``bias_reg``) and bilinear factors (``mf_reg``).

    The trainer applies its gradient as Adam's weight decay (module docstring).
    """
    out = module.global_mean.new_zeros(())
    if embedding_reg:
        out = out - 0.5 * embedding_reg * sum((e ** 2).sum() for e in module.prior_tables())
    if bias_reg and module.use_biases:
        out = out - 0.5 * bias_reg * sum((b ** 2).sum() for b in module.biases)
    if mf_reg and module.mf_rank:
        out = out - 0.5 * mf_reg * sum((t ** 2).sum() for t in module.mf_prior_tables())
    return out


# -- the minibatch ELBO -----------------------------------------------------------------------------------
def elbo(module: MWGPModule, index: Tensor, y: Tensor, n_data: int, jitter: float, kl_weight: float = 1.0,
         embedding_reg: float = 0.0, bias_reg: float = 0.0, mf_reg: float = 0.0,
         batch_size: int | None = None, share: float = 1.0) -> Tensor:
    """Unbiased minibatch estimate of the ELBO plus the log prior of embeddings, factors and biases.

    The trainer passes ``embedding_reg = bias_reg = mf_reg = 0`` and applies those priors through
    Adam's weight decay (same gradient, no pass over every table row per step).

    Data-parallel training (:mod:`.distributed`): ``index``, ``y`` are one process's shard of a
    minibatch of ``batch_size`` ratings (default: the shard is the minibatch) and ``share`` (1 / number
    of processes) weights the terms that do not depend on the ratings, so that the processes'
    values (and gradients) add up to this function's value on the whole minibatch.
    """
    terms = module.whitened_terms(jitter)
    batch_size = index.shape[0] if batch_size is None else batch_size
    out = -kl_weight * share * terms.kl
    if index.shape[0]:
        out = out + expected_log_lik(module, index, y, terms) * (n_data / batch_size)
    if module.heteroscedastic:
        out = out - share * noise_kl(module)
    if embedding_reg or bias_reg or mf_reg:
        out = out + share * log_prior(module, embedding_reg, bias_reg, mf_reg)
    return out
