"""Fold-in: infer one user's own parameters from their ratings, everything else held fixed.

Given a fitted :class:`~mogp_surprise.core.posterior.MWGPPosterior` and the (item, rating) pairs of
one user (new, or a known user with extra ratings), :func:`fold_in` maximises the training ELBO over
that user's own parameters only: their embedding a_u (r dims), bias b_u (if the model has biases),
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
N(0, 1 / mf_reg) on p_u, N(0, 1 / bias_reg), N(0, tau_0) -- the training ELBO exactly (its gradient is
checked against ``MWGPModule.elbo``). With few ratings they predict worse, being wider than the
learned users' spread (ML-1M, 5 ratings: RMSE 0.970 vs 0.938).

with the closed forms of :mod:`mogp_surprise.core.model`: for k_j = k((x_u, x_j), Z), shape (m,),
and q(t_j) = N(mu_t_j, v_t_j) the item's fitted log-noise offset::

    E_q[f_j]              = k_j^T w
    Var_q[f_j]            = outputscale + k_j^T M k_j
    E_q[log sigma_j^2]    = log sigma^2 + mu + mu_t_j
    lambda_j              = E_q[1 / sigma_j^2] = exp((v + v_t_j) / 2 - E_q[log sigma_j^2])
    E_q[log N(y_j | ..)]  = -1/2 [log 2 pi + E_q[log sigma_j^2]
                                  + lambda_j ((y_j - c - b_u - b_j - p_u . q_j - E_q[f_j])^2 + Var_q[f_j])]
    KL                    = 1/2 [(mu^2 + v) / tau_0 - 1 + log tau_0 - log v]

The user's GP input is x_u = a_u, or with implicit feedback
``x_u = a_u + |J|^(-1/2) sum_{j in J} y_j`` (y_j the items' implicit factors, J the items folded in),
and likewise their bilinear factor ``p~_u = p_u + |J|^(-1/2) sum_{j in J} y'_j``; the population
prior is on x_u and p~_u, the model's on a_u and p_u.
With ``prior="model"`` the gradient of L w.r.t. (a_u, b_u, mu, log v, p_u) is that of
:meth:`~mogp_surprise.core.model.MWGPModule.elbo` w.r.t. the user's rows (checked in
``tests/core/test_foldin.py``). Homoscedastic models have no q(s_u) (lambda_j = 1 / sigma^2),
models without biases no b_u.

L is maximised in float64 by L-BFGS (strong Wolfe line search), from the prior's mean or from a
known user's fitted values (``init_user``). At the optimum the user gets the diagonal
Gauss-Newton (Laplace) variances that :func:`~mogp_surprise.core.laplace.level_variances` gives
trained users (with the model's priors, 1 / v_x = embedding_reg, 1 / v_b = bias_reg, 1 / v_p = mf_reg)::

    Var[x_u,d] = 1 / (1 / v_x,d + sum_j lambda_j (d E_q[f_j] / d x_u,d)^2)
    Var[b_u]   = 1 / (1 / v_b + sum_j lambda_j)
    Var[p_u,d] = 1 / (1 / v_p,d + sum_j lambda_j q_j,d^2)

(0, i.e. no correction, where the prior precision is 0, as there). They enter the predictive
variance of :meth:`~mogp_surprise.core.posterior.MWGPPosterior.with_extra_users` by the delta
method, like those of the trained users.

Caveats. The items' inputs are not updated: with implicit feedback an item's input holds the
normalised sum of its raters' item-side implicit factors, and the folded user adds none (every
item stays as fitted). A user with 0 ratings is not optimised: :class:`FoldedUser` then has
``n_ratings == 0`` (and the prior's values) and is predicted exactly as the cold-start user,
index -1. Folding a trained user in again from their own training ratings moves their
predictions a little (a few Adam epochs leave the trained users short of the optimum of their
part of the objective).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from .errors import NumericalError
from .kernels import LOG_2PI
from .posterior import MWGPPosterior

__all__ = ["FoldedUser", "fold_in", "fold_in_many", "fold_in_objective", "PRIORS"]

#: "population": the prior of a folded-in user is the spread of the learned users (the distribution the
#: cold-start user is integrated over); "model": the model's own priors (the training ELBO exactly)
PRIORS = ("population", "model")


@dataclass(frozen=True)
class FoldedUser:
    """One folded-in user (standardised rating units, like the posterior's own tables).

    Attributes
    ----------
    input : ndarray of shape (r,)
        GP input x_u (the embedding plus, with implicit feedback, the normalised implicit sum).
    embedding : ndarray of shape (r,)
        The embedding a_u alone.
    input_var : ndarray of shape (r,)
        Diagonal Laplace (Gauss-Newton) variance of x_u.
    bias, bias_var : float
        b_u and its Laplace variance (0 and 0 for a model without biases).
    noise_offset_mean, noise_offset_var : float
        q(s_u) = N(mean, var) of the log-noise offset (0 and 0 for a homoscedastic model).
    noise_scale : float
        E_q[exp(s_u)], the factor by which this user multiplies the noise variance.
    n_ratings : int
        Ratings folded in; 0 means the user is predicted as the cold-start user (index -1).
    objective : float
        The maximised fold-in objective (the user's part of the ELBO, standardised units).
    n_iter : int
        L-BFGS iterations used.
    mf_factor, mf_factor_var : ndarray of shape (k,)
        The bilinear factor p~_u (implicit feedback included, like ``input``) and its Laplace variance
        (empty for a model with ``mf_rank=0``).
    mf_factor_raw : ndarray of shape (k,)
        The factor p_u alone (like ``embedding``): what :func:`fold_in_objective` takes as
        ``mf_factor``.
    """

    input: np.ndarray
    embedding: np.ndarray
    input_var: np.ndarray
    bias: float
    bias_var: float
    noise_offset_mean: float
    noise_offset_var: float
    noise_scale: float
    n_ratings: int
    objective: float
    n_iter: int
    mf_factor: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    mf_factor_var: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    mf_factor_raw: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))

    @property
    def cold(self) -> bool:
        """True for a user folded in from 0 ratings (predicted as index -1)."""
        return self.n_ratings == 0


def fold_in(posterior: MWGPPosterior, items: np.ndarray, ratings: np.ndarray, init_user: int | None = None,
            max_iter: int = 100, tol: float = 1e-7, prior: str = "population", repeats: bool = False) -> FoldedUser:
    """Infer one user's embedding, bias and noise offset from their ratings (see the module docstring).

    Parameters
    ----------
    posterior : MWGPPosterior
        A fitted (user, item) model built by ``fit_mwgp`` (or ``from_module`` with the priors).
    items : int ndarray of shape (k,)
        Inner item indices in ``[0, n_items)``, no repeats; k may be 0.
    ratings : float ndarray of shape (k,)
        The user's ratings, on the original rating scale.
    init_user : int, optional
        Start from this known user's fitted values (e.g. the same user with extra ratings)
        instead of the prior mean.
    max_iter : int, default=100
        Maximum number of L-BFGS iterations.
    tol : float, default=1e-7
        Stop when every gradient entry is below ``tol`` in absolute value.
    prior : {"population", "model"}, default="population"
        The user's prior: the learned users' population or the model's own priors (module docstring).
    repeats : bool, default=False
        Accept an item more than once (each rating its own term, as training data with repeated
        (user, item) pairs are treated); by default a repeat is an error.

    Returns
    -------
    FoldedUser
        Pass it to :meth:`MWGPPosterior.with_extra_users` to predict and rank for it.

    Raises
    ------
    ValueError
        Bad items or ratings, a model with context factors, or a posterior without what fold-in
        needs (saved before fold-in existed, or built without the priors).
    NumericalError
        The optimisation produced non-finite values.
    """
    return fold_in_many(posterior, [(items, ratings)], None if init_user is None else [init_user],
                        max_iter=max_iter, tol=tol, prior=prior, repeats=repeats)[0]


def fold_in_many(posterior: MWGPPosterior, users: Sequence[tuple[np.ndarray, np.ndarray]],
                 init_users: Sequence[int | None] | None = None, max_iter: int = 100,
                 tol: float = 1e-7, prior: str = "population", repeats: bool = False) -> list[FoldedUser]:
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
    _check_int("max_iter", max_iter, 1)
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not tol > 0 or not math.isfinite(tol):
        raise ValueError(f"`tol` must be a finite number > 0, got {tol!r}")
    ctx = _Context(posterior, prior)
    users = list(users)
    if init_users is None:
        init_users = [None] * len(users)
    init_users = list(init_users)
    if len(init_users) != len(users):
        raise ValueError(f"`init_users` must hold one entry per user ({len(users)}), got {len(init_users)}")
    checked = []
    for n, (pair, init) in enumerate(zip(users, init_users)):
        where = f"user {n}: " if len(users) > 1 else ""
        try:
            items, ratings = pair
        except (TypeError, ValueError):
            raise ValueError(f"{where}expected an (items, ratings) pair, got {type(pair).__name__}") from None
        checked.append((*ctx.check(items, ratings, where, repeats), ctx.check_init(init, where)))
    return [ctx.fold(items, y, init, max_iter, tol) for items, y, init in checked]


def fold_in_objective(posterior: MWGPPosterior, items: np.ndarray, ratings: np.ndarray, embedding: Tensor,
                      bias: Tensor | float = 0.0, noise_mean: Tensor | float = 0.0,
                      noise_logvar: Tensor | float | None = None, prior: str = "population",
                      mf_factor: Tensor | None = None) -> Tensor:
    """The fold-in objective at given user parameters (float64, differentiable w.r.t. tensor arguments).

    ``embedding`` is a_u, shape (r,); ``noise_logvar`` is log v (default: log tau_0); ``mf_factor``
    is p_u, shape (k,) (default: zeros). Arguments
    the model has no use for (the bias without biases, the noise offset when homoscedastic)
    are ignored. Maximising it is what :func:`fold_in` does.
    """
    ctx = _Context(posterior, prior)
    items, y = ctx.check(items, ratings, "")
    data = ctx.user_data(items, y)
    f64 = {"dtype": torch.float64, "device": ctx.device}
    a = torch.as_tensor(embedding, **f64)
    if a.shape != (ctx.r,):
        raise ValueError(f"`embedding` must have shape ({ctx.r},), got {tuple(a.shape)}")
    lv = ctx.log_tau if noise_logvar is None else torch.as_tensor(noise_logvar, **f64)
    p = torch.zeros(ctx.k, **f64) if mf_factor is None else torch.as_tensor(mf_factor, **f64)
    if p.shape != (ctx.k,):
        raise ValueError(f"`mf_factor` must have shape ({ctx.k},), got {tuple(p.shape)}")
    return ctx.objective(data, a, torch.as_tensor(bias, **f64), torch.as_tensor(noise_mean, **f64), lv, p)


# -- implementation ---------------------------------------------------------------------------------
@dataclass
class _UserData:
    """The fixed, per-user part of the objective."""

    n: int  # number of ratings
    k_item: Tensor  # (n, m): outputscale * k_B(x_j, z^B)
    resid: Tensor  # (n,): y_j - c - b_j
    implicit: Tensor  # (r,): |J|^{-1/2} sum_j y_j, or zeros
    implicit_mf: Tensor  # (k,): |J|^{-1/2} sum_j y'_j, or zeros
    t_mean: Tensor | None  # (n,): E_q[t_j]
    t_var: Tensor | None  # (n,): Var_q[t_j]
    q: Tensor  # (n, k): the items' bilinear factors q~_j


class _Context:
    """The fitted quantities fold-in uses, in float64 on the posterior's device."""

    def __init__(self, posterior: MWGPPosterior, prior: str = "population") -> None:
        if not isinstance(posterior, MWGPPosterior):
            raise ValueError(f"`posterior` must be an MWGPPosterior, got {type(posterior).__name__}")
        if posterior.n_factors != 2:
            raise ValueError(f"fold-in needs a (user, item) model; this one has {posterior.n_factors} factors "
                             "(context factors are not supported)")
        info = posterior.foldin
        if info is None:
            raise ValueError("this posterior was saved before fold-in existed and lacks what fold-in needs (the "
                             "priors, the items' implicit factors and noise offsets); refit the model to fold in "
                             "users")
        if info["embedding_reg"] is None or info["bias_reg"] is None or (
                posterior.mf_rank and info.get("mf_reg") is None):
            raise ValueError("this posterior was built without its priors; pass `embedding_reg`, `bias_reg` (and "
                             "`mf_reg` with a bilinear term) to MWGPPosterior.from_module (fit_mwgp does) to fold "
                             "in users")
        f64 = {"dtype": torch.float64}
        self.device = posterior.device
        self.r = r = posterior.latent_dim
        self.k = posterior.mf_rank
        self.n_users, self.n_items = posterior.n_levels
        self.rating_mean, self.rating_std = posterior.rating_mean, posterior.rating_std
        z = posterior.inducing.to(**f64)
        ls = posterior.lengthscale.to(**f64)
        self.outputscale = posterior.outputscale.to(**f64)
        self.z_user, self.ls_user = z[:, :r], ls[:r]
        self.zs_user = self.z_user / self.ls_user
        self.zs_item = z[:, r:] / ls[r:]
        self.ls_item = ls[r:]
        self.w, self.M = posterior.w.to(**f64), posterior.M.to(**f64)
        self.global_mean = posterior.global_mean.to(**f64)
        self.log_noise = torch.log(posterior.noise.to(**f64))
        self.item_input = posterior.embeddings[1]
        self.item_bias = posterior.biases[1]
        self.user_input, self.user_bias = posterior.embeddings[0], posterior.biases[0]
        self.user_mf, self.item_mf = posterior.mf_factors if self.k else (None, None)
        self.cold_users = posterior.cold_users
        self.use_biases = bool(info["use_biases"])
        self.heteroscedastic = bool(info["heteroscedastic"])
        self.implicit = bool(info["implicit"])
        self.item_implicit = info["item_implicit"]
        self.item_mf_implicit = info.get("item_mf_implicit")
        self.embedding_reg, self.bias_reg = float(info["embedding_reg"]), float(info["bias_reg"])
        if self.heteroscedastic:
            self.log_tau = info["noise_prior_logvar"][0].to(**f64)
            self.noise_mean = [m for m in info["noise_offset_mean"]]
            self.noise_logvar = [lv for lv in info["noise_offset_logvar"]]
        else:
            self.log_tau = torch.zeros((), **f64, device=self.device)
        if prior not in PRIORS:
            raise ValueError(f"`prior` must be one of {PRIORS}, got {prior!r}")
        zero = torch.zeros((), **f64, device=self.device)
        # the prior of the user's GP input x_u, bias and log-noise offset: N(mean, var) each
        if prior == "population":  # the learned users' spread, as the cold-start user is integrated over
            self.x_mean, self.x_var = posterior.emb_mean[0].to(**f64), posterior.emb_var[0].to(**f64)
            self.b_mean, self.b_var = posterior.bias_mean[0].to(**f64), posterior.bias_var[0].to(**f64)
            self.p_mean = posterior.mf_mean[0].to(**f64) if self.k else torch.zeros(0, **f64, device=self.device)
            self.p_var = posterior.mf_var[0].to(**f64).clamp_min(1e-12) if self.k else self.p_mean
            if self.heteroscedastic:
                pop = info["user_noise_population"]  # (mean, variance), kept by MWGPPosterior.from_module
                self.s_mean, self.log_tau = pop[0].to(**f64), torch.log(pop[1].to(**f64))
            else:
                self.s_mean = zero
        else:  # the model's own priors, exactly the training ELBO
            self.x_mean, self.x_var = None, (1.0 / self.embedding_reg if self.embedding_reg > 0 else math.inf)
            self.b_mean, self.b_var = zero, (1.0 / self.bias_reg if self.bias_reg > 0 else math.inf)
            self.p_mean = torch.zeros(self.k, **f64, device=self.device)
            mf_reg = float(info.get("mf_reg") or 0.0)
            self.p_var = torch.full((self.k,), 1.0 / mf_reg if mf_reg > 0 else math.inf, **f64, device=self.device)
            self.s_mean = zero

    # -- validation ------------------------------------------------------------------------------
    def check(self, items, ratings, where: str, repeats: bool = False) -> tuple[np.ndarray, np.ndarray]:
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
        if items.size and (items.min() < 0 or items.max() >= self.n_items):
            raise ValueError(f"{where}item indices must lie in [0, {self.n_items}), got range "
                             f"[{items.min()}, {items.max()}]")
        ratings = ratings.astype(np.float64)
        bad = ~np.isfinite(ratings)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}ratings must be finite; {int(bad.sum())} are NaN/inf (first at position "
                             f"{pos}: {ratings[pos]!r})")
        uniq, counts = np.unique(items, return_counts=True)
        if uniq.size != items.size and not repeats:
            raise ValueError(f"{where}`items` repeats item(s) {uniq[counts > 1][:5].tolist()}; give each item once")
        return items.astype(np.int64), (ratings - self.rating_mean) / self.rating_std

    def check_init(self, init, where: str) -> int | None:
        if init is None:
            return None
        if isinstance(init, bool) or not isinstance(init, numbers.Integral) or not 0 <= init < self.n_users:
            raise ValueError(f"{where}`init_user` must be None or a user index in [0, {self.n_users}), got {init!r}")
        return int(init)

    # -- the objective -----------------------------------------------------------------------------
    def user_data(self, items: np.ndarray, y: np.ndarray) -> _UserData:
        f64 = {"dtype": torch.float64, "device": self.device}
        idx = torch.as_tensor(items, device=self.device)
        xs = self.item_input[idx].to(**f64) / self.ls_item
        sq = ((xs * xs).sum(-1, keepdim=True) + (self.zs_item * self.zs_item).sum(-1)
              - 2.0 * xs @ self.zs_item.T).clamp_min(0.0)
        k_item = self.outputscale * torch.exp(-0.5 * sq)
        resid = torch.as_tensor(y, **f64) - self.global_mean - self.item_bias[idx].to(**f64)
        implicit = torch.zeros(self.r, **f64)
        implicit_mf = torch.zeros(self.k, **f64)
        if self.implicit and items.size:
            rated = torch.as_tensor(np.unique(items), device=self.device)  # repeated pairs count once, as in training
            implicit = self.item_implicit[rated].to(**f64).sum(0) / math.sqrt(rated.numel())
            if self.item_mf_implicit is not None:
                implicit_mf = self.item_mf_implicit[rated].to(**f64).sum(0) / math.sqrt(rated.numel())
        t_mean = t_var = None
        if self.heteroscedastic:
            t_mean = self.noise_mean[1][idx].to(**f64)
            t_var = torch.exp(self.noise_logvar[1][idx].to(**f64))
        q = self.item_mf[idx].to(**f64) if self.k else torch.zeros(idx.shape[0], 0, **f64)
        return _UserData(int(items.size), k_item, resid, implicit, implicit_mf, t_mean, t_var, q)

    def moments(self, data: _UserData, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The kernel rows k_j (n, m), E_q[f_j] and Var_q[f_j] at the user's GP input ``x``."""
        d = x / self.ls_user - self.zs_user
        kk = data.k_item * torch.exp(-0.5 * (d * d).sum(-1))
        return kk, kk @ self.w, self.outputscale + ((kk @ self.M) * kk).sum(-1)

    def noise(self, data: _UserData, mu: Tensor, logvar: Tensor) -> tuple[Tensor, Tensor]:
        """E_q[log sigma_j^2] and lambda_j = E_q[1 / sigma_j^2], (n,) each."""
        if not self.heteroscedastic:
            log_noise = self.log_noise.expand(data.n)
            return log_noise, torch.exp(-log_noise)
        mean = self.log_noise + mu + data.t_mean
        return mean, torch.exp(0.5 * (torch.exp(logvar) + data.t_var) - mean)

    def objective(self, data: _UserData, a: Tensor, b: Tensor, mu: Tensor, logvar: Tensor, p: Tensor) -> Tensor:
        _, mean, var = self.moments(data, a + data.implicit)
        resid = data.resid - mean
        if self.use_biases:
            resid = resid - b
        if self.k:
            resid = resid - data.q @ (p + data.implicit_mf)
        log_noise, lam = self.noise(data, mu, logvar)
        out = -0.5 * (data.n * LOG_2PI + log_noise.sum() + (lam * (resid * resid + var)).sum())
        if self.x_mean is None:  # the model's prior on the embedding a_u
            out = out - 0.5 * (a * a).sum() / self.x_var
        else:  # the population prior on the GP input x_u
            dx = a + data.implicit - self.x_mean
            out = out - 0.5 * (dx * dx / self.x_var).sum()
        if self.use_biases:
            out = out - 0.5 * (b - self.b_mean) ** 2 / self.b_var
        if self.k:  # like x: the population prior on p~_u = p_u + implicit, the model's on p_u
            dp = p - self.p_mean if self.x_mean is None else p + data.implicit_mf - self.p_mean
            out = out - 0.5 * (dp * dp / self.p_var).sum()
        if self.heteroscedastic:
            dm = mu - self.s_mean
            out = out - 0.5 * ((dm * dm + torch.exp(logvar)) * torch.exp(-self.log_tau) - 1.0 + self.log_tau - logvar)
        return out

    def laplace(self, data: _UserData, x: Tensor, mu: Tensor, logvar: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Diagonal Gauss-Newton variances of the GP input x (r,), the bias and p_u (k,), as in ``laplace.py``."""
        kk, _, _ = self.moments(data, x)
        kw = kk * self.w
        grad = (kw @ self.z_user - x * kw.sum(-1, keepdim=True)) / (self.ls_user * self.ls_user)
        _, lam = self.noise(data, mu, logvar)
        prec = 1.0 / self.x_var + (lam.unsqueeze(-1) * grad * grad).sum(0)
        bias_prec = 1.0 / self.b_var + lam.sum()
        # no prior (infinite variance): 0, i.e. no correction, as laplace.py does
        input_var = 1.0 / prec if _finite(self.x_var) else torch.zeros_like(prec)
        bias_var = 1.0 / bias_prec if _finite(self.b_var) and self.use_biases else torch.zeros_like(bias_prec)
        mf_prec = 1.0 / self.p_var + (lam.unsqueeze(-1) * data.q * data.q).sum(0)
        mf_var = 1.0 / mf_prec if _finite(self.p_var) else torch.zeros_like(mf_prec)
        return input_var, bias_var, mf_var

    # -- optimisation -------------------------------------------------------------------------------
    def start(self, data: _UserData, init: int | None) -> Tensor:
        """(a, b, mu, log v, p) to start from: the prior mean, or a known user's fitted values."""
        f64 = {"dtype": torch.float64, "device": self.device}
        theta = torch.zeros(self.r + 3 + self.k, **f64)
        if self.x_mean is not None:
            theta[:self.r] = self.x_mean - data.implicit
        theta[self.r] = self.b_mean
        theta[self.r + 1] = self.s_mean
        theta[self.r + 2] = self.log_tau
        if self.x_mean is not None:
            theta[self.r + 3:] = self.p_mean - data.implicit_mf
        if init is not None and not (self.cold_users is not None and bool(self.cold_users[init])):
            theta[:self.r] = self.user_input[init].to(**f64) - data.implicit  # the fitted GP input
            theta[self.r] = self.user_bias[init].to(**f64)
            if self.heteroscedastic:
                theta[self.r + 1] = self.noise_mean[0][init].to(**f64)
                theta[self.r + 2] = self.noise_logvar[0][init].to(**f64)
            if self.k:
                theta[self.r + 3:] = self.user_mf[init].to(**f64) - data.implicit_mf
        return theta

    def fold(self, items: np.ndarray, y: np.ndarray, init: int | None, max_iter: int, tol: float) -> FoldedUser:
        r = self.r
        data = self.user_data(items, y)
        theta = self.start(data, init if data.n else None)
        n_iter = 0
        if data.n == 0:  # nothing to fit: the prior's values, predicted as the cold-start user
            with torch.no_grad():
                value = self.objective(data, theta[:r], theta[r], theta[r + 1], theta[r + 2], theta[r + 3:])
        else:
            # the free entries: a, then b (with biases), then mu and log v (heteroscedastic), then p
            free = torch.ones(r + 3 + self.k, dtype=torch.bool)
            free[r] = self.use_biases
            free[r + 1:r + 3] = self.heteroscedastic
            free = free.to(self.device)
            fixed = theta.clone()
            param = theta[free].clone().requires_grad_(True)
            optimizer = torch.optim.LBFGS([param], lr=1.0, max_iter=max_iter, tolerance_grad=tol,
                                          tolerance_change=1e-14, history_size=20, line_search_fn="strong_wolfe")

            def loss_fn() -> Tensor:
                full = fixed.masked_scatter(free, param)
                return -self.objective(data, full[:r], full[r], full[r + 1], full[r + 2], full[r + 3:])

            def closure() -> Tensor:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn()
                loss.backward()
                return loss

            with torch.enable_grad():  # also when called under torch.no_grad()
                optimizer.step(closure)
            n_iter = int(optimizer.state[param].get("n_iter", 0))
            with torch.no_grad():
                theta = fixed.masked_scatter(free, param.detach())
                value = self.objective(data, theta[:r], theta[r], theta[r + 1], theta[r + 2], theta[r + 3:])
            if not (torch.isfinite(theta).all() and torch.isfinite(value)):
                raise NumericalError(f"fold-in of a user with {data.n} ratings produced non-finite values; "
                                     "check the model with dtype='float64'")
        with torch.no_grad():
            a, b, mu, logvar, p = theta[:r], theta[r], theta[r + 1], theta[r + 2], theta[r + 3:]
            x = a + data.implicit
            input_var, bias_var, mf_var = self.laplace(data, x, mu, logvar)  # 0 ratings: the prior's
            var = torch.exp(logvar) if self.heteroscedastic else torch.zeros(())
            if not self.heteroscedastic:
                mu = torch.zeros(())
        return FoldedUser(
            input=x.cpu().numpy(), embedding=a.cpu().numpy(), input_var=input_var.cpu().numpy(),
            bias=float(b) if self.use_biases else 0.0, bias_var=float(bias_var),
            noise_offset_mean=float(mu), noise_offset_var=float(var),
            noise_scale=math.exp(float(mu) + 0.5 * float(var)), n_ratings=data.n, objective=float(value),
            n_iter=n_iter, mf_factor=(p + data.implicit_mf).cpu().numpy(), mf_factor_var=mf_var.cpu().numpy(),
            mf_factor_raw=p.cpu().numpy())


def _finite(value) -> bool:
    return bool(torch.isfinite(torch.as_tensor(value)).all())


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}")
