"""A bilinear term p_u . q_i in the mean function (``mf_rank`` = k > 0; the paper has none).

Users and items carry k-dimensional factors of their own, separate from the GP's embeddings, under the
prior N(0, 1 / ``mf_reg``), so that the model contains biased matrix factorisation and the GP fits what
a low-rank product misses. With implicit feedback the factors get it too::

    p~_u = p_u + |N(u)|^{-1/2} sum_j y'_j,      q~_j = q_j + |N(j)|^{-1/2} sum_u x'_u

The users' factors start at 0 and the items' at N(0, 0.1^2), so the mean function starts as the bias
model. With Gaussian p ~ N(m_p, v_p) and q ~ N(m_q, v_q) per dimension (a known level: its factor and
its Laplace variance; an unseen one: the learned population's)::

    E[p . q] = m_p . m_q,    Var[p . q] = sum_d (v_p m_q^2 + m_p^2 v_q + v_p v_q)_d
"""
from __future__ import annotations

from typing import Any

import torch

from .base import RatingParts, Rows, Table, Term, register_term

#: standard deviation of every entry of the items' factors q_i at initialisation (users' p_u start at 0)
MF_INIT_SCALE = 0.1


@register_term
class Bilinear(Term):
    name = "bilinear"
    order = 20
    builtin = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Bilinear | None":
        if not config.mf_rank or len(n_levels) < 2:
            return None
        return cls(n_levels, {"rank": int(config.mf_rank), "mf_reg": float(config.mf_reg),
                              "implicit": bool(config.implicit)})

    def tables(self) -> list[Table]:
        k, reg = self.options["rank"], self.options["mf_reg"]
        out = [Table(f"factor_{f}", f, k, reg, laplace=True) for f in (0, 1)]
        if self.options["implicit"]:
            out += [Table(f"implicit_{side}", 1 - side, k, reg, feeds=f"factor_{side}") for side in (0, 1)]
        return out

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        p, q = rows["factor_0"], rows["factor_1"]
        mean = (p.value * q.value).sum(-1)
        # Var[p.q] for independent p, q: sum of p_var q^2 + q_var p^2 + p_var q_var = p_var (q^2 + q_var) + q_var p^2
        if p.var is None and q.var is None:
            var = None
        elif q.var is None:
            var = (p.var * q.value * q.value).sum(-1)
        elif p.var is None:
            var = (q.var * p.value * p.value).sum(-1)
        else:
            var = (p.var * (q.value * q.value + q.var) + q.var * p.value * p.value).sum(-1)
        parts.add_mean(mean, var)

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        self.table("factor_0").zero_()
        items = self.table("factor_1")
        items.copy_(init.randn(items.shape) * MF_INIT_SCALE)
