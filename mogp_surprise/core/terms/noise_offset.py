"""A log-noise offset per level of every factor (``noise="heteroscedastic"``, the default).

    sigma^2_n = sigma^2 * exp(sum_f s_f[level of n]),     s_f ~ N(0, tau_f),  q(s_fl) = N(mu_fl, v_fl)

Every level has a Gaussian variational posterior over its offset (a table of width 2: mu and log v) and
the prior variances tau_f are learned (empirical Bayes). Consistent raters and items people agree on get
narrow predictive intervals, erratic raters and divisive items wide ones. Under q, E[log sigma_n^2] =
log sigma^2 + sum_f mu_f and E[1 / sigma_n^2] = exp(sum_f v_f / 2 - E[log sigma_n^2]); a prediction's
noise variance is sigma^2 prod_f E[exp(s_f)] with E[exp(s)] = exp(mu + v / 2). An unseen level's offset
is integrated over the learned ones: its factor is the average E[exp(s)] of the levels of its factor.

The ELBO gets -sum_f sum_l KL(N(mu_fl, v_fl) || N(0, tau_f)) (:meth:`NoiseOffset.penalty`). A folded-in
user's q(s_u) has the prior N(mean, var) of the users' q(s) (population: their means' mean; the
variance of their means plus their mean variance) or the model's N(0, tau_user).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .base import RatingParts, Rows, Table, Term, register_term

#: initial variational variance of every log-noise offset, and initial prior variance tau
INIT_OFFSET_VAR, INIT_PRIOR_VAR = 0.01, 0.1


def offset_kl(mean: Tensor, logvar: Tensor, prior_logvar: Tensor, prior_mean: Tensor | None = None) -> Tensor:
    """sum_l KL(N(mean_l, exp(logvar_l)) || N(prior_mean, exp(prior_logvar))) (prior_mean: 0 by default)."""
    d = mean if prior_mean is None else mean - prior_mean
    n = mean.numel()
    return 0.5 * ((d * d + torch.exp(logvar)).sum() * torch.exp(-prior_logvar) - n + n * prior_logvar - logvar.sum())


@register_term
class NoiseOffset(Term):
    name = "noise_offset"
    order = 30
    builtin = True
    gaussian_user_prior = False  # q(s_u) with a KL to its prior, below

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "NoiseOffset | None":
        return cls(n_levels) if config.noise == "heteroscedastic" else None

    def __init__(self, n_levels: tuple[int, ...], options: dict[str, Any] | None = None,
                 parameters: bool = True) -> None:
        super().__init__(n_levels, options, parameters)
        if parameters:  # log tau_f, learned
            self.prior_logvar = nn.Parameter(torch.full((len(self.n_levels),), math.log(INIT_PRIOR_VAR)))

    def tables(self) -> list[Table]:
        # one row per level: [mu, log v] of q(s)
        return [Table(f"offset_{f}", f, 2) for f in range(len(self.n_levels))]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        for f in range(len(self.n_levels)):
            row = rows[f"offset_{f}"].value
            parts.add_log_noise(row[..., 0], torch.exp(row[..., 1]))

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        for f in range(len(self.n_levels)):
            table = self.table(f"offset_{f}")
            table[:, 0] = 0.0
            table[:, 1] = math.log(INIT_OFFSET_VAR)
        self.prior_logvar.fill_(math.log(INIT_PRIOR_VAR))

    def penalty(self) -> Tensor:
        out = self.prior_logvar.new_zeros(())
        for f in range(len(self.n_levels)):
            table = self.table(f"offset_{f}")
            out = out - offset_kl(table[:, 0], table[:, 1], self.prior_logvar[f])
        return out

    # -- fitted -----------------------------------------------------------------------------------------
    def population(self, spec: Table, values: Tensor, laplace_var: Tensor | None) -> tuple[Tensor, Tensor]:
        """An unseen level's offset as the row [log of the average E[exp(s)], log 0]: its noise factor is the
        average over the learned levels (the mixture of their q(s))."""
        factor = torch.exp(values[:, 0] + 0.5 * torch.exp(values[:, 1])).mean()
        row = torch.stack([torch.log(factor), torch.full_like(factor, -math.inf)])
        return row, torch.zeros_like(row)

    def fitted_extras(self) -> dict[str, Tensor]:
        users = self.table("offset_0").detach().to(torch.float64)
        mu, var = users[:, 0], torch.exp(users[:, 1])
        return {"prior_logvar": self.prior_logvar.detach().to(torch.float64),
                # the users' q(s) as one Gaussian: fold-in's population prior
                "user_population": torch.stack([mu.mean(), mu.var(unbiased=False) + var.mean()])}

    def _user_prior(self, prior: str, fitted: Any) -> tuple[Tensor, Tensor]:
        """(mean, log variance) of the prior of a folded-in user's offset."""
        if prior == "population":
            pop = fitted.extras["user_population"]
            return pop[0], torch.log(pop[1])
        logvar = fitted.extras["prior_logvar"][0]
        return torch.zeros_like(logvar), logvar

    def user_log_prior(self, spec: Table, raw: Tensor, prior: str, fitted: Any) -> Tensor:
        mean, logvar = (t.to(raw) for t in self._user_prior(prior, fitted))
        return -offset_kl(raw[0], raw[1], logvar, mean)

    def user_start(self, spec: Table, prior: str, fitted: Any) -> Tensor:
        return torch.stack(self._user_prior(prior, fitted))

    def user_prior_precision(self, spec: Table, prior: str, fitted: Any) -> Tensor | None:
        return None  # q(s_u) is its own posterior: no Laplace variance
