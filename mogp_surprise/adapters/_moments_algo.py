"""The Surprise surface of a baseline that gives a predictive mean and variance per (user, item) pair.

A subclass implements ``_moments(users, items)`` on Surprise inner ids (-1 for an id unknown at
fit time) and names the attribute that ``fit`` sets last (``_fitted_attr``); this class turns
that into ``estimate``, a batched ``test`` and ``predict_dist`` with the details of
:class:`~mogp_surprise.MWGP`'s predictions (``var``, ``std``, and ``unknown_user``/``unknown_item``, True or False).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from surprise import AlgoBase, Prediction, PredictionImpossible
from tqdm.auto import tqdm

from ._common import inner_or_unknown


class MomentsAlgo(AlgoBase):
    _fitted_attr = ""

    def _moments(self, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            raise PredictionImpossible(f"{type(self).__name__} is not fitted")

    def _inner(self, testset: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
        u_map, i_map = self.trainset._raw2inner_id_users, self.trainset._raw2inner_id_items
        return (np.array([u_map.get(t[0], -1) for t in testset], dtype=np.int64),
                np.array([i_map.get(t[1], -1) for t in testset], dtype=np.int64))

    @staticmethod
    def _details(var: float, unknown_user: bool, unknown_item: bool) -> dict[str, Any]:
        return {"var": var, "std": math.sqrt(var), "was_impossible": False,
                "unknown_user": unknown_user, "unknown_item": unknown_item}

    def estimate(self, u: Any, i: Any) -> tuple[float, dict[str, Any]]:
        self._check_fitted()
        uu = np.array([inner_or_unknown(u)])
        ii = np.array([inner_or_unknown(i)])
        mean, var = self._moments(uu, ii)
        return float(mean[0]), self._details(float(var[0]), bool(uu[0] < 0), bool(ii[0] < 0))

    def test(self, testset: Sequence[tuple[Any, Any, float]], verbose: bool = False) -> list[Prediction]:
        """Batched predictions, estimates clipped to the rating scale as Surprise's are."""
        self._check_fitted()
        testset = list(testset)
        users, items = self._inner(testset)
        mean, var = self._moments(users, items)
        low, high = self.trainset.rating_scale
        out = [Prediction(uid, iid, r, float(np.clip(m, low, high)), self._details(float(v), bool(u < 0), bool(i < 0)))
               for (uid, iid, r), m, v, u, i in zip(testset, mean, var, users, items)]
        if verbose:
            for p in out:
                tqdm.write(str(p))
        return out

    def predict_dist(self, testset: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean (unclipped) and variance over a list of (uid, iid[, r]) tuples of raw ids."""
        self._check_fitted()
        return self._moments(*self._inner(list(testset)))
