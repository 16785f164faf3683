"""The fitted MW-GP: predictive mean and variance for any index tuples, including unseen levels.

Everything that depends only on the fitted parameters (Cholesky of K_mm, the projections w and
M, each factor's cold-start kernel expectations) is computed once, in float64, when the
posterior is built; a pattern of several unknown factors combines them with O(m^2) work.

Unseen levels (index -1) are integrated out: the unknown embedding is given the Gaussian that
matches the moments of the learned embeddings of that factor (their spread plus their average
Laplace posterior variance), its kernel factor is replaced by its closed-form expectations (psi
statistics), and the unknown bias and bilinear factor contribute their mean and variance (likewise).
With random
kernel vector k = outputscale * prod_f k_f and psi1 = E[k], Psi2 = E[k k^T]:

    E[f]   = psi1^T w
    Var[f] = outputscale + tr((M + w w^T) Psi2) - (psi1^T w)^2

The bilinear term p_u . q_i of the mean function (``mf_rank`` > 0) adds, with independent
Gaussians p ~ N(m_p, v_p) and q ~ N(m_q, v_q) per dimension (a known level: its own factor and,
with ``embedding_uncertainty``, its Laplace variance; an unseen one: the learned population's),

    E[p . q] = m_p . m_q,    Var[p . q] = sum_d (v_p m_q^2 + m_p^2 v_q + v_p v_q)_d

Fold-in (:mod:`.foldin`) needs a few more fitted quantities than prediction: the priors, the item
implicit factors and every level's q(s). ``from_module`` keeps them in :attr:`MWGPPosterior.foldin`;
:meth:`MWGPPosterior.with_extra_users` appends folded-in users as new user rows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .kernels import cross_kernel, rbf, rbf_expectations
from .linalg import safe_cholesky
from .model import MWGPModule

if TYPE_CHECKING:  # pragma: no cover
    from .foldin import FoldedUser

# every prediction GEMM has a multiple of _ROW_PAD and at most _ROW_BLOCK rows (MWGPPosterior._latent_pattern)
_ROW_PAD, _ROW_BLOCK = 64, 1024

# tensors that make up a posterior, in the order they are saved
_TENSORS = ("inducing", "lengthscale", "outputscale", "noise", "global_mean", "w", "M",
            "emb_mean", "emb_var", "bias_mean", "bias_var", "psi1", "psi2", "noise_scale_unseen",
            "mf_mean", "mf_var")


class MWGPPosterior:
    """Predictive distribution of a fitted MW-GP on the original rating scale.

    Build it with :meth:`from_module`; it is immutable afterwards. ``predict`` accepts an
    integer array of shape (n, F) of inner indices where -1 marks a level unseen in training.

    Attributes
    ----------
    foldin : dict or None
        What fold-in (:func:`mogp_surprise.core.foldin.fold_in`) needs besides the prediction
        tensors (``None`` for a state saved before fold-in existed): ``embedding_reg`` and
        ``bias_reg`` (the priors' precisions; ``None`` when ``from_module`` was not given them),
        ``use_biases``, ``heteroscedastic``, ``implicit`` (bools), ``item_implicit`` (the items'
        implicit factors y_j, (n_items, r), or ``None``), ``item_mf_implicit`` (the items' implicit
        bilinear factors y'_j, (n_items, k), or ``None``), ``mf_reg`` (``None`` for a state saved
        before the bilinear term), ``noise_offset_mean`` and ``noise_offset_logvar`` (every level's
        q(s), one tensor per factor; empty lists when homoscedastic) and ``noise_prior_logvar`` (log
        tau_f, (F,)).
    cold_users : bool Tensor of shape (n_users,) or None
        User rows predicted exactly as an unseen user (index -1): folded-in users with 0 ratings.
    mf_factors : list of Tensor
        The users' and items' bilinear factors P (n_users, k) and Q (n_items, k); empty when the
        model has no bilinear term (``mf_rank=0``).
    """

    def __init__(self, tensors: dict[str, Any], embeddings: list[Tensor], biases: list[Tensor],
                 rating_mean: float, rating_std: float, chunk_size: int = 65536,
                 noise_scales: list[Tensor] | None = None,
                 level_variances: tuple[list[Tensor], ...] | None = None,
                 foldin: dict[str, Any] | None = None, cold_users: Tensor | None = None,
                 mf_factors: list[Tensor] | None = None) -> None:
        for name in _TENSORS:
            setattr(self, name, tensors[name])
        self.embeddings = list(embeddings)
        self.biases = list(biases)
        self.mf_factors = list(mf_factors or [])
        # per level of each factor, the factor by which it multiplies the noise variance (1: homoscedastic)
        self.noise_scales = list(noise_scales) if noise_scales is not None else [
            torch.ones(e.shape[0], dtype=e.dtype, device=e.device) for e in self.embeddings]
        # Laplace variances of every level's GP input (n_f, r), bias (n_f,) and bilinear factor (n_f, k):
        # the estimation uncertainty of known users and items, added to their predictive variance (empty: none)
        self.input_var, self.level_bias_var, self.mf_level_var = (
            list(level_variances[0]), list(level_variances[1]),
            list(level_variances[2]) if len(level_variances) > 2 else []) \
            if level_variances is not None else ([], [], [])
        self.rating_mean = float(rating_mean)
        self.rating_std = float(rating_std)
        self.chunk_size = _check_chunk_size(chunk_size)
        self.foldin = dict(foldin) if foldin is not None else None
        self.cold_users = cold_users if cold_users is not None and bool(cold_users.any()) else None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    @torch.no_grad()
    def from_module(cls, module: MWGPModule, rating_mean: float, rating_std: float, jitter: float,
                    chunk_size: int = 65536,
                    level_variances: tuple[list[Tensor], ...] | None = None,
                    embedding_uncertainty: bool = True, embedding_reg: float | None = None,
                    bias_reg: float | None = None, mf_reg: float | None = None) -> "MWGPPosterior":
        """The posterior of a trained module.

        ``level_variances`` (from :func:`~.laplace.level_variances`): posterior variances of every
        level's GP input, bias and bilinear factor. Their averages are added to the spread of the learned inputs and
        biases that an unseen level is integrated over (law of total variance: the population spread
        of true embeddings is that of the point estimates plus their estimation uncertainty), and
        with ``embedding_uncertainty`` a known level's own variances enter its predictions'
        variance (linearised: J^T diag(v) J for the GP input, plus the bias variance).

        ``embedding_reg``, ``bias_reg`` and ``mf_reg``: the precisions of the embedding, bias and
        bilinear-factor priors the module was trained with; kept (with the item implicit factors and
        every level's q(s)) in :attr:`foldin` for :func:`~.foldin.fold_in`, which refuses a
        posterior built without them.
        """
        f64 = {"dtype": torch.float64}
        inputs, mf = module.input_tables()
        emb = [e.detach().to(**f64) for e in inputs]
        if module.use_biases:
            biases = [b.detach().to(**f64) for b in module.biases]
        else:
            biases = [torch.zeros(n, dtype=torch.float64, device=module.inducing.device)
                      for n in module.n_levels]
        z = module.inducing.detach().to(**f64)
        ls = module.lengthscale().detach().to(**f64)
        os_ = module.outputscale().detach().to(**f64)
        kmm = os_ * rbf(z, z, ls)
        chol = safe_cholesky(kmm, jitter, what="K_mm (inducing-point covariance)")
        eye = torch.eye(z.shape[0], dtype=torch.float64, device=z.device)
        linv_t = torch.linalg.solve_triangular(chol, eye, upper=False).T
        g = linv_t @ module.q_chol().detach().to(**f64)
        w = linv_t @ module.q_mean.detach().to(**f64)
        M = g @ g.T - linv_t @ linv_t.T
        M = 0.5 * (M + M.T)
        r = module.latent_dim
        mf = [t.detach().to(**f64) for t in mf]
        if mf and level_variances is not None and len(level_variances) < 3:
            raise ValueError("this module has a bilinear term: `level_variances` must hold the variances of "
                             "its factors too (laplace.level_variances returns them)")
        laplace = [None] * 3 if level_variances is None else level_variances
        emb_mean, emb_var = _population(emb, laplace[0], floor=1e-8)
        bias_mean, bias_var = _population(biases, laplace[1])
        mf_mean, mf_var = _population(mf, laplace[2]) if mf else (torch.zeros(0, 0, **f64, device=z.device),) * 2
        # expectations of each factor's kernel under its cold-start distribution
        psi = [rbf_expectations(emb_mean[f], emb_var[f], z[:, f * r:(f + 1) * r], ls[f * r:(f + 1) * r])
               for f in range(len(emb))]
        # E_q[exp(s)] of every level's log-noise offset; an unseen level's offset is integrated over the
        # distribution of the learned ones (the mixture of their q(s), as for embeddings and biases)
        if module.heteroscedastic:
            noise_scales = [torch.exp(m.detach().to(**f64) + 0.5 * torch.exp(lv.detach().to(**f64)))
                            for m, lv in zip(module.noise_offset_mean, module.noise_offset_logvar)]
            noise_scale_unseen = torch.stack([s.mean() for s in noise_scales])
        else:  # None: every level's factor is 1
            noise_scales = None
            noise_scale_unseen = torch.ones(len(module.n_levels), **f64, device=z.device)
        tensors = {
            "noise_scale_unseen": noise_scale_unseen,
            "inducing": z, "lengthscale": ls, "outputscale": os_, "noise": module.noise().detach().to(**f64),
            "global_mean": module.global_mean.detach().to(**f64), "w": w, "M": M,
            "emb_mean": emb_mean, "emb_var": emb_var, "bias_mean": bias_mean, "bias_var": bias_var,
            "psi1": torch.stack([p[0] for p in psi]), "psi2": torch.stack([p[1] for p in psi]),
            "mf_mean": mf_mean, "mf_var": mf_var,
        }
        own = None
        if level_variances is not None and embedding_uncertainty:
            own = tuple([v.detach().to(**f64) for v in part] for part in level_variances)
        foldin = {
            "embedding_reg": None if embedding_reg is None else float(embedding_reg),
            "bias_reg": None if bias_reg is None else float(bias_reg),
            "mf_reg": None if mf_reg is None else float(mf_reg),
            "use_biases": module.use_biases, "heteroscedastic": module.heteroscedastic,
            "implicit": module.implicit,
            "item_implicit": module.implicit_factors[0].detach().to(**f64) if module.implicit else None,
            "item_mf_implicit": module.mf_implicit[0].detach().to(**f64) if module.mf_implicit else None,
            "noise_offset_mean": [m.detach().to(**f64) for m in module.noise_offset_mean],
            "noise_offset_logvar": [lv.detach().to(**f64) for lv in module.noise_offset_logvar],
            "noise_prior_logvar": module.noise_prior_logvar.detach().to(**f64),
        }
        if module.heteroscedastic:  # the population of the users' log-noise offsets: mean, variance
            mu = module.noise_offset_mean[0].detach().to(**f64)
            var = torch.exp(module.noise_offset_logvar[0].detach().to(**f64))
            foldin["user_noise_population"] = torch.stack([mu.mean(), mu.var(unbiased=False) + var.mean()])
        post = cls(tensors, emb, biases, rating_mean, rating_std, chunk_size, noise_scales, own, foldin,
                   mf_factors=mf)
        return post.to(dtype=module.inducing.dtype)  # predict in the training dtype (float32: twice as fast)

    # -- properties ----------------------------------------------------------------------------
    @property
    def n_levels(self) -> tuple[int, ...]:
        return tuple(int(e.shape[0]) for e in self.embeddings)

    @property
    def n_factors(self) -> int:
        return len(self.embeddings)

    @property
    def latent_dim(self) -> int:
        return int(self.embeddings[0].shape[1])

    @property
    def mf_rank(self) -> int:
        """Rank k of the bilinear term p_u . q_i (0: none)."""
        return int(self.mf_factors[0].shape[1]) if self.mf_factors else 0

    @property
    def n_inducing(self) -> int:
        return int(self.inducing.shape[0])

    @property
    def device(self) -> torch.device:
        return self.inducing.device

    @property
    def dtype(self) -> torch.dtype:
        return self.inducing.dtype

    @property
    def noise_var(self) -> float:
        """Learned observation-noise variance on the rating scale."""
        return float(self.noise) * self.rating_std ** 2

    # -- conversion and persistence --------------------------------------------------------------
    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> "MWGPPosterior":
        """A copy on another device and/or floating dtype."""
        def conv(t: Tensor) -> Tensor:
            return t.to(device=device if device is not None else t.device, dtype=dtype or t.dtype)
        tensors = {name: conv(getattr(self, name)) for name in _TENSORS}
        return MWGPPosterior(tensors, [conv(e) for e in self.embeddings], [conv(b) for b in self.biases],
                             self.rating_mean, self.rating_std, self.chunk_size,
                             [conv(s) for s in self.noise_scales],
                             _map_tensors(self._level_variances(), conv),
                             _map_tensors(self.foldin, conv),
                             None if self.cold_users is None else self.cold_users.to(device=device),
                             [conv(t) for t in self.mf_factors])

    def _level_variances(self) -> tuple[list[Tensor], ...] | None:
        return (self.input_var, self.level_bias_var, self.mf_level_var) if self.input_var else None

    def state_dict(self) -> dict[str, Any]:
        """Plain dict of CPU tensors and numbers; inverse of :meth:`from_state_dict`."""
        out: dict[str, Any] = {name: getattr(self, name).detach().cpu() for name in _TENSORS}
        out["embeddings"] = [e.detach().cpu() for e in self.embeddings]
        out["biases"] = [b.detach().cpu() for b in self.biases]
        out["noise_scales"] = [s.detach().cpu() for s in self.noise_scales]
        out["input_var"] = [v.detach().cpu() for v in self.input_var]
        out["level_bias_var"] = [v.detach().cpu() for v in self.level_bias_var]
        out["mf_level_var"] = [v.detach().cpu() for v in self.mf_level_var]
        out["mf_factors"] = [t.detach().cpu() for t in self.mf_factors]
        out["foldin"] = _map_tensors(self.foldin, lambda t: t.detach().cpu())
        out["cold_users"] = None if self.cold_users is None else self.cold_users.cpu()
        out.update(rating_mean=self.rating_mean, rating_std=self.rating_std, chunk_size=self.chunk_size)
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "MWGPPosterior":
        state = dict(state)
        if "noise_scale_unseen" not in state and "embeddings" in state:
            # written before per-level noise existed: a homoscedastic model
            state["noise_scale_unseen"] = torch.ones(len(state["embeddings"]), dtype=state["embeddings"][0].dtype)
        if "mf_mean" not in state and "embeddings" in state:  # written before the bilinear term existed: none
            state["mf_mean"] = state["mf_var"] = torch.zeros(0, 0, dtype=state["embeddings"][0].dtype)
        missing = [k for k in (*_TENSORS, "embeddings", "biases", "rating_mean", "rating_std")
                   if k not in state]
        if missing:
            raise ValueError(f"posterior state is missing the entries {missing}")
        rank = int(state["mf_mean"].shape[-1]) if state["mf_mean"].numel() else 0
        if rank and len(state.get("mf_factors") or []) != 2:
            raise ValueError(f"posterior state has a rank-{rank} bilinear term but not its two factor tables "
                             "('mf_factors')")
        if rank and state.get("input_var") and len(state.get("mf_level_var") or []) != 2:
            raise ValueError("posterior state has Laplace variances ('input_var') but not those of its bilinear "
                             "factors ('mf_level_var')")
        return cls({k: state[k] for k in _TENSORS}, state["embeddings"], state["biases"],
                   state["rating_mean"], state["rating_std"], state.get("chunk_size", 65536),
                   state.get("noise_scales"),
                   (state["input_var"], state["level_bias_var"], state.get("mf_level_var", []))
                   if state.get("input_var") else None,
                   state.get("foldin"), state.get("cold_users"),  # absent in states saved before fold-in
                   state.get("mf_factors", []))

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(MWGPPosterior.from_state_dict(state).__dict__)

    # -- folded-in users ------------------------------------------------------------------------
    def with_extra_users(self, users: Sequence["FoldedUser"]) -> "MWGPPosterior":
        """A new posterior with folded-in users appended as user rows ``n_users, n_users + 1, ...``.

        Parameters
        ----------
        users : sequence of :class:`~.foldin.FoldedUser`
            From :func:`~.foldin.fold_in` or :func:`~.foldin.fold_in_many` on this posterior (or
            one with the same items and GP).

        Returns
        -------
        MWGPPosterior
            Everything else (items, GP, the cold-start distribution of index -1) is shared with
            ``self``, so :meth:`predict` and :func:`~.recommend.top_n` work unchanged. A user folded
            in from 0 ratings is predicted exactly as index -1. The users' Laplace variances enter
            their predictive variance only when this posterior keeps those of the trained users
            (``embedding_uncertainty=True``), so that all users are treated alike.
        """
        return self._with_user_rows(users, None)

    def with_replaced_users(self, rows: Sequence[int], users: Sequence["FoldedUser"]) -> "MWGPPosterior":
        """Like :meth:`with_extra_users`, but the folded-in users overwrite the user rows ``rows``
        (e.g. a known user re-folded with extra ratings keeps their index)."""
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
            raise ValueError(f"`rows` must be a 1-d array of user indices, got {rows!r}")
        n_users = self.n_levels[0] if self.n_factors == 2 else 0
        if rows.size and (rows.min() < 0 or rows.max() >= n_users):
            raise ValueError(f"`rows` must lie in [0, {n_users}), got range [{rows.min()}, {rows.max()}]")
        if np.unique(rows).size != rows.size:
            raise ValueError("`rows` must not repeat a user")
        if len(users) != rows.size:
            raise ValueError(f"`rows` has {rows.size} entries but {len(users)} users were given")
        return self._with_user_rows(users, rows.astype(np.int64))

    def _with_user_rows(self, users: Sequence["FoldedUser"], rows: np.ndarray | None) -> "MWGPPosterior":
        if self.n_factors != 2:
            raise ValueError(f"folded-in users need a (user, item) model; this one has {self.n_factors} factors")
        users = list(users)
        r = self.latent_dim
        for n, u in enumerate(users):
            if not all(hasattr(u, a) for a in ("input", "input_var", "bias", "bias_var", "noise_scale",
                                               "noise_offset_mean", "noise_offset_var", "n_ratings")):
                raise ValueError(f"`users[{n}]` is not a FoldedUser (from mogp_surprise.core.foldin.fold_in), "
                                 f"got {type(u).__name__}")
            if np.shape(u.input) != (r,) or np.shape(u.input_var) != (r,):
                raise ValueError(f"`users[{n}]` has a GP input of shape {np.shape(u.input)}; this posterior's "
                                 f"latent dimension is {r}")
            # (a FoldedUser pickled before the bilinear term existed has no such fields: none)
            factor = getattr(u, "mf_factor", np.zeros(0))
            if np.shape(factor) != (self.mf_rank,) or np.shape(getattr(u, "mf_factor_var", factor)) != (self.mf_rank,):
                raise ValueError(f"`users[{n}]` has a bilinear factor of shape {np.shape(factor)}; this "
                                 f"posterior's mf_rank is {self.mf_rank}")

        def put(table: Tensor, values: list) -> Tensor:
            """``table`` with the users' ``values`` appended (or written to ``rows``)."""
            vals = torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=table.dtype, device=table.device)
            vals = vals.reshape(len(users), *table.shape[1:])
            if rows is None:
                return torch.cat([table, vals])
            out = table.clone()
            out[torch.as_tensor(rows, device=table.device)] = vals
            return out

        def pick(name: str) -> list:
            return [getattr(u, name) for u in users]

        embeddings = [put(self.embeddings[0], pick("input")), self.embeddings[1]]
        biases = [put(self.biases[0], pick("bias")), self.biases[1]]
        noise_scales = [put(self.noise_scales[0], pick("noise_scale")), self.noise_scales[1]]
        mf_factors = [put(self.mf_factors[0], pick("mf_factor")), self.mf_factors[1]] if self.mf_factors else []
        level_variances = None
        if self.input_var:
            level_variances = ([put(self.input_var[0], pick("input_var")), self.input_var[1]],
                               [put(self.level_bias_var[0], pick("bias_var")), self.level_bias_var[1]],
                               [put(self.mf_level_var[0], pick("mf_factor_var")), self.mf_level_var[1]]
                               if self.mf_level_var else [])
        foldin = None
        if self.foldin is not None:
            foldin = dict(self.foldin)
            if foldin["heteroscedastic"]:
                means, logvars = foldin["noise_offset_mean"], foldin["noise_offset_logvar"]
                foldin["noise_offset_mean"] = [put(means[0], pick("noise_offset_mean")), means[1]]
                foldin["noise_offset_logvar"] = [
                    put(logvars[0], [np.log(max(float(v), 1e-300)) for v in pick("noise_offset_var")]), logvars[1]]
        cold = torch.tensor([int(u.n_ratings) == 0 for u in users], dtype=torch.bool, device=self.device)
        old_cold = self.cold_users if self.cold_users is not None else torch.zeros(
            self.n_levels[0], dtype=torch.bool, device=self.device)
        if rows is None:
            cold_users = torch.cat([old_cold, cold])
        else:
            cold_users = old_cold.clone()
            cold_users[torch.as_tensor(rows, device=self.device)] = cold
        tensors = {name: getattr(self, name) for name in _TENSORS}
        return MWGPPosterior(tensors, embeddings, biases, self.rating_mean, self.rating_std, self.chunk_size,
                             noise_scales, level_variances, foldin, cold_users, mf_factors)

    # -- prediction ------------------------------------------------------------------------------
    def predict(self, index: np.ndarray, include_noise: bool = True,
                chunk_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance on the rating scale.

        Parameters
        ----------
        index : int ndarray of shape (n, F)
            Inner indices; -1 marks a level unseen in training.
        include_noise : bool, default=True
            Variance of the observed rating y = f + noise (True) or of the latent f (False).
        chunk_size : int, optional
            Pairs per chunk (bounds memory); defaults to the fitted ``chunk_size``.

        Returns
        -------
        mean, var : ndarray of shape (n,), float64
        """
        index = np.asarray(index)
        if index.ndim != 2 or index.shape[1] != self.n_factors:
            raise ValueError(f"`index` must have shape (n, {self.n_factors}), got {index.shape}")
        if index.size and not np.issubdtype(index.dtype, np.integer):
            raise ValueError(f"`index` must hold integers, got dtype {index.dtype}")
        for f, n_levels in enumerate(self.n_levels):
            col = index[:, f]
            if col.size and (col.min() < -1 or col.max() >= n_levels):
                raise ValueError(f"`index[:, {f}]` must lie in [-1, {n_levels}) (-1 = unseen in training), got "
                                 f"range [{col.min()}, {col.max()}]")
        n = index.shape[0]
        mean = np.empty(n, dtype=np.float64)
        var = np.empty(n, dtype=np.float64)
        step = self.chunk_size if chunk_size is None else _check_chunk_size(chunk_size)
        for start in range(0, n, step):
            chunk = torch.as_tensor(index[start:start + step], dtype=torch.long, device=self.device)
            m, v = self.moments(chunk, include_noise)
            mean[start:start + step] = m.double().cpu().numpy()
            var[start:start + step] = v.double().cpu().numpy()
        return mean, var

    @torch.no_grad()
    def moments(self, index: Tensor, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """Like :meth:`predict` for one chunk of a (validated) long tensor, returning tensors on the device."""
        if self.cold_users is not None:  # folded-in users without ratings: exactly the cold-start user
            users = index[:, 0]
            index = index.clone()
            index[:, 0] = torch.where(self.cold_users[users.clamp_min(0)], -1, users)
        m, v = self._latent_chunk(index)
        if include_noise:
            v = v + self.noise_var_at(index)
        return m * self.rating_std + self.rating_mean, v * self.rating_std ** 2

    def noise_var_at(self, index: Tensor) -> Tensor:
        """Expected noise variance E[sigma_n^2] of each index tuple (standardised units), shape (n,).

        sigma^2 times, for every factor, E_q[exp(s)] of the level's log-noise offset, or for a level
        unseen in training (-1) its average over the levels seen in training (the offset integrated
        over the mixture of the learned q(s), like the cold-start embedding and bias).
        """
        out = self.noise.expand(index.shape[0])
        for f, scales in enumerate(self.noise_scales):
            col = index[:, f]
            out = out * torch.where(col >= 0, scales[col.clamp_min(0)], self.noise_scale_unseen[f])
        return out

    def _latent_chunk(self, index: Tensor) -> tuple[Tensor, Tensor]:
        n_factors = self.n_factors
        unknown = index < 0
        code = (unknown.long() * (2 ** torch.arange(n_factors, device=index.device))).sum(1)
        codes = torch.unique(code).tolist()
        mean = torch.empty(index.shape[0], dtype=self.dtype, device=self.device)
        var = torch.empty_like(mean)
        for c in codes:
            rows = None if len(codes) == 1 else (code == c).nonzero().squeeze(1)
            sub = index if rows is None else index[rows]
            m, v = self._latent_pattern(sub, c)
            if rows is None:
                mean, var = m, v
            else:
                mean[rows], var[rows] = m, v
        return mean, var

    def _latent_pattern(self, index: Tensor, code: int) -> tuple[Tensor, Tensor]:
        """Moments of f for rows that share one pattern of unknown factors.

        The rows are padded to a multiple of ``_ROW_PAD`` (copies of the first row) and computed in
        blocks of at most ``_ROW_BLOCK`` rows: BLAS sums in another order for products with few
        rows, so without the padding a pair's prediction would change in its last bits with the
        rows it is computed with (``predict(u, i)`` vs ``test(testset)``; scikit-learn's subset
        invariance). With it every prediction is bit-identical whatever its batch, float32 too
        (``tests/core/test_posterior.py``); cache-sized blocks are also faster than one product.
        """
        n = index.shape[0]
        pad = -n % _ROW_PAD
        if pad:
            index = torch.cat([index, index[:1].expand(pad, -1)])
        parts = [self._latent_rows(index[start:start + _ROW_BLOCK], code) for start in range(0, n + pad, _ROW_BLOCK)]
        if len(parts) == 1:
            mean, var = parts[0]
        else:
            mean, var = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        return mean[:n], var[:n]

    def _latent_rows(self, index: Tensor, code: int) -> tuple[Tensor, Tensor]:
        r = self.latent_dim
        known = [f for f in range(self.n_factors) if not code >> f & 1]
        unknown = [f for f in range(self.n_factors) if code >> f & 1]
        if known:
            x = torch.cat([self.embeddings[f][index[:, f]] for f in known], dim=-1)
            if unknown:
                dims = torch.cat([torch.arange(f * r, (f + 1) * r, device=self.device) for f in known])
                z, ls = self.inducing[:, dims], self.lengthscale[dims]
            else:
                z, ls = self.inducing, self.lengthscale
            kk = cross_kernel(x, z, ls, self.outputscale)  # one GEMM + exp
        else:
            kk = self.outputscale * torch.ones(index.shape[0], self.n_inducing, dtype=self.dtype,
                                               device=self.device)
        if unknown:  # (M + w w^T) ⊙ Psi2_U and w ⊙ psi1_U: m x m work per chunk and pattern
            quad = self.M + torch.outer(self.w, self.w)
            lin = self.w
            for f in unknown:
                quad = quad * self.psi2[f]
                lin = lin * self.psi1[f]
        else:
            quad, lin = self.M, self.w
        proj = kk @ lin
        mean = self.global_mean + proj
        var = self.outputscale + ((kk @ quad) * kk).sum(-1)
        if known and self.input_var:  # estimation uncertainty of the known inputs and biases (delta method)
            kw = kk * lin
            grad = (kw @ z - x * kw.sum(-1, keepdim=True)) / (ls * ls)  # d E[f] / d x
            v = torch.cat([self.input_var[f][index[:, f]] for f in known], dim=-1)
            var = var + (grad * grad * v).sum(-1)
            for f in known:
                var = var + self.level_bias_var[f][index[:, f]]
        for f in known:
            mean = mean + self.biases[f][index[:, f]]
        if unknown:
            var = var - proj ** 2
            for f in unknown:
                mean = mean + self.bias_mean[f]
                var = var + self.bias_var[f]
        if self.mf_factors:
            mf_mean, mf_var = self._bilinear_rows(index, code)
            mean, var = mean + mf_mean, var + mf_var
        floor = torch.finfo(self.dtype).eps * self.outputscale
        return mean, torch.maximum(var, floor)


    def _bilinear_rows(self, index: Tensor, code: int) -> tuple[Tensor, Tensor]:
        """Mean and variance of p_u . q_i (module docstring) for rows that share one pattern."""
        moments = []
        for f in (0, 1):
            if code >> f & 1:  # unseen: the learned population's mean and variance
                moments.append((self.mf_mean[f], self.mf_var[f]))
            else:
                rows = index[:, f]
                moments.append((self.mf_factors[f][rows], self.mf_level_var[f][rows] if self.mf_level_var else None))
        (mp, vp), (mq, vq) = moments
        mean = (mp * mq).sum(-1).expand(index.shape[0])
        var = torch.zeros_like(mean)
        if vp is not None:
            var = var + (vp * mq * mq).sum(-1)
        if vq is not None:
            var = var + (vq * mp * mp).sum(-1)
        if vp is not None and vq is not None:
            var = var + (vp * vq).sum(-1)
        return mean, var


def _population(tables: list[Tensor], laplace: list[Tensor] | None, floor: float = 0.0) -> tuple[Tensor, Tensor]:
    """Mean and variance, per factor, of the learned values of its levels (embeddings, biases or bilinear
    factors): their spread (at least ``floor``) plus their average Laplace variance, if given (law of total
    variance: point estimates are shrunk towards the prior, the population of true values is wider)."""
    mean = torch.stack([t.mean(0) for t in tables])
    var = torch.stack([t.var(0, unbiased=False) for t in tables]).clamp_min(floor)
    if laplace is not None:
        var = var + torch.stack([v.to(var).mean(0) for v in laplace])
    return mean, var


def _map_tensors(value: Any, fn) -> Any:
    """``value`` (nested dicts/lists of tensors and plain values) with ``fn`` applied to every tensor."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value)
    return value


def _check_chunk_size(chunk_size) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"`chunk_size` must be an int >= 1, got {chunk_size!r}")
    return int(chunk_size)
