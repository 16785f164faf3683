"""Who rated what, user by user: the compressed rows both adapters serve from.

A ``Rated`` is a tuple ``(indptr, items, ratings)``: user ``u``'s items are ``items[indptr[u]:indptr[u + 1]]`` in
the order of their training ratings, with their ratings beside them (``ratings`` is None in regressor files written
before fold-in existed). The regressor keeps its training ratings in this form; :class:`~.surprise_algo.MWGP`
reads a user's ratings, the items' counts and the pairs from it too (:class:`~._trainset.SavedTrainset`), so that
serving a loaded model never builds Surprise's Python lists of every rating.
"""
from __future__ import annotations

import numpy as np

Rated = tuple  # (indptr (n_users + 1,), items (n,), ratings (n,) or None)


def rated_rows(users: np.ndarray, items: np.ndarray, ratings: np.ndarray | None, n_users: int) -> Rated:
    """The rows of ratings given as parallel arrays (any order of users; each user's ratings keep their order)."""
    users = np.asarray(users, dtype=np.int64)
    order = None if users.size < 2 or bool((users[1:] >= users[:-1]).all()) else np.argsort(users, kind="stable")

    def ordered(a):
        return a if order is None else a[order]
    counts = np.bincount(users, minlength=n_users)
    return (np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), ordered(np.asarray(items, dtype=np.int64)),
            None if ratings is None else ordered(np.asarray(ratings, dtype=np.float64)))


def user_rated(rated: Rated, user: int) -> tuple[np.ndarray, np.ndarray | None]:
    """One user's (items, ratings) (views)."""
    indptr, items, ratings = rated
    lo, hi = indptr[user], indptr[user + 1]
    return items[lo:hi], None if ratings is None else ratings[lo:hi]


def item_counts(rated: Rated, n_items: int) -> np.ndarray:
    """Training ratings per item."""
    return np.bincount(rated[1], minlength=n_items)


def rated_pairs(rated: Rated) -> tuple[np.ndarray, np.ndarray, int]:
    """(users, items, n_users) of every rating."""
    indptr, items = rated[0], rated[1]
    n_users = len(indptr) - 1
    return np.repeat(np.arange(n_users, dtype=np.int64), np.diff(indptr)), items, n_users


def with_user_rated(rated: Rated, row: int, items: np.ndarray, ratings: np.ndarray) -> Rated:
    """A copy with user ``row`` (known, or the next new row) rating exactly ``items`` with ``ratings``: the user's
    stretch replaced or appended, O(n_ratings) copies, no sort (rows without ratings stay without)."""
    indptr, old_items, old_ratings = rated
    counts = np.diff(indptr)
    lo, hi = (indptr[row], indptr[row + 1]) if row < len(counts) else (len(old_items), len(old_items))
    counts = np.append(counts, 0) if row == len(counts) else counts
    counts[row] = len(items)
    joined = None if old_ratings is None else np.concatenate([old_ratings[:lo], ratings, old_ratings[hi:]])
    return (np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            np.concatenate([old_items[:lo], items, old_items[hi:]]).astype(np.int64, copy=False),
            None if joined is None else joined.astype(np.float64, copy=False))
