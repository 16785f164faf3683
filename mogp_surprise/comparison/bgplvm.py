"""The Bayesian GPLVM (Titsias & Lawrence, 2010) as a Surprise algorithm, built on GPyTorch.

Optional: needs GPyTorch (``pip install -e '.[bgplvm]'`` from a checkout, or ``pip install gpytorch``).
This is the paper's third baseline, the one other uncertainty-aware GP recommender.

Users are the data points and items the outputs. Every user u has a latent position with a
Gaussian variational posterior q(x_u) = N(mu_u, diag s_u^2) under a N(0, I) prior; every item d is
an output f_d ~ GP(c_d, k) of the same kernel k (scaled RBF with one length-scale per latent
dimension), sparse with M inducing inputs Z shared by all items and a full-covariance q(u_d) per
item. Unobserved (user, item) cells are missing: they are masked out of the likelihood, never
filled in. The ELBO is GPyTorch's.

From GPyTorch: ``BayesianGPLVM``, ``VariationalLatentVariable`` (q(x) and its KL term),
``VariationalStrategy`` with ``CholeskyVariationalDistribution`` (whitened q(u_d)), the kernel,
``GaussianLikelihood`` under ``observation_nan_policy("fill")`` (missing ratings masked) and
``VariationalELBO``; training is Adam on minibatches of users. Added here:

* the GP models what a regularised bias baseline leaves: rating = mu + b_u + b_i + f_i(x_u) + noise,
  with the biases fitted first by alternating ridge steps (Surprise ``BaselineOnly``'s
  regularisation); they speed up the first epochs (ML-1M, 10 epochs: RMSE 0.889 vs 0.907 on
  ratings minus the global mean) and change nothing after 50 (0.8632 vs 0.8630);
* q(x) starts at the top principal components of the residual matrix (unit variance), the
  inducing inputs at a random subset of them;
* the predictive distribution for scattered (user, item) pairs: GPyTorch's predictive for one
  latent draw, written for pairs (checked against ``model(x)`` in the tests), averaged over
  ``n_samples`` draws of x_u ~ q(x_u) as a Gaussian mixture, so the variance includes the latent
  uncertainty (mixture mean, E[var] + Var[mean] + noise). The draws are fixed per user at fit time,
  so a prediction does not depend on the other pairs asked for. A user unknown at fit time is
  drawn from the prior N(0, I) with bias 0; an item unknown at fit time gets the GP prior (mean
  c = 0, variance k(x, x)) and bias 0.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
import torch
from surprise import AlgoBase, Trainset
from tqdm.auto import tqdm

from ..adapters._common import trainset_arrays
from ..adapters.predictive import PredictiveAlgo
from ..core.errors import check_int
from ..core.initialization import randomized_svd

INSTALL_HINT = ("the Bayesian GPLVM needs the optional package GPyTorch: from a checkout of mogp_surprise run "
                "`pip install -e '.[bgplvm]'` (or `pip install gpytorch`)")
_CHUNK = 8192  # (user, item) pairs per block of the predictive computation


def gpytorch_available() -> bool:
    try:
        import gpytorch  # noqa: F401
    except ImportError:
        return False
    return True


def fit_biases(users: np.ndarray, items: np.ndarray, ratings: np.ndarray, n_users: int, n_items: int,
               reg_user: float = 15.0, reg_item: float = 10.0, n_sweeps: int = 15) -> tuple[float, np.ndarray, np.ndarray]:
    """Global mean and ridge-regularised user and item biases by alternating exact updates."""
    mu = float(ratings.mean())
    b_u, b_i = np.zeros(n_users), np.zeros(n_items)
    n_per_user = np.bincount(users, minlength=n_users)
    n_per_item = np.bincount(items, minlength=n_items)
    for _ in range(n_sweeps):
        b_i = np.bincount(items, ratings - mu - b_u[users], n_items) / (reg_item + n_per_item)
        b_u = np.bincount(users, ratings - mu - b_i[items], n_users) / (reg_user + n_per_user)
    return mu, b_u, b_i


def pca_init(residuals: sp.csr_matrix, latent_dim: int, seed: int) -> np.ndarray:
    """Top ``latent_dim`` left singular vectors of the (zero-filled) residual matrix, scaled to unit
    variance per column (the seeded randomised SVD MW-GP's own PCA start uses); columns the matrix
    cannot fill (tiny data) are seeded noise."""
    n_users, n_items = residuals.shape
    k = min(latent_dim, n_users, n_items)
    gen = torch.Generator().manual_seed(seed)
    out = torch.randn(n_users, latent_dim, generator=gen, dtype=torch.float64) * 0.1
    coo = residuals.tocoo()
    matrix = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, (n_users, n_items), check_invariants=True)
    out[:, :k] = randomized_svd(matrix, k, gen)[0] * math.sqrt(n_users)
    return out.numpy()


def _build(x_init: torch.Tensor, n_items: int, n_inducing: int, generator: torch.Generator):
    import gpytorch
    from gpytorch.models.gplvm import BayesianGPLVM, VariationalLatentVariable
    from gpytorch.priors import NormalPrior
    from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy

    n_users, latent_dim = x_init.shape
    items = torch.Size([n_items])

    class _GPLVM(BayesianGPLVM):
        def __init__(self) -> None:
            prior_x = NormalPrior(torch.zeros(n_users, latent_dim), torch.ones(n_users, latent_dim))
            latent = VariationalLatentVariable(n_users, n_items, latent_dim, x_init.clone(), prior_x)
            z = x_init[torch.randperm(n_users, generator=generator)[:n_inducing]].clone()
            q_u = CholeskyVariationalDistribution(len(z), batch_shape=items)
            super().__init__(latent, VariationalStrategy(self, z, q_u, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ConstantMean(batch_shape=items)
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=latent_dim))
            self.covar_module.base_kernel.lengthscale = 2.0
            self.covar_module.outputscale = 0.2

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = _GPLVM()
    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    likelihood.noise = 0.8
    return model, likelihood


class BayesianGPLVMBaseline(PredictiveAlgo):
    """Bayesian GPLVM on (user, item) ratings: users are data points, items the GP's outputs.

    Parameters
    ----------
    latent_dim : int, default=8
        Dimension of the users' latent space (MW-GP's default rank, as in the paper's comparison).
    n_inducing : int, default=32
        Inducing inputs, shared by every item's GP.
    n_epochs : int, default=50
        Passes over the users.
    batch_size : int, default=128
        Users per step (each with all its observed ratings).
    lr : float, default=0.02
        Adam's learning rate for every parameter.
    n_samples : int, default=32
        Draws of each user's latent position averaged in a prediction.
    random_state : int, default=0
    verbose : bool, default=False
        Show a progress bar over epochs.
    """

    _fitted_attr = "latent_draws_"

    def __init__(self, latent_dim: int = 8, n_inducing: int = 32, n_epochs: int = 50, batch_size: int = 128,
                 lr: float = 0.02, n_samples: int = 32, random_state: int = 0, verbose: bool = False) -> None:
        AlgoBase.__init__(self)
        self.latent_dim = latent_dim
        self.n_inducing = n_inducing
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.n_samples = n_samples
        self.random_state = random_state
        self.verbose = verbose

    def __repr__(self) -> str:
        return (f"BayesianGPLVMBaseline(latent_dim={self.latent_dim}, n_inducing={self.n_inducing}, "
                f"n_epochs={self.n_epochs}, batch_size={self.batch_size})")

    def _check_params(self) -> None:
        for name in ("latent_dim", "n_inducing", "n_epochs", "batch_size", "n_samples"):
            check_int(name, getattr(self, name), 1)
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not 0 < self.lr < math.inf:
            raise ValueError(f"`lr` must be a positive finite number, got {self.lr!r}")

    def _seed(self) -> int:
        """``random_state`` as Surprise takes it: an int, None (a fresh seed) or a numpy RandomState."""
        state = self.random_state
        if state is None:
            return int(np.random.randint(2**31))
        if isinstance(state, np.random.RandomState):
            return int(state.randint(2**31))
        if isinstance(state, (int, np.integer)) and not isinstance(state, bool) and state >= 0:
            return int(state)
        raise ValueError(f"`random_state` must be a non-negative int, None or a numpy RandomState, got {state!r}")

    def fit(self, trainset: Trainset) -> "BayesianGPLVMBaseline":
        if not gpytorch_available():
            raise ImportError(INSTALL_HINT)
        self._check_params()
        seed = self._seed()
        AlgoBase.fit(self, trainset)
        index, ratings = trainset_arrays(trainset)
        users, items = index[:, 0], index[:, 1]
        n_users, n_items = trainset.n_users, trainset.n_items
        self.global_mean_, self.user_bias_, self.item_bias_ = fit_biases(
            users, items, ratings, n_users, n_items)
        resid = ratings - self.global_mean_ - self.user_bias_[users] - self.item_bias_[items]
        # Surprise keeps repeated (user, item) ratings: one cell, their mean residual
        cells, where = np.unique(users * n_items + items, return_inverse=True)
        resid = np.bincount(where, resid) / np.bincount(where)
        table = sp.csr_matrix((resid, (cells // n_items, cells % n_items)), shape=(n_users, n_items))
        with torch.random.fork_rng(devices=[]):  # GPyTorch samples q(x) from the global generator
            torch.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            x_init = torch.tensor(pca_init(table, self.latent_dim, seed), dtype=torch.float32)
            model, likelihood = _build(x_init, n_items, min(self.n_inducing, n_users), gen)
            self._train(model, likelihood, table, gen)
            self._freeze(model, likelihood, gen)
        return self

    def _train(self, model, likelihood, table: sp.csr_matrix, gen: torch.Generator) -> None:
        import gpytorch

        n_users = table.shape[0]
        model.train()
        likelihood.train()
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n_users)
        optimizer = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=self.lr)
        bar = tqdm(range(self.n_epochs), desc="Bayesian GPLVM", unit="epoch", disable=not self.verbose)
        for _ in bar:
            order = torch.randperm(n_users, generator=gen).numpy()
            for start in range(0, n_users, self.batch_size):
                batch = order[start:start + self.batch_size]
                rows = table[batch]
                target = np.full(rows.shape, np.nan, dtype=np.float32)
                target[np.repeat(np.arange(len(batch)), np.diff(rows.indptr)), rows.indices] = rows.data
                optimizer.zero_grad()
                try:
                    with gpytorch.settings.observation_nan_policy("fill"):
                        x = model.sample_latent_variable()[torch.as_tensor(batch)]
                        loss = -elbo(model(x), torch.from_numpy(target).T).sum()
                except (RuntimeError, ValueError) as exc:  # e.g. linear_operator's NanError, invalid q(x) scale
                    raise ValueError(f"the Bayesian GPLVM's training diverged ({type(exc).__name__}); "
                                     f"lower `lr` (now {self.lr})") from exc
                if not torch.isfinite(loss):
                    raise ValueError(f"the Bayesian GPLVM's training diverged (non-finite ELBO); lower `lr` (now {self.lr})")
                loss.backward()
                optimizer.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
        bar.close()

    def _freeze(self, model, likelihood, gen: torch.Generator) -> None:
        """Keep what predictions need: q(x), the kernel, the inducing posterior and fixed latent draws.
        Index n_users (n_items) holds a user (item) unknown at fit time: the prior."""
        from linear_operator.utils.cholesky import psd_safe_cholesky

        model.eval()
        likelihood.eval()
        strategy = model.variational_strategy
        with torch.no_grad():
            z = strategy.inducing_points.detach().clone()
            k_zz = model.covar_module(z).to_dense().double() + strategy.jitter_val * torch.eye(len(z), dtype=torch.float64)
            q_u = strategy.variational_distribution
            m = len(z)
            self.kernel_ = model.covar_module
            self.inducing_ = z
            self.jitter_ = float(strategy.jitter_val)  # GPyTorch adds it to k(x, x) as well
            self.chol_zz_ = psd_safe_cholesky(k_zz).float()  # as GPyTorch factors it: float64, more jitter if needed
            self.q_mean_ = torch.cat([q_u.mean.detach(), torch.zeros(1, m)])
            self.q_covar_ = torch.cat([q_u.covariance_matrix.detach(), torch.eye(m)[None]])
            self.item_const_ = torch.cat([model.mean_module.constant.detach().reshape(-1), torch.zeros(1)])
            self.noise_var_ = float(likelihood.noise.item())
            mu = model.X.q_mu.detach()
            sd = torch.nn.functional.softplus(model.X.q_log_sigma.detach())
            self.latent_mean_ = torch.cat([mu, torch.zeros(1, mu.shape[1])])
            self.latent_std_ = torch.cat([sd, torch.ones(1, sd.shape[1])])
            self.latent_draws_ = torch.randn(self.n_samples, *self.latent_mean_.shape, generator=gen)

    def latent_moments(self, x: torch.Tensor, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of f_item(x) for one latent point per pair (no observation noise):
        GPyTorch's whitened predictive, mean c + a'm, variance k(x, x) + jitter - a'a + a'Sa with
        a = L^-1 k(Z, x) and L L' = K_ZZ + jitter."""
        a = torch.linalg.solve_triangular(self.chol_zz_, self.kernel_(x, self.inducing_).to_dense().T, upper=False).T
        mean = (a * self.q_mean_[items]).sum(-1) + self.item_const_[items]
        var = self.kernel_(x, diag=True) + self.jitter_ - (a * a).sum(-1) + torch.einsum("pm,pmn,pn->p", a, self.q_covar_[items], a)
        return mean, var.clamp_min(0.0)

    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance for inner ids (-1: unknown), the latent draws as a mixture."""
        users, items = index[:, 0], index[:, 1]
        n_users, n_items = len(self.latent_mean_) - 1, len(self.item_const_) - 1
        uu = torch.as_tensor(np.where(users >= 0, users, n_users))
        ii = torch.as_tensor(np.where(items >= 0, items, n_items))
        mean, var = torch.empty(len(uu)), torch.empty(len(uu))
        with torch.no_grad():
            for start in range(0, len(uu), _CHUNK):
                u, i = uu[start:start + _CHUNK], ii[start:start + _CHUNK]
                draws = [self.latent_moments(self.latent_mean_[u] + self.latent_std_[u] * eps[u], i)
                         for eps in self.latent_draws_]
                means = torch.stack([d[0] for d in draws])
                mean[start:start + _CHUNK] = means.mean(0)
                var[start:start + _CHUNK] = (torch.stack([d[1] for d in draws]).mean(0)
                                             + means.var(0, unbiased=False))
        bias = (self.global_mean_ + np.where(users >= 0, self.user_bias_[np.maximum(users, 0)], 0.0)
                + np.where(items >= 0, self.item_bias_[np.maximum(items, 0)], 0.0))
        return mean.double().numpy() + bias, var.double().numpy() + (self.noise_var_ if include_noise else 0.0)
