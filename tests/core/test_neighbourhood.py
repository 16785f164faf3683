"""The neighbourhood term (Koren's global neighbourhood model): its inputs against a direct computation, and every
path that reads them (training, batched and one-pair prediction, the catalogue, fold-in, saving)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, MWGPPosterior, fit_mwgp, optim
from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.initialization import InitContext
from mogp_surprise.core.terms import RatingParts
from mogp_surprise.core.terms.bias import Bias
from mogp_surprise.core import similarity
from mogp_surprise.core.terms import neighbourhood
from mogp_surprise.core.terms.neighbourhood import Neighbourhood

N_USERS, N_ITEMS = 40, 45
CONFIG = dict(n_inducing=16, latent_dim=2, mf_rank=2, n_epochs=4, random_state=0, early_stopping=False,
              neighbourhood=True)


def _ratings(seed: int = 0, n: int = 900):
    rng = np.random.default_rng(seed)
    pairs = np.unique(np.stack([rng.integers(0, N_USERS, n), rng.integers(0, N_ITEMS, n)], 1), axis=0)
    pairs[:N_USERS, 0], pairs[:N_ITEMS, 1] = np.arange(N_USERS), np.arange(N_ITEMS)  # every level rated
    pairs = np.unique(pairs, axis=0)
    a, b = rng.normal(size=(N_USERS, 2)), rng.normal(size=(N_ITEMS, 2))
    y = np.clip(np.round(3 + (a[pairs[:, 0]] * b[pairs[:, 1]]).sum(1) + rng.normal(0, 0.5, len(pairs))), 1, 5)
    return pairs, y


@pytest.fixture(scope="module")
def data():
    return _ratings()


@pytest.fixture(scope="module")
def term(data):
    index, y = data
    t = Neighbourhood.from_config(MWGPConfig(**CONFIG), (N_USERS, N_ITEMS)).double()
    init = InitContext(torch.as_tensor(index), torch.as_tensor((y - y.mean()) / y.std()), (N_USERS, N_ITEMS), "pca",
                       torch.Generator().manual_seed(0), torch.float64, torch.device("cpu"))
    t.initialise_from_data(init)
    return t, init


def _direct(index, y_std, init, k, shrink):
    """The residuals, each item's neighbours and similarities, by loops over a dense matrix."""
    bias = Bias((N_USERS, N_ITEMS), {"bias_reg": "auto"}).double()
    bias.initialise_from_data(init)
    e = np.zeros((N_USERS, N_ITEMS))
    rated = np.zeros((N_USERS, N_ITEMS), bool)
    for (u, i), v in zip(index, y_std):
        e[u, i] = v - float(bias.bias_0[u].detach()) - float(bias.bias_1[i].detach())
        rated[u, i] = True
    sim = np.full((N_ITEMS, N_ITEMS), -np.inf)
    for i in range(N_ITEMS):
        for j in range(N_ITEMS):
            if i != j:
                common = float((rated[:, i] & rated[:, j]).sum())
                cos = (e[:, i] @ e[:, j]) / (np.linalg.norm(e[:, i]) * np.linalg.norm(e[:, j]) + 1e-9)
                sim[i, j] = cos * common / (common + shrink)
    return e, rated, sim


def test_the_inputs_are_the_neighbours_residuals_the_user_rated(data, term):
    index, y = data
    t, init = term
    k = t.options["neighbours"]
    e, rated, sim = _direct(index, init.y.numpy(), init, k, t.options["shrink"])
    neighbours = t.fitted_extras()["neighbours"].numpy()
    for i in range(N_ITEMS):  # the k most similar (the k-th's similarity is at least every other's)
        chosen = sim[i, neighbours[i]]
        others = np.delete(sim[i], np.concatenate([neighbours[i], [i]]))
        assert chosen.min() >= others.max() - 1e-9
        np.testing.assert_allclose(np.sort(chosen)[::-1], np.sort(sim[i])[::-1][:k], rtol=1e-6)
    rng = np.random.default_rng(1)
    query = np.stack([rng.integers(-1, N_USERS, 300), rng.integers(-1, N_ITEMS, 300)], 1)
    rows = t.pair_rows(torch.as_tensor(query), t.fitted_extras())
    near, hit = rows["near_residual"].value.numpy(), rows["near_rated"].value.numpy()
    for (u, i), n_row, h_row in zip(query, near, hit):
        if u < 0 or i < 0:
            assert not h_row.any() and not n_row.any()
            continue
        np.testing.assert_array_equal(h_row, rated[u, neighbours[i]])
        np.testing.assert_allclose(n_row, np.where(rated[u, neighbours[i]], e[u, neighbours[i]], 0.0), atol=1e-6)
    # training reads the inputs formed before training for its ratings (by position): the same
    positions = t.pair_rows(torch.as_tensor(index), t.fitted_extras(), torch.arange(len(index)))
    searched = t.pair_rows(torch.as_tensor(index), t.fitted_extras())
    assert searched["near_rated"].value.sum() > 0
    for name in ("near_residual", "near_rated"):
        np.testing.assert_array_equal(positions[name].value.numpy(), searched[name].value.numpy())
    # the numpy path of one-pair serving gives the same inputs
    as_np = {key: value.numpy() for key, value in t.fitted_extras().items()}
    again = t.pair_rows(query, as_np)
    np.testing.assert_array_equal(again["near_rated"].value, hit)
    np.testing.assert_allclose(again["near_residual"].value, near)


def test_one_users_pairs_read_the_users_row_as_the_search_does(term, monkeypatch):
    """A catalogue (every item of one user) reads the user's row of the graph as a dense vector, by the compiled
    kernel or by torch: the same inputs as searching every neighbour in the graph, with a pair rated twice read at
    its first place."""
    t, _ = term
    extras = dict(t.fitted_extras())
    keys, residuals = extras["graph_keys"], extras["graph_residuals"]
    # repeat some pairs with other residuals: both paths must read the first of them
    again = torch.arange(0, keys.numel(), 7)
    keys, order = torch.sort(torch.cat([keys, keys[again]]), stable=True)
    residuals = torch.cat([residuals, residuals[again] + 1.0])[order]
    neighbours = extras["neighbours"].clone()
    neighbours[::3, -4:] = -1  # items with fewer neighbours than slots
    extras.update(graph_keys=keys, graph_residuals=residuals, neighbours=neighbours)
    items = torch.cat([torch.arange(N_ITEMS), torch.tensor([-1])])  # the catalogue and an unseen item
    for user in (0, 7, N_USERS - 1):
        index = torch.stack([torch.full_like(items, user), items], 1)
        compiled = t.pair_rows(index, extras)  # numba's kernel where it is installed
        monkeypatch.setattr(neighbourhood, "serving_kernel", lambda name: None)
        row = t.pair_rows(index, extras)  # torch, the user's row
        monkeypatch.setattr(neighbourhood, "ONE_USER_ROW", 0)  # never the user's row: search every neighbour
        searched = t.pair_rows(index, extras)
        monkeypatch.undo()
        assert row["near_rated"].value.sum() > 0 and not row["near_rated"].value[-1].any()
        for name in ("near_residual", "near_rated"):
            torch.testing.assert_close(row[name].value, searched[name].value, rtol=0, atol=0)
            torch.testing.assert_close(compiled[name].value, searched[name].value, rtol=0, atol=0)
        with pytest.raises(IndexError):  # an item beyond the model's: an error (as in torch), never a wild read
            t.pair_rows(torch.tensor([[user, N_ITEMS]]), extras)
        few = index[::5]  # a few pairs of the user (e.g. a top-N list): the kernel again, against torch
        got = t.pair_rows(few, extras)
        monkeypatch.setattr(neighbourhood, "serving_kernel", lambda name: None)
        for name, value in t.pair_rows(few, extras).items():
            torch.testing.assert_close(got[name].value, value.value, rtol=0, atol=0)
        monkeypatch.undo()


@pytest.mark.parametrize("dense,symmetric_block,kernel", [(True, 1024, False), (True, 3, False), (False, 1024, False),
                                                        (False, 1024, True)])
def test_dense_and_sparse_products_choose_the_most_similar_items(data, term, monkeypatch, dense, symmetric_block,
                                                                 kernel):
    """Every way of forming the similarity (dense float32 products where the ratings fill the (users x items)
    matrix, by blocks of their symmetric halves where they fit in one block; elsewhere numba's kernel over each
    item's raters' rows, or without numba sparse float64 products) picks each item's k most similar items of the
    direct loops."""
    if kernel and optim.sparse_neighbours_kernel() is None:
        pytest.skip("numba is not installed: the kernel is not used")
    if not kernel:
        monkeypatch.setattr(similarity, "sparse_neighbours_kernel", lambda: None)
    called = []
    if kernel:
        original = similarity._by_kernel
        monkeypatch.setattr(similarity, "_by_kernel", lambda *a: called.append(1) or original(*a))
    index, _ = data
    t, init = term
    k, shrink = t.options["neighbours"], t.options["shrink"]
    e, _, sim = _direct(index, init.y.numpy(), init, k, shrink)
    monkeypatch.setattr(similarity, "DENSE_ENTRIES", 2 ** 25 if dense else 0)
    monkeypatch.setattr(similarity, "SYMMETRIC_BLOCK", symmetric_block)
    if dense:  # the symmetric halves give the whole products
        x = torch.as_tensor(np.random.default_rng(1).normal(size=(7, 11)), dtype=torch.float32)
        torch.testing.assert_close(similarity._symmetric_product(x), x.T @ x, rtol=1e-6, atol=1e-6)
    idx = torch.as_tensor(index)
    residual = torch.as_tensor(e[index[:, 0], index[:, 1]])
    blocks = list(similarity.products(idx, residual, (N_USERS, N_ITEMS)))
    assert blocks[0][2].dtype == (torch.float32 if dense else torch.float64)  # the path asked for was taken
    chosen = similarity.item_neighbours(idx, residual, (N_USERS, N_ITEMS), k, shrink).numpy()
    assert bool(called) == kernel
    tol = 1e-5 if dense else 1e-9
    for i in range(N_ITEMS):
        others = np.delete(sim[i], np.concatenate([chosen[i], [i]]))
        assert i not in chosen[i] and sim[i, chosen[i]].min() >= others.max() - tol
        np.testing.assert_allclose(np.sort(sim[i, chosen[i]]), np.sort(sim[i])[::-1][:k][::-1], atol=tol)


@pytest.mark.parametrize("dense", [True, False])
def test_the_similarity_is_the_cosine_of_whole_residual_vectors(monkeypatch, dense):
    """As documented: the sum over common raters, each norm over the item's own raters. Item A agrees perfectly
    with item 0 on its two common raters but has four raters of its own (cosine 2 / (2 sqrt 38) = 0.16); item B
    nearly agrees on all four (0.97). A cosine over common raters only would pick A (1.0)."""
    monkeypatch.setattr(similarity, "DENSE_ENTRIES", 2 ** 25 if dense else 0)
    rows = [(0, 0, 1.), (1, 0, 1.), (2, 0, -1.), (3, 0, -1.),
            (0, 1, 1.), (1, 1, 1.), (4, 1, 3.), (5, 1, 3.), (6, 1, 3.), (7, 1, 3.),
            (0, 2, 1.), (1, 2, 1.), (2, 2, -1.), (3, 2, -.5)]
    idx = torch.tensor([[u, i] for u, i, _ in rows])
    residual = torch.tensor([r for *_, r in rows], dtype=torch.float64)
    assert similarity.item_neighbours(idx, residual, (8, 3), 1, 0.0)[0].item() == 2


def test_the_noise_alone_is_formed_without_the_mean_only_terms(fitted):
    """``noise_variances`` skips the terms that add to the mean only (the neighbourhood's lookups among them) and
    gives the noise variance of the whole predictive; those terms' parts leave the noise, inputs and scale alone."""
    from mogp_surprise.core.predictive import noise_variances, pattern_parts, predictive_moments

    state = fitted.state
    skipped = [t.name for t in state.terms if t.term.mean_only]
    assert {"bias", "neighbourhood"} <= set(skipped)
    idx = torch.as_tensor(np.stack([np.arange(N_USERS), np.arange(N_USERS) % N_ITEMS], 1))
    want = predictive_moments(state, fitted.psi, idx)[2]
    torch.testing.assert_close(noise_variances(state, idx), want, rtol=1e-12, atol=0)
    full, alone = pattern_parts(state, idx, (False, False)), pattern_parts(state, idx, (False, False), True)
    assert not torch.equal(full.mean, alone.mean)
    for name in ("log_noise", "log_noise_var", "latent_log_scale"):
        a, b = getattr(full, name), getattr(alone, name)
        assert (a is None and b is None) or torch.equal(a, b)
    assert all(torch.equal(a.value, b.value) for a, b in zip(full.inputs, alone.inputs))


def test_the_mean_adds_the_normalised_sums(term):
    """|R|^-1/2 sum_j (e_uj w_ik(j) + c_ik(j)) over the neighbours the user rated, 0 where none is."""
    t, _ = term
    rng = np.random.default_rng(2)
    near = torch.as_tensor(rng.normal(size=(6, 3)))
    rated = torch.as_tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1]], dtype=torch.float64)
    near = near * rated
    w, c = torch.as_tensor(rng.normal(size=(6, 3))), torch.as_tensor(rng.normal(size=(6, 3)))
    from mogp_surprise.core.terms import Rows

    parts = RatingParts(mean=torch.zeros(6, dtype=torch.float64), log_noise_base=torch.zeros(()), inputs=[None, None])
    t.combine({"near_residual": Rows(near), "near_rated": Rows(rated), "weight": Rows(w), "offset": Rows(c)}, parts)
    want = [(near[n] * w[n] + rated[n] * c[n]).sum() / max(float(rated[n].sum()), 1.0) ** 0.5 for n in range(6)]
    np.testing.assert_allclose(parts.mean.numpy(), torch.stack(want).numpy(), rtol=1e-12)
    assert parts.mean[1] == 0.0 and parts.mean_var is None
    # with the tables' Laplace variances: the variance of that linear function of independent entries
    vw, vc = torch.as_tensor(rng.uniform(0.1, 1, (6, 3))), torch.as_tensor(rng.uniform(0.1, 1, (6, 3)))
    parts = RatingParts(mean=torch.zeros(6, dtype=torch.float64), log_noise_base=torch.zeros(()), inputs=[None, None])
    t.combine({"near_residual": Rows(near), "near_rated": Rows(rated), "weight": Rows(w, vw), "offset": Rows(c, vc)},
              parts)
    g = torch.Generator().manual_seed(5)
    w_draw = w + vw.sqrt() * torch.randn(40000, 6, 3, generator=g, dtype=torch.float64)
    c_draw = c + vc.sqrt() * torch.randn(40000, 6, 3, generator=g, dtype=torch.float64)
    draws = (near * w_draw + rated * c_draw).sum(-1) / (rated.sum(1) + (rated.sum(1) == 0)).sqrt()
    np.testing.assert_allclose(parts.mean_var.numpy(), draws.var(0).numpy(), rtol=0.05)
    assert parts.mean_var[1] == 0.0


@pytest.fixture(scope="module")
def fitted(data):
    index, y = data
    return fit_mwgp(index, y, (N_USERS, N_ITEMS), MWGPConfig(**CONFIG, dtype="float64")).posterior


def test_a_fit_trains_the_tables_and_every_path_predicts_alike(fitted):
    weight = fitted.term("neighbourhood").tables["weight"].values
    assert weight.abs().max() > 1e-3  # trained away from the prior's 0
    rng = np.random.default_rng(3)
    index = np.stack([rng.integers(-1, N_USERS, 200), rng.integers(-1, N_ITEMS, 200)], 1)
    mean, var = fitted.predict(index)
    assert np.isfinite(mean).all() and (var > 0).all()
    one = np.array([fitted.predict_pair(tuple(int(v) for v in row)) for row in index])
    assert fitted._pair_predictor is not None  # the numpy path serves a model with the term
    np.testing.assert_allclose(one[:, 0], mean, rtol=1e-10)
    np.testing.assert_allclose(one[:, 1], var, rtol=1e-10)
    for user in (0, 7, -1):
        cm, cv = fitted.catalogue_moments(user)
        m, v = fitted.predict(np.stack([np.full(N_ITEMS, user), np.arange(N_ITEMS)], 1))
        np.testing.assert_allclose(cm.numpy(), m, rtol=1e-10)
        np.testing.assert_allclose(cv.numpy(), v, rtol=1e-8)


def test_the_term_changes_the_predictions_of_known_pairs(fitted):
    """Without the term's part the known pairs' means move (the check above could not see a term that adds 0)."""
    index = np.stack([np.arange(N_USERS), np.arange(N_USERS) % N_ITEMS], 1)
    mean, _ = fitted.predict(index)
    state = fitted.state
    term = state.term("neighbourhood")
    zero = {**term.extras, "graph_keys": term.extras["graph_keys"][:0],
            "graph_residuals": term.extras["graph_residuals"][:0]}
    from dataclasses import replace

    terms = [replace(t, extras=zero) if t.name == "neighbourhood" else t for t in state.terms]
    alone, _ = MWGPPosterior(replace(state, terms=terms)).predict(index)
    assert np.abs(alone - mean).max() > 1e-3


def test_it_saves_loads_and_pickles_identically(fitted):
    index = np.stack([np.arange(N_USERS), np.arange(N_USERS) % N_ITEMS], 1)
    want = fitted.predict(index)
    for copy in (MWGPPosterior.from_state_dict(fitted.state_dict()), pickle.loads(pickle.dumps(fitted))):
        for a, b in zip(copy.predict(index), want):
            np.testing.assert_array_equal(a, b)
    saved = next(t for t in fitted.state_dict()["terms"] if t["name"] == "neighbourhood")
    assert saved["extras"]["graph_keys"].dtype == torch.int64 and saved["extras"]["neighbours"].dtype == torch.int64


def test_a_folded_user_is_served_from_the_answers(data, fitted):
    """A new user's answers become the user's graph row: the folded posterior's mean of an item equals fold-in's
    own objective's mean (the same pair inputs), and differs from the same user without the answers' residuals."""
    index, y = data
    rng = np.random.default_rng(4)
    items = rng.choice(N_ITEMS, 8, replace=False)
    answers = rng.integers(1, 6, 8).astype(float)
    user = fold_in(fitted, items, answers)
    assert user.answers is not None and list(user.answers[0]) == list(items)
    post = fitted.with_extra_users([user])
    new = N_USERS
    query = np.stack([np.full(N_ITEMS, new), np.arange(N_ITEMS)], 1)
    mean, _ = post.predict(query)
    one = np.array([post.predict_pair((new, j))[0] for j in range(N_ITEMS)])
    np.testing.assert_allclose(one, mean, rtol=1e-10)
    # fold-in's objective saw the same inputs: its mean of the rated items equals the served one
    from mogp_surprise.core.user_objective import context_for

    ctx = context_for(fitted)
    data_u = ctx.user_data(items, (answers - ctx.rating_mean) / ctx.rating_std)
    theta = torch.cat([torch.as_tensor(np.asarray(user.raw[b.key])).reshape(-1) for b in ctx.blocks])
    parts = ctx.parts(data_u, theta)
    assert data_u.pair_rows and data_u.pair_rows[next(iter(data_u.pair_rows))]["near_rated"].value.sum() > 0
    # the term's part does not depend on the user's parameters: formed once, the same bit for bit
    from dataclasses import replace

    assert list(data_u.fixed) == [i for i, t in enumerate(ctx.state.terms) if t.name == "neighbourhood"]
    unfixed = ctx.parts(replace(data_u, fixed=None), theta)
    torch.testing.assert_close(unfixed.mean, parts.mean, rtol=0, atol=0)
    torch.testing.assert_close(unfixed.mean_var, parts.mean_var, rtol=0, atol=0)
    f_mean, _ = ctx.f_moments(data_u, parts)
    np.testing.assert_allclose((parts.mean + f_mean).numpy() * fitted.rating_std + fitted.rating_mean,
                               post.predict(np.stack([np.full(8, new), items], 1))[0], rtol=1e-8)
    # a re-folded known user replaces their graph row
    mine = index[:, 0] == 3
    again = fitted.with_replaced_users([3], [fold_in(fitted, index[mine, 1], y[mine])])
    keys = again.term("neighbourhood").extras["graph_keys"]
    assert torch.equal(keys, fitted.term("neighbourhood").extras["graph_keys"])


def test_appended_users_have_a_graph_of_their_own(fitted):
    """Appending a user leaves the training graph as it is (no copy per request): the appended users' rows form a
    graph of their own, and every path reads the same inputs as from one graph holding every row; replacing a
    user joins the two graphs again."""
    rng = np.random.default_rng(5)
    folded = [fold_in(fitted, rng.choice(N_ITEMS, 6, replace=False), rng.integers(1, 6, 6).astype(float))
              for _ in range(3)]
    once = fitted.with_extra_users(folded[:1])
    twice = once.with_extra_users(folded[1:2])
    base, extras = fitted.term("neighbourhood").extras, twice.term("neighbourhood").extras
    assert extras["graph_keys"] is base["graph_keys"] and extras["added_keys"].numel() == 12
    assert set((extras["added_keys"] // N_ITEMS).tolist()) == {N_USERS, N_USERS + 1}
    keys, order = torch.sort(torch.cat([extras["graph_keys"], extras["added_keys"]]), stable=True)
    joined = {k: v for k, v in extras.items() if not k.startswith("added_")}
    joined.update(graph_keys=keys, graph_residuals=torch.cat([extras["graph_residuals"],
                                                              extras["added_residuals"]])[order])
    term = twice.term("neighbourhood").term
    query = np.stack([rng.integers(-1, N_USERS + 2, 400), rng.integers(-1, N_ITEMS, 400)], 1)
    catalogue = np.stack([np.full(N_ITEMS, N_USERS + 1), np.arange(N_ITEMS)], 1)
    for index in (query, catalogue):
        expected = term.pair_rows(torch.as_tensor(index), joined)
        assert expected["near_rated"].value[index[:, 0] >= N_USERS].sum() > 0
        for got in (term.pair_rows(torch.as_tensor(index), extras),
                    term.pair_rows(index, {k: v.numpy() for k, v in extras.items()})):
            for name in ("near_residual", "near_rated"):
                np.testing.assert_array_equal(np.asarray(got[name].value), expected[name].value.numpy())
    # replacing the first appended user: one graph again, the second user's row kept
    replaced = twice.with_replaced_users([N_USERS], folded[2:])
    again = replaced.term("neighbourhood").extras
    assert "added_keys" not in again and bool((again["graph_keys"][1:] >= again["graph_keys"][:-1]).all())
    rows = again["graph_keys"] // N_ITEMS
    assert sorted((again["graph_keys"][rows == N_USERS] % N_ITEMS).tolist()) == sorted(folded[2].answers[0].tolist())
    assert torch.equal(again["graph_keys"][rows == N_USERS + 1], extras["added_keys"][6:])


def test_replaced_users_are_spliced_into_the_sorted_graph(fitted):
    """Replacing users cuts each one's stretch out of the sorted keys and puts the new row there: the same graph as
    removing their keys and sorting every key again (the way it was formed before), for several users at once, a
    user folded in without answers kept, repeated items, and appended users' graph joined."""
    rng = np.random.default_rng(11)
    term = fitted.term("neighbourhood").term
    base = fitted.term("neighbourhood").extras

    def by_sorting(extras, rows, answers):
        keys, residuals = extras["graph_keys"], extras["graph_residuals"]
        if "added_keys" in extras:
            keys, residuals = torch.cat([keys, extras["added_keys"]]), torch.cat([residuals, extras["added_residuals"]])
        gone = torch.isin(keys // N_ITEMS, torch.as_tensor(rows))
        new_keys, new_residuals = [keys[~gone]], [residuals[~gone]]
        for place, given in zip(rows, answers):
            if given is not None:
                k, r = term._user_graph(torch.as_tensor(given[0]), torch.as_tensor(given[1]), extras, int(place))
                new_keys.append(k)
                new_residuals.append(r.to(residuals.dtype))
        keys, order = torch.sort(torch.cat(new_keys), stable=True)
        return keys, torch.cat(new_residuals)[order]

    def answers(k, repeat=False):
        items = rng.choice(N_ITEMS, k, replace=False).astype(np.int64)
        if repeat:
            items[-1] = items[0]
        return items, rng.normal(size=k)

    appended = base | term.extras_with_users(base, [answers(5), answers(4)], None, N_USERS)
    cases = [(base, [3], [answers(6)]), (base, [0, N_USERS - 1, 17], [answers(3), None, answers(7, repeat=True)]),
             (base, [21, 2], [answers(1), answers(9)]), (appended, [N_USERS + 1, 5], [answers(4), answers(2)]),
             (appended, [N_USERS], [None])]
    for extras, rows, given in cases:
        got = term.extras_with_users(extras, given, np.asarray(rows), N_USERS)
        keys, residuals = by_sorting(extras, rows, given)
        assert "added_keys" not in got
        assert torch.equal(got["graph_keys"], keys) and torch.equal(got["graph_residuals"], residuals)


def test_one_pairs_part_in_one_step_is_its_inputs_and_combine(fitted, monkeypatch):
    """The one-pair serving path takes the term's part from one compiled call (``pair_combine`` for known levels,
    ``pair_part`` otherwise; both through ``_pair_moments``): the same as the pair inputs and ``combine`` (the path
    without numba) and as the batched path, for known, appended and unseen users and items."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(6)
    post = fitted.with_extra_users([fold_in(fitted, rng.choice(N_ITEMS, 7, replace=False),
                                            rng.integers(1, 6, 7).astype(float))])
    pairs = [(int(u), int(i)) for u, i in zip(rng.integers(-1, N_USERS + 1, 300), rng.integers(-1, N_ITEMS, 300))]
    calls = []
    original = Neighbourhood._pair_moments

    def counted(self, *args):
        part = original(self, *args)
        calls.append(part is not None)
        return part

    monkeypatch.setattr(Neighbourhood, "_pair_moments", counted)
    one_step = np.array([post.predict_pair(p) for p in pairs])
    assert len(calls) >= len(pairs) and all(calls)
    monkeypatch.setattr(Neighbourhood, "_pair_moments", lambda self, *args: None)
    del post.__dict__["_pair_predictor"]
    by_combine = np.array([post.predict_pair(p) for p in pairs])
    np.testing.assert_allclose(one_step, by_combine, rtol=1e-12, atol=1e-12)
    batched = np.stack(post.predict(np.array(pairs)), 1)
    np.testing.assert_allclose(one_step, batched, rtol=1e-10)
    known = np.array([u >= 0 and i >= 0 for u, i in pairs])
    assert known.sum() > 100 and np.any(np.array(pairs)[:, 0] == N_USERS)


def test_a_users_catalogue_part_in_one_step_is_its_inputs_and_combine(fitted, monkeypatch):
    """Ranking a user's catalogue takes the term's part from one compiled call (``catalogue_part``): the same means
    and variances as the pair inputs and ``combine``, for users read by both of its walks (every item's neighbours,
    and only the items that have the user's few rated items as neighbours), a user appended by fold-in, and the
    means alone."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(8)
    post = fitted.with_extra_users([fold_in(fitted, rng.choice(N_ITEMS, 2, replace=False), np.array([5.0, 1.0]))])
    fitted_term = post.term("neighbourhood")
    start, _ = neighbourhood._inverse_neighbours(fitted_term.extras["neighbours"])
    width = fitted_term.extras["neighbours"].shape[1]
    walks = set()
    for user in (0, 7, N_USERS):
        keys = torch.cat([fitted_term.extras["graph_keys"], fitted_term.extras["added_keys"]])
        rated = torch.unique(keys[keys // N_ITEMS == user] % N_ITEMS).numpy()
        walks.add(int(np.diff(start)[rated].sum()) * 5 < N_ITEMS * width)  # the kernel's choice of walk
        one_step = post.catalogue_moments(user), post.catalogue_moments(user, variance=False)[0]
        with monkeypatch.context() as patch:
            patch.setattr(Neighbourhood, "catalogue_part", lambda self, *args: None)
            by_combine = post.catalogue_moments(user), post.catalogue_moments(user, variance=False)[0]
        for got, expected in zip((*one_step[0], one_step[1]), (*by_combine[0], by_combine[1])):
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert walks == {True, False}
    part = fitted_term.term.catalogue_part(0, {name: neighbourhood.Rows(table.values, None) for name, table
                                               in fitted_term.tables.items()}, fitted_term.extras, True)
    assert part[0].abs().max() > 1e-3 and part[1] is None  # no Laplace variances given: none returned


def test_ask_and_thompson_draws_work_with_the_term(fitted):
    from mogp_surprise.core.elicit import ask
    from mogp_surprise.core.recommend import top_n

    q = ask(fitted, np.array([0, 3]), np.array([4.0, 2.0]), n=3)
    assert len(set(q.items)) == 3 and np.isfinite(q.gain).all()
    res = top_n(fitted, np.array([1, -1]), n=5, strategy="thompson", random_state=0)
    assert res.items.shape == (2, 5)


def test_both_adapters_fit_fold_in_recommend_ask_save_and_load(tmp_path):
    """What a user does with the term switched on, through the adapters."""
    import pandas as pd

    from mogp_surprise import MWGP, MWGPRegressor
    from mogp_surprise.datasets import to_surprise_dataset

    index, y = _ratings(1)
    df = pd.DataFrame({"user": [f"u{u}" for u in index[:, 0]], "item": [f"i{i}" for i in index[:, 1]], "rating": y})
    params = dict(CONFIG)
    algo = MWGP(**params).fit(to_surprise_dataset(df, rating_scale=(1, 5)).build_full_trainset())
    answers = {"i1": 5.0, "i2": 1.0, "i3": 4.0}
    on_the_fly = algo.recommend("newcomer", n=5, ratings=answers)
    assert not set(on_the_fly["item"]) & set(answers) and len(on_the_fly) == 5
    assert len(algo.ask("newcomer", n=3, ratings=answers)) == 3
    algo.fold_in("newcomer", answers)
    folded = algo.predict_dist(["newcomer"] * 4, ["i4", "i5", "i6", "i7"])
    algo.save(tmp_path / "m.pt")
    again = MWGP.load(tmp_path / "m.pt")
    for a, b in zip(again.predict_dist(["newcomer"] * 4, ["i4", "i5", "i6", "i7"]), folded):
        np.testing.assert_array_equal(a, b)
    assert again.predict("u3", "i4").est == algo.predict("u3", "i4").est
    est = MWGPRegressor(**params).fit(df[["user", "item"]], df["rating"])
    X = df[["user", "item"]].iloc[:50]
    for a, b in zip(pickle.loads(pickle.dumps(est)).predict_dist(X), est.predict_dist(X)):
        np.testing.assert_array_equal(a, b)


def test_auto_switches_the_term_on_where_its_similarity_is_affordable():
    """``neighbourhood="auto"``: on for (user, item) data from 50,000 ratings up to ratings x items = 2^32, with
    early stopping (below 200,000 ratings) only where the ratings fill 1/32 of the users x items; off outside and
    for other shapes; ``n_epochs="auto"``: 12 with the term and without early stopping, else 20."""
    from mogp_surprise.core.config import NEIGHBOURHOOD_BUDGET, NEIGHBOURHOOD_MIN
    from mogp_surprise.core.terms import build_terms

    auto = MWGPConfig()
    for n, levels, on, epochs in [(80_000, (943, 1682), True, 20),  # ML-100K: early stopping chooses within 20
                                  (800_167, (6040, 3706), True, 12),  # an ML-1M fold
                                  (10 ** 7, (10 ** 5, 33_333), False, 20),  # 3.3e11: off
                                  (NEIGHBOURHOOD_BUDGET // 1000, (10, 1000), True, 12),
                                  (NEIGHBOURHOOD_BUDGET // 1000 + 1, (10, 1000), False, 20),
                                  (NEIGHBOURHOOD_MIN, (500, 400), True, 20),
                                  (NEIGHBOURHOOD_MIN - 1, (500, 400), False, 20),  # too few ratings
                                  (300_000, (3000, 1), False, 20),  # one item: no neighbours
                                  (300_000, (30, 6, 3), False, 20),  # a context factor
                                  (160_127, (6023, 3428), False, 20),  # a 20 % sample of ML-1M: 0.8 % full
                                  (199_999, (2000, 100), True, 20),  # as full as ML-100K
                                  (200_038, (6038, 3462), True, 12),  # a 25 % sample: no early stopping
                                  (133_000, (38_000, 17_000), False, 20)]:  # a shop's sparse catalogue
        got = auto.for_data(n, levels)
        assert (got.neighbourhood, got.n_epochs) == (on, epochs), (n, levels)
        assert ("neighbourhood" in [t.name for t in build_terms(got, levels)]) == on
    assert MWGPConfig(neighbourhood=True).for_data(10 ** 7, (10 ** 5, 33_333)).neighbourhood  # on at any size
    assert MWGPConfig(neighbourhood=True).for_data(900, (30, 30)).neighbourhood
    assert not MWGPConfig(neighbourhood=False).for_data(800_167, (6040, 3706)).neighbourhood
    assert MWGPConfig(n_epochs=20).for_data(800_167, (6040, 3706)).n_epochs == 20  # a number given is kept
    assert MWGPConfig(early_stopping=False).for_data(80_000, (943, 1682)).n_epochs == 12
    assert MWGPConfig(early_stopping=False).for_data(160_127, (6023, 3428)).neighbourhood  # sparse, no early stopping
    assert "neighbourhood" not in [t.name for t in build_terms(auto, (943, 1682))]  # "auto" not yet resolved: off
    # before it was built in it was switched on by name: that still builds it, once
    named = MWGPConfig(neighbourhood=False, extra_terms=("neighbourhood",))
    assert [t.name for t in build_terms(named, (5, 6))].count("neighbourhood") == 1
    assert named.for_data(800_167, (6040, 3706)).n_epochs == 12
    with pytest.raises(ValueError, match="neighbourhood"):
        MWGPConfig(neighbourhood="yes")
    with pytest.raises(TypeError, match="n_epochs"):
        MWGPConfig(n_epochs="many")


def test_a_fit_builds_the_term_as_the_setting_resolves(data, monkeypatch):
    """The trainer resolves "auto" with the data's size: on from NEIGHBOURHOOD_MIN ratings (lowered here to fit
    this test's 900), off below, and off whatever the size with ``neighbourhood=False``."""
    import mogp_surprise.core.config as config_module

    index, y = data
    small = dict(n_inducing=8, latent_dim=2, mf_rank=2, n_epochs=2, random_state=0, early_stopping=False)
    below = fit_mwgp(index, y, (N_USERS, N_ITEMS), MWGPConfig(**small)).posterior
    monkeypatch.setattr(config_module, "NEIGHBOURHOOD_MIN", len(y))
    on = fit_mwgp(index, y, (N_USERS, N_ITEMS), MWGPConfig(**small)).posterior
    off = fit_mwgp(index, y, (N_USERS, N_ITEMS), MWGPConfig(**small, neighbourhood=False)).posterior
    assert on.term("neighbourhood") is not None
    assert below.term("neighbourhood") is None and off.term("neighbourhood") is None
