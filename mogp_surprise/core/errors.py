"""Exceptions and warnings raised by mogp_surprise; the rating check that training and fold-in share."""
from __future__ import annotations

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
