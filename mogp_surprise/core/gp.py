"""The sparse variational GP of MW-GP: paired inducing points, q(v) and the kernel, trained and fitted.

Whitened SVGP (Hensman et al. 2015): u = L v with L L^T = K_mm, q(v) = N(m, S), S = L_S L_S^T,
p(v) = N(0, I). For n ratings with GP inputs x_n (the concatenated inputs of their factors) and the
cross-covariance K_nm

    E[f_n]   = K_nm w,                        w = L^{-T} m
    Var[f_n] = k_nn + K_nm M K_nm^T (diag),   M = L^{-T} (S - I) L^{-1}

so every rating costs one row of two products with an m-vector and an m x m matrix formed once per
step (:meth:`SparseGP.whitened_terms`; :func:`~.linalg.inducing_terms` forms them with the KL). The
kernel is the paired product :class:`~.kernels.RBFKernel`; the inducing inputs are pairs (z^A_l, z^B_l),
so K_mm = K^A_mm ⊙ K^B_mm.

:class:`FittedGP` holds what prediction needs (Z, the kernel, w, M) and gives the moments of f for
inputs that are known (with, optionally, a Gaussian uncertainty of each input, propagated by the delta
method) or drawn from a population (an unseen level: integrated out in closed form with the kernel's
expectations, the psi statistics of the Bayesian GPLVM): with k = s * prod_f k_f, psi1 = E[k] and
Psi2 = E[k k^T] over the unseen factors,

    E[f]   = psi1^T w,      Var[f] = s + tr((M + w w^T) Psi2) - (psi1^T w)^2
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import RBFKernel
from .linalg import inducing_terms


def softplus_inverse(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))


@dataclass
class WhitenedTerms:
    """Quantities that depend only on the inducing points and q(v), formed once per step."""

    w: Tensor  # (m,)
    M: Tensor  # (m, m)
    kl: Tensor  # KL(q(v) || p(v)), a scalar


class SparseGP(nn.Module):
    """Trainable paired inducing points, ARD RBF kernel parameters and whitened q(v).

    Parameters
    ----------
    n_factors : int
        Factors whose GP inputs are concatenated (2: user, item).
    input_width : int
        Width r of each factor's GP input.
    n_inducing : int
        Number m of paired inducing points.
    """

    def __init__(self, n_factors: int, input_width: int, n_inducing: int) -> None:
        super().__init__()
        self.n_factors, self.input_width = int(n_factors), int(input_width)
        dim = self.n_factors * self.input_width
        self.inducing = nn.Parameter(torch.zeros(n_inducing, dim))
        self.raw_lengthscale = nn.Parameter(softplus_inverse(torch.ones(dim)))
        self.raw_outputscale = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.q_mean = nn.Parameter(torch.zeros(n_inducing))
        self.q_sqrt = nn.Parameter(torch.eye(n_inducing))

    @property
    def n_inducing(self) -> int:
        return int(self.inducing.shape[0])

    def lengthscale(self) -> Tensor:
        return F.softplus(self.raw_lengthscale)

    def outputscale(self) -> Tensor:
        return F.softplus(self.raw_outputscale)

    def kernel(self) -> RBFKernel:
        return RBFKernel(self.lengthscale(), self.outputscale())

    def whitened_terms(self, jitter: float) -> WhitenedTerms:
        w, M, kl = inducing_terms(self.inducing, self.lengthscale(), self.outputscale(), self.q_mean, self.q_sqrt,
                                  jitter, what="K_mm (inducing-point covariance)")
        return WhitenedTerms(w=w, M=M, kl=kl)

    @torch.no_grad()
    def fitted(self, jitter: float) -> "FittedGP":
        """What prediction needs, formed in float64 (w and M as in training, by :func:`~.linalg.inducing_terms`)."""
        def f64(t: Tensor) -> Tensor:
            return t.detach().to(torch.float64)
        z, ls, s = f64(self.inducing), f64(self.lengthscale()), f64(self.outputscale())
        w, M, _ = inducing_terms(z, ls, s, f64(self.q_mean), f64(self.q_sqrt), jitter,
                                 what="K_mm (inducing-point covariance)")
        return FittedGP(z, ls, s, w, 0.5 * (M + M.T), self.input_width)


@dataclass
class FittedGP:
    """The fitted GP: inducing inputs (m, F r), ARD lengthscales (F r,), output scale, w (m,), M (m, m)."""

    inducing: Tensor
    lengthscale: Tensor
    outputscale: Tensor
    w: Tensor
    M: Tensor
    input_width: int

    @property
    def n_inducing(self) -> int:
        return int(self.inducing.shape[0])

    def fingerprint(self) -> tuple[float, ...]:
        """A few sums that tell this fitted GP from another one (a folded-in user belongs to one model)."""
        return tuple(float(t.double().sum()) for t in (self.inducing, self.lengthscale, self.w))

    def kernel(self) -> RBFKernel:
        return RBFKernel(self.lengthscale, self.outputscale)

    def dims(self, factors: list[int]) -> Tensor:
        """The input dimensions of ``factors``."""
        r = self.input_width
        return torch.cat([torch.arange(f * r, (f + 1) * r, device=self.inducing.device) for f in factors])

    def expectations(self, factor: int, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """psi1 (m,), Psi2 (m, m) of factor ``factor``'s unit-scale kernel for an input ~ N(mean, diag(var))."""
        dims = self.dims([factor])
        return self.kernel().block(dims).expectations(mean, var, self.inducing[:, dims])

    def moments(self, inputs: list, psi: list, variance: bool = True) -> tuple[Tensor, Tensor | None]:
        """E[f] and Var[f] of n ratings whose GP inputs are ``inputs`` (one :class:`~.terms.Rows` per factor:
        the rows of a known level, with their variance or None, or an unseen level's population, whose
        kernel expectations are ``psi[f]``); ``variance=False``: E[f] alone (the same values) and None."""
        known = [f for f, rows in enumerate(inputs) if not rows.unseen]
        unseen = [f for f, rows in enumerate(inputs) if rows.unseen]
        n = inputs[0].value.shape[0]
        if known:
            x = torch.cat([inputs[f].value for f in known], dim=-1)
            if unseen:
                dims = self.dims(known)
                z, kernel = self.inducing[:, dims], self.kernel().block(dims)
            else:
                z, kernel = self.inducing, self.kernel()
            kk = kernel.cross(x, z)  # one GEMM + exp
        else:
            kk = self.outputscale * torch.ones(n, self.n_inducing, dtype=self.w.dtype, device=self.w.device)
        lin = self.w
        for f in unseen:
            lin = lin * psi[f][0]
        mean = kk @ lin
        if not variance:
            return mean, None
        if unseen:  # (M + w w^T) ⊙ Psi2 and w ⊙ psi1 over the unseen factors: m x m work per call
            quad = self.M + torch.outer(self.w, self.w)
            for f in unseen:
                quad = quad * psi[f][1]
        else:
            quad = self.M
        var = self.outputscale + ((kk @ quad) * kk).sum(-1)
        input_var = [inputs[f].var for f in known]
        if known and all(v is not None for v in input_var):  # uncertain known inputs: the delta method
            grad = kernel.mean_gradient(kk * lin, x, z)  # d E[f] / d x
            var = var + (grad * grad * torch.cat(input_var, dim=-1)).sum(-1)
        if unseen:
            var = var - mean ** 2
        return mean, var
