"""One draw of a user's ratings of the whole catalogue from the posterior (Thompson sampling).

A draw is consistent across items: the user's parameters are drawn once (their row of every term's
user tables, from N(fitted row, its Laplace variance); an unseen user's from the population), each
item's rows from N(fitted row, its Laplace variance), and the latent function f from q(f):

    f(x_n) = k_n^T w~ + e_n,     w~ ~ N(w, M + K_mm^{-1}),     e_n ~ N(0, s - k_n^T K_mm^{-1} k_n)

(with u = L v, v ~ q(v) = N(m, S): k_n^T K_mm^{-1} u = k_n^T L^{-T} v has mean k_n^T w and variance
k_n^T (M + K_mm^{-1}) k_n, and e_n is the part of f(x_n) that the inducing values do not determine,
drawn independently per item). The drawn mean function plus f, on the rating scale, is the score
by which ``recommend(..., strategy="thompson")`` ranks. Its mean over draws is, up to the delta
method's linearisation, the predictive mean; its variance the latent variance (noise excluded: a draw
scores the user's expected rating, not a noisy one).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .gp import FittedGP
from .linalg import safe_cholesky
from .state import PosteriorState
from .terms import RatingParts, Rows
from .predictive import catalogue_index, predictive

__all__ = ["weight_sampler", "catalogue_draw"]


def weight_sampler(gp: FittedGP, jitter: float = 1e-5) -> tuple[Tensor, Tensor]:
    """(R, K^{-1}) in the GP's dtype: R R^T = M + K_mm^{-1}, the covariance of w~ (module docstring)."""
    z = gp.inducing.double()
    kernel = type(gp.kernel())(gp.lengthscale.double(), gp.outputscale.double())
    chol = safe_cholesky(kernel.gram(z), jitter, what="K_mm (inducing-point covariance)")
    k_inv = torch.cholesky_inverse(chol)
    cov = gp.M.double() + k_inv
    values, vectors = torch.linalg.eigh(0.5 * (cov + cov.T))
    root = vectors * values.clamp_min(0.0).sqrt()
    return root.to(gp.w.dtype), k_inv.to(gp.w.dtype)


def _drawn(value: Tensor, var: Tensor | None, generator: torch.Generator, scale: float = 1.0) -> Tensor:
    if var is None:
        return value
    noise = _randn(value.shape, generator, value.dtype, value.device)
    return value + (scale * var.clamp_min(0.0).sqrt()) * noise


def _randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator, dtype: torch.dtype,
           device: torch.device) -> Tensor:
    """Standard normal draws made where the generator lives, then moved to ``device`` (a CPU generator serves
    a GPU posterior, with the same numbers)."""
    return torch.randn(tuple(shape), generator=generator, dtype=dtype, device=generator.device).to(device)


def catalogue_draw(state: PosteriorState, user: int, sampler: tuple[Tensor, Tensor],
                   generator: torch.Generator, scale: float = 1.0) -> Tensor:
    """One joint draw of the expected rating of user ``user`` (-1: unseen) for every item, standardised
    units, shape (n_items,). ``sampler``: :func:`weight_sampler` of the state's GP. ``scale``: every drawn
    deviation from the posterior's values times this (a tempered posterior, its standard deviations times
    ``scale``; 1: the posterior, 0: its values)."""
    n = state.n_levels[1]
    level = max(user, 0)
    dtype, device = state.gp.w.dtype, state.gp.w.device

    def new_parts() -> RatingParts:
        return RatingParts(mean=state.global_mean.expand(n), log_noise_base=torch.log(state.noise_variance),
                           inputs=[None, None])

    drawn, fixed = new_parts(), new_parts()  # every row drawn (the mean function); rows with their variance (f)
    for fitted in state.terms:
        rows_drawn, rows_fixed = {}, {}
        for spec in fitted.term.direct_tables:
            table = fitted.tables[spec.name]
            if spec.factor == 0:
                if user < 0:  # an unseen user: a concrete row from the population
                    mean, var = table.population if table.population is not None else (table.values.mean(0), None)
                    value, var = _drawn(mean, var, generator, scale), None
                else:
                    value = table.values[level]
                    var = None if table.laplace_var is None else table.laplace_var[level]
                one = _drawn(value, var, generator, scale)
                rows_drawn[spec.name] = Rows(one.expand(n, *one.shape))
                rows_fixed[spec.name] = Rows(value.expand(n, *value.shape),
                                             None if var is None else var.expand(n, *var.shape))
            else:
                rows_drawn[spec.name] = Rows(_drawn(table.values, table.laplace_var, generator, scale))
                rows_fixed[spec.name] = Rows(table.values, table.laplace_var)
        if fitted.term.reads_pairs:  # the pair inputs are data: the same in both
            pairs = fitted.term.pair_rows(catalogue_index(user, n, device), fitted.extras)
            rows_drawn.update(pairs)
            rows_fixed.update(pairs)
        fitted.term.combine(rows_drawn, drawn)
        fitted.term.combine(rows_fixed, fixed)
    gp = state.gp
    inputs = fixed.inputs
    x = torch.cat([inputs[0].value, inputs[1].value], dim=-1)
    kernel = gp.kernel()
    k = kernel.cross(x, gp.inducing)
    root, k_inv = sampler
    eps = _randn((root.shape[1],), generator, dtype, device)
    weights = gp.w + scale * (root @ eps)
    residual = (gp.outputscale - ((k @ k_inv) * k).sum(-1)).clamp_min(0.0)
    f = k @ weights + scale * residual.sqrt() * _randn((n,), generator, dtype, device)
    if inputs[0].var is not None or inputs[1].var is not None:
        # a known input's Laplace variance by the delta method, as in the predictive: E[f] moves linearly
        # with the input's draw (the user's drawn once, each item's on its own)
        grad = kernel.mean_gradient(k * gp.w, x, gp.inducing)
        r = gp.input_width
        if inputs[0].var is not None:
            f = f + grad[:, :r] @ _drawn(torch.zeros_like(inputs[0].var[0]), inputs[0].var[0], generator, scale)
        if inputs[1].var is not None:
            f = f + (grad[:, r:] * _drawn(torch.zeros_like(inputs[1].var), inputs[1].var, generator, scale)).sum(-1)
    return predictive(drawn, f, None)[0]
