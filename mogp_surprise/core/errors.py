"""Exceptions and warnings raised by mogp_surprise; the input checks that several modules share."""
from __future__ import annotations

import numbers

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
