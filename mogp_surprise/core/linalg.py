"""Numerically guarded linear algebra."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from .errors import MWGPNumericalWarning, NumericalError

MAX_JITTER_STEPS = 3


def safe_cholesky(matrix: Tensor, jitter: float, what: str = "K_mm") -> Tensor:
    """Lower Cholesky factor of ``matrix + jitter * I``, escalating the jitter when needed.

    The jitter is multiplied by 10 up to ``MAX_JITTER_STEPS`` times, each time with a
    :class:`MWGPNumericalWarning`; if all fail a :class:`NumericalError` says what to change.
    """
    if not torch.isfinite(matrix).all():
        raise NumericalError(
            f"{what} contains NaN or inf; the parameters diverged. Lower `lr`, use dtype='float64' "
            "or increase `embedding_reg`.")
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    current = jitter
    for step in range(MAX_JITTER_STEPS + 1):
        chol, info = torch.linalg.cholesky_ex(matrix + current * eye)
        if not bool((info > 0).any()):
            return chol
        if step < MAX_JITTER_STEPS:
            # x10; from jitter=0 start at a millionth of the mean diagonal
            nxt = current * 10.0 if current > 0 else max(1e-6 * float(torch.diagonal(matrix).abs().mean()),
                                                         float(torch.finfo(matrix.dtype).eps))
            warnings.warn(
                f"Cholesky factorisation of {what} failed with jitter={current:.1e}; retrying with "
                f"jitter={nxt:.1e}. Consider a larger `jitter`, fewer `n_inducing` or dtype='float64'.",
                MWGPNumericalWarning, stacklevel=3)
            current = nxt
    raise NumericalError(
        f"Cholesky factorisation of {what} failed even with jitter={current:.1e} "
        f"({matrix.shape[-1]} inducing points, dtype={matrix.dtype}). Increase `jitter`, "
        "reduce `n_inducing`, or use dtype='float64'.")
