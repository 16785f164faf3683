"""New users: which questions teach the model most (``ask``), and exploration with the posterior (Thompson).

    MOGP_DATA=../shared/data python benchmarks/new_users.py --dataset ml-1m --users 300
    python benchmarks/new_users.py --quick

10 % of the users (seeded) are held out of training. Each held-out user with at least 40 ratings
(of items the model knows) has their ratings shuffled (seeded) and split in two: a **pool** half and
a fixed **evaluation half**. Every answer is folded in (no refit); RMSE and 90 % coverage are
measured on the evaluation half, RMSE pooled over its ratings (the protocol's figure) and as the mean
over users of each user's RMSE (``user_rmse``: on ML-100K a few users with hundreds of ratings carry a
large share of the pooled figure).

- **Catalogue protocol** (Rashid et al. 2002): a policy may ask about any item; the user answers only
  if the item is in their pool half, otherwise the question is spent. RMSE after q = 1, 3, 5, 10, 20
  questions, and the answers obtained.
- **Pool protocol**: the policy asks only about the user's pool items (answers guaranteed). RMSE after
  k = 1, 3, 5, 10, 20 answers.
- **Replay** (exploration): each round the user is served one item among those they rated and not yet
  served, the rating is revealed and folded in; the cumulative share of picks rated >= 4 (hit rate)
  after T rounds, and the RMSE on the user's ratings not served after T rounds. Greedy (the mean), UCB
  (mean + latent std), Thompson (one draw of the posterior tempered as ``recommend(strategy="thompson")``
  draws: its deviations times ``THOMPSON_SCALE``), plain Thompson (``thompson_plain``: the posterior's own
  deviations), popularity, random.
- **Cold-start top-10**: precision@10 (ratings >= 4 among the user's held-out ratings) of the ranking
  a user with k = 0, 1, 3, 5 random pool answers gets, by the mean, by the mean - 1 std (LCB) and by a
  posterior draw (Thompson).

Policies: random, popularity (training ratings per item), entropy of the item's training ratings,
log-popularity x entropy (Rashid et al.), greedy (highest predicted rating), latent std (uncertainty
sampling: the highest predictive std of the latent rating), and ``ask`` (``mogp_surprise.core.elicit``:
the expected reduction of the user's catalogue variance; in the catalogue protocol weighted by the
chance of an answer, ``core.elicit.answer_probability`` of the items answered so far (their co-raters'
share, shrunk towards popularity), as ``MWGP.ask`` does without ``candidates``; in the pool protocol
with the pool as ``candidates``, as ``MWGP.ask(candidates=...)``). ``ask_pop``: ``ask`` with the
item's popularity (its share of the training users who rated it) as the chance of an answer (the
library's rule before 2026-11-26).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hold_out_users, table, write_json  # noqa: E402

from mogp_surprise.datasets import DATASETS  # noqa: E402
from mogp_surprise import MWGP  # noqa: E402
from mogp_surprise.comparison.data import load_or_synthesize, synthetic  # noqa: E402
from mogp_surprise.core.elicit import answer_probability, ask  # noqa: E402
from mogp_surprise.core.foldin import fold_in  # noqa: E402
from mogp_surprise.core.recommend import THOMPSON_SCALE, draw_generator  # noqa: E402
from mogp_surprise.datasets import to_surprise_dataset  # noqa: E402
from mogp_surprise.evaluation import interval_coverage  # noqa: E402

STEPS = (1, 3, 5, 10, 20)
STATIC = ("random", "popularity", "entropy", "logpop_entropy")
MODEL = ("greedy", "latent_std", "ask", "ask_pop")
REPLAY = ("greedy", "ucb", "thompson", "thompson_plain", "popularity", "random")
MIN_RATINGS = 40
HIT = 4.0


class World:
    """The fitted model, the held-out users' pools and evaluation halves, and the item statistics."""

    def __init__(self, algo: MWGP, users: dict, rng: np.random.Generator, like: float) -> None:
        self.algo, self.post, self.users, self.rng, self.like = algo, algo.posterior_, users, rng, like
        ts = algo.trainset
        self.n_users, self.n_items = self.post.n_levels
        self.counts = np.array([len(ts.ir[i]) for i in range(ts.n_items)], dtype=np.float64)
        self.graph = algo._rating_graph()  # who rated what in training, as MWGP.ask reads it
        self.answer_prob = answer_probability(self.graph, [])  # without answers: the item's popularity
        entropy = np.zeros(ts.n_items)
        for i in range(ts.n_items):
            values = np.array([r for _, r in ts.ir[i]])
            if values.size:
                _, c = np.unique(values, return_counts=True)
                share = c / c.sum()
                entropy[i] = -(share * np.log2(share)).sum()
        self.order = {"popularity": np.argsort(-self.counts, kind="stable"),
                      "entropy": np.argsort(-entropy, kind="stable"),
                      "logpop_entropy": np.argsort(-(np.log(np.maximum(self.counts, 1)) * entropy), kind="stable")}

    # -- the user's posterior -------------------------------------------------------------------------
    def fold(self, items: list, ratings: list):
        if not items:
            return None
        return fold_in(self.post, np.asarray(items, dtype=np.int64), np.asarray(ratings, dtype=np.float64))

    def posterior(self, folded):
        """(posterior, user row): the posterior with the folded user appended, or the cold-start user."""
        if folded is None:
            return self.post, -1
        return self.post.with_extra_users([folded]), self.n_users

    def predict(self, folded, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        post, row = self.posterior(folded)
        return post.predict(np.stack([np.full(len(items), row), items], 1).astype(np.int64))

    def catalogue(self, folded, latent: bool = True) -> tuple[np.ndarray, np.ndarray]:
        post, row = self.posterior(folded)
        mean, var = post.catalogue_moments(row, include_noise=not latent)
        return mean.double().cpu().numpy(), var.double().sqrt().cpu().numpy()

    # -- policies ------------------------------------------------------------------------------------------
    def pick(self, policy: str, allowed: np.ndarray, folded, items: list, ratings: list, catalogue: bool) -> int:
        """The next item of ``policy`` among the ``allowed`` (bool mask over items)."""
        if policy == "random":
            return int(self.rng.choice(np.flatnonzero(allowed)))
        if policy in self.order:
            order = self.order[policy]
            return int(order[allowed[order]][0])
        if policy in ("ask", "ask_pop"):
            prob = None
            if catalogue:
                prob = self.answer_prob if policy == "ask_pop" else answer_probability(
                    self.graph, np.asarray(items, dtype=np.int64))
            q = ask(self.post, np.asarray(items, dtype=np.int64), np.asarray(ratings, dtype=np.float64), n=1,
                    candidates=None if catalogue else np.flatnonzero(allowed),
                    exclude=np.flatnonzero(~allowed) if catalogue else None,
                    answer_prob=prob, weights=self.counts if catalogue else None)  # (pool: the candidates)
            return int(q.items[0])
        mean, std = self.catalogue(folded)
        score = {"greedy": mean, "latent_std": std, "ucb": mean + std}[policy]
        return int(np.flatnonzero(allowed)[np.argmax(score[allowed])])


def _metrics(y, mean, var) -> dict:
    return {"rmse": float(np.sqrt(np.mean((y - mean) ** 2))),
            "cov90": float(interval_coverage(y, mean, np.sqrt(var), levels=(0.9,))[0.9])}


def elicitation(world: World, policy: str, catalogue: bool) -> dict:
    """One policy over every user: RMSE / coverage after each step count, answers obtained."""
    out = {k: {"se": [], "cov": [], "n": 0, "answers": []} for k in (0, *STEPS)}
    for uid, (pool, evaluation) in world.users.items():
        pool_items = dict(pool)
        eval_items = np.array([i for i, _ in evaluation])
        y = np.array([r for _, r in evaluation])
        allowed = np.ones(world.n_items, dtype=bool) if catalogue else np.zeros(world.n_items, dtype=bool)
        if not catalogue:
            allowed[list(pool_items)] = True
        items, ratings, folded, asked = [], [], None, 0
        needs_fold = policy in MODEL and not policy.startswith("ask")  # ask folds the answers in itself
        for step in range(0, STEPS[-1] + 1):
            if step and allowed.any():
                item = world.pick(policy, allowed, folded if needs_fold else None, items, ratings, catalogue)
                allowed[item] = False
                asked += 1
                if item in pool_items:
                    items.append(item)
                    ratings.append(pool_items[item])
                    if needs_fold:
                        folded = world.fold(items, ratings)
            if step in out:
                current = folded if needs_fold else world.fold(items, ratings)
                mean, var = world.predict(current, eval_items)
                out[step]["se"].append((y - mean) ** 2)
                out[step]["cov"].append(np.abs(y - mean) <= 1.6448536 * np.sqrt(var))
                out[step]["answers"].append(len(items))
    # pooled over the evaluation ratings (the protocol's RMSE: a user with many ratings weighs more), and the
    # mean over users of each user's RMSE (every user counts once)
    return {k: {"rmse": float(np.sqrt(np.mean(np.concatenate(v["se"])))),
                "user_rmse": float(np.mean([np.sqrt(np.mean(se)) for se in v["se"]])),
                "cov90": float(np.mean(np.concatenate(v["cov"]))), "answers": float(np.mean(v["answers"]))}
            for k, v in out.items()}


def replay(world: World, policy: str, rounds: int) -> dict:
    hits, se = [], []
    for uid, (pool, evaluation) in world.users.items():
        rated = dict(pool + evaluation)
        allowed = np.zeros(world.n_items, dtype=bool)
        allowed[list(rated)] = True
        items, ratings, folded, user_hits = [], [], None, []
        for _ in range(rounds):
            if policy.startswith("thompson"):  # the library's tempered default, or plain (scale 1)
                post, row = world.posterior(folded)
                scale = 1.0 if policy == "thompson_plain" else THOMPSON_SCALE
                draw = post.catalogue_draw(row, world.generator, scale).double().cpu().numpy()
                item = int(np.flatnonzero(allowed)[np.argmax(draw[allowed])])
            else:
                item = world.pick(policy, allowed, folded, items, ratings, catalogue=False)
            allowed[item] = False
            items.append(item)
            ratings.append(rated[item])
            user_hits.append(rated[item] >= world.like)
            if policy in ("greedy", "ucb") or policy.startswith("thompson"):
                folded = world.fold(items, ratings)
        folded = world.fold(items, ratings)
        rest = np.flatnonzero(allowed)
        mean, _ = world.predict(folded, rest)
        se.append((np.array([rated[i] for i in rest]) - mean) ** 2)
        hits.append(user_hits)
    hits = np.array(hits, dtype=float)
    cumulative = hits.cumsum(1) / np.arange(1, rounds + 1)
    return {"hit_rate": float(cumulative[:, -1].mean()), "hit_rate_first5": float(cumulative[:, 4].mean()),
            "hit_rate_first1": float(cumulative[:, 0].mean()), "rmse_rest": float(np.sqrt(np.mean(np.concatenate(se)))),
            "curve": cumulative.mean(0).tolist()}


def cold_top10(world: World, draws: int = 1) -> list[dict]:
    """precision@10 over the catalogue for users with k random pool answers, by mean, LCB and Thompson."""
    rows = []
    for k in (0, 1, 3, 5):
        prec = {"mean": [], "lcb": [], "thompson": []}
        for uid, (pool, evaluation) in world.users.items():
            liked = {i for i, r in evaluation if r >= world.like}
            answers = pool[:k]
            folded = world.fold([i for i, _ in answers], [r for _, r in answers])
            mean, std = world.catalogue(folded, latent=False)
            banned = [i for i, _ in answers]
            post, row = world.posterior(folded)
            draw = post.catalogue_draw(row, world.generator).double().cpu().numpy()
            for name, score in (("mean", mean), ("lcb", mean - std), ("thompson", draw)):
                score = score.copy()
                score[banned] = -np.inf
                top = np.argsort(-score)[:10]
                prec[name].append(np.mean([i in liked for i in top]))
        rows.append({"answers": k, **{f"p@10_{n}": float(np.mean(v)) for n, v in prec.items()}})
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="ml-1m", choices=sorted(DATASETS))
    p.add_argument("--users", type=int, default=300, help="held-out users evaluated (at most; default 300)")
    p.add_argument("--replay-users", type=int, default=150, help="users in the replay (default 150)")
    p.add_argument("--rounds", type=int, default=30, help="replay rounds T (default 30)")
    p.add_argument("--protocols", nargs="*", default=["catalogue", "pool", "replay", "cold"])
    p.add_argument("--policies", nargs="*", default=None, help="restrict the elicitation policies")
    p.add_argument("--replay-policies", nargs="*", default=None, choices=REPLAY, help="restrict the replay policies")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=None, help="a saved model fitted on this seed's training users (else fit)")
    p.add_argument("--quick", action="store_true", help="tiny synthetic data (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if a.quick:
        a.users, a.replay_users = min(a.users, 4), min(a.replay_users, 3)
        a.policies = a.policies or ["random", "popularity", "greedy", "ask"]
    data = synthetic(6000) if a.quick else load_or_synthesize(a.dataset)
    df = data.ratings
    rng = np.random.default_rng(a.seed)
    held, is_held = hold_out_users(df, 0.10, rng)
    train = df[~is_held]
    started = time.perf_counter()
    if a.model and Path(a.model).exists():
        algo = MWGP.load(a.model)
    else:
        trainset = to_surprise_dataset(train[["user", "item", "rating"]], rating_scale=data.rating_scale)
        algo = MWGP(random_state=a.seed, **({"n_epochs": 2} if a.quick else {})).fit(trainset.build_full_trainset())
        if a.model:
            algo.save(a.model)
    fit_s = time.perf_counter() - started
    ts = algo.trainset
    users = {}
    min_ratings = 12 if a.quick else MIN_RATINGS
    for uid, g in df[is_held].groupby("user", sort=True):
        known = ts._raw2inner_id_items
        pairs = [(known[i], float(r)) for i, r in zip(g["item"], g["rating"]) if i in known]
        if len(pairs) < min_ratings:
            continue
        order = rng.permutation(len(pairs))
        pairs = [pairs[k] for k in order]
        users[uid] = (pairs[:len(pairs) // 2], pairs[len(pairs) // 2:])
    keys = sorted(users, key=str)
    keys = [keys[k] for k in sorted(rng.choice(len(keys), size=min(a.users, len(keys)), replace=False))]
    world = World(algo, {u: users[u] for u in keys}, np.random.default_rng(a.seed + 1), HIT)
    world.generator = draw_generator(a.seed, world.post.device)
    low, high = data.rating_scale
    world.like = HIT if (low, high) == (1, 5) else low + 0.75 * (high - low)
    print(f"{data.describe()}: {len(held)} held-out users, {len(users)} with >= {min_ratings} ratings, "
          f"{len(keys)} evaluated; fit {fit_s:.1f} s", flush=True)
    result = {"source": data.source, "n_users": len(keys), "fit_s": fit_s}
    policies = a.policies or [*STATIC, *MODEL]
    for protocol in ("catalogue", "pool"):
        if protocol not in a.protocols:
            continue
        rows = []
        for policy in policies:
            t = time.perf_counter()
            res = elicitation(world, policy, catalogue=protocol == "catalogue")
            row = {"policy": policy, **{f"rmse_{k}": res[k]["rmse"] for k in (0, *STEPS)},
                   **{f"cov90_{k}": res[k]["cov90"] for k in (0, *STEPS)},
                   **{f"user_rmse_{k}": res[k]["user_rmse"] for k in (0, *STEPS)}, "answers_20": res[STEPS[-1]]["answers"],
                   "s_per_user": (time.perf_counter() - t) / len(keys)}
            rows.append(row)
            print(protocol, table([{k: v for k, v in row.items() if not k.startswith(("cov", "user_rmse_"))
                                    or k in ("user_rmse_10", "user_rmse_20")}]), flush=True)
        result[protocol] = rows
    if "replay" in a.protocols:
        world_r = World(algo, {u: world.users[u] for u in keys[:a.replay_users]}, np.random.default_rng(a.seed + 2), HIT)
        world_r.generator, world_r.like = draw_generator(a.seed + 3, world.post.device), world.like
        rows = []
        for policy in a.replay_policies or REPLAY:
            t = time.perf_counter()
            res = replay(world_r, policy, a.rounds if not a.quick else 5)
            rows.append({"policy": policy, **res, "s_per_user": (time.perf_counter() - t) / len(world_r.users)})
            print("replay", table([{k: v for k, v in rows[-1].items() if k != "curve"}]), flush=True)
        result["replay"] = rows
    if "cold" in a.protocols:
        result["cold_top10"] = cold_top10(world)
        print(table(result["cold_top10"]), flush=True)
    name = "new_users" + ("_quick" if a.quick else f"_{data.name}")
    print("wrote", write_json(name, result, a.out))
    return result


if __name__ == "__main__":
    main()
