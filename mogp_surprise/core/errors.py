"""Exceptions and warnings raised by mogp_surprise."""
from __future__ import annotations


class NumericalError(RuntimeError):
    """A numerical failure (Cholesky, NaN loss) that the library could not recover from.

    The message always says which setting to change.
    """


class MWGPNumericalWarning(UserWarning):
    """Recoverable numerical trouble, e.g. jitter had to be increased for a Cholesky factorisation."""


class NotFittedError(ValueError, AttributeError):
    """The model is used for prediction before ``fit`` was called."""
