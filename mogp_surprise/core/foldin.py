"""Fold-in: infer one user's own parameters from their ratings, everything else held fixed.

Given a fitted :class:`~mogp_surprise.core.posterior.MWGPPosterior` and the (item, rating) pairs of
one user (new, or a known user with extra ratings), :func:`fold_in` maximises the training ELBO over
that user's own parameters only -- the user's row of every term's user tables (:mod:`.terms`), for the
built-in terms: their embedding a_u (r dims), bias b_u (if the model has biases),
bilinear factor p_u (k dims, if ``mf_rank`` > 0) and the variational posterior q(s_u) = N(mu, v) of
their log-noise offset (if heteroscedastic). The global GP (inducing points, q(v) through w and M,
kernel hyper-parameters, noise sigma^2), the items (GP inputs x_j, biases b_j, q(t_j)) and every
prior stay as fitted.

The objective is the part of the training ELBO that involves the user (standardised ratings
y_j = (r_j - rating_mean) / rating_std, each rating counted once), with the user's priors::

    L(a_u, b_u, p_u, mu, v) = sum_{j in J} E_q[log N(y_j | c + b_u + b_j + p_u . q_j + f(x_u, x_j),
                                                     sigma^2 exp(s_u + t_j))]
                              - KL(N(mu, v) || N(m_s, tau_0))
                              + log N(x_u | m_x, v_x) + log N(b_u | m_b, v_b) + log N(p_u | m_p, v_p)

``prior="population"`` (the default): the priors are the population of the learned users, the
distributions the cold-start user (index -1) is integrated over: N(emb_mean, emb_var) for the
GP input, N(bias_mean, bias_var) for the bias, N(mf_mean, mf_var) for the bilinear factor and, for
the log-noise offset, the Gaussian that matches the users' q(s) (their mean; the variance of their
means plus their mean variance). Then 0 ratings give the cold-start answer and every rating narrows
it. ``prior="model"``: the model's own priors, N(0, 1 / embedding_reg) on the embedding a_u,
N(0, 1 / mf_reg) on p_u, N(0, 1 / bias_reg), N(0, tau_0) -- the training ELBO exactly (its gradient
is checked against :func:`~mogp_surprise.core.objective.elbo` in ``tests/core/test_foldin.py``). With
few ratings they predict worse, being wider than the learned users' spread (ML-1M, 5 ratings: RMSE
0.970 vs 0.938).

with the closed forms of :mod:`mogp_surprise.core.objective` (the item's q(t_j) = N(mu_t_j, v_t_j)
and the user's q(s_u) = N(mu, v) give E_q[log sigma_j^2] = log sigma^2 + mu + mu_t_j and lambda_j =
exp((v + v_t_j) / 2 - E_q[log sigma_j^2])); the code is in :mod:`mogp_surprise.core.user_objective`.

**Expected residuals** (``expected_residuals=True``, the default). L rates the user's rows at a point: each
rating's squared residual (y_j - m_j)^2 is taken at the fitted rows. With k ratings and about 27 parameters,
the fit absorbs part of the noise (the residuals of the ratings it saw are smaller than a new rating's), and
the noise offset fitted to them is too small: on ML-1M after 20 answers by a fifth, and the 90 % intervals
covered 0.88 of the user's other ratings. So the squared residual is taken in expectation under the user's
Gauss-Newton posterior N(theta, Sigma): (y_j - m_j)^2 + J_j Sigma J_j^T (the delta method; J_j = d E[y_j] /
d theta, Sigma the covariance :meth:`~.user_objective.FoldInContext.laplace` gives), a variational step for
the noise. The J_j Sigma J_j^T are those at the start (the prior's mean, or a known user's fitted rows) and
held fixed during the fit: one Gauss-Newton pass instead of refits, and L, with them, is what L-BFGS
maximises (``fold_in_objective``). On ML-1M with 10 ratings the offset's mean comes out -0.028 against
-0.031 at the fixed point of three refits from the optimum, and -0.168 without; only the rows that set the
noise (a term's ``user_noise``) see the term (it is -1/2 sum_j lambda_j J_j Sigma J_j^T), so a homoscedastic
model is unchanged. ``expected_residuals=False``: the training ELBO above, exactly.

The user's GP input is x_u = a_u, or with implicit feedback
``x_u = a_u + |J|^(-1/2) sum_{j in J} y_j`` (y_j the items' implicit factors, J the items folded in),
and likewise their bilinear factor ``p~_u = p_u + |J|^(-1/2) sum_{j in J} y'_j``; the population
prior is on x_u and p~_u, the model's on a_u and p_u. Homoscedastic models have no q(s_u)
(lambda_j = 1 / sigma^2), models without biases no b_u.

L is maximised in float64 by L-BFGS (strong Wolfe line search), from the prior's mean or from a
known user's fitted values (``init_user``); for a user with few ratings (``WHITEN_MAX_RATINGS``) in
coordinates whitened by the curvature of -L at the start (:func:`_whitening`), where it needs about half
the steps. At the optimum the user gets the diagonal
Gauss-Newton (Laplace) variances that :func:`~mogp_surprise.core.laplace.laplace_variances` gives
trained users (and, for choosing what to ask a user, the full Gauss-Newton covariance of those entries) (with
the model's priors, 1 / v_x = embedding_reg, 1 / v_b = bias_reg, 1 / v_p = mf_reg)::

    Var[x_u,d] = 1 / (1 / v_x,d + sum_j lambda_j (d E_q[f_j] / d x_u,d)^2)
    Var[b_u]   = 1 / (1 / v_b + sum_j lambda_j)
    Var[p_u,d] = 1 / (1 / v_p,d + sum_j lambda_j q_j,d^2)

(0, i.e. no correction, where the prior precision is 0, as there). They enter the predictive
variance of :meth:`~mogp_surprise.core.posterior.MWGPPosterior.with_extra_users` by the delta
method, like those of the trained users, scaled by the cold-start calibration factor of an unseen
user (:mod:`~mogp_surprise.core.calibration`: the population prior fold-in starts from is the one
whose latent variance that factor scales).

Caveats. The items' inputs are not updated: with implicit feedback an item's input holds the
normalised sum of its raters' item-side implicit factors, and the folded user adds none (every
item stays as fitted). A user with 0 ratings is not optimised: :class:`FoldedUser` then has
``n_ratings == 0`` (and the prior's values) and is predicted exactly as the cold-start user,
index -1. Folding a trained user in again from their own training ratings moves their
predictions (a few Adam epochs leave the trained users short of the optimum of their part of the
objective, and training learnt the items with them): a known user's new ratings update their
posterior as fitted instead (:mod:`.update`).
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from .errors import NumericalError, check_finite_ratings, check_int
from .lbfgs import minimize
from .posterior import MWGPPosterior
from .state import FoldedUser
from .user_objective import PRIORS, FoldInContext, UserData, context_for

__all__ = ["FoldedUser", "fold_in", "fold_in_many", "fold_in_objective", "PRIORS"]

#: fold-in's default gradient tolerance (see ``tol`` of :func:`fold_in`): in whitened coordinates about a hundredth of
#: a posterior standard deviation from the optimum. ML-1M's default model, 10 ratings, against 1e-4: 5.9 instead of
#: 8.8 L-BFGS iterations, 11.3 instead of 14.5 ms; over 40 users' whole catalogues the predictive means move by at
#: most 0.0064 (rating units), the variances by at most 0.33 %
TOL = 1e-2


def fold_in(posterior: MWGPPosterior, items: np.ndarray, ratings: np.ndarray, init_user: int | None = None,
            max_iter: int = 100, tol: float = TOL, prior: str = "population", repeats: bool = False,
            expected_residuals: bool = True) -> FoldedUser:
    """Infer one user's rows of every term (embedding, bias, bilinear factor, noise offset) from their ratings
    (see the module docstring).

    Parameters
    ----------
    posterior : MWGPPosterior
        A fitted (user, item) model built by ``fit_mwgp``.
    items : int ndarray of shape (k,)
        Inner item indices in ``[0, n_items)``, no repeats; k may be 0.
    ratings : float ndarray of shape (k,)
        The user's ratings, on the original rating scale.
    init_user : int, optional
        Start from this known user's fitted values (e.g. the same user with extra ratings)
        instead of the prior mean.
    max_iter : int, default=100
        Maximum number of L-BFGS iterations.
    tol : float, default=1e-2
        Stop when every gradient entry is below ``tol`` in absolute value: the gradient in the coordinates the
        optimiser works in, whitened by the objective's curvature at the start for users with up to
        ``WHITEN_MAX_RATINGS`` ratings (there an entry is about the distance to the optimum along one
        direction, in units of the posterior standard deviation); for more ratings, of the raw parameters.
    prior : {"population", "model"}, default="population"
        The user's prior: the learned users' population or the model's own priors (module docstring).
    repeats : bool, default=False
        Accept an item more than once (each rating its own term, as training data with repeated
        (user, item) pairs are treated); by default a repeat is an error.
    expected_residuals : bool, default=True
        Fit the user's noise to the expected squared residuals under the user's posterior (module docstring):
        each rating's (y_j - m_j)^2 gains the variance of its mean, J_j Sigma J_j^T, from the Gauss-Newton
        posterior at the start. False: the plug-in residuals, i.e. the training ELBO exactly (a user with
        few ratings then gets too small a noise: ML-1M, 20 ratings, a fifth too small).

    Returns
    -------
    FoldedUser
        Pass it to :meth:`MWGPPosterior.with_extra_users` to predict and rank for it.

    Raises
    ------
    ValueError
        Bad items or ratings, a model with context factors, or a posterior without what fold-in
        needs (saved before fold-in existed).
    NumericalError
        The optimisation produced non-finite values.
    """
    return fold_in_many(posterior, [(items, ratings)], None if init_user is None else [init_user],
                        max_iter=max_iter, tol=tol, prior=prior, repeats=repeats,
                        expected_residuals=expected_residuals)[0]


def fold_in_many(posterior: MWGPPosterior, users: Sequence[tuple[np.ndarray, np.ndarray]],
                 init_users: Sequence[int | None] | None = None, max_iter: int = 100,
                 tol: float = TOL, prior: str = "population", repeats: bool = False,
                 expected_residuals: bool = True) -> list[FoldedUser]:
    """:func:`fold_in` for several users: the fixed quantities are prepared once.

    Parameters
    ----------
    users : sequence of (items, ratings) pairs
        One pair of arrays per user, as in :func:`fold_in`.
    init_users : sequence of (int or None), optional
        One entry per user, as ``init_user`` of :func:`fold_in`.

    Returns
    -------
    list of FoldedUser, in the order of ``users``.
    """
    check_int("max_iter", max_iter, 1)
    tol = _check_tol(tol)
    ctx = context_for(posterior, prior)
    users = list(users)
    init_users = [None] * len(users) if init_users is None else list(init_users)
    if len(init_users) != len(users):
        raise ValueError(f"`init_users` must hold one entry per user ({len(users)}), got {len(init_users)}")
    checked = []
    for n, (pair, init) in enumerate(zip(users, init_users)):
        where = f"user {n}: " if len(users) > 1 else ""
        try:
            items, ratings = pair
        except (TypeError, ValueError):
            raise ValueError(f"{where}expected an (items, ratings) pair, got {type(pair).__name__}") from None
        checked.append((*_check_ratings(ctx, items, ratings, where, repeats), _check_init(ctx, init, where)))
    return [_fold(ctx, items, y, init, max_iter, tol, expected_residuals) for items, y, init in checked]


def fold_in_objective(posterior: MWGPPosterior, items: np.ndarray, ratings: np.ndarray,
                      rows: dict[str, Tensor | float] | None = None, prior: str = "population",
                      expected_residuals: bool = True) -> Tensor:
    """The fold-in objective at given raw user rows (float64, differentiable w.r.t. tensor values).

    ``rows`` maps ``"term.table"`` (e.g. ``"gp_input.embedding_0"``, ``"bias.bias_0"``,
    ``"bilinear.factor_0"``, ``"noise_offset.offset_0"``: [mean, log variance]) to the user's raw row
    (implicit sums excluded); a row not given is that of :func:`fold_in`'s start. Maximising it over
    the rows is what :func:`fold_in` does (without ``init_user``; ``expected_residuals`` as there).
    """
    ctx = context_for(posterior, prior)
    items, y = _check_ratings(ctx, items, ratings, "")
    data = ctx.user_data(items, y)
    theta = ctx.start(data, None)
    given = dict(rows or {})
    unknown = sorted(set(given) - {b.key for b in ctx.blocks})
    if unknown:
        raise ValueError(f"`rows` names {unknown}, which this model does not have (its user rows: "
                         f"{[b.key for b in ctx.blocks]})")
    if expected_residuals:
        data = ctx.with_expected_residuals(data, theta)
    parts = []
    for block in ctx.blocks:
        value = given.get(block.key, theta[block.start:block.start + block.width])
        value = torch.as_tensor(value, dtype=torch.float64, device=ctx.device).reshape(-1)
        if value.numel() != block.width:
            raise ValueError(f"`rows[{block.key!r}]` must have {block.width} entries, got {value.numel()}")
        parts.append(value)
    return ctx.objective(data, torch.cat(parts) if parts else theta)


# -- validation and optimisation ----------------------------------------------------------------------
def _check_ratings(ctx: FoldInContext, items, ratings, where: str,
                   repeats: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validated item indices (int64) and standardised ratings (float64)."""
    items, ratings = np.asarray(items), np.asarray(ratings)
    if items.ndim != 1:
        raise ValueError(f"{where}`items` must be a 1-d array of item indices, got shape {items.shape}")
    if ratings.ndim != 1:
        raise ValueError(f"{where}`ratings` must be a 1-d array, got shape {ratings.shape}")
    if items.shape[0] != ratings.shape[0]:
        raise ValueError(f"{where}`items` and `ratings` must have the same length, got {items.shape[0]} and "
                         f"{ratings.shape[0]}")
    if items.size and not np.issubdtype(items.dtype, np.integer):
        raise ValueError(f"{where}`items` must hold integer item indices, got dtype {items.dtype}")
    if ratings.size and (not np.issubdtype(ratings.dtype, np.number)
                         or np.issubdtype(ratings.dtype, np.complexfloating)):
        raise ValueError(f"{where}`ratings` must be real numbers, got dtype {ratings.dtype}")
    if items.size and (items.min() < 0 or items.max() >= ctx.n_items):
        raise ValueError(f"{where}item indices must lie in [0, {ctx.n_items}), got range "
                         f"[{items.min()}, {items.max()}]")
    ratings = ratings.astype(np.float64)
    check_finite_ratings(ratings, where, at="position")
    uniq, counts = np.unique(items, return_counts=True)
    if uniq.size != items.size and not repeats:
        raise ValueError(f"{where}`items` repeats item(s) {uniq[counts > 1][:5].tolist()}; give each item once")
    return items.astype(np.int64), (ratings - ctx.rating_mean) / ctx.rating_std


def _check_tol(tol) -> float:
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not tol > 0 or not math.isfinite(tol):
        raise ValueError(f"`tol` must be a finite number > 0, got {tol!r}")
    return float(tol)


def _check_init(ctx: FoldInContext, init, where: str) -> int | None:
    if init is None:
        return None
    if isinstance(init, bool) or not isinstance(init, numbers.Integral) or not 0 <= init < ctx.n_users:
        raise ValueError(f"{where}`init_user` must be None or a user index in [0, {ctx.n_users}), got {init!r}")
    return int(init)


#: up to this many ratings fold-in works in coordinates whitened by the objective's Hessian at the start
WHITEN_MAX_RATINGS = 64


def _whitening(ctx: FoldInContext, data: UserData, start: Tensor, covariance: Tensor) -> Tensor | None:
    """P with theta = start + P z, such that P^T H P is about the identity for the Hessian H of the negative objective
    at the start, or None: above ``WHITEN_MAX_RATINGS`` ratings, or where that curvature is not finite.

    H is taken in two parts, each whitened by V diag(e)^(-1/2) from its eigenvalues e (floored at 1e-3 of the
    largest of both): the Laplace entries under a proper prior by their Gauss-Newton precision, whose inverse
    ``covariance`` (:meth:`~.user_objective.FoldInContext.laplace` at the start, in the order of the Laplace
    entries) the expected residuals have formed already; the other entries by the objective's Hessian in their
    coordinates: a noise row's in closed form where its term gives it (:meth:`~.terms.Term.user_noise_hessian`,
    the noise offset's mean and log variance), the rest by autograd. The parts' cross terms are left out.

    In these coordinates the objective is about as curved in every direction, so L-BFGS needs fewer steps: a user
    with 10 ratings of ML-1M's default model takes 10 evaluations of the objective instead of 20. The Hessian of
    every entry by autograd (2.8-3.4 ms for those 10 ratings; 10.0 evaluations) cost more than the Gauss-Newton
    part and the noise offset's 2 x 2 Hessian by autograd (1.8 ms; 10.4 evaluations), and that costs more than
    its closed form (the same matrix; fold-in of 10 ratings 13.8 against 12.0 ms). With many ratings the Hessian (one
    backward pass per parameter, over every rating) costs more than the steps it saves (300 ratings: 65 against
    45 ms), and L-BFGS runs on theta itself.
    """
    if data.n > WHITEN_MAX_RATINGS:
        return None
    coords = [torch.arange(b.start, b.start + b.width, device=ctx.device) for b in ctx.laplace_blocks]
    laplace = torch.cat(coords) if coords else torch.zeros(0, dtype=torch.long, device=ctx.device)
    proper = torch.diagonal(covariance) > 0  # (a flat prior's entries have variance 0: no Gauss-Newton part)
    by_gn = laplace[proper]
    rest = torch.ones(ctx.dim, dtype=torch.bool, device=ctx.device)
    rest[by_gn] = False
    parts = []  # (coordinates, eigenvalues of their curvature, eigenvectors)
    if by_gn.numel():
        e, v = torch.linalg.eigh(covariance[proper][:, proper])
        parts.append((by_gn, 1.0 / e, v))
    log_noise = None
    for block in ctx.priors.custom:  # a noise row's Hessian in closed form, where its term gives one
        fitted = ctx.state.terms[block.term]
        if not fitted.term.user_noise:
            continue
        if log_noise is None:
            log_noise = ctx.log_noise_curvature(data, start)
        h = fitted.term.user_noise_hessian(block.spec, block.of(start), log_noise, ctx.priors.of_term(block, data.own),
                                           fitted)
        if h is not None:
            where = torch.arange(block.start, block.start + block.width, device=ctx.device)
            parts.append((where, *torch.linalg.eigh(h)))
            rest[where] = False
    rest = rest.nonzero().squeeze(1)
    if rest.numel():
        from torch.autograd.functional import hessian

        def objective(values: Tensor) -> Tensor:
            return -ctx.objective(data, start.index_put((rest,), values))

        with torch.enable_grad():
            h = hessian(objective, start[rest], vectorize=True)
        parts.append((rest, *torch.linalg.eigh(0.5 * (h + h.T))))
    if not all(torch.isfinite(e).all() and torch.isfinite(v).all() for _, e, v in parts):
        return None
    top = max(e.max() for _, e, _ in parts)
    if not top > 0:
        return None
    out = torch.zeros(ctx.dim, ctx.dim, dtype=start.dtype, device=ctx.device)
    for where, e, v in parts:
        out[where.unsqueeze(1), where.unsqueeze(0)] = v / e.clamp_min(1e-3 * top).sqrt()
    return out


def _fold(ctx: FoldInContext, items: np.ndarray, y: np.ndarray, init: int | None, max_iter: int,
          tol: float, expected_residuals: bool = True) -> FoldedUser:
    return _fold_state(ctx, ctx.user_data(items, y), init, max_iter, tol, expected_residuals)[0]


def _fold_state(ctx: FoldInContext, data: UserData, init: int | None, max_iter: int,
                tol: float, expected_residuals: bool = True) -> tuple[FoldedUser, Tensor, Tensor]:
    """The folded user, and their raw parameter vector and Laplace covariance as tensors (for :mod:`.elicit`)."""
    theta = ctx.start(data, init if data.n else None)
    n_iter = 0
    if data.n:  # (0 ratings: nothing to fit, the prior's values, predicted as the cold-start user)
        start = theta
        # the Gauss-Newton posterior at the start, for the expected residuals and the whitening
        at_start = ctx.laplace(data, start, with_jacobian=True) if data.n <= WHITEN_MAX_RATINGS or (
            expected_residuals and ctx.user_noise) else None
        if expected_residuals:  # the variances of the ratings' means, at the start
            data = ctx.with_expected_residuals(data, start, at_start)
        whiten = _whitening(ctx, data, start, at_start[1]) if at_start is not None else None
        def value_and_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
            param = torch.from_numpy(x).to(start.device).requires_grad_(True)
            with torch.enable_grad():  # also when called under torch.no_grad()
                loss = -ctx.objective(data, param if whiten is None else start + whiten @ param)
                (grad,) = torch.autograd.grad(loss, param)
            return float(loss.detach()), grad.cpu().numpy()

        x0 = np.zeros(start.numel()) if whiten is not None else start.detach().cpu().numpy()
        found = minimize(value_and_gradient, x0, max_iter=max_iter, tol_grad=tol, tol_change=1e-16, history=20)
        n_iter = found.n_iter
        param = torch.from_numpy(found.x).to(start.device)
        theta = param if whiten is None else start + whiten @ param
    with torch.no_grad():
        value = ctx.objective(data, theta)
        if data.n and not (torch.isfinite(theta).all() and torch.isfinite(value)):
            raise NumericalError(f"fold-in of a user with {data.n} ratings produced non-finite values; "
                                 "check the model with dtype='float64'")
    variances, covariance = ctx.laplace(data, theta)
    raw = {b.key: b.of(theta).cpu().numpy() for b in ctx.blocks}
    rows = {b.key: (b.of(theta) + data.implicit[b.key]).cpu().numpy() for b in ctx.blocks}
    folded = FoldedUser(rows=rows, raw=raw, variances={k: v.cpu().numpy() for k, v in variances.items()},
                        n_ratings=data.n + (data.own.n_ratings if data.own is not None else 0), objective=float(value),
                        n_iter=n_iter, covariance=covariance.cpu().numpy(), updated=data.own is not None,
                        layout=[(b.key, b.width) for b in ctx.laplace_blocks],
                        answers=(data.answers[0].cpu().numpy(), data.answers[1].cpu().numpy()), model=ctx.model)
    return folded, theta, covariance
