"""The trainable MW-GP module: embeddings, mean function, paired inducing points, q(v), noise.

Notation (whitened SVGP, Hensman et al. 2015): u = L v with L L^T = K_mm, q(v) = N(m, S),
S = L_S L_S^T, p(v) = N(0, I). For a minibatch with cross-covariance K_nm (B x m)

    E[f_n]   = K_nm w,                       w = L^{-T} m
    Var[f_n] = k_nn + K_nm M K_nm^T (diag),  M = L^{-T} (S - I) L^{-1}

so every rating costs one row of two matrix products with m x m / m-vectors that are formed
once per batch (no triangular solve per rating). The minibatch ELBO is

    (N / B) * sum_batch E_q[log N(y_n | mu_n + f_n, sigma^2)] - kl_weight * KL(q(v) || p(v)) + log p(embeddings, biases)

where mu_n = c + sum_f bias_f[index_f] is the mean function on standardised ratings.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import LOG_2PI, Workspace, data_fit, paired_kernel
from .linalg import inducing_terms

MIN_NOISE = 1e-4


def softplus_inverse(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))


@dataclass
class WhitenedTerms:
    """Quantities that depend only on the inducing points and q(v), formed once per batch."""

    w: Tensor  # (m,)
    M: Tensor  # (m, m)
    kl: Tensor  # KL(q(v) || p(v)), a scalar


class MWGPModule(nn.Module):
    """MW-GP parameters for F categorical factors (F = 2: users and items).

    Parameters
    ----------
    n_levels : tuple of int
        Number of distinct levels of each factor, e.g. ``(n_users, n_items)``.
    latent_dim : int
        Embedding dimension r of every factor.
    n_inducing : int
        Number m of paired inducing points.
    use_biases : bool
        Learn one bias per level of each factor.
    """

    def __init__(self, n_levels: tuple[int, ...], latent_dim: int, n_inducing: int,
                 use_biases: bool = True) -> None:
        super().__init__()
        self.n_levels = tuple(int(n) for n in n_levels)
        self.latent_dim = int(latent_dim)
        self.n_inducing = int(n_inducing)
        self.use_biases = bool(use_biases)
        n_factors = len(self.n_levels)
        dim = n_factors * latent_dim
        self.embeddings = nn.ParameterList(
            [nn.Parameter(torch.zeros(n, latent_dim)) for n in self.n_levels])
        self.biases = nn.ParameterList(
            [nn.Parameter(torch.zeros(n)) for n in self.n_levels] if use_biases else [])
        self.global_mean = nn.Parameter(torch.zeros(()))
        self.inducing = nn.Parameter(torch.zeros(n_inducing, dim))
        self.raw_lengthscale = nn.Parameter(softplus_inverse(torch.ones(dim)))
        self.raw_outputscale = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.raw_noise = nn.Parameter(softplus_inverse(torch.tensor(0.5)))
        self.q_mean = nn.Parameter(torch.zeros(n_inducing))
        self.q_sqrt = nn.Parameter(torch.eye(n_inducing))
        self.workspace: Workspace | None = None  # set by the trainer: reuse the B x m blocks across steps

    # -- constrained parameters ------------------------------------------------------------
    @property
    def n_factors(self) -> int:
        return len(self.n_levels)

    def lengthscale(self) -> Tensor:
        return F.softplus(self.raw_lengthscale)

    def outputscale(self) -> Tensor:
        return F.softplus(self.raw_outputscale)

    def noise(self) -> Tensor:
        return F.softplus(self.raw_noise) + MIN_NOISE

    def q_chol(self) -> Tensor:
        return torch.tril(self.q_sqrt)

    # -- building blocks ---------------------------------------------------------------------
    def features(self, index: Tensor) -> Tensor:
        """Concatenated embeddings of index tuples, (B, F) -> (B, F * r)."""
        return torch.cat([emb.index_select(0, index[:, f]) for f, emb in enumerate(self.embeddings)], dim=-1)

    def prior_mean(self, index: Tensor) -> Tensor:
        """Mean function c + sum_f bias_f[index_f], shape (B,)."""
        out = self.global_mean.expand(index.shape[0])
        for f, bias in enumerate(self.biases):
            out = out + bias.index_select(0, index[:, f])
        return out

    def whitened_terms(self, jitter: float) -> WhitenedTerms:
        w, M, kl = inducing_terms(self.inducing, self.lengthscale(), self.outputscale(), self.q_mean, self.q_sqrt,
                                  jitter, what="K_mm (inducing-point covariance)")
        return WhitenedTerms(w=w, M=M, kl=kl)

    def latent_moments(self, index: Tensor, terms: WhitenedTerms) -> tuple[Tensor, Tensor]:
        """Mean (mean function included) and variance of f at index tuples under q."""
        knm = paired_kernel(self.features(index), self.inducing, self.lengthscale(), self.outputscale())
        mean = self.prior_mean(index) + knm @ terms.w
        var = self.outputscale() + ((knm @ terms.M) * knm).sum(-1)
        return mean, var

    # -- objective terms ---------------------------------------------------------------------
    def expected_log_lik(self, index: Tensor, y: Tensor, terms: WhitenedTerms) -> Tensor:
        """sum_n E_q[log N(y_n | f_n, sigma^2)] over the batch.

        With k_nn = outputscale, this is
        -B/2 log(2 pi sigma^2) - (B outputscale + sum_n (r_n - k_n^T w)^2 + k_n^T M k_n) / (2 sigma^2)
        where r_n = y_n - mu_n; the two sums come from :func:`~.kernels.data_fit`, which fuses the
        kernel, both products and their gradients.
        """
        outputscale = self.outputscale()
        sums = data_fit(self.features(index), self.inducing, self.lengthscale(), outputscale,
                        terms.w, terms.M, y - self.prior_mean(index), self.workspace)
        noise = self.noise()
        n = index.shape[0]
        return -0.5 * n * (LOG_2PI + torch.log(noise)) - 0.5 * (n * outputscale + sums) / noise

    def log_prior(self, embedding_reg: float, bias_reg: float) -> Tensor:
        """Gaussian log prior (up to constants) of embeddings and biases."""
        out = self.global_mean.new_zeros(())
        if embedding_reg:
            out = out - 0.5 * embedding_reg * sum((e ** 2).sum() for e in self.embeddings)
        if bias_reg and self.use_biases:
            out = out - 0.5 * bias_reg * sum((b ** 2).sum() for b in self.biases)
        return out

    def elbo(self, index: Tensor, y: Tensor, n_data: int, jitter: float, kl_weight: float = 1.0,
             embedding_reg: float = 0.0, bias_reg: float = 0.0) -> Tensor:
        """Unbiased minibatch estimate of the ELBO plus the log prior of embeddings and biases."""
        terms = self.whitened_terms(jitter)
        out = self.expected_log_lik(index, y, terms) * (n_data / index.shape[0]) - kl_weight * terms.kl
        if embedding_reg or bias_reg:
            out = out + self.log_prior(embedding_reg, bias_reg)
        return out
