"""MW-GP as a scikit-learn regressor over (user, item[, context]) id columns."""
from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import check_is_fitted

from ..core.checkpoint import Checkpointing
from ..core.errors import caller_stacklevel
from ..core.trainer import fit_mwgp
from ._common import (PARAMS_DOC, HyperParamsMixin, IdEncoder, check_id_column, encode_ids, plain_id,
                      store_lock)
from ._rated import item_counts, rated_pairs, rated_rows, user_rated, with_user_rated
from ._users import UserModelMixin
from .persistence import check_loadable_ids, load_model, save_model


class MWGPRegressor(HyperParamsMixin, UserModelMixin, RegressorMixin, BaseEstimator):
    __doc__ = f"""Multi-output GP matrix factorisation (MW-GP) as a scikit-learn regressor.

    ``X`` holds categorical ids, one column per factor: ``(user, item)``, optionally followed by
    context columns (e.g. a time bin), each with its own embedding and kernel factor
    (k = k_user * k_item * k_context). Every column is treated as categorical ids, never as a
    numeric feature. Ids may be ints, strings or any hashable values; a
    DataFrame's column names are remembered. Ids unseen in ``fit`` are allowed at prediction
    time (cold start: wider variance).

    ``predict(X, return_std=True)`` returns the predictive mean and standard deviation of the
    observed rating (noise included); ``predict_dist(X)`` returns ``(mean, var)`` with
    ``var == std ** 2``.

    Parameters
    ----------
    {PARAMS_DOC}
    Attributes
    ----------
    posterior_ : MWGPPosterior
    encoders_ : list of IdEncoder
        Raw id -> inner index maps, one per column of ``X``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` was a DataFrame with string column names.
    loss_history_ : list of float
    fit_time_ : float
    chosen_params_ : dict
        What the final training run used: ``n_epochs`` (chosen by early stopping when it is on), ``lr`` and
        ``mf_reg`` (on small data chosen by early stopping's search, see ``MWGPConfig.search_space``).
    """

    def fit(self, X: Any, y: Any, *, checkpoint: Any = None, checkpoint_every: int = 1,
            resume: bool = False) -> "MWGPRegressor":
        """Fit on id columns ``X`` of shape (n_ratings, n_factors >= 2) and ratings ``y`` of shape (n_ratings,).

        ``checkpoint``, ``checkpoint_every``, ``resume``: save the training state to that file every
        ``checkpoint_every`` epochs, and continue from it (same data and hyper-parameters: the result equals an
        uninterrupted fit), as :meth:`mogp_surprise.MWGP.fit`.
        """
        started = time.perf_counter()
        config = self._config()
        checkpointing = Checkpointing.of(checkpoint, checkpoint_every, resume)
        columns, names = _split_columns(X, expected=None)
        y = _check_target(y, len(columns[0]))
        if names is not None:
            lower = [n.lower() for n in names]
            if "user" in lower and "item" in lower and lower.index("item") < lower.index("user"):
                warnings.warn(f"X's columns are read by position: the first is the user, the second the item; here "
                              f"they are {names[:2]} (reorder them, e.g. X[['user', 'item']], if 'item' holds the "
                              "items)", UserWarning, stacklevel=caller_stacklevel())
        fitted = [IdEncoder.fit(name, col) for name, col in zip(_labels(names, len(columns)), columns)]
        encoders = [enc for enc, _ in fitted]
        index = np.stack([codes for _, codes in fitted], axis=1)
        result = fit_mwgp(index, y, tuple(enc.n_levels for enc in encoders), config, checkpointing=checkpointing)
        rated = rated_rows(index[:, 0], index[:, 1], y, encoders[0].n_levels) if len(columns) == 2 else None
        # the fitted state replaced whole, after the fit: a refit that fails (diverged, interrupted) leaves the model
        # as it was, not the new ids with the old posterior (which served one user's answers to another)
        with store_lock(self):
            self.n_features_in_ = len(columns)
            if names is not None:
                self.feature_names_in_ = np.asarray(names, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            self.encoders_, self._rated, self.rating_range_ = encoders, rated, (float(y.min()), float(y.max()))
            self._store_fit(result, started)
        return self

    def predict_dist(self, X: Any, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean (not clipped) and variance, each of shape (n_samples,); an id unseen in ``fit`` gets
        the cold-start answer (the same contract as :meth:`mogp_surprise.MWGP.predict_dist`).

        ``include_noise=False`` gives the variance of the latent preference f instead of the
        observed rating.
        """
        check_is_fitted(self, "posterior_")
        columns, names = _split_columns(X, expected=self.n_features_in_)
        self._check_names(names)
        index = np.stack([self._encode(enc, col) for enc, col in zip(self.encoders_, columns)], axis=1)
        return self.posterior_.predict(index.reshape(-1, self.n_features_in_), include_noise=include_noise,
                                       chunk_size=getattr(self, "chunk_size", None))  # as set now, not at fit

    def predict(self, X: Any, return_std: bool = False):
        """Predictive mean, and with ``return_std=True`` also the standard deviation."""
        mean, var = self.predict_dist(X)
        return (mean, np.sqrt(var)) if return_std else mean

    def recommend(self, user: Any, n: int = 10, strategy: str = "auto", kappa: float | None = None,
                  exclude_rated: bool = True, ratings: Any = None, random_state: Any = None) -> pd.DataFrame:
        """Top-``n`` items for one raw user id; see :meth:`mogp_surprise.MWGP.recommend`.

        ``ratings`` ({item: rating} or (item, rating) pairs) are folded in for this call only.
        Only for (user, item) models (two id columns).
        """
        return self._recommend(user, n, strategy, kappa, exclude_rated, ratings, random_state)

    def recommend_many(self, users: Any, n: int = 10, strategy: str = "auto", kappa: float | None = None,
                       exclude_rated: bool = True, random_state: Any = None) -> pd.DataFrame:
        """Batched :meth:`recommend`: one DataFrame with columns user, rank, item, est, mean, std, score."""
        return self._recommend_many(users, n, strategy, kappa, exclude_rated, random_state)

    def ask(self, user: Any, n: int = 5, ratings: Any = None, candidates: Any = None,
            exclude: Any = None) -> pd.DataFrame:
        """The items whose ratings are expected to teach the model most about a user; see
        :meth:`mogp_surprise.MWGP.ask`. Only for (user, item) models (two id columns)."""
        return self._ask(user, n, ratings, candidates, exclude)

    def fold_in(self, user: Any, ratings: Any) -> "MWGPRegressor":
        """Take a user's ratings into account without refitting; see :meth:`mogp_surprise.MWGP.fold_in`.

        ``ratings``: {item: rating} or (item, rating) pairs of items seen in ``fit``, within the range
        of the training ratings (``rating_range_``). A new ``user`` becomes a known id of the first
        column; a known user's posterior is updated by these (see MWGP.fold_in). Only for
        (user, item) models. Returns ``self``.
        """
        return self._fold_in(user, ratings)

    # -- where UserModelMixin finds ids and ratings ------------------------------------------------
    def _check_fitted(self):
        check_is_fitted(self, "posterior_")
        return self.posterior_

    @property
    def _user_label(self) -> str:
        return self.encoders_[0].name

    def _user_codes(self, raw: Any) -> np.ndarray:
        return self._encode(self.encoders_[0], list(raw))  # a list: tuple ids stay ids

    def _user_encoder(self) -> IdEncoder:
        return self.encoders_[0]

    def _item_encoder(self) -> IdEncoder:
        return self.encoders_[1]

    def _raw_items(self) -> np.ndarray:
        return self.encoders_[1].classes_.to_numpy()

    def _known_ratings(self, user: int) -> tuple[np.ndarray, np.ndarray | None]:
        return user_rated(self._rated, user)  # no ratings in files written before fold-in existed

    def _rating_range(self) -> tuple[tuple[float, float] | None, str]:
        return getattr(self, "rating_range_", None), "the range of the training ratings"

    def _item_counts(self) -> np.ndarray:
        return item_counts(self._rated, self.encoders_[1].n_levels)

    def _rated_source(self) -> Any:
        return self._rated

    def _rated_pairs(self) -> tuple[np.ndarray, np.ndarray, int, int]:
        return (*rated_pairs(self._rated), self.encoders_[1].n_levels)

    def _store_user(self, user: Any, row: int, items: np.ndarray, values: np.ndarray) -> None:
        self._rated = with_user_rated(self._rated, row, items, values)
        users = self.encoders_[0]  # the id last: a reader finds the user's row and ratings once it finds the id
        if row >= users.n_levels:
            self.encoders_[0] = users.with_id(user)

    def save(self, path) -> None:
        """Save the fitted model (weights, id maps, hyper-parameters, versions) to ``path``."""
        check_is_fitted(self, "posterior_")
        with store_lock(self):  # one state: not half way through a fold-in of another thread
            classes = [[plain_id(c) for c in enc.classes_.tolist()] for enc in self.encoders_]
            for enc, ids in zip(self.encoders_, classes):
                check_loadable_ids(enc.name, ids)
            state = {"classes": classes, "names": [enc.name for enc in self.encoders_],
                     "feature_names_in": (list(self.feature_names_in_) if hasattr(self, "feature_names_in_")
                                          else None),
                     "rated": (None if self._rated is None else [torch.from_numpy(a) for a in self._rated]),
                     "rating_range": getattr(self, "rating_range_", None)}
            save_model(self, path, state)

    @classmethod
    def load(cls, path, device=None) -> "MWGPRegressor":
        """Load a model written by :meth:`save` (``device``: where to put it; default CPU)."""
        est, st = load_model(cls, path, device)
        est.encoders_ = [IdEncoder(name, classes) for name, classes in zip(st["names"], st["classes"])]
        est.n_features_in_ = len(est.encoders_)
        if st["feature_names_in"] is not None:
            est.feature_names_in_ = np.asarray(st["feature_names_in"], dtype=object)
        rated = st["rated"]  # (indptr, items, ratings); no ratings in files written before fold-in existed
        est._rated = None if rated is None else tuple(None if t is None else t.numpy() for t in rated)
        if st.get("rating_range") is not None:
            est.rating_range_ = tuple(st["rating_range"])
        return est

    def _encode(self, encoder: IdEncoder, values: np.ndarray | list) -> np.ndarray:
        """Inner indices of one id column, -1 for unseen ids (warns once when 196 was meant as '196')."""
        return encode_ids(self.posterior_, encoder, values)

    def __getstate__(self) -> dict:
        with store_lock(self):  # not half way through a fold-in; a copy: on Python >= 3.11 scikit-learn returns the
            return dict(super().__getstate__())  # live __dict__, which a copy or pickle then read after the lock

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        rated = self.__dict__.get("_rated")
        if rated is not None and len(rated) == 2:  # pickled before fold-in existed: no ratings
            self._rated = (*rated, None)

    def _check_names(self, names: list[str] | None) -> None:
        """Columns by name as scikit-learn's estimators check them: other names are an error, names on one side
        only a warning with scikit-learn's words (the columns are then read by position)."""
        fitted = getattr(self, "feature_names_in_", None)
        if fitted is not None and names is not None and list(names) != list(fitted):
            raise ValueError(f"X has columns {list(names)}, but {type(self).__name__} was fitted with "
                             f"columns {list(fitted)}")
        if (fitted is None) != (names is None):
            warnings.warn(f"X does not have valid feature names, but {type(self).__name__} was fitted with feature "
                          f"names" if names is None else f"X has feature names, but {type(self).__name__} was "
                          f"fitted without feature names", UserWarning, stacklevel=caller_stacklevel())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        # scikit-learn's generic regression checks feed continuous features; this estimator treats
        # every value as a categorical id (each one a new level), so their R^2 bar does not apply
        tags.regressor_tags.poor_score = True
        return tags


def _labels(names: list[str] | None, n: int) -> list[str]:
    if names is not None:
        return list(names)
    return ["user", "item", "context"][:n] + [f"context{k}" for k in range(2, n - 1)]


def _split_columns(X: Any, expected: int | None) -> tuple[list[np.ndarray], list[str] | None]:
    """Id columns of X as 1-D arrays, with their names when X is a DataFrame."""
    if X is None:
        raise ValueError("X must be an array-like or DataFrame of id columns (user, item[, context]), got None")
    names = None
    if isinstance(X, pd.DataFrame):
        if all(isinstance(c, str) for c in X.columns):
            names = [str(c) for c in X.columns]
        columns = [X.iloc[:, k].to_numpy() for k in range(X.shape[1])]
        n_rows = X.shape[0]
    else:
        if hasattr(X, "toarray") or hasattr(X, "tocsr"):
            raise TypeError("X must be dense id columns; sparse matrices are not supported")
        arr = np.asarray(X, dtype=None if isinstance(X, np.ndarray) and X.dtype.kind != "O" else object)
        if arr.ndim != 2:
            raise ValueError(f"X must be 2-D with one column per factor (user, item[, context]); got an array "
                             f"with {arr.ndim} dimension(s) and shape {arr.shape}. Reshape your data, e.g. a "
                             "single pair as [[user, item]].")
        columns = [arr[:, k] for k in range(arr.shape[1])]
        n_rows = arr.shape[0]
    # in the machine's byte order (pandas' hash tables refuse big-endian buffers)
    columns = [col.astype(col.dtype.newbyteorder("=")) if not col.dtype.isnative else col for col in columns]
    n_cols = len(columns)
    if any(col.dtype.kind == "c" for col in columns):
        raise ValueError("Complex data not supported: X must hold id values")
    if expected is None and n_cols < 2:
        raise ValueError(f"X has {n_cols} feature(s) (shape=({n_rows}, {n_cols})) while a minimum of 2 is "
                         "required: one id column per factor (user, item[, context...])")
    if expected is not None and n_cols != expected:
        raise ValueError(f"X has {n_cols} features, but MWGPRegressor is expecting {expected} features as input "
                         f"(the id columns seen in fit)")
    if expected is None and n_rows < 2:
        raise ValueError(f"Found array with {n_rows} sample(s) (shape=({n_rows}, {n_cols})) while a minimum of "
                         f"2 is required: MW-GP needs at least 2 ratings (n_samples={n_rows})")
    for name, col in zip(_labels(names, n_cols), columns):
        check_id_column(name, col)
    return columns, names


def _check_target(y: Any, n_rows: int) -> np.ndarray:
    if y is None:
        raise ValueError("MWGPRegressor requires y to be passed, but the target y is None (y: the ratings)")
    if isinstance(y, (pd.Series, pd.DataFrame)):
        arr = y.to_numpy()
    elif isinstance(y, np.ndarray):
        arr = y
    else:  # a list keeps each element's own type, so a bad one can be named
        arr = np.asarray(y)
        if arr.dtype.kind in "USO":
            arr = np.array(y, dtype=object)
    if arr.ndim == 2 and arr.shape[1] == 1:
        warnings.warn("A column-vector y was passed when a 1d array was expected; y is raveled to shape "
                      "(n_samples,)", DataConversionWarning, stacklevel=3)
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D ratings of shape (n_samples,), got shape {arr.shape}")
    if arr.shape[0] != n_rows:
        raise ValueError(f"X and y have inconsistent lengths: X has {n_rows} rows, y has {arr.shape[0]}")
    if arr.dtype.kind == "c":
        raise ValueError(f"y must hold real numeric ratings, got complex dtype {arr.dtype}")
    if arr.dtype.kind not in "biuf":
        values = arr.tolist()
        for pos, value in enumerate(values):
            if not (_is_number(value) or value is None):
                raise ValueError(f"y must hold numeric ratings; found {value!r} ({type(value).__name__}) at row {pos}")
        arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        pos = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"y must be finite; found {int((~np.isfinite(arr)).sum())} NaN/inf ratings "
                         f"(first at row {pos}: {float(arr[pos])!r})")
    return arr


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
