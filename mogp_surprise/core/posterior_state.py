"""Saving and loading a :class:`~.posterior.MWGPPosterior`, and new posteriors with folded-in user rows.

A saved state is a plain dict of CPU tensors and numbers (:func:`posterior_state`); :func:`state_args` reads
it back, filling in what states written by older versions lack (per-level noise, the bilinear term,
fold-in) and refusing inconsistent ones. :func:`with_user_rows` checks folded-in users against the
posterior and appends them as user rows (or overwrites given rows).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .foldin import FoldedUser
    from .posterior import MWGPPosterior

# tensors that make up a posterior, in the order they are saved
TENSORS = ("inducing", "lengthscale", "outputscale", "noise", "global_mean", "w", "M",
           "emb_mean", "emb_var", "bias_mean", "bias_var", "psi1", "psi2", "noise_scale_unseen",
           "mf_mean", "mf_var", "cold_scale")


def map_tensors(value: Any, fn) -> Any:
    """``value`` (nested dicts/lists of tensors and plain values) with ``fn`` applied to every tensor."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def posterior_state(post: "MWGPPosterior", fn=lambda t: t.detach().cpu()) -> dict[str, Any]:
    """A posterior's tensors, with ``fn`` applied to each (default: CPU copies), and numbers; inverse of
    :func:`state_args`."""
    out: dict[str, Any] = {name: getattr(post, name) for name in TENSORS}
    for name in ("embeddings", "biases", "noise_scales", "input_var", "level_bias_var", "mf_level_var",
                 "mf_factors"):
        out[name] = list(getattr(post, name))
    out.update(foldin=post.foldin, cold_users=post.cold_users, rating_mean=post.rating_mean,
               rating_std=post.rating_std, chunk_size=post.chunk_size)
    return map_tensors(out, fn)


def state_args(state: dict[str, Any]) -> tuple:
    """The arguments of ``MWGPPosterior(...)`` for a saved state (of this or an older version)."""
    state = dict(state)
    if "noise_scale_unseen" not in state and "embeddings" in state:
        # written before per-level noise existed: a homoscedastic model
        state["noise_scale_unseen"] = torch.ones(len(state["embeddings"]), dtype=state["embeddings"][0].dtype)
    if "mf_mean" not in state and "embeddings" in state:  # written before the bilinear term existed: none
        state["mf_mean"] = state["mf_var"] = torch.zeros(0, 0, dtype=state["embeddings"][0].dtype)
    if "cold_scale" not in state and "embeddings" in state:  # written before the calibration existed: none
        state["cold_scale"] = torch.ones(2 ** len(state["embeddings"]), dtype=state["embeddings"][0].dtype)
    missing = [k for k in (*TENSORS, "embeddings", "biases", "rating_mean", "rating_std") if k not in state]
    if missing:
        raise ValueError(f"posterior state is missing the entries {missing}")
    rank = int(state["mf_mean"].shape[-1]) if state["mf_mean"].numel() else 0
    if rank and len(state.get("mf_factors") or []) != 2:
        raise ValueError(f"posterior state has a rank-{rank} bilinear term but not its two factor tables "
                         "('mf_factors')")
    if rank and state.get("input_var") and len(state.get("mf_level_var") or []) != 2:
        raise ValueError("posterior state has Laplace variances ('input_var') but not those of its bilinear "
                         "factors ('mf_level_var')")
    return ({k: state[k] for k in TENSORS}, state["embeddings"], state["biases"],
            state["rating_mean"], state["rating_std"], state.get("chunk_size", 65536),
            state.get("noise_scales"),
            (state["input_var"], state["level_bias_var"], state.get("mf_level_var", []))
            if state.get("input_var") else None,
            state.get("foldin"), state.get("cold_users"),  # absent in states saved before fold-in
            state.get("mf_factors", []))


def check_rows(rows, n_users: int, n_given: int) -> np.ndarray:
    """Validated user rows (int64) for :meth:`~.posterior.MWGPPosterior.with_replaced_users`."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
        raise ValueError(f"`rows` must be a 1-d array of user indices, got {rows!r}")
    if rows.size and (rows.min() < 0 or rows.max() >= n_users):
        raise ValueError(f"`rows` must lie in [0, {n_users}), got range [{rows.min()}, {rows.max()}]")
    if np.unique(rows).size != rows.size:
        raise ValueError("`rows` must not repeat a user")
    if n_given != rows.size:
        raise ValueError(f"`rows` has {rows.size} entries but {n_given} users were given")
    return rows.astype(np.int64)


def _check_users(post: "MWGPPosterior", users: list) -> None:
    if post.n_factors != 2:
        raise ValueError(f"folded-in users need a (user, item) model; this one has {post.n_factors} factors")
    r = post.latent_dim
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
        if np.shape(factor) != (post.mf_rank,) or np.shape(getattr(u, "mf_factor_var", factor)) != (post.mf_rank,):
            raise ValueError(f"`users[{n}]` has a bilinear factor of shape {np.shape(factor)}; this "
                             f"posterior's mf_rank is {post.mf_rank}")


def with_user_rows(post: "MWGPPosterior", users: Sequence["FoldedUser"], rows: np.ndarray | None) -> "MWGPPosterior":
    """A new posterior with ``users`` appended as user rows (``rows`` None) or written to ``rows``."""
    users = list(users)
    _check_users(post, users)

    def put(table: Tensor, values: list) -> Tensor:
        """``table`` with the users' ``values`` appended (or written to ``rows``)."""
        vals = torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=table.dtype, device=table.device)
        vals = vals.reshape(len(users), *table.shape[1:])
        if rows is None:
            return torch.cat([table, vals])
        out = table.clone()
        out[torch.as_tensor(rows, device=table.device)] = vals
        return out

    def user_rows(tables: list, name: str) -> list:
        """(users', items') ``tables`` with the users' ``name`` put into the first; [] stays []."""
        return [put(tables[0], [getattr(u, name) for u in users]), tables[1]] if tables else []

    embeddings, biases = user_rows(post.embeddings, "input"), user_rows(post.biases, "bias")
    noise_scales = user_rows(post.noise_scales, "noise_scale")
    mf_factors = user_rows(post.mf_factors, "mf_factor")
    level_variances = (user_rows(post.input_var, "input_var"), user_rows(post.level_bias_var, "bias_var"),
                       user_rows(post.mf_level_var, "mf_factor_var")) if post.input_var else None
    foldin = None
    if post.foldin is not None:
        foldin = dict(post.foldin)
        if foldin["heteroscedastic"]:
            foldin["noise_offset_mean"] = user_rows(foldin["noise_offset_mean"], "noise_offset_mean")
            logvars = foldin["noise_offset_logvar"]
            foldin["noise_offset_logvar"] = [
                put(logvars[0], [np.log(max(float(u.noise_offset_var), 1e-300)) for u in users]), logvars[1]]
    old_cold = post.cold_users if post.cold_users is not None else torch.zeros(
        post.n_levels[0], dtype=torch.bool, device=post.device)
    cold_users = put(old_cold, [int(u.n_ratings) == 0 for u in users])
    tensors = {name: getattr(post, name) for name in TENSORS}
    return type(post)(tensors, embeddings, biases, post.rating_mean, post.rating_std, post.chunk_size,
                      noise_scales, level_variances, foldin, cold_users, mf_factors)
