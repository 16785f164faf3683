"""The Surprise surface of every algorithm with a predictive distribution: MWGP and the comparison's baselines.

One contract for all of them. A subclass implements ``_moments(index, include_noise)``: the
predictive mean and variance at inner (user, item) indices, -1 where an id was not in the
training data, and names the attribute that ``fit`` sets last (``_fitted_attr``). This class turns
that into Surprise's ``estimate``, ``predict`` and a batched ``test`` (estimates clipped to the
rating scale, as Surprise does) and into ``predict_dist`` (mean **not** clipped, variance >= 0,
floats for a single pair, arrays of shape (n,) otherwise). Every prediction's ``details`` holds
``var`` and ``std`` (of the unclipped distribution), ``was_impossible`` (False: an unseen id gets
the model's own answer for it) and ``unknown_user`` / ``unknown_item``.

Raw ids become inner indices through :class:`~._common.IdEncoder`, the one id path of both
adapters: ids are matched by value and type, and an unseen id that is a known id spelt with the
other type (``196`` vs ``"196"``) raises a one-time warning.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Sequence

import numpy as np
import pandas as pd
from surprise import AlgoBase, Prediction
from tqdm.auto import tqdm

from ..core.errors import NotFittedError
from ._common import IdEncoder, encode_ids, inner_or_unknown, store_lock


class PredictiveAlgo(AlgoBase):
    _fitted_attr = ""

    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _pair_moments(self, index: tuple[int, int], include_noise: bool = True) -> tuple[float, float]:
        """``_moments`` of one inner (user, item) pair as floats; a subclass may serve it faster."""
        mean, var = self._moments(np.array([index], dtype=np.int64), include_noise)
        return float(mean[0]), float(var[0])

    def _check_fitted(self) -> Any:
        fitted = getattr(self, self._fitted_attr, None)
        if fitted is None:
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; call `fit` first.")
        return fitted

    # -- ids -------------------------------------------------------------------------------------
    def _encoders(self) -> tuple[IdEncoder, IdEncoder]:
        """User and item encoders of the current trainset (built once per trainset, not pickled)."""
        ts = self.trainset
        cached = self.__dict__.get("_id_encoders")
        if cached is None or cached[0] is not ts:
            cached = (ts, (IdEncoder("user", [ts.to_raw_uid(u) for u in range(ts.n_users)]),
                           IdEncoder("item", [ts.to_raw_iid(i) for i in range(ts.n_items)])))
            self._id_encoders = cached
        return cached[1]

    def __getstate__(self) -> dict[str, Any]:
        with store_lock(self):  # not half way through a fold-in
            state = dict(self.__dict__)
        state.pop("_id_encoders", None)
        return state

    def _inner_ids(self, name: str, raw: Sequence[Any]) -> np.ndarray:
        self._check_fitted()
        users, items = self._encoders()
        # the encoders belong to this fitted model and its training set: an id mix-up warns once per model
        return encode_ids(users, users if name == "user" else items, raw)

    def _inner_index(self, users: Sequence[Any], items: Sequence[Any]) -> np.ndarray:
        """(n, 2) inner indices of raw ids, -1 for ids not in the training data."""
        return np.stack([self._inner_ids("user", users), self._inner_ids("item", items)], axis=1).reshape(-1, 2)

    def _inner_pair(self, uid: Any, iid: Any) -> tuple[int, int]:
        """Inner indices of one raw (user, item) pair: a dict lookup for known ids of their own type, the
        general path (:func:`encode_ids`: unseen ids, the type-twin warning) otherwise."""
        self._check_fitted()
        users, items = self._encoders()
        u, i = users.lookup(uid), items.lookup(iid)
        if u is None or i is None:
            u, i = (int(k) for k in self._inner_index([uid], [iid])[0])
        return u, i

    def _is_one_id(self, name: str, ids: Any) -> bool:
        """Whether ``ids`` is one raw id: a scalar, or a tuple where the training data's ids are tuples."""
        if _is_scalar_id(ids):
            return True
        if not isinstance(ids, tuple):
            return False
        self._check_fitted()
        encoder = self._encoders()[0 if name == "user" else 1]
        return encoder.lookup(ids) is not None or (encoder.n_levels > 0 and isinstance(encoder.classes_[0], tuple))

    # -- Surprise's contract ---------------------------------------------------------------------
    def estimate(self, u: Any, i: Any) -> tuple[float, dict[str, Any]]:
        """Predict from inner ids; Surprise passes ``'UKN__<raw id>'`` strings for unknown ones."""
        self._check_fitted()
        index = (inner_or_unknown(u), inner_or_unknown(i))
        mean, var = self._pair_moments(index)
        return mean, _details(var, index)

    def predict(self, uid: Any, iid: Any, r_ui: float | None = None, clip: bool = True,
                verbose: bool = False) -> Prediction:
        """Surprise's ``AlgoBase.predict`` for raw ids: exactly the prediction :meth:`test` gives the pair.
        A subclass that overrides :meth:`estimate` gets Surprise's own ``predict`` through it (and ``test`` goes
        pair by pair through a subclass's ``estimate`` or ``predict``), as Surprise's custom algorithms expect.

        ``details`` holds ``var`` and ``std`` (of the unclipped predictive distribution),
        ``was_impossible`` (False) and ``unknown_user`` / ``unknown_item``. ``verbose=True`` prints
        the prediction, as Surprise does. Raises ``NotFittedError`` before ``fit``.
        """
        if type(self).estimate is not PredictiveAlgo.estimate:  # a subclass's own estimate, as Surprise calls it
            return AlgoBase.predict(self, uid, iid, r_ui, clip, verbose)
        index = self._inner_pair(uid, iid)
        mean, var = self._pair_moments(index)
        if clip:
            low, high = self.trainset.rating_scale
            mean = min(max(mean, low), high)  # (np.clip of one number: 3.4 us of a 40 us call)
        pred = Prediction(uid, iid, r_ui, float(mean), _details(float(var), index))
        if verbose:  # as Surprise's AlgoBase.predict
            tqdm.write(str(pred))
        return pred

    def test(self, testset: Sequence[tuple[Any, Any, float]], verbose: bool = False) -> list[Prediction]:
        """Predictions for a whole testset in one pass; same output as ``AlgoBase.test``.

        Estimates are clipped to the rating scale as Surprise does; ``details`` as in :meth:`predict`.
        """
        if isinstance(testset, pd.DataFrame):
            raise ValueError(_FRAME_ADVICE.format(what="test"))
        testset = list(testset)
        _check_entries(testset, "test", (3,))
        if type(self).estimate is not PredictiveAlgo.estimate or type(self).predict is not PredictiveAlgo.predict:
            return AlgoBase.test(self, testset, verbose)  # a subclass's own estimate / predict, pair by pair
        return self._predictions(testset, True, verbose)

    def _predictions(self, testset: list, clip: bool, verbose: bool) -> list[Prediction]:
        index = self._inner_index([t[0] for t in testset], [t[1] for t in testset])
        mean, var = self._moments(index)
        est = np.clip(mean, *self.trainset.rating_scale) if clip else mean
        return self._as_predictions(testset, est, var, index, verbose)

    @staticmethod
    def _as_predictions(testset: Sequence, est, var, index, verbose: bool) -> list[Prediction]:
        """Surprise ``Prediction`` tuples of (uid, iid, r_ui) with their estimates, printed when ``verbose``."""
        preds = [Prediction(uid, iid, r_ui, float(e), _details(float(v), k))
                 for (uid, iid, r_ui), e, v, k in zip(testset, est, var, index)]
        if verbose:  # Surprise's AlgoBase prints every prediction; tqdm.write keeps progress bars intact
            for pred in preds:
                tqdm.write(str(pred))
        return preds

    def predict_dist(self, uid: Any, iid: Any = None, include_noise: bool = True):
        """Predictive mean and variance of the rating for raw ids (mean not clipped).

        Parameters
        ----------
        uid : raw user id, sequence of raw user ids, or a testset (list of (uid, iid[, r]) tuples); a tuple
            is one id where the training data's ids are tuples, else a sequence of ids
        iid : raw item id or sequence of raw item ids (tuples as for ``uid``); omitted when ``uid`` is a testset
        include_noise : bool, default=True
            Variance of the observed rating (True) or of the latent preference f (False).

        Returns
        -------
        (mean, var) : floats for scalar ids, else ndarrays of shape (n,)
        """
        uid, iid = (list(ids) if isinstance(ids, Iterator) else ids for ids in (uid, iid))  # a generator: its ids
        if iid is None:
            if isinstance(uid, pd.DataFrame):
                raise ValueError(_FRAME_ADVICE.format(what="predict_dist"))
            pairs = list(uid)
            _check_entries(pairs, "predict_dist", (2, 3))
            return self._moments(self._inner_index([p[0] for p in pairs], [p[1] for p in pairs]), include_noise)
        scalar = self._is_one_id("user", uid)
        if scalar != self._is_one_id("item", iid):
            raise ValueError(f"`uid` and `iid` must both be raw ids or both be sequences; got {_describe(uid)} and "
                             f"{_describe(iid)}")
        if scalar:
            return self._pair_moments(self._inner_pair(uid, iid), include_noise)
        users, items = list(uid), list(iid)
        if len(users) != len(items):
            raise ValueError(f"`uid` and `iid` must have the same length, got {len(users)} and {len(items)}")
        return self._moments(self._inner_index(users, items), include_noise)


def _check_entries(testset: list, what: str, sizes: tuple[int, ...]) -> None:
    """``ValueError`` naming the first entry of ``testset`` that is not a (uid, iid[, r]) tuple of ``sizes``: a
    fourth value (a context id) was dropped without a word by ``predict_dist`` and failed to unpack in ``test``."""
    bad = next((p for p in testset if not isinstance(p, (tuple, list, np.ndarray)) or len(p) not in sizes), None)
    if bad is None:
        return
    shape = "(uid, iid, r)" if sizes == (3,) else "(uid, iid[, r])"
    more = (" MWGP (Surprise) models (user, item) pairs only; for further id columns such as a context, use "
            "MWGPRegressor" if isinstance(bad, (tuple, list, np.ndarray)) and len(bad) > max(sizes) else
            "" if what == "test" else " Pass `iid` for single ids.")
    raise ValueError(f"`{what}` takes a testset of {shape} tuples; got the entry {_short(bad)}.{more}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_FRAME_ADVICE = ("{what} takes a testset, a list of (uid, iid, r) tuples, not a DataFrame (iterating one gives its "
                 "column names): list(df[['user', 'item', 'rating']].itertuples(index=False, name=None))")


def _details(var: float, index: Sequence[int]) -> dict[str, Any]:
    return {"var": var, "std": math.sqrt(var) if var >= 0 else math.nan, "was_impossible": False,
            "unknown_user": bool(index[0] < 0), "unknown_item": bool(index[1] < 0)}


def _is_scalar_id(ids: Any) -> bool:
    # raw ids are scalars (str, int, ...); a list, tuple, array or Series holds several
    return isinstance(ids, (str, bytes)) or np.ndim(ids) == 0


def _describe(ids: Any) -> str:
    return f"the raw id {ids!r}" if _is_scalar_id(ids) else f"a sequence of length {len(ids)}"
