"""Uncertainty-aware recommenders side by side on identical folds: baselines, the run and the report.

- :mod:`.run`: :func:`compare` (seeded Surprise ``KFold``, every algorithm's predictive mean and
  variance as arrays, metrics per fold) and the registry of algorithms (:data:`ALGORITHMS`);
- :mod:`.report`: the table, files and plots of a :class:`CompareResult`;
- baselines with one predictive interface (``predict_dist``, ``test``, ``estimate``, shared with
  :class:`~mogp_surprise.MWGP`): :mod:`.homoscedastic` (any Surprise point-estimate algorithm plus one
  out-of-sample residual variance), :mod:`.myfm` (Bayesian FM) and :mod:`.bgplvm` (Bayesian GPLVM);
- :mod:`.data` (MovieLens or labelled synthetic ratings) and :mod:`.demo` (the CLI's demo).

Surprise is imported only where an algorithm is built or run.
"""
from __future__ import annotations

from .report import load_results, plot_results, summary_markdown, write_results
from .run import ALGORITHMS, AlgoSpec, CompareResult, compare, predictive_arrays, reuse_results

__all__ = ["ALGORITHMS", "AlgoSpec", "CompareResult", "compare", "predictive_arrays", "reuse_results",
           "load_results", "plot_results", "summary_markdown", "write_results"]
