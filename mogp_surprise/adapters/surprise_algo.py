"""MW-GP as a Surprise prediction algorithm."""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from surprise import AlgoBase, Trainset

from ..core.config import MWGPConfig
from ..core.checkpoint import Checkpointing
from ..core.distributed import DataParallel
from ..core.errors import check_bool
from ..core.trainer import fit_mwgp
from ._common import PARAMS_DOC, HyperParamsMixin, check_id_column, id_array, plain_id, store_lock
from ._trainset import index_of, ratings_per_item, saved_trainset, user_ratings, who_rated_what, with_user_ratings
from ._users import UserModelMixin
from .persistence import check_loadable_ids, load_model, save_model
from .predictive import PredictiveAlgo


class MWGP(HyperParamsMixin, UserModelMixin, PredictiveAlgo):
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
        Seconds spent in ``fit``, reading the trainset included.
    chosen_params_ : dict
        What the final training run used: ``n_epochs`` (chosen by early stopping when it is on), ``lr`` and
        ``mf_reg`` (on small data chosen by early stopping's search, see ``MWGPConfig.search_space``).

    References
    ----------
    Yang, M. and Buettner, F. (2021). Multi-output Gaussian Processes for uncertainty-aware
    recommender systems. UAI 2021.
    """

    _fitted_attr = "posterior_"

    def __init__(self, *args: Any, **params: Any) -> None:
        HyperParamsMixin.__init__(self, *args, **params)
        AlgoBase.__init__(self)

    __init__.__signature__ = HyperParamsMixin.__init__.__signature__  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        defaults = MWGPConfig.defaults()
        changed = {k: v for k, v in self._hyper_params().items() if v is not defaults[k] and v != defaults[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    # -- training ------------------------------------------------------------------------------
    def fit(self, trainset: Trainset, *, checkpoint=None, checkpoint_every: int = 1, resume: bool = False,
            distributed: bool = False) -> "MWGP":
        """Train on a Surprise ``Trainset`` (the model is rebuilt from scratch).

        Parameters
        ----------
        trainset : surprise.Trainset
        checkpoint : str or path-like, optional
            Save the training state to this file every ``checkpoint_every`` epochs.
        checkpoint_every : int, default=1
        resume : bool, default=False
            Continue from ``checkpoint`` if that file exists (same data and hyper-parameters); the
            result equals an uninterrupted fit.
        distributed : bool, default=False
            Train data-parallel over the processes of the current ``torch.distributed`` process
            group (launched with ``torchrun``; see docs/scaling.md). Every process passes the same
            trainset and gets the same model; only rank 0 writes the checkpoint.
        """
        if not isinstance(trainset, Trainset):
            raise TypeError(f"MWGP.fit expects a surprise Trainset (e.g. data.build_full_trainset() or a fold from "
                            f"a cross-validation iterator), got {type(trainset).__name__}")
        started = time.perf_counter()
        config = self._config()
        check_bool("distributed", distributed)
        checkpointing = Checkpointing.of(checkpoint, checkpoint_every, resume)
        check_id_column("user", id_array([trainset.to_raw_uid(u) for u in range(trainset.n_users)]))
        check_id_column("item", id_array([trainset.to_raw_iid(i) for i in range(trainset.n_items)]))
        index, ratings = index_of(trainset)
        bad = ~np.isfinite(ratings)
        if bad.any():
            u, i = index[np.flatnonzero(bad)[0]]
            raise ValueError(f"ratings must be finite; {int(bad.sum())} are NaN/inf (first: user "
                             f"{trainset.to_raw_uid(int(u))!r}, item {trainset.to_raw_iid(int(i))!r})")
        result = fit_mwgp(index, ratings, (trainset.n_users, trainset.n_items), config,
                          parallel=DataParallel.from_process_group() if distributed else None,
                          checkpointing=checkpointing)
        with store_lock(self):  # the trainset and its posterior after the fit: a failed refit keeps both as they were
            AlgoBase.fit(self, trainset)
            self._store_fit(result, started)
        return self

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Save the fitted model (weights, id maps, rating scale, hyper-parameters, versions) to ``path``.

        The file holds tensors and plain values only; :meth:`load` reads it on any device.
        """
        self._check_fitted()
        with store_lock(self):  # one state: not half way through a fold-in of another thread
            ts = self.trainset
            index, ratings = index_of(ts)
            users, items = ([plain_id(v) for v in enc.classes_.tolist()] for enc in self._encoders())
            check_loadable_ids("user", users)
            check_loadable_ids("item", items)
            state = {"rating_scale": tuple(float(x) for x in ts.rating_scale), "raw_users": users,
                     "raw_items": items, "index": torch.from_numpy(index), "ratings": torch.from_numpy(ratings)}
            save_model(self, path, state)

    @classmethod
    def load(cls, path, device=None) -> "MWGP":
        """Load a model written by :meth:`save` (``device``: where to put it; default CPU)."""
        algo, st = load_model(cls, path, device)
        algo.trainset = saved_trainset(st["raw_users"], st["raw_items"], st["index"].numpy(), st["ratings"].numpy(),
                                       tuple(st["rating_scale"]))
        algo.bu = algo.bi = None
        return algo

    # -- predictions (estimate, predict, test, predict_dist: PredictiveAlgo) ---------------------------
    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return self.posterior_.predict(index, include_noise=include_noise,
                                       chunk_size=getattr(self, "chunk_size", None))  # as set now, not at fit

    def _pair_moments(self, index: tuple[int, int], include_noise: bool = True) -> tuple[float, float]:
        return self.posterior_.predict_pair(index, include_noise=include_noise)

    # -- recommendation and fold-in (UserModelMixin) -----------------------------------------------
    def recommend(self, uid: Any, n: int = 10, strategy: str = "auto", kappa: float | None = None,
                  exclude_rated: bool = True, ratings: Any = None, random_state: Any = None) -> pd.DataFrame:
        """Top-``n`` items for one raw user id, ranked with their uncertainty.

        Parameters
        ----------
        uid : raw user id (an unseen user gets the cold-start ranking)
        n : int, default=10
        strategy : {"auto", "mean", "lcb", "ucb", "thompson"}, default="auto"
            "auto": "lcb" for a user with fewer than 20 ratings (a new user included: the items the
            model is sure the user will like, not the obscure ones whose mean is high by chance; on
            held-out MovieLens users their top 10 held 1.25-2 times as many liked items as by the mean),
            "mean" otherwise. Rank by the predictive mean, by mean - kappa*std (risk-averse: prefer items
            the model is sure about), by mean + kappa*std (exploratory), or by one draw of the user's expected
            ratings from the posterior (Thompson sampling: the user's and the items' parameters and
            the latent function drawn once, so the draw is consistent across items; each call explores
            anew).
        kappa : float, optional
            The weight of the uncertainty. lcb / ucb: mean -/+ kappa*std (default 1). thompson: the draw's
            deviations from the posterior's values times kappa (default 0.5, a tempered posterior: in a
            replay on held-out MovieLens users the plain posterior's draws, kappa=1, explored so much that
            their share of liked items fell 2-3 points below ranking by the mean; half the spread stays
            within 1 point of it and still learns more about the user).
        exclude_rated : bool, default=True
            Skip items the user rated (in the training set and in ``ratings``).
        ratings : dict {iid: rating} or sequence of (iid, rating), optional
            Ratings of this user to take into account without refitting: they are folded in for
            this call only (as :meth:`fold_in` does, but the model is not changed).
        random_state : None, int or numpy Generator, optional
            The draw of ``strategy="thompson"`` (None: a fresh one each call).

        Returns
        -------
        DataFrame with columns rank, item, est (the mean clipped to the rating scale, as Surprise's
        ``est``), mean (not clipped), std, score (best first)
        """
        return self._recommend(uid, n, strategy, kappa, exclude_rated, ratings, random_state)

    def recommend_many(self, uids: Sequence[Any], n: int = 10, strategy: str = "auto", kappa: float | None = None,
                       exclude_rated: bool = True, random_state: Any = None) -> pd.DataFrame:
        """Batched :meth:`recommend`: one DataFrame with columns user, rank, item, est, mean, std, score."""
        return self._recommend_many(uids, n, strategy, kappa, exclude_rated, random_state)

    def ask(self, uid: Any, n: int = 5, ratings: Any = None, candidates: Sequence[Any] | None = None,
            exclude: Sequence[Any] | None = None) -> pd.DataFrame:
        """The items whose ratings are expected to teach the model most about a user (what to ask a new
        user to rate first, or a known user next).

        The criterion (``docs/model.md``, "Which items to ask about") is the expected reduction of the
        user's predictive variance over the catalogue that an answer brings, from the Gaussian posterior
        of the user's own parameters: each item's weight in the catalogue is its share of the training
        ratings, and an answer counts by the item's noise precision for this user and by the chance that
        the user can give it. Without ``candidates`` that chance is the item's share of the training users
        who rated it (a user cannot rate a film they have not seen), and once the user has rated items, its
        share among the raters of those items, shrunk towards the former with the weight of one answer
        (:func:`~mogp_surprise.core.elicit.answer_probability`); the ``candidates``, when given, are
        taken to be items the user can rate, and a sample of those the user will be predicted for: the
        variance is then that over the candidates. The n questions are chosen greedily before any answer
        (the posterior's covariance after an answer does not depend on its value).

        Parameters
        ----------
        uid : raw user id (new, or known: then their training ratings count too)
        n : int, default=5
        ratings : dict {iid: rating} or sequence of (iid, rating), optional
            The user's answers so far, folded in for this call only (the model is not changed).
        candidates : list of raw item ids, optional
            Choose among these items only, all answerable (e.g. the films the user says they have seen).
        exclude : list of raw item ids, optional
            Never ask about these (e.g. asked before and not answered). Rated items are never asked.

        Returns
        -------
        DataFrame with columns rank, item, gain (the expected reduction of the catalogue variance, in
        squared rating units), answer_prob, est, mean, std (the item's current predictive for the user)
        """
        return self._ask(uid, n, ratings, candidates, exclude)

    def fold_in(self, uid: Any, ratings: Any) -> "MWGP":
        """Take a user's ratings into account without refitting the model.

        Only the user's own parameters are inferred (embedding, bias, bilinear factor and noise
        level, with their uncertainty, which enters the user's predictive variance); items, the GP
        and the hyper-parameters stay as fitted. A new ``uid`` becomes a known user. A known user's
        posterior as fitted is updated by ``ratings`` (it is the prior: no ratings leave the user as
        fitted); a new rating of an item the user rated replaces the old one, and then the user is
        folded in again from all their ratings. Takes about 10 ms for 20 ratings. An empty ``ratings`` adds the user
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
        return self._fold_in(uid, ratings)

    def _user_codes(self, raw: Sequence[Any]) -> np.ndarray:
        return self._inner_ids("user", raw)

    def _user_encoder(self):
        return self._encoders()[0]

    def _item_encoder(self):
        return self._encoders()[1]

    def _raw_items(self) -> np.ndarray:
        return self._encoders()[1].classes_.to_numpy(dtype=object)

    def _known_ratings(self, user: int) -> tuple[np.ndarray, np.ndarray]:
        return user_ratings(self.trainset, user)

    def _rating_range(self) -> tuple[tuple[float, float], str]:
        return tuple(self.trainset.rating_scale), "the rating scale"

    def _item_counts(self) -> np.ndarray:
        return ratings_per_item(self.trainset)

    def _rated_source(self) -> Any:
        return self.trainset

    def _rated_pairs(self) -> tuple[np.ndarray, np.ndarray, int, int]:
        return who_rated_what(self.trainset)

    def _store_user(self, uid: Any, row: int, items: np.ndarray, values: np.ndarray) -> None:
        old, cached = self.trainset, self.__dict__.get("_id_encoders")
        self.trainset = with_user_ratings(old, uid, row, items, values)
        if cached is not None and cached[0] is old:  # the id maps follow the trainset, not rebuilt id by id
            users, item_ids = cached[1]
            self._id_encoders = (self.trainset, (users.with_id(uid) if row >= users.n_levels else users, item_ids))
