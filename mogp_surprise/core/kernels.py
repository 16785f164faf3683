"""RBF kernels with ARD lengthscales, the paired product kernel and its Gaussian expectations.

The MW-GP kernel is k((a, b), (a', b')) = s * k_A(a, a') * k_B(b, b') with unit-scale ARD RBF
factors. A product of ARD RBF kernels on disjoint blocks equals one ARD RBF kernel on the
concatenated input, so :func:`paired_kernel` evaluates it in a single pass over ``[a, b]``;
``tests/core/test_kernels.py`` checks the identity against the explicit product.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def scaled_sqdist(x: Tensor, z: Tensor) -> Tensor:
    """Squared Euclidean distances between rows of ``x`` (n, d) and ``z`` (m, d) -> (n, m).

    Uses the matrix-product expansion (one GEMM) and clamps round-off negatives to zero.
    """
    x2 = (x * x).sum(-1, keepdim=True)
    z2 = (z * z).sum(-1)
    return (x2 + z2 - 2.0 * (x @ z.transpose(-1, -2))).clamp_min_(0.0)


def rbf(x: Tensor, z: Tensor, lengthscale: Tensor) -> Tensor:
    """Unit-scale ARD RBF kernel exp(-0.5 * sum_d (x_d - z_d)^2 / l_d^2), shape (n, m)."""
    return torch.exp(-0.5 * scaled_sqdist(x / lengthscale, z / lengthscale))


def paired_kernel(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Product kernel between concatenated factor embeddings.

    Parameters
    ----------
    x : Tensor of shape (n, F * r)
        Concatenated embeddings [a_i, b_j, ...] of n index tuples.
    z : Tensor of shape (m, F * r)
        Paired inducing points [z^A_l, z^B_l, ...].
    lengthscale : Tensor of shape (F * r,)
    outputscale : Tensor (scalar)

    Returns
    -------
    Tensor of shape (n, m)
        ``outputscale * prod_f k_f(x_f, z_f)``; with ``x = z`` this is K_mm = K^A_mm ⊙ K^B_mm.
    """
    return outputscale * rbf(x, z, lengthscale)


def cross_kernel(x: Tensor, z: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Fast :func:`paired_kernel` for training: one augmented GEMM and one ``exp``.

    ``log k = log s - |x|^2/2 - |z|^2/2 + x.z`` (inputs divided by the lengthscales) is formed by a
    single matrix product of ``[x, -|x|^2/2, 1]`` and ``[z, 1, log s - |z|^2/2]``. Round-off can
    make a value exceed ``outputscale`` by a few ulps; K_mm is always built with
    :func:`paired_kernel`, which clamps distances.
    """
    xs = x / lengthscale
    zs = z / lengthscale
    ones = torch.ones_like(xs[:, :1])
    xa = torch.cat([xs, -0.5 * (xs * xs).sum(-1, keepdim=True), ones], dim=-1)
    za = torch.cat([zs, torch.ones_like(zs[:, :1]),
                    (torch.log(outputscale) - 0.5 * (zs * zs).sum(-1)).unsqueeze(-1)], dim=-1)
    return torch.exp_(xa @ za.transpose(-1, -2))


class _Gram(torch.autograd.Function):
    """K^T K with a single GEMM in the backward pass (autograd would use two)."""

    @staticmethod
    def forward(ctx, k: Tensor) -> Tensor:
        ctx.save_for_backward(k)
        return k.transpose(-1, -2) @ k

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (k,) = ctx.saved_tensors
        return k @ (grad + grad.transpose(-1, -2))


def gram(k: Tensor) -> Tensor:
    """K^T K, shape (m, m), with a cheaper gradient."""
    return _Gram.apply(k)


def rbf_expectations(mean: Tensor, var: Tensor, z: Tensor, lengthscale: Tensor) -> tuple[Tensor, Tensor]:
    """Expectations of a unit-scale ARD RBF kernel under a diagonal Gaussian input.

    For x ~ N(mean, diag(var)) returns

    - psi1[l] = E[k(x, z_l)], shape (m,)
    - psi2[l, l'] = E[k(x, z_l) k(x, z_l')], shape (m, m)

    in closed form (the Psi statistics of the Bayesian GPLVM). Used to integrate out the
    embedding of a user or item never seen in training.
    """
    ls2 = lengthscale * lengthscale
    # psi1: prod_d (1 + v/l^2)^(-1/2) exp(-(mu - z)^2 / (2 (l^2 + v)))
    log_norm1 = -0.5 * torch.log1p(var / ls2).sum()
    psi1 = torch.exp(log_norm1 - 0.5 * (((mean - z) ** 2) / (ls2 + var)).sum(-1))
    # psi2: prod_d (1 + 2v/l^2)^(-1/2) exp(-(z - z')^2 / (4 l^2) - (mu - zbar)^2 / (l^2 + 2v))
    log_norm2 = -0.5 * torch.log1p(2.0 * var / ls2).sum()
    diff = z[:, None, :] - z[None, :, :]
    zbar = 0.5 * (z[:, None, :] + z[None, :, :])
    expo = -(diff ** 2 / (4.0 * ls2)).sum(-1) - (((mean - zbar) ** 2) / (ls2 + 2.0 * var)).sum(-1)
    psi2 = torch.exp(log_norm2 + expo)
    return psi1, psi2


LOG_2PI = math.log(2.0 * math.pi)
