"""Uncertainty-aware top-N: rank items by mean, by mean - kappa*std (risk-averse), mean + kappa*std, or by one
draw from the posterior (Thompson sampling, :mod:`.sampling`)."""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .memory import release_freed
from .seeding import seeded_generator, valid_random_state
from .errors import caller_stacklevel, check_int
from .posterior import MWGPPosterior

STRATEGIES = ("mean", "lcb", "ucb", "thompson")
#: the adapters' default strategy: "lcb" for users with fewer than AUTO_FEW_RATINGS ratings (new users
#: included), "mean" otherwise (on held-out users of ML-100K with 0 to 20 ratings, LCB's top 10 held 1.25 to
#: 2 times as many liked items as the mean's: benchmarks/new_users.py)
AUTO = "auto"
AUTO_FEW_RATINGS = 20
#: the default kappa of each strategy: lcb / ucb rank by mean -/+ 1 std; "thompson" draws from the posterior
#: tempered to THOMPSON_SCALE times its standard deviations (replay on held-out users, T = 30, hit rate / RMSE
#: on the user's other ratings: ML-1M greedy 0.838 / 0.948, scale 1 0.814 / 0.938, 0.5 0.834 / 0.942, 0.25
#: 0.838 / 0.953; ML-100K greedy 0.787 / 0.925, 1 0.755 / 0.915, 0.5 0.778 / 0.921, 0.25 0.781 / 0.919)
THOMPSON_SCALE = 0.5
DEFAULT_KAPPA = {"mean": 1.0, "lcb": 1.0, "ucb": 1.0, "thompson": THOMPSON_SCALE}
#: the largest kappa taken: a float32 score of kappa * std overflows near 3e38
MAX_KAPPA = 1e30


@dataclass
class TopN:
    """Top-N lists for k users; entries past a user's available items have item index -1."""

    items: np.ndarray  # (k, n) inner item indices
    mean: np.ndarray  # (k, n) predictive mean of the rating
    std: np.ndarray  # (k, n) predictive std of the rating (noise included)
    score: np.ndarray  # (k, n) ranking score


def check_strategy(strategy: str, kappa: float | None, n: int, auto: bool = False, warn_unused: bool = False) -> None:
    """Refuse a strategy, kappa or n that cannot be served; ``warn_unused``: warn where ``kappa`` changes nothing."""
    allowed = (AUTO, *STRATEGIES) if auto else STRATEGIES
    if strategy not in allowed:
        raise ValueError(f"`strategy` must be one of {allowed}, got {strategy!r}")
    if kappa is not None and (isinstance(kappa, (bool, np.bool_)) or not isinstance(kappa, numbers.Real)
                              or not 0 <= kappa <= MAX_KAPPA):
        raise ValueError(f"`kappa` must be None or a number in [0, {MAX_KAPPA:g}] (beyond, the float32 scores "
                         f"overflow; a kappa of 1e6 already ranks by the std alone), got {kappa!r}")
    check_int("n", n, 1)
    if warn_unused and strategy == "mean" and kappa is not None:
        warnings.warn(f"kappa={kappa!r} is not used by strategy='mean', which ranks by the mean alone; "
                      "strategy='lcb' or 'ucb' ranks by mean -/+ kappa std", UserWarning,
                      stacklevel=caller_stacklevel())


def draw_generator(random_state: Any, device: torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded from ``random_state`` (:func:`~.seeding.seeded_generator`), for
    posterior draws."""
    if not valid_random_state(random_state):
        raise ValueError(f"`random_state` must be None, an int >= 0 or a numpy Generator or RandomState, got "
                         f"{random_state!r}")
    return seeded_generator(random_state, device)


def top_n(posterior: MWGPPosterior, users: np.ndarray, n: int = 10, strategy: str | Sequence[str] = "mean",
          kappa: float | None = None,
          exclude: Sequence[np.ndarray] | None = None, chunk_size: int | None = None,
          random_state: Any = None, by_pairs: bool = False) -> TopN:
    """Rank every item for each user of a (user, item) model.

    Each user's catalogue is scored in one product (:meth:`~.posterior.MWGPPosterior.catalogue_moments`;
    by the mean: the means alone); the reported mean and std are the chosen items' predictive, as
    :meth:`~.posterior.MWGPPosterior.predict` gives them, and the reported score is computed from them; each list
    is in the order of its reported scores (so items whose scores differ by float32 rounding, ~1e-5, may come in
    another order in a longer list).

    Parameters
    ----------
    posterior : MWGPPosterior with two factors (user, item)
    users : int ndarray of shape (k,)
        Inner user indices; -1 for a user unseen in training (cold start).
    n : int
        Length of each list.
    strategy : {"mean", "lcb", "ucb", "thompson"}, or a sequence of them, one per user
        Score = mean, mean - kappa * std, mean + kappa * std, or one joint draw of the user's expected ratings
        from the posterior (:func:`~.sampling.catalogue_draw`; a new draw for every user and call), tempered:
        its deviations from the posterior's values times kappa.
    kappa : float, optional
        The weight of the uncertainty; None: :data:`DEFAULT_KAPPA` of the strategy (1 for lcb / ucb,
        :data:`THOMPSON_SCALE` for thompson; kappa = 1 there is plain Thompson sampling).
    exclude : sequence of k int arrays, optional
        Inner item indices never to recommend to each user (e.g. those already rated).
    chunk_size : int, optional
        (user, item) pairs whose predictive is reported at once; defaults to the posterior's ``chunk_size``.
    random_state : None, int or numpy Generator
        The draws of ``"thompson"`` (None: numpy's global random state, advanced by every call, so that repeated calls explore).
    by_pairs : bool
        Report the chosen items' predictive one pair at a time (:meth:`~.posterior.MWGPPosterior.predict_pair`:
        exactly what ``predict`` gives for one pair, in float64), for a list or two of a posterior that serves
        single pairs anyway (ten pairs of ML-1M: 0.18 against 0.53 ms; its first use builds the pair predictor,
        about 13 ms); else, and where one pair would take the batched path anyway, in one batch. With lcb / ucb the
        list then holds the n best items by those float64 scores: the 2n best of the catalogue are scored pair by
        pair (the catalogue's float32 variance can move an item across the list's edge).
    """
    given = np.asarray(users)
    if given.ndim > 1 or (given.size and not np.issubdtype(given.dtype, np.integer)):
        raise ValueError(f"`users` must be inner user indices, ints of shape (k,); got shape {given.shape}, dtype "
                         f"{given.dtype}")
    users = given.astype(np.int64).reshape(-1)
    strategies = [strategy] * len(users) if isinstance(strategy, str) else list(strategy)
    for one in (strategies or ["mean"]):
        check_strategy(one, kappa, n)
    if posterior.n_factors != 2:
        raise ValueError(f"top-N ranking needs a (user, item) model; this one has {posterior.n_factors} factors")
    n_users, n_items = posterior.n_levels
    if users.size and (users.min() < -1 or users.max() >= n_users):
        raise ValueError(f"user indices must lie in [-1, {n_users}), got range [{users.min()}, {users.max()}]")
    if exclude is not None:
        if len(exclude) != len(users):
            raise ValueError(f"`exclude` must hold one array per user ({len(users)}), got {len(exclude)}")
        exclude = [np.asarray(banned).reshape(-1) for banned in exclude]
        if any(b.size and not np.issubdtype(b.dtype, np.integer) for b in exclude):
            raise ValueError("`exclude` must hold arrays of inner item indices (ints)")
        outside = [b for b in exclude if b.size and (b.min() < 0 or b.max() >= n_items)]
        if outside:
            raise ValueError(f"`exclude` holds inner item indices outside [0, {n_items}) (e.g. range "
                             f"[{outside[0].min()}, {outside[0].max()}])")
    if len(strategies) != len(users):
        raise ValueError(f"`strategy` must be one strategy or one per user ({len(users)}), got {len(strategies)}")
    k, width = len(users), min(n, n_items)
    try:
        out_items = np.full((k, width), -1, dtype=np.int64)
        out = {name: np.full((k, width), np.nan) for name in ("mean", "std", "score")}
    except MemoryError:
        raise MemoryError(f"{k} lists of {width} items (n={n}) need {32 * k * width / 2 ** 30:.1f} GiB for the "
                          "result alone; ask for fewer items, or fewer users per call") from None
    device = posterior.device
    signs = np.array([{"mean": 0.0, "lcb": -1.0, "ucb": 1.0, "thompson": 0.0}[s] for s in strategies])
    kappas = np.array([DEFAULT_KAPPA[s] if kappa is None else float(kappa) for s in strategies])
    drawn_users = np.array([s == "thompson" for s in strategies], dtype=bool)
    generator = draw_generator(random_state, device) if drawn_users.any() else None
    step = posterior.chunk_size if chunk_size is None else check_int("chunk_size", chunk_size, 1)
    per_chunk = max(1, step // max(width, 1))
    known: dict = {}  # (user, item) -> one pair's (mean, var), already computed
    catalogue_bytes = posterior.n_levels[1] * posterior.state.gp.inducing.shape[0] * 8  # one (items x m) product, float64
    for start in range(0, k, per_chunk):
        block = users[start:start + per_chunk]
        b = len(block)
        best_scores, bests = [], []
        for row, user in enumerate(block.tolist()):
            # ranking by the mean needs no variance; the reported values are the n chosen items' predictive
            sign = float(signs[start + row])
            if drawn_users[start + row]:
                score = posterior.catalogue_draw(user, generator, scale=float(kappas[start + row]))
            else:
                mean, var = posterior.catalogue_moments(user, variance=bool(sign))
                score = mean + sign * float(kappas[start + row]) * var.sqrt() if sign else mean
            if exclude is not None:
                banned = np.asarray(exclude[start + row], dtype=np.int64)
                if banned.size:
                    score[torch.as_tensor(banned, device=device)] = -math.inf
            if by_pairs and sign and posterior.pair_path() is not None:  # lcb / ucb of the float64 predictive
                best_score, best = _rescored(posterior, user, score, width, sign * float(kappas[start + row]), known)
            else:
                best_score, best = torch.topk(score, width)
            best_scores.append(best_score.double())
            bests.append(best)
            release_freed(catalogue_bytes)  # the catalogue's temporaries, freed: not a heap that grows per user
        best_score, best = torch.stack(best_scores), torch.stack(bests)
        valid = torch.isfinite(best_score)
        chosen = torch.stack([torch.as_tensor(block, device=device).repeat_interleave(width), best.reshape(-1)], 1)
        if by_pairs and posterior.pair_path() is not None:
            pairs = [known.get(pair) or posterior.predict_pair(pair) for pair in map(tuple, chosen.tolist())]
            best_mean, best_var = (torch.tensor(values, dtype=torch.float64, device=device) for values in zip(*pairs))
        else:
            best_mean, best_var = posterior.moments(chosen)
        rows = slice(start, start + b)
        out_items[rows] = best.masked_fill(~valid, -1).cpu().numpy()
        best_mean, best_std = best_mean.view(b, width), best_var.sqrt().view(b, width)
        sign = torch.as_tensor(signs[rows] * kappas[rows], dtype=best_mean.dtype, device=device).unsqueeze(1)
        drawn = torch.as_tensor(drawn_users[rows], device=device).unsqueeze(1)
        picked = {"mean": best_mean, "std": best_std,
                  "score": torch.where(drawn, best_score.to(best_mean.dtype).view(b, width),
                                       best_mean + sign * best_std)}
        for name, values in picked.items():
            out[name][rows] = values.masked_fill(~valid, math.nan).double().cpu().numpy()
    # each list in the order of its reported scores: the catalogue's float32 variance ranked them, and lcb / ucb
    # scores of the reported (float64) predictive can swap neighbours that differ by ~1e-4 (NaN, the empty, last)
    order = np.argsort(-out["score"], axis=1, kind="stable")
    out_items = np.take_along_axis(out_items, order, axis=1)
    return TopN(out_items, *(np.take_along_axis(out[name], order, axis=1) for name in ("mean", "std", "score")))


def _rescored(posterior: MWGPPosterior, user: int, score: torch.Tensor, width: int, weight: float,
              known: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` best items by mean + ``weight`` * std of the float64 predictive of single pairs, among twice as
    many by the catalogue's ``score``: its float32 variance moved items across the list's edge (ML-100K, lcb with
    kappa 2.5: an item whose float64 score was 1.7e-4 lower took the 25th place), which ``predict`` then contradicts.
    The pairs' (mean, var) go into ``known``, for the report."""
    best_score, best = torch.topk(score, min(2 * width, score.numel()))
    exact = []
    for value, item in zip(best_score.tolist(), best.tolist()):
        if math.isfinite(value):
            mean, var = known[(user, item)] = posterior.predict_pair((user, item))
            exact.append(mean + weight * math.sqrt(var))
        else:  # an excluded item
            exact.append(-math.inf)
    scores = torch.tensor(exact, dtype=torch.float64, device=best.device)
    order = torch.argsort(-scores, stable=True)[:width]  # ties: the catalogue's order
    return scores[order], best[order]
