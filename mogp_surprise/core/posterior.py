"""The fitted MW-GP: predictive mean and variance for any index tuples, including unseen levels.

Everything that depends only on the fitted parameters (Cholesky of K_mm, the projections w and
M, each factor's cold-start kernel expectations) is computed once, in float64, when the
posterior is built; a pattern of several unknown factors combines them with O(m^2) work.

Unseen levels (index -1) are integrated out over the population of the learned levels; the
predictive moments of every pattern of known and unseen levels are derived in :mod:`.predictive`.
Saving and loading, and the user rows of folded-in users, are in :mod:`.posterior_state`.

Fold-in (:mod:`.foldin`) needs a few more fitted quantities than prediction: the priors, the item
implicit factors and every level's q(s). ``from_module`` keeps them in :attr:`MWGPPosterior.foldin`;
:meth:`MWGPPosterior.with_extra_users` appends folded-in users as new user rows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .kernels import rbf_expectations
from .linalg import inducing_terms
from .model import MWGPModule
from .errors import check_int
from .posterior_state import TENSORS, check_rows, posterior_state, state_args, with_user_rows
from .predictive import cold_start_scales, latent_moments, population

if TYPE_CHECKING:  # pragma: no cover
    from .foldin import FoldedUser


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
    cold_scale : Tensor of shape (2^F,)
        The factor of the latent variance of each pattern of unseen levels (entry ``code``: bit f set
        when factor f is unseen; entry 0 is 1), from :meth:`with_cold_start_calibration`; all 1 for a
        posterior not calibrated (``from_module`` alone, or a state saved before the calibration).
    """

    def __init__(self, tensors: dict[str, Any], embeddings: list[Tensor], biases: list[Tensor],
                 rating_mean: float, rating_std: float, chunk_size: int = 65536,
                 noise_scales: list[Tensor] | None = None,
                 level_variances: tuple[list[Tensor], ...] | None = None,
                 foldin: dict[str, Any] | None = None, cold_users: Tensor | None = None,
                 mf_factors: list[Tensor] | None = None) -> None:
        for name in TENSORS:
            setattr(self, name, tensors[name])
        self.embeddings = list(embeddings)
        self.biases = list(biases)
        self.mf_factors = list(mf_factors or [])
        # per level of each factor, the factor by which it multiplies the noise variance (1: homoscedastic)
        self.noise_scales = list(noise_scales) if noise_scales is not None else [
            torch.ones(e.shape[0], dtype=e.dtype, device=e.device) for e in self.embeddings]
        # Laplace variances of every level's GP input (n_f, r), bias (n_f,) and bilinear factor (n_f, k):
        # the estimation uncertainty of known users and items, added to their predictive variance (empty: none)
        # (two parts, without the bilinear factors', in states saved by older versions)
        parts = [*(level_variances if level_variances is not None else ([], [])), []]
        self.input_var, self.level_bias_var, self.mf_level_var = (list(p) for p in parts[:3])
        self.rating_mean = float(rating_mean)
        self.rating_std = float(rating_std)
        self.chunk_size = check_int("chunk_size", chunk_size, 1)
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
        def f64(t: Tensor) -> Tensor:
            return t.detach().to(torch.float64)
        inputs, mf = module.input_tables()
        emb, mf = [f64(e) for e in inputs], [f64(t) for t in mf]
        z, ls, os_ = f64(module.inducing), f64(module.lengthscale()), f64(module.outputscale())
        new = {"dtype": torch.float64, "device": z.device}
        biases = [f64(b) for b in module.biases] if module.use_biases else [torch.zeros(n, **new)
                                                                           for n in module.n_levels]
        # w and M as in training (linalg.inducing_terms), here in float64
        w, M, _ = inducing_terms(z, ls, os_, f64(module.q_mean), f64(module.q_sqrt), jitter,
                                 what="K_mm (inducing-point covariance)")
        M = 0.5 * (M + M.T)
        r = module.latent_dim
        if mf and level_variances is not None and len(level_variances) < 3:
            raise ValueError("this module has a bilinear term: `level_variances` must hold the variances of "
                             "its factors too (laplace.level_variances returns them)")
        laplace = [None] * 3 if level_variances is None else level_variances
        emb_mean, emb_var = population(emb, laplace[0], floor=1e-8)
        bias_mean, bias_var = population(biases, laplace[1])
        mf_mean, mf_var = population(mf, laplace[2]) if mf else (torch.zeros(0, 0, **new),) * 2
        # expectations of each factor's kernel under its cold-start distribution
        psi = [rbf_expectations(emb_mean[f], emb_var[f], z[:, f * r:(f + 1) * r], ls[f * r:(f + 1) * r])
               for f in range(len(emb))]
        # E_q[exp(s)] of every level's log-noise offset; an unseen level's offset is integrated over the
        # distribution of the learned ones (the mixture of their q(s), as for embeddings and biases)
        if module.heteroscedastic:
            noise_scales = [torch.exp(f64(m) + 0.5 * torch.exp(f64(lv)))
                            for m, lv in zip(module.noise_offset_mean, module.noise_offset_logvar)]
            noise_scale_unseen = torch.stack([s.mean() for s in noise_scales])
        else:  # None: every level's factor is 1
            noise_scales, noise_scale_unseen = None, torch.ones(len(module.n_levels), **new)
        tensors = {
            "noise_scale_unseen": noise_scale_unseen,
            "inducing": z, "lengthscale": ls, "outputscale": os_, "noise": f64(module.noise()),
            "global_mean": f64(module.global_mean), "w": w, "M": M,
            "emb_mean": emb_mean, "emb_var": emb_var, "bias_mean": bias_mean, "bias_var": bias_var,
            "psi1": torch.stack([p[0] for p in psi]), "psi2": torch.stack([p[1] for p in psi]),
            "mf_mean": mf_mean, "mf_var": mf_var,
            # 1 for every pattern until :meth:`with_cold_start_calibration`
            "cold_scale": torch.ones(2 ** len(emb), **new),
        }
        own = (tuple([f64(v) for v in part] for part in level_variances)
               if level_variances is not None and embedding_uncertainty else None)
        regs = {"embedding_reg": embedding_reg, "bias_reg": bias_reg, "mf_reg": mf_reg}
        foldin = {
            **{name: None if reg is None else float(reg) for name, reg in regs.items()},
            "use_biases": module.use_biases, "heteroscedastic": module.heteroscedastic,
            "implicit": module.implicit,
            "item_implicit": f64(module.implicit_factors[0]) if module.implicit else None,
            "item_mf_implicit": f64(module.mf_implicit[0]) if module.mf_implicit else None,
            "noise_offset_mean": [f64(m) for m in module.noise_offset_mean],
            "noise_offset_logvar": [f64(lv) for lv in module.noise_offset_logvar],
            "noise_prior_logvar": f64(module.noise_prior_logvar),
        }
        if module.heteroscedastic:  # the population of the users' log-noise offsets: mean, variance
            mu, var = f64(module.noise_offset_mean[0]), torch.exp(f64(module.noise_offset_logvar[0]))
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
            return t.to(device=device if device is not None else t.device,
                        dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype)
        return MWGPPosterior.from_state_dict(posterior_state(self, conv))

    def state_dict(self) -> dict[str, Any]:
        """Plain dict of CPU tensors and numbers; inverse of :meth:`from_state_dict`."""
        return posterior_state(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "MWGPPosterior":
        """The posterior of a :meth:`state_dict` (also one saved by an older version)."""
        return cls(*state_args(state))

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(MWGPPosterior.from_state_dict(state).__dict__)

    def with_cold_start_calibration(self, index: np.ndarray, ratings: np.ndarray,
                                    bias_var: list[Tensor]) -> "MWGPPosterior":
        """A new posterior whose predictions for unseen levels are calibrated on the training ratings.

        Every training rating is predicted as if its user (item, or both) were unseen, and the latent
        variance of each such pattern is scaled so that its leave-one-out residuals are matched
        (:func:`~.predictive.cold_start_scales`; never narrowed). ``index`` (n, F) and ``ratings`` (n,)
        are the training data, ``bias_var`` the Laplace variances of every level's bias
        (:func:`~.laplace.level_variances`). The factors are kept in :attr:`cold_scale`, entry ``code``
        for the pattern whose bit f is set when factor f is unseen.
        """
        state = posterior_state(self, lambda t: t)
        state["cold_scale"] = cold_start_scales(self, np.asarray(index), np.asarray(ratings), bias_var)
        return MWGPPosterior.from_state_dict(state)

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
        return with_user_rows(self, users, None)

    def with_replaced_users(self, rows: Sequence[int], users: Sequence["FoldedUser"]) -> "MWGPPosterior":
        """Like :meth:`with_extra_users`, but the folded-in users overwrite the user rows ``rows``
        (e.g. a known user re-folded with extra ratings keeps their index)."""
        n_users = self.n_levels[0] if self.n_factors == 2 else 0
        return with_user_rows(self, users, check_rows(rows, n_users, len(users)))

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
        step = self.chunk_size if chunk_size is None else check_int("chunk_size", chunk_size, 1)
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
        m, v = latent_moments(self, index)
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
