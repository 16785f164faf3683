"""Cold-start calibration: the latent variance of unseen users and items matched on the training ratings.

The population an unseen level is integrated over is built from point estimates and their Laplace
variances, and training users' ratings helped fit the items they are predicted for; on MovieLens 100K
held-out users' squared errors exceeded the cold-start variance by 0-36 % (five splits, 10 % of the
users each) and held-out items' 90 % intervals covered 83-85 % of their ratings. So after training,
every training rating is predicted as if its user (item, or both) were unseen, and the latent variance
of each pattern of unseen factors is scaled by

    c = (sum_n e_n^2 / (1 - h_n)^2 - sum_n E[sigma_n^2]) / sum_n Var[f_n]

(e_n the residual from the pattern's mean; E[sigma_n^2] its noise). h_n = sum over the known levels
of Var(b) / E[sigma_n^2] is the rating's leverage on the known level's bias-like values (a term's
``unit_mean_tables``: the Laplace variance of such a value is the inverse of its precision, which each
rating adds lambda_n to), so e_n / (1 - h_n) approximates the residual the pattern would give had this
rating been left out of training (leave-one-out). The estimate is still made on levels the model has seen, so
it may only narrow (c < 1) where the training ratings show that clearly: then c is its one-sided upper 95 % bound
(Student's t quantile over the levels of the unseen factor, the ratings of one level counted as one draw, since
they share that level's effect; from ``MIN_LEVELS`` levels), and no narrower than the c that maximises the
likelihood sum_n log N(e_n | 0, E[sigma_n^2] + c Var[f_n]) (searched within [1/32, 32]), at most 1. The ratio weighs
every rating alike, so ratings whose noise is over-estimated pull it down for all: with one user holding two
thirds of the ratings (light users' noise far too wide), the ratio fell below 0 and that user's unseen items'
intervals covered 0.64; the likelihood weighs each rating by its precision (0.98). Where every item had one
rating (2,000 ratings, items without an effect), the unseen items' latent variance came out 2.6 times their
squared errors, and the 90 % intervals covered 0.99 of the test ratings when the factor could only widen; 0.95
with the factor at its floor (what is left is the fit's own noise, 0.70 against squared errors of 0.52).
A folded-in user starts from the same population, so their Laplace variances are scaled by the unseen user's
factor too (:meth:`~.posterior.MWGPPosterior.with_extra_users`).

On few ratings the global mean is also set to its optimum given the rest of the fit (:func:`centred_global_mean`).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .predictive import noise_variances, predictive_moments
from .rows import distinct_index_rows
from .validation import noise_scale

#: rows of the training data that :func:`cold_start_scales` reads at most (evenly spaced beyond)
CALIBRATION_ROWS = 1_000_000
#: largest leverage h_n used (a level's bias variance is below each of its ratings' noise variance)
MAX_LEVERAGE = 0.99
#: a factor below 1 is taken to its one-sided upper 95 % bound (the normal quantile; Student's t on few levels)
NARROWING_Z = 1.6448536269514722
#: the fewest levels of the unseen factor among the training ratings that a factor below 1 is estimated on (the
#: bound's variance is a sum over them: with one user, the only level, it is 0); with fewer the factor stays 1
MIN_LEVELS = 10


@torch.no_grad()
def centred_global_mean(post: Any, index: np.ndarray, ratings: np.ndarray) -> Any:
    """``post`` with its global mean moved by the noise-weighted mean of the training residuals.

    The expected log-likelihood's stationary point in the global mean mu is sum_n (y_n - m_n) / E[sigma_n^2] = 0,
    and every predictive mean m_n moves one for one with mu, so one step reaches it. Training meets it where it
    runs to convergence; below ``EARLY_STOPPING_MIN`` ratings it is some twenty full-batch steps from the closed-form
    start, and with one user rating 240 items the predictions of the training items averaged up to 0.02 away from
    the ratings' mean (``docs/history.md``). ``index`` holds the training tuples (inner indices), ``ratings`` their
    values on the original scale.
    """
    idx = torch.as_tensor(index, dtype=torch.long, device=post.device)
    y = torch.as_tensor((np.asarray(ratings, dtype=np.float64) - post.rating_mean) / post.rating_std,
                        dtype=torch.float64, device=post.device)
    weighted = weights = 0.0
    for start in range(0, idx.shape[0], post.chunk_size):
        mean, _, noise = predictive_moments(post.state, post.psi, idx[start:start + post.chunk_size])
        w = 1.0 / noise.double()
        weighted += float((w * (y[start:start + post.chunk_size] - mean.double())).sum())
        weights += float(w.sum())
    step = weighted / weights
    return type(post)(replace(post.state, global_mean=post.state.global_mean + step))


@torch.no_grad()
def cold_start_scales(post: Any, index: np.ndarray, ratings: np.ndarray, laplace: dict) -> Tensor:
    """The factor for the latent variance of every pattern of unseen factors (module docstring), shape (2^F,).

    Parameters
    ----------
    post : MWGPPosterior
        The fitted posterior; its own ``cold_scale`` is divided out (the factors are those of its
        uncalibrated moments).
    index : int ndarray of shape (n, F)
        The training tuples (inner indices), ratings on the original scale in ``ratings``.
    laplace : dict
        The Laplace variances of the fit (:func:`~.laplace.laplace_variances`), standardised units.

    Returns
    -------
    Tensor
        Entry p (bit f set: factor f unseen) scales that pattern's latent variance; entry 0 is 1.
    """
    n, n_factors = index.shape
    if n > CALIBRATION_ROWS:  # the factors are ratios of sums: evenly spaced rows estimate them well
        keep = np.linspace(0, n - 1, CALIBRATION_ROWS).astype(np.int64)
        index, ratings = index[keep], ratings[keep]
    idx = torch.as_tensor(index, dtype=torch.long, device=post.device)
    y = torch.as_tensor((np.asarray(ratings, dtype=np.float64) - post.rating_mean) / post.rating_std,
                        dtype=post.dtype, device=post.device)
    state, psi = post.state, post.psi
    noise = torch.cat([noise_variances(state, idx[start:start + post.chunk_size])  # E[sigma_n^2] (standardised)
                       for start in range(0, idx.shape[0], post.chunk_size)])
    # each rating's leverage on the bias-like values of its level of every factor
    leverage_of = [torch.zeros_like(y) for _ in range(n_factors)]
    for fitted in state.terms:
        for name in fitted.term.unit_mean_tables:
            spec = fitted.spec(name)
            variance = laplace.get((fitted.name, name))
            if variance is not None:
                leverage_of[spec.factor] = leverage_of[spec.factor] + variance.to(y)[idx[:, spec.factor]] / noise
    scales = torch.ones(2 ** n_factors, dtype=post.dtype, device=post.device)
    for pattern in range(1, 2 ** n_factors):
        unseen = [f for f in range(n_factors) if pattern >> f & 1]
        masked = np.where(np.isin(np.arange(n_factors), unseen), -1, index)
        rows, inverse = distinct_index_rows(masked, post.n_levels)
        rows_t = torch.as_tensor(rows, dtype=torch.long, device=post.device)
        inverse_t = torch.as_tensor(inverse, dtype=torch.long, device=post.device)
        mean, var, pattern_noise = predictive_moments(state, psi, rows_t)
        var = var / state.cold_scale[pattern]
        leverage = sum((leverage_of[f] for f in range(n_factors) if f not in unseen), torch.zeros_like(y))
        resid = ((y - mean[inverse_t]) / (1.0 - leverage.clamp(0.0, MAX_LEVERAGE))).double()
        squared, noise_n, var_n = resid * resid, pattern_noise[inverse_t].double(), var[inverse_t].double()
        excess = squared - noise_n
        ratio = float(excess.sum() / var_n.sum())
        if ratio < 1.0:  # clusters: the levels of the unseen factor with the fewest levels
            f = min(unseen, key=lambda f: post.n_levels[f])
            bound = _upper_bound(ratio, excess, var_n, idx[:, f], post.n_levels[f])
            # and no narrower than the likelihood's optimum of noise + c var (the noise scale's search, roles swapped)
            ratio = min(1.0, max(bound, noise_scale(squared, noise_n, var_n)))
        scales[pattern] = ratio
    return scales


def _upper_bound(ratio: float, excess: Tensor, var: Tensor, cluster: Tensor, n_clusters: int) -> float:
    """The one-sided upper 95 % bound of the ratio sum(excess) / sum(var) with the rows of one cluster (one level)
    as one draw: the sandwich variance of the ratio estimator over the G clusters present, times G / (G - 1), and
    Student's t quantile on G - 1 degrees of freedom; infinite below ``MIN_LEVELS`` clusters."""
    g = int(torch.unique(cluster).numel())
    if g < MIN_LEVELS:
        return math.inf
    per_row = excess - ratio * var
    per_level = torch.zeros(n_clusters, dtype=per_row.dtype, device=per_row.device).index_add_(0, cluster, per_row)
    return ratio + t_quantile_95(g - 1) * math.sqrt(float(per_level.square().sum()) * g / (g - 1)) / float(var.sum())


def t_quantile_95(dof: int) -> float:
    """Student's t 95 % quantile on ``dof`` degrees of freedom by its Cornish-Fisher expansion in 1 / dof
    (Abramowitz & Stegun 26.7.5; to 1e-4 from 9 degrees of freedom on; the core does without scipy)."""
    z = NARROWING_Z
    return (z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * dof ** 3))
