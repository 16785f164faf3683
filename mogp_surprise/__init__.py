"""mogp_surprise: uncertainty-aware collaborative filtering with the MW-GP model.

The public estimators are imported lazily so that ``import mogp_surprise.core``
(torch + numpy only) does not pull in Surprise or scikit-learn.

>>> from mogp_surprise import MWGP            # Surprise algorithm  # doctest: +SKIP
>>> from mogp_surprise import MWGPRegressor   # scikit-learn estimator  # doctest: +SKIP
"""
from __future__ import annotations

import importlib
import logging

from ._version import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())

# public name -> module that defines it
_LAZY = {
    "MWGP": "mogp_surprise.adapters.surprise_algo",
    "MWGPRegressor": "mogp_surprise.adapters.sklearn_estimator",
    "MWGPConfig": "mogp_surprise.core.config",
    "PAPER_MODEL": "mogp_surprise.core.config",
    "HomoscedasticBaseline": "mogp_surprise.comparison.homoscedastic",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mogp_surprise' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
