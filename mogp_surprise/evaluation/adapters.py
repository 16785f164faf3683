"""Bridge from Surprise ``Prediction`` lists to the array-based metrics.

Surprise is not imported: a ``Prediction`` is a namedtuple
``(uid, iid, r_ui, est, details)`` and any 5-tuple in that order works. The
predictive standard deviation is read from ``details["std"]``, else
``sqrt(details["var"])``, which is where :class:`~mogp_surprise.MWGP` and
:class:`~mogp_surprise.HomoscedasticBaseline` put it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ._validation import check_triplet, finite_real
from .metrics import uncertainty_report
from .qp import qp_curve

__all__ = ["arrays_from_predictions", "qp_curve_from_predictions", "uncertainty_report_from_predictions"]

_NO_STD_ADVICE = (
    "point-estimate algorithms such as SVD() give no uncertainty; wrap them in "
    "mogp_surprise.HomoscedasticBaseline(SVD()) to attach one residual variance"
)


def _std_of(details: Any, k: int) -> float:
    if isinstance(details, dict):
        if details.get("std") is not None:
            return _number(details["std"], f"`predictions[{k}].details['std']`")
        if details.get("var") is not None:
            var = _number(details["var"], f"`predictions[{k}].details['var']`")
            if not var >= 0:  # also catches NaN
                raise ValueError(f"`predictions[{k}].details['var']` must be >= 0; got {var!r}")
            return math.sqrt(var)
        if "std" in details or "var" in details:
            raise ValueError(f"`predictions[{k}].details` holds 'std' / 'var' as None: the algorithm gave no "
                             f"uncertainty for this prediction ({_NO_STD_ADVICE})")
    keys = sorted(details) if isinstance(details, dict) else type(details).__name__
    raise ValueError(f"`predictions[{k}].details` must hold 'std' or 'var'; got {keys}: {_NO_STD_ADVICE}")


def _number(value: Any, name: str) -> float:
    """One real number of a prediction's details, or a ValueError naming it (not numpy's or float()'s); NaN and
    inf pass here, for the checks that say what they are."""
    number = finite_real(value)
    if number is None:
        try:
            number = float(value) if isinstance(value, (float, np.floating)) else None
        except (TypeError, ValueError):
            number = None
    if number is None:
        raise ValueError(f"{name} must be a number; got {value!r} ({type(value).__name__})")
    return number


def arrays_from_predictions(predictions: Iterable[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Extract ``(y_true, mean, std)`` from Surprise predictions.

    Parameters
    ----------
    predictions : list of Prediction
        As returned by ``algo.test(testset)``: tuples
        ``(uid, iid, r_ui, est, details)`` with a known ``r_ui`` and
        ``details["std"]`` or ``details["var"]``.

    Returns
    -------
    y_true : ndarray of shape (n,)
        The true ratings ``r_ui``.
    mean : ndarray of shape (n,)
        The estimates ``est``.
    std : ndarray of shape (n,)
        Predictive standard deviations.

    Raises
    ------
    ValueError
        If the list is empty, a true rating is None, or a prediction carries
        neither ``std`` nor ``var`` in its details.
    """
    predictions = list(predictions)
    if not predictions:
        raise ValueError("`predictions` must not be empty; got 0 predictions")
    y_true, mean, std = np.empty((3, len(predictions)))
    for k, pred in enumerate(predictions):
        try:
            _, _, r_ui, est, details = pred
        except (TypeError, ValueError):
            raise ValueError(f"`predictions[{k}]` must be a Prediction (uid, iid, r_ui, est, details); "
                             f"got {pred!r}") from None
        if r_ui is None:
            raise ValueError(f"`predictions[{k}].r_ui` must be the true rating; got None "
                             "(predict on a testset, not on bare (uid, iid) pairs)")
        y_true[k] = _number(r_ui, f"`predictions[{k}].r_ui`")
        mean[k], std[k] = _number(est, f"`predictions[{k}].est`"), _std_of(details, k)
    return check_triplet(y_true, mean, std, y_name="y_true")


def qp_curve_from_predictions(predictions: Iterable[Any], **kwargs: Any) -> pd.DataFrame:
    """:func:`~mogp_surprise.evaluation.qp.qp_curve` of Surprise predictions.

    Parameters
    ----------
    predictions : list of Prediction
        See :func:`arrays_from_predictions`.
    **kwargs
        ``quantiles`` and ``metrics``, passed to ``qp_curve``.

    Returns
    -------
    pandas.DataFrame
        See :func:`~mogp_surprise.evaluation.qp.qp_curve`.
    """
    return qp_curve(*arrays_from_predictions(predictions), **kwargs)


def uncertainty_report_from_predictions(predictions: Iterable[Any]) -> dict[str, float]:
    """:func:`~mogp_surprise.evaluation.metrics.uncertainty_report` of Surprise predictions.

    Parameters
    ----------
    predictions : list of Prediction
        See :func:`arrays_from_predictions`.

    Returns
    -------
    dict of str to float
    """
    return uncertainty_report(*arrays_from_predictions(predictions))
