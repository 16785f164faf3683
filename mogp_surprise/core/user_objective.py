"""The fold-in objective of one user and its Laplace posterior (:mod:`.foldin` has the formulas and the API).

:class:`FoldInContext` holds what every term needs to treat one user's rows as free parameters: the
layout of the parameter vector (every term's user tables, in term order), the fixed rows of the items,
and the priors. The objective is the part of the training ELBO that involves the user, built by the
same :meth:`~.terms.Term.combine` and :func:`~.objective.expected_log_lik_of_moments` as training and
prediction; the Gauss-Newton curvature is taken by autograd on per-rating copies of the parameters, as
:mod:`.laplace` does for trained users.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from .objective import gaussian_expected_log_lik, noise_moments, weighted_squared_residuals
from .posterior import MWGPPosterior
from .state import FittedTable, FittedTerm, PosteriorState
from .terms import PRIORS, RatingParts, Rows, Table
from .user_prior import OwnPrior, UserPrior

__all__ = ["FoldInContext", "UserData", "Block", "PRIORS", "context_for"]


@dataclass(frozen=True)
class Block:
    """One user table's entries in the fold-in parameter vector."""

    term: int  # position of the term in the posterior's terms
    spec: Table
    start: int
    width: int  # entries (1 for a 1-d table)

    @property
    def key(self) -> str:
        return f"{self.term_name}.{self.spec.name}"

    term_name: str = ""

    def of(self, theta: Tensor) -> Tensor:
        """This block of a parameter vector (d,) or of per-rating copies (n, d), shaped like the table's rows."""
        part = theta[..., self.start:self.start + self.width]
        return part if self.spec.width else part[..., 0]


@dataclass
class UserData:
    """The fixed, per-user part of the objective: the items' rows and the user's implicit sums."""

    n: int  # number of ratings
    y: Tensor  # (n,) standardised ratings
    item_rows: dict[tuple[int, str], Tensor]  # (term, table) -> (n, ...) rows of the rated items
    implicit: dict[str, Tensor]  # block key -> the user's implicit sum over the rated items (zeros without)
    item_kernel: Tensor | None = None  # (n, m): the items' factor of every kernel row, times the output scale
    prior_center: Tensor | None = None  # (d,): the mean of the Gaussian priors on the raw rows
    extra_variance: Tensor | None = None  # (n,): J Sigma J^T of every rating, held fixed (foldin's expected residuals)
    answers: tuple[Tensor, Tensor] | None = None  # the user's rated items and standardised ratings
    pair_rows: dict[int, dict[str, Rows]] | None = None  # term position -> its pair inputs of the n ratings
    #: term position -> (mean, its variance) that a mean-only term without user tables adds, the same at every theta
    fixed: dict[int, tuple[Tensor, Tensor | None]] | None = None
    own: OwnPrior | None = None  # an update of a known user: their posterior as fitted is the prior


class FoldInContext:
    """The fitted quantities fold-in uses, in float64 on the posterior's device."""

    def __init__(self, posterior: MWGPPosterior, prior: str = "population") -> None:
        if not isinstance(posterior, MWGPPosterior):
            raise ValueError(f"`posterior` must be an MWGPPosterior, got {type(posterior).__name__}")
        if posterior.n_factors != 2:
            raise ValueError(f"fold-in needs a (user, item) model; this one has {posterior.n_factors} factors "
                             "(context factors are not supported)")
        if prior not in PRIORS:
            raise ValueError(f"`prior` must be one of {PRIORS}, got {prior!r}")
        state = _light_state(posterior.state)
        incomplete = [t.name for t in state.terms if not t.complete or
                      any(s.feeds is not None and state_table_missing(t, s) for s in t.term.specs.values())]
        if incomplete:
            raise ValueError(f"this posterior lacks what fold-in needs for its terms {incomplete} (their priors, or "
                             "the items' implicit factors): it was saved before fold-in existed; refit the model to "
                             "fold in users")
        self.state, self.prior, self.posterior = state, prior, posterior
        self.device = posterior.device
        self.n_users, self.n_items = posterior.n_levels
        self.rating_mean, self.rating_std = posterior.rating_mean, posterior.rating_std
        self.model = posterior.state.gp.fingerprint()  # which model a folded-in user belongs to
        self.blocks: list[Block] = []
        start = 0
        for position, fitted in enumerate(state.terms):
            for spec in fitted.term.user_tables:
                width = max(spec.width, 1)
                self.blocks.append(Block(position, spec, start, width, fitted.name))
                start += width
        self.dim = start
        # a user row sets the noise of the user's ratings (fold-in's expected residuals)
        self.user_noise = any(state.terms[b.term].term.user_noise for b in self.blocks)
        self.priors = UserPrior(state, posterior.state, self.blocks, prior)
        gp = state.gp
        self.kernel, self.inducing, self.w, self.M = gp.kernel(), gp.inducing, gp.w, gp.M
        r = gp.input_width  # the users' block of the GP inputs and its scaled inducing inputs
        self.user_lengthscale = gp.lengthscale[:r]
        self.user_inducing = gp.inducing[:, :r] / self.user_lengthscale
        self._catalogue: UserData | None = None  # every item's rows, formed on first use (catalogue_data)

    @property
    def laplace_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.spec.laplace]

    # -- the data of one user ----------------------------------------------------------------------------
    def user_data(self, items: np.ndarray, y: np.ndarray, update: tuple | None = None) -> UserData:
        """The fixed part of the objective of a user with ratings ``y`` (standardised) of ``items``. ``update``:
        (user, rated items, their standardised ratings): the Bayesian update of a known user (:mod:`.user_prior`),
        whose posterior as fitted holds the rated ones and is the prior; those set the implicit sums and the pair
        inputs with ``items``, and add no terms of their own."""
        idx = torch.as_tensor(items, device=self.device)
        item_rows = {}
        for position, fitted in enumerate(self.state.terms):
            for spec in fitted.term.direct_tables:
                if spec.factor != 0:
                    item_rows[(position, spec.name)] = fitted.tables[spec.name].values[idx].to(torch.float64)
        y = torch.as_tensor(y, dtype=torch.float64, device=self.device)
        answers = (idx, y)
        if update is not None:
            both = np.intersect1d(items, update[1])
            if both.size:
                raise ValueError(f"items {both[:5].tolist()} are rated already: a changed rating replaces the old one, "
                                 "which the user's posterior holds; fold the user in again (init_user) instead")
            rated = torch.as_tensor(update[1], device=self.device)
            answers = (torch.cat([rated, idx]), torch.cat([torch.as_tensor(update[2]).to(y), y]))
        implicit = self._implicit(answers[0])
        data = UserData(int(items.size), y, item_rows, implicit)
        data.answers = answers
        data.pair_rows = self.pair_rows(idx, data.answers)
        data.fixed = self._fixed_parts(data)
        if update is None:
            data.prior_center = self.priors.center(implicit)
        else:
            data.own = self.priors.own(int(update[0]), self._implicit(rated), int(rated.numel()))
            data.prior_center = data.own.center
        # the items' half of every kernel row (with the output scale): fixed during fold-in
        x = self.parts(data, torch.zeros(self.dim, dtype=torch.float64, device=self.device)).inputs[1].value
        r = self.state.gp.input_width
        data.item_kernel = self.kernel.block(torch.arange(r, 2 * r, device=self.device)).cross(x, self.inducing[:, r:])
        return data

    def _implicit(self, items: Tensor) -> dict[str, Tensor]:
        """The user's implicit sum of every block over ``items`` (a repeated item counts once, as in training;
        zeros for a block without one)."""
        rated = torch.unique(items)
        implicit = {}
        for block in self.blocks:
            fitted = self.state.terms[block.term]
            feeder = next((s for s in fitted.term.specs.values() if s.feeds == block.spec.name), None)
            total = torch.zeros(block.width, dtype=torch.float64, device=self.device)
            if feeder is not None and rated.numel():
                total = fitted.tables[feeder.name].values[rated].to(torch.float64).sum(0) / math.sqrt(rated.numel())
            implicit[block.key] = total if block.spec.width else total[0]
        return implicit

    def pair_rows(self, items: Tensor, answers: tuple[Tensor, Tensor]) -> dict[int, dict[str, Rows]]:
        """The pair inputs of the user with ``items`` (:meth:`~.terms.Term.user_pair_rows`), from the answers."""
        return {position: fitted.term.user_pair_rows(items, answers, fitted.extras)
                for position, fitted in enumerate(self.state.terms) if fitted.term.reads_pairs}

    def _fixed_parts(self, data: UserData) -> dict[int, tuple[Tensor, Tensor | None]]:
        """What each mean-only term without user tables (the neighbourhood term) adds to the user's ratings: it
        does not depend on the user's parameters, so it is formed once, not at every evaluation (bit for bit the
        same: ``add_mean`` of the same values)."""
        fixed = {}
        for position, fitted in enumerate(self.state.terms):
            if fitted.term.mean_only and not fitted.term.user_tables:
                parts = RatingParts(mean=torch.zeros(data.n, dtype=torch.float64, device=self.device),
                                    log_noise_base=torch.log(self.state.noise_variance), inputs=[None, None])
                fitted.term.combine(self._term_rows(data, position, fitted, {}), parts)
                fixed[position] = (parts.mean, parts.mean_var)
        return fixed

    def _term_rows(self, data: UserData, position: int, fitted: FittedTerm, rows: dict[str, Rows]
                   ) -> dict[str, Rows]:
        """A term's rows of the user's ratings: the user's (``rows``), the items' and the pair inputs."""
        for spec in fitted.term.direct_tables:
            if spec.factor != 0:
                rows[spec.name] = Rows(data.item_rows[(position, spec.name)])
        if data.pair_rows:
            rows.update(data.pair_rows.get(position, {}))
        return rows

    # -- the objective --------------------------------------------------------------------------------------
    def parts(self, data: UserData, theta: Tensor) -> RatingParts:
        """Every term's parts for the user's ratings, the user's rows from ``theta`` ((d,), or per-rating copies
        (n, d))."""
        n = data.n
        state = self.state
        parts = RatingParts(mean=state.global_mean.expand(n), log_noise_base=torch.log(state.noise_variance),
                            inputs=[None, None])
        by_term: dict[int, dict[str, Rows]] = {}
        for block in self.blocks:  # (one row, broadcast over the ratings, or one copy per rating)
            by_term.setdefault(block.term, {})[block.spec.name] = Rows(block.of(theta) + data.implicit[block.key])
        for position, fitted in enumerate(state.terms):
            fixed = data.fixed.get(position) if data.fixed else None
            if fixed is not None:
                parts.add_mean(*fixed)
            else:
                fitted.term.combine(self._term_rows(data, position, fitted, by_term.get(position, {})), parts)
        return parts

    def f_moments(self, data: UserData, parts: RatingParts) -> tuple[Tensor, Tensor]:
        """E[f] and Var[f] at the (known) GP inputs of ``parts``: the kernel row of a rating is the product of
        the items' fixed half (``data.item_kernel``) and the user's half (one row for every rating, or one per
        rating when the parameters are per-rating copies)."""
        x = parts.inputs[0].value
        d = x.unsqueeze(-2) / self.user_lengthscale - self.user_inducing
        k = data.item_kernel * torch.exp(-0.5 * (d * d).sum(-1))
        return k @ self.w, self.kernel.outputscale + ((k @ self.M) * k).sum(-1)

    def _f_mean_and_gradient(self, data: UserData, x: Tensor) -> tuple[Tensor, Tensor]:
        """E[f] at every rating and its gradient in the user's GP input ``x`` (r,), one input for all ratings:
        with u_l = k_A(x, z_l) and c_l = u_l w_l, E[f_j] = sum_l K_jl c_l and d E[f_j] / dx = -sum_l K_jl c_l
        (x / ls - z_l / ls) / ls (K: ``data.item_kernel``), without the (n, m, r) differences of the per-rating
        form (:meth:`f_moments`)."""
        d = x / self.user_lengthscale - self.user_inducing  # (m, r)
        c = torch.exp(-0.5 * (d * d).sum(-1)) * self.w  # (m,)
        return data.item_kernel @ c, data.item_kernel @ (c.unsqueeze(-1) * d / -self.user_lengthscale)

    def log_prior(self, data: UserData, theta: Tensor) -> Tensor:
        """The log prior of the user's rows (:class:`~.user_prior.UserPrior`)."""
        return self.priors.log_prior(theta, data.prior_center, data.own)

    def _rating_terms(self, data: UserData, theta: Tensor) -> tuple[Tensor, Tensor]:
        """E_q[log sigma_j^2] and lambda_j E_q[(y_j - m_j)^2] of every rating at ``theta``
        (:func:`~.objective.weighted_squared_residuals`, the expected residuals' variances included)."""
        parts = self.parts(data, theta)
        f_mean, f_var = self.f_moments(data, parts)
        if data.extra_variance is not None:  # (in the ratings' units, like a mean function's variance)
            parts.mean_var = data.extra_variance if parts.mean_var is None else parts.mean_var + data.extra_variance
        return weighted_squared_residuals(parts, data.y, f_mean, f_var)

    def objective(self, data: UserData, theta: Tensor) -> Tensor:
        """The user's terms of the training ELBO at the raw rows ``theta`` (d,) (:mod:`.foldin`'s L)."""
        log_noise, weighted = self._rating_terms(data, theta)
        return gaussian_expected_log_lik(data.n, log_noise.sum(), weighted.sum()) + self.log_prior(data, theta)

    def log_noise_curvature(self, data: UserData, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The gradient (2,) and Hessian (2, 2) of -L in a shift (m, V) of every rating's log-noise mean and
        variance at ``theta`` (for :meth:`~.terms.Term.user_noise_hessian`): L's part in (m, V) is
        -1/2 sum_j (m + a_j exp(V / 2 - m)), a_j = lambda_j E_q[(y_j - m_j)^2] at ``theta``, so with A = sum_j a_j
        the gradient is (n / 2 - A / 2, A / 4) and the Hessian A [[1/2, -1/4], [-1/4, 1/8]]."""
        with torch.no_grad():
            a = self._rating_terms(data, theta)[1].sum()
        grad = torch.stack([0.5 * (data.n - a), 0.25 * a])
        hess = a * torch.tensor([[0.5, -0.25], [-0.25, 0.125]], dtype=a.dtype, device=a.device)
        return grad, hess

    # -- the start and the Laplace posterior -------------------------------------------------------------------
    def start(self, data: UserData, init: int | None) -> Tensor:
        """The raw rows to start from: the prior's mean, or a known user's fitted rows (``init``; an update's
        prior mean)."""
        if data.own is not None:
            return data.own.center.clone()
        theta = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        known = init is not None and not (self.state.cold_users is not None and bool(self.state.cold_users[init]))
        for block in self.blocks:
            fitted = self.state.terms[block.term]
            table = fitted.tables[block.spec.name]
            implicit = data.implicit[block.key]
            if known:
                value = table.values[init].to(torch.float64) - implicit
            else:
                value = fitted.term.user_start(block.spec, self.prior, fitted)
                if value is None:
                    value = table.population[0] - implicit if self.prior == "population" else torch.zeros_like(implicit)
            theta[block.start:block.start + block.width] = value.reshape(-1).to(theta)
        return theta

    def mean_jacobian(self, data: UserData, theta: Tensor) -> tuple[Tensor, Tensor]:
        """J (n, d_L): the gradient of every rating's predictive mean E[y_j] with respect to the user's Laplace
        entries (in layout order) at ``theta``, and lambda_j = E_q[1 / sigma_j^2] (n,): the Gauss-Newton
        ingredients of :meth:`laplace` (autograd on one copy of the parameters per rating)."""
        copies = theta.detach().expand(data.n, self.dim).clone().requires_grad_(True)
        with torch.enable_grad():
            parts = self.parts(data, copies)
            x = parts.inputs[0].value
            if x.shape[0] and torch.equal(x, x[:1].expand_as(x)):
                # one GP input for every rating (the copies are equal): E[f] and its gradient in x in closed form,
                # entered as the first-order surrogate f + g . (x - x0), whose gradient is g dx/dtheta
                f_mean, grad = self._f_mean_and_gradient(data, x[0].detach())
                f_mean = f_mean + (grad * (x - x.detach())).sum(-1)
            else:
                f_mean, _ = self.f_moments(data, parts)
            if parts.latent_log_scale is not None:
                f_mean = torch.exp(parts.latent_log_scale) * f_mean
            (jac,) = torch.autograd.grad((parts.mean + f_mean).sum(), copies)
        lam = noise_moments(parts)[1].detach()
        blocks = self.laplace_blocks
        if not blocks:
            return jac[:, :0], lam
        return torch.cat([jac[:, b.start:b.start + b.width] for b in blocks], dim=1), lam

    def catalogue_data(self, data: UserData) -> UserData:
        """The user of ``data`` with every item of the catalogue (ratings 0): the items' rows and kernel halves
        are formed once per context, the user's implicit sums and prior are those of ``data``."""
        if self._catalogue is None:
            self._catalogue = self.user_data(np.arange(self.n_items), np.zeros(self.n_items))
        pairs = None
        if data.answers is not None and any(t.term.reads_pairs for t in self.state.terms):
            pairs = self.pair_rows(torch.arange(self.n_items, device=self.device), data.answers)
        out = replace(self._catalogue, implicit=data.implicit, prior_center=data.prior_center, own=data.own,
                      answers=data.answers,
                      pair_rows=pairs)
        out.fixed = self._fixed_parts(out)  # (from these answers' pair inputs, not the template's)
        return out

    def laplace(self, data: UserData, theta: Tensor, with_jacobian: bool = False):
        """The Gauss-Newton posterior of the user's Laplace entries at ``theta``: the diagonal variances per
        block (as trained users get them) and the full covariance (d_L, d_L) of those entries, in layout order.

        Precision: the prior's (:meth:`~.user_prior.UserPrior.laplace_precision`) plus sum_j lambda_j J_j J_j^T with
        J_j = d E[y_j] / d theta; an entry under a flat prior gets variance 0 (no correction). ``with_jacobian``:
        also J (n, d_L) (None without ratings or Laplace entries).
        """
        blocks = self.laplace_blocks
        width = sum(b.width for b in blocks)
        prior, flat = self.priors.laplace_precision(blocks, data.own)
        gram = torch.zeros(width, width, dtype=torch.float64, device=self.device)
        jac = None
        if data.n and width:
            jac, lam = self.mean_jacobian(data, theta)
            gram = (jac * lam.unsqueeze(-1)).T @ jac
        diagonal = torch.where(flat, torch.zeros_like(prior), 1.0 / (prior + torch.diagonal(gram)))
        precision = gram + torch.diag(torch.where(flat, torch.ones_like(prior), prior))
        covariance = torch.linalg.inv(precision)
        covariance[flat] = 0.0
        covariance[:, flat] = 0.0
        out, offset = {}, 0
        for block in blocks:
            part = diagonal[offset:offset + block.width]
            out[block.key] = part if block.spec.width else part[0]
            offset += block.width
        if with_jacobian:
            return out, covariance, jac
        return out, covariance

    def with_expected_residuals(self, data: UserData, theta: Tensor, gauss_newton: tuple | None = None) -> UserData:
        """``data`` with the expected residuals' variances at ``theta`` (:meth:`residual_variance`), where a user
        row sets the noise and there are ratings; otherwise ``data`` itself (:mod:`.foldin`). ``gauss_newton``:
        :meth:`laplace` at ``theta`` with the Jacobian, if already formed."""
        if not (self.user_noise and data.n):
            return data
        return replace(data, extra_variance=self.residual_variance(data, theta, gauss_newton))

    def residual_variance(self, data: UserData, theta: Tensor, gauss_newton: tuple | None = None) -> Tensor:
        """Var[E[y_j]] = J_j Sigma J_j^T of every rating under the user's Laplace posterior at ``theta`` (n,): what
        the squared residual (y_j - m_j)^2 at the posterior mean misses of its expectation (:mod:`.foldin`).
        ``gauss_newton``: :meth:`laplace` at ``theta`` with the Jacobian, if already formed."""
        if gauss_newton is None:
            gauss_newton = self.laplace(data, theta, with_jacobian=True)
        _, covariance, jac = gauss_newton
        if jac is None:
            return torch.zeros(data.n, dtype=torch.float64, device=self.device)
        return ((jac @ covariance) * jac).sum(-1)


def context_for(posterior: MWGPPosterior, prior: str = "population") -> FoldInContext:
    """The :class:`FoldInContext` of a posterior, built once per posterior and prior (a posterior is
    immutable; the context holds float64 copies of the small fitted parts and, once used, the catalogue's
    item rows)."""
    if not isinstance(posterior, MWGPPosterior):
        return FoldInContext(posterior, prior)  # (raises, naming the type)
    cache = posterior.__dict__.setdefault("_foldin_contexts", {})
    if prior not in cache:
        cache[prior] = FoldInContext(posterior, prior)
    return cache[prior]


def _light_state(state: PosteriorState) -> PosteriorState:
    """What fold-in reads of a posterior's state, in float64 where it is small (the GP, the populations and
    extras); the tables stay as they are (fold-in converts the rows it gathers)."""
    def f64(t: Tensor) -> Tensor:
        return t.to(torch.float64) if t.is_floating_point() else t
    terms = [FittedTerm(t.term, {name: FittedTable(table.values, None, None if table.population is None else
                                                   (f64(table.population[0]), f64(table.population[1])))
                                 for name, table in t.tables.items()}, {k: f64(v) for k, v in t.extras.items()})
             for t in state.terms]
    gp = state.gp
    return replace(state, global_mean=f64(state.global_mean), noise_variance=f64(state.noise_variance),
                   gp=replace(gp, inducing=f64(gp.inducing), lengthscale=f64(gp.lengthscale),
                              outputscale=f64(gp.outputscale), w=f64(gp.w), M=f64(gp.M)), terms=terms)


def state_table_missing(fitted, spec: Table) -> bool:
    """Whether an implicit-feedback table that feeds the users' rows is missing from a fitted term."""
    return fitted.term.specs[spec.feeds].factor == 0 and spec.name not in fitted.tables
