"""Give a point-estimate Surprise algorithm a (constant) predictive variance.

:class:`HomoscedasticBaseline` wraps ``SVD()``, ``SVDpp()``, ``KNNBasic()``, ...
so that their predictions carry ``details["var"]`` and ``details["std"]`` like
those of :class:`~mogp_surprise.MWGP`, and can go through the same NLL, CRPS,
calibration and QP-curve evaluation. It is the natural "no uncertainty model"
reference: one residual variance for every user-item pair.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from surprise import AlgoBase, PredictionImpossible
from surprise.prediction_algorithms.predictions import Prediction

from ..core.errors import NotFittedError

__all__ = ["HomoscedasticBaseline"]

logger = logging.getLogger(__name__)


class HomoscedasticBaseline(AlgoBase):
    """Wrap a Surprise point-estimate algorithm with one residual variance.

    The predictive distribution of every rating is ``N(est, var_)``, where
    ``est`` is the wrapped algorithm's (clipped) estimate and ``var_`` is the
    mean squared residual of those estimates over the *training* ratings.

    Two caveats, by design:

    * the variance is **homoscedastic**: the same for every prediction, so it
      carries no information about which predictions are reliable. Its
      QP-curve is flat up to noise (ties are broken by input order, see
      :func:`mogp_surprise.evaluation.qp_curve`), and its interval coverage
      is only right on average;
    * it is estimated on the data the algorithm was fitted to, so it is
      **optimistic** (too small) for algorithms that fit the training data
      closely; expect coverage below nominal and a higher NLL on test data.

    Parameters
    ----------
    algo : surprise.AlgoBase
        An unfitted (or to-be-refitted) Surprise algorithm, e.g. ``SVD()``.
        It is fitted in place by :meth:`fit`.

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
    {'was_impossible': False, 'var': 0.76, 'std': 0.87, 'homoscedastic': True}
    """

    def __init__(self, algo: AlgoBase) -> None:
        AlgoBase.__init__(self)
        self.algo = algo

    # -- naming ---------------------------------------------------------------
    @property
    def name(self) -> str:
        """Label for tables and plots, e.g. ``"SVD (homoscedastic)"``."""
        return f"{type(self.algo).__name__} (homoscedastic)"

    def __repr__(self) -> str:
        return self.name

    # -- fitting --------------------------------------------------------------
    def fit(self, trainset: Any) -> HomoscedasticBaseline:
        """Fit the wrapped algorithm, then estimate the residual variance.

        Parameters
        ----------
        trainset : surprise.Trainset
            Training ratings.

        Returns
        -------
        self
        """
        if not isinstance(self.algo, AlgoBase):
            raise TypeError(
                f"`algo` must be a Surprise algorithm instance such as SVD(); got {self.algo!r}"
            )
        AlgoBase.fit(self, trainset)
        self.algo.fit(trainset)
        var = self._training_residual_variance(trainset)
        if var <= 0.0:
            logger.warning("%s fits the training ratings exactly; residual variance floored", self.name)
            var = float(np.finfo(float).eps)
        self.var_ = var
        self.std_ = math.sqrt(var)
        logger.info("%s: training residual std %.4f over %d ratings", self.name, self.std_,
                    trainset.n_ratings)
        return self

    def _point_estimate(self, u: Any, i: Any) -> float:
        """The wrapped estimate on inner ids, with Surprise's impossible-fallback."""
        try:
            est = self.algo.estimate(u, i)
        except PredictionImpossible:
            return float(self.algo.default_prediction())
        return float(est[0] if isinstance(est, tuple) else est)

    def _training_residual_variance(self, trainset: Any) -> float:
        # Same numbers as algo.predict(raw_uid, raw_iid, clip=True).est over the
        # training ratings, without the raw -> inner id round trip and the
        # Prediction objects: estimate() on the inner ids that all_ratings()
        # yields, then one vectorised clip.
        n = trainset.n_ratings
        ratings = np.empty(n)
        est = np.empty(n)
        for k, (u, i, r) in enumerate(trainset.all_ratings()):
            ratings[k] = r
            est[k] = self._point_estimate(u, i)
        lower, upper = trainset.rating_scale
        residuals = ratings - np.clip(est, lower, upper)
        return float(np.mean(residuals**2))

    # -- prediction -----------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "var_"):
            raise NotFittedError(f"This {self.name} instance is not fitted yet; call fit(trainset) first")

    def _variance_details(self) -> dict[str, Any]:
        return {"var": self.var_, "std": self.std_, "homoscedastic": True}

    def _with_variance(self, pred: Prediction) -> Prediction:
        return pred._replace(details={**(pred.details or {}), **self._variance_details()})

    def estimate(self, u: Any, i: Any) -> tuple[float, dict[str, Any]]:
        """Wrapped estimate on inner ids, plus the variance in the details.

        Parameters
        ----------
        u, i : int or str
            Inner user and item ids (``'UKN__...'`` strings when unknown).

        Returns
        -------
        est : float
            The wrapped algorithm's estimate (unclipped).
        details : dict
            The wrapped algorithm's details plus ``var``, ``std`` and
            ``homoscedastic=True``.

        Raises
        ------
        surprise.PredictionImpossible
            When the wrapped algorithm cannot predict.
        """
        self._check_fitted()
        est = self.algo.estimate(u, i)
        details: dict[str, Any] = {}
        if isinstance(est, tuple):
            est, details = est[0], dict(est[1])
        details.update(self._variance_details())
        return est, details

    def default_prediction(self) -> float:
        """The wrapped algorithm's fallback for impossible predictions."""
        return self.algo.default_prediction()

    def predict(self, uid: Any, iid: Any, r_ui: float | None = None, clip: bool = True,
                verbose: bool = False) -> Prediction:
        """Predict one rating from raw ids (see ``surprise.AlgoBase.predict``).

        Delegates to the wrapped algorithm's ``predict`` and adds ``var``,
        ``std`` and ``homoscedastic`` to the details; impossible predictions
        (unknown user or item) get the same variance. ``verbose`` logs at
        INFO level instead of printing.

        Returns
        -------
        surprise.Prediction
        """
        self._check_fitted()
        pred = self._with_variance(self.algo.predict(uid, iid, r_ui, clip=clip))
        if verbose:
            logger.info("%s", pred)
        return pred

    def test(self, testset: Iterable[tuple[Any, Any, float]], verbose: bool = False) -> list[Prediction]:
        """Predict a testset; the wrapped predictions with extended details.

        Parameters
        ----------
        testset : list of (uid, iid, r_ui)
            Raw ids and true ratings.
        verbose : bool, default=False
            Log every prediction at INFO level.

        Returns
        -------
        list of surprise.Prediction
        """
        self._check_fitted()
        return [self.predict(uid, iid, r_ui, verbose=verbose) for uid, iid, r_ui in testset]

    def predict_dist(self, uid: Any, iid: Any, clip: bool = True) -> tuple[Any, Any]:
        """Predictive mean and variance of a rating, from raw ids.

        Parameters
        ----------
        uid, iid : raw id, or list / ndarray / Series of shape (n,) of raw ids
            User and item ids as in the dataset.
        clip : bool, default=True
            Clip the mean into the rating scale.

        Returns
        -------
        mean : float or ndarray of shape (n,)
        var : float or ndarray of shape (n,)
            ``var_`` (the same for every pair).
        """
        self._check_fitted()
        batched = [_is_batch(uid), _is_batch(iid)]
        if any(batched):
            if not all(batched) or len(uid) != len(iid):
                raise ValueError(
                    "`uid` and `iid` must both be raw ids or both be 1-D sequences of the same "
                    f"length; got {_describe(uid)} and {_describe(iid)}"
                )
            mean = np.array([self.predict(u, i, clip=clip).est for u, i in zip(uid, iid)], dtype=float)
            return mean, np.full(mean.shape, self.var_)
        return float(self.predict(uid, iid, clip=clip).est), self.var_


def _is_batch(ids: Any) -> bool:
    # raw ids are scalars (str, int); tuples are left alone as possible raw ids
    return not isinstance(ids, (str, bytes, tuple)) and np.ndim(ids) == 1


def _describe(ids: Any) -> str:
    return f"a sequence of length {len(ids)}" if _is_batch(ids) else f"the raw id {ids!r}"
