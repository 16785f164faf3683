"""A bias per level of every factor: the mean function c + b_user + b_item (+ b_context).

Prior N(0, 1 / ``bias_reg``) (MAP, standardised rating units); ``use_biases=False`` switches the term
off (the mean function is then the global constant c). With ``bias_reg="auto"`` (the default) each
factor's prior precision is 1 / t2, t2 the variance of its levels' biases that the closed-form start
estimates from the training data (below), set once before training and saved with the model
(``options["bias_precision"]``): on little data the biases are shrunk as much as their spread
supports, not by a constant tuned on MovieLens (``docs/history.md``: 200 generated ratings over 12
seeds 1.091 -> 1.068, ``benchmarks/small_data.py`` 0.9950 -> 0.9933). The biases start at their regularised
least-squares values (alternating closed-form sweeps, as Surprise's ``BaselineOnly``) with a shrinkage
estimated from the data (empirical Bayes), so that training, and the epoch early stopping picks, start
from what the biases alone explain: a level whose ratings agree starts at their value. (Measured, see
``docs/history.md``: the model's own prior at the start shrinks too little on small data, 10 % samples
of ML-100K 1.017 against 0.998; a fixed strong shrinkage leaves constant items short of their value.)
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import RatingParts, Rows, Table, Term, register_term

#: alternating sweeps of the biases' closed-form start (Surprise's BaselineOnly runs 10 ALS sweeps)
INIT_SWEEPS = 5
#: ``bias_reg="auto"``: the prior precision of the biases before the data are seen, and its largest estimate
#: (levels that all agree: a bias std of 1 % of the ratings' std)
AUTO_PRECISION_START, AUTO_PRECISION_MAX = 1.0, 1e4
#: the fixed-point iterations of the biases' maximum-likelihood spread (:func:`_spread`) and their relative tolerance
ML_ITERATIONS, ML_TOLERANCE = 200, 1e-10


@register_term
class Bias(Term):
    name = "bias"
    order = 10
    mean_only = True
    builtin = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Bias | None":
        reg = config.bias_reg if config.bias_reg == "auto" else float(config.bias_reg)
        return cls(n_levels, {"bias_reg": reg}) if config.use_biases else None

    def prior_precision(self, f: int) -> float | None:
        """The prior precision of factor ``f``'s biases: ``bias_reg``, or with "auto" the estimate from the data
        (:meth:`initialise_from_data`; AUTO_PRECISION_START before it); None for a state saved before the
        hyper-parameter was (a migrated one: see :attr:`~..state.FittedTerm.complete`)."""
        reg = self.options["bias_reg"]
        if reg is None:
            return None
        if reg != "auto":
            return float(reg)
        estimates = self.options.get("bias_precision")
        return AUTO_PRECISION_START if estimates is None else float(estimates[f])

    @property
    def unit_mean_tables(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"bias_{f}" for f in range(len(self.n_levels)))

    def tables(self) -> list[Table]:
        return [Table(f"bias_{f}", f, 0, self.prior_precision(f), laplace=True) for f in range(len(self.n_levels))]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        for f in range(len(self.n_levels)):
            b = rows[f"bias_{f}"]
            parts.add_mean(b.value, b.var)

    def pair_combine(self, index: tuple[int, ...], tables: dict, extras: Any, parts: Any) -> bool:
        for f in range(len(self.n_levels)):
            values, var = tables[f"bias_{f}"]
            parts.add_mean(values.item(index[f]), None if var is None else var.item(index[f]))
        return True

    @torch.no_grad()
    def initialise_from_data(self, init: Any) -> None:
        """Empirical-Bayes start, factor after factor: a level's bias is the mean residual of its n ratings
        shrunk by n / (n + s2 / t2), s2 the residual variance within levels (pooled over the factors, from each
        one's latest residual; a factor is passed over while no factor has a level rated twice), t2 the variance
        of the levels' biases by maximum likelihood given s2 (:func:`_spread`). With ``bias_reg="auto"`` the
        last sweep's 1 / t2 of each factor becomes its prior precision (1e4 for a factor never reached)."""
        index, y = init.index, init.y.to(init.dtype)
        factors = range(len(self.n_levels))
        counts = [torch.bincount(index[:, f], minlength=n).to(init.dtype) for f, n in zip(factors, self.n_levels)]
        values = [torch.zeros(n, dtype=init.dtype, device=init.device) for n in self.n_levels]
        spreads = [AUTO_PRECISION_MAX ** -1] * len(self.n_levels)  # each factor's t2, set by every sweep
        squares: list[tuple[float, int]] = [(0.0, 0)] * len(self.n_levels)  # each factor's within-level squares
        for _ in range(INIT_SWEEPS):
            for f in factors:
                residual = y - sum(values[g][index[:, g]] for g in factors if g != f)
                sums = torch.zeros_like(values[f]).index_add_(0, index[:, f], residual)
                squares[f] = _within_squares(residual, sums, counts[f], index[:, f])
                dof = sum(d for _, d in squares)
                if not dof:  # no level rated twice yet: nothing tells noise from bias
                    continue
                within = max(sum(q for q, _ in squares) / dof, 1e-12)  # pooled over the factors: one noise
                spreads[f] = _spread(sums, counts[f], within)
                values[f] = sums / (counts[f] + within / spreads[f])
        for f in factors:
            self.table(f"bias_{f}").copy_(values[f])
        if self.options["bias_reg"] == "auto":
            self.set_options(bias_precision=[min(1.0 / t2, AUTO_PRECISION_MAX) for t2 in spreads])


def _within_squares(residual: Tensor, sums: Tensor, counts: Tensor, levels: Tensor) -> tuple[float, int]:
    """The squares of the residuals about their levels' means and their degrees of freedom, N - L (N ratings, L
    levels seen)."""
    squares = float(((residual - (sums / counts.clamp_min(1))[levels]) ** 2).sum())
    return squares, residual.numel() - int((counts > 0).sum())


def _variances(residual: Tensor, sums: Tensor, counts: Tensor, levels: Tensor) -> tuple[float, float]:
    """(s2, t2) of one factor's levels alone (the neighbourhood term's shrinkage of a new user's bias): s2 the
    within-level variance on N - L degrees of freedom (one-way ANOVA's unbiased mean square, where dividing by N
    made s2 short by (N - L) / N: 7/8 with 8 ratings a level, and t2 too large), t2 by :func:`_spread`.
    :meth:`Bias.initialise_from_data` pools s2 over the factors instead: their within-level squares estimate the
    same noise, and a factor whose levels were each rated once has none of its own (alone it took s2 = 0 and its
    biases took every residual: with every user rating one item the items' biases started at 0 under a prior of
    precision 1e4, and the items explained nothing)."""
    squares, dof = _within_squares(residual, sums, counts, levels)
    within = max(squares / max(dof, 1), 1e-12)
    return within, _spread(sums, counts, within)


def _spread(sums: Tensor, counts: Tensor, within: float) -> float:
    """t2 given s2 = ``within`` (floored at 1e-6 of s2: no spread, no biases): the maximum-likelihood estimate given s2 of the one-way random-effects model, in which a level's mean
    residual is N(mu, t2 + s2 / n) for its n ratings: the fixed point t2 = sum w^2 ((mean - mu)^2 - s2 / n) /
    sum w^2, w = 1 / (t2 + s2 / n), mu the w-weighted mean, iterated from the moments estimate (the spread of the
    level means less s2 mean(1 / n)). The moments estimate weighs the mean of a level of one rating as that of a
    level of fifty; the likelihood by how much each says (on 200 generated ratings over 12 seeds, RMSE 1.0647 ->
    1.0620; it converges in 3-20 iterations)."""
    seen = counts > 0
    n = counts[seen].double()
    means = sums[seen].double() / n
    floor = 1e-6 * within
    if means.numel() < 2:
        return max(float(means.square().mean()), floor)
    noise = within / n
    spread = max(float(means.var()) - float(noise.mean()), floor)
    for _ in range(ML_ITERATIONS):
        w = (spread + noise).reciprocal()
        mu = (w * means).sum() / w.sum()
        new = max(float((w * w * ((means - mu).square() - noise)).sum() / (w * w).sum()), floor)
        done = abs(new - spread) <= ML_TOLERANCE * spread
        spread = new
        if done:
            break
    return spread
