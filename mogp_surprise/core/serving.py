"""One prediction at a time: the predictive of a single index tuple in numpy, without per-call tensor dispatch.

Surprise code calls ``algo.predict(uid, iid)`` in loops and services call it once per request. Through
torch every small operation costs a few microseconds of dispatch, and one pair takes some fifty of
them; the same arithmetic on numpy views of the fitted tables takes a fraction of that. A
:class:`PairPredictor` holds those views (zero-copy for a posterior on the CPU) and, per pattern of
unseen factors, what the GP's moments need (the augmented inducing inputs of the known factors, the
weights ``w`` and the quadratic form ``M``, multiplied by the unseen factors' kernel expectations).

What it computes is the predictive of :mod:`.predictive`: the terms' own :meth:`~.terms.Term.combine`
on numpy rows (``RatingParts.xp``), the one :func:`~.predictive.predictive`, the cold-start scale and
the variance floor; only the GP's moments at one input (:meth:`~.gp.FittedGP.moments`: the augmented
kernel product, ``w``, ``M`` and the delta method) are written here again for a single row, and a term that
reads pair inputs may give its part of one pair in one step (:meth:`~.terms.Term.pair_part`: the
neighbourhood term's compiled kernel), which the check below compares with the batched path too. A pair of
known levels takes a faster lane where every term has :meth:`~.terms.Term.pair_combine` (the built-in ones
do): the same formulas on Python floats and 1-d rows (:class:`PairParts`), where ``combine`` on (1, k) rows
makes a numpy call per operation, some forty in all (ML-100K's default model, slow state of the machine: the
terms' part 30 -> 13 us, one ``predict`` 72-76 -> 40-47 us).
``tests/core/test_serving.py`` checks it against the batched path on every pattern, with Laplace
variances, folded-in users and terms defined outside the package; the results agree to a few units in
the last place (BLAS sums a batch in another order), not bit for bit.

It always computes in float64 (:meth:`~.posterior.MWGPPosterior.predict_pair` gives it a float64 copy of
a float32 posterior): the GP's variance ``s + k^T M k`` is a small difference of large sums (on ML-1M
sum |k_l M_lm k_m| is ~1e5 for a variance of ~0.03), which float32 gets wrong by up to 1 % of the
predictive variance (25 % of the latent variance alone) on ML-1M's trained model; float64 costs a
single pair nothing.

A term whose ``combine`` cannot run on numpy arrays (it calls torch functions) or gives another answer
there makes :func:`pair_predictor` return None: :meth:`~.posterior.MWGPPosterior.predict_pair` then
uses the batched path, with the same results, at its speed.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .optim import serving_kernel
from .predictive import predictive
from .state import PosteriorState
from .terms import RatingParts, Rows


def _np(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy()


class PairPredictor:
    """The predictive of one index tuple from numpy views of a posterior state (module docstring)."""

    def __init__(self, state: PosteriorState, psi: list) -> None:
        gp = state.gp
        self.dtype = np.dtype(str(gp.w.dtype).removeprefix("torch."))
        self.n_factors = len(state.n_levels)
        self.n_levels = state.n_levels
        self.global_mean = _np(state.global_mean).reshape(1)
        self.log_noise_base = np.log(_np(state.noise_variance))
        self._global_mean, self._log_noise_base = float(self.global_mean[0]), float(self.log_noise_base)
        self.rating_mean, self.rating_std = state.rating_mean, state.rating_std
        self.cold_scale = _np(state.cold_scale).tolist()
        self.cold_users = _np(state.cold_users)
        self.floor = float(torch.finfo(gp.w.dtype).eps * gp.outputscale)
        self.terms = []
        for fitted in state.terms:
            tables = []
            for spec in fitted.term.direct_tables:
                table = fitted.tables[spec.name]
                pop = table.population
                population = None if pop is None else Rows(_np(pop[0])[None], _np(pop[1])[None], unseen=True)
                tables.append((spec.name, spec.factor, _np(table.values), _np(table.laplace_var), population))
            pairs = {k: _np(v) for k, v in fitted.extras.items()} if fitted.term.reads_pairs else None
            by_name = {name: (values, laplace_var) for name, _, values, laplace_var, _ in tables}
            self.terms.append((fitted.term, tables, pairs, by_name))
        # the GP: inducing inputs, lengthscales, output scale, w, M; per pattern of unseen factors (lazily) the
        # augmented inducing inputs of the known factors' dimensions and the unseen factors' psi products
        self._z = _np(gp.inducing)
        self._lengthscale = _np(gp.lengthscale)
        self._outputscale = float(gp.outputscale)
        self._w, self._M = _np(gp.w), _np(gp.M)
        self._width = gp.input_width
        self._psi = [(_np(p1), _np(p2)) for p1, p2 in psi]
        self._patterns: dict[int, tuple] = {}
        self._kernel = serving_kernel("pair_gp_moments") if self.dtype == np.float64 else None

    def _pattern(self, pattern: int) -> tuple:
        cached = self._patterns.get(pattern)
        if cached is not None:
            return cached
        r = self._width
        known = [f for f in range(self.n_factors) if not pattern >> f & 1]
        dims = np.concatenate([np.arange(f * r, (f + 1) * r) for f in known]) if known else np.arange(0)
        inv_ls = 1.0 / self._lengthscale[dims]
        z = self._z[:, dims]
        zs = z * inv_ls
        # log k(x, z_l) = zs_l . xs - |xs|^2 / 2 + (log s - |zs_l|^2 / 2), as kernels.cross_kernel
        offset = np.log(self._outputscale) - 0.5 * (zs * zs).sum(-1)
        quad, lin = self._M, self._w
        if pattern:
            quad = self._M + np.outer(self._w, self._w)
            for f in range(self.n_factors):
                if pattern >> f & 1:
                    quad, lin = quad * self._psi[f][1], lin * self._psi[f][0]
        cached = (known, inv_ls, np.ascontiguousarray(z), np.ascontiguousarray(zs), offset, np.ascontiguousarray(quad),
                  np.ascontiguousarray(lin), inv_ls * inv_ls)
        self._patterns[pattern] = cached
        return cached

    def __call__(self, index: tuple[int, ...], include_noise: bool = True) -> tuple[float, float]:
        """Mean and variance on the rating scale of one validated index tuple (-1: unseen)."""
        mean, var, noise = self.standardised(index)
        if include_noise:
            var = var + noise
        return mean * self.rating_std + self.rating_mean, var * self.rating_std ** 2

    def standardised(self, index: tuple[int, ...]) -> tuple[float, float, float]:
        """Mean, latent variance and noise variance of one index tuple in standardised units."""
        if self.cold_users is not None and index[0] >= 0 and self.cold_users[index[0]]:
            index = (-1, *index[1:])
        if min(index) >= 0:  # known levels: every term's pair_combine in floats, where each has one
            parts = PairParts(self._global_mean, self._log_noise_base, self.n_factors)
            for term, _, pairs, by_name in self.terms:
                if not term.pair_combine(index, by_name, pairs, parts):
                    break
            else:
                mean, var, noise = predictive(parts, *self._gp_moments(parts.inputs, 0))
                return float(mean), max(float(var), self.floor), float(noise)
        pattern = sum(1 << f for f in range(self.n_factors) if index[f] < 0)
        parts = RatingParts(mean=self.global_mean, log_noise_base=self.log_noise_base,
                            inputs=[None] * self.n_factors)
        for term, tables, pairs, by_name in self.terms:
            if pairs is not None:  # a term that reads pair inputs may compute its part in one step
                part = term.pair_part(tuple(index), by_name, pairs)
                if part is not None:
                    parts.add_mean(*part)
                    continue
            rows = {} if pairs is None else term.pair_rows(np.asarray([index]), pairs)
            for name, factor, values, laplace_var, population in tables:
                level = index[factor]
                if level < 0:
                    rows[name] = population
                else:
                    rows[name] = Rows(values[level:level + 1],
                                      None if laplace_var is None else laplace_var[level:level + 1])
            term.combine(rows, parts)
        f_mean, f_var = self._gp_moments(parts.inputs, pattern)
        mean, var, noise = predictive(parts, np.reshape(f_mean, 1), np.reshape(f_var, 1))
        var = var[0]
        if pattern:
            var = var * self.cold_scale[pattern]
        return float(mean[0]), max(float(var), self.floor), float(noise[0])

    def _gp_moments(self, inputs: list, pattern: int) -> tuple[float, float]:
        """E[f] and Var[f] at one input (the known factors' rows of ``inputs``, (1, r) or (r,)):
        :meth:`~.gp.FittedGP.moments` for a single row (numba's :func:`~.serving_kernel.pair_gp_moments` where it is
        available, else numpy)."""
        known, inv_ls, z, zs, offset, quad, lin, inv_ls2 = self._pattern(pattern)
        if self._kernel is not None and len(known) == 2:  # two rows, as the kernel takes them (a known user and item;
            (a, va), (b, vb) = ((inputs[f].value, inputs[f].var) for f in known)  # without the lists below: -1 us)
            with_var = va is not None and vb is not None
            return self._kernel(a.reshape(-1), b.reshape(-1), va.reshape(-1) if with_var else _EMPTY,
                                vb.reshape(-1) if with_var else _EMPTY, zs, offset, z, inv_ls, inv_ls2, lin, quad,
                                self._outputscale, bool(pattern))
        with_var = bool(known) and all(inputs[f].var is not None for f in known)
        if self._kernel is not None:  # one row or none, or more joined into one, as the kernel takes them
            rows = [inputs[f].value.reshape(-1) for f in known]
            var = [inputs[f].var.reshape(-1) for f in known] if with_var else []
            if len(known) > 2:
                rows, var = [np.concatenate(rows)], [np.concatenate(var)] if with_var else []
            rows, var = rows + [_EMPTY] * (2 - len(rows)), var + [_EMPTY] * (2 - len(var))
            return self._kernel(*rows, *var, zs, offset, z, inv_ls, inv_ls2, lin, quad, self._outputscale,
                                bool(pattern))
        x, input_var = _EMPTY, None
        if known:
            x = np.concatenate([inputs[f].value.reshape(-1) for f in known])
            if with_var:
                input_var = np.concatenate([inputs[f].var.reshape(-1) for f in known])
        if known:
            xs = x * inv_ls
            kk = np.exp(zs @ xs + (offset - 0.5 * (xs @ xs)))
        else:
            kk = np.full(len(lin), self._outputscale, dtype=self.dtype)
        kw = kk * lin
        mean = kw.sum()
        var = self._outputscale + kk @ (quad @ kk)
        if input_var is not None:  # the delta method
            grad = (kw @ z - x * kw.sum()) * inv_ls2
            var = var + (grad * grad * input_var).sum()
        if pattern:
            var = var - mean * mean
        return float(mean), float(var)


class PairParts:
    """:class:`~.terms.RatingParts` of one index tuple of known levels in Python floats (the GP inputs: 1-d rows),
    which :meth:`~.terms.Term.pair_combine` adds to and :func:`~.predictive.predictive` reads (``xp``:
    :mod:`math`). ``log_noise`` starts at the base noise's log, as a sum of no offsets."""

    __slots__ = ("mean", "mean_var", "log_noise", "log_noise_var", "latent_log_scale", "inputs")
    xp = math

    def __init__(self, mean: float, log_noise_base: float, n_factors: int) -> None:
        self.mean, self.mean_var, self.latent_log_scale = mean, None, None
        self.log_noise, self.log_noise_var = log_noise_base, 0.0
        self.inputs: list = [None] * n_factors

    def add_mean(self, value: float, var: float | None = None) -> None:
        self.mean += value
        if var is not None:
            self.mean_var = var if self.mean_var is None else self.mean_var + var

    def add_log_noise(self, mean: float, var: float) -> None:
        self.log_noise += mean
        self.log_noise_var += var

    def set_input(self, factor: int, rows: Rows) -> None:
        self.inputs[factor] = rows

    def add_latent_log_scale(self, value: float) -> None:
        self.latent_log_scale = value if self.latent_log_scale is None else self.latent_log_scale + value


_EMPTY = np.empty(0)


def pair_predictor(state: PosteriorState, psi: list, check: Any) -> PairPredictor | None:
    """A :class:`PairPredictor`, or None when a term's ``combine`` does not run on numpy arrays or disagrees
    with the batched path (``check(index) -> (mean, var, noise)`` in standardised units) at a probe tuple.
    ``check=True``: the terms passed that check already, on a posterior this one derives from by folded-in users
    (the same terms and code; two probes of the batched path, 4 ms of the first ``predict`` after a fold-in)."""
    if check is True:
        return PairPredictor(state, psi)
    try:
        predictor = PairPredictor(state, psi)
        probes = [tuple(0 if n else -1 for n in state.n_levels), (-1,) * len(state.n_levels)]
        got = np.array([predictor.standardised(p) for p in probes])
    except Exception:  # noqa: BLE001 -- a term written for torch only: the batched path serves it
        return None
    want = np.array([[float(t) for t in check(p)] for p in probes])
    tol = 1e-9 if predictor.dtype == np.float64 else 1e-4
    return predictor if np.allclose(got, want, rtol=tol, atol=tol * 1e-3) else None
