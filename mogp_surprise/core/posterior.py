"""The fitted MW-GP: predictive mean and variance for any index tuples, including unseen levels.

A :class:`MWGPPosterior` wraps a typed :class:`~.state.PosteriorState` (the fitted GP and every term's
fitted tables) and the quantities derived from it once (the kernel expectations of every factor's
unseen-level population, in float64). Unseen levels (index -1) are integrated out over the population
of the learned levels; the predictive formulas are in :mod:`.predictive`, the cold-start calibration in
:mod:`.calibration`, fold-in of new users in :mod:`.foldin` (:meth:`MWGPPosterior.with_extra_users`
appends them as user rows).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .calibration import cold_start_scales
from .config import resolve_device, resolve_dtype
from .errors import check_bool, check_int
from .laplace import LaplaceVariances
from .model import MWGPModule
from .precision import rating_scale, serving_dtype
from .predictive import catalogue_moments, predictive_moments
from .sampling import catalogue_draw, weight_sampler
from .serving import pair_predictor
from .state import (FittedTable, FittedTerm, FoldedUser, PosteriorState, check_folded_users, check_user_rows,
                    map_reusing, shared_part)


class MWGPPosterior:
    """Predictive distribution of a fitted MW-GP on the original rating scale.

    Build it with :meth:`from_module` (or from a saved state, :meth:`from_state_dict`; ``state``: a
    :class:`~.state.PosteriorState`); it is immutable. ``predict`` accepts an integer array of shape (n, F) of
    inner indices where -1 marks a level unseen in training.
    """

    def __init__(self, state: PosteriorState, *, _psi: list | None = None) -> None:
        check_int("chunk_size", state.chunk_size, 1)
        if state.cold_users is not None and not bool(state.cold_users.any()):
            state = replace(state, cold_users=None)
        self.state = state
        self._n_levels = state.n_levels
        if _psi is not None:  # a posterior with the same GP and populations (folded-in users added): its psi
            self.psi = _psi
            return
        inputs, gp = state.term("gp_input"), state.gp
        gp64 = replace(gp, inducing=gp.inducing.double(), lengthscale=gp.lengthscale.double())
        # the kernel expectations of every factor's unseen-level population, in float64 from the stored values
        self.psi = []
        for f in range(len(inputs.term.n_levels)):
            mean, var = inputs.tables[f"embedding_{f}"].population
            psi1, psi2 = gp64.expectations(f, mean.double(), var.double())
            self.psi.append((psi1.to(gp.w.dtype), psi2.to(gp.w.dtype)))

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    @torch.no_grad()
    def from_module(cls, module: MWGPModule, rating_mean: float, rating_std: float, jitter: float,
                    chunk_size: int = 65536, laplace: LaplaceVariances | None = None,
                    embedding_uncertainty: bool = True) -> "MWGPPosterior":
        """The posterior of a trained module.

        ``laplace`` (from :func:`~.laplace.laplace_variances`): the Laplace variance of every row of the
        tables that have one. Their averages widen the population an unseen level is integrated over (law of
        total variance), and with ``embedding_uncertainty`` a known level's own variances enter its
        predictions' variance. Built in float64, then cast to the training dtype (float32 predicts twice as
        fast).
        """
        def f64(t: Tensor) -> Tensor:
            return t.detach().to(torch.float64)
        effective = module.effective_tables()
        terms = []
        for term in module.terms:
            tables = {}
            for spec in term.specs.values():
                key = (term.name, spec.name)
                if spec.feeds is not None:  # implicit feedback from items into users: fold-in needs it
                    if term.specs[spec.feeds].factor == 0:
                        tables[spec.name] = FittedTable(f64(term.table(spec.name)))
                    continue
                if spec.variance_of is not None:  # a variational variance: its table's variance (``laplace``)
                    continue
                values = f64(effective[key])
                variance = f64(laplace[key]) if laplace is not None and key in laplace else None
                tables[spec.name] = FittedTable(values, variance if embedding_uncertainty else None,
                                                term.population(spec, values, variance))
            definition = type(term)(module.n_levels, term.options, parameters=False)
            extras = {k: f64(v) if v.is_floating_point() else v.detach() for k, v in term.fitted_extras().items()}
            terms.append(FittedTerm(definition, tables, extras))
        state = PosteriorState(float(rating_mean), float(rating_std), f64(module.global_mean),
                               f64(module.noise_variance()), module.gp.fitted(jitter), terms,
                               torch.ones(2 ** module.n_factors, dtype=torch.float64, device=module.device),
                               None, int(chunk_size))
        return serving_dtype(cls(state), module.dtype)

    # -- properties -----------------------------------------------------------------------------------------
    @property
    def n_levels(self) -> tuple[int, ...]:
        return self._n_levels

    @property
    def n_factors(self) -> int:
        return len(self.n_levels)

    @property
    def latent_dim(self) -> int:
        return self.state.gp.input_width

    @property
    def n_inducing(self) -> int:
        return self.state.gp.n_inducing

    @property
    def device(self) -> torch.device:
        return self.state.gp.w.device

    @property
    def dtype(self) -> torch.dtype:
        return self.state.gp.w.dtype

    @property
    def chunk_size(self) -> int:
        return self.state.chunk_size

    @property
    def rating_mean(self) -> float:
        return self.state.rating_mean

    @property
    def rating_std(self) -> float:
        return self.state.rating_std

    @property
    def cold_scale(self) -> Tensor:
        return self.state.cold_scale

    @property
    def cold_users(self) -> Tensor | None:
        return self.state.cold_users

    @property
    def noise_var(self) -> float:
        """The noise variance sigma^2 on the rating scale (before per-level offsets)."""
        return float(self.state.noise_variance) * self.rating_std ** 2

    def term(self, name: str) -> FittedTerm | None:
        """The fitted term ``name`` (e.g. ``"bias"``), or None when the model has none."""
        return self.state.term(name)

    # -- conversion and persistence ---------------------------------------------------------------------------
    def to(self, device: Any = None, dtype: torch.dtype | str | None = None) -> "MWGPPosterior":
        """A copy on another device (named as ``fit``'s) and/or floating dtype ("float32", "float64")."""
        device, dtype = (None if device is None else resolve_device(device)), dtype and resolve_dtype(dtype)

        def conv(t: Tensor) -> Tensor:
            return t.to(device=device if device is not None else t.device,
                        dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype)
        return MWGPPosterior(self.state.map(conv))

    def state_dict(self) -> dict[str, Any]:
        """Plain dict of CPU tensors, numbers, strings (:data:`~.state.FORMAT_VERSION`); see :meth:`from_state_dict`."""
        return self.state.to_dict()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "MWGPPosterior":
        """The posterior of a :meth:`state_dict` (also one saved by an older version: migrated)."""
        return cls(PosteriorState.from_dict(state))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.state_dict(), "pickled_on": str(self.device)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle onto the device it was pickled on where this machine has it (else the CPU): a copy
        predicts as the original (float32 kernels of two devices differ in the last digits)."""
        state = dict(state)
        device = _available(state.pop("pickled_on", "cpu"))
        post = MWGPPosterior.from_state_dict(state)
        self.__dict__.update((post if device.type == "cpu" else post.to(device=device)).__dict__)

    def with_cold_start_calibration(self, index: np.ndarray, ratings: np.ndarray,
                                    laplace: LaplaceVariances) -> "MWGPPosterior":
        """A new posterior whose predictions for unseen levels are calibrated on the training ratings
        (:func:`~.calibration.cold_start_scales`; ``laplace``: the Laplace variances of the fit)."""
        scales = cold_start_scales(self, np.asarray(index), np.asarray(ratings), laplace)
        return MWGPPosterior(replace(self.state, cold_scale=scales))

    # -- folded-in users --------------------------------------------------------------------------------------
    def with_extra_users(self, users: Sequence[FoldedUser]) -> "MWGPPosterior":
        """A new posterior with folded-in users appended as user rows ``n_users, n_users + 1, ...``.

        Everything else (items, GP, the cold-start distribution of index -1) is shared with ``self``, so
        :meth:`predict` and :func:`~.recommend.top_n` work unchanged. A user folded in from 0 ratings is
        predicted exactly as index -1. The users' Laplace variances enter their predictive variance only when
        this posterior keeps those of the trained users (``embedding_uncertainty=True``), so that all users
        are treated alike; they are multiplied by the calibration factor of an unseen user (``cold_scale[1]``),
        since fold-in starts from the population prior whose latent variance the cold start's factor scales.
        """
        return self._with_user_rows(users, None)

    def with_replaced_users(self, rows: Sequence[int], users: Sequence[FoldedUser]) -> "MWGPPosterior":
        """Like :meth:`with_extra_users`, but the folded-in users overwrite the user rows ``rows`` (e.g. a
        known user re-folded with extra ratings keeps their index)."""
        n_users = self.n_levels[0] if self.n_factors == 2 else 0
        return self._with_user_rows(users, check_user_rows(rows, n_users, len(users)))

    def _with_user_rows(self, users: Sequence[FoldedUser], rows: np.ndarray | None) -> "MWGPPosterior":
        users = list(users)
        check_folded_users(self.state, users)

        def put(table: Tensor, values: list) -> Tensor:
            vals = torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=table.dtype, device=table.device)
            vals = vals.reshape(len(users), *table.shape[1:])
            if rows is None:
                return torch.cat([table, vals])
            out = table.clone()
            out[torch.as_tensor(rows, device=table.device)] = vals
            return out

        # a folded-in user's Laplace variances are scaled by the calibration factor of an unseen user (calibration.py):
        # fold-in starts from the population prior whose latent variance that factor scales, so the user's intervals
        # do not narrow at the first answer by more than the answer teaches (ML-100K, 5 seeds: 90 % coverage after 1
        # to 5 answers 0.86-0.87 -> 0.87-0.88); the factor's weight fades as the answers shrink these variances. Not an
        # update of a known user (FoldedUser.updated): its prior was the user's own posterior, not the population
        widen = float(self.cold_scale[1])  # pattern 1: factor 0 (the user) unseen (predictive.predictive_moments)
        terms = []
        for fitted in self.state.terms:
            if fitted.term.reads_pairs:  # what the users rated
                fitted = replace(fitted, extras=fitted.term.extras_with_users(
                    fitted.extras, [u.answers for u in users], rows, self.n_levels[0]))
            tables = dict(fitted.tables)
            for spec in fitted.term.user_tables:
                key, old = f"{fitted.name}.{spec.name}", tables[spec.name]
                variance = None if old.laplace_var is None else put(old.laplace_var, [
                    np.asarray(u.variances[key], dtype=np.float64) * (1.0 if getattr(u, 'updated', False) else widen)
                    for u in users])
                tables[spec.name] = replace(old, values=put(old.values, [u.rows[key] for u in users]),
                                            laplace_var=variance)
            terms.append(replace(fitted, tables=tables))
        def flags(old: Tensor | None, values: list) -> Tensor:  # a per-user flag with the users' values put in
            return put(torch.zeros(self.n_levels[0], dtype=torch.bool, device=self.device) if old is None else old,
                       values)
        cold = flags(self.state.cold_users, [int(u.n_ratings) == 0 for u in users])
        folded = flags(self.state.folded_users, [not getattr(u, "updated", False) for u in users])
        # the GP and the unseen levels' populations are unchanged: their kernel expectations too (1.2 ms on ML-1M)
        post = MWGPPosterior(replace(self.state, terms=terms, cold_users=cold, folded_users=folded), _psi=self.psi)
        memo = self.__dict__.get("_float64", self.__dict__.get("_float64_of"))
        if memo is not None:  # its pair path converts only the tables that changed (pair_path)
            post._float64_of = shared_part(memo, post.state)
        basis = self.__dict__.get("_pair_basis", self.__dict__.get("_pair_basis_of"))
        if basis is not None:  # nor forms the float64 psi or checks the terms again
            post._pair_basis_of = basis
        return post

    # -- prediction -----------------------------------------------------------------------------------------
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
        index, include_noise = np.asarray(index), check_bool("include_noise", include_noise)
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

    def predict_pair(self, index: Sequence[int], include_noise: bool = True) -> tuple[float, float]:
        """:meth:`predict` for one index tuple, as floats, in microseconds (:mod:`.serving`: numpy on the fitted tables
        in float64; :meth:`predict` of a float64 posterior to a few units in the last place)."""
        if include_noise is not True and include_noise is not False:
            include_noise = check_bool("include_noise", include_noise)
        if len(index) != self.n_factors:
            raise ValueError(f"`index` must hold {self.n_factors} inner indices, got {len(index)}")
        levels = tuple(index)
        for f, (level, n_levels) in enumerate(zip(levels, self.n_levels)):
            if type(level) is int and -1 <= level < n_levels:  # the adapters' Python ints: no isinstance, 1 us less
                continue
            if not isinstance(level, (int, np.integer)) or not -1 <= level < n_levels:
                raise ValueError(f"`index[{f}]` must be an integer in [-1, {n_levels}) (-1 = unseen in "
                                 f"training), got {level!r}")
            levels = (*levels[:f], int(level), *levels[f + 1:])
        predictor = self.pair_path()
        if predictor is None:
            mean, var = self.predict(np.array([levels], dtype=np.int64), include_noise)
            return float(mean[0]), float(var[0])
        return predictor(levels, include_noise)

    def pair_path(self):
        """:meth:`predict_pair`'s path (a :class:`~.serving.PairPredictor`, built once); None if a term needs torch."""
        predictor = self.__dict__.get("_pair_predictor", False)
        if predictor is False:  # in float64 whatever the posterior's dtype (module docstring of .serving)
            exact, basis = self, self.__dict__.pop("_pair_basis_of", None)  # (a fold-in's: its source's psi, check)
            if self.dtype != torch.float64:  # a fold-in's posterior converts only what it changed (state.map_reusing)
                state, self._float64 = map_reusing(self.state, _cpu_float64, self.__dict__.pop("_float64_of", None))
                exact = MWGPPosterior(state, _psi=None if basis is None else basis[0])
            check = exact._standardised_one if basis is None else basis[1]
            predictor = self._pair_predictor = pair_predictor(exact.state, exact.psi, check) if check else None
            self._pair_basis = (exact.psi, predictor is not None)
        return predictor

    def _standardised_one(self, index: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
        moments = self.standardised_moments(torch.tensor([index], dtype=torch.long, device=self.device))
        return moments[0][0], moments[1][0], moments[2][0]

    @torch.no_grad()
    def moments(self, index: Tensor, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """Like :meth:`predict` for one chunk of a (validated) long tensor, returning tensors on the device."""
        mean, var, noise = self.standardised_moments(index)
        if include_noise:
            var = var + noise
        return rating_scale(mean, self.rating_mean, self.rating_std), var.double() * self.rating_std ** 2

    @torch.no_grad()
    def catalogue_moments(self, user: int, include_noise: bool = True,
                          variance: bool = True) -> tuple[Tensor, Tensor | None]:
        """Like :meth:`moments` for one (validated) user index with every item, for ranking: the same values
        up to float rounding, in one product (:func:`~.predictive.catalogue_moments`); ``variance=False``: the
        means alone (the same values) and ``None``."""
        if self.cold_users is not None and user >= 0 and bool(self.cold_users[user]):
            user = -1
        mean, var, noise = catalogue_moments(self.state, self.psi, user, variance)
        mean = rating_scale(mean, self.rating_mean, self.rating_std)
        if not variance:
            return mean, None
        return mean, (var + noise if include_noise else var).double() * self.rating_std ** 2

    @torch.no_grad()
    def catalogue_draw(self, user: int, generator: torch.Generator, scale: float = 1.0) -> Tensor:
        """One joint posterior draw of a (validated) user's expected rating of every item, on the rating scale
        (:func:`~.sampling.catalogue_draw`: the user's and items' rows and the latent function drawn once;
        ``scale``: the drawn deviations times this, a tempered posterior)."""
        if user >= 0 and self.cold_users is not None and bool(self.cold_users[user]):
            user = -1
        sampler = self.__dict__.get("_weight_sampler")
        if sampler is None:
            sampler = self._weight_sampler = weight_sampler(self.state.gp)
        return rating_scale(catalogue_draw(self.state, user, sampler, generator, scale), self.rating_mean,
                             self.rating_std)

    @torch.no_grad()
    def standardised_moments(self, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Mean, latent variance and noise variance in standardised units (folded-in users without ratings
        predicted as index -1)."""
        if self.cold_users is not None:
            users = index[:, 0]
            index = index.clone()
            index[:, 0] = torch.where(self.cold_users[users.clamp_min(0)], -1, users)
        return predictive_moments(self.state, self.psi, index)

    def noise_var_at(self, index: Tensor) -> Tensor:
        """Expected noise variance E[sigma_n^2] of each index tuple (standardised units), shape (n,)."""
        return self.standardised_moments(index)[2]


def _available(name: str) -> torch.device:
    """The device ``name`` where this machine has it, else the CPU."""
    device = torch.device(name)
    if device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count():
        return device
    return torch.device("cpu")


def _cpu_float64(t: Tensor) -> Tensor:
    return t.to(device="cpu", dtype=torch.float64 if t.is_floating_point() else t.dtype)
