"""myFM's Bayesian factorisation machine as a Surprise algorithm with a predictive distribution.

Optional: needs myFM (``pip install -e '.[myfm]'`` from a checkout, or ``pip install myfm``) (myFM currently imports ``pkg_resources``,
hence ``setuptools<81``). The model is a rank-r FM on one-hot user and item ids, fitted by Gibbs
sampling; the predictive mean and variance are taken over the kept samples, and the observation
noise of each sample (1 / alpha) is added to the variance.
"""
from __future__ import annotations

import functools
import warnings
from unittest import mock

import numpy as np
import scipy.sparse as sp
from surprise import AlgoBase, Trainset

from ..adapters._common import trainset_arrays
from ..adapters.predictive import PredictiveAlgo


INSTALL_HINT = ("MyFMBaseline needs the optional package myFM: from a checkout of mogp_surprise run "
                "`pip install -e '.[myfm]'` (or `pip install myfm 'setuptools<81'`)")


def myfm_available() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import myfm  # noqa: F401
    except ImportError:
        return False
    return True


class MyFMBaseline(PredictiveAlgo):
    """Bayesian FM (myFM ``MyFMRegressor``, Gibbs sampling) on one-hot (user, item) ids.

    Parameters
    ----------
    rank : int, default=8
    n_iter : int, default=200
        Gibbs iterations.
    n_kept_samples : int, default=150
        Last samples kept for prediction (the rest is burn-in).
    random_state : int, default=0
    """

    _fitted_attr = "model_"

    def __init__(self, rank: int = 8, n_iter: int = 200, n_kept_samples: int = 150, random_state: int = 0) -> None:
        AlgoBase.__init__(self)
        self.rank = rank
        self.n_iter = n_iter
        self.n_kept_samples = n_kept_samples
        self.random_state = random_state

    @property
    def name(self) -> str:
        return f"myFM BFM (rank {self.rank})"

    def __repr__(self) -> str:
        return f"MyFMBaseline(rank={self.rank}, n_iter={self.n_iter}, n_kept_samples={self.n_kept_samples})"

    def fit(self, trainset: Trainset) -> "MyFMBaseline":
        if not myfm_available():
            raise ImportError(INSTALL_HINT)
        if not 1 <= self.n_kept_samples <= self.n_iter:
            raise ValueError(f"`n_kept_samples` must lie in [1, n_iter={self.n_iter}], got {self.n_kept_samples}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import myfm
        AlgoBase.fit(self, trainset)
        index, ratings = trainset_arrays(trainset)
        import myfm.base
        from tqdm.auto import tqdm

        model = myfm.MyFMRegressor(rank=self.rank, random_seed=self.random_state)
        # myFM always draws its own progress bar; library code must stay quiet
        with mock.patch.object(myfm.base, "tqdm", functools.partial(tqdm, disable=True)):
            model.fit(self._design(index[:, 0], index[:, 1]), ratings,
                      n_iter=self.n_iter, n_kept_samples=self.n_kept_samples, callback=lambda *_: (False, None))
        self.model_ = model
        alpha = model.get_hyper_trace()["alpha"].to_numpy()[-len(model.predictor_.samples):]
        self.noise_var_ = float(np.mean(1.0 / alpha))
        return self

    def _design(self, users: np.ndarray, items: np.ndarray) -> sp.csr_matrix:
        """One-hot rows; an unknown id (-1) has no active column in its block."""
        n_u, n_i = self.trainset.n_users, self.trainset.n_items
        rows = np.concatenate([np.arange(len(users))] * 2)
        cols = np.concatenate([users, n_u + items])
        keep = np.concatenate([users >= 0, items >= 0])
        return sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])),
                             shape=(len(users), n_u + n_i))

    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        X = self._design(index[:, 0], index[:, 1])
        samples = np.stack([fm.predict_score(X, []) for fm in self.model_.predictor_.samples])
        return samples.mean(0), samples.var(0) + (self.noise_var_ if include_noise else 0.0)
