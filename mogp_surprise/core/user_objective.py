"""The fold-in objective of one user and its Laplace variances (:mod:`.foldin` has the formulas and the API).

:class:`FoldInContext` holds the fitted quantities of a posterior in float64; the objective is the
part of the training ELBO that involves one user, built from the terms of :mod:`.objective`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .kernels import rbf_mean_gradient, scaled_sqdist
from .objective import gaussian_expected_log_lik, gaussian_log_prior, noise_moments_from_offsets, noise_offset_kl
from .posterior import MWGPPosterior

#: "population": the prior of a folded-in user is the spread of the learned users (the distribution the
#: cold-start user is integrated over); "model": the model's own priors (the training ELBO exactly)
PRIORS = ("population", "model")


@dataclass
class UserData:
    """The fixed, per-user part of the objective."""

    n: int  # number of ratings
    k_item: Tensor  # (n, m): outputscale * k_B(x_j, z^B)
    resid: Tensor  # (n,): y_j - c - b_j
    implicit: Tensor  # (r,): |J|^{-1/2} sum_j y_j, or zeros
    implicit_mf: Tensor  # (k,): |J|^{-1/2} sum_j y'_j, or zeros
    t_mean: Tensor | None  # (n,): E_q[t_j]
    t_var: Tensor | None  # (n,): Var_q[t_j]
    q: Tensor  # (n, k): the items' bilinear factors q~_j


class FoldInContext:
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
        z, ls = posterior.inducing.to(**f64), posterior.lengthscale.to(**f64)
        self.outputscale = posterior.outputscale.to(**f64)
        self.z_user, self.ls_user, self.ls_item = z[:, :r], ls[:r], ls[r:]
        self.zs_user, self.zs_item = self.z_user / self.ls_user, z[:, r:] / self.ls_item
        self.w, self.M = posterior.w.to(**f64), posterior.M.to(**f64)
        self.global_mean = posterior.global_mean.to(**f64)
        self.log_noise = torch.log(posterior.noise.to(**f64))
        (self.user_input, self.item_input), (self.user_bias, self.item_bias) = posterior.embeddings, posterior.biases
        self.user_mf, self.item_mf = posterior.mf_factors if self.k else (None, None)
        self.cold_users = posterior.cold_users
        self.use_biases, self.heteroscedastic, self.implicit = (
            bool(info[name]) for name in ("use_biases", "heteroscedastic", "implicit"))
        self.item_implicit = info["item_implicit"]
        self.item_mf_implicit = info.get("item_mf_implicit")
        self.embedding_reg, self.bias_reg = float(info["embedding_reg"]), float(info["bias_reg"])
        if self.heteroscedastic:
            self.log_tau = info["noise_prior_logvar"][0].to(**f64)
            self.noise_mean, self.noise_logvar = info["noise_offset_mean"], info["noise_offset_logvar"]
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

    # -- the objective -----------------------------------------------------------------------------
    def split(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(a, b, mu, log v, p) from the flat parameter vector of :meth:`start`."""
        r = self.r
        return theta[:r], theta[r], theta[r + 1], theta[r + 2], theta[r + 3:]

    def user_data(self, items: np.ndarray, y: np.ndarray) -> UserData:
        f64 = {"dtype": torch.float64, "device": self.device}
        idx = torch.as_tensor(items, device=self.device)
        xs = self.item_input[idx].to(**f64) / self.ls_item
        k_item = self.outputscale * torch.exp(-0.5 * scaled_sqdist(xs, self.zs_item))
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
        return UserData(int(items.size), k_item, resid, implicit, implicit_mf, t_mean, t_var, q)

    def moments(self, data: UserData, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The kernel rows k_j (n, m), E_q[f_j] and Var_q[f_j] at the user's GP input ``x``."""
        d = x / self.ls_user - self.zs_user
        kk = data.k_item * torch.exp(-0.5 * (d * d).sum(-1))
        return kk, kk @ self.w, self.outputscale + ((kk @ self.M) * kk).sum(-1)

    def noise(self, data: UserData, mu: Tensor, logvar: Tensor) -> tuple[Tensor, Tensor]:
        """E_q[log sigma_j^2] and lambda_j = E_q[1 / sigma_j^2], (n,) each."""
        offsets = [(mu, torch.exp(logvar)), (data.t_mean, data.t_var)] if self.heteroscedastic else ()
        return noise_moments_from_offsets(self.log_noise, data.n, offsets)

    def objective(self, data: UserData, a: Tensor, b: Tensor, mu: Tensor, logvar: Tensor, p: Tensor) -> Tensor:
        """L(a_u, b_u, p_u, mu, log v) of the :mod:`.foldin` docstring: the user's terms of the training ELBO."""
        _, mean, var = self.moments(data, a + data.implicit)
        resid = data.resid - mean
        if self.use_biases:
            resid = resid - b
        if self.k:
            resid = resid - data.q @ (p + data.implicit_mf)
        log_noise, lam = self.noise(data, mu, logvar)
        out = gaussian_expected_log_lik(data.n, log_noise.sum(), (lam * (resid * resid + var)).sum())
        if self.x_mean is None:  # the model's priors on the embedding a_u and on p_u
            out = out + gaussian_log_prior(a, self.x_var)
            p_effective = p
        else:  # the population priors on the GP input x_u and on p~_u = p_u + implicit
            out = out + gaussian_log_prior(a + data.implicit, self.x_var, self.x_mean)
            p_effective = p + data.implicit_mf
        if self.use_biases:
            out = out + gaussian_log_prior(b, self.b_var, self.b_mean)
        if self.k:
            out = out + gaussian_log_prior(p_effective, self.p_var, self.p_mean)
        if self.heteroscedastic:
            out = out - noise_offset_kl(mu, logvar, self.log_tau, self.s_mean)
        return out

    def laplace(self, data: UserData, x: Tensor, mu: Tensor, logvar: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Diagonal Gauss-Newton variances of the GP input x (r,), the bias and p_u (k,), as in ``laplace.py``."""
        kk, _, _ = self.moments(data, x)
        grad = rbf_mean_gradient(kk * self.w, x, self.z_user, self.ls_user)
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
    def start(self, data: UserData, init: int | None) -> Tensor:
        """(a, b, mu, log v, p) to start from: the prior mean, or a known user's fitted values."""
        f64 = {"dtype": torch.float64, "device": self.device}
        theta = torch.zeros(self.r + 3 + self.k, **f64)
        if self.x_mean is not None:
            theta[:self.r] = self.x_mean - data.implicit
            theta[self.r + 3:] = self.p_mean - data.implicit_mf
        theta[self.r] = self.b_mean
        theta[self.r + 1] = self.s_mean
        theta[self.r + 2] = self.log_tau
        if init is not None and not (self.cold_users is not None and bool(self.cold_users[init])):
            theta[:self.r] = self.user_input[init].to(**f64) - data.implicit  # the fitted GP input
            theta[self.r] = self.user_bias[init].to(**f64)
            if self.heteroscedastic:
                theta[self.r + 1] = self.noise_mean[0][init].to(**f64)
                theta[self.r + 2] = self.noise_logvar[0][init].to(**f64)
            if self.k:
                theta[self.r + 3:] = self.user_mf[init].to(**f64) - data.implicit_mf
        return theta


def _finite(value) -> bool:
    return bool(torch.isfinite(torch.as_tensor(value)).all())
