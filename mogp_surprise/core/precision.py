"""Where float32 serves a fitted model, and where it must not.

A float32 posterior predicts about twice as fast as a float64 one, and on rating data such as MovieLens agrees
with it to a few parts in a million on the mean and 0.2 % on the variance. Its variance subtracts two large
numbers (the prior's variance less k M k), so where the GP is pinned down by data that barely vary (every rating
the same) float32 loses the variance altogether: 0.27 against 0.21 for one pair. :func:`serving_dtype` keeps a
model in float64 where, on a seeded sample of pairs, float32 would not agree with it to ``VAR_RTOL``.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

#: Largest relative error of the predictive variance (noise included) that a float32 posterior may show.
VAR_RTOL = 1e-2
#: Largest error of its mean, in rating standard deviations.
MEAN_ATOL = 1e-4
#: Pairs of the sample compared (levels drawn uniformly, unseen ones included).
SAMPLE = 512


def serving_dtype(exact: Any, dtype: torch.dtype) -> Any:
    """``exact`` (a float64 :class:`~.posterior.MWGPPosterior`) in ``dtype``, unless float32 would change its
    predictions beyond ``VAR_RTOL`` / ``MEAN_ATOL`` on a seeded sample of pairs: then ``exact`` itself."""
    if dtype == torch.float64:
        return exact
    fast = exact.to(dtype=dtype)
    rng = np.random.default_rng(0)
    index = np.stack([rng.integers(-1, n, SAMPLE) for n in exact.n_levels], axis=1)
    mean, var = exact.predict(index)
    fast_mean, fast_var = fast.predict(index)
    mean_error = float(np.abs(fast_mean - mean).max()) / exact.rating_std
    var_error = float((np.abs(fast_var - var) / var).max())
    if mean_error <= MEAN_ATOL and var_error <= VAR_RTOL:
        return fast
    logger.info("the fitted model is kept in float64: in float32 its predictions would move by up to %.2g rating "
                "std in the mean and %.2g relative in the variance (tolerances %g, %g; posterior_.dtype says which "
                "a model serves in)", mean_error, var_error, MEAN_ATOL, VAR_RTOL)
    return exact


def rating_scale(standardised: Tensor, rating_mean: float, rating_std: float) -> Tensor:
    """Standardised values on the rating scale, in float64: a float32 sum with a large mean (ratings around 1e6)
    would round them to its last place (0.06 there)."""
    return standardised.double() * rating_std + rating_mean
