"""A bias per level of every factor: the mean function c + b_user + b_item (+ b_context).

Prior N(0, 1 / ``bias_reg``) (MAP, standardised rating units); ``use_biases=False`` switches the term
off (the mean function is then the global constant c). The biases start at their regularised
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


@register_term
class Bias(Term):
    name = "bias"
    order = 10
    builtin = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Bias | None":
        return cls(n_levels, {"bias_reg": float(config.bias_reg)}) if config.use_biases else None

    @property
    def unit_mean_tables(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"bias_{f}" for f in range(len(self.n_levels)))

    def tables(self) -> list[Table]:
        return [Table(f"bias_{f}", f, 0, self.options["bias_reg"], laplace=True) for f in range(len(self.n_levels))]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        for f in range(len(self.n_levels)):
            b = rows[f"bias_{f}"]
            parts.add_mean(b.value, b.var)

    @torch.no_grad()
    def initialise_from_data(self, init: Any) -> None:
        """Empirical-Bayes start, factor after factor: a level's bias is the mean residual of its n ratings
        shrunk by n / (n + s2 / t2), s2 the residual variance within levels, t2 the variance of the levels'
        biases estimated by moments (the spread of the level means less what their noise explains)."""
        index, y = init.index, init.y.to(init.dtype)
        factors = range(len(self.n_levels))
        counts = [torch.bincount(index[:, f], minlength=n).to(init.dtype) for f, n in zip(factors, self.n_levels)]
        values = [torch.zeros(n, dtype=init.dtype, device=init.device) for n in self.n_levels]
        for _ in range(INIT_SWEEPS):
            for f in factors:
                residual = y - sum(values[g][index[:, g]] for g in factors if g != f)
                sums = torch.zeros_like(values[f]).index_add_(0, index[:, f], residual)
                values[f] = sums / (counts[f] + _shrinkage(residual, sums, counts[f], index[:, f]))
        for f in factors:
            self.table(f"bias_{f}").copy_(values[f])


def _shrinkage(residual: Tensor, sums: Tensor, counts: Tensor, levels: Tensor) -> float:
    """s2 / t2 of :meth:`Bias.initialise_from_data` (t2 floored at 1e-6 of s2: no spread, no biases)."""
    seen = counts > 0
    means = sums[seen] / counts[seen]
    within = float(((residual - (sums / counts.clamp_min(1))[levels]) ** 2).mean())
    within = max(within, 1e-12)
    if means.numel() < 2:
        return within / max(float(means.square().mean()), 1e-6 * within)
    spread = float(means.var()) - within * float((1.0 / counts[seen]).mean())
    return within / max(spread, 1e-6 * within)
