"""Initial values: every term's (:meth:`~.terms.Term.initialise`, then from the data), the inducing points
and the kernel.

- every term draws its random starting values first (in term order), then sets those it takes from the
  data (the biases' empirical-Bayes least squares, the GP inputs' PCA of the rating matrix with
  ``init="pca"``);
- inducing points: the GP inputs of m training ratings drawn at random, no level in more than m / 32 of them
  (:func:`inducing_rows`), with a little noise, so that K_mm is well conditioned;
- lengthscales: INIT_SCALE * sqrt(F r), so that typical kernel values are not vanishing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

#: standard deviation of every embedding entry at initialisation
INIT_SCALE = 0.5
#: the inducing points' rows are chosen among the first SPREAD_SCAN * m of a random order, with a level in at
#: most m // SPREAD_SHARE of them while others are left (:func:`inducing_rows`)
SPREAD_SCAN, SPREAD_SHARE = 64, 32


@dataclass
class InitContext:
    """What a term's initialisation may use: the standardised training data and the seeded generator."""

    index: Tensor  # (n, F) inner indices
    y: Tensor  # (n,) standardised ratings
    n_levels: tuple[int, ...]
    method: str  # "pca" or "random"
    generator: torch.Generator
    dtype: torch.dtype
    device: torch.device
    #: what terms keep between the runs of one fit (early stopping's runs train on one part of the data): a term
    #: stores what it forms from the data under its name and the data's fingerprint
    shared: dict = field(default_factory=dict)

    def randn(self, shape: tuple[int, ...] | torch.Size) -> Tensor:
        """Standard normal draws from the seeded generator (on CPU, then moved: the same on every device)."""
        return torch.randn(tuple(shape), generator=self.generator, dtype=self.dtype).to(self.device)


def randomized_svd(matrix: Tensor, rank: int, generator: torch.Generator, n_iter: int = 4,
                   oversample: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """Truncated SVD of a (sparse or dense) matrix with a seeded Gaussian sketch (Halko et al. 2011).

    Unlike ``torch.svd_lowrank`` it never touches the global RNG.
    """
    n_rows, n_cols = matrix.shape
    q = min(rank + oversample, n_rows, n_cols)
    omega = torch.randn(n_cols, q, generator=generator, dtype=matrix.dtype).to(matrix.device)
    mt = matrix.transpose(0, 1)
    basis, _ = torch.linalg.qr(matrix @ omega)
    for _ in range(n_iter):
        basis, _ = torch.linalg.qr(mt @ basis)
        basis, _ = torch.linalg.qr(matrix @ basis)
    small = (mt @ basis).transpose(0, 1)  # (q, n_cols) = basis^T A
    u_small, s, vh = torch.linalg.svd(small, full_matrices=False)
    return (basis @ u_small)[:, :rank], s[:rank], vh[:rank].transpose(0, 1)


def _standardise(x: Tensor) -> Tensor:
    x = x - x.mean(0, keepdim=True)
    scale = x.std() if x.numel() > 1 else x.new_tensor(1.0)
    return x / scale.clamp_min(1e-12) * INIT_SCALE


def pca_embeddings(init: InitContext, width: int) -> tuple[Tensor | None, Tensor | None]:
    """User and item embeddings from a scaled truncated SVD of the centred sparse rating matrix (as in the
    paper's code), standardised to entry std INIT_SCALE; ``rank = min(width, n_users, n_items)`` columns
    (None, None when that is 0)."""
    n_u, n_i = init.n_levels[:2]
    rank = min(width, n_u, n_i)
    if rank <= 0:
        return None, None
    index, y = init.index, init.y
    sparse = torch.sparse_coo_tensor(index[:, :2].T, y - y.mean(), (n_u, n_i), check_invariants=False).coalesce()
    u, s, v = randomized_svd(sparse, rank, init.generator)
    root = s.sqrt()
    return _standardise(u * root), _standardise(v * root)


@torch.no_grad()
def initialise(module: Any, index: Tensor, y: Tensor, method: str, generator: torch.Generator,
               shared: dict | None = None) -> None:
    """Set the initial state of ``module`` (an :class:`~.model.MWGPModule`) in place from standardised
    training data (module docstring)."""
    dtype, device = module.dtype, module.device
    init = InitContext(index, y, module.n_levels, method, generator, dtype, device, {} if shared is None else shared)
    for term in module.terms:
        term.initialise(init)
    for term in module.terms:
        term.initialise_from_data(init)
    gp = module.gp
    n, m = index.shape[0], gp.n_inducing
    rows = inducing_rows(index, m, generator)
    feats = module.gp_inputs(index[rows.to(device)])
    jitter = 0.05 * INIT_SCALE * torch.randn(feats.shape, generator=generator, dtype=dtype).to(device)
    gp.inducing.copy_(feats + jitter)
    gp.raw_lengthscale.fill_(float(_softplus_inverse(INIT_SCALE * math.sqrt(module.n_factors * gp.input_width))))


def inducing_rows(index: Tensor, m: int, generator: torch.Generator) -> Tensor:
    """m training rows whose GP inputs start the inducing points: drawn at random, but a level of any factor in
    at most ``m // SPREAD_SHARE`` of them while other rows are left (among the first ``SPREAD_SCAN`` m rows of a
    random order). Rows that share a level share part of their input; where one user had two thirds of the
    ratings, random draws gave that user two thirds of the inducing points, K_mm was singular in float32 at the
    start of every run and the fit warned of raised jitter."""
    n = index.shape[0]
    if n < m:
        return torch.randint(n, (m,), generator=generator)
    scan = torch.randperm(n, generator=generator)[:min(n, SPREAD_SCAN * m)]
    levels = index[scan.to(index.device)].cpu()
    position = torch.arange(scan.shape[0])
    within = torch.ones(scan.shape[0], dtype=torch.bool)
    for f in range(levels.shape[1]):  # each row's rank among the rows of its level, in the random order
        by_level = torch.argsort(levels[:, f], stable=True)
        sorted_levels = levels[by_level, f]
        rank = torch.empty_like(position)
        rank[by_level] = position - torch.searchsorted(sorted_levels, sorted_levels)
        within &= rank < max(1, m // SPREAD_SHARE)
    return scan[torch.argsort((~within).long(), stable=True)[:m]]  # the rows within the cap first, in order


def _softplus_inverse(x: float) -> Tensor:
    t = torch.tensor(x, dtype=torch.float64)
    return t + torch.log(-torch.expm1(-t))
