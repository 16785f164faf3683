"""Early stopping's held-out ratings: the RMSE of the predictive mean after every epoch, and the noise scale they call for.

Under the fitted model a held-out rating's error e_n has variance noise_n + latent_n (the noise E[sigma_n^2] and
the latent variance: the GP's and, with ``mf_posterior="variational"``, the bilinear factors'). The learned noise
need not match it: under a variational posterior the noise fits E_q[(y - m)^2] of the training ratings, which
already holds the factors' variance, so the predictive counts it twice (generated data on a 20-100 scale: 90 %
intervals covered 0.97); a MAP fit's in-sample residuals are smaller than a new rating's (the same data: 0.86).
So with the variational posterior (:func:`calibrates_noise`) every epoch of early stopping's runs also records
the scale c of the noise that maximises the held-out ratings' likelihood::

    c = argmax_c sum_n log N(e_n | 0, c noise_n + latent_n)

and the final fit's noise is multiplied by the chosen run's c at its chosen epoch (:func:`~.trainer.fit_mwgp`),
before its Laplace and variational variances are formed (one 80/20 split each: 90 % coverage on the 20-100 scale
0.97 -> 0.87, NLL 2.282 -> 2.208; -10...10 0.95 -> 0.88; ML-100K 0.896 -> 0.907). Not for MAP factors: this
latent variance leaves out the Laplace variances the posterior adds, and the 20-100 case went 0.86 -> 0.95 with
a worse NLL (2.248 -> 2.252). Measured in ``docs/history.md``.

c is read from the held-out ratings whose user and item both have ratings in the run's training part
(:func:`known_rows`); with fewer than ``SCALE_MIN_KNOWN`` of them c is 1, the fit's own noise. A held-out rating
of a level without training ratings is predicted from the level's prior, whose latent variance the cold-start
calibration sets after training (:mod:`.calibration`); counted here, it set the noise of known pairs instead:
where every item had one rating, every held-out rating was of an unseen item, and their wide latent variance
drove c to its lower bound, a noise of 0.022 in rating units against squared errors of 0.52. A new user who
then rated one film 5 was predicted 4.87 for the others (the population of users and a noise of 0.5 say about
4.3); with the fit's noise (0.70), 4.00.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .model import MWGPModule
from .predictive import predictive
from .rows import Batch
from .terms import Rows

#: the noise scale is searched within [1 / SCALE_BOUND, SCALE_BOUND]
SCALE_BOUND = 32.0
#: the fewest held-out ratings of known levels the noise scale is read from (with fewer it is 1; the standard error
#: of log c on 50 ratings is about 0.2)
SCALE_MIN_KNOWN = 50


def calibrates_noise(module: MWGPModule) -> bool:
    """Whether a fit with early stopping scales its noise on the held-out ratings: where the model holds a
    variational posterior (the bilinear factors'), whose learned noise holds its variance (module docstring)."""
    return module.variational


def known_rows(held: Tensor, kept: Tensor) -> Tensor:
    """Which of the held-out index tuples ``held`` (n, F) have every level among the training tuples ``kept``."""
    known = torch.ones(held.shape[0], dtype=torch.bool, device=held.device)
    for f in range(held.shape[1]):
        seen = torch.zeros(int(max(held[:, f].max(), kept[:, f].max())) + 1, dtype=torch.bool, device=held.device)
        seen[kept[:, f]] = True
        known &= seen[held[:, f]]
    return known


@torch.no_grad()
def validation_scores(module: MWGPModule, index: Tensor, y: Tensor, jitter: float, chunk_size: int,
                      with_scale: bool = False, known: Tensor | None = None) -> tuple[float, float]:
    """(RMSE of the predictive mean, the noise scale of :func:`noise_scale`, or 1.0 without ``with_scale``) on
    standardised held-out ratings, chunked; the scale from the rows ``known`` (:func:`known_rows`), 1.0 with fewer
    than ``SCALE_MIN_KNOWN`` of them (module docstring). The GP's moments as the fitted posterior forms them, in float64
    (:meth:`~.gp.SparseGP.fitted`): its variance s + k^T M k is a small difference of large sums, which in float32
    came out below 0 for some ratings (generated 20-100 data: -0.02 against a mean of 0.003), and the noise
    scale searched on them was then the smallest that made every variance positive (7.4 instead of 0.40)."""
    if known is not None and int(known.sum()) < SCALE_MIN_KNOWN:  # no evidence on known pairs: the fit's own noise
        with_scale, known = False, None
    gp = module.gp.fitted(jitter)
    tables = module.effective_tables()
    errors, latent, noise = [], [], []
    for start in range(0, index.shape[0], chunk_size):
        parts = module.rating_parts(Batch(index[start:start + chunk_size]), tables)
        inputs = [Rows(rows.value.to(gp.w.dtype), None if rows.var is None else rows.var.to(gp.w.dtype))
                  for rows in parts.inputs]
        f_mean, f_var = gp.moments(inputs, [], variance=with_scale)
        mean, var, noise_n = predictive(parts, f_mean, f_var)
        errors.append(((mean - y[start:start + chunk_size]) ** 2).double())
        if with_scale:
            latent.append(var.double())
            noise.append(noise_n.double())
    squared = torch.cat(errors)
    rmse = math.sqrt(float(squared.mean())) if squared.numel() else 0.0
    if not with_scale:
        return rmse, 1.0
    latent_n, noise_n = torch.cat(latent), torch.cat(noise)
    if known is not None:
        squared, latent_n, noise_n = squared[known], latent_n[known], noise_n[known]
    return rmse, noise_scale(squared, latent_n, noise_n)


def noise_scale(squared: Tensor, latent: Tensor, noise: Tensor, iterations: int = 60) -> float:
    """The c in [1 / ``SCALE_BOUND``, ``SCALE_BOUND``] that maximises sum_n log N(e_n | 0, c noise_n + latent_n)
    (``squared`` = e_n^2), by golden-section search on log c; 1.0 without ratings or where it is not finite. A
    latent variance below 0 (rounding) counts as 0; a scale whose likelihood is not finite, as the worst."""
    if not squared.numel():
        return 1.0
    latent = latent.clamp_min(0.0)

    def nll(log_c: float) -> float:
        total = math.exp(log_c) * noise + latent
        value = float((torch.log(total) + squared / total).sum())
        return value if math.isfinite(value) else math.inf

    low, high = -math.log(SCALE_BOUND), math.log(SCALE_BOUND)
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = nll(a), nll(b)
    for _ in range(iterations):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = nll(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = nll(b)
    scale = math.exp(0.5 * (low + high))
    return scale if math.isfinite(scale) else 1.0
