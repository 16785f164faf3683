"""QP-plots and calibration plots.

matplotlib is optional (``pip install -e '.[plot]'`` from a checkout, or ``pip install matplotlib``) and imported inside
the functions only. No backend is forced: whatever the user (or Jupyter) chose
is kept; only when no backend has been chosen and no display is available is the
non-interactive ``Agg`` backend selected, which is what matplotlib itself would
end up with there.
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ._validation import finite_real

__all__ = ["plot_qp", "plot_calibration", "save_figure"]

logger = logging.getLogger(__name__)

_FIGSIZE = (5.0, 3.5)


def _pyplot() -> Any:
    """Import ``matplotlib.pyplot`` lazily, picking Agg only when headless and unset."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - exercised only without matplotlib
        raise ImportError(
            "plotting needs matplotlib; install it with `pip install matplotlib` (from a checkout: "
            "`pip install -e '.[plot]'`)"
        ) from exc
    if "matplotlib.pyplot" not in sys.modules and _backend_unset(matplotlib) and _headless():
        logger.debug("no matplotlib backend chosen and no display: using Agg")
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _backend_unset(matplotlib: Any) -> bool:
    getter = getattr(matplotlib.rcParams, "_get_backend_or_none", None)
    if getter is not None:
        return getter() is None
    return not os.environ.get("MPLBACKEND")  # older matplotlib: best effort


def _headless() -> bool:
    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    return sys.platform.startswith("linux") and not display


def _check_mapping(value: object, name: str, what: str) -> Mapping:
    if not isinstance(value, Mapping) or len(value) == 0:
        raise ValueError(f"`{name}` must be a non-empty dict label -> {what}; got {type(value).__name__}")
    return value


def _new_axes(ax: Any) -> Any:
    return ax if ax is not None else _pyplot().subplots(figsize=_FIGSIZE, layout="constrained")[1]


def plot_qp(
    curves: Mapping[str, pd.DataFrame],
    metric: str = "rmse",
    baselines: Mapping[str, float] | None = None,
    ax: Any = None,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> Any:
    """Draw QP-curves: metric of the most confident predictions against ``q``.

    Parameters
    ----------
    curves : dict of str to pandas.DataFrame
        Label -> output of :func:`~mogp_surprise.evaluation.qp.qp_curve`
        (drawn as a line) or of
        :func:`~mogp_surprise.evaluation.qp.qp_curves_over_folds` (mean line
        with +/- 1 standard deviation error bars).
    metric : str, default="rmse"
        Column to draw (``rmse``, ``mae``, ...).
    baselines : dict of str to float, optional
        Label -> metric of a point-estimate model over all predictions, drawn
        as a horizontal dashed line.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure is made when None.
    title : str, optional
        Axes title.
    colors : dict of str to str, optional
        Label -> matplotlib colour, to keep one colour per model across figures.

    Returns
    -------
    matplotlib.axes.Axes
    """
    colors = dict(colors or {})
    baselines = {} if baselines is None else _check_mapping(baselines, "baselines", "float")
    if baselines and isinstance(curves, Mapping) and not curves:  # point-estimate models only: their lines alone
        curves = {}
    else:
        curves = _check_mapping(curves, "curves", "qp_curve DataFrame (or give `baselines`)")
    for label, value in baselines.items():
        if finite_real(value) is None:
            raise ValueError(f"`baselines[{label!r}]` must be a finite number; got {value!r}")
    for label, curve in curves.items():
        if not isinstance(curve, pd.DataFrame) or "quantile" not in curve.columns:
            raise ValueError(f"`curves[{label!r}]` must be a qp_curve DataFrame; got {type(curve).__name__}")
        if metric not in curve.columns and f"{metric}_mean" not in curve.columns:
            raise ValueError(f"`metric` must be a column of `curves[{label!r}]`; got {metric!r}, "
                             f"available: {list(curve.columns)}")
    ax = _new_axes(ax)
    for label, curve in curves.items():
        x = 100.0 * curve["quantile"].to_numpy(dtype=float)
        if f"{metric}_mean" in curve.columns:
            yerr = curve[f"{metric}_std"] if f"{metric}_std" in curve.columns else None
            ax.errorbar(x, curve[f"{metric}_mean"], yerr=yerr, marker="o", markersize=4,
                        capsize=3, label=label, color=colors.get(label))
        else:
            ax.plot(x, curve[metric], marker="o", markersize=4, label=label, color=colors.get(label))
    for k, (label, value) in enumerate(baselines.items()):
        ax.axhline(float(value), linestyle="--", linewidth=1.2,
                   color=colors.get(label, f"C{len(curves) + k}"), label=label)
    if not curves:
        ax.set_xlim(0, 100)
    ax.set_xlabel("q: most confident predictions kept (%)")
    ax.set_ylabel(metric.upper())
    if title is not None:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def plot_calibration(
    curves: Mapping[str, pd.DataFrame], ax: Any = None, title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> Any:
    """Reliability diagram: observed vs expected coverage of central intervals.

    Parameters
    ----------
    curves : dict of str to pandas.DataFrame
        Label -> output of
        :func:`~mogp_surprise.evaluation.metrics.calibration_curve`.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure is made when None.
    title : str, optional
        Axes title.
    colors : dict of str to str, optional
        Label -> matplotlib colour, to keep one colour per model across figures.

    Returns
    -------
    matplotlib.axes.Axes
        Points below the diagonal mean over-confidence (intervals too narrow).
    """
    colors = dict(colors or {})
    curves = _check_mapping(curves, "curves", "calibration_curve DataFrame")
    for label, curve in curves.items():
        if not isinstance(curve, pd.DataFrame) or not {"expected", "observed"} <= set(curve.columns):
            raise ValueError(f"`curves[{label!r}]` must be a calibration_curve DataFrame with columns "
                             f"'expected' and 'observed'; got {type(curve).__name__}")
    ax = _new_axes(ax)
    ax.plot([0, 1], [0, 1], linestyle=":", color="black", linewidth=1, label="calibrated")
    for label, curve in curves.items():
        ax.plot(curve["expected"], curve["observed"], marker="o", markersize=3, label=label,
                color=colors.get(label))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("expected coverage (nominal level)")
    ax.set_ylabel("observed coverage")
    if title is not None:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Save a figure (or the figure of an Axes), keeping PNG files small.

    Parameters
    ----------
    fig : matplotlib.figure.Figure or matplotlib.axes.Axes
        What to save.
    path : str or path-like
        Destination; the format follows the suffix. Parent folders are created.
    dpi : int, default=100
        Resolution; 100 keeps a 5 x 3.5 inch PNG around 30 kB.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not isinstance(dpi, (int, float)) or isinstance(dpi, bool) or not dpi > 0:
        raise ValueError(f"`dpi` must be a positive number; got {dpi!r}")
    figure = fig if hasattr(fig, "savefig") else getattr(fig, "figure", None)
    if figure is None or not hasattr(figure, "savefig"):
        raise ValueError(f"`fig` must be a matplotlib Figure or Axes; got {type(fig).__name__}")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"dpi": dpi}
    if out.suffix.lower() == ".png":
        kwargs["pil_kwargs"] = {"optimize": True}
        kwargs["metadata"] = {"Software": None}
    figure.savefig(out, **kwargs)
    logger.info("saved figure to %s", out)
    return out
