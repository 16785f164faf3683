"""Exceptions and warnings raised by mogp_surprise; the input checks that several modules share."""
from __future__ import annotations

import numbers
import os
import sys

import numpy as np


class NumericalError(RuntimeError):
    """A numerical failure (Cholesky, NaN loss) that the library could not recover from.

    The message always says which setting to change.
    """


class MWGPNumericalWarning(UserWarning):
    """Recoverable numerical trouble, e.g. jitter had to be increased for a Cholesky factorisation."""


class NotFittedError(ValueError, AttributeError):
    """The model is used for prediction before ``fit`` was called."""


def check_finite_ratings(ratings: np.ndarray, where: str = "", at: str = "row") -> None:
    """Raise ``ValueError`` saying how many ratings are NaN/inf and where the first one is."""
    bad = ~np.isfinite(ratings)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{where}ratings must be finite; {int(bad.sum())} are NaN/inf (first at {at} {pos}: "
                         f"{float(ratings[pos])!r})")


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_bool(name: str, value) -> bool:
    """``value`` as a bool; ``ValueError`` naming ``name`` unless it is one (``"no"`` is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be True or False, got {value!r}")
    return bool(value)


#: the largest |rating| a float32 model takes: its variances (squares of the rating unit) stay within float32
FLOAT32_RATINGS = 1e15


def validate_training_data(index: np.ndarray, ratings: np.ndarray, n_levels: tuple[int, ...],
                           dtype: str = "float64") -> tuple[int, ...]:
    """Raise ``ValueError`` naming the problem if the training arrays are unusable (for a model of ``dtype``:
    ratings it can hold); return ``n_levels`` as Python ints (numpy's int16 of pandas' category codes overflowed
    in products with the number of ratings)."""
    if any(isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) for n in n_levels):
        raise ValueError(f"`n_levels` must hold ints (the number of levels of each factor), got {tuple(n_levels)!r}")
    n_levels = tuple(int(n) for n in n_levels)
    if index.ndim != 2 or index.shape[1] != len(n_levels):
        raise ValueError(f"`index` must have shape (n, {len(n_levels)}), got {index.shape}")
    if ratings.ndim != 1 or ratings.shape[0] != index.shape[0]:
        raise ValueError(f"`ratings` must have shape ({index.shape[0]},) to match `index`, got {ratings.shape}")
    if index.shape[0] == 0:
        raise ValueError("cannot fit on 0 ratings: the training data are empty")
    if index.shape[0] < 2:
        raise ValueError("MW-GP needs at least 2 ratings to fit, got 1 (n_samples=1)")
    if not np.issubdtype(index.dtype, np.integer):
        raise ValueError(f"`index` must hold integers, got dtype {index.dtype}")
    if not np.issubdtype(ratings.dtype, np.number) or np.issubdtype(ratings.dtype, np.complexfloating):
        raise ValueError(f"ratings must be real numbers, got dtype {ratings.dtype}")
    check_finite_ratings(ratings)
    if dtype == "float32" and np.abs(ratings).max() > FLOAT32_RATINGS:
        raise ValueError(f"ratings as large as {np.abs(ratings).max():.3g} overflow a float32 model's variances "
                         f"(their squares); rescale them, or fit with dtype='float64'")
    for f, n in enumerate(n_levels):
        col = index[:, f]
        if col.min() < 0 or col.max() >= n:
            raise ValueError(f"`index[:, {f}]` must lie in [0, {n}), got range [{col.min()}, {col.max()}]")
    return n_levels


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package (the user's call)."""
    frame, level = sys._getframe(1), 1  # the frame that calls warnings.warn has level 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level
