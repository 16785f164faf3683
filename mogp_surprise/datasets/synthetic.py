"""Seeded synthetic rating data with known heteroscedastic noise, for tests and scale benchmarks.

Generative model, per (user ``u``, item ``i``) pair:

- latent vectors ``x_u, w_i ~ N(0, I / sqrt(latent_dim))`` and biases ``b_u, b_i ~ N(0, 0.5^2)``;
- interaction ``h = (<x_u, w_i> + a * rbf(x_u, w_i)) / sqrt(1 + a^2)`` with ``a = nonlinearity``,
  where ``rbf = exp(-|x_u - w_i|^2 / (2 sqrt(latent_dim)))`` standardised to zero mean and unit
  variance, so ``a = 0`` is plain matrix factorisation and larger ``a`` is more nonlinear;
- ``f = mid + width / 2 * tanh(0.2 + 0.45 * (b_u + b_i + h) / sqrt(1.5))``, strictly inside the
  rating scale (``mid``, ``width``: its centre and width), mean a little above ``mid``;
- ``noise_std = low + (high - low) * sigmoid(g_u + g_i)`` with ``g_u, g_i ~ N(0, 1)``;
- ``rating = clip(f + noise_std * eps)``, rounded first when ``integer=True``.

(user, item) pairs are unique and drawn with Zipf-like popularity on users and items.
"""
from __future__ import annotations

import logging
import math
import numbers
import operator
from typing import Sequence, Union

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

RandomState = Union[None, int, np.random.Generator]

_DENSE_FRACTION = 0.25  # above this density, sample pairs exactly from the full pair grid
_MIN_ACCEPTANCE = 0.2   # below this share of new pairs per round, the skew is lowered
_CHUNK = 1 << 20        # rows per vectorised block when computing ratings


def _check_int(name: str, value, minimum: int = 1) -> int:
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        result = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}") from None
    if result < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return result


def _check_real(name: str, value, minimum: float = 0.0) -> float:
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= {minimum}; got {value!r}") from None
    if not math.isfinite(result) or result < minimum:
        raise ValueError(f"{name} must be a finite number >= {minimum}; got {value!r}")
    return result


def _check_pair(name: str, value, rule: str, valid) -> tuple[float, float]:
    """Finite (low, high) with ``valid(low, high)``; for noise_std a number means (value, value)."""
    pair = (value, value) if np.isscalar(value) and name == "noise_std" else value
    try:
        low, high = (float(v) for v in pair)
    except (TypeError, ValueError):
        low = high = math.nan
    if not (math.isfinite(low) and math.isfinite(high) and valid(low, high)):
        raise ValueError(f"{name} must be a pair (low, high) with {rule}; got {value!r}")
    return low, high


def _zipf_cdf(rng: np.random.Generator, n: int, skew: float) -> np.ndarray:
    """CDF of Zipf-like weights ``(1 + rank)^-skew`` over ``n`` ids, ranks randomly permuted."""
    weights = (1.0 + rng.permutation(n)) ** -skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _draw_sorted(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """Draw ``size`` iid ids from ``cdf``, returned sorted.

    Sorted uniforms come from normalised cumulative sums of exponentials (uniform order
    statistics); searching sorted keys is several times faster than searching random ones.
    """
    spacings = np.cumsum(rng.standard_exponential(size + 1))
    index = np.searchsorted(cdf, spacings[:-1] / spacings[-1], side="right")
    return np.minimum(index, cdf.size - 1)


def _sorted_unique(values: np.ndarray, kind: str | None = None) -> np.ndarray:
    """Sort-based unique (numpy's hash-based ``np.unique`` is several times slower here)."""
    values = np.sort(values, kind=kind)
    keep = np.ones(values.size, dtype=bool)
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _sample_pairs(rng: np.random.Generator, n_users: int, n_items: int, n_ratings: int,
                  skew: float) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n_ratings`` distinct (user, item) index pairs, in random order."""
    total = n_users * n_items
    if n_ratings > _DENSE_FRACTION * total:
        # Dense: exact weighted sampling without replacement over all pairs (Gumbel top-k on
        # log weights, which cannot underflow); the grid holds <= n_ratings / _DENSE_FRACTION.
        log_weights = -skew * np.add.outer(np.log1p(rng.permutation(n_users).astype(float)),
                                           np.log1p(rng.permutation(n_items).astype(float)))
        keys = log_weights.ravel() + rng.gumbel(size=total)
        # sorted before shuffling: argpartition's order of the chosen pairs depends on the CPU's sort
        # kernels (AVX-512 or not), and the data must not
        linear = np.sort(np.argpartition(-keys, n_ratings - 1)[:n_ratings])
        linear = linear[rng.permutation(n_ratings)]
        return np.divmod(linear, n_items)
    # Sparse: draw pairs with replacement, keep the distinct ones, repeat for the shortfall.
    cdf_user, cdf_item = _zipf_cdf(rng, n_users, skew), _zipf_cdf(rng, n_items, skew)
    chosen = np.empty(0, dtype=np.int64)
    acceptance = 1.0
    while chosen.size < n_ratings:
        need = n_ratings - chosen.size
        if acceptance < _MIN_ACCEPTANCE:
            # The popular pairs are used up; flatten the popularity so the loop ends quickly.
            skew /= 2.0
            logger.debug("synthetic pairs: acceptance %.3f, lowering skew to %.3f", acceptance, skew)
            cdf_user, cdf_item = _zipf_cdf(rng, n_users, skew), _zipf_cdf(rng, n_items, skew)
        size = int(need / max(acceptance, _MIN_ACCEPTANCE) * 1.2) + 1024
        # Sorted users paired with shuffled items: still iid (user, item) draws.
        items = rng.permutation(_draw_sorted(rng, cdf_item, size))
        draws = _draw_sorted(rng, cdf_user, size) * np.int64(n_items) + items
        before = chosen.size
        # Both parts sorted: a stable (merge) sort of the concatenation is linear-time.
        chosen = _sorted_unique(np.concatenate([chosen, _sorted_unique(draws)]), kind="stable")
        acceptance = (chosen.size - before) / size
    # Keep a random subset of the right size; this also puts the rows in random order.
    linear = chosen[rng.choice(chosen.size, size=n_ratings, replace=False)]
    return np.divmod(linear, n_items)


def _ratings(rng: np.random.Generator, users: np.ndarray, items: np.ndarray, n_users: int,
             n_items: int, latent_dim: int, scale: tuple[float, float], integer: bool,
             noise: tuple[float, float], nonlinearity: float):
    """Return (rating, f_true, noise_std), each of shape (n_ratings,)."""
    coord_std = latent_dim ** -0.25  # makes <x_u, w_i> unit variance
    x_user = rng.normal(0.0, coord_std, (n_users, latent_dim))
    w_item = rng.normal(0.0, coord_std, (n_items, latent_dim))
    b_user, b_item = rng.normal(0.0, 0.5, n_users), rng.normal(0.0, 0.5, n_items)
    g_user, g_item = rng.normal(0.0, 1.0, n_users), rng.normal(0.0, 1.0, n_items)
    # |x_u - w_i|^2 / (2 l^2) = c * chi2_d with c = 1/d, which gives the rbf's moments below.
    c = 1.0 / latent_dim
    rbf_mean = (1.0 + 2.0 * c) ** (-latent_dim / 2.0)
    rbf_std = math.sqrt((1.0 + 4.0 * c) ** (-latent_dim / 2.0) - rbf_mean ** 2)
    length2 = coord_std ** 2 / c
    low, high = scale
    width = high - low
    n = users.size
    rating, f_true, noise_std = np.empty(n), np.empty(n), np.empty(n)
    for start in range(0, n, _CHUNK):
        part = slice(start, min(start + _CHUNK, n))
        u, i = users[part], items[part]
        xu, wi = x_user[u], w_item[i]
        linear = np.einsum("nd,nd->n", xu, wi)
        rbf = np.exp(-np.einsum("nd,nd->n", xu - wi, xu - wi) / (2.0 * length2))
        inter = (linear + nonlinearity * (rbf - rbf_mean) / rbf_std) / math.hypot(1.0, nonlinearity)
        z = (b_user[u] + b_item[i] + inter) / math.sqrt(1.5)
        f = (low + high) / 2.0 + 0.5 * width * np.tanh(0.2 + 0.45 * z)
        sd = noise[0] + (noise[1] - noise[0]) / (1.0 + np.exp(-(g_user[u] + g_item[i])))
        y = f + sd * rng.standard_normal(f.size)
        if integer:
            y = np.rint(y)
        rating[part], f_true[part], noise_std[part] = np.clip(y, low, high), f, sd
    return rating, f_true, noise_std


def make_synthetic_ratings(
    n_users: int = 1000,
    n_items: int = 500,
    n_ratings: int = 50_000,
    latent_dim: int = 4,
    rating_scale: Sequence[float] = (1, 5),
    integer: bool = True,
    noise_std: float | Sequence[float] = (0.3, 1.2),
    nonlinearity: float = 1.0,
    popularity_skew: float = 1.0,
    random_state: RandomState = None,
) -> pd.DataFrame:
    """Generate ratings from a latent model with known, heteroscedastic noise.

    Parameters
    ----------
    n_users, n_items : int, default=1000, 500
        Number of possible users and items; ids are ``"u0"..`` and ``"i0"..``. Only ids that
        receive at least one rating appear.
    n_ratings : int, default=50_000
        Number of distinct (user, item) pairs; at most ``n_users * n_items``.
    latent_dim : int, default=4
        Dimension of the user and item latent vectors.
    rating_scale : pair of float, default=(1, 5)
        ``(low, high)`` with ``low < high``; integers when ``integer=True``.
    integer : bool, default=True
        Round ratings to integers (then clip); otherwise clip real values to the scale.
    noise_std : float or pair of float, default=(0.3, 1.2)
        Range ``(low, high)``, ``0 <= low <= high``, of the per-rating noise standard deviation
        in rating units; a single number gives homoscedastic noise.
    nonlinearity : float, default=1.0
        Weight ``>= 0`` of the RBF interaction relative to the bilinear one (0: matrix
        factorisation).
    popularity_skew : float, default=1.0
        Zipf exponent ``>= 0`` of user activity and item popularity (0: uniform). When the
        popular pairs run out the exponent is lowered for the remaining draws.
    random_state : None, int or numpy.random.Generator
        Seed; one ``numpy.random.default_rng(random_state)`` drives everything.

    Returns
    -------
    pandas.DataFrame of shape (n_ratings, 5)
        Columns ``user`` and ``item`` (str), ``rating`` (float64, on the scale), ``f_true``
        (float64, noise-free rating before rounding and clipping) and ``noise_std`` (float64,
        the true noise standard deviation of each rating); rows in random order.

    Examples
    --------
    >>> df = make_synthetic_ratings(100, 50, 1000, random_state=0)
    >>> df.shape
    (1000, 5)
    """
    n_users, n_items = _check_int("n_users", n_users), _check_int("n_items", n_items)
    n_ratings, latent_dim = _check_int("n_ratings", n_ratings), _check_int("latent_dim", latent_dim)
    if n_ratings > n_users * n_items:
        raise ValueError(f"n_ratings must be <= n_users * n_items = {n_users * n_items}; got {n_ratings}")
    scale = _check_pair("rating_scale", rating_scale, "finite low < high", lambda low, high: low < high)
    if not isinstance(integer, (bool, np.bool_)):
        raise ValueError(f"integer must be a bool; got {integer!r}")
    if integer and not all(float(v).is_integer() for v in scale):
        raise ValueError(f"rating_scale must have integer bounds when integer=True; got {rating_scale!r}")
    noise = _check_pair("noise_std", noise_std, "0 <= low <= high", lambda low, high: 0.0 <= low <= high)
    nonlinearity = _check_real("nonlinearity", nonlinearity)
    popularity_skew = _check_real("popularity_skew", popularity_skew)

    if not (random_state is None or isinstance(random_state, np.random.Generator)
            or isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state >= 0):
        raise ValueError(f"random_state must be None, an int >= 0 or a numpy Generator; got {random_state!r}")
    rng = np.random.default_rng(random_state)
    users, items = _sample_pairs(rng, n_users, n_items, n_ratings, popularity_skew)
    rating, f_true, noise_sd = _ratings(rng, users, items, n_users, n_items, latent_dim, scale,
                                        bool(integer), noise, nonlinearity)
    # Object arrays of shared str objects: 8 bytes per row, like Surprise's str raw ids.
    user_names = np.array([f"u{k}" for k in range(n_users)], dtype=object)
    item_names = np.array([f"i{k}" for k in range(n_items)], dtype=object)
    logger.debug("synthetic ratings: %d ratings, %d users, %d items", n_ratings, n_users, n_items)
    return pd.DataFrame({"user": user_names[users], "item": item_names[items], "rating": rating,
                         "f_true": f_true, "noise_std": noise_sd})
