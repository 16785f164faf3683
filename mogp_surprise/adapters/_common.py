"""What the Surprise and scikit-learn adapters share: hyper-parameters, id encoding, fitting."""
from __future__ import annotations

import inspect
import numbers
import reprlib
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..core.config import MWGPConfig
from ..core.errors import caller_stacklevel

# the numpydoc Parameters block of MWGPConfig, first-line indent removed so that it can follow "    " in an
# f-string (empty under ``python -OO``, which strips every docstring)
PARAMS_DOC = (MWGPConfig.__doc__ or "").partition("Parameters\n    ----------\n")[2].lstrip(" ").rstrip() + "\n"


#: hyper-parameters added after mogp_surprise 0.1.0, with the value that describes a model saved without them
ADDED_HYPER_PARAMS = {"extra_terms": (), "mf_posterior": "laplace", "neighbourhood": False}


class HyperParamsMixin:
    """Keyword-only hyper-parameters of :class:`~mogp_surprise.core.config.MWGPConfig`.

    ``__init__`` stores every argument unchanged (scikit-learn's and Surprise's contract); the
    signature is generated from the config's fields so that both adapters share one definition.
    Validation happens in ``fit`` (:meth:`_config`).
    """

    def __init__(self, *args: Any, **params: Any) -> None:
        if args:  # (Python's own error names this mixin, not the class the user called)
            raise TypeError(f"{type(self).__name__} takes its hyper-parameters by name, e.g. "
                            f"{type(self).__name__}(latent_dim=8); got {len(args)} positional argument(s): "
                            f"{reprlib.repr(args)}")
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

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a model pickled before a hyper-parameter existed gets the value that describes it."""
        state = {**ADDED_HYPER_PARAMS, **state}
        restore = getattr(super(), "__setstate__", None)
        if restore is not None:
            restore(state)
        else:
            self.__dict__.update(state)
        if "loss_history_" in state and "chosen_params_" not in state:  # fitted before early stopping chose lr, mf_reg
            self.chosen_params_ = self._as_trained()

    def _store_fit(self, result: Any, started: float) -> None:
        """The fitted attributes from a :class:`~mogp_surprise.core.trainer.FitResult` of a ``fit`` that began at
        ``time.perf_counter()`` ``started`` (``fit_time_``: all of it, reading the ids included)."""
        self.posterior_ = result.posterior
        self.loss_history_ = result.loss_history
        self.fit_time_ = time.perf_counter() - started
        self.chosen_params_ = {"n_epochs": result.n_epochs, **result.chosen}

    def _as_trained(self) -> dict[str, Any]:
        """``chosen_params_`` of a model fitted by a release before early stopping chose ``lr`` and ``mf_reg``:
        what it was trained with, its own values (the bilinear prior as its fitted term holds it)."""
        bilinear = self.posterior_.state.term("bilinear")
        prior = float(bilinear.term.options["mf_reg"]) if bilinear is not None else self._config().bilinear()[1]
        return {"n_epochs": len(self.loss_history_), "lr": float(self.lr), "mf_reg": prior}

    def _config(self) -> MWGPConfig:
        """Validated hyper-parameters (raises ValueError/TypeError naming the parameter)."""
        return MWGPConfig(**self._hyper_params())

    def _hyper_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MWGPConfig.names()}


#: lists of at most this many raw ids, all known with their own type, are encoded by dict lookups
#: (:meth:`IdEncoder.lookup`)
FEW_IDS = 8


class IdEncoder:
    """Maps raw ids of one factor (ints, strings, any hashable) to inner indices 0..n-1; unknown -> -1.

    Ids are labels matched by value *and* type, as in Surprise: ``196`` and ``"196"`` are two
    different ids (see :func:`warn_id_twins` for the warning when that is likely a mix-up).
    """

    def __init__(self, name: str, classes: Sequence[Any] | np.ndarray) -> None:
        self.name = name
        self.classes_ = pd.Index(id_array(classes)) if len(classes) else pd.Index([], dtype=object)

    @classmethod
    def fit(cls, name: str, values: Sequence[Any] | np.ndarray) -> tuple["IdEncoder", np.ndarray]:
        """An encoder of the distinct ``values`` (in order of appearance) and the inner index of each value."""
        try:
            codes, uniques = pd.factorize(pd.Index(id_array(values)), sort=False)
        except TypeError as exc:
            raise _unhashable(f"{name} ids must be", values) or exc from None
        return cls(name, uniques), codes.astype(np.int64)

    @property
    def n_levels(self) -> int:
        return len(self.classes_)

    def transform(self, values: Sequence[Any] | np.ndarray) -> np.ndarray:
        if isinstance(values, (list, tuple)) and len(values) <= FEW_IDS:  # e.g. one user's recommend: dict lookups
            codes = [self.lookup(value) for value in values]
            if None in codes and type(self.classes_) is pd.Index and self.classes_.dtype.kind in "iuO":
                # a str or int equal to no known id is unseen, as a plain index of ints, strings or objects finds
                # (a DatetimeIndex or PeriodIndex parses strings), without its hash table (built again for each
                # encoder with a folded-in user: some 5 ms at 200,000 users)
                codes = [-1 if code is None and type(value) in (str, int) and self._table()[0].get(value) is None
                         else code for code, value in zip(codes, values)]
            if None not in codes:
                return np.array(codes, dtype=np.int64)
        try:
            return self.classes_.get_indexer(pd.Index(id_array(values))).astype(np.int64)
        except TypeError as exc:
            raise _unhashable(f"{self.name} ids must be", values) or exc from None

    def with_id(self, value: Any) -> "IdEncoder":
        """A new encoder with ``value`` as the next inner index (a folded-in user); ``self`` is unchanged.

        The maps are copied whole in C (the index, and the lookup table when built), never rebuilt id by id:
        at 200,000 users rebuilding them cost the first request after each fold-in some 30 ms."""
        value_array = id_array([value])
        added = pd.Index(value_array)
        if added.dtype == self.classes_.dtype != object:  # ints to ints, strings to strings
            classes = self.classes_.append(added)
        else:  # of mixed types: an object index as pandas' append gives, without its inference (28 ms at 200,000)
            classes = pd.Index(np.concatenate([self.classes_.to_numpy(dtype=object), value_array.astype(object)]),
                               dtype=object, copy=False)
        new = object.__new__(IdEncoder)  # not __init__: it would infer the index's dtype again
        new.name, new.classes_ = self.name, classes
        table = self.__dict__.get("_lookup")
        if table is not None:
            lookup = dict(table[0])
            lookup[value] = len(table[1])
            new._lookup = (lookup, [*table[1], value])
        return new

    def __contains__(self, value: Any) -> bool:
        return value in self.classes_

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lookup", None)  # rebuilt on first use
        return state

    def _table(self) -> tuple[dict, list]:
        """(raw id -> inner index, the raw ids), built at the first lookup."""
        table = self.__dict__.get("_lookup")
        if table is None:
            ids = self.classes_.tolist()
            table = self._lookup = ({v: i for i, v in enumerate(ids)}, ids)
        return table

    def lookup(self, value: Any) -> int | None:
        """The inner index of one raw id that is a known id of the same type, else None (then
        :meth:`transform` decides: an unseen id, or a known one of another type such as ``np.int64``).
        A dict lookup: about 0.3 us against some 100 us for ``transform`` of one id."""
        table = self._table()
        try:
            pos = table[0].get(value)
        except TypeError:  # unhashable
            return None
        return pos if pos is not None and type(table[1][pos]) is type(value) else None


def _unhashable(subject: str, values: Sequence[Any] | np.ndarray, unit: str = "position") -> TypeError | None:
    """The error naming the first raw id that cannot be one (a list, a dict: ids are hashable labels), if any;
    ``subject`` says what must be hashable (``"user ids must be"``)."""
    for pos, value in enumerate(values):
        try:
            hash(value)
        except TypeError:
            return TypeError(f"{subject} hashable labels such as str or int; got the "
                             f"{type(value).__name__} {reprlib.repr(value)} at {unit} {pos}")
    return None


def id_array(values) -> np.ndarray:
    """Raw ids as a 1-D array in which every id keeps its own type: from a list ``[1, "a"]`` stay an int
    and a str (``np.asarray`` would make both strings) and a tuple stays one id."""
    if isinstance(values, (np.ndarray, pd.Index, pd.Series)):
        arr = np.asarray(values)
        return arr.astype(object) if arr.dtype.kind in "OUS" else arr
    values = list(values)
    if values and all(type(v) is int for v in values):  # the common case: an int64 array (fast lookups)
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.fromiter(values, dtype=object, count=len(values))


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
    if values.dtype.kind in "mM":  # datetimes and timedeltas: NaT is a missing id
        missing = np.isnat(values)
        if missing.any():
            raise ValueError(f"id column {name!r} must not contain NaT; found {int(missing.sum())} (first at row "
                             f"{int(np.flatnonzero(missing)[0])})")
        return
    if values.dtype.kind != "O":
        return
    missing = pd.isna(values)
    if missing.any():
        pos = int(np.flatnonzero(missing)[0])
        raise ValueError(f"id column {name!r} must not contain None/NaN; found {int(missing.sum())} "
                         f"(first at row {pos}: {values[pos]!r})")
    try:
        distinct = pd.unique(values)
    except TypeError as exc:
        raise _unhashable(f"id column {name!r} must hold", values, "row") or exc from None
    strings = [v for v in distinct if isinstance(v, str)]
    if strings and len(strings) < len(distinct):  # a mix of str and other ids: fine unless two spell the same id
        present = set(distinct.tolist())
        for value in strings:
            twin = known_twin(value, present.__contains__)
            if twin is not None:
                warnings.warn(f"id column {name!r} holds both {twin!r} and {value!r}; ids are matched by value and "
                              "type, so these are two different levels. Convert the ids to one type (e.g. "
                              "with str()) if they mean the same one.", UserWarning, stacklevel=caller_stacklevel())
                break


def plain_id(value: Any) -> Any:
    """A raw id as a plain Python value (``np.int64(7)`` -> ``7``, also inside a tuple id), as model files store
    them (equal to the id, and of the same hash)."""
    if isinstance(value, tuple):
        return tuple(plain_id(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


#: each adapter's lock for changing its fitted state (a fold-in stores a user) and for reading all of it at once
#: (save, pickle): threads of a service share one model. Kept out of pickles and files
_STORE_LOCKS: "weakref.WeakKeyDictionary[Any, threading.Lock]" = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def store_lock(adapter: Any) -> threading.Lock:
    with _LOCKS_LOCK:
        return _STORE_LOCKS.setdefault(adapter, threading.Lock())


def known_twin(value: Any, known: Callable[[Any], bool]) -> Any:
    """The same id spelt with the other type (:func:`id_twin`) where ``known`` knows it, else None."""
    twin = id_twin(value)
    return twin if twin is not None and known(twin) else None


def check_not_twin(name: str, value: Any, known: Callable[[Any], bool]) -> None:
    """Refuse to add ``value`` as a new id when the same id with the other type is known (196 vs "196")."""
    twin = known_twin(value, known)
    if twin is not None:
        raise ValueError(f"{name} id {value!r} ({type(value).__name__}) is not in the model, but {twin!r} "
                         f"({type(twin).__name__}) is; ids are matched by value and type. Pass {twin!r} for that "
                         f"{name} (a new {name} {value!r} would be a second, separate {name})")


def id_twin(value: Any) -> Any:
    """The same id spelt with the other type: ``"196"`` for ``196``, ``196`` for ``"196"``, ``0`` for ``False``
    (a context column of bins 0 / 1 asked with booleans); else None."""
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text  # one sign at most: "--5" is no number
        return int(text) if digits.isdecimal() else None
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    integral = isinstance(value, (numbers.Integral, np.integer))
    if integral or (isinstance(value, (float, np.floating)) and float(value).is_integer()):
        return str(int(value))
    return None


# fitted models (their posterior or encoders) that already warned about an id mix-up, per factor name
_TWIN_WARNED: "weakref.WeakKeyDictionary[Any, set[str]]" = weakref.WeakKeyDictionary()
_MAX_TWIN_CHECKS = 10_000


def encode_ids(owner: Any, encoder: IdEncoder, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Inner indices of raw ids of one factor, -1 for unseen ones: the one id path of both adapters.

    ``owner`` stands for the fitted model (an object that lives as long as the fit: its posterior, or its
    encoders): an unseen id that is a known id spelt with the other type warns once per owner and factor
    (:func:`warn_id_twins`).
    """
    codes = encoder.transform(values)
    warn_id_twins(owner, encoder.name, values, codes, encoder.__contains__)
    return codes


def warn_id_twins(owner: Any, name: str, values: Sequence[Any], codes: np.ndarray,
                  known: Callable[[Any], bool]) -> None:
    """Warn once per fitted model and factor when an unseen id is a known id spelt with another type.

    ``Dataset.load_builtin("ml-100k")`` holds raw ids as strings, so ``predict(196, 242)`` would
    silently give a cold-start answer for a user and item that are in the data; this names it.
    """
    if name in _TWIN_WARNED.get(owner, ()):
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
        twin = known_twin(value, known)
        if twin is not None:
            n_twins = int(sum(1 for p in unknown if known_twin(values[p], known) is not None))
            warnings.warn(
                f"{name} id {plain_id(value)!r} ({type(value).__name__}) is not in the training data, but {twin!r} "
                f"({type(twin).__name__}) is: ids are matched by value and type (ids read from text, as in "
                f"Surprise's data sets, are strings). {n_twins} {name} id(s) like this get the cold-start "
                f"(unseen {name}) answer; pass ids of the type used in training.", UserWarning,
                stacklevel=caller_stacklevel())
            _TWIN_WARNED.setdefault(owner, set()).add(name)
            return
        if len(seen) >= _MAX_TWIN_CHECKS:
            return


# -- Surprise trainsets (shared by MWGP and the baselines with a predictive distribution) ----------
_UNKNOWN_PREFIX = "UKN__"  # how AlgoBase.predict passes an id that is not in the trainset to estimate()


def inner_or_unknown(x: int | str) -> int:
    """An id as ``AlgoBase.estimate`` receives it: the inner id, or -1 for Surprise's ``UKN__<raw>``."""
    return -1 if isinstance(x, str) and x.startswith(_UNKNOWN_PREFIX) else int(x)


def trainset_arrays(trainset: Any) -> tuple[np.ndarray, np.ndarray]:
    """A Surprise ``Trainset``'s ratings as (inner (user, item) index (n, 2), ratings (n,)), user by user."""
    n = trainset.n_ratings
    index = np.empty((n, 2), dtype=np.int64)
    ratings = np.empty(n, dtype=np.float64)
    pos = 0
    for u, user_ratings in trainset.ur.items():
        k = len(user_ratings)
        if k:
            block = np.asarray(user_ratings, dtype=np.float64)
            index[pos:pos + k, 0] = u
            index[pos:pos + k, 1] = block[:, 0]
            ratings[pos:pos + k] = block[:, 1]
            pos += k
    return index[:pos], ratings[:pos]
