"""Evaluation of uncertainty-aware recommenders: QP-curves, calibration, ranking metrics, plots.

Needs only numpy, pandas and scipy; matplotlib is imported inside the plotting
functions. Works on arrays ``(y_true, mean, std)`` or directly on lists of
Surprise ``Prediction`` objects.

>>> from mogp_surprise.evaluation import qp_curve, uncertainty_report
>>> curve = qp_curve([1, 2, 3, 4], [1, 2, 3, 6], [0.1, 0.2, 0.3, 0.4], quantiles=2)
>>> curve["rmse"].tolist()
[0.0, 1.0]
"""
from __future__ import annotations

from . import adapters, metrics, plots, ranking
from .adapters import arrays_from_predictions, qp_curve_from_predictions, uncertainty_report_from_predictions
from .metrics import (METRICS, calibration_curve, crps_gaussian, gaussian_nll, get_metric, interval_coverage,
                      mae, register_metric, rmse, sharpness, uncertainty_report)
from .plots import plot_calibration, plot_qp, save_figure
from .qp import qp_curve, qp_curves_over_folds, qp_summary
from .ranking import (default_relevance_threshold, ndcg_at_k, precision_recall_at_k, ranking_per_user, ranking_report,
                      top_k_mask)

# the public names of the submodules (qp's helpers resolve_quantiles and n_kept stay in qp)
__all__ = [*metrics.__all__, "qp_curve", "qp_curves_over_folds", "qp_summary", *ranking.__all__,
           *adapters.__all__, *plots.__all__]
