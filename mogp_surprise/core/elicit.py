"""Which items to ask a user to rate: the answers expected to teach the model most about that user.

A user's own parameters (their row of every term's user tables: GP input, bias, bilinear factor) have,
after fold-in, a Gaussian (Laplace, Gauss-Newton) posterior N(theta, Sigma) (:mod:`.foldin`). An answer
y_j to item j adds lambda_j J_j J_j^T to its precision, with J_j = d E[y_j] / d theta the gradient of the
predictive mean of item j and lambda_j = E[1 / sigma_j^2] the item's noise precision for this user.
The covariance after an answer does not depend on the answer's value, so questions can be chosen
before they are answered, and a batch of n greedily.

The criterion is the expected reduction of the user-attributable predictive variance over the
catalogue, each item weighted by w_k (the adapters: its share of the training ratings, the items a user
is likely to rate, and to be recommended, count most; with ``candidates``, the candidates, equally)::

    V(Sigma) = sum_k w_k J_k^T Sigma J_k = tr(A Sigma),      A = sum_k w_k J_k J_k^T
    gain_j   = V(Sigma) - V(Sigma_j') = rho_j J_j^T Sigma A Sigma J_j / (1 + rho_j J_j^T Sigma J_j)

(Sherman-Morrison), with rho_j = p_j lambda_j: an answer is weighted by the chance p_j that the user can
give it (the expected information of a question that is answered with probability p_j; p_j = 1 when the
user can rate every candidate). An item whose ratings are noisy for this user (small lambda_j) teaches
less; an item whose mean does not depend on the user's parameters (J_j ~ 0) teaches nothing, however
uncertain its own prediction is (its own uncertainty and the GP's are no part of V). After each choice
Sigma takes the rank-one update of that answer. This is the V-optimal (integrated variance) design of
active learning, restricted to the user's parameters. ``docs/model.md`` has the measured comparison
with other criteria.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .errors import check_int
from .foldin import TOL, _check_init, _check_ratings, _fold_state
from .posterior import MWGPPosterior
from .rows import sorted_distinct
from .state import FoldedUser
from .user_objective import context_for

__all__ = ["Questions", "RatingGraph", "answer_probability", "ask"]

#: :func:`answer_probability`: the popularity prior's weight, in answers (an estimate from k answers is
#: shrunk towards the item's popularity as (k * personal + s * popularity) / (k + s))
ANSWER_PRIOR_STRENGTH = 1.0


@dataclass
class Questions:
    """Items to ask one user about, best first."""

    items: np.ndarray  # (k,) inner item indices, in the order chosen (k <= n: fewer when fewer candidates)
    gain: np.ndarray  # (k,) expected reduction of the catalogue's user-attributable variance (rating scale^2)
    answer_prob: np.ndarray  # (k,) the chance p_j that the user can answer, as given
    #: the weighted catalogue variance V before any question and after all k answers (rating scale^2)
    variance_before: float = 0.0
    variance_after: float = 0.0
    #: the user folded in from the given ratings (None with ``refit=False`` or no ratings)
    folded: FoldedUser | None = None


def ask(posterior: MWGPPosterior, items: np.ndarray, ratings: np.ndarray, n: int = 5,
        candidates: np.ndarray | None = None, exclude: np.ndarray | None = None,
        answer_prob: np.ndarray | None = None, weights: np.ndarray | None = None,
        init_user: int | None = None, refit: bool = True, repeats: bool = False,
        rated: tuple[np.ndarray, np.ndarray] | None = None) -> Questions:
    """Choose up to ``n`` items whose ratings are expected to teach the model most about one user
    (module docstring).

    Parameters
    ----------
    posterior : MWGPPosterior
        A fitted (user, item) model.
    items, ratings : ndarray of shape (k,)
        The user's ratings so far (inner item indices and ratings on the rating scale); k may be 0.
    n : int, default=5
        Number of questions.
    candidates : int ndarray, optional
        Inner item indices to choose from (default: every item).
    exclude : int ndarray, optional
        Inner item indices never to ask about (e.g. asked before and not answered); the rated items are
        never asked about.
    answer_prob : float ndarray of shape (n_items,), optional
        The chance that the user can rate each item (default: 1 for every item).
    weights : float ndarray of shape (n_items,), optional
        The weight w_k of each item in the catalogue variance (normalised to sum 1). Default: with
        ``candidates``, the candidates that may be asked (not rated, not excluded), equally: items the user
        can rate, taken as a sample of those the user will be predicted for (``docs/model.md``); without
        ``candidates``, every item equally.
    init_user : int, optional
        A known user's row: their fitted values are the start (as in :func:`~.foldin.fold_in`).
    refit : bool, default=True
        Fold the user in from ``ratings`` first; False: take the start as the user's parameters (a known
        user with ``init_user`` and their training ratings, as fitted).
    repeats : bool, default=False
        Accept an item more than once in ``items`` (training data may repeat a pair).
    rated : (items, ratings), optional
        The ratings the posterior of the known user ``init_user`` holds: ``items`` / ``ratings`` are new, and the
        user is updated by them (:func:`~.update.update_user`) rather than folded in again from all; never asked.
    """
    check_int("n", n, 1)
    ctx = context_for(posterior, "population")
    items, y = _check_ratings(ctx, items, ratings, "", repeats)
    init = _check_init(ctx, init_user, "")
    update = None
    if rated is not None:
        if init is None:
            raise ValueError("`rated` are the ratings of the known user `init_user`; give init_user")
        update = (init, *_check_ratings(ctx, *rated, "rated: ", repeats=True))
    n_items = ctx.n_items
    allowed = np.zeros(n_items, dtype=bool)
    allowed[_indices("candidates", candidates, n_items) if candidates is not None else slice(None)] = True
    if exclude is not None:
        allowed[_indices("exclude", exclude, n_items)] = False
    allowed[items] = False
    if update is not None:
        allowed[update[1]] = False
    p = _per_item("answer_prob", answer_prob, n_items, upper=1.0)
    w = _per_item("weights", weights, n_items)
    if w is not None and not w.sum() > 0:
        raise ValueError("`weights` must have a positive sum")
    if w is None and candidates is not None and allowed.any():
        w = allowed.astype(np.float64)

    data = ctx.user_data(items, y, update)
    if refit and data.n:
        folded, theta, sigma = _fold_state(ctx, data, init, 100, TOL)
    else:
        folded, theta = None, ctx.start(data, init)
        sigma = ctx.laplace(data, theta)[1]
    catalogue = ctx.catalogue_data(data)
    jac, lam = ctx.mean_jacobian(catalogue, theta)
    weight = torch.full((n_items,), 1.0 / n_items, dtype=torch.float64, device=ctx.device) if w is None else \
        torch.as_tensor(w / w.sum(), dtype=torch.float64, device=ctx.device)
    design = (jac * weight.unsqueeze(1)).T @ jac  # A
    prob = torch.ones(n_items, dtype=torch.float64, device=ctx.device) if p is None else \
        torch.as_tensor(p, dtype=torch.float64, device=ctx.device)
    rho = prob * lam
    scale = ctx.rating_std ** 2
    before = float((design * sigma).sum()) * scale
    pool = torch.as_tensor(np.flatnonzero(allowed), device=ctx.device)
    chosen, gains = [], []
    for _ in range(min(n, pool.numel())):
        j_pool, r_pool = jac[pool], rho[pool]
        g = j_pool @ sigma  # Sigma J_j (sigma is symmetric)
        quad = (g * j_pool).sum(1)
        gain = r_pool * ((g @ design) * g).sum(1) / (1.0 + r_pool * quad)
        best = int(torch.argmax(gain))
        item = int(pool[best])
        chosen.append(item)
        gains.append(float(gain[best]) * scale)
        sigma = sigma - (r_pool[best] / (1.0 + r_pool[best] * quad[best])) * torch.outer(g[best], g[best])
        pool = torch.cat([pool[:best], pool[best + 1:]])
    after = float((design * sigma).sum()) * scale
    chosen_arr = np.asarray(chosen, dtype=np.int64)
    return Questions(chosen_arr, np.asarray(gains), (np.ones(n_items) if p is None else p)[chosen_arr],
                     before, after, folded)


@dataclass(frozen=True)
class RatingGraph:
    """Who rated what in training: every user's items as CSR arrays (``indptr`` (n_users + 1,), ``items``), and
    the same entries by item (``item_indptr``, ``item_users``). Build it with :meth:`from_pairs`."""

    n_users: int
    n_items: int
    indptr: np.ndarray
    items: np.ndarray
    entry_user: np.ndarray  # the user of every entry of ``items``
    item_indptr: np.ndarray
    item_users: np.ndarray

    @classmethod
    def from_pairs(cls, users: np.ndarray, items: np.ndarray, n_users: int, n_items: int) -> "RatingGraph":
        """From (user, item) inner index pairs (a pair rated twice counts once)."""
        users, items = np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64)
        pairs = sorted_distinct(users * n_items + items)
        users, items = pairs // n_items, pairs % n_items
        indptr = np.concatenate([[0], np.cumsum(np.bincount(users, minlength=n_users))])
        by_item = np.argsort(items, kind="stable")
        item_indptr = np.concatenate([[0], np.cumsum(np.bincount(items, minlength=n_items))])
        return cls(int(n_users), int(n_items), indptr, items, users, item_indptr, users[by_item])

    def with_user(self, row: int, items: np.ndarray) -> "RatingGraph":
        """The graph in which user ``row`` rated exactly ``items`` (``row == n_users``: a new user), equal to
        :meth:`from_pairs` of the changed pairs: by copies of the arrays with the row's entries taken out and
        put in, not a sort of every entry (a fold-in at 200,000 users: some 0.6 s of the next ``ask``)."""
        if not 0 <= row <= self.n_users:
            raise ValueError(f"`row` must lie in [0, {self.n_users}], got {row}")
        items = sorted_distinct(np.asarray(items, dtype=np.int64))
        indptr = np.append(self.indptr, self.indptr[-1]) if row == self.n_users else self.indptr  # a new, empty row
        lo, hi = indptr[row], indptr[row + 1]
        old, counts = self.items[lo:hi], np.diff(indptr)
        counts[row] = items.size
        joined_items = np.concatenate([self.items[:lo], items, self.items[hi:]])
        entry_user = np.concatenate([self.entry_user[:lo], np.full(items.size, row, np.int64), self.entry_user[hi:]])
        # by item (users ascending within each item): the row's old entries out, then its new ones in
        degree = self.item_degree.copy()
        pieces = np.split(self.item_users, self._places(self.item_indptr, self.item_users, old, row))
        item_users = np.concatenate([pieces[0], *(p[1:] for p in pieces[1:])])  # (np.delete: 3x slower)
        degree[old] -= 1
        item_indptr = np.concatenate([[0], np.cumsum(degree)])
        pieces = np.split(item_users, self._places(item_indptr, item_users, items, row))
        item_users = np.concatenate([pieces[0], *(q for p in pieces[1:] for q in (np.array([row]), p))])
        degree[items] += 1
        return RatingGraph(max(self.n_users, row + 1), self.n_items, np.concatenate([[0], np.cumsum(counts)]),
                           joined_items, entry_user, np.concatenate([[0], np.cumsum(degree)]), item_users)

    @staticmethod
    def _places(item_indptr: np.ndarray, item_users: np.ndarray, items: np.ndarray, user: int) -> np.ndarray:
        """Where ``user`` is, or goes, in each of ``items``' sorted segments of ``item_users``."""
        return np.array([item_indptr[j] + np.searchsorted(item_users[item_indptr[j]:item_indptr[j + 1]], user)
                         for j in items.tolist()], dtype=np.int64)

    @property
    def item_degree(self) -> np.ndarray:
        return np.diff(self.item_indptr)


def answer_probability(graph: RatingGraph, answered: np.ndarray,
                       strength: float = ANSWER_PRIOR_STRENGTH) -> np.ndarray:
    """The chance that a user who rated the items ``answered`` can rate each item: the items' co-raters.

    Without answers it is the item's popularity, its share of the training users who rated it. With k
    answers it is the average over the answered items i of P(j | i), the share of i's raters who also rated
    j (users who saw what this user saw have seen similar things), shrunk towards the popularity as
    (k P(j | answers) + s popularity_j) / (k + s) (``strength`` s, in answers). Measured on the catalogue
    protocol of ``benchmarks/new_users.py`` (``docs/benchmarks.md``).
    """
    popularity = np.clip(graph.item_degree / max(graph.n_users, 1), 0.0, 1.0)
    answered = np.unique(np.asarray(answered, dtype=np.int64))
    answered = answered[graph.item_degree[answered] > 0]  # items nobody rated in training say nothing here
    if answered.size == 0:
        return popularity
    weight = np.zeros(graph.n_users)
    for i in answered:  # each answered item's raters share one unit of weight: P(j | i) averaged over i
        raters = graph.item_users[graph.item_indptr[i]:graph.item_indptr[i + 1]]
        weight[raters] += 1.0 / raters.size
    personal = np.bincount(graph.items, weights=weight[graph.entry_user], minlength=graph.n_items) / answered.size
    k = float(answered.size)
    return np.clip((k * personal + strength * popularity) / (k + strength), 0.0, 1.0)


def _indices(name: str, values, n_items: int) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    if values.size and not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"`{name}` must hold inner item indices (integers), got dtype {values.dtype}")
    if values.size and (values.min() < 0 or values.max() >= n_items):
        raise ValueError(f"`{name}` must lie in [0, {n_items}), got range [{values.min()}, {values.max()}]")
    return values.astype(np.int64)


def _per_item(name: str, values, n_items: int, upper: float | None = None) -> np.ndarray | None:
    if values is None:
        return None
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n_items,):
        raise ValueError(f"`{name}` must have one entry per item, shape ({n_items},), got {values.shape}")
    if not np.isfinite(values).all() or (values < 0).any() or (upper is not None and (values > upper).any()):
        bound = f"[0, {upper:g}]" if upper is not None else ">= 0"
        raise ValueError(f"`{name}` must hold finite values {bound}")
    return values
