"""The Surprise ``Trainset`` an :class:`~.surprise_algo.MWGP` holds: its ratings user by user, and a user's stored.

A loaded model's trainset is a :class:`SavedTrainset`: the saved arrays in compressed rows (:mod:`._rated`), from
which Surprise's per-user and per-item lists (``ur``, ``ir``) are built at their first use. Serving reads the rows
(a user's ratings, the items' counts), so a command-line call never builds the lists: 1.3–3.3 s of Python for
ML-1M's million ratings.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from surprise import Trainset

from ._common import trainset_arrays
from ._rated import Rated, item_counts, rated_pairs, rated_rows, user_rated


class SavedTrainset(Trainset):
    """A Surprise ``Trainset`` over compressed rows of ratings; ``ur`` and ``ir`` are built when first read.

    It behaves as the ``Trainset`` Surprise would build from the same ratings (same inner ids, each user's and
    item's ratings in the saved order): algorithms may be fitted on it, ``build_testset``, ``all_ratings``,
    ``global_mean`` and the id conversions work as documented by Surprise. Users stored since loading (fold-in)
    are kept beside the saved rows (``changed``: row -> (items, ratings)), which copies share: storing a user
    copies no array of every rating (on ML-1M, 8 ms a user).
    """

    def __init__(self, raw_users: list, raw_items: list, rated: Rated, rating_scale: tuple[float, float]):
        super().__init__(None, None, len(raw_users), len(raw_items), len(rated[1]), rating_scale,
                         {raw: k for k, raw in enumerate(raw_users)}, {raw: k for k, raw in enumerate(raw_items)})
        self._inner2raw_id_users, self._inner2raw_id_items = dict(enumerate(raw_users)), dict(enumerate(raw_items))
        self.saved, self.changed, self._rows, self._saved_counts = rated, {}, rated, None

    def user(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """One user's (items, ratings) (views)."""
        if row in self.changed:
            return self.changed[row]
        return user_rated(self.saved, row)

    def item_counts(self) -> np.ndarray:
        """Ratings per item (the saved rows' counts, kept for every copy, with the stored users' changes)."""
        if self._saved_counts is None:
            self._saved_counts = item_counts(self.saved, self.n_items)
        counts = self._saved_counts.copy()
        saved_users = len(self.saved[0]) - 1
        for row, (items, _) in self.changed.items():
            if row < saved_users:
                np.subtract.at(counts, user_rated(self.saved, row)[0], 1)
            np.add.at(counts, items, 1)
        return counts

    def rows(self) -> Rated:
        """Every user's ratings as compressed rows, the stored users' in their places (built once per copy)."""
        if self._rows is None:
            indptr, items, ratings = self.saved
            saved_users = len(indptr) - 1
            keep = np.ones(len(items), dtype=bool)
            for row in self.changed:
                if row < saved_users:
                    keep[indptr[row]:indptr[row + 1]] = False
            users = np.repeat(np.arange(saved_users, dtype=np.int64), np.diff(indptr))[keep]
            added = sorted(self.changed.items())
            self._rows = rated_rows(np.concatenate([users, *(np.full(len(its), r, np.int64) for r, (its, _) in added)]),
                                    np.concatenate([items[keep], *(its for _, (its, _) in added)]),
                                    np.concatenate([ratings[keep], *(rs for _, (_, rs) in added)]), self.n_users)
        return self._rows

    # Surprise sets ur / ir in its __init__ (None here: built from the rows when read)
    @property
    def ur(self) -> dict:
        if self._ur is None:
            self._ur = _lists(*self.rows())
        return self._ur

    @ur.setter
    def ur(self, value: Any) -> None:
        self.__dict__["_ur"] = value

    @property
    def ir(self) -> dict:
        if self._ir is None:
            indptr, items, ratings = self.rows()
            users = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
            self._ir = _lists(*rated_rows(items, users, ratings, self.n_items))
        return self._ir

    @ir.setter
    def ir(self, value: Any) -> None:
        self.__dict__["_ir"] = value

    @property
    def global_mean(self) -> float:
        if self._global_mean is None:
            self._global_mean = float(np.mean(self.rows()[2]))
        return self._global_mean

    def __getstate__(self) -> dict:
        # built again where needed: a pickle (surprise.dump, joblib's processes) holds the saved rows and the changes
        state = {**self.__dict__, "_ur": None, "_ir": None}
        state["_rows"] = self.saved if not self.changed else None
        return state


def _lists(indptr: np.ndarray, keys: np.ndarray, values: np.ndarray) -> dict[int, list]:
    """``{row: [(key, value), ...]}`` for every row of compressed rows, as Surprise keeps them (Python numbers)."""
    pairs = list(zip(keys.tolist(), values.tolist()))
    bounds = indptr.tolist()
    return {row: pairs[lo:hi] for row, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))}


def saved_trainset(raw_users: list, raw_items: list, index: np.ndarray, ratings: np.ndarray,
                   rating_scale: tuple[float, float]) -> SavedTrainset:
    """The Surprise Trainset a model was fitted on, with the same inner ids, from its saved arrays."""
    return SavedTrainset(raw_users, raw_items, rated_rows(index[:, 0], index[:, 1], ratings, len(raw_users)),
                         rating_scale)


def index_of(ts: Trainset) -> tuple[np.ndarray, np.ndarray]:
    """A trainset's ratings as (inner (user, item) index (n, 2), ratings (n,)), user by user."""
    if isinstance(ts, SavedTrainset):
        users, items, _ = rated_pairs(ts.rows())
        return np.stack([users, items], axis=1), ts.rows()[2].copy()
    return trainset_arrays(ts)


def user_ratings(ts: Trainset, user: int) -> tuple[np.ndarray, np.ndarray]:
    """One known user's training (items, ratings)."""
    if isinstance(ts, SavedTrainset):
        items, ratings = ts.user(user)
        return items.copy(), ratings.copy()
    block = np.asarray(ts.ur[user], dtype=np.float64).reshape(-1, 2)
    return block[:, 0].astype(np.int64), block[:, 1]


def ratings_per_item(ts: Trainset) -> np.ndarray:
    """Training ratings per item."""
    if isinstance(ts, SavedTrainset):
        return ts.item_counts()
    ir = ts.ir
    return np.array([len(ir.get(i, ())) for i in range(ts.n_items)], dtype=np.int64)


def who_rated_what(ts: Trainset) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(users, items, n_users, n_items) of every training rating, inner indices."""
    if isinstance(ts, SavedTrainset):
        return (*rated_pairs(ts.rows()), ts.n_items)
    ur = [ts.ur.get(u, ()) for u in range(ts.n_users)]
    users = np.repeat(np.arange(ts.n_users, dtype=np.int64), [len(r) for r in ur])
    items = np.fromiter((i for r in ur for i, _ in r), dtype=np.int64, count=users.size)
    return users, items, ts.n_users, ts.n_items


def with_user_ratings(ts: Trainset, uid: Any, row: int, items: np.ndarray, values: np.ndarray) -> Trainset:
    """A copy of ``ts`` in which user ``uid`` (inner ``row``, new or known) has exactly these ratings.

    The caller's Trainset is never changed (it may be used to fit other algorithms); the copy shares every other
    user's and item's rating list. A :class:`SavedTrainset` stays one, its lists copied only where they were built.
    """
    if isinstance(ts, SavedTrainset):
        new = SavedTrainset.__new__(SavedTrainset)
        new.__dict__.update(ts.__dict__)
        before = len(ts.user(row)[0]) if row < ts.n_users else 0
        new.changed = {**ts.changed, row: (np.array(items, dtype=np.int64), np.array(values, dtype=np.float64))}
        new.n_users, new.n_ratings = max(ts.n_users, row + 1), ts.n_ratings - before + len(items)
        new._rows, new._global_mean = None, None
        if row >= ts.n_users:
            new._raw2inner_id_users = {**ts._raw2inner_id_users, uid: row}
            new._inner2raw_id_users = {**ts._inner2raw_id_users, row: uid}
        if ts._ur is None and ts._ir is None:
            return new
        new._ur, new._ir = _user_lists(ts, row, items, values)
        return new
    ur, ir = _user_lists(ts, row, items, values)
    users, n_users = dict(ts._raw2inner_id_users), max(ts.n_users, row + 1)
    if row >= ts.n_users:
        users[uid] = row
    n_ratings = ts.n_ratings - len(ts.ur.get(row, [])) + len(ur[row])
    new = Trainset(ur, ir, n_users, ts.n_items, n_ratings, ts.rating_scale, users, ts._raw2inner_id_items)
    new._inner2raw_id_items = ts._inner2raw_id_items  # (Surprise builds it at the first to_raw_iid, id by id)
    if row < ts.n_users:  # the users' too; a new user's is built again when asked for (this code never does)
        new._inner2raw_id_users = ts._inner2raw_id_users
    return new


def _user_lists(ts: Trainset, row: int, items: np.ndarray, values: np.ndarray) -> tuple[dict, dict]:
    """Copies of ``ts``'s ``ur`` and ``ir`` (sharing every other user's and item's list) with user ``row``'s ratings
    replaced by these."""
    ur, ir = dict(ts.ur), dict(ts.ir)
    old = ur.get(row, [])
    ur[row] = list(zip(np.asarray(items).tolist(), np.asarray(values).tolist()))
    # only the items whose ratings by the user changed get new rater lists (an item's list is as long as its raters:
    # rebuilding those of every item a heavy user rated took 0.36 s on ML-1M)
    before, after = _ratings_by_item(old), _ratings_by_item(ur[row])
    for i in set(before) | set(after):
        if before.get(i) != after.get(i):
            ir[i] = [*((u, r) for u, r in ir.get(i, []) if u != row), *((row, r) for r in after.get(i, []))]
    return ur, ir


def _ratings_by_item(ratings: list) -> dict:
    """A user's (item, rating) list as item -> that item's ratings, in order."""
    out: dict = {}
    for i, r in ratings:
        out.setdefault(i, []).append(r)
    return out
