"""The MW-GP engine: torch and numpy only (no Surprise, no scikit-learn)."""
from __future__ import annotations

from .config import MWGPConfig
from .errors import MWGPNumericalWarning, NotFittedError, NumericalError
from .kernels import paired_kernel, rbf, rbf_expectations
from .model import MWGPModule
from .posterior import MWGPPosterior
from .trainer import FitResult, fit_mwgp

__all__ = ["MWGPConfig", "MWGPModule", "MWGPPosterior", "FitResult", "fit_mwgp", "paired_kernel", "rbf",
           "rbf_expectations", "NumericalError", "MWGPNumericalWarning", "NotFittedError"]
