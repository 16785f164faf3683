"""Uncertainty-aware recommenders side by side on identical folds: baselines, the run and the report.

- :mod:`.run`: :func:`compare` (seeded Surprise ``KFold``, every algorithm's predictive mean and
  variance as arrays, metrics per fold); :mod:`.algorithms`: the registry of algorithms (:data:`ALGORITHMS`);
- :mod:`.result`: :class:`CompareResult` and its table; :mod:`.report`: its files and plots, reading them
  back and reusing an earlier run's algorithms;
- baselines with one predictive interface (``predict_dist``, ``test``, ``estimate``, shared with
  :class:`~mogp_surprise.MWGP`): :mod:`.homoscedastic` (any Surprise point-estimate algorithm plus one
  out-of-sample residual variance), :mod:`.myfm` (Bayesian FM) and :mod:`.bgplvm` (Bayesian GPLVM);
- :mod:`.data` (MovieLens or labelled synthetic ratings) and :mod:`.demo` (the CLI's demo).

Surprise is imported only where an algorithm is built or run. The names below are imported when first used
(PEP 562), so that the command line's parser reads :data:`ALGORITHMS` without loading the evaluation stack.
"""
from __future__ import annotations

import importlib

_SOURCES = {"ALGORITHMS": "algorithms", "AlgoSpec": "algorithms", "compare": "run", "predictive_arrays": "run",
            "CompareResult": "result", "summary_markdown": "result", "load_results": "report",
            "plot_results": "report", "reuse_results": "report", "write_results": "report"}

__all__ = ["ALGORITHMS", "AlgoSpec", "CompareResult", "compare", "predictive_arrays", "reuse_results",
           "load_results", "plot_results", "summary_markdown", "write_results"]


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_SOURCES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
