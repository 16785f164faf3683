"""The prior of a folded-in user's rows (:mod:`.foldin`): the learned users' population, the model's own priors, or
a known user's own posterior as fitted, for an update by new ratings.

For ``"population"`` and ``"model"`` each user table's row has a Gaussian prior
(:meth:`~.terms.Term.user_prior_precision`, its mean the population's, less the user's implicit sum, or 0), and a
term without one gives its log prior itself (:meth:`~.terms.Term.user_log_prior`, e.g. the noise offset's KL).

**An update** (:class:`OwnPrior`). A known user's posterior after training is approximated by their fitted rows
and the diagonal Laplace (or variational) variances the posterior keeps: N(raw row, var) per entry of every
Laplace table, and for a term with its own prior (the noise offset) the user's fitted row itself, whose q is the
prior (``own_user_prior``). New ratings then add only their own terms: folding in no new rating leaves the user
as fitted, and the ratings the posterior holds are not counted twice. The raw rows are those of the fitted
(effective) rows less the implicit sums over the items the posterior holds; the new items add to those sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["OwnPrior", "UserPrior"]


@dataclass
class OwnPrior:
    """A known user's posterior as fitted, the prior of an update by new ratings."""

    user: int
    center: Tensor  # (d,): the raw rows as fitted (implicit sums over the rated items taken off)
    precision: Tensor  # (d,): 1 / the rows' variances for the Gaussian blocks (0 where a row has none: flat)
    rows: dict[str, Tensor]  # block key -> the fitted raw row, the prior of a term without a Gaussian one
    n_ratings: int  # ratings the posterior holds


class UserPrior:
    """The prior of a folded-in user's parameter vector (blocks of :class:`~.user_objective.Block`)."""

    def __init__(self, state, fitted_state, blocks: list, prior: str) -> None:
        # state: fold-in's light float64 state; fitted_state: the posterior's own (with the Laplace variances)
        self.state, self.fitted_state, self.blocks, self.prior = state, fitted_state, blocks, prior
        self.dim = sum(b.width for b in blocks)
        self.device = state.global_mean.device
        # the Gaussian priors as one vector over the layout (precision 0: flat); the other terms' own
        self.precision = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        self.custom = []
        for block in blocks:
            fitted = state.terms[block.term]
            if not fitted.term.gaussian_user_prior:
                self.custom.append(block)
                continue
            precision = fitted.term.user_prior_precision(block.spec, prior, fitted)
            if precision is not None:
                self.precision[block.start:block.start + block.width] = precision.reshape(-1).to(self.precision)

    def center(self, implicit: dict[str, Tensor]) -> Tensor:
        """The mean of the Gaussian priors on the raw rows: the population's less the implicit sums, or 0."""
        out = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        if self.prior == "population":
            for block in self.blocks:
                table = self.state.terms[block.term].tables[block.spec.name]
                if table.population is not None and block not in self.custom:
                    out[block.start:block.start + block.width] = (table.population[0] - implicit[block.key]).reshape(-1)
        return out

    # -- a known user's own posterior ---------------------------------------------------------------------
    def updatable(self, user: int) -> bool:
        """Whether ``user`` (a trained or stored row) has a posterior to update: the fitted posterior keeps the
        variances of every Gaussian block's rows (``embedding_uncertainty``), every other term can take the
        user's row as its prior, and the row is not the cold-start user's."""
        cold = self.fitted_state.cold_users
        if cold is not None and bool(cold[user]):
            return False
        for block in self.blocks:
            fitted = self.fitted_state.terms[block.term]
            if block in self.custom:
                if not fitted.term.own_user_prior:
                    return False
            elif fitted.tables[block.spec.name].laplace_var is None:
                return False
        return True

    def own(self, user: int, implicit: dict[str, Tensor], n_ratings: int) -> OwnPrior:
        """The posterior of ``user`` as fitted; ``implicit``: the user's implicit sums over the items that
        posterior holds. ``ValueError`` unless :meth:`updatable`."""
        if not self.updatable(user):
            raise ValueError(f"user {user} has no posterior to update (a cold-start row, or a posterior without the "
                             "Laplace variances of its users: embedding_uncertainty=False); fold them in again instead")
        center = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        precision = torch.zeros_like(center)
        rows = {}
        for block in self.blocks:
            table = self.fitted_state.terms[block.term].tables[block.spec.name]
            where = slice(block.start, block.start + block.width)
            raw = table.values[user].to(center) - implicit[block.key]
            center[where] = raw.reshape(-1)
            if block in self.custom:
                rows[block.key] = raw
            else:
                var = table.laplace_var[user].to(center).reshape(-1)
                precision[where] = torch.where(var > 0, 1.0 / var.clamp_min(1e-300), torch.zeros_like(var))
        return OwnPrior(int(user), center, precision, rows, int(n_ratings))

    # -- what the objective and the Laplace posterior read --------------------------------------------------
    def of_term(self, block, own: OwnPrior | None):
        """The ``prior`` argument of a term without a Gaussian prior: the name, or the user's fitted row."""
        return self.prior if own is None else own.rows[block.key]

    def log_prior(self, theta: Tensor, center: Tensor, own: OwnPrior | None) -> Tensor:
        """The log prior of the user's raw rows ``theta`` (up to a constant): the Gaussian ones at once, then the
        terms' own."""
        d = theta - center
        out = -0.5 * ((self.precision if own is None else own.precision) * d * d).sum()
        for block in self.custom:
            fitted = self.state.terms[block.term]
            out = out + fitted.term.user_log_prior(block.spec, block.of(theta), self.of_term(block, own), fitted)
        return out

    def laplace_precision(self, blocks: list, own: OwnPrior | None) -> tuple[Tensor, Tensor]:
        """The prior precision of the Laplace entries of ``blocks`` (in their order) and which are flat."""
        width = sum(b.width for b in blocks)
        prior = torch.zeros(width, dtype=torch.float64, device=self.device)
        flat = torch.zeros(width, dtype=torch.bool, device=self.device)
        offset = 0
        for block in blocks:
            where = slice(offset, offset + block.width)
            if own is not None:
                prior[where] = own.precision[block.start:block.start + block.width]
                flat[where] = prior[where] == 0
            else:
                fitted = self.state.terms[block.term]
                precision = fitted.term.user_prior_precision(block.spec, self.prior, fitted)
                if precision is None:
                    flat[where] = True
                else:
                    prior[where] = precision.reshape(-1).to(prior)
            offset += block.width
        return prior, flat
