"""The MW-GP engine: torch and numpy only (no Surprise, no scikit-learn)."""
from __future__ import annotations

from .config import MWGPConfig
from .errors import MWGPNumericalWarning, NotFittedError, NumericalError
from .kernels import RBFKernel, paired_kernel, rbf, rbf_expectations
from .model import MWGPModule
from .posterior import MWGPPosterior
from .terms import RatingParts, Rows, Table, Term, register_term
from .trainer import FitResult, fit_mwgp

__all__ = ["MWGPConfig", "MWGPModule", "MWGPPosterior", "FitResult", "fit_mwgp", "RBFKernel", "paired_kernel", "rbf",
           "rbf_expectations", "Term", "Table", "Rows", "RatingParts", "register_term", "NumericalError",
           "MWGPNumericalWarning", "NotFittedError"]
