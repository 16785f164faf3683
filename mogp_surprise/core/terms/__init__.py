"""The per-level terms of MW-GP (:mod:`.base` defines the interface); every other module of this package
defines and registers one built-in term."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from .base import _REGISTRY, MIN_PRIOR_VAR, PRIORS, RatingParts, Rows, Table, Term, noise_moments, register_term

__all__ = ["Term", "Table", "Rows", "RatingParts", "PRIORS", "MIN_PRIOR_VAR", "noise_moments", "register_term",
           "registered_terms", "term_class", "build_terms"]

_loaded = False


def _load_builtin_terms() -> None:
    """Import (and so register) every built-in term module of this package, once."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            if info.name != "base":
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


def registered_terms() -> dict[str, type[Term]]:
    """Every registered term class by name (the built-in ones and those registered since)."""
    _load_builtin_terms()
    return dict(_REGISTRY)


def term_class(name: str) -> type[Term]:
    """The registered term class ``name``; ``ValueError`` naming the known ones otherwise."""
    known = registered_terms()
    if name not in known:
        raise ValueError(f"no model term named {name!r} is registered (known: {sorted(known)}); import the module "
                         "that defines it (and registers it with mogp_surprise.core.terms.register_term) first")
    return known[name]


def build_terms(config: Any, n_levels: tuple[int, ...]) -> list[Term]:
    """Every term that ``config`` (an ``MWGPConfig``) switches on: the built-in ones, then those named in
    ``config.extra_terms``, in :attr:`Term.order`."""
    wanted = [cls for cls in registered_terms().values() if cls.builtin]
    # a built-in term is switched by its own hyper-parameter; "neighbourhood" alone was once switched on this way
    built_in = [name for name in config.extra_terms if term_class(name).builtin and name != "neighbourhood"]
    if built_in:
        raise ValueError(f"`extra_terms` names the built-in term(s) {built_in}, which their own hyper-parameters "
                         "switch (mf_rank for 'bilinear', use_biases for 'bias', noise for 'noise_offset'; "
                         "'gp_input' is always there); extra_terms adds terms defined outside the library")
    wanted += [cls for name in config.extra_terms if (cls := term_class(name)) not in wanted]  # a built-in: once
    terms = [t for cls in wanted if (t := cls.from_config(config, tuple(n_levels))) is not None]
    return sorted(terms, key=lambda t: (t.order, t.name))
