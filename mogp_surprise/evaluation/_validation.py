"""Input checks shared by the evaluation modules.

Every check raises :class:`ValueError` whose message names the argument, the rule
that was broken and the value received (conventions, "Errors").
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd

__all__ = ["as_1d", "check_std", "check_triplet", "check_levels"]


def finite_real(value: object) -> float | None:
    """``value`` as a float if it is one finite real number (Python's, numpy's, a 0-d array, anything with
    ``__float__`` but a bool or a string), else None: the one rule of the evaluation and comparison modules."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or isinstance(value, (complex, np.complexfloating)):
        return None
    if isinstance(value, np.ndarray):
        if value.ndim or value.dtype.kind not in "iuf":
            return None
        value = value.item()
    if not isinstance(value, numbers.Real) and not hasattr(value, "__float__"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _preview(values: object, limit: int = 60) -> str:
    text = repr(values)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_1d(values: object, name: str) -> np.ndarray:
    """Convert ``values`` to a finite, non-empty 1-D float array.

    Parameters
    ----------
    values : array-like of shape (n,)
        Numbers (list, tuple, ndarray, pandas Series).
    name : str
        Argument name used in error messages.

    Returns
    -------
    ndarray of shape (n,)
        A float64 copy-or-view of ``values``.

    Raises
    ------
    ValueError
        If ``values`` is not numeric, not 1-D, empty, or holds NaN/inf.
    """
    if isinstance(values, (str, bytes)):
        raise ValueError(f"`{name}` must be a 1-D array of numbers; got the string {_preview(values)}")
    if isinstance(values, (np.ndarray, pd.Series)):
        array = np.asarray(values)
        elements = array.reshape(-1) if array.dtype.kind in "OUSb" else ()
    else:
        elements = values if isinstance(values, (list, tuple)) else ()
    word = next((v for v in elements if isinstance(v, (str, bytes, bool, np.bool_))), None)
    if word is not None:  # numpy would read "4" and True as numbers
        raise ValueError(f"`{name}` must hold numbers, not strings or bools; got {word!r}")
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a 1-D array of numbers; could not convert "
                         f"{_preview(values)} ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D; got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` must not be empty; got an array of shape (0,)")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"`{name}` must be finite (no NaN or inf); got {float(arr[first])!r} at "
                         f"position {first} ({int(bad.sum())} non-finite value(s) in total)")
    return arr


def check_std(std: object, name: str = "std", *, strict: bool = False) -> np.ndarray:
    """Validate predictive standard deviations.

    Parameters
    ----------
    std : array-like of shape (n,)
        Standard deviations.
    name : str, default="std"
        Argument name used in error messages.
    strict : bool, default=False
        If True every value must be ``> 0`` (needed by the NLL and the CRPS),
        otherwise ``>= 0``.

    Returns
    -------
    ndarray of shape (n,)
    """
    arr = as_1d(std, name)
    bad = arr <= 0 if strict else arr < 0
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        rule = "> 0" if strict else ">= 0"
        raise ValueError(f"`{name}` must be {rule} everywhere; got {float(arr[first])!r} at position {first}")
    return arr


def check_triplet(
    y: object, mean: object, std: object | None = None, *, strict_std: bool = False,
    y_name: str = "y",
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate ``(y, mean[, std])`` and check that their lengths match.

    Parameters
    ----------
    y, mean : array-like of shape (n,)
        Observed ratings and predictive means.
    std : array-like of shape (n,) or None
        Predictive standard deviations (skipped when None).
    strict_std : bool, default=False
        Require ``std > 0`` instead of ``std >= 0``.
    y_name : str, default="y"
        Name of the first argument in error messages.

    Returns
    -------
    tuple of ndarray of shape (n,)
        ``(y, mean, std)``; ``std`` is None when it was None.
    """
    y_arr = as_1d(y, y_name)
    mean_arr = as_1d(mean, "mean")
    std_arr = None if std is None else check_std(std, strict=strict_std)
    lengths = {y_name: y_arr.size, "mean": mean_arr.size}
    if std_arr is not None:
        lengths["std"] = std_arr.size
    if len(set(lengths.values())) > 1:
        raise ValueError(f"`{y_name}`, `mean` and `std` must have the same length; got {lengths}")
    return y_arr, mean_arr, std_arr


def check_levels(levels: object, name: str = "levels") -> np.ndarray:
    """Validate probability levels / quantiles, each in the interval (0, 1].

    Parameters
    ----------
    levels : float or sequence of float
        Values in (0, 1].
    name : str, default="levels"
        Argument name used in error messages.

    Returns
    -------
    ndarray of shape (k,)
        The levels in the order given.
    """
    if np.ndim(levels) == 0:  # a single level
        levels = [levels]
    arr = as_1d(levels, name)
    bad = (arr <= 0) | (arr > 1)
    if bad.any():
        raise ValueError(f"every value of `{name}` must lie in (0, 1]; got {arr[bad].tolist()}")
    return arr
