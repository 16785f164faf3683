"""Numerically guarded linear algebra."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .errors import MWGPNumericalWarning, NumericalError
from .kernels import paired_kernel

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


class _InducingTerms(torch.autograd.Function):
    """Everything a minibatch needs from the inducing points and q(v), with a hand-written gradient.

    From the paired inducing inputs Z, the ARD lengthscales l and the output scale s:

        K_mm = s exp(-|z_i - z_j|^2 / (2 l^2)),  L = chol(K_mm + jitter I),  P = L^{-1}
        w = P^T m,  M = P^T (L_S L_S^T - I) P,  KL = KL(N(m, L_S L_S^T) || N(0, I))

    Autograd's generic graph for these m x m computations (kernel, Cholesky, triangular inverse,
    three products, the KL and all their backward passes) takes about 60 operations per step; the
    closed-form backward below about 25 (``tests/core/test_linalg.py`` checks it against autograd
    and finite differences). With A = P^T L_S and G = dM + dM^T:

        dL_S = tril(P G A) + dKL (L_S - diag(1 / diag L_S)),  dm = P dw + dKL m,
        dP = L_S (G A)^T - P G + m dw^T,  dL = tril(-P^T dP P^T),
        dK_mm = sym(P^T Phi(L^T dL) P),  Phi = lower triangle with halved diagonal (Murray, 2016),
        then with H = dK_mm * K_mm: ds = sum(H) / s, and for Zs = Z / l,
        dZs = 2 (H Zs - rowsum(H) Zs),  dZ = dZs / l,  dl = -sum_i dZs_i * Zs_i / l.
    """

    @staticmethod
    def forward(ctx, z, lengthscale, outputscale, q_mean, q_sqrt, jitter, what):
        zs = z / lengthscale
        kmm = paired_kernel(z, z, lengthscale, outputscale)  # RBFKernel.gram
        chol = safe_cholesky(kmm, jitter, what=what)
        eye = torch.eye(kmm.shape[-1], dtype=kmm.dtype, device=kmm.device)
        p = torch.linalg.solve_triangular(chol, eye, upper=False)  # L^{-1}
        l_s = torch.tril(q_sqrt)
        a = p.transpose(-1, -2) @ l_s
        M = a @ a.transpose(-1, -2) - p.transpose(-1, -2) @ p
        w = p.transpose(-1, -2) @ q_mean
        diag = torch.diagonal(l_s)
        kl = 0.5 * ((l_s * l_s).sum() + q_mean @ q_mean - kmm.shape[-1] - torch.log(diag * diag).sum())
        ctx.save_for_backward(zs, lengthscale, outputscale, kmm, chol, p, l_s, a, q_mean)
        return w, M, kl

    @staticmethod
    @once_differentiable
    def backward(ctx, dw, dM, dkl):
        zs, lengthscale, outputscale, kmm, chol, p, l_s, a, q_mean = ctx.saved_tensors
        need_z, need_ls, need_s, need_m, need_q = ctx.needs_input_grad[:5]
        dz = dls = ds = dmean = dsqrt = None
        dM = torch.zeros_like(p) if dM is None else dM
        dw = torch.zeros_like(q_mean) if dw is None else dw
        dkl = torch.zeros((), dtype=p.dtype, device=p.device) if dkl is None else dkl
        g = dM + dM.transpose(-1, -2)
        ga = g @ a
        if need_q:
            dsqrt = torch.tril(p @ ga) + dkl * (l_s - torch.diag_embed(1.0 / torch.diagonal(l_s)))
        if need_m:
            dmean = p @ dw + dkl * q_mean
        if need_z or need_ls or need_s:
            dp = l_s @ ga.transpose(-1, -2) - p @ g + torch.outer(q_mean, dw)
            dl = torch.tril(-(p.transpose(-1, -2) @ dp @ p.transpose(-1, -2)))
            phi = torch.tril(chol.transpose(-1, -2) @ dl)
            phi.diagonal().mul_(0.5)
            dk = p.transpose(-1, -2) @ phi @ p
            h = (0.5 * (dk + dk.transpose(-1, -2))).mul_(kmm)  # gradient of log K_mm (symmetric)
            if need_s:
                ds = h.sum() / outputscale
            dzs = 2.0 * (h @ zs - h.sum(-1, keepdim=True) * zs)
            if need_z:
                dz = dzs / lengthscale
            if need_ls:
                dls = -(dzs * zs).sum(0) / lengthscale
        return dz, dls, ds, dmean, dsqrt, None, None


def inducing_terms(z: Tensor, lengthscale: Tensor, outputscale: Tensor, q_mean: Tensor, q_sqrt: Tensor,
                   jitter: float, what: str = "K_mm") -> tuple[Tensor, Tensor, Tensor]:
    """w = L^{-T} m, M = L^{-T} (S - I) L^{-1} and KL(q(v) || p(v)) of the whitened SVGP.

    ``L`` is the Cholesky factor of ``K_mm + jitter * I`` with ``K_mm`` the ARD RBF kernel (output
    scale ``outputscale``) between the rows of ``z`` (jitter escalated by :func:`safe_cholesky`);
    ``S = L_S L_S^T`` with ``L_S = tril(q_sqrt)``. These are the only m x m quantities a minibatch
    needs: E[f_n] = k_n^T w and Var[f_n] = k_nn + k_n^T M k_n. One autograd node with a
    closed-form backward.
    """
    return _InducingTerms.apply(z, lengthscale, outputscale, q_mean, q_sqrt, jitter, what)
