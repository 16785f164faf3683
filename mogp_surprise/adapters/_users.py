"""What both adapters offer per user, written once: recommend, fold-in and which items to ask a user about."""
from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..core.errors import check_bool
from ..core.posterior import MWGPPosterior
from ._common import check_not_twin, known_twin, plain_id, store_lock
from .persistence import loadable_id

#: each fitted adapter's who-rated-what graph, with the object it was built from and the (row, items) of the users
#: stored since, to put in at its next use (kept out of pickles and files)
_GRAPHS: "weakref.WeakKeyDictionary[Any, tuple[Any, Any, tuple]]" = weakref.WeakKeyDictionary()
#: the most users waiting to be put into the graph: applying one copies its arrays (1M ratings: 4.3 ms), a rebuild
#: sorts them (0.14 s)
MAX_PENDING = 16


def check_user_id(user: Any, what: str) -> Any:
    """``user`` as a plain id; ``ValueError`` for a missing one (None, NaN, ``pd.NA``, ``NaT``), which ``fit``
    refuses too: a service with a missing id would otherwise serve the cold-start answer without a word."""
    user = plain_id(user)
    missing = user is None or user is pd.NA or user is pd.NaT or (isinstance(user, float) and math.isnan(user))
    if missing or (isinstance(user, np.datetime64) and np.isnat(user)):
        raise ValueError(f"the user id {what} must not be None/NaN, as in the training data; got {user!r}")
    if isinstance(user, float) and math.isinf(user):
        raise ValueError(f"the user id {what} must not be infinite, as in the training data; got {user!r}")
    return user


class UserModelMixin:
    """``recommend``, ``recommend_many``, ``fold_in`` and ``ask`` of both adapters, written once.

    An adapter provides where its ids and ratings live: ``_user_codes`` (raw ids -> inner indices, -1 unseen),
    ``_item_encoder()`` (the items' :class:`~._common.IdEncoder`), ``_raw_items()`` (raw item id of every inner index),
    ``_known_ratings(user)`` (a known user's training (items, ratings); ratings None in model files
    written before fold-in existed), ``_item_counts()`` (training ratings per item), ``_rated_pairs()``
    ((users, items, n_users, n_items): who rated what, inner indices) with ``_rated_source()`` (the object
    holding it, replaced when a user is stored), ``_check_fitted()``
    (the posterior, or the adapter's not-fitted error), ``_rating_range()`` ((low, high) or None, and its
    name for messages) and ``_store_user`` (record a folded-in user's ratings). The fitted posterior is
    ``posterior_``.
    """

    _user_label = "user"  # how messages name the first id column

    def _user_item_posterior(self, what: str) -> MWGPPosterior:
        post = self._check_fitted()
        if post.n_factors != 2:
            raise ValueError(f"{what} needs a (user, item) model; this one has {post.n_factors} id columns")
        return post

    def _recommend(self, user: Any, n: int, strategy: str, kappa: float | None, exclude_rated: bool,
                   ratings: Any, random_state: Any = None) -> pd.DataFrame:
        user = check_user_id(user, "to recommend to")
        if ratings is None:
            return self._recommend_many([user], n, strategy, kappa, exclude_rated, random_state, with_user=False)
        from ..core.recommend import check_strategy

        check_strategy(strategy, kappa, n, auto=True, warn_unused=True)  # before the fold-in's work
        check_bool("exclude_rated", exclude_rated)
        self._user_item_posterior("recommend")  # named as what was asked for, not the fold-in it would start
        post, row, items, _ = self._folded(user, ratings)
        unchanged = row >= 0 and post is self.posterior_  # a known user without new ratings: as without `ratings`
        return self._frame(post, [user], np.array([row]), [items], n, strategy, kappa, random_state,
                           exclude_rated, with_user=False, by_pairs=unchanged)

    def _recommend_many(self, users: Any, n: int, strategy: str, kappa: float | None, exclude_rated: bool,
                        random_state: Any = None, with_user: bool = True) -> pd.DataFrame:
        from ..core.recommend import check_strategy

        check_strategy(strategy, kappa, n, auto=True, warn_unused=True)
        check_bool("exclude_rated", exclude_rated)
        users = _id_list(users, f"recommend_many takes a sequence of raw user ids (a list, array or Series), got "
                                f"{users!r}; for one user, recommend")
        users = [check_user_id(u, "to recommend to") for u in users]
        self._user_item_posterior("recommend")
        inner = self._user_codes(users)  # the ids before the posterior: a user stored meanwhile has its row there
        post = self.posterior_
        rated = [self._known_ratings(u)[0] if u >= 0 else np.empty(0, np.int64) for u in inner]
        # one list of the fitted posterior: its chosen items as `predict` gives them, pair by pair (core/recommend.py)
        return self._frame(post, users, inner, rated, n, strategy, kappa, random_state, exclude_rated, with_user,
                           by_pairs=len(users) == 1)

    def _frame(self, posterior: MWGPPosterior, raw_users: Sequence[Any], inner_users: np.ndarray,
               rated: list[np.ndarray], n: int, strategy: str, kappa: float | None, random_state: Any,
               exclude_rated: bool, with_user: bool = True, by_pairs: bool = False) -> pd.DataFrame:
        """Top-N lists of several users as a tidy DataFrame (user, rank, item, est, mean, std, score; without the
        user column for one user's list: ``recommend``);
        ``strategy="auto"``: LCB for the users with fewer than ``AUTO_FEW_RATINGS`` ratings, the mean otherwise."""
        from ..core.recommend import AUTO, AUTO_FEW_RATINGS, top_n

        if strategy == AUTO:
            strategy = ["lcb" if len(r) < AUTO_FEW_RATINGS else "mean" for r in rated]
        result = top_n(posterior, inner_users, n=n, strategy=strategy, kappa=kappa,
                       chunk_size=getattr(self, "chunk_size", None),
                       exclude=rated if exclude_rated else None, random_state=random_state, by_pairs=by_pairs)
        valid = result.items >= 0
        rows, ranks = np.nonzero(valid)
        users = np.empty(len(raw_users), dtype=object)
        users[:] = list(raw_users)  # tuple ids stay one id each
        mean = result.mean[valid]
        columns = {"user": users[rows]} if with_user else {}
        return pd.DataFrame({**columns, "rank": ranks + 1,
                             "item": self._raw_items()[result.items[valid]].astype(object),
                             "est": self._clipped(mean), "mean": mean, "std": result.std[valid],
                             "score": result.score[valid]})

    def _clipped(self, mean: np.ndarray) -> np.ndarray:
        """Predictive means clipped to the rating scale (Surprise's ``est``); unclipped without a known range."""
        scale = self._rating_range()[0]
        return mean if scale is None else np.clip(mean, *scale)

    def _fold_in(self, user: Any, ratings: Any):
        user = check_user_id(user, "to fold in")
        self._check_storable(user)
        # one fold-in at a time: each reads the model and stores the user in it (threads of a service lost users
        # and put two in one row). The posterior first: until the id is stored, its new row is never read; if
        # storing fails, the posterior as it was (no row without an id)
        with store_lock(self):
            post, row, items, values = self._folded(user, ratings)
            source, graph = self._rated_source(), _GRAPHS.get(self)
            before, self.posterior_ = self.posterior_, post
            try:
                self._store_user(user, row, items, values)
            except BaseException:
                self.posterior_ = before
                raise
            if graph is not None and graph[0] is source:  # who rated what follows the user at the next `ask`
                if len(graph[2]) < MAX_PENDING:
                    _GRAPHS[self] = (self._rated_source(), graph[1], (*graph[2], (row, items)))
                else:  # each pending user copies the graph once: past a few, a rebuild (one sort) is cheaper
                    _GRAPHS.pop(self, None)
        return self

    def _check_storable(self, user: Any) -> None:
        """Refuse to store a new user whose id a model file cannot hold (``save`` would refuse the model from then
        on, with every user folded in before) unless the fitted ids already hold such ids (the model is pickled)."""
        if loadable_id(user):
            return
        self._user_item_posterior("fold-in")  # fitted, before its ids are read
        if self._user_codes([user])[0] >= 0:
            return
        encoder = self._user_encoder()
        storable = encoder.__dict__.get("_all_loadable")
        if storable is None:
            storable = encoder._all_loadable = all(map(loadable_id, encoder.classes_.tolist()))
        if storable:
            raise TypeError(f"cannot fold in the user {user!r} ({type(user).__name__}): a model file holds ids that "
                            "are str, int, float, bool or tuples of them, so `save` would refuse this model and "
                            "every user folded into it; convert the id (e.g. str())")

    def _user_ratings(self, user: Any, ratings: Any) -> tuple[int, np.ndarray, np.ndarray, int | None]:
        """The user's inner index (-1: new), all their (items, ratings), and where the new ones start when they
        update a known user's posterior (:func:`~..core.update.update_user`), else None: a known user's training
        ratings with ``ratings`` on top (a new rating of an item replaces the old one: then the user is folded in
        again from all, as from a posterior that keeps no users' variances or a user stored by a fold-in), or a new
        user's ``ratings``. A rating the model holds already, with the same value, is no new rating (a client's
        retry changes nothing)."""
        from ..core.update import folded, updatable

        items, values = check_fold_ratings(ratings, self._item_encoder().transform, *self._rating_range())
        encoder = self._user_encoder()
        if encoder.lookup(plain_id(user)) is None:  # before the encoding below warns about the twin it refuses
            check_not_twin(self._user_label, user, lambda twin: encoder.lookup(twin) is not None)
        inner = int(self._user_codes([user])[0])
        if inner < 0:
            return inner, items, values, None
        old_items, old_values = self._known_ratings(inner)
        if old_values is None:
            raise ValueError("this model was saved before fold-in existed and lacks its users' training "
                             "ratings; refit it to fold in users")
        items, values = _not_held(old_items, old_values, items, values)
        keep = ~np.isin(old_items, items)
        post = self.posterior_  # (a stored new user is folded in again from all: in any order the same user)
        split = old_items.size if not items.size or (keep.all() and updatable(post, inner)
                                                     and not folded(post, inner)) else None
        return inner, np.concatenate([old_items[keep], items]).astype(np.int64), np.concatenate([old_values[keep],
                                                                                                 values]), split

    def _folded(self, user: Any, ratings: Any) -> tuple[MWGPPosterior, int, np.ndarray, np.ndarray]:
        """The posterior with one user's ratings folded in, the user's row, and all the user's (items, ratings).

        A known user's posterior is updated by ``ratings`` in their own row (no new ratings: the user as stored), or,
        where ``ratings`` change a rating, the posterior keeps no variances of its users or the user was stored by a
        fold-in, the user is folded in again from all their ratings, starting from their stored values; a new user
        gets a new row.
        """
        from ..core.foldin import fold_in
        from ..core.update import update_user

        self._user_item_posterior("fold-in")
        inner, items, values, split = self._user_ratings(user, ratings)
        post = self.posterior_  # after the ids (as in _recommend_many)
        if inner < 0:
            folded = fold_in(post, items, values)
        elif split == items.size:  # nothing new
            return post, inner, items, values
        elif split is not None:
            folded = update_user(post, inner, items[split:], values[split:], items[:split], values[:split])
        else:
            folded = fold_in(post, items, values, init_user=inner, repeats=True)  # training data may repeat pairs
        return (*_with_user(post, inner, folded), items, values)

    def _rating_graph(self):
        """Who rated what in training (:class:`~..core.elicit.RatingGraph`), built once per training data
        (again after a user's ratings are stored)."""
        from ..core.elicit import RatingGraph

        source = self._rated_source()
        cached = _GRAPHS.get(self)
        if cached is None or cached[0] is not source:
            users, items, n_users, n_items = self._rated_pairs()
            cached = (source, RatingGraph.from_pairs(users, items, n_users, n_items), ())
        elif cached[2]:  # users stored since it was built: their rows replaced (RatingGraph.with_user, not a sort)
            graph = cached[1]
            for row, items in cached[2]:
                graph = graph.with_user(row, items)
            cached = (source, graph, ())
        else:
            return cached[1]
        _GRAPHS[self] = cached
        return cached[1]

    def _ask(self, user: Any, n: int, ratings: Any, candidates: Any, exclude: Any) -> pd.DataFrame:
        from ..core.elicit import answer_probability, ask

        user = check_user_id(user, "to ask")
        self._user_item_posterior("ask")
        inner, items, values, split = self._user_ratings(user, {} if ratings is None else ratings)
        post = self.posterior_  # after the ids (as in _recommend_many)
        chosen = {name: None if raw is None else self._known_item_codes(name, raw)
                  for name, raw in (("candidates", candidates), ("exclude", exclude))}
        counts = np.asarray(self._item_counts(), dtype=np.float64)
        # the chance that the user can rate an item: the share of the training users who rated it among the
        # raters of the items this user rated (core.elicit.answer_probability); the candidates, when given,
        # are items the user can rate, and the items whose variance counts (core.elicit.ask's default weights)
        answer_prob = answer_probability(self._rating_graph(), items) if candidates is None else None
        weights = counts if candidates is None and counts.sum() > 0 else None
        known = inner >= 0
        update = known and split is not None and split < items.size  # a known user's new ratings update them
        q = ask(post, items[split:] if update else items, values[split:] if update else values, n=n,
                candidates=chosen["candidates"], exclude=chosen["exclude"], answer_prob=answer_prob, weights=weights,
                init_user=inner if known else None,
                refit=not known or (split is None and ratings is not None) or update,
                repeats=known, rated=(items[:split], values[:split]) if update else None)
        if q.folded is not None:
            post, row = _with_user(post, inner, q.folded)
        else:
            row = inner  # a known user as fitted, or -1: a new user without ratings (cold start)
        mean, var = post.predict(np.stack([np.full(q.items.size, row), q.items], 1).astype(np.int64))
        return pd.DataFrame({"rank": np.arange(1, q.items.size + 1),
                             "item": self._raw_items()[q.items].astype(object), "gain": q.gain,
                             "answer_prob": q.answer_prob, "est": self._clipped(mean), "mean": mean,
                             "std": np.sqrt(var)})

    def _known_item_codes(self, name: str, raw: Any) -> np.ndarray:
        raw = _id_list(raw, f"`{name}` must be a list of item ids, got {raw!r}")
        encode = self._item_encoder().transform
        codes = encode(raw) if raw else np.empty(0, dtype=np.int64)
        unknown = [r for r, c in zip(raw, codes.tolist()) if c < 0]
        if unknown:
            raise ValueError(f"`{name}` holds {len(unknown)} item id(s) not in the training data: {unknown[:5]}"
                             f"{_twin_note(unknown, encode)}")
        return codes.astype(np.int64)


def _twin_note(unknown: list, encode: Callable[[list], np.ndarray]) -> str:
    """For unknown item ids, the first one that is a known id spelt with another type, named (196 for '196')."""
    for raw in unknown[:_TWIN_CHECKS]:
        twin = known_twin(raw, lambda twin: encode([twin])[0] >= 0)
        if twin is not None:
            return (f"; {raw!r} ({type(raw).__name__}) is not, but {twin!r} ({type(twin).__name__}) is: ids are "
                    "matched by value and type, pass them as in training")
    return ""


#: unknown ids whose twin is looked for (the first ones)
_TWIN_CHECKS = 100


def _id_list(raw: Any, error: str) -> list:
    """``raw`` as a list of raw ids; ``ValueError(error)`` for one id (a string is one id, not its characters)."""
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise ValueError(error)
    if isinstance(raw, pd.DataFrame):  # iterating one gives its column names
        raise ValueError("a DataFrame is not a list of ids (iterating it gives its column names); pass one of its "
                         "columns, e.g. df['user']")
    return list(raw)


def _with_user(post: MWGPPosterior, inner: int, folded) -> tuple[MWGPPosterior, int]:
    """The posterior with a folded-in user in place, and their row: a known user's own row (``inner`` >= 0),
    a new user's added row."""
    if inner >= 0:
        return post.with_replaced_users([inner], [folded]), inner
    return post.with_extra_users([folded]), post.n_levels[0]


def check_fold_ratings(ratings: Any, encode_items: Callable[[list], np.ndarray],
                       rating_range: tuple[float, float] | None,
                       range_name: str = "the rating scale") -> tuple[np.ndarray, np.ndarray]:
    """Validated (inner item indices, ratings) of the ratings one user gives to fold in.

    ``ratings``: a dict ``{item: rating}`` (any mapping, or a pandas Series indexed by item), an iterable of
    ``(item, rating)`` pairs of raw item ids (or an (n, 2) array, or a DataFrame of two columns: item, rating);
    empty means no ratings (the user is the cold-start user). Unknown item ids (naming a known id of another
    type: 196 for '196'), repeated items, non-numeric, non-finite or out-of-range ratings raise ``ValueError``
    naming them.
    """
    if isinstance(ratings, (str, bytes)) or ratings is None:
        raise ValueError(f"`ratings` must be a dict {{item: rating}} or a sequence of (item, rating) pairs, "
                         f"got {ratings!r}")
    if isinstance(ratings, pd.DataFrame):  # iterating one gives its column names
        if ratings.shape[1] != 2:
            raise ValueError(f"`ratings` as a DataFrame must have two columns, the item and its rating; got "
                             f"{list(ratings.columns)}")
        pairs = list(ratings.itertuples(index=False, name=None))
    else:
        pairs = list(ratings.items()) if isinstance(ratings, (Mapping, pd.Series)) else list(ratings)
    for pos, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list, np.ndarray)) or len(pair) != 2:
            raise ValueError(f"`ratings` must hold (item, rating) pairs; entry {pos} is {pair!r}")
    raw_items = [p[0] for p in pairs]
    values = np.empty(len(pairs), dtype=np.float64)
    for pos, (item, value) in enumerate(pairs):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
            raise ValueError(f"the rating of item {item!r} must be a number, got {value!r}")
        values[pos] = float(value)
        if not np.isfinite(values[pos]):
            raise ValueError(f"the rating of item {item!r} must be finite, got {value!r}")
    if rating_range is not None:
        low, high = rating_range
        bad = [(i, v) for i, v in zip(raw_items, values.tolist()) if not low <= v <= high]
        if bad:
            raise ValueError(f"ratings must lie in {range_name} [{low:g}, {high:g}]; got {len(bad)} outside "
                             f"it: {bad[:5]}")
    items = encode_items(raw_items) if raw_items else np.empty(0, dtype=np.int64)
    unknown = [raw for raw, code in zip(raw_items, items.tolist()) if code < 0]
    if unknown:
        raise ValueError(f"{len(unknown)} rated item id(s) are not in the training data: {unknown[:5]}"
                         f"{_twin_note(unknown, encode_items)}. Fold-in learns a user from items the model knows; "
                         "leave these out (or refit with them)")
    codes, counts = np.unique(items, return_counts=True)
    if (counts > 1).any():
        twice = set(codes[counts > 1].tolist())
        repeated = sorted({raw for raw, code in zip(raw_items, items.tolist()) if code in twice}, key=str)
        raise ValueError(f"`ratings` rates item(s) {repeated[:5]} more than once; give each item one rating")
    return items.astype(np.int64), values


def _not_held(old_items: np.ndarray, old_values: np.ndarray, items: np.ndarray, values: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The (items, values) that the user's stored ratings do not hold already: a rating sent again with the value the
    model holds (every stored rating of that item equal to it) is dropped, so that it neither counts twice nor, as a
    changed rating would, folds the user in again from all their ratings (ML-1M user 1: an identical retry moved
    their predictions by up to 0.28)."""
    if not items.size or not old_items.size:
        return items, values
    held = np.zeros(items.size, dtype=bool)
    for k in np.nonzero(np.isin(items, old_items))[0]:
        held[k] = bool((old_values[old_items == items[k]] == values[k]).all())
    return items[~held], values[~held]

