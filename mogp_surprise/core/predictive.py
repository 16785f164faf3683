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

Cold-start calibration (:func:`cold_start_scales`). The population above is built from point
estimates and their Laplace variances, and training users' ratings helped fit the items they are
predicted for; on MovieLens 100K held-out users' squared errors exceeded the cold-start variance by
0-36 % (five splits, 10 % of the users each) and held-out items' 90 % intervals covered 83-85 %
of their ratings. So after training, every training rating is predicted as if
its user (item, or both) were unseen, and the latent variance of each pattern of unseen factors is
scaled by

    c = max(1, (sum_n e_n^2 / (1 - h_n)^2 - sum_n E[sigma_n^2]) / sum_n Var[f_n])

(e_n the residual from the pattern's mean; E[sigma_n^2] its noise). h_n = sum over the known levels
of Var(bias) / E[sigma_n^2] is the rating's leverage on the known level's bias (the Laplace
variance of the bias is the inverse of its precision, which each rating adds lambda_n to), so
e_n / (1 - h_n) approximates the residual the pattern would give had this rating been left out of
training (leave-one-out). The scale only widens: the in-sample estimate is still optimistic.

Everything here reads the fitted tensors of a :class:`~.posterior.MWGPPosterior` (``post``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from .kernels import cross_kernel, rbf_mean_gradient
from .model import distinct_rows

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
    if unknown:
        var = var * post.cold_scale[code]
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


#: rows of the training data that :func:`cold_start_scales` reads at most (evenly spaced beyond)
CALIBRATION_ROWS = 1_000_000
#: largest leverage h_n used (a level's bias variance is below each of its ratings' noise variance)
MAX_LEVERAGE = 0.99


@torch.no_grad()
def cold_start_scales(post: "MWGPPosterior", index: np.ndarray, ratings: np.ndarray,
                      bias_var: list[Tensor]) -> Tensor:
    """The factor for the latent variance of every pattern of unseen factors (module docstring), shape (2^F,).

    Parameters
    ----------
    post : MWGPPosterior
        The fitted posterior; its own ``cold_scale`` is divided out (the factors are those of its
        uncalibrated moments).
    index : int ndarray of shape (n, F)
        The training tuples (inner indices), ratings on the original scale in ``ratings``.
    bias_var : list of Tensor
        Laplace variance of every level's bias, per factor, standardised units
        (:func:`~.laplace.level_variances`; zeros without biases).

    Returns
    -------
    Tensor
        Entry ``code`` (bit f set: factor f unseen) scales that pattern's latent variance; entry 0 is 1.
    """
    n, n_factors = index.shape
    if n > CALIBRATION_ROWS:  # the factors are ratios of sums: evenly spaced rows estimate them well
        keep = np.linspace(0, n - 1, CALIBRATION_ROWS).astype(np.int64)
        index, ratings = index[keep], ratings[keep]
    idx = torch.as_tensor(index, dtype=torch.long, device=post.device)
    y = torch.as_tensor((np.asarray(ratings, dtype=np.float64) - post.rating_mean) / post.rating_std,
                        dtype=post.dtype, device=post.device)
    noise = post.noise_var_at(idx)  # E[sigma_n^2] of the training ratings (standardised)
    # each rating's leverage on the bias of its level of every factor
    bias_leverage = [bias_var[f].to(y)[idx[:, f]] / noise for f in range(n_factors)]
    scales = torch.ones(2 ** n_factors, dtype=post.dtype, device=post.device)
    for code in range(1, 2 ** n_factors):
        unknown = [f for f in range(n_factors) if code >> f & 1]
        pattern = index.copy()
        pattern[:, unknown] = -1
        rows, inverse = _distinct_rows(pattern, post.n_levels)
        rows_t = torch.as_tensor(rows, dtype=torch.long, device=post.device)
        inverse_t = torch.as_tensor(inverse, dtype=torch.long, device=post.device)
        mean, var = latent_moments(post, rows_t)
        var = var / post.cold_scale[code]
        pattern_noise = post.noise_var_at(rows_t)[inverse_t]
        leverage = sum((bias_leverage[f] for f in range(n_factors) if f not in unknown), torch.zeros_like(y))
        resid = ((y - mean[inverse_t]) / (1.0 - leverage.clamp(0.0, MAX_LEVERAGE))).double()
        spread = float((resid * resid).sum() - pattern_noise.double().sum())
        scales[code] = max(1.0, spread / float(var[inverse_t].double().sum()))
    return scales


def _distinct_rows(index: np.ndarray, n_levels: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an (n, F) index with -1 entries, and each row's place among them."""
    try:  # one integer key per row: a 1-d unique is much faster than np.unique(axis=0)
        keys = np.ravel_multi_index(tuple((index + 1).T), tuple(n + 1 for n in n_levels))
    except ValueError:  # too many combinations for one integer
        rows, inverse = np.unique(index, axis=0, return_inverse=True)
        return rows, inverse.reshape(-1)
    distinct, inverse = distinct_rows(torch.from_numpy(np.asarray(keys, dtype=np.int64)))
    rows = np.stack(np.unravel_index(distinct.numpy(), tuple(n + 1 for n in n_levels)), 1) - 1
    return rows, inverse.numpy()
