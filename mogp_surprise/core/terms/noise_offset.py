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

On the row-sparse path (large catalogues) the KL is not formed over every level each step: a row gets
the KL's gradient for every step since it last moved when it is next touched (:class:`LazyOffsetKL`: exact
for the value the row kept, with tau_s of every step in between), and tau_f's gradient comes from
sum_l (mu^2 + v) and sum_l log v, kept up to date as rows move (the KL's value is exact too).
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
    own_user_prior = True  # a known user's q(s_u) as fitted is the prior of their update
    user_noise = True  # fold-in fits q(s_u) to the expected squared residuals

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "NoiseOffset | None":
        return cls(n_levels) if config.noise == "heteroscedastic" else None

    def __init__(self, n_levels: tuple[int, ...], options: dict[str, Any] | None = None,
                 parameters: bool = True) -> None:
        super().__init__(n_levels, options, parameters)
        if parameters:  # log tau_f, learned
            self.prior_logvar = nn.Parameter(torch.full((len(self.n_levels),), math.log(INIT_PRIOR_VAR)))
        self.lazy: list[LazyOffsetKL] | None = None  # the row-sparse path's lazy KL, one per factor

    def tables(self) -> list[Table]:
        # one row per level: [mu, log v] of q(s)
        return [Table(f"offset_{f}", f, 2) for f in range(len(self.n_levels))]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        for f in range(len(self.n_levels)):
            row = rows[f"offset_{f}"].value
            parts.add_log_noise(row[..., 0], parts.xp.exp(row[..., 1]))

    def pair_combine(self, index: tuple[int, ...], tables: dict, extras: Any, parts: Any) -> bool:
        for f in range(len(self.n_levels)):
            row = tables[f"offset_{f}"][0][index[f]]
            parts.add_log_noise(row.item(0), math.exp(row.item(1)))
        return True

    @torch.no_grad()
    def initialise(self, init: Any) -> None:
        for f in range(len(self.n_levels)):
            table = self.table(f"offset_{f}")
            table[:, 0] = 0.0
            table[:, 1] = math.log(INIT_OFFSET_VAR)
        self.prior_logvar.fill_(math.log(INIT_PRIOR_VAR))

    @torch.no_grad()
    def shrink_log_noise(self, factor: float) -> None:
        """s -> factor s for every level: q(s)'s mean times ``factor``, its variance and the prior's tau times its
        square."""
        for f in range(len(self.n_levels)):
            table = self.table(f"offset_{f}")
            table[:, 0] *= factor
            table[:, 1] += 2.0 * math.log(factor)
        self.prior_logvar += 2.0 * math.log(factor)

    def penalty(self) -> Tensor:
        out = self.prior_logvar.new_zeros(())
        for f in range(len(self.n_levels)):
            if self.lazy is not None:  # row-sparse: the rows' terms come lazily; tau's from the running sums
                square, log_var = self.lazy[f].sums.to(self.prior_logvar)
                n, tau_log = self.n_levels[f], self.prior_logvar[f]
                out = out - 0.5 * (square * torch.exp(-tau_log) - n + n * tau_log - log_var)
                continue
            table = self.table(f"offset_{f}")
            out = out - offset_kl(table[:, 0], table[:, 1], self.prior_logvar[f])
        return out

    def row_update(self, spec: Table, n_data: int, total_steps: int) -> "LazyOffsetKL":
        """The row-sparse update of an offset table: Adam with its KL added lazily (from now on, the penalty
        uses the running sums this keeps)."""
        if self.lazy is None:
            self.lazy = [LazyOffsetKL(self, f, n_data, total_steps) for f in range(len(self.n_levels))]
        return self.lazy[spec.factor]

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

    def _user_prior(self, prior: "str | Tensor", fitted: Any) -> tuple[Tensor, Tensor]:
        """(mean, log variance) of the prior of a folded-in user's offset (``prior`` a row: the user's q as fitted)."""
        if isinstance(prior, Tensor):
            return prior[0], prior[1]
        if prior == "population":
            pop = fitted.extras["user_population"]
            return pop[0], torch.log(pop[1])
        logvar = fitted.extras["prior_logvar"][0]
        return torch.zeros_like(logvar), logvar

    def user_log_prior(self, spec: Table, raw: Tensor, prior: str, fitted: Any) -> Tensor:
        mean, logvar = (t.to(raw) for t in self._user_prior(prior, fitted))
        return -offset_kl(raw[0], raw[1], logvar, mean)

    def user_noise_hessian(self, spec: Table, raw: Tensor, log_noise: tuple[Tensor, Tensor], prior: str,
                           fitted: Any) -> Tensor:
        """In [mu, rho = log v]: the row shifts the log-noise by (m, V) = (mu, e^rho), so the data's part is
        J^T H J + diag(0, g_V v) with J = diag(1, v); the KL to N(m_s, tau) adds diag(1 / tau, v / (2 tau))."""
        grad, hess = log_noise
        v = torch.exp(raw[1])
        scale = torch.stack([torch.ones_like(v), v])
        out = hess * scale.unsqueeze(0) * scale.unsqueeze(1)
        tau_inv = torch.exp(-self._user_prior(prior, fitted)[1].to(raw))
        return out + torch.diag(torch.stack([tau_inv, grad[1] * v + 0.5 * v * tau_inv]))

    def user_start(self, spec: Table, prior: str, fitted: Any) -> Tensor:
        return torch.stack(self._user_prior(prior, fitted))

    def user_prior_precision(self, spec: Table, prior: str, fitted: Any) -> Tensor | None:
        return None  # q(s_u) is its own posterior: no Laplace variance


class LazyOffsetKL:
    """The row-sparse update of one factor's offset table (module docstring): lazy Adam whose rows get the KL's
    gradient for every step since they last moved, and the running sums tau's gradient needs.

    A row [mu, log v] last moved at step t0 gets, at step t, mu (C_t - C_t0) and (v (C_t - C_t0) - (t - t0) / N) / 2
    added to its gradient, C_t = sum_{s <= t} 1 / (tau_s N) (``cumulative``, extended each step with the tau
    the step's forward pass used: this update runs before Adam moves tau). ``sums`` = [sum_l (mu^2 + v),
    sum_l log v] in float64, updated by the change of every row it moves.
    """

    def __init__(self, term: NoiseOffset, factor: int, n_data: int, total_steps: int) -> None:
        self.term, self.factor, self.inv_n = term, factor, 1.0 / n_data
        table = term.table(f"offset_{factor}").detach().double()
        self.sums = torch.stack([(table[:, 0] ** 2 + torch.exp(table[:, 1])).sum(), table[:, 1].sum()])
        # on the table's device: the torch path below indexes it with the rows' last steps (a CUDA tensor on a GPU)
        self.cumulative = torch.zeros(total_steps + 2, dtype=torch.float64, device=table.device)

    def state_dict(self) -> dict:
        return {"sums": self.sums.clone(), "cumulative": self.cumulative.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.sums.copy_(state["sums"])
        self.cumulative = state["cumulative"].to(self.sums.device, copy=True)

    @torch.no_grad()
    def update(self, param: Tensor, packed_rows: Tensor, rows: Tensor, grad: Tensor, t: int, betas, eps: float,
               step_size: float, kernel) -> None:
        """Lazy Adam on ``param[rows]`` (``packed_rows``: RowAdam's per-row state [m, v, last step])."""
        if t >= self.cumulative.shape[0]:  # more steps than planned (e.g. a resumed run): grow
            self.cumulative = torch.cat([self.cumulative, torch.zeros_like(self.cumulative)])
        tau_inv = float(torch.exp(-self.term.prior_logvar[self.factor].detach().double()))
        self.cumulative[t] = self.cumulative[t - 1] + tau_inv * self.inv_n
        beta1, beta2 = betas
        if kernel is not None and param.device.type == "cpu":
            square, log_var = kernel(param.detach().numpy(), packed_rows.numpy(), rows.numpy(),
                                     grad.contiguous().numpy(), t, self.cumulative.numpy(), self.inv_n, beta1,
                                     beta2, eps, step_size, torch.get_num_threads())
            self.sums += torch.tensor([square, log_var], dtype=torch.float64)
            return
        values = param.index_select(0, rows)
        packed = packed_rows.index_select(0, rows)
        m, v, last = packed[:, :2], packed[:, 2:4], packed[:, 4]
        drift = (self.cumulative[t] - self.cumulative[last.long()]).to(values)
        catch_up = torch.stack([values[:, 0] * drift, 0.5 * (torch.exp(values[:, 1]) * drift
                                                             - (t - last) * self.inv_n)], dim=1)
        g = grad + catch_up
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        last.fill_(t)
        packed_rows.index_copy_(0, rows, packed)
        new = values - step_size * m / (v.sqrt() + eps)
        param.index_copy_(0, rows, new)
        old64, new64 = values.double(), new.double()
        self.sums += torch.stack([(new64[:, 0] ** 2 + torch.exp(new64[:, 1]) - old64[:, 0] ** 2
                                   - torch.exp(old64[:, 1])).sum(), (new64[:, 1] - old64[:, 1]).sum()])
