"""Numerically guarded linear algebra."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

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


class _WhitenedTerms(torch.autograd.Function):
    """(w, M) = (L^{-T} m, L^{-T} (L_S L_S^T - I) L^{-1}) with L = chol(K_mm), by hand.

    Autograd's generic graph for these few m x m products (Cholesky, a triangular inverse, three
    products and their backward passes) takes about 25 operations per step; the closed-form
    gradient below takes about 12 (``tests/core/test_linalg.py`` checks it against autograd and
    finite differences). With P = L^{-1}, A = P^T L_S and G = dM + dM^T:

        dL_S = tril(P G A),  dm = P dw,
        dP = L_S (G A)^T - P G + m dw^T,  dL = tril(-P^T dP P^T),
        dK_mm = sym(P^T Phi(L^T dL) P),  Phi = lower triangle with halved diagonal (Murray, 2016).
    """

    @staticmethod
    def forward(ctx, kmm, q_mean, q_sqrt, jitter, what):
        chol = safe_cholesky(kmm, jitter, what=what)
        eye = torch.eye(kmm.shape[-1], dtype=kmm.dtype, device=kmm.device)
        p = torch.linalg.solve_triangular(chol, eye, upper=False)  # L^{-1}
        l_s = torch.tril(q_sqrt)
        a = p.transpose(-1, -2) @ l_s
        M = a @ a.transpose(-1, -2) - p.transpose(-1, -2) @ p
        w = p.transpose(-1, -2) @ q_mean
        ctx.save_for_backward(chol, p, l_s, a, q_mean)
        return w, M

    @staticmethod
    @once_differentiable
    def backward(ctx, dw, dM):
        chol, p, l_s, a, q_mean = ctx.saved_tensors
        need_k, need_m, need_s = ctx.needs_input_grad[:3]
        dk = dmean = dsqrt = None
        if dM is None:
            dM = torch.zeros_like(p)
        if dw is None:
            dw = torch.zeros_like(q_mean)
        g = dM + dM.transpose(-1, -2)
        ga = g @ a
        if need_s:
            dsqrt = torch.tril(p @ ga)
        if need_m:
            dmean = p @ dw
        if need_k:
            dp = l_s @ ga.transpose(-1, -2) - p @ g + torch.outer(q_mean, dw)
            dl = torch.tril(-(p.transpose(-1, -2) @ dp @ p.transpose(-1, -2)))
            phi = torch.tril(chol.transpose(-1, -2) @ dl)
            phi.diagonal().mul_(0.5)
            dk = p.transpose(-1, -2) @ phi @ p
            dk = 0.5 * (dk + dk.transpose(-1, -2))
        return dk, dmean, dsqrt, None, None


def whitened_terms(kmm: Tensor, q_mean: Tensor, q_sqrt: Tensor, jitter: float,
                   what: str = "K_mm") -> tuple[Tensor, Tensor]:
    """w = L^{-T} m and M = L^{-T} (S - I) L^{-1} of the whitened SVGP, with a hand-written gradient.

    ``L`` is the Cholesky factor of ``kmm + jitter * I`` (jitter escalated by :func:`safe_cholesky`),
    ``S = L_S L_S^T`` with ``L_S = tril(q_sqrt)``. These are the only m x m quantities a minibatch
    needs: E[f_n] = k_n^T w and Var[f_n] = k_nn + k_n^T M k_n.
    """
    return _WhitenedTerms.apply(kmm, q_mean, q_sqrt, jitter, what)
