"""Give a point-estimate Surprise algorithm a (constant) predictive variance, estimated out of sample.

:class:`HomoscedasticBaseline` wraps ``SVD()``, ``SVDpp()``, ``KNNBasic()``, ... so that their
predictions carry ``details["var"]`` and ``details["std"]`` like those of
:class:`~mogp_surprise.MWGP`, and can go through the same NLL, CRPS, calibration and QP-curve
evaluation. It is the natural "no uncertainty model" reference: one residual variance for every
user-item pair.
"""
from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
from surprise import AlgoBase, Dataset, PredictionImpossible, Reader, Trainset
from surprise.prediction_algorithms.predictions import Prediction

from ..adapters.predictive import PredictiveAlgo

__all__ = ["HomoscedasticBaseline"]

logger = logging.getLogger(__name__)


class HomoscedasticBaseline(PredictiveAlgo):
    """Wrap a Surprise point-estimate algorithm with one residual variance.

    The predictive distribution of every rating is ``N(est, var_)``, where ``est`` is the wrapped
    algorithm's estimate and ``var_`` is the mean squared residual of its (clipped) estimates on
    ratings it was **not** fitted to: a copy of the algorithm is fitted on the training ratings
    less a seeded ``holdout`` share and scored on that share; then the algorithm itself is fitted
    on all of them. (A variance from the training residuals is optimistic, by far for an algorithm
    that fits its training data closely: Surprise ``SVD`` on a dense rating set had training
    residual std 0.27 and 9 % coverage of its nominal 90 % intervals.) Fitting costs one more fit
    of the wrapped algorithm on ``1 - holdout`` of the ratings.

    The variance is **homoscedastic**: the same for every prediction, so it carries no information
    about which predictions are reliable. Its QP curve is flat up to noise (ties are broken by input
    order, see :func:`mogp_surprise.evaluation.qp_curve`), and its interval coverage is only right
    on average.

    Parameters
    ----------
    algo : surprise.AlgoBase
        A Surprise algorithm, e.g. ``SVD()``. It is fitted in place by :meth:`fit` (and copied
        for the variance estimate).
    holdout : float, default=0.1
        Share of the training ratings held out to estimate the variance, in (0, 1).
    random_state : int, default=0
        Seeds the held-out share.

    Attributes
    ----------
    var_ : float
        Residual variance, set by :meth:`fit`.
    std_ : float
        ``sqrt(var_)``.
    trainset : surprise.Trainset
        The training set (Surprise convention).

    Examples
    --------
    >>> from surprise import SVD  # doctest: +SKIP
    >>> algo = HomoscedasticBaseline(SVD()).fit(trainset)  # doctest: +SKIP
    >>> algo.test(testset)[0].details  # doctest: +SKIP
    {'was_impossible': False, 'var': 0.81, 'std': 0.90, 'homoscedastic': True}
    """

    _fitted_attr = "var_"

    def __init__(self, algo: AlgoBase, holdout: float = 0.1, random_state: int = 0) -> None:
        AlgoBase.__init__(self)
        self.algo = algo
        self.holdout = holdout
        self.random_state = random_state

    @property
    def name(self) -> str:
        """Label for tables and plots, e.g. ``"SVD (homoscedastic)"``."""
        return f"{type(self.algo).__name__} (homoscedastic)"

    def __repr__(self) -> str:
        return self.name

    # -- fitting --------------------------------------------------------------
    def fit(self, trainset: Any) -> HomoscedasticBaseline:
        """Estimate the residual variance on a held-out share, then fit the wrapped algorithm on all ratings.

        Parameters
        ----------
        trainset : surprise.Trainset
            Training ratings (at least 2).

        Returns
        -------
        self
        """
        if not isinstance(self.algo, AlgoBase):
            raise TypeError(f"`algo` must be a Surprise algorithm instance such as SVD(); got {self.algo!r}")
        if isinstance(self.holdout, bool) or not isinstance(self.holdout, (int, float)) or not 0 < self.holdout < 1:
            raise ValueError(f"`holdout` must be a share of the training ratings in (0, 1), got {self.holdout!r}")
        if not isinstance(trainset, Trainset):
            raise TypeError(f"fit expects a surprise Trainset, got {type(trainset).__name__}")
        if trainset.n_ratings < 2:
            raise ValueError(f"{self.name} needs at least 2 training ratings to estimate its variance on ratings "
                             f"it was not fitted to; got {trainset.n_ratings}")
        var = self._holdout_variance(trainset)
        AlgoBase.fit(self, trainset)
        self.algo.fit(trainset)
        if var <= 0.0:
            logger.warning("%s predicts its held-out ratings exactly; residual variance floored", self.name)
            var = float(np.finfo(float).eps)
        self.var_ = var
        self.std_ = math.sqrt(var)
        logger.info("%s: held-out residual std %.4f", self.name, self.std_)
        return self

    def _holdout_variance(self, trainset: Trainset) -> float:
        """Mean squared residual of the clipped predictions of a copy fitted without a held-out share.

        The copy gets a training set of the kept ratings alone (built as Surprise builds one), so a
        user or item whose every rating is held out is unknown to it, as a new one is at test time.
        """
        ratings = [(trainset.to_raw_uid(u), trainset.to_raw_iid(i), r) for u, i, r in trainset.all_ratings()]
        rng = np.random.default_rng(self.random_state)
        n_out = min(len(ratings) - 1, max(1, int(round(self.holdout * len(ratings)))))
        order = rng.permutation(len(ratings))
        kept = pd.DataFrame([ratings[k] for k in order[n_out:]], columns=["user", "item", "rating"])
        part = Dataset.load_from_df(kept, Reader(rating_scale=trainset.rating_scale)).build_full_trainset()
        probe = copy.deepcopy(self.algo)
        probe.fit(part)
        held = [ratings[k] for k in order[:n_out]]
        residuals = [r - probe.predict(u, i, clip=True).est for u, i, r in held]
        return float(np.mean(np.square(residuals)))

    # -- prediction -----------------------------------------------------------
    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        if not include_noise:
            raise ValueError(f"{self.name} has one residual variance for the rating; it has no separate variance "
                             "of a latent preference (include_noise=False)")
        mean = np.array([_point_estimate(self.algo, self.trainset, u, i) for u, i in index.tolist()])
        return mean, np.full(mean.shape, self.var_)

    def _variance_details(self) -> dict[str, Any]:
        return {"var": self.var_, "std": self.std_, "homoscedastic": True}

    def estimate(self, u: Any, i: Any) -> tuple[float, dict[str, Any]]:
        """The wrapped estimate on inner ids (``'UKN__...'`` strings when unknown), unclipped, with the
        wrapped algorithm's details plus ``var``, ``std`` and ``homoscedastic=True``.

        Raises ``surprise.PredictionImpossible`` when the wrapped algorithm cannot predict.
        """
        self._check_fitted()
        est = self.algo.estimate(u, i)
        est, details = (est[0], dict(est[1])) if isinstance(est, tuple) else (est, {})
        return est, {**details, **self._variance_details()}

    def default_prediction(self) -> float:
        """The wrapped algorithm's fallback for impossible predictions."""
        return self.algo.default_prediction()

    def predict(self, uid: Any, iid: Any, r_ui: float | None = None, clip: bool = True,
                verbose: bool = False) -> Prediction:
        """The wrapped algorithm's ``predict`` for raw ids, with ``var``, ``std`` and ``homoscedastic`` added
        to its details; an impossible prediction (unknown user or item) gets the same variance.
        ``verbose`` logs at INFO level instead of printing."""
        self._check_fitted()
        pred = self.algo.predict(uid, iid, r_ui, clip=clip)
        pred = pred._replace(details={**(pred.details or {}), **self._variance_details()})
        if verbose:
            logger.info("%s", pred)
        return pred

    def test(self, testset: Iterable[tuple[Any, Any, float]], verbose: bool = False) -> list[Prediction]:
        """:meth:`predict` (clipped) for every (uid, iid, r_ui) of a testset."""
        self._check_fitted()
        return [self.predict(uid, iid, r_ui, verbose=verbose) for uid, iid, r_ui in testset]


def _point_estimate(algo: AlgoBase, trainset: Trainset, u: int, i: int) -> float:
    """``algo``'s unclipped estimate on inner ids (-1: unknown), with Surprise's fallback for impossible ones."""
    try:
        est = algo.estimate(u if u >= 0 and trainset.knows_user(u) else f"UKN__{u}",
                            i if i >= 0 and trainset.knows_item(i) else f"UKN__{i}")
    except PredictionImpossible:
        return float(algo.default_prediction())
    return float(est[0] if isinstance(est, tuple) else est)
