"""A randomly initialised MWGPModule in float64 for the core tests (no training)."""
from __future__ import annotations

import torch

from mogp_surprise.core.config import MWGPConfig
from mogp_surprise.core.model import MWGPModule

#: the options of the old positional constructor, as MWGPConfig fields
_OPTIONS = {"heteroscedastic": ("noise", {True: "heteroscedastic", False: "homoscedastic"}),
            "implicit": ("implicit", None), "use_biases": ("use_biases", None), "mf_rank": ("mf_rank", None)}


def module(levels: tuple[int, ...], latent_dim: int, n_inducing: int, heteroscedastic: bool = False,
           implicit: bool = False, use_biases: bool = True, mf_rank: int = 0, **config) -> MWGPModule:
    """An MWGPModule (float32, zeros) with these options: the paper's model unless told otherwise."""
    cfg = MWGPConfig(latent_dim=latent_dim, n_inducing=n_inducing, use_biases=use_biases, implicit=implicit,
                     mf_rank=mf_rank, noise="heteroscedastic" if heteroscedastic else "homoscedastic", **config)
    return MWGPModule.from_config(cfg, tuple(levels))


def random_module(levels: tuple[int, ...], latent_dim: int, n_inducing: int, seed: int = 0, scale: float = 0.7,
                  q_diag: float = 1.5, **options) -> MWGPModule:
    """Every parameter ~ N(0, scale^2), then q's Cholesky factor made well conditioned (+ q_diag I).

    ``options`` go to :func:`module` (``heteroscedastic``, ``implicit``, ``use_biases``, ``mf_rank`` and config fields).
    """
    gen = torch.Generator().manual_seed(seed)
    mod = module(levels, latent_dim, n_inducing, **options).double()
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale)
        mod.gp.q_sqrt.copy_(torch.tril(mod.gp.q_sqrt) + q_diag * torch.eye(n_inducing, dtype=torch.float64))
    return mod


# -- short names for what the core tests read off a module ---------------------------------------------------
def parts(mod: MWGPModule, index: torch.Tensor):
    """Every term's parts for index tuples (the trained parameters)."""
    from mogp_surprise.core.rows import Batch

    return mod.rating_parts(Batch(index))


def features(mod: MWGPModule, index: torch.Tensor) -> torch.Tensor:
    """The concatenated GP inputs of index tuples."""
    return mod.gp_inputs(index)


def mean_function(mod: MWGPModule, index: torch.Tensor) -> torch.Tensor:
    return parts(mod, index).mean


def gp_moments(mod: MWGPModule, x: torch.Tensor, terms) -> tuple[torch.Tensor, torch.Tensor]:
    """E[f] and Var[f] under q at GP inputs ``x`` from the whitened terms, in the module's dtype (differentiable:
    training's exact kernel form)."""
    k = mod.gp.kernel()(x, mod.gp.inducing)
    return k @ terms.w, mod.gp.outputscale() + ((k @ terms.M) * k).sum(-1)


def latent_moments(mod: MWGPModule, index: torch.Tensor, terms) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (mean function included) and variance of f at index tuples (training's exact kernel form)."""
    p = parts(mod, index)
    mean, var = gp_moments(mod, torch.cat([r.value for r in p.inputs], dim=-1), terms)
    return p.mean + mean, var


def offsets(mod: MWGPModule, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the mean and log variance of every level's log-noise offset of ``factor``."""
    table = mod.term("noise_offset").table(f"offset_{factor}")
    return table[:, 0], table[:, 1]


def table(mod: MWGPModule, term: str, name: str) -> torch.nn.Parameter:
    return mod.term(term).table(name)


def fitted(post, term: str, name: str):
    """A fitted table of a posterior (``.values``, ``.laplace_var``, ``.population``)."""
    return post.term(term).tables[name]


def population(post, term: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, variance) of the population an unseen level's row of a term table is drawn from."""
    return fitted(post, term, name).population


def random_ratings_posterior(n_users: int = 30, n_items: int = 25, dtype: str = "float32"):
    """A posterior fitted (3 epochs) on 600 random 1..5 ratings of ``n_users`` x ``n_items`` (seeded)."""
    import numpy as np

    from mogp_surprise.core import fit_mwgp

    rng = np.random.default_rng(0)
    index = np.stack([rng.integers(0, n_users, 600), rng.integers(0, n_items, 600)], 1)
    y = rng.integers(1, 6, 600).astype(float)
    return fit_mwgp(index, y, (n_users, n_items), MWGPConfig(n_epochs=3, n_inducing=16, batch_size=128,
                                                             random_state=0, dtype=dtype)).posterior
