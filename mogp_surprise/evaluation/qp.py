"""QP-curves: performance of the most confident predictions (paper section 4.5).

Given observed ratings ``y_i`` and predictive distributions ``N(m_i, s_i**2)``,
the QP-curve evaluates a point-estimate metric ``R`` (RMSE, MAE, ...) on the
predictions whose standard deviation is among the smallest, for a grid of
quantiles ``q``:

    d_q = R({(y_i, m_i) : s_i among the ceil(q * n) smallest standard deviations})

An uncertainty estimate is useful when ``d_q`` rises with ``q``: the most
confident predictions are the most accurate ones. ``d_1`` is the ordinary
metric over all predictions.

Ties
----
The paper keeps every prediction with ``s_i <= `` the ``q``-quantile of the
``s_i``. With ties (for example a homoscedastic baseline, where all ``s_i`` are
equal) that rule keeps all or nothing. Here the predictions are sorted by
``std`` with a *stable* sort and the first ``ceil(q * n)`` are kept, so each
point uses exactly that many ratings and tied predictions enter in input order.
The result is deterministic: the same input always gives the same curve.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from ._validation import check_levels, check_triplet
from .metrics import BASE_COLUMNS, UNCHECKED, get_metric

__all__ = ["qp_curve", "qp_curves_over_folds", "qp_summary", "resolve_quantiles", "n_kept"]

logger = logging.getLogger(__name__)


# ceil(q * n) must not jump to the next integer because of rounding in q * n
# (0.7 * 10 == 7.000000000000001); the relative slack is far above float error
# and far below any genuine fractional part.
_CEIL_SLACK = 1e-12


def resolve_quantiles(quantiles: int | Iterable[float]) -> np.ndarray:
    """Turn the ``quantiles`` argument into a sorted array of values in (0, 1].

    Parameters
    ----------
    quantiles : int or sequence of float
        ``Q >= 1`` gives ``1/Q, 2/Q, ..., 1``; a sequence gives its values,
        which must lie in (0, 1] (sorted ascending, duplicates removed).

    Returns
    -------
    ndarray of shape (n_quantiles,)
    """
    if isinstance(quantiles, (bool, np.bool_)):
        raise ValueError(f"`quantiles` must be an int >= 1 or a sequence in (0, 1]; got {quantiles!r}")
    if isinstance(quantiles, (int, np.integer)):
        if quantiles < 1:
            raise ValueError(f"`quantiles` as an int must be >= 1; got {int(quantiles)!r}")
        return np.arange(1, int(quantiles) + 1) / int(quantiles)
    return np.unique(check_levels(quantiles, "quantiles"))


def n_kept(q: np.ndarray | float, n: int) -> np.ndarray:
    """Number of predictions kept at quantile ``q``: ``ceil(q * n)``, at least 1.

    Parameters
    ----------
    q : float or ndarray of shape (k,)
        Quantiles in (0, 1].
    n : int
        Number of predictions.

    Returns
    -------
    ndarray of int of shape (k,)
    """
    counts = np.ceil(np.asarray(q, dtype=float) * n * (1.0 - _CEIL_SLACK)).astype(int)
    return np.clip(counts, 1, n)


def qp_curve(
    y_true: object,
    mean: object,
    std: object,
    quantiles: int | Iterable[float] = 10,
    metrics: str | Callable | Sequence[str | Callable] = ("rmse", "mae"),
) -> pd.DataFrame:
    """Metric of the ``ceil(q * n)`` most confident predictions, for each ``q``.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Observed ratings.
    mean : array-like of shape (n,)
        Predictive means (the point estimates).
    std : array-like of shape (n,)
        Predictive standard deviations, ``>= 0``; only their order matters.
    quantiles : int or sequence of float, default=10
        ``Q`` for the grid ``1/Q, ..., 1``, or explicit values in (0, 1].
    metrics : str, callable or sequence of them, default=("rmse", "mae")
        Names registered in :data:`~mogp_surprise.evaluation.metrics.METRICS`
        or callables ``f(y, mean) -> float`` (column named by ``__name__``).

    Returns
    -------
    pandas.DataFrame of shape (n_quantiles, 3 + n_metrics)
        One row per quantile, ascending, with columns ``quantile``, ``n`` (the
        number of predictions used, ``ceil(q * n)``), ``std_threshold`` (the
        largest ``std`` included) and one column per metric.

    Notes
    -----
    Predictions are sorted by ``std`` with a stable sort, so ties keep their
    input order; see the module docstring.

    Examples
    --------
    >>> qp_curve([1, 2, 3, 4], [1, 2, 3, 6], [0.1, 0.2, 0.3, 0.4], quantiles=2)
       quantile  n  std_threshold  rmse  mae
    0       0.5  2            0.2   0.0  0.0
    1       1.0  4            0.4   1.0  0.5
    """
    y_arr, mean_arr, std_arr = check_triplet(y_true, mean, std, y_name="y_true")
    qs = resolve_quantiles(quantiles)
    if isinstance(metrics, str) or callable(metrics):
        metrics = [metrics]
    # the arrays are checked once above; the built-in metrics skip their own checks on every slice
    resolved = [(name, UNCHECKED.get(func, func)) for name, func in map(get_metric, metrics)]
    if not resolved:
        raise ValueError("`metrics` must name at least one metric; got an empty sequence")
    names = [name for name, _ in resolved]
    clash = sorted({n for n in names if names.count(n) > 1 or n in BASE_COLUMNS})
    if clash:
        raise ValueError(f"`metrics` must give distinct column names other than {BASE_COLUMNS}; got {clash}")

    order = np.argsort(std_arr, kind="stable")
    y_sorted, mean_sorted, std_sorted = y_arr[order], mean_arr[order], std_arr[order]
    counts = n_kept(qs, y_arr.size)
    rows = [{"quantile": float(q), "n": int(k), "std_threshold": float(std_sorted[k - 1]),
             **{name: float(func(y_sorted[:k], mean_sorted[:k])) for name, func in resolved}}
            for q, k in zip(qs, counts)]
    logger.debug("qp_curve: %d predictions, %d quantiles, metrics %s", y_arr.size, qs.size, names)
    return pd.DataFrame(rows, columns=[*BASE_COLUMNS, *names])


def qp_curves_over_folds(curves: Sequence[pd.DataFrame], ddof: int = 0) -> pd.DataFrame:
    """Average QP-curves of several cross-validation folds.

    Parameters
    ----------
    curves : sequence of pandas.DataFrame
        Outputs of :func:`qp_curve` with the same quantiles and columns.
    ddof : int, default=0
        Delta degrees of freedom of the standard deviation over folds
        (0, as in Surprise's ``cross_validate``; 1 for the sample estimate).

    Returns
    -------
    pandas.DataFrame of shape (n_quantiles, 2 + 2 * n_columns)
        Columns ``quantile``, ``n_folds``, then ``<col>_mean`` and ``<col>_std``
        for ``n``, ``std_threshold`` and every metric column (``rmse_mean``,
        ``rmse_std``, ...).
    """
    if isinstance(ddof, (bool, np.bool_)) or not isinstance(ddof, (int, np.integer)) or ddof < 0:
        raise ValueError(f"`ddof` must be an int >= 0; got {ddof!r}")
    if isinstance(curves, pd.DataFrame) or not isinstance(curves, Sequence) or len(curves) == 0:
        raise ValueError(f"`curves` must be a non-empty list of qp_curve DataFrames; got "
                         f"{type(curves).__name__}"
                         + (f" of length {len(curves)}" if isinstance(curves, Sequence) else ""))
    first = curves[0]
    for k, curve in enumerate(curves):
        if not isinstance(curve, pd.DataFrame) or "quantile" not in curve.columns:
            raise ValueError(f"`curves[{k}]` must be a qp_curve DataFrame; got {type(curve).__name__}")
        if list(curve.columns) != list(first.columns):
            raise ValueError(f"`curves[{k}]` must have the columns of curves[0] {list(first.columns)}; "
                             f"got {list(curve.columns)}")
        if len(curve) != len(first) or not np.allclose(curve["quantile"], first["quantile"]):
            raise ValueError(f"`curves[{k}]` must have the quantiles of curves[0] "
                             f"{first['quantile'].tolist()}; got {curve['quantile'].tolist()}")
    value_columns = [c for c in first.columns if c != "quantile"]
    stacked = np.stack([c[value_columns].to_numpy(dtype=float) for c in curves])  # (folds, q, cols)
    out = {"quantile": first["quantile"].to_numpy(dtype=float), "n_folds": len(curves)}
    means = stacked.mean(axis=0)
    # too few folds for this ddof: NaN rather than numpy's RuntimeWarning
    stds = stacked.std(axis=0, ddof=ddof) if len(curves) > ddof else np.full_like(means, np.nan)
    for j, col in enumerate(value_columns):
        out[f"{col}_mean"] = means[:, j]
        out[f"{col}_std"] = stds[:, j]
    return pd.DataFrame(out)


def qp_summary(curve: pd.DataFrame, at: Iterable[float] = (1.0, 0.9, 0.8)) -> pd.Series:
    """Metric values at a few quantiles, for paper-style tables.

    Parameters
    ----------
    curve : pandas.DataFrame
        Output of :func:`qp_curve` or :func:`qp_curves_over_folds`.
    at : sequence of float, default=(1.0, 0.9, 0.8)
        Quantiles to report; each must be a row of ``curve``.

    Returns
    -------
    pandas.Series
        Indexed ``<metric>_q<percent>`` (``rmse_q100``, ``rmse_q90``, ...); for
        a fold average the values are means and ``<metric>_q<percent>_std``
        entries hold the standard deviations. Stack several with
        ``pd.DataFrame({"MW-GP": s1, "SVD": s2}).T``.
    """
    if not isinstance(curve, pd.DataFrame) or "quantile" not in curve.columns:
        raise ValueError(f"`curve` must be a qp_curve DataFrame; got {type(curve).__name__}")
    levels = check_levels(at, "at")
    quantile = curve["quantile"].to_numpy(dtype=float)
    rows = []
    for a in levels:
        hit = np.flatnonzero(np.isclose(quantile, a, rtol=0.0, atol=1e-9))
        if hit.size == 0:
            raise ValueError(f"every value of `at` must be a quantile of `curve` {quantile.tolist()}; "
                             f"got {float(a)!r}")
        rows.append(hit[0])
    over_folds = "n_folds" in curve.columns
    if over_folds:
        skip = {f"{c}_mean" for c in BASE_COLUMNS}
        metrics = [c[: -len("_mean")] for c in curve.columns if c.endswith("_mean") and c not in skip]
    else:
        metrics = [c for c in curve.columns if c not in BASE_COLUMNS]
    values: dict[str, float] = {}
    for m in metrics:
        for a, r in zip(levels, rows):
            key = f"{m}_q{round(100 * a, 6):g}"
            values[key] = float(curve[f"{m}_mean" if over_folds else m].iloc[r])
            if over_folds:
                values[f"{key}_std"] = float(curve[f"{m}_std"].iloc[r])
    return pd.Series(values, dtype=float)
