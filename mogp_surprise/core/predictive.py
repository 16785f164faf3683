"""The predictive distribution of a rating: one function for prediction, fold-in and the checks of training.

Every term adds its part to :class:`~.terms.RatingParts` from the rows of its tables; the GP gives the
moments of f at the ratings' inputs (:meth:`~.gp.FittedGP.moments`); :func:`predictive` combines them:

    mean       = mu + a E[f]                    (mu: the mean function, a: a latent scale, 1 by default)
    latent var = a^2 Var[f] + Var[mu]            (Var[mu]: the terms' estimation uncertainty)
    noise var  = sigma^2 exp(E[s] + Var[s] / 2)  (s: the sum of the log-noise offsets; 0 with one noise level)

For prediction (:func:`predictive_moments`) the rows come from the fitted tables: a known level's row
and its Laplace variance (``embedding_uncertainty``: the delta method for the GP input, the variances of
the biases and bilinear factors), an unseen level's (index -1) population (the GP input integrated out
in closed form, :mod:`.gp`). The latent variance of a pattern of unseen factors is multiplied by its
cold-start calibration factor (:mod:`.calibration`). Training uses the same parts with the fused data
term (:mod:`.objective`, tested equal).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .state import FittedTable, PosteriorState
from .terms import RatingParts, Rows

# every prediction GEMM has a multiple of _ROW_PAD and at most _ROW_BLOCK rows (_pattern_moments)
_ROW_PAD, _ROW_BLOCK = 64, 1024


def predictive(parts: RatingParts, f_mean: Tensor, f_var: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, latent variance and noise variance of n ratings from the terms' parts and the moments of f
    (torch tensors, or numpy arrays on the one-pair path of :mod:`.serving`). Without ``f_var`` (the
    means alone, as top-N ranking by the mean needs) the two variances are ``None``."""
    xp = parts.xp
    if parts.latent_log_scale is not None:
        scale = xp.exp(parts.latent_log_scale)
        f_mean = scale * f_mean
        f_var = None if f_var is None else scale * scale * f_var
    mean = parts.mean + f_mean
    if f_var is None:
        return mean, None, None
    var = f_var if parts.mean_var is None else f_var + parts.mean_var
    if parts.log_noise is None:
        noise = xp.broadcast_to(xp.exp(parts.log_noise_base), (parts.n,))
    else:
        noise = xp.exp(parts.log_noise + 0.5 * parts.log_noise_var)
    return mean, var, noise


def table_rows(table: FittedTable, levels: Tensor, unseen: bool, n: int) -> Rows:
    """A fitted table's rows for n ratings: the levels' rows and Laplace variances, or the population."""
    if unseen:
        mean, var = table.population
        return Rows(mean.expand(n, *mean.shape), var.expand(n, *var.shape), unseen=True)
    var = None if table.laplace_var is None else table.laplace_var[levels]
    return Rows(table.values[levels], var)


def pattern_parts(state: PosteriorState, index: Tensor, unseen: tuple[bool, ...], noise_only: bool = False
                  ) -> RatingParts:
    """Every fitted term's parts for rows that share one pattern of unseen factors; with ``noise_only`` those of
    the terms that may add to the noise (not :attr:`~.terms.Term.mean_only`)."""
    n = index.shape[0]
    parts = RatingParts(mean=state.global_mean.expand(n), log_noise_base=torch.log(state.noise_variance),
                        inputs=[None] * len(unseen))
    for fitted in state.terms:
        if noise_only and fitted.term.mean_only:
            continue
        rows = {spec.name: table_rows(fitted.tables[spec.name], index[:, spec.factor], unseen[spec.factor], n)
                for spec in fitted.term.direct_tables}
        if fitted.term.reads_pairs:
            rows.update(fitted.term.pair_rows(index, fitted.extras))
        fitted.term.combine(rows, parts)
    return parts


def noise_variances(state: PosteriorState, index: Tensor) -> Tensor:
    """E[sigma_n^2] at index tuples of known levels (standardised units), without the GP's moments."""
    parts = pattern_parts(state, index, (False,) * index.shape[1], noise_only=True)
    return predictive(parts, parts.mean.new_zeros(()), parts.mean.new_zeros(()))[2]


def predictive_moments(state: PosteriorState, psi: list, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, latent variance and noise variance at index tuples (-1: unseen), standardised units.

    ``psi``: the kernel expectations of every factor's unseen-level population (:meth:`~.gp.FittedGP.expectations`).
    """
    n_factors = index.shape[1]
    pattern = ((index < 0).long() * (2 ** torch.arange(n_factors, device=index.device))).sum(1)
    patterns = torch.unique(pattern).tolist()
    if len(patterns) == 1:
        return _pattern_moments(state, psi, index, patterns[0])
    out = [torch.empty(index.shape[0], dtype=state.gp.w.dtype, device=index.device) for _ in range(3)]
    for p in patterns:
        rows = (pattern == p).nonzero().squeeze(1)
        for target, part in zip(out, _pattern_moments(state, psi, index[rows], p)):
            target[rows] = part
    return out[0], out[1], out[2]


def _pattern_moments(state: PosteriorState, psi: list, index: Tensor, pattern: int) -> tuple[Tensor, Tensor, Tensor]:
    """Moments for rows that share one pattern of unseen factors (bit f of ``pattern``: factor f unseen).

    The rows are padded to a multiple of ``_ROW_PAD`` (copies of the first row) and computed in
    blocks of at most ``_ROW_BLOCK`` rows: BLAS sums in another order for products with few
    rows, so without the padding a pair's prediction would change in its last bits with the
    rows it is computed with (``predict(u, i)`` vs ``test(testset)``; scikit-learn's subset
    invariance). With it every prediction is bit-identical whatever its batch, float32 too
    (``tests/core/test_posterior.py``); cache-sized blocks are also faster than one product.
    """
    n = index.shape[0]
    pad = -n % _ROW_PAD
    if pad:
        index = torch.cat([index, index[:1].expand(pad, -1)])
    unseen = tuple(bool(pattern >> f & 1) for f in range(index.shape[1]))
    parts = [_rows_moments(state, psi, index[start:start + _ROW_BLOCK], unseen, pattern)
             for start in range(0, n + pad, _ROW_BLOCK)]
    joined = parts[0] if len(parts) == 1 else tuple(torch.cat(t) for t in zip(*parts))
    return joined[0][:n], joined[1][:n], joined[2][:n]


def catalogue_moments(state: PosteriorState, psi: list, user: int,
                      variance: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`predictive_moments` of one user (-1: unseen) with every item of a (user, item) model, for
    ranking: the user's rows broadcast, the item tables read whole, one product (the same values as
    :func:`predictive_moments` up to float rounding, which sums in other blocks; ``variance=False``: the
    means alone, the same values as with the variances)."""
    n = state.n_levels[1]
    unseen = (user < 0, False)
    level = torch.tensor([max(user, 0)], device=state.gp.w.device)
    parts = RatingParts(mean=state.global_mean.expand(n), log_noise_base=torch.log(state.noise_variance),
                        inputs=[None, None])
    for fitted in state.terms:
        rows = {}
        for spec in fitted.term.direct_tables:
            table = fitted.tables[spec.name]
            if spec.factor == 0:
                one = table_rows(table, level, unseen[0], 1)
                var = one.var.expand(n, *one.var.shape[1:]) if variance and one.var is not None else None
                rows[spec.name] = Rows(one.value.expand(n, *one.value.shape[1:]), var, one.unseen)
            else:  # the means alone read no variance (test_means_alone_equal_the_full_predictive)
                rows[spec.name] = Rows(table.values, table.laplace_var if variance else None)
        if fitted.term.reads_pairs:
            part = None if unseen[0] else fitted.term.catalogue_part(user, rows, fitted.extras, variance)
            if part is not None:
                parts.add_mean(*part)
                continue
            rows.update(fitted.term.pair_rows(catalogue_index(user, n, level.device), fitted.extras))
        fitted.term.combine(rows, parts)
    return _moments_of_parts(state, psi, parts, int(unseen[0]), variance)


def catalogue_index(user: int, n_items: int, device: torch.device) -> Tensor:
    """The index tuples (n_items, 2) of one user (-1: unseen) with every item."""
    items = torch.arange(n_items, device=device)
    return torch.stack([torch.full_like(items, user), items], dim=1)


def _rows_moments(state: PosteriorState, psi: list, index: Tensor, unseen: tuple[bool, ...],
                  pattern: int) -> tuple[Tensor, Tensor, Tensor]:
    return _moments_of_parts(state, psi, pattern_parts(state, index, unseen), pattern)


def _moments_of_parts(state: PosteriorState, psi: list, parts: RatingParts, pattern: int,
                      variance: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, latent and noise variance from the terms' parts (``variance=False``: the means alone, then None,
    None: an m-vector per rating instead of an m x m product)."""
    f_mean, f_var = state.gp.moments(parts.inputs, psi, variance)
    mean, var, noise = predictive(parts, f_mean, f_var)
    if var is None:
        return mean, None, None
    if pattern:
        var = var * state.cold_scale[pattern]
    floor = torch.finfo(var.dtype).eps * state.gp.outputscale
    return mean, torch.maximum(var, floor), noise
