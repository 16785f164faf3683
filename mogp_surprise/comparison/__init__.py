"""Uncertainty-aware recommenders side by side on identical folds: baselines, the run and the report.

- :mod:`.run`: :func:`compare` (seeded Surprise ``KFold``, every algorithm's predictive mean and
  variance as arrays, metrics per fold) and the registry of algorithms (:data:`ALGORITHMS`);
- :mod:`.result`: :class:`CompareResult` and its table; :mod:`.report`: its files and plots, reading them
  back and reusing an earlier run's algorithms;
- baselines with one predictive interface (``predict_dist``, ``test``, ``estimate``, shared with
  :class:`~mogp_surprise.MWGP`): :mod:`.homoscedastic` (any Surprise point-estimate algorithm plus one
  out-of-sample residual variance), :mod:`.myfm` (Bayesian FM) and :mod:`.bgplvm` (Bayesian GPLVM);
- :mod:`.data` (MovieLens or labelled synthetic ratings) and :mod:`.demo` (the CLI's demo).

Surprise is imported only where an algorithm is built or run.
"""
from __future__ import annotations

from .report import load_results, plot_results, reuse_results, write_results
from .result import CompareResult, summary_markdown
from .run import ALGORITHMS, AlgoSpec, compare, predictive_arrays

__all__ = ["ALGORITHMS", "AlgoSpec", "CompareResult", "compare", "predictive_arrays", "reuse_results",
           "load_results", "plot_results", "summary_markdown", "write_results"]
