"""What the Surprise and scikit-learn adapters share: hyper-parameters, id encoding, fitting."""
from __future__ import annotations

import inspect
import numbers
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..core.config import MWGPConfig
from ..core.errors import NotFittedError
from ..core.posterior import MWGPPosterior

# the numpydoc Parameters block of MWGPConfig, first-line indent removed so that it can follow "    " in an
# f-string (empty under ``python -OO``, which strips every docstring)
_PARAM_DOC = (MWGPConfig.__doc__ or "").partition("Parameters\n    ----------\n")[2].lstrip(" ").rstrip() + "\n"


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
    """Maps raw ids of one factor (ints, strings, any hashable) to inner indices 0..n-1; unknown -> -1.

    Ids are labels matched by value *and* type, as in Surprise: ``196`` and ``"196"`` are two
    different ids (see :func:`warn_id_twins` for the warning when that is likely a mix-up).
    """

    def __init__(self, name: str, classes: Sequence[Any] | np.ndarray) -> None:
        self.name = name
        self.classes_ = pd.Index(_as_object(classes)) if len(classes) else pd.Index([])

    @classmethod
    def fit(cls, name: str, values: Sequence[Any] | np.ndarray) -> tuple["IdEncoder", np.ndarray]:
        """An encoder of the distinct ``values`` (in order of appearance) and the inner index of each value."""
        codes, uniques = pd.factorize(pd.Index(_as_object(values)), sort=False)
        return cls(name, uniques), codes.astype(np.int64)

    @property
    def n_levels(self) -> int:
        return len(self.classes_)

    def transform(self, values: Sequence[Any] | np.ndarray) -> np.ndarray:
        return self.classes_.get_indexer(pd.Index(_as_object(values))).astype(np.int64)

    def __contains__(self, value: Any) -> bool:
        return value in self.classes_


def _as_object(values) -> np.ndarray:
    arr = np.asarray(values)
    return arr.astype(object) if arr.dtype.kind in "OUS" else arr


def check_id_column(name: str, values: np.ndarray) -> None:
    """Raise if an id column holds missing values; warn if it holds both 196 and '196'."""
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
    distinct = pd.unique(values)
    strings = [v for v in distinct if isinstance(v, str)]
    if strings and len(strings) < len(distinct):  # a mix of str and other ids: fine unless two spell the same id
        present = set(distinct.tolist())
        for value in strings:
            twin = id_twin(value)
            if twin is not None and twin in present:
                warnings.warn(f"id column {name!r} holds both {twin!r} and {value!r}; ids are matched by value and "
                              "type, so these are two different levels. Convert the ids to one type (e.g. "
                              "with str()) if they mean the same one.", UserWarning, stacklevel=4)
                break


def id_twin(value: Any) -> Any:
    """The same id spelt with the other type: ``"196"`` for ``196``, ``196`` for ``"196"``; else None."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdecimal():
            return int(text)
        return None
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (numbers.Integral, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return None


# fitted models (their posteriors) that already warned about an id mix-up, per factor name
_TWIN_WARNED: "weakref.WeakKeyDictionary[MWGPPosterior, set[str]]" = weakref.WeakKeyDictionary()
_MAX_TWIN_CHECKS = 10_000


def warn_id_twins(posterior: MWGPPosterior, name: str, values: Sequence[Any], codes: np.ndarray,
                  known: Callable[[Any], bool]) -> None:
    """Warn once per fitted model and factor when an unseen id is a known id spelt with another type.

    ``Dataset.load_builtin("ml-100k")`` holds raw ids as strings, so ``predict(196, 242)`` would
    silently give a cold-start answer for a user and item that are in the data; this names it.
    """
    if name in _TWIN_WARNED.get(posterior, ()):
        return
    unknown = np.flatnonzero(np.asarray(codes) < 0)
    if not unknown.size:
        return
    seen: set = set()
    for pos in unknown:
        value = values[pos]
        key = (type(value), value)
        if key in seen:
            continue
        seen.add(key)
        twin = id_twin(value)
        if twin is not None and known(twin):
            n_twins = int(sum(1 for p in unknown if (t := id_twin(values[p])) is not None and known(t)))
            warnings.warn(
                f"{name} id {value!r} ({type(value).__name__}) is not in the training data, but {twin!r} "
                f"({type(twin).__name__}) is: ids are matched by value and type, and Surprise's built-in and "
                f"file data sets hold raw ids as strings. {n_twins} {name} id(s) like this get the cold-start "
                f"(unseen {name}) answer; pass ids of the type used in training.", UserWarning, stacklevel=4)
            _TWIN_WARNED.setdefault(posterior, set()).add(name)
            return
        if len(seen) >= _MAX_TWIN_CHECKS:
            return


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
