"""MW-GP as a Surprise prediction algorithm."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from surprise import AlgoBase, Prediction, Trainset
from tqdm import tqdm

from ..core.config import MWGPConfig
from ..core.trainer import fit_mwgp
from ._common import (PARAMS_DOC, HyperParamsMixin, check_fold_ratings, check_id_column, check_not_twin,
                      fold_in_user, inner_or_unknown, plain_id, recommend_folded, recommend_frame, require_fitted,
                      trainset_arrays, warn_id_twins)
from .persistence import load_model, save_model



class MWGP(HyperParamsMixin, AlgoBase):
    __doc__ = f"""Multi-output GP matrix factorisation (MW-GP) for Surprise, with predictive variances.

    A drop-in Surprise algorithm: use it with ``cross_validate``, ``GridSearchCV`` and
    ``surprise.dump`` like ``SVD``. Every :class:`surprise.Prediction` carries the predictive
    variance and standard deviation of the rating in ``details["var"]`` / ``details["std"]``;
    :meth:`predict_dist` returns ``(mean, var)`` directly.

    Users or items unseen in training are not impossible predictions: their embedding and bias
    are integrated out under the distribution of the learned ones, which yields the population
    mean and a wider variance.

    Parameters
    ----------
    {PARAMS_DOC}
    Attributes
    ----------
    posterior_ : MWGPPosterior
        The fitted predictive distribution (core object, torch tensors).
    loss_history_ : list of float
        Per epoch: minus (the minibatch ELBO averaged over the epoch + the log prior of embeddings,
        bilinear factors and biases at its end), per rating.
    fit_time_ : float
        Seconds spent in ``fit``.

    References
    ----------
    Yang, M. and Buettner, F. (2021). Multi-output Gaussian Processes for uncertainty-aware
    recommender systems. UAI 2021.
    """

    def __init__(self, **params: Any) -> None:
        HyperParamsMixin.__init__(self, **params)
        AlgoBase.__init__(self)

    __init__.__signature__ = HyperParamsMixin.__init__.__signature__  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        defaults = MWGPConfig.defaults()
        changed = {k: v for k, v in self._hyper_params().items() if v is not defaults[k] and v != defaults[k]}
        return f"MWGP({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    # -- training ------------------------------------------------------------------------------
    def fit(self, trainset: Trainset) -> "MWGP":
        """Train on a Surprise ``Trainset`` (the model is rebuilt from scratch)."""
        if not isinstance(trainset, Trainset):
            raise TypeError(f"MWGP.fit expects a surprise Trainset (e.g. data.build_full_trainset() or a fold from "
                            f"a cross-validation iterator), got {type(trainset).__name__}")
        config = self._config()
        check_id_column("user", np.array(list(trainset._raw2inner_id_users), dtype=object))
        check_id_column("item", np.array(list(trainset._raw2inner_id_items), dtype=object))
        index, ratings = trainset_arrays(trainset)
        bad = ~np.isfinite(ratings)
        if bad.any():
            u, i = index[np.flatnonzero(bad)[0]]
            raise ValueError(f"ratings must be finite; {int(bad.sum())} are NaN/inf (first: user "
                             f"{trainset.to_raw_uid(int(u))!r}, item {trainset.to_raw_iid(int(i))!r})")
        AlgoBase.fit(self, trainset)
        result = fit_mwgp(index, ratings, (trainset.n_users, trainset.n_items), config)
        self.posterior_ = result.posterior
        self.loss_history_ = result.loss_history
        self.fit_time_ = result.fit_time
        return self

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Save the fitted model (weights, id maps, rating scale, hyper-parameters, versions) to ``path``.

        The file holds tensors and plain values only; :meth:`load` reads it on any device.
        """
        require_fitted(self)
        ts = self.trainset
        index, ratings = trainset_arrays(ts)
        state = {"rating_scale": tuple(float(x) for x in ts.rating_scale),
                 "raw_users": [plain_id(ts.to_raw_uid(u)) for u in range(ts.n_users)],
                 "raw_items": [plain_id(ts.to_raw_iid(i)) for i in range(ts.n_items)],
                 "index": torch.from_numpy(index), "ratings": torch.from_numpy(ratings)}
        save_model(self, path, state)

    @classmethod
    def load(cls, path, device=None) -> "MWGP":
        """Load a model written by :meth:`save` (``device``: where to put it; default CPU)."""
        algo, st = load_model(cls, path, device)
        algo.trainset = _rebuild_trainset(st["raw_users"], st["raw_items"], st["index"].numpy(),
                                          st["ratings"].numpy(), tuple(st["rating_scale"]))
        algo.bu = algo.bi = None
        return algo

    def predict(self, uid: Any, iid: Any, r_ui: float | None = None, clip: bool = True,
                verbose: bool = False) -> Prediction:
        """Surprise's ``AlgoBase.predict`` for raw ids; exactly the prediction :meth:`test` gives the pair.

        ``details`` holds ``var`` and ``std`` (of the unclipped predictive distribution),
        ``was_impossible`` (always False: an unseen user or item gets the cold-start answer) and
        ``unknown_user`` / ``unknown_item``, True where that id was not in the training data. An id
        that is unknown but known with another type (``196`` where training had ``"196"``) also
        raises a one-time ``UserWarning``. ``verbose=True`` prints the prediction, as Surprise does.
        Raises ``NotFittedError`` before ``fit``.
        """
        return self._predictions([(uid, iid, r_ui)], clip, verbose)[0]

    # -- Surprise's per-pair contract ------------------------------------------------------------
    def estimate(self, u: int | str, i: int | str) -> tuple[float, dict[str, float]]:
        """Predict from inner ids; Surprise passes ``'UKN__<raw id>'`` strings for unknown ones."""
        post = require_fitted(self)
        index = np.array([[inner_or_unknown(u), inner_or_unknown(i)]], dtype=np.int64)
        mean, var = post.predict(index)
        return float(mean[0]), {"var": float(var[0]), "std": float(np.sqrt(var[0]))}

    # -- batched paths -----------------------------------------------------------------------------
    def test(self, testset: Sequence[tuple[Any, Any, float]], verbose: bool = False) -> list[Prediction]:
        """Predictions for a whole testset in one pass; same output as ``AlgoBase.test``.

        Estimates are clipped to the rating scale as Surprise does; ``details`` as in
        :meth:`predict` (each pair's prediction is exactly what :meth:`predict` returns for it).
        ``verbose=True`` prints every prediction, as ``AlgoBase.test`` does.
        """
        return self._predictions(list(testset), True, verbose)

    def _predictions(self, testset: list, clip: bool, verbose: bool) -> list[Prediction]:
        index = self._inner_index([t[0] for t in testset], [t[1] for t in testset])
        mean, var = require_fitted(self).predict(index)
        low, high = self.trainset.rating_scale
        est = np.clip(mean, low, high) if clip else mean
        std = np.sqrt(var)
        preds = [Prediction(uid, iid, r_ui, float(e), {"var": float(v), "std": float(s), "was_impossible": False,
                                                       "unknown_user": bool(u < 0), "unknown_item": bool(i < 0)})
                 for (uid, iid, r_ui), e, v, s, (u, i) in zip(testset, est, var, std, index.tolist())]
        if verbose:  # Surprise's AlgoBase prints every prediction; tqdm.write keeps progress bars intact
            for pred in preds:
                tqdm.write(str(pred))
        return preds

    def predict_dist(self, uid: Any, iid: Any = None, include_noise: bool = True):
        """Predictive mean and variance of the rating for raw ids (mean not clipped).

        Parameters
        ----------
        uid : raw user id, sequence of raw user ids, or a testset (list of (uid, iid, r) tuples)
        iid : raw item id or sequence of raw item ids; omitted when ``uid`` is a testset
        include_noise : bool, default=True
            Variance of the observed rating (True) or of the latent preference f (False).

        Returns
        -------
        (mean, var) : floats for scalar ids, else ndarrays of shape (n,)
        """
        if iid is None:
            pairs = list(uid)
            if pairs and not all(isinstance(p, (tuple, list)) and len(p) >= 2 for p in pairs):
                raise ValueError("`predict_dist(testset)` expects a sequence of (uid, iid[, r]) tuples; "
                                 "pass `iid` for single ids")
            return self._predict_raw([p[0] for p in pairs], [p[1] for p in pairs], include_noise)
        scalar = np.ndim(uid) == 0 and np.ndim(iid) == 0
        users = [uid] if scalar else list(uid)
        items = [iid] if scalar else list(iid)
        if len(users) != len(items):
            raise ValueError(f"`uid` and `iid` must have the same length, got {len(users)} and {len(items)}")
        mean, var = self._predict_raw(users, items, include_noise)
        return (float(mean[0]), float(var[0])) if scalar else (mean, var)

    # -- recommendation ----------------------------------------------------------------------------
    def recommend(self, uid: Any, n: int = 10, strategy: str = "mean", kappa: float = 1.0,
                  exclude_rated: bool = True, ratings: Any = None) -> pd.DataFrame:
        """Top-``n`` items for one raw user id, ranked with their uncertainty.

        Parameters
        ----------
        uid : raw user id (an unseen user gets the cold-start ranking)
        n : int, default=10
        strategy : {"mean", "lcb", "ucb"}, default="mean"
            Rank by the predictive mean, by mean - kappa*std (risk-averse: prefer items the model
            is sure about) or by mean + kappa*std (exploratory).
        kappa : float, default=1.0
        exclude_rated : bool, default=True
            Skip items the user rated (in the training set and in ``ratings``).
        ratings : dict {iid: rating} or sequence of (iid, rating), optional
            Ratings of this user to take into account without refitting: they are folded in for
            this call only (as :meth:`fold_in` does, but the model is not changed).

        Returns
        -------
        DataFrame with columns rank, item, mean, std, score (best first)
        """
        if ratings is None:
            return self.recommend_many([uid], n, strategy, kappa, exclude_rated).drop(columns="user")
        return recommend_folded(lambda: self._folded(uid, ratings), uid, self._raw_items(), n, strategy, kappa,
                                exclude_rated)

    def fold_in(self, uid: Any, ratings: Any) -> "MWGP":
        """Take a user's ratings into account without refitting the model.

        Only the user's own parameters are inferred (embedding, bias and noise level, with their
        uncertainty, which enters the user's predictive variance); items, the GP and the
        hyper-parameters stay as fitted. A new ``uid`` becomes a known user; a known user is folded
        in again from their training ratings plus ``ratings`` (a new rating of an item replaces
        the old one). Takes about 10 ms for 20 ratings. An empty ``ratings`` adds the user
        with no ratings: they are predicted exactly as an unseen user (cold start).

        Parameters
        ----------
        uid : raw user id
        ratings : dict {iid: rating} or sequence of (iid, rating) pairs
            Raw item ids known to the model, ratings within the rating scale, each item once.

        Returns
        -------
        self
        """
        uid = plain_id(uid)
        post, row, items, values = self._folded(uid, ratings)
        self.posterior_ = post
        self.trainset = _with_user_ratings(self.trainset, uid, row, items, values)
        return self

    def _folded(self, uid: Any, ratings: Any):
        post = require_fitted(self)
        ts = self.trainset
        items, values = check_fold_ratings(ratings, lambda raw: self._inner_ids("item", raw), ts.rating_scale)
        inner = int(self._inner_ids("user", [uid])[0])
        if inner < 0:
            check_not_twin("user", uid, ts._raw2inner_id_users.__contains__)
        known = None
        if inner >= 0:
            block = np.asarray(ts.ur[inner], dtype=np.float64).reshape(-1, 2)
            known = (block[:, 0].astype(np.int64), block[:, 1])
        return fold_in_user(post, inner, known, items, values)

    def _raw_items(self) -> np.ndarray:
        ts = self.trainset
        return np.array([ts.to_raw_iid(i) for i in range(ts.n_items)], dtype=object)

    def recommend_many(self, uids: Sequence[Any], n: int = 10, strategy: str = "mean", kappa: float = 1.0,
                       exclude_rated: bool = True) -> pd.DataFrame:
        """Batched :meth:`recommend`: one DataFrame with columns user, rank, item, mean, std, score."""
        post = require_fitted(self)
        ts = self.trainset
        uids = list(uids)
        inner = self._inner_ids("user", uids)
        exclude = None
        if exclude_rated:
            exclude = [np.array([i for i, _ in ts.ur[u]], dtype=np.int64) if u >= 0 else np.empty(0, np.int64)
                       for u in inner]
        return recommend_frame(post, uids, inner, self._raw_items(), exclude, n, strategy, kappa)

    def _predict_raw(self, users: list, items: list, include_noise: bool = True):
        index = self._inner_index(users, items)
        return require_fitted(self).predict(index, include_noise=include_noise)

    def _inner_index(self, users: list, items: list) -> np.ndarray:
        """(n, 2) inner indices of raw ids, -1 for ids not in the training data (warns on 196 vs '196')."""
        require_fitted(self)
        return np.stack([self._inner_ids("user", users), self._inner_ids("item", items)], axis=1).reshape(-1, 2)

    def _inner_ids(self, name: str, raw: list) -> np.ndarray:
        mapping = self.trainset._raw2inner_id_users if name == "user" else self.trainset._raw2inner_id_items
        codes = np.array([mapping.get(x, -1) for x in raw], dtype=np.int64)
        warn_id_twins(require_fitted(self), name, raw, codes, mapping.__contains__)
        return codes


def _with_user_ratings(ts: Trainset, uid: Any, row: int, items: np.ndarray, values: np.ndarray) -> Trainset:
    """A copy of ``ts`` in which user ``uid`` (inner ``row``, new or known) has exactly these ratings.

    The caller's Trainset is never changed (it may be used to fit other algorithms); the copy shares
    every other user's and item's rating list.
    """
    ur, ir = dict(ts.ur), dict(ts.ir)
    users = dict(ts._raw2inner_id_users)
    n_users = ts.n_users
    if row >= n_users:
        users[uid] = row
        n_users = row + 1
    old = ur.get(row, [])
    for i, _ in old:
        ir[i] = [(u, r) for u, r in ir[i] if u != row]
    ur[row] = list(zip(items.tolist(), values.tolist()))
    for i, r in ur[row]:
        ir[i] = [*ir.get(i, []), (row, r)]
    n_ratings = ts.n_ratings - len(old) + len(ur[row])
    return Trainset(ur, ir, n_users, ts.n_items, n_ratings, ts.rating_scale, users, ts._raw2inner_id_items)


def _rebuild_trainset(raw_users: list, raw_items: list, index: np.ndarray, ratings: np.ndarray,
                      rating_scale: tuple[float, float]) -> Trainset:
    """The Surprise Trainset a model was fitted on, with the same inner ids."""
    ur: dict[int, list] = {u: [] for u in range(len(raw_users))}
    ir: dict[int, list] = {i: [] for i in range(len(raw_items))}
    for (u, i), r in zip(index.tolist(), ratings.tolist()):
        ur[u].append((i, r))
        ir[i].append((u, r))
    return Trainset(ur, ir, len(raw_users), len(raw_items), len(ratings), rating_scale,
                    {raw: k for k, raw in enumerate(raw_users)}, {raw: k for k, raw in enumerate(raw_items)})
