"""A randomly initialised MWGPModule in float64 for the core tests (no training)."""
from __future__ import annotations

import torch

from mogp_surprise.core.model import MWGPModule


def random_module(levels: tuple[int, ...], latent_dim: int, n_inducing: int, seed: int = 0, scale: float = 0.7,
                  q_diag: float = 1.5, **options) -> MWGPModule:
    """Every parameter ~ N(0, scale^2), then q's Cholesky factor made well conditioned (+ q_diag I).

    ``options`` go to :class:`MWGPModule` (``heteroscedastic``, ``implicit``, ``use_biases``, ``mf_rank``).
    """
    gen = torch.Generator().manual_seed(seed)
    mod = MWGPModule(levels, latent_dim, n_inducing, **options).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale)
        mod.q_sqrt.copy_(torch.tril(mod.q_sqrt) + q_diag * torch.eye(n_inducing, dtype=torch.float64))
    return mod
