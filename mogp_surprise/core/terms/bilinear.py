"""A bilinear term p_u . q_i in the mean function (``mf_rank`` = k > 0; the paper has none).

Users and items carry k-dimensional factors of their own, separate from the GP's embeddings, under the
prior N(0, 1 / ``mf_reg``), so that the model contains biased matrix factorisation and the GP fits what
a low-rank product misses. With implicit feedback the factors get it too::

    p~_u = p_u + |N(u)|^{-1/2} sum_j y'_j,      q~_j = q_j + |N(j)|^{-1/2} sum_u x'_u

The users' factors start at 0 and the items' at N(0, 0.1^2), so the mean function starts as the bias
model. With Gaussian p ~ N(m_p, v_p) and q ~ N(m_q, v_q) per dimension (a known level: its factor and
its Laplace variance; an unseen one: the learned population's)::

    E[p . q] = m_p . m_q,    Var[p . q] = sum_d (v_p m_q^2 + m_p^2 v_q + v_p v_q)_d

With ``mf_posterior="laplace"`` (the default) the factors are MAP estimates and get a diagonal Laplace
variance after training. With ``"variational"`` every entry of p_u and q_i has a mean-field Gaussian
posterior q = N(m, v) in the ELBO: Var[p . q] enters the expected log likelihood (so the fit pays for
the factors' uncertainty: the gradient of a mean m_p gains -lambda_n m_p v_q), and every entry has the KL
to its prior N(0, 1 / mf_reg),

    KL = 1/2 [mf_reg (m^2 + v) - 1 - log(mf_reg v)],

whose m^2 part is the tables' Gaussian prior (weight decay, as for the MAP factors). The means are
trained by gradient; the variances (tables ``logvar_0``, ``logvar_1``) are set to their optimum given
everything else, in closed form (coordinate ascent: the ELBO is -1/2 v (mf_reg + sum_n lambda_n E[q~_d^2])
+ 1/2 log v + const in one entry v of p_u), after every epoch::

    v(p_ud) = 1 / (mf_reg + sum_{n in u} lambda_n (q~_{i(n)d}^2 + v(q_{i(n)d})))          (items alike)

with lambda_n = E[1 / sigma_n^2] (:meth:`Bilinear.variance_statistics`). The first epoch runs at a tenth
of the prior variance (``MF_INIT_VAR_FRACTION``): at the start p_u = 0, so the optimum would be nearly the
prior variance, whose Var[p . q] holds the means at the symmetric point 0 (ML-1M 80/20, rank 32, mf_reg 25:
RMSE 0.8291 with an update before the first epoch, 0.8258 without). That is the Gauss-Newton
precision of the Laplace variance with E[q~^2] for q~^2, at a mean trained knowing the variance.
After training v is the factors' variance where the Laplace variance would be (a known level's
predictive variance, the population of unseen levels); the implicit sums stay point values. A folded-in
user's p_u gets its Laplace variance, as with the MAP factors. The KL's variance part is constant in
every gradient step, so the training loss leaves it out.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..optim import serving_kernel
from .base import RatingParts, Rows, Table, Term, register_term

#: standard deviation of every entry of the items' factors q_i at initialisation (users' p_u start at 0)
MF_INIT_SCALE = 0.1
#: ``mf_posterior="variational"``: every entry's variance starts at this fraction of the prior variance 1 / mf_reg
MF_INIT_VAR_FRACTION = 0.1


@register_term
class Bilinear(Term):
    name = "bilinear"
    order = 20
    mean_only = True
    builtin = True

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "Bilinear | None":
        if not config.mf_rank or len(n_levels) < 2:
            return None
        posterior, prior = config.bilinear()
        return cls(n_levels, {"rank": int(config.mf_rank), "mf_reg": prior, "implicit": bool(config.implicit),
                              "posterior": posterior})

    def __init__(self, n_levels: tuple[int, ...], options: dict[str, Any] | None = None,
                 parameters: bool = True) -> None:
        options = dict(options or {})
        options.setdefault("posterior", "laplace")  # models saved before the option existed: MAP + Laplace
        super().__init__(n_levels, options, parameters)

    @property
    def variational(self) -> bool:
        return self.options["posterior"] == "variational"

    def tables(self) -> list[Table]:
        k, reg = self.options["rank"], self.options["mf_reg"]
        out = [Table(f"factor_{f}", f, k, reg, laplace=True) for f in (0, 1)]
        if self.variational:
            out += [Table(f"logvar_{f}", f, k, variance_of=f"factor_{f}") for f in (0, 1)]
        if self.options["implicit"]:
            out += [Table(f"implicit_{side}", 1 - side, k, reg, feeds=f"factor_{side}") for side in (0, 1)]
        return out

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        p, q = rows["factor_0"], rows["factor_1"]
        if "logvar_0" in rows:  # training with the variational posterior: the rows' variances are q's
            p = Rows(p.value, torch.exp(rows["logvar_0"].value))
            q = Rows(q.value, torch.exp(rows["logvar_1"].value))
        parts.add_mean(*_product_moments(p, q, _row_dot))

    def pair_combine(self, index: tuple[int, ...], tables: dict, extras: Any, parts: Any) -> bool:
        (p, p_var), (q, q_var) = tables["factor_0"], tables["factor_1"]
        user, item = index[0], index[1]
        kernel = serving_kernel("pair_product_moments")
        if kernel is not None:  # one compiled call
            mean, var = kernel(p, _NO_ROWS if p_var is None else p_var, q, _NO_ROWS if q_var is None else q_var,
                               user, item)
            parts.add_mean(mean, None if p_var is None and q_var is None else var)
            return True
        parts.add_mean(*_product_moments(Rows(p[user], None if p_var is None else p_var[user]),
                                         Rows(q[item], None if q_var is None else q_var[item]), np.dot))
        return True

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        self.table("factor_0").zero_()
        items = self.table("factor_1")
        items.copy_(init.randn(items.shape) * MF_INIT_SCALE)
        if self.variational:
            for f in (0, 1):
                self.table(f"logvar_{f}").fill_(math.log(MF_INIT_VAR_FRACTION / self.options["mf_reg"]))

    def variance_statistics(self, tables: dict[str, Tensor], index: Tensor, weights: Tensor) -> dict[str, Tensor]:
        """sum_{n in level} lambda_n E[other factor's entry^2] per entry of each factor (module docstring)."""
        if not self.variational:
            return {}
        out = {}
        for f in (0, 1):
            other = 1 - f  # E[entry^2] per level of the other factor, then read by the ratings' levels
            second = tables[f"factor_{other}"] ** 2 + torch.exp(tables[f"logvar_{other}"])
            out[f"logvar_{f}"] = torch.zeros_like(tables[f"logvar_{f}"]).index_add_(
                0, index[:, f], weights.unsqueeze(-1) * second[index[:, other]])
        return out

    @torch.no_grad()
    def update_variances(self, statistics: dict[str, Tensor]) -> None:
        for f in (0, 1):
            name = f"logvar_{f}"
            if name in statistics:
                self.table(name).copy_(-torch.log(self.options["mf_reg"] + statistics[name]))


def _row_dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


def _product_moments(p: Rows, q: Rows, dot: Any) -> tuple[Any, Any]:
    """E[p . q] and Var[p . q] of independent rows p, q (``dot``: the row-wise inner product): sum of
    p_var q^2 + q_var p^2 + p_var q_var = p_var (q^2 + q_var) + q_var p^2 (None: both are point values)."""
    mean = dot(p.value, q.value)
    if p.var is None and q.var is None:
        return mean, None
    if q.var is None:
        return mean, dot(p.var, q.value * q.value)
    if p.var is None:
        return mean, dot(q.var, p.value * p.value)
    return mean, dot(p.var, q.value * q.value + q.var) + dot(q.var, p.value * p.value)


_NO_ROWS = np.empty((0, 0))  # a table without rows: the kernel's point values
