"""The MW-GP objective: every term of the evidence lower bound (ELBO) that training maximises.

Whitened SVGP (Hensman et al. 2015): u = L v with L L^T = K_mm, q(v) = N(m, S), p(v) = N(0, I), and
for a minibatch B of the N training ratings (:func:`elbo`)::

    ELBO = (N / |B|) sum_{n in B} E_q[log N(y_n | mu_n + a_n f_n, sigma_n^2)]   expected_log_lik
           - kl_weight * KL(q(v) || p(v))                                      WhitenedTerms.kl
           + sum_terms penalty                                                 e.g. -KL of the noise offsets
           + log p(every term table with a Gaussian prior)                    log_prior

with mu_n the mean function (under q where a term has a variational posterior, e.g. the bilinear
factors with ``mf_posterior="variational"``: E[(y_n - mu_n - ...)^2] then gains Var_q[mu_n]; those
variances are set in closed form between epochs, :meth:`~.model.MWGPModule.update_variances`, so the
KL's part in them is constant in every step and left out of the minibatch ELBO),
a_n = exp(latent log scale) (1 unless a term scales f) and sigma_n^2 the
noise variance, all from the terms' :class:`~.terms.RatingParts`; E_q[f_n] = k_n^T w, Var_q[f_n] =
outputscale + k_n^T M k_n (:mod:`.gp`).

Expected log likelihood. With lambda_n = E_q[1 / sigma_n^2] and r_n = y_n - mu_n
(:func:`gaussian_expected_log_lik`)::

    sum_n E_q[log N(y_n | mu_n + a_n f_n, sigma_n^2)]
        = -1/2 sum_n [log 2 pi + E_q[log sigma_n^2] + lambda_n ((r_n - a_n k_n^T w)^2 + a_n^2 (outputscale + k_n^T M k_n))]

Homoscedastic (the paper): sigma_n^2 = sigma^2. With log-noise offsets N(m_n, v_n) summed over the
rating's levels, E_q[log sigma_n^2] = log sigma^2 + m_n and lambda_n = exp(v_n / 2 - E_q[log sigma_n^2])
(:func:`~.terms.base.noise_moments`). A latent scale a_n enters as r_n / a_n and lambda_n a_n^2. The sums over the
B x m cross-covariance come from the fused :func:`~.kernels.data_fit` (kernel, products and gradients by
hand); :func:`expected_log_lik_of_moments` is the same expected log likelihood from per-rating moments (fold-in,
and the test of the fused term).

``KL(q(v) || p(v)) = 1/2 [tr S + m^T m - m - log det S]`` is formed by :func:`~.linalg.inducing_terms`
together with w and M (one autograd node with a closed-form backward): ``WhitenedTerms.kl``.

Log priors (:func:`log_prior`, up to constants): N(0, 1 / p) on every table with a prior precision p
(embeddings, implicit factors, bilinear factors, biases): -1/2 p ||theta||^2 each.

**The trainer applies the prior term through the optimiser** (:mod:`.optim`): it maximises
:func:`elbo` with ``priors=False`` and gives Adam ``weight_decay = p / N`` on those tables, the same
gradient of -ELBO / N without a forward and backward pass over every table row per step (measured
faster); ``tests/core/test_objective.py`` checks that the two agree. With row-sparse updates of a large
catalogue, a row receives the prior's gradient lazily, when it is next touched, for every step it missed
(:class:`~.optim.RowAdam`; checked against a plain reference in ``tests/core/test_optim.py``).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .gp import WhitenedTerms
from .model import MWGPModule
from .rows import Batch
from .terms import RatingParts, noise_moments  # noqa: F401 (noise_moments: part of this module's API)

LOG_2PI = math.log(2.0 * math.pi)


# -- expected log likelihood ---------------------------------------------------------------------------
def gaussian_expected_log_lik(n: int, log_noise_sum: Tensor, *weighted_sums: Tensor) -> Tensor:
    """-1/2 [n log 2 pi + sum_n E_q[log sigma_n^2] + sum_n lambda_n (e_n^2 + v_n)] from its sums: the
    sum of E_q[log N(y_n | f_n, sigma_n^2)] with e_n = y_n - E_q[f_n] and v_n = Var_q[f_n]
    (``weighted_sums`` add up to the last sum)."""
    out = n * LOG_2PI + log_noise_sum
    for part in weighted_sums:
        out = out + part
    return -0.5 * out


def expected_log_lik_of_moments(parts: RatingParts, y: Tensor, f_mean: Tensor, f_var: Tensor) -> Tensor:
    """sum_n E_q[log N(y_n | mu_n + a_n f_n, sigma_n^2)] from the moments of f at every rating (module docstring)."""
    log_noise, weighted = weighted_squared_residuals(parts, y, f_mean, f_var)
    return gaussian_expected_log_lik(parts.n, log_noise.sum(), weighted.sum())


def weighted_squared_residuals(parts: RatingParts, y: Tensor, f_mean: Tensor, f_var: Tensor
                               ) -> tuple[Tensor, Tensor]:
    """E_q[log sigma_n^2] and lambda_n E_q[(y_n - mu_n - a_n f_n)^2] (lambda_n = E_q[1 / sigma_n^2]) at every
    rating, from the moments of f: the two per-rating parts of :func:`expected_log_lik_of_moments`."""
    mean, var = f_mean, f_var
    if parts.latent_log_scale is not None:
        scale = torch.exp(parts.latent_log_scale)
        mean, var = scale * mean, scale * scale * var
    if parts.mean_var is not None:  # a mean function with a variational posterior: E[(y - mu)^2] gains Var[mu]
        var = var + parts.mean_var
    resid = y - parts.mean - mean
    log_noise, inv_noise = noise_moments(parts)
    return log_noise, inv_noise * (resid * resid + var)


def expected_log_lik(module: MWGPModule, batch: Batch, y: Tensor, terms: WhitenedTerms) -> Tensor:
    """sum_n E_q[log N(y_n | mu_n + a_n f_n, sigma_n^2)] over the batch, by the fused data term."""
    parts = module.rating_parts(batch)
    gp = module.gp
    kernel = gp.kernel()
    x = torch.cat([rows.value for rows in parts.inputs], dim=-1)
    resid = y - parts.mean
    n = batch.n
    if parts.log_noise is None and parts.latent_log_scale is None:  # one noise variance: the faster term
        sums = kernel.data_fit(x, gp.inducing, terms.w, terms.M, resid, module.workspace)
        if parts.mean_var is not None:
            sums = sums + parts.mean_var.sum()
        noise = module.noise_variance()
        return -0.5 * n * (LOG_2PI + torch.log(noise)) - 0.5 * (n * kernel.outputscale + sums) / noise
    log_noise, inv_noise = noise_moments(parts)
    # a mean function with a variational posterior (Var[mu_n] > 0): E[(y_n - mu_n - f_n)^2] gains Var[mu_n]
    extra = [] if parts.mean_var is None else [(inv_noise * parts.mean_var).sum()]
    if parts.latent_log_scale is not None:  # a_n f_n: residual r_n / a_n, weight lambda_n a_n^2
        scale = torch.exp(parts.latent_log_scale)
        resid, inv_noise = resid / scale, inv_noise * scale * scale
    sums = kernel.data_fit(x, gp.inducing, terms.w, terms.M, resid, module.workspace, weights=inv_noise)
    return gaussian_expected_log_lik(n, log_noise.sum(), kernel.outputscale * inv_noise.sum(), sums, *extra)


# -- priors ----------------------------------------------------------------------------------------------
def gaussian_log_prior(x: Tensor, var: Tensor | float, mean: Tensor | None = None) -> Tensor:
    """log N(x | mean, diag(var)) up to constants: -1/2 sum_d (x_d - mean_d)^2 / var_d (mean: 0 by default)."""
    d = x if mean is None else x - mean
    return -0.5 * (d * d / var).sum()


def log_prior(module: MWGPModule) -> Tensor:
    """Gaussian log prior (up to constants) of every table with a prior precision: -1/2 p ||theta||^2.

    The trainer applies its gradient as Adam's weight decay (module docstring).
    """
    out = module.global_mean.new_zeros(())
    for _, spec, table in module.tables():
        if spec.prior_precision:
            out = out - 0.5 * spec.prior_precision * (table ** 2).sum()
    return out


# -- the minibatch ELBO -----------------------------------------------------------------------------------
def elbo(module: MWGPModule, batch: Batch, y: Tensor, n_data: int, jitter: float, kl_weight: float = 1.0,
         priors: bool = False, batch_size: int | None = None, share: float = 1.0) -> Tensor:
    """Unbiased minibatch estimate of the ELBO (plus, with ``priors``, the tables' Gaussian log priors).

    The trainer passes ``priors=False`` and applies those priors through Adam's weight decay (same
    gradient, no pass over every table row per step).

    Data-parallel training (:mod:`.distributed`): ``batch``, ``y`` are one process's shard of a
    minibatch of ``batch_size`` ratings (default: the shard is the minibatch) and ``share`` (1 / number
    of processes) weights the terms that do not depend on the ratings, so that the processes'
    values (and gradients) add up to this function's value on the whole minibatch.
    """
    terms = module.gp.whitened_terms(jitter)
    batch_size = batch.n if batch_size is None else batch_size
    out = -kl_weight * share * terms.kl
    if batch.n:
        out = out + expected_log_lik(module, batch, y, terms) * (n_data / batch_size)
    penalty = module.penalty()
    if penalty is not None:
        out = out + share * penalty
    if priors:
        out = out + share * log_prior(module)
    return out
