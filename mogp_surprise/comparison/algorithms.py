"""The algorithms :func:`~.run.compare` can run, by name (``--algos``): how each is built and, for the optional
baselines, the install hint when its package is absent. Light to import: every algorithm's own module is
imported when it is built."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class AlgoSpec:
    label: str
    uncertainty: str  # "predictive" or "homoscedastic"
    make: Callable[[int, dict[str, Any]], Any]
    missing: Callable[[], str] | None = None  # an optional dependency's install hint when it is absent, else ""


def _mwgp(paper_model: bool) -> Callable[[int, dict[str, Any]], Any]:
    """MWGP with the comparison's ``mwgp_params``, and ``PAPER_MODEL`` on top for the paper's model."""
    def make(seed: int, params: dict[str, Any]):
        from ..adapters.surprise_algo import MWGP
        from ..core.config import PAPER_MODEL
        return MWGP(**{"random_state": seed, **params, **(PAPER_MODEL if paper_model else {})})
    return make


def paper_model_overrides(params: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The ``mwgp_params`` that ``mwgp_paper`` does not take, since ``PAPER_MODEL`` sets them otherwise:
    ``{name: (asked, paper's)}`` (the paper's model stays the paper's; ``mwgp`` takes them all)."""
    from ..core.config import PAPER_MODEL
    return {k: (v, PAPER_MODEL[k]) for k, v in params.items() if k in PAPER_MODEL and v != PAPER_MODEL[k]}


def _homoscedastic(name: str, **kwargs: Any) -> Callable[[int, dict[str, Any]], Any]:
    """The Surprise algorithm ``name`` (with ``kwargs``, seeded) given one residual variance."""
    def make(seed: int, params: dict[str, Any]):
        import surprise

        from .homoscedastic import HomoscedasticBaseline
        return HomoscedasticBaseline(getattr(surprise, name)(random_state=seed, **kwargs), random_state=seed)
    return make


def _optional(module: str, available: str) -> Callable[[], str]:
    """The install hint of an optional baseline (``comparison.<module>``) when its package is absent, else ""."""
    def missing() -> str:
        adapter = importlib.import_module(f".{module}", __package__)
        return "" if getattr(adapter, available)() else adapter.INSTALL_HINT
    return missing


def _myfm(seed: int, params: dict[str, Any]):
    from .myfm import MyFMBaseline
    return MyFMBaseline(random_state=seed)


def _myfm_flipped(seed: int, params: dict[str, Any]):
    from .myfm import MyFMFlippedBaseline
    return MyFMFlippedBaseline(random_state=seed)


def _bgplvm(seed: int, params: dict[str, Any]):
    """The Bayesian GPLVM with MW-GP's latent dimension, as in the paper's comparison."""
    from ..core.config import MWGPConfig
    from .bgplvm import BayesianGPLVMBaseline
    return BayesianGPLVMBaseline(latent_dim=params.get("latent_dim", MWGPConfig.latent_dim), random_state=seed)


ALGORITHMS: dict[str, AlgoSpec] = {
    "mwgp": AlgoSpec("MW-GP (ours)", "predictive", _mwgp(paper_model=False)),
    "mwgp_paper": AlgoSpec("MW-GP, the paper's model", "predictive", _mwgp(paper_model=True)),
    "svd": AlgoSpec("BiasedMF (Surprise SVD)", "homoscedastic", _homoscedastic("SVD")),
    "svd8": AlgoSpec("BiasedMF r=8 (SVD n_factors=8)", "homoscedastic", _homoscedastic("SVD", n_factors=8)),
    "svdpp": AlgoSpec("SVD++ (Surprise SVDpp)", "homoscedastic", _homoscedastic("SVDpp", cache_ratings=True)),
    "myfm": AlgoSpec("Bayesian FM (myFM, rank 8)", "predictive", _myfm, _optional("myfm", "myfm_available")),
    "myfm_flipped": AlgoSpec("myFM BFM flipped (rank 32 / 16, implicit)", "predictive", _myfm_flipped,
                             _optional("myfm", "myfm_available")),
    "bgplvm": AlgoSpec("Bayesian GPLVM (GPyTorch)", "predictive", _bgplvm,
                       _optional("bgplvm", "gpytorch_available")),
}
