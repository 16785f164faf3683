"""A bias per level of every factor: the mean function c + b_user + b_item (+ b_context).

Prior N(0, 1 / ``bias_reg``) (MAP, standardised rating units); ``use_biases=False`` switches the term
off (the mean function is then the global constant c).
"""
from __future__ import annotations

from typing import Any

from .base import RatingParts, Rows, Table, Term, register_term


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
