"""Predictive moments of the latent f for every pattern of known and unseen levels.

Unseen levels (index -1) are integrated out: the unknown embedding is given the Gaussian that
matches the moments of the learned embeddings of that factor (their spread plus their average
Laplace posterior variance: :func:`population`), its kernel factor is replaced by its closed-form
expectations (psi statistics, :func:`~.kernels.rbf_expectations`), and the unknown bias and bilinear
factor contribute their mean and variance (likewise). With random kernel vector
k = outputscale * prod_f k_f and psi1 = E[k], Psi2 = E[k k^T]:

    E[f]   = psi1^T w
    Var[f] = outputscale + tr((M + w w^T) Psi2) - (psi1^T w)^2

A known level's own Laplace variances (``embedding_uncertainty``) enter by the delta method:
J^T diag(v) J for the GP input (J = d E[f] / d x), plus the bias variance.

The bilinear term p_u . q_i of the mean function (``mf_rank`` > 0) adds, with independent
Gaussians p ~ N(m_p, v_p) and q ~ N(m_q, v_q) per dimension (a known level: its own factor and,
with ``embedding_uncertainty``, its Laplace variance; an unseen one: the learned population's),

    E[p . q] = m_p . m_q,    Var[p . q] = sum_d (v_p m_q^2 + m_p^2 v_q + v_p v_q)_d

Everything here reads the fitted tensors of a :class:`~.posterior.MWGPPosterior` (``post``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .kernels import cross_kernel, rbf_mean_gradient

if TYPE_CHECKING:  # pragma: no cover
    from .posterior import MWGPPosterior

# every prediction GEMM has a multiple of _ROW_PAD and at most _ROW_BLOCK rows (_pattern_moments)
_ROW_PAD, _ROW_BLOCK = 64, 1024


def population(tables: list[Tensor], laplace: list[Tensor] | None, floor: float = 0.0) -> tuple[Tensor, Tensor]:
    """Mean and variance, per factor, of the learned values of its levels (embeddings, biases or bilinear
    factors): their spread (at least ``floor``) plus their average Laplace variance, if given (law of total
    variance: point estimates are shrunk towards the prior, the population of true values is wider)."""
    mean = torch.stack([t.mean(0) for t in tables])
    var = torch.stack([t.var(0, unbiased=False) for t in tables]).clamp_min(floor)
    if laplace is not None:
        var = var + torch.stack([v.to(var).mean(0) for v in laplace])
    return mean, var


def latent_moments(post: "MWGPPosterior", index: Tensor) -> tuple[Tensor, Tensor]:
    """Mean (mean function included) and variance of f at index tuples (-1: unseen), standardised units."""
    unknown = index < 0
    code = (unknown.long() * (2 ** torch.arange(post.n_factors, device=index.device))).sum(1)
    codes = torch.unique(code).tolist()
    if len(codes) == 1:
        return _pattern_moments(post, index, codes[0])
    mean = torch.empty(index.shape[0], dtype=post.dtype, device=post.device)
    var = torch.empty_like(mean)
    for c in codes:
        rows = (code == c).nonzero().squeeze(1)
        mean[rows], var[rows] = _pattern_moments(post, index[rows], c)
    return mean, var


def _pattern_moments(post: "MWGPPosterior", index: Tensor, code: int) -> tuple[Tensor, Tensor]:
    """Moments of f for rows that share one pattern of unknown factors (bit f of ``code``: factor f unseen).

    The rows are padded to a multiple of ``_ROW_PAD`` (copies of the first row) and computed in
    blocks of at most ``_ROW_BLOCK`` rows: BLAS sums in another order for products with few
    rows, so without the padding a pair's prediction would change in its last bits with the
    rows it is computed with (``predict(u, i)`` vs ``test(testset)``; scikit-learn's subset
    invariance). With it every prediction is bit-identical whatever its batch, float32 too
    (``tests/core/test_posterior.py``); cache-sized blocks are also faster than one product.
    """
    n = index.shape[0]
    pad = -n % _ROW_PAD
    if pad:
        index = torch.cat([index, index[:1].expand(pad, -1)])
    parts = [_rows_moments(post, index[start:start + _ROW_BLOCK], code) for start in range(0, n + pad, _ROW_BLOCK)]
    mean, var = parts[0] if len(parts) == 1 else (torch.cat(t) for t in zip(*parts))
    return mean[:n], var[:n]


def _rows_moments(post: "MWGPPosterior", index: Tensor, code: int) -> tuple[Tensor, Tensor]:
    r = post.latent_dim
    known = [f for f in range(post.n_factors) if not code >> f & 1]
    unknown = [f for f in range(post.n_factors) if code >> f & 1]
    if known:
        x = torch.cat([post.embeddings[f][index[:, f]] for f in known], dim=-1)
        if unknown:
            dims = torch.cat([torch.arange(f * r, (f + 1) * r, device=post.device) for f in known])
            z, ls = post.inducing[:, dims], post.lengthscale[dims]
        else:
            z, ls = post.inducing, post.lengthscale
        kk = cross_kernel(x, z, ls, post.outputscale)  # one GEMM + exp
    else:
        kk = post.outputscale * torch.ones(index.shape[0], post.n_inducing, dtype=post.dtype, device=post.device)
    if unknown:  # (M + w w^T) ⊙ Psi2_U and w ⊙ psi1_U: m x m work per chunk and pattern
        quad = post.M + torch.outer(post.w, post.w)
        lin = post.w
        for f in unknown:
            quad = quad * post.psi2[f]
            lin = lin * post.psi1[f]
    else:
        quad, lin = post.M, post.w
    proj = kk @ lin
    mean = post.global_mean + proj
    var = post.outputscale + ((kk @ quad) * kk).sum(-1)
    if known and post.input_var:  # estimation uncertainty of the known inputs and biases (delta method)
        grad = rbf_mean_gradient(kk * lin, x, z, ls)  # d E[f] / d x
        v = torch.cat([post.input_var[f][index[:, f]] for f in known], dim=-1)
        var = var + (grad * grad * v).sum(-1)
        for f in known:
            var = var + post.level_bias_var[f][index[:, f]]
    for f in known:
        mean = mean + post.biases[f][index[:, f]]
    if unknown:
        var = var - proj ** 2
        for f in unknown:
            mean = mean + post.bias_mean[f]
            var = var + post.bias_var[f]
    if post.mf_factors:
        mf_mean, mf_var = bilinear_moments(post, index, code)
        mean, var = mean + mf_mean, var + mf_var
    floor = torch.finfo(post.dtype).eps * post.outputscale
    return mean, torch.maximum(var, floor)


def bilinear_moments(post: "MWGPPosterior", index: Tensor, code: int) -> tuple[Tensor, Tensor]:
    """Mean and variance of p_u . q_i (module docstring) for rows that share one pattern."""
    moments = []
    for f in (0, 1):
        if code >> f & 1:  # unseen: the learned population's mean and variance
            moments.append((post.mf_mean[f], post.mf_var[f]))
        else:
            rows = index[:, f]
            moments.append((post.mf_factors[f][rows], post.mf_level_var[f][rows] if post.mf_level_var else None))
    (mp, vp), (mq, vq) = moments
    mean = (mp * mq).sum(-1).expand(index.shape[0])
    var = torch.zeros_like(mean)
    if vp is not None:
        var = var + (vp * mq * mq).sum(-1)
    if vq is not None:
        var = var + (vq * mp * mp).sum(-1)
    if vp is not None and vq is not None:
        var = var + (vp * vq).sum(-1)
    return mean, var
