"""Early stopping's held-out ratings: the RMSE of the predictive mean after every epoch, and the noise they call for.

Under the fitted model a held-out rating's error e_n has variance noise_n + latent_n (the noise E[sigma_n^2] and
the latent variance: the GP's and, with ``mf_posterior="variational"``, the bilinear factors'). The learned noise
need not match it: under a variational posterior the noise fits E_q[(y - m)^2] of the training ratings, which
already holds the factors' variance, so the predictive counts it twice (generated data on a 20-100 scale: 90 %
intervals covered 0.97); a MAP fit's in-sample residuals are smaller than a new rating's (the same data: 0.86).
So with the variational posterior (:func:`calibrates_noise`) each run of early stopping's search keeps the
held-out ratings' errors and variances at its first best epoch (:class:`HeldOutNoise`) and, once done, the scale c
of the noise that maximises their likelihood::

    c = argmax_c sum_n log N(e_n | 0, c noise_n + latent_n)

and the final fit's noise is multiplied by the chosen run's c (:func:`~.trainer.fit_mwgp`), before its Laplace
and variational variances are formed (one 80/20 split each: 90 % coverage on the 20-100 scale
0.97 -> 0.87, NLL 2.282 -> 2.208; -10...10 0.95 -> 0.88; ML-100K 0.896 -> 0.907). Not for MAP factors: this
latent variance leaves out the Laplace variances the posterior adds, and the 20-100 case went 0.86 -> 0.95 with
a worse NLL (2.248 -> 2.252). Measured in ``docs/history.md``.

With per-level log-noise offsets s_n the same likelihood also chooses a factor lambda on them
(:func:`noise_calibration`): noise_n = c sigma^2 exp(lambda s_n). The offsets are learned from training residuals,
which over-fit where a level's ratings are the only ones of their items; one user with two thirds of 4,500
generated ratings got a tenth of the others' noise, c = 12.3 restored that user's, and the other users' intervals
covered 1.0 (std 1.98 for an RMSE of 1.13). With lambda = 0.05 and c = 8.9: 0.95 (std 1.32); on ML-100K lambda is
about 1.15.

c is read from the held-out ratings whose user and item both have ratings in the run's training part
(:func:`known_rows`); with fewer than ``SCALE_MIN_KNOWN`` of them c is 1, the fit's own noise. A held-out rating
of a level without training ratings is predicted from the level's prior, whose latent variance the cold-start
calibration sets after training (:mod:`.calibration`); counted here, it set the noise of known pairs instead:
where every item had one rating, every held-out rating was of an unseen item, and their wide latent variance
drove c to its lower bound, a noise of 0.022 in rating units against squared errors of 0.52. A new user who
then rated one film 5 was predicted 4.87 for the others (the population of users and a noise of 0.5 say about
4.3); with the fit's noise (0.70), 4.00.

**MAP factors without held-out ratings** (no early stopping: by default from 200,000 ratings; from 1,000 where
early stopping is switched off; not where it is on, which was not measured): the noise is what the training
residuals leave, smaller than a new rating's error (a bias-only world of 300,000 generated ratings with noise 1:
a training MSE of 0.881, 90 % coverage 0.888). :func:`leave_one_out_noise_scale` takes each training rating's
error as if it were left out, e_n / (1 - h_n), with the leverage h_n = latent_n / noise_n (exact for a Gaussian
linear model; here from the Laplace and GP variances), and scales the noise by the c that maximises their
likelihood (their latent variance latent_n / (1 - h_n)); the trainer then sets the Laplace variances under the
scaled noise (:func:`~.laplace.noise_scaled`). The diagonal leverages count less than the fit absorbs (their
sum 5 % of the ratings there, against 12 %), so c corrects part of it: ML-1M 5-fold coverage 0.892 -> 0.901,
NLL 1.1889 -> 1.1873; the bias world 0.883 -> 0.889.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import torch
from torch import Tensor

from .laplace import laplace_variances, variational_tables
from .model import MWGPModule
from .predictive import predictive
from .rows import Batch
from .terms import Rows

#: the noise scale is searched within [1 / SCALE_BOUND, SCALE_BOUND]
SCALE_BOUND = 32.0
#: the fewest held-out ratings of known levels the noise scale is read from (with fewer it is 1; the standard error
#: of log c on 50 ratings is about 0.2)
SCALE_MIN_KNOWN = 50
#: the most training ratings whose leave-one-out errors set a MAP fit's noise scale (log c's standard error about 0.005)
LOO_SAMPLE = 100_000
#: the largest leverage h_n = latent_n / noise_n counted (a rating that alone sets its level's row)
LEVERAGE_MAX = 0.9
#: the shrinkage factors of the log-noise offsets searched (:func:`noise_calibration`)
SHRINKS = torch.linspace(0.05, 2.0, 40, dtype=torch.float64)


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


class HeldOutNoise(NamedTuple):
    """What the noise calibration reads from the held-out ratings of known levels at one epoch (float64, (n,) each
    but ``base``): squared errors, latent variances, sigma^2 and the sum of each rating's log-noise offsets with its
    variance (None without offsets)."""
    squared: Tensor
    latent: Tensor
    base: Tensor
    offset: Tensor | None
    offset_var: Tensor | None


@torch.no_grad()
def validation_scores(module: MWGPModule, index: Tensor, y: Tensor, jitter: float, chunk_size: int,
                      with_scale: bool = False, known: Tensor | None = None) -> tuple[float, HeldOutNoise | None]:
    """(RMSE of the predictive mean on standardised held-out ratings, chunked; with ``with_scale`` what the noise
    calibration (:func:`noise_calibration`) reads from the rows ``known`` (:func:`known_rows`), None without it or
    with fewer than ``SCALE_MIN_KNOWN`` of them: the fit keeps its own noise, module docstring). The GP's moments as
    the fitted posterior forms them, in float64 (:meth:`~.gp.SparseGP.fitted`): its variance s + k^T M k is a small
    difference of large sums, which in float32 came out below 0 for some ratings (generated 20-100 data: -0.02
    against a mean of 0.003), and the noise scale searched on them was then the smallest that made every variance
    positive (7.4 instead of 0.40)."""
    if known is not None and int(known.sum()) < SCALE_MIN_KNOWN:  # no evidence on known pairs: the fit's own noise
        with_scale, known = False, None
    gp = module.gp.fitted(jitter)
    tables = module.effective_tables()
    errors, latent, offset, offset_var = [], [], [], []
    base = None
    for start in range(0, index.shape[0], chunk_size):
        parts = module.rating_parts(Batch(index[start:start + chunk_size]), tables)
        inputs = [Rows(rows.value.to(gp.w.dtype), None if rows.var is None else rows.var.to(gp.w.dtype))
                  for rows in parts.inputs]
        f_mean, f_var = gp.moments(inputs, [], variance=with_scale)
        mean, var, _ = predictive(parts, f_mean, f_var)
        errors.append(((mean - y[start:start + chunk_size]) ** 2).double())
        if with_scale:
            latent.append(var.double())
            base = torch.exp(parts.log_noise_base.double())
            if parts.log_noise is not None:  # the log-noise offsets' sum and its variance
                offset.append((parts.log_noise - parts.log_noise_base).double().expand(parts.n))
                offset_var.append(parts.log_noise_var.double().expand(parts.n))
    squared = torch.cat(errors)
    rmse = math.sqrt(float(squared.mean())) if squared.numel() else 0.0
    if not with_scale:
        return rmse, None
    keep = slice(None) if known is None else known
    return rmse, HeldOutNoise(squared[keep], torch.cat(latent)[keep], base,
                              torch.cat(offset)[keep] if offset else None,
                              torch.cat(offset_var)[keep] if offset else None)


@torch.no_grad()
def with_posterior_variances(rows: HeldOutNoise, module: MWGPModule, kept: Tensor, held: Tensor, known: Tensor,
                             config: Any, posterior_of: Callable) -> HeldOutNoise:
    """``rows`` (:func:`validation_scores` at the run's best epoch) with the latent variance that the fitted posterior
    adds to a known pair besides the GP's and the variational one: the Laplace variances of the biases, the GP's
    inputs and the other terms' rows (:mod:`.laplace`), as the final fit will form them, here at the end of the run.
    Without them the noise absorbed the levels' uncertainty that the posterior then added again (a bias-only world
    of 1,500 users x 5 ratings over 3,000 items: the noise 1.69 times the true one, 90 % intervals covering 0.951 of
    known test pairs; with them 1.03 times and 0.898). Formed as the final fit forms them: under the noise scaled by
    the calibration without them (this run's module keeps that noise: early stopping's runs are not used after their
    search), and with the held-out tuples ``held`` counted as training tuples (the final fit trains on them; a level
    with one kept and one held-out rating has two at the end: counted with one, a sparse catalogue's test ratings
    were covered 0.874 instead of 0.884). ``kept``: the run's training tuples in the order it was initialised on
    them; ``known``: which held-out tuples ``rows`` holds (:func:`known_rows`); ``config``: the run's
    :class:`~.config.MWGPConfig`; ``posterior_of``: :meth:`~.posterior.MWGPPosterior.from_module` (the posterior is
    above this module)."""
    jitter, chunk_size = config.jitter, config.chunk_size
    module.scale_noise(*noise_calibration(*rows))
    laplace = laplace_variances(module, kept, jitter, chunk_size, training=True, extra=held)
    variational = {key: laplace[key] for key in variational_tables(module)}
    pairs, latent = held[known], []
    for variances in (laplace, variational):
        post = posterior_of(module, 0.0, 1.0, jitter, chunk_size, laplace=variances,
                            embedding_uncertainty=config.embedding_uncertainty)
        latent.append(torch.cat([post.standardised_moments(pairs[start:start + chunk_size])[1].double()
                                 for start in range(0, pairs.shape[0], chunk_size)]))
    return rows._replace(latent=rows.latent + (latent[0] - latent[1]).clamp_min(0.0))


def noise_scale(squared: Tensor, latent: Tensor, noise: Tensor, iterations: int = 60) -> float:
    """The c in [1 / ``SCALE_BOUND``, ``SCALE_BOUND``] that maximises sum_n log N(e_n | 0, c noise_n + latent_n)
    (``squared`` = e_n^2), by golden-section search on log c; 1.0 without ratings or where it is not finite. A
    latent variance below 0 (rounding) counts as 0; a scale whose likelihood is not finite, as the worst."""
    if not squared.numel():
        return 1.0
    scale = math.exp(float(_best_log_scale(squared, latent, noise.unsqueeze(0), iterations)[0][0]))
    return scale if math.isfinite(scale) else 1.0


def leave_one_out_noise_scale(posterior: Any, index: Tensor, ratings: Tensor, generator: torch.Generator) -> float:
    """The noise scale c of a MAP fit without held-out ratings, from its training ratings' approximate leave-one-out
    errors (module docstring): on a seeded sample of at most ``LOO_SAMPLE`` of the training tuples ``index`` and
    their ``ratings`` (standardised units), the c that maximises
    sum_n log N(e_n / (1 - h_n) | 0, c noise_n + latent_n / (1 - h_n)), h_n = latent_n / noise_n (at most
    ``LEVERAGE_MAX``): in a Gaussian linear model a left-out rating's error has variance noise_n / (1 - h_n), which
    is c = 1 where the noise is right."""
    n = index.shape[0]
    if n > LOO_SAMPLE:
        pick = torch.randperm(n, generator=generator, device=generator.device)[:LOO_SAMPLE].to(index.device)
        index, ratings = index[pick], ratings[pick]
    mean, latent, noise = posterior.standardised_moments(index)
    mean, latent, noise = mean.double(), latent.double().clamp_min(0.0), noise.double()
    leverage = (latent / noise).clamp(max=LEVERAGE_MAX)
    errors = (ratings.to(mean) - mean) / (1.0 - leverage)
    return noise_scale(errors * errors, latent / (1.0 - leverage), noise)


def noise_calibration(squared: Tensor, latent: Tensor, base: Tensor, offset: Tensor | None,
                      offset_var: Tensor | None, shrinks: Tensor | None = None,
                      iterations: int = 60) -> tuple[float, float]:
    """(c, lambda): the scale of sigma^2 and the shrinkage of the log-noise offsets that maximise
    sum_n log N(e_n | 0, c sigma^2 exp(lambda s_n + lambda^2 v_n / 2) + latent_n), s_n ~ N(offset, offset_var)
    the sum of the rating's offsets; lambda on the grid ``shrinks``, c by golden section for each."""
    if not squared.numel():
        return 1.0, 1.0
    if offset is None:
        return noise_scale(squared, latent, base.expand(squared.shape[0]), iterations), 1.0
    shrinks = SHRINKS if shrinks is None else shrinks
    lam = shrinks.to(squared).unsqueeze(1)
    noise = base * torch.exp(lam * offset.unsqueeze(0) + 0.5 * lam * lam * offset_var.unsqueeze(0))
    log_c, value = _best_log_scale(squared, latent, noise, iterations)
    k = int(torch.argmin(value))
    return math.exp(float(log_c[k])), float(shrinks[k])


def _best_log_scale(squared: Tensor, latent: Tensor, noise: Tensor, iterations: int) -> tuple[Tensor, Tensor]:
    """For every row of ``noise`` (L, n): the log c in [-log ``SCALE_BOUND``, log ``SCALE_BOUND``] minimising
    sum_n log(c noise_n + latent_n) + e_n^2 / (c noise_n + latent_n), by golden section (all rows at once), and
    that minimum (a non-finite value counts as the worst)."""
    latent = latent.clamp_min(0.0).unsqueeze(0)
    squared = squared.unsqueeze(0)

    def nll(log_c: Tensor) -> Tensor:
        total = torch.exp(log_c).unsqueeze(1) * noise + latent
        value = (torch.log(total) + squared / total).sum(1)
        return torch.where(torch.isfinite(value), value, torch.full_like(value, math.inf))

    rows = noise.shape[0]
    low = torch.full((rows,), -math.log(SCALE_BOUND), dtype=noise.dtype, device=noise.device)
    high = -low
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = nll(a), nll(b)
    for _ in range(iterations):
        left = fa <= fb  # the minimum lies in [low, b] (b becomes a, a new a is probed), else in [a, high]
        high, low = torch.where(left, b, high), torch.where(left, low, a)
        probe = torch.where(left, high - ratio * (high - low), low + ratio * (high - low))
        value = nll(probe)
        a, b, fa, fb = (torch.where(left, probe, b), torch.where(left, a, probe), torch.where(left, value, fb),
                        torch.where(left, fa, value))
    mid = 0.5 * (low + high)
    return mid, nll(mid)


def run_calibration(tried: list) -> tuple[float, float]:
    """A finished run's noise calibration (c, lambda) from its entry [setting, curve, calibration] of early
    stopping's search (checkpointed); a release before the offsets' shrinkage recorded c after every epoch, one
    before the noise scale nothing."""
    if len(tried) < 3:
        return 1.0, 1.0
    if isinstance(tried[2], dict):
        return float(tried[2]["c"]), float(tried[2]["shrink"])
    return recorded_calibration(tried[2][min(range(len(tried[1])), key=tried[1].__getitem__)])


def recorded_calibration(recorded: float | list[float]) -> tuple[float, float]:
    """A recorded noise calibration as (c, lambda): a release before the offsets' shrinkage wrote c alone."""
    if isinstance(recorded, (int, float)):
        return float(recorded), 1.0
    return float(recorded[0]), float(recorded[1])
