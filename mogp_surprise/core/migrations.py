"""Explicit migrations of saved posterior states from older formats to the current one.

Format 1 (mogp_surprise 0.1) saved a posterior as a flat dict of named tensors (the GP inputs as
``embeddings``, ``biases``, ``mf_factors``, their Laplace variances and populations side by side, the
noise scales, and fold-in's needs in an untyped ``foldin`` dict); states written before a feature existed
lack its entries and describe a model without it. :func:`from_version_1` turns any such state into a
format-2 dict, every term a component (:mod:`.state`). The kernel expectations of unseen levels
(``psi1``, ``psi2``) are not carried over: a posterior recomputes them.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor


def from_version_1(old: dict[str, Any]) -> dict[str, Any]:
    """The format-2 dict of a format-1 posterior state (see the module docstring)."""
    missing = [k for k in ("inducing", "lengthscale", "outputscale", "noise", "global_mean", "w", "M", "emb_mean",
                           "emb_var", "bias_mean", "bias_var", "embeddings", "biases", "rating_mean", "rating_std")
               if k not in old]
    if missing:
        raise ValueError(f"posterior state (format 1) is missing the entries {missing}")
    embeddings, biases = list(old["embeddings"]), list(old["biases"])
    n_factors, width = len(embeddings), int(embeddings[0].shape[1])
    n_levels = [int(e.shape[0]) for e in embeddings]
    dtype = embeddings[0].dtype
    foldin = old.get("foldin") or {}  # absent: saved before fold-in existed
    input_var = list(old.get("input_var") or [])
    uncertain = bool(input_var)
    mf_mean = old.get("mf_mean", torch.zeros(0, 0, dtype=dtype))
    rank = int(mf_mean.shape[-1]) if mf_mean.numel() else 0
    if rank and len(old.get("mf_factors") or []) != 2:
        raise ValueError(f"posterior state has a rank-{rank} bilinear term but not its two factor tables "
                         "('mf_factors')")
    if rank and uncertain and len(old.get("mf_level_var") or []) != 2:
        raise ValueError("posterior state has Laplace variances ('input_var') but not those of its bilinear "
                         "factors ('mf_level_var')")

    def table(values: Tensor, laplace: Tensor | None = None, pop: tuple[Tensor, Tensor] | None = None) -> dict:
        entry: dict[str, Any] = {"values": values}
        if laplace is not None:
            entry["laplace_var"] = laplace
        if pop is not None:
            entry["population_mean"], entry["population_var"] = pop
        return entry

    def term(name: str, options: dict, tables: dict, extras: dict | None = None) -> dict:
        return {"name": name, "options": options, "n_levels": n_levels, "tables": tables, "extras": extras or {}}

    implicit = bool(foldin.get("implicit", False))
    gp_tables = {f"embedding_{f}": table(embeddings[f], input_var[f] if uncertain else None,
                                         (old["emb_mean"][f], old["emb_var"][f])) for f in range(n_factors)}
    if implicit and foldin.get("item_implicit") is not None:
        gp_tables["implicit_0"] = table(foldin["item_implicit"])
    terms = [term("gp_input", {"latent_dim": width, "embedding_reg": foldin.get("embedding_reg"),
                               "implicit": implicit}, gp_tables)]
    use_biases = foldin.get("use_biases", any(bool((b != 0).any()) for b in biases))
    if use_biases:
        bias_var = list(old.get("level_bias_var") or [])
        terms.append(term("bias", {"bias_reg": foldin.get("bias_reg")}, {
            f"bias_{f}": table(biases[f], bias_var[f] if uncertain else None, (old["bias_mean"][f], old["bias_var"][f]))
            for f in range(n_factors)}))
    if rank:
        mf_var = list(old.get("mf_level_var") or [])
        mf_tables = {f"factor_{f}": table(old["mf_factors"][f], mf_var[f] if uncertain else None,
                                          (mf_mean[f], old["mf_var"][f])) for f in (0, 1)}
        if implicit and foldin.get("item_mf_implicit") is not None:
            mf_tables["implicit_0"] = table(foldin["item_mf_implicit"])
        terms.append(term("bilinear", {"rank": rank, "mf_reg": foldin.get("mf_reg"), "implicit": implicit},
                          mf_tables))
    # per-level noise: the offsets' q(s), or their scales alone; a homoscedastic model (the paper's) saved its scales
    # too, all ones, and no offsets' prior: no term, as such a model is built today
    if old.get("noise_scales") is not None and foldin.get("heteroscedastic", True):
        unseen = old.get("noise_scale_unseen", torch.ones(n_factors, dtype=dtype))
        offsets = {}
        for f in range(n_factors):
            if foldin.get("noise_offset_mean"):
                row = torch.stack([foldin["noise_offset_mean"][f], foldin["noise_offset_logvar"][f]], dim=1)
            else:  # saved before fold-in existed: E[exp(s)] only, as an offset without variance
                scale = old["noise_scales"][f]
                row = torch.stack([torch.log(scale), torch.full_like(scale, -math.inf)], dim=1)
            pop = torch.stack([torch.log(unseen[f]), torch.tensor(-math.inf, dtype=unseen.dtype)])
            offsets[f"offset_{f}"] = table(row.to(dtype), None, (pop.to(dtype), torch.zeros_like(pop).to(dtype)))
        extras = {}
        if "noise_prior_logvar" in foldin:
            extras["prior_logvar"] = foldin["noise_prior_logvar"]
        if "user_noise_population" in foldin:
            extras["user_population"] = foldin["user_noise_population"]
        terms.append(term("noise_offset", {}, offsets, extras))
    return {
        "format_version": 2, "rating_mean": old["rating_mean"], "rating_std": old["rating_std"],
        "chunk_size": old.get("chunk_size", 65536), "global_mean": old["global_mean"], "noise_variance": old["noise"],
        "gp": {"inducing": old["inducing"], "lengthscale": old["lengthscale"], "outputscale": old["outputscale"],
               "w": old["w"], "M": old["M"], "input_width": width},
        "terms": terms,
        "cold_scale": old.get("cold_scale", torch.ones(2 ** n_factors, dtype=dtype)),  # before the calibration: 1
        "cold_users": old.get("cold_users"),
    }
