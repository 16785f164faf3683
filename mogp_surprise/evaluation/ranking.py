"""Ranking metrics of rating predictions: precision@k, recall@k and NDCG@k, averaged over users.

Each user's test items are ranked by the predicted score (highest first); the metrics ask how
many of the top ``k`` the user really liked. An item is **relevant** when its true rating is
``>= threshold``. Definitions (those of Surprise's FAQ, "How to compute precision@k and
recall@k", for precision and recall):

- an item is **recommended** when it is among the user's ``k`` highest scores *and* its score is
  ``>= threshold`` (``recommend_above_threshold=False``: every item of the top ``k`` is);
- precision@k = relevant recommended items / recommended items, **0** when nothing is recommended;
- top-k precision (``top_precision_at_{k}`` in :func:`ranking_report`) = relevant items among the
  user's top ``k`` / the items in it: precision@k with every top-``k`` item recommended, whatever its
  score. The FAQ's precision@k counts a user whose scores are all below the threshold as 0 whatever
  their ranking, so a model that predicts more users' best items just below the threshold scores lower
  there with the same ranking; top-k precision measures the ranking alone;
- recall@k = relevant recommended items / relevant items, **0** when the user has no relevant item;
- NDCG@k = DCG@k / IDCG@k with DCG@k = sum over the top ``k`` of gain / log2(position + 1)
  (positions 1, 2, ...), IDCG@k the DCG@k of the best ordering of the same items; the gain is 1
  for a relevant item and 0 otherwise (``relevance="binary"``, the default) or the true rating
  (``relevance="graded"``); **0** when IDCG@k is 0 (no relevant item);
- a user with fewer than ``k`` test items is ranked over the items there are;
- every user with at least one test item counts once in the average.

Ties in the score are broken by input order (a stable sort), as Surprise's recipe (Python's
stable ``sort``) and the QP curves do, so the result is deterministic.

>>> users, y, score = ["a", "a", "a", "b", "b"], [5, 3, 4, 2, 5], [4.5, 4.2, 3.0, 4.1, 3.9]
>>> precision_recall_at_k(users, y, score, k=2, threshold=4)  # a: 1/2, 1/2; b: 0/1, 0/1
(0.25, 0.25)
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ._validation import as_1d, finite_real

__all__ = ["top_k_mask", "precision_recall_at_k", "ndcg_at_k", "ranking_per_user", "ranking_report",
           "default_relevance_threshold"]

#: The default relevance threshold sits at this share of the rating scale: 4 on 1-5.
RELEVANCE_POSITION = 0.75


def default_relevance_threshold(rating_scale: tuple[float, float]) -> float:
    """The relevance threshold used when none is given: 3/4 of the way up the rating scale.

    4 on MovieLens' 1-5 scale (the usual "rated 4 or 5"), 3.875 on 0.5-5 (ratings 4, 4.5 and 5
    are relevant, as ``>= 4`` would say), 5 on Jester's -10..10.

    Parameters
    ----------
    rating_scale : tuple of (float, float)
        Lowest and highest rating.

    Returns
    -------
    float
    """
    pair = None if isinstance(rating_scale, (str, bytes)) else np.asarray(rating_scale, dtype=object)
    low, high = (None, None) if pair is None or pair.shape != (2,) else (finite_real(v) for v in pair)
    if low is None or high is None or not low < high:
        raise ValueError("`rating_scale` must be two finite numbers (low, high) with low < high; "
                         f"got {rating_scale!r}")
    return low + RELEVANCE_POSITION * (high - low)


def _check_k(k: object) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"`k` must be an int >= 1; got {k!r}")
    return int(k)


def _check_threshold(threshold: object) -> float:
    if (number := finite_real(threshold)) is None:
        raise ValueError(f"`threshold` must be a finite number; got {threshold!r}")
    return number


def _id_array(users: object) -> np.ndarray:
    """User ids as a 1-D array (a tuple id stays one id; an iterator is read once)."""
    if isinstance(users, (np.ndarray, pd.Series)):
        arr = np.asarray(users)  # in the machine's byte order: pandas' hash tables refuse big-endian buffers
        return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))
    if isinstance(users, (list, tuple, Iterator)):
        values = list(users)
        nested = [(k, v) for k, v in enumerate(values) if isinstance(v, (list, np.ndarray, dict, set))][:1]
        if nested:
            raise ValueError(f"`users` must be 1-D, one id per rating; got the {type(nested[0][1]).__name__} "
                             f"{nested[0][1]!r} at position {nested[0][0]}")
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr
    return np.asarray(users, dtype=object)


def _user_codes(users: object, n: int | None = None) -> np.ndarray:
    """Codes 0..n_users-1 of the user ids (any hashable ids), in order of first appearance."""
    arr = _id_array(users)
    if arr.ndim != 1:
        raise ValueError(f"`users` must be 1-D; got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("`users` must not be empty; got an array of shape (0,)")
    if n is not None and arr.size != n:
        raise ValueError(f"`users` must hold one id per score ({n}); got {arr.size}")
    codes, _ = pd.factorize(arr, use_na_sentinel=True)
    if (codes < 0).any():
        first = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"`users` must not hold missing ids (None or NaN); got {arr[first]!r} at position {first}")
    return codes


def _check(users: object, y_true: object, scores: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = as_1d(y_true, "y_true")
    s = as_1d(scores, "scores")
    if y.size != s.size:
        raise ValueError(f"`y_true` and `scores` must have the same length; got {y.size} and {s.size}")
    return _user_codes(users, y.size), y, s


def _positions(codes: np.ndarray, key: np.ndarray) -> np.ndarray:
    """0-based position of every row in its user's list sorted by ``key`` descending (ties: input order)."""
    n = codes.size
    order = np.lexsort((np.arange(n), -key, codes))  # last key is the primary one
    starts = np.concatenate([[0], np.cumsum(np.bincount(codes))[:-1]])
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - starts[codes[order]]
    return pos


def top_k_mask(users: object, scores: object, k: int = 10) -> np.ndarray:
    """Which rows are among their user's ``k`` highest scores (ties broken by input order).

    Parameters
    ----------
    users : array-like of shape (n,)
        User id of every row (any hashable ids).
    scores : array-like of shape (n,)
        Ranking scores (higher first).
    k : int, default=10

    Returns
    -------
    ndarray of bool of shape (n,)
    """
    s = as_1d(scores, "scores")
    return _positions(_user_codes(users, s.size), s) < _check_k(k)


def _per_user(codes: np.ndarray, y: np.ndarray, s: np.ndarray, k: int, threshold: float,
              recommend_above_threshold: bool, relevance: str, top_precision: bool = False) -> pd.DataFrame:
    """The per-user frame of :func:`ranking_per_user`; ``top_precision``: with a ``top_precision`` column too
    (precision with every top-k item recommended), from the same ranking."""
    if relevance not in ("binary", "graded"):
        raise ValueError(f"`relevance` must be 'binary' or 'graded'; got {relevance!r}")
    if relevance == "graded" and (y < 0).any():
        raise ValueError(f"`relevance='graded'` uses the true ratings as gains and needs them >= 0; got "
                         f"{float(y.min())!r} (use relevance='binary' on this rating scale)")
    n_users = int(codes.max()) + 1
    relevant = y >= threshold
    pos = _positions(codes, s)
    top = pos < k
    recommended = top & (s >= threshold) if recommend_above_threshold else top

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(codes, weights=mask.astype(np.float64), minlength=n_users)

    n_rel, n_rec, n_hit = count(relevant), count(recommended), count(relevant & recommended)
    gain = relevant.astype(np.float64) if relevance == "binary" else y
    discount = 1.0 / np.log2(np.arange(min(k, codes.size)) + 2.0)  # positions stop at the number of rows
    dcg = np.bincount(codes[top], weights=gain[top] * discount[pos[top]], minlength=n_users)
    ideal_pos = _positions(codes, gain)
    best = ideal_pos < k
    idcg = np.bincount(codes[best], weights=gain[best] * discount[ideal_pos[best]], minlength=n_users)
    with np.errstate(invalid="ignore", divide="ignore"):
        frame = pd.DataFrame({
            "n_items": np.bincount(codes, minlength=n_users), "n_relevant": n_rel.astype(np.int64),
            "n_recommended": n_rec.astype(np.int64),
            "precision": np.where(n_rec > 0, n_hit / n_rec, 0.0), "recall": np.where(n_rel > 0, n_hit / n_rel, 0.0),
            "ndcg": np.where(idcg > 0, dcg / idcg, 0.0)})
        if top_precision:  # every user has >= 1 item, so >= 1 in the top k
            frame["top_precision"] = count(relevant & top) / count(top)
    return frame


def ranking_per_user(users: object, y_true: object, scores: object, k: int = 10, threshold: float = 4.0, *,
                     recommend_above_threshold: bool = True, relevance: str = "binary") -> pd.DataFrame:
    """Precision@k, recall@k and NDCG@k of every user (the module's definitions).

    Parameters
    ----------
    users : array-like of shape (n,)
        User id of every test rating (any hashable ids).
    y_true : array-like of shape (n,)
        True ratings.
    scores : array-like of shape (n,)
        Predicted ratings (or any ranking score, higher first).
    k : int, default=10
        Length of the top list.
    threshold : float, default=4.0
        A rating ``>= threshold`` is relevant (4 suits a 1-5 scale; see
        :func:`default_relevance_threshold` for others).
    recommend_above_threshold : bool, default=True
        Surprise's FAQ: a top-k item is recommended only if its score is ``>= threshold`` too.
        False: every top-k item is recommended (for scores that are not ratings, e.g. mean - std).
    relevance : {"binary", "graded"}, default="binary"
        NDCG's gain: 1 for a relevant item, else 0; or the true rating (ratings must be >= 0).

    Returns
    -------
    pandas.DataFrame of shape (n_users, 6)
        Indexed by user id (first appearance order); columns ``n_items``, ``n_relevant``,
        ``n_recommended``, ``precision``, ``recall``, ``ndcg``.
    """
    users = _id_array(users)
    codes, y, s = _check(users, y_true, scores)
    if not isinstance(recommend_above_threshold, (bool, np.bool_)):  # "no" is not False
        raise ValueError(f"`recommend_above_threshold` must be True or False; got {recommend_above_threshold!r}")
    frame = _per_user(codes, y, s, _check_k(k), _check_threshold(threshold), bool(recommend_above_threshold),
                      relevance)
    distinct = pd.unique(users.astype(object)) if users.dtype != object else pd.unique(users)
    frame.index = pd.Index(list(distinct), name="user", tupleize_cols=False)
    return frame


def precision_recall_at_k(users: object, y_true: object, scores: object, k: int = 10, threshold: float = 4.0, *,
                          recommend_above_threshold: bool = True) -> tuple[float, float]:
    """Precision@k and recall@k averaged over users (Surprise's FAQ recipe; module docstring).

    Parameters
    ----------
    users, y_true, scores, k, threshold, recommend_above_threshold
        As in :func:`ranking_per_user`.

    Returns
    -------
    tuple of (float, float)
        Mean precision@k and mean recall@k over the users.
    """
    per_user = ranking_per_user(users, y_true, scores, k, threshold,
                                recommend_above_threshold=recommend_above_threshold)
    return float(per_user["precision"].mean()), float(per_user["recall"].mean())


def ndcg_at_k(users: object, y_true: object, scores: object, k: int = 10, threshold: float = 4.0, *,
              relevance: str = "binary") -> float:
    """NDCG@k averaged over users (module docstring).

    Parameters
    ----------
    users, y_true, scores, k, threshold, relevance
        As in :func:`ranking_per_user` (``threshold`` matters for ``relevance="binary"`` only).

    Returns
    -------
    float
    """
    return float(ranking_per_user(users, y_true, scores, k, threshold, relevance=relevance)["ndcg"].mean())


def ranking_report(users: object, y_true: object, scores: object, k: int = 10,
                   threshold: float = 4.0) -> dict[str, float]:
    """Precision@k, recall@k (Surprise's FAQ), top-k precision and binary NDCG@k, averaged over users, in one
    dict.

    Parameters
    ----------
    users, y_true, scores, k, threshold
        As in :func:`ranking_per_user`.

    Returns
    -------
    dict of str to float
        Keys ``precision_at_{k}``, ``recall_at_{k}``, ``top_precision_at_{k}`` (precision@k with every
        item of the top ``k`` recommended, whatever its score; module docstring), ``ndcg_at_{k}`` (``k``
        the number, e.g. ``precision_at_10``) and ``n_users`` (an int).
    """
    codes, y, s = _check(users, y_true, scores)
    k, threshold = _check_k(k), _check_threshold(threshold)
    per_user = _per_user(codes, y, s, k, threshold, True, "binary", top_precision=True)
    return {f"precision_at_{k}": float(per_user["precision"].mean()),
            f"recall_at_{k}": float(per_user["recall"].mean()),
            f"top_precision_at_{k}": float(per_user["top_precision"].mean()),
            f"ndcg_at_{k}": float(per_user["ndcg"].mean()), "n_users": int(len(per_user))}
