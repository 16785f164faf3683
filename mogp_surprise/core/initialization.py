"""Initial values for embeddings, inducing points and kernel parameters."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from .model import MWGPModule, softplus_inverse

#: standard deviation of every embedding entry at initialisation
INIT_SCALE = 0.5
#: standard deviation of every entry of the items' bilinear factors q_i at initialisation (users' p_u start at 0)
MF_INIT_SCALE = 0.1


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


@torch.no_grad()
def initialise(module: MWGPModule, index: Tensor, y: Tensor, method: str, generator: torch.Generator) -> None:
    """Set the initial state of ``module`` in place from standardised training data.

    - embeddings: PCA of the rating matrix of the first two factors (``method='pca'``;
      scaled truncated SVD of the sparse centred matrix, as in the paper's code) or
      N(0, INIT_SCALE^2); further factors always start random;
    - bilinear factors: p_u = 0, q_i ~ N(0, MF_INIT_SCALE^2), so the mean function starts as the
      bias model (the GP's embeddings take the leading principal directions);
    - inducing points: embeddings of m training tuples drawn at random (with a little noise
      so that K_mm is well conditioned);
    - lengthscales: INIT_SCALE * sqrt(F r), so that typical kernel values are not vanishing.
    """
    r = module.latent_dim
    dtype, device = module.inducing.dtype, module.inducing.device
    for f, emb in enumerate(module.embeddings):
        emb.copy_(torch.randn(emb.shape, generator=generator, dtype=dtype).to(device) * INIT_SCALE)
    if module.mf_rank:
        module.mf_factors[0].zero_()
        item_mf = module.mf_factors[1]
        item_mf.copy_(torch.randn(item_mf.shape, generator=generator, dtype=dtype).to(device) * MF_INIT_SCALE)
    rank = min(r, *module.n_levels[:2]) if module.n_factors >= 2 else 0
    if method == "pca" and rank > 0:
        n_u, n_i = module.n_levels[:2]
        sparse = torch.sparse_coo_tensor(index[:, :2].T, y - y.mean(), (n_u, n_i),
                                         check_invariants=False).coalesce()
        u, s, v = randomized_svd(sparse, rank, generator)
        root = s.sqrt()
        module.embeddings[0][:, :rank] = _standardise(u * root)
        module.embeddings[1][:, :rank] = _standardise(v * root)
    n = index.shape[0]
    m = module.n_inducing
    rows = torch.randperm(n, generator=generator)[:m] if n >= m else torch.randint(n, (m,), generator=generator)
    feats = module.features(index[rows.to(device)])
    jitter = 0.05 * INIT_SCALE * torch.randn(feats.shape, generator=generator, dtype=dtype).to(device)
    module.inducing.copy_(feats + jitter)
    module.raw_lengthscale.fill_(float(softplus_inverse(
        torch.tensor(INIT_SCALE * math.sqrt(module.n_factors * r), dtype=torch.float64))))
