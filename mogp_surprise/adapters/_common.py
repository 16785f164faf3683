"""What the Surprise and scikit-learn adapters share: hyper-parameters, id encoding, fitting."""
from __future__ import annotations

import inspect
import numbers
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.config import MWGPConfig
from ..core.errors import NotFittedError
from ..core.posterior import MWGPPosterior

# the numpydoc Parameters block of MWGPConfig, first-line indent removed so that it can follow "    " in an f-string
_PARAM_DOC = MWGPConfig.__doc__.split("Parameters\n    ----------\n", 1)[1].lstrip(" ").rstrip() + "\n"


class HyperParamsMixin:
    """Keyword-only hyper-parameters of :class:`~mogp_surprise.core.config.MWGPConfig`.

    ``__init__`` stores every argument unchanged (scikit-learn's and Surprise's contract); the
    signature is generated from the config's fields so that both adapters share one definition.
    Validation happens in ``fit`` (:meth:`_config`).
    """

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(MWGPConfig.names()))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword argument(s) {unknown}; "
                            f"valid hyper-parameters are {list(MWGPConfig.names())}")
        for name, default in MWGPConfig.defaults().items():
            setattr(self, name, params.get(name, default))

    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
           for name, default in MWGPConfig.defaults().items()])

    def _config(self) -> MWGPConfig:
        """Validated hyper-parameters (raises ValueError/TypeError naming the parameter)."""
        return MWGPConfig(**{name: getattr(self, name) for name in MWGPConfig.names()})

    def _hyper_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MWGPConfig.names()}


class IdEncoder:
    """Maps raw ids of one factor (ints, strings, ...) to inner indices 0..n-1; unknown -> -1."""

    def __init__(self, name: str, classes: Sequence[Any] | np.ndarray) -> None:
        self.name = name
        self.classes_ = pd.Index(_as_object(classes)) if len(classes) else pd.Index([])
        self.kind = _id_kind(self.classes_[0]) if len(self.classes_) else None

    @classmethod
    def fit(cls, name: str, values: Sequence[Any] | np.ndarray) -> tuple["IdEncoder", np.ndarray]:
        """An encoder of the distinct ``values`` (in order of appearance) and the inner index of each value."""
        codes, uniques = pd.factorize(pd.Index(_as_object(values)), sort=False)
        return cls(name, uniques), codes.astype(np.int64)

    @property
    def n_levels(self) -> int:
        return len(self.classes_)

    def kind_mismatch(self, values: np.ndarray) -> str | None:
        """A description when ids at predict time have another type than in fit (e.g. '12' vs 12), else None."""
        if len(values) and self.kind is not None:
            kind = _id_kind(np.asarray(values)[0])
            if kind != self.kind:
                return f"{self.name!r} holds {kind} ids but was fitted on {self.kind} ids"
        return None

    def transform(self, values: Sequence[Any] | np.ndarray) -> np.ndarray:
        return self.classes_.get_indexer(pd.Index(_as_object(values))).astype(np.int64)


def _as_object(values) -> np.ndarray:
    arr = np.asarray(values)
    return arr.astype(object) if arr.dtype.kind in "OUS" else arr


def check_id_column(name: str, values: np.ndarray) -> None:
    """Raise if an id column holds missing values or a mix of numbers and strings."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(f"id column {name!r} must not contain NaN/inf; found {int(bad.sum())} "
                             f"(first at row {pos})")
        return
    if values.dtype.kind != "O":
        return
    missing = pd.isna(values)
    if missing.any():
        pos = int(np.flatnonzero(missing)[0])
        raise ValueError(f"id column {name!r} must not contain None/NaN; found {int(missing.sum())} "
                         f"(first at row {pos}: {values[pos]!r})")
    kinds = {_id_kind(v) for v in values[: min(len(values), 1_000_000)]}
    if len(kinds) > 1:
        raise TypeError(f"id column {name!r} mixes id types {sorted(kinds)}; use one type per column "
                        "(e.g. convert all ids with str())")


def _id_kind(value: Any) -> str:
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, numbers.Number) or isinstance(value, np.number):
        return "number"
    return type(value).__name__


def require_fitted(obj: Any, attribute: str = "posterior_") -> MWGPPosterior:
    post = getattr(obj, attribute, None)
    if post is None:
        raise NotFittedError(f"This {type(obj).__name__} instance is not fitted yet; call `fit` first.")
    return post


PARAMS_DOC = _PARAM_DOC


def recommend_frame(posterior: MWGPPosterior, raw_users: Sequence[Any], inner_users: np.ndarray,
                    raw_items: np.ndarray, exclude: list[np.ndarray] | None, n: int, strategy: str,
                    kappa: float) -> pd.DataFrame:
    """Top-N lists of several users as a tidy DataFrame (user, rank, item, mean, std, score)."""
    from ..core.recommend import top_n

    result = top_n(posterior, inner_users, n=n, strategy=strategy, kappa=kappa, exclude=exclude)
    valid = result.items >= 0
    rows, ranks = np.nonzero(valid)
    users = np.asarray(list(raw_users), dtype=object)
    return pd.DataFrame({"user": users[rows], "rank": ranks + 1, "item": np.asarray(raw_items, dtype=object)[
        result.items[valid]], "mean": result.mean[valid], "std": result.std[valid], "score": result.score[valid]})
