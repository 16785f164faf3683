"""myFM's Bayesian factorisation machines as Surprise algorithms with a predictive distribution.

Optional: needs myFM (``pip install -e '.[myfm]'`` from a checkout, or ``pip install myfm``) (myFM currently imports ``pkg_resources``,
hence ``setuptools<81``). Both models are fitted by Gibbs sampling; the predictive mean and
variance are taken over the kept samples, and the observation noise of each sample (1 / alpha)
is added to the variance.

- :class:`MyFMBaseline`: a rank-r FM on one-hot user and item ids (matrix factorisation with biases).
- :class:`MyFMFlippedBaseline`: the same plus SVD++-style implicit features on both sides, the
  "flipped" model of Rendle, Zhang and Koren (2019), fed to myFM as relation blocks.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any
from unittest import mock

import numpy as np
import scipy.sparse as sp
from surprise import AlgoBase, Trainset

from ..adapters._common import trainset_arrays
from ..adapters.predictive import PredictiveAlgo


INSTALL_HINT = ("The myFM baselines (myfm, myfm_flipped) need the optional package myFM: from a checkout of "
                "mogp_surprise run `pip install -e '.[myfm]'` (or `pip install myfm 'setuptools<81'`)")

#: ``rank="auto"`` of :class:`MyFMFlippedBaseline`: this rank from this many training ratings on, 16 below
AUTO_RANK_LARGE, AUTO_RANK_SMALL, AUTO_RANK_FROM = 32, 16, 500_000


def myfm_available() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import myfm  # noqa: F401
    except ImportError:
        return False
    return True


def _import_myfm() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import myfm
        import myfm.base
    return myfm


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
        myfm = _import_myfm()
        AlgoBase.fit(self, trainset)
        index, ratings = trainset_arrays(trainset)
        self._prepare(index)
        from tqdm.auto import tqdm

        model = myfm.MyFMRegressor(rank=self._rank(), random_seed=self.random_state)
        X, blocks = self._features(index)
        # myFM always draws its own progress bar; library code must stay quiet
        with mock.patch.object(myfm.base, "tqdm", functools.partial(tqdm, disable=True)):
            model.fit(X, ratings, X_rel=blocks, n_iter=self.n_iter, n_kept_samples=self.n_kept_samples,
                      callback=lambda *_: (False, None))
        self.model_ = model
        alpha = model.get_hyper_trace()["alpha"].to_numpy()[-len(model.predictor_.samples):]
        self.noise_var_ = float(np.mean(1.0 / alpha))
        return self

    # -- what the subclass changes: the features of a rating ------------------------------------
    def _rank(self) -> int:
        return self.rank

    def _prepare(self, index: np.ndarray) -> None:
        """Derive what the features need from the training ratings' inner indices (nothing here)."""

    def _features(self, index: np.ndarray) -> tuple[sp.csr_matrix, list]:
        """(X, relation blocks) of the ratings at inner indices ``index`` (n, 2)."""
        return self._design(index[:, 0], index[:, 1]), []

    def _design(self, users: np.ndarray, items: np.ndarray) -> sp.csr_matrix:
        """One-hot rows; an unknown id (-1) has no active column in its block."""
        n_u, n_i = self.trainset.n_users, self.trainset.n_items
        rows = np.concatenate([np.arange(len(users))] * 2)
        cols = np.concatenate([users, n_u + items])
        keep = np.concatenate([users >= 0, items >= 0])
        return sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])),
                             shape=(len(users), n_u + n_i))

    def _moments(self, index: np.ndarray, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        X, blocks = self._features(index)
        samples = np.stack([fm.predict_score(X, blocks) for fm in self.model_.predictor_.samples])
        return samples.mean(0), samples.var(0) + (self.noise_var_ if include_noise else 0.0)


def implicit_matrix(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """Normalised implicit feedback: row r holds ``1/sqrt(|N(r)|)`` at each distinct column in N(r), the
    columns paired with r in (``rows``, ``cols``); an empty row stays empty.

    Parameters
    ----------
    rows, cols : ndarray of int of shape (n,)
        Pairs of inner indices (user, item), or (item, user) for the items' side.
    shape : tuple of int
        (number of row levels, number of column levels).

    Returns
    -------
    scipy.sparse.csr_matrix of shape ``shape``
    """
    seen = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)
    seen.sum_duplicates()
    seen.data[:] = 1.0  # a pair rated twice is one implicit signal
    counts = np.diff(seen.indptr)
    return sp.csr_matrix(sp.diags(1.0 / np.sqrt(np.maximum(counts, 1))) @ seen)


class MyFMFlippedBaseline(MyFMBaseline):
    """Bayesian FM with SVD++-style implicit features on both sides ("flipped"; Rendle et al., 2019).

    A rating (u, i) has the features: the one-hot user u; the items u rated in the training data,
    ``1/sqrt(|N(u)|)`` each; the one-hot item i; the users who rated i in the training data,
    ``1/sqrt(|N(i)|)`` each. All columns share one prior group, as in :class:`MyFMBaseline` (a group
    per block, as in myFM's MovieLens examples, was 0.004 RMSE worse on each of three seeded 80/20
    splits of ML-100K at 200 iterations). The user's and the item's features are myFM relation
    blocks, computed once per distinct user / item rather than once per rating (ML-100K: 13 s per
    fit on one core at rank 16). The implicit blocks come from the training ratings only. An
    unknown user or item (cold start) has neither a one-hot nor an implicit block: its prediction
    is the rest of the model's, with the variance of the sampled parameters that remain.

    Parameters
    ----------
    rank : int or "auto", default="auto"
        Factor dimension; ``"auto"``: 32 from 500,000 training ratings on, 16 below (the resolved
        value is ``rank_``).
    n_iter : int, default=200
        Gibbs iterations.
    n_kept_samples : int, default=160
        Last samples kept for prediction (burn-in: ``n_iter - n_kept_samples`` = 40).
    random_state : int, default=0

    References
    ----------
    S. Rendle, L. Zhang and Y. Koren. On the difficulty of evaluating baselines: a study on
    recommender systems. arXiv:1905.01395, 2019.
    """

    def __init__(self, rank: int | str = "auto", n_iter: int = 200, n_kept_samples: int = 160,
                 random_state: int = 0) -> None:
        super().__init__(rank=rank, n_iter=n_iter, n_kept_samples=n_kept_samples, random_state=random_state)

    @property
    def name(self) -> str:
        rank = getattr(self, "rank_", self.rank)
        return f"myFM BFM flipped (rank {rank}, implicit)"

    def __repr__(self) -> str:
        return (f"MyFMFlippedBaseline(rank={self.rank!r}, n_iter={self.n_iter}, "
                f"n_kept_samples={self.n_kept_samples})")

    def _rank(self) -> int:
        return self.rank_

    def _prepare(self, index: np.ndarray) -> None:
        rank = self.rank
        if rank == "auto":
            rank = AUTO_RANK_LARGE if len(index) >= AUTO_RANK_FROM else AUTO_RANK_SMALL
        elif isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ValueError(f"`rank` must be an int >= 1 or 'auto'; got {rank!r}")
        self.rank_ = int(rank)
        n_u, n_i = self.trainset.n_users, self.trainset.n_items
        self.user_implicit_ = implicit_matrix(index[:, 0], index[:, 1], (n_u, n_i))
        self.item_implicit_ = implicit_matrix(index[:, 1], index[:, 0], (n_i, n_u))

    def _features(self, index: np.ndarray) -> tuple[sp.csr_matrix, list]:
        blocks = [self._relation_block(index[:, 0], self.user_implicit_),
                  self._relation_block(index[:, 1], self.item_implicit_)]
        return sp.csr_matrix((len(index), 0)), blocks

    @staticmethod
    def _relation_block(ids: np.ndarray, implicit: sp.csr_matrix) -> Any:
        """One myFM ``RelationBlock``: a row per distinct id, [one-hot | implicit]; -1 gives an empty row."""
        levels, rows = np.unique(ids, return_inverse=True)
        known = levels >= 0
        onehot = sp.csr_matrix((np.ones(int(known.sum())), (np.flatnonzero(known), levels[known])),
                               shape=(len(levels), implicit.shape[0]))
        feedback = sp.diags(known.astype(np.float64)) @ implicit[np.maximum(levels, 0)]
        return _import_myfm().RelationBlock(rows.astype(np.int64).ravel(),
                                            sp.hstack([onehot, feedback], format="csr"))
