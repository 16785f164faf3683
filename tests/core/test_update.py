"""A known user's Bayesian update by new ratings (core.update): its objective against the training ELBO of the new
ratings under the user's own posterior, its Laplace variances against laplace.laplace_variances, no new rating
leaving the user as fitted, the direction and size of a move, and its refusals."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPPosterior
from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.laplace import laplace_variances
from mogp_surprise.core.objective import elbo
from mogp_surprise.core.rows import Batch
from mogp_surprise.core.terms.noise_offset import offset_kl
from mogp_surprise.core.update import updatable, update_user
from mogp_surprise.core.user_objective import FoldInContext
from tests.core._modules import random_module

JITTER = 1e-8
EMB_REG, BIAS_REG, MF_REG = 3.0, 2.0, 5.0
RATING_MEAN, RATING_STD = 3.2, 1.3
LEVELS, R, M = (6, 9), 2, 5
USER, RATED, NEW = 5, np.array([0, 2, 3, 7, 8]), np.array([1, 4, 6])
OFFSET = "noise_offset.offset_0"
# (heteroscedastic, implicit, use_biases, mf_rank)
VARIANTS = [(True, True, True, 2), (True, False, True, 0), (False, True, True, 3), (False, False, False, 2)]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/core/conftest.py


def _pairs(user: int, items: np.ndarray) -> torch.Tensor:
    return torch.stack([torch.full((len(items),), user), torch.as_tensor(items)], 1)


def _model(heteroscedastic: bool, implicit: bool, use_biases: bool, mf_rank: int):
    """A random float64 module whose training index gives USER exactly the items RATED, and its posterior with the
    trained users' Laplace variances (the posterior an update starts from)."""
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, LEVELS[0] - 1, (40,), generator=gen),
                         torch.randint(0, LEVELS[1], (40,), generator=gen)], 1)
    index = torch.cat([index, _pairs(USER, RATED)])
    mod = random_module(LEVELS, R, M, seed=3, scale=0.6, q_diag=1.0, heteroscedastic=heteroscedastic,
                        implicit=implicit, use_biases=use_biases, mf_rank=mf_rank, embedding_reg=EMB_REG,
                        bias_reg=BIAS_REG, mf_reg=MF_REG)
    mod.set_implicit_graph(index)
    post = MWGPPosterior.from_module(mod, RATING_MEAN, RATING_STD, JITTER,
                                     laplace=laplace_variances(mod, index, JITTER))
    return mod, post, index


def _user_tables(mod) -> dict[str, torch.nn.Parameter]:
    return {f"{term.name}.{spec.name}": term.table(spec.name) for term in mod.terms for spec in term.user_tables}


def _shift(post, key: str) -> torch.Tensor:
    """What the new items add to the user's implicit sum of a table (zeros without one): the module keeps its graph
    (the items' rows as fitted, as an update holds them) and gets this added to the user's raw row instead."""
    term = post.term(key.split(".")[0])
    width = term.term.specs[key.split(".")[1]].width
    if "implicit_0" not in term.tables or key == OFFSET:
        return torch.zeros(max(width, 1), dtype=torch.float64).reshape(-1 if width else ())

    def implicit(items: np.ndarray) -> torch.Tensor:
        return term.tables["implicit_0"].values[np.unique(items)].sum(0) / np.sqrt(len(np.unique(items)))
    return implicit(np.concatenate([RATED, NEW])) - implicit(RATED)


@pytest.mark.parametrize("heteroscedastic,implicit,use_biases,mf_rank", VARIANTS)
def test_the_update_objective_is_the_elbo_of_the_new_ratings_under_the_users_own_posterior(
        heteroscedastic, implicit, use_biases, mf_rank) -> None:
    """At random raw rows the gradient of the update's objective (plug-in residuals) is that of the training ELBO of
    the new ratings alone, the user's implicit sums over the rated and the new items, with the model's priors of the
    user's rows replaced by their posterior as fitted: N(raw row as fitted, its Laplace variance) per entry, and for
    the noise offset KL(q || q as fitted) in place of KL(q || N(0, tau))."""
    mod, post, index = _model(heteroscedastic, implicit, use_biases, mf_rank)
    tables = _user_tables(mod)
    fitted_raw = {key: t[USER].detach().clone() for key, t in tables.items()}  # the module holds raw rows
    gen = torch.Generator().manual_seed(1)
    y_rated = torch.randn(len(RATED), generator=gen, dtype=torch.float64)
    y_new = torch.randn(len(NEW), generator=gen, dtype=torch.float64)
    ctx = FoldInContext(post)
    data = ctx.user_data(NEW, y_new.numpy(), update=(USER, RATED, y_rated.numpy()))
    variances = {f"{t.name}.{name}": table.laplace_var[USER] for t in post.state.terms
                 for name, table in t.tables.items() if table.laplace_var is not None and name.endswith("_0")}
    values = []
    for trial in range(2):
        theta = (torch.randn(ctx.dim, generator=gen, dtype=torch.float64) * 0.7).requires_grad_(True)
        ours = ctx.objective(data, theta)
        (grad,) = torch.autograd.grad(ours, theta)
        with torch.no_grad():
            for block in ctx.blocks:  # the new items join the user's implicit sums
                tables[block.key][USER] = block.of(theta.detach()) + _shift(post, block.key)
        theirs = elbo(mod, Batch(_pairs(USER, NEW)), y_new, n_data=len(NEW), jitter=JITTER)
        for key, table in tables.items():
            row = table[USER] - _shift(post, key)  # the raw row
            if key == OFFSET:  # the model's KL of the user's offset out, the KL to the user's q as fitted in
                prior_logvar = mod.term("noise_offset").prior_logvar[0]
                theirs = theirs + offset_kl(row[:1], row[1:], prior_logvar) - offset_kl(
                    row[:1], row[1:], fitted_raw[key][1], fitted_raw[key][0])
            else:
                theirs = theirs - 0.5 * ((row - fitted_raw[key]) ** 2 / variances[key]).sum()
        expected = torch.autograd.grad(theirs, list(tables.values()))
        for block, want in zip(ctx.blocks, [expected[list(tables).index(b.key)] for b in ctx.blocks]):
            np.testing.assert_allclose(block.of(grad).numpy(), want[USER].numpy(), rtol=1e-9, atol=1e-12,
                                       err_msg=block.key)
        values.append((float(ours.detach()), float(theirs.detach())))
    assert values[0][0] - values[1][0] == pytest.approx(values[0][1] - values[1][1], rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("heteroscedastic,implicit,use_biases,mf_rank", VARIANTS[:2])
def test_the_update_reaches_the_optimum_with_the_laplace_variances_of_its_posterior(
        heteroscedastic, implicit, use_biases, mf_rank) -> None:
    """With the plug-in residuals the update's gradient vanishes at its result, and its variances are those of
    laplace_variances for the new ratings with the model's prior precision swapped for 1 / the fitted variance."""
    mod, post, index = _model(heteroscedastic, implicit, use_biases, mf_rank)
    y_rated = np.linspace(-1, 1, len(RATED))
    y_new = np.array([1.4, -0.8, 0.5])
    user = update_user(post, USER, NEW, RATING_MEAN + RATING_STD * y_new, RATED, RATING_MEAN + RATING_STD * y_rated,
                       tol=1e-10, expected_residuals=False)
    assert user.updated and user.n_ratings == len(RATED) + len(NEW) and not user.cold
    ctx = FoldInContext(post)
    data = ctx.user_data(NEW, y_new, update=(USER, RATED, y_rated))
    theta = torch.cat([torch.as_tensor(np.atleast_1d(user.raw[b.key]), dtype=torch.float64).reshape(-1)
                       for b in ctx.blocks]).requires_grad_(True)
    (grad,) = torch.autograd.grad(ctx.objective(data, theta), theta)
    assert float(grad.abs().max()) < 1e-6
    with torch.no_grad():
        for key, table in _user_tables(mod).items():
            table[USER] = torch.as_tensor(user.raw[key]) + _shift(post, key)
    new_only = laplace_variances(mod, _pairs(USER, NEW), JITTER)
    prior = {"gp_input.embedding_0": EMB_REG, "bias.bias_0": BIAS_REG, "bilinear.factor_0": MF_REG}
    for key, value in user.variances.items():
        term, table = key.split(".")
        fitted_var = post.term(term).tables[table].laplace_var[USER].numpy()
        want = 1.0 / (1.0 / new_only[(term, table)][USER].numpy() - prior[key] + 1.0 / fitted_var)
        np.testing.assert_allclose(value, want, rtol=1e-8, err_msg=key)
        assert np.all(value < fitted_var)  # new ratings narrow the posterior


def test_no_new_ratings_leave_the_user_as_fitted_and_new_ones_move_them_by_what_they_teach() -> None:
    mod, post, _ = _model(True, True, True, 2)
    y_rated = RATING_MEAN + RATING_STD * np.linspace(-1, 1, len(RATED))
    same = update_user(post, USER, np.array([], dtype=int), np.array([]), RATED, y_rated)
    assert same.n_iter == 0 and same.n_ratings == len(RATED)
    for t in post.state.terms:
        for spec in t.term.user_tables:
            key, table = f"{t.name}.{spec.name}", t.tables[spec.name]
            np.testing.assert_allclose(same.rows[key], table.values[USER].numpy(), rtol=1e-12, atol=1e-14)
            if table.laplace_var is not None:
                np.testing.assert_allclose(same.variances[key], table.laplace_var[USER].numpy(), rtol=1e-12)
    pairs = np.stack([np.full(LEVELS[1], USER), np.arange(LEVELS[1])], 1)
    before = post.predict(pairs)
    after = post.with_replaced_users([USER], [same]).predict(pairs)
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    # one rating far above its prediction raises it (against a rating at its prediction: the new item also joins the
    # implicit sums), and a tighter posterior as fitted moves less
    item = NEW[:1]
    tight_post = MWGPPosterior(replace(post.state, terms=[
        replace(t, tables={name: replace(table, laplace_var=None if table.laplace_var is None else
                                         table.laplace_var * 0.01) for name, table in t.tables.items()})
        for t in post.state.terms]))
    rises = []
    for p in (post, tight_post):
        def predicted(rating: float) -> float:
            folded = update_user(p, USER, item, np.array([rating]), RATED, y_rated)
            return float(p.with_replaced_users([USER], [folded]).predict(pairs)[0][item[0]])
        rises.append(predicted(before[0][item[0]] + 3 * RATING_STD) - predicted(before[0][item[0]]))
    assert rises[0] > 0.05 and 0 < rises[1] < 0.2 * rises[0]
    # a new user folded in and stored is updated from their stored posterior in turn
    stored = post.with_extra_users([fold_in(post, RATED, y_rated)])
    row = post.n_levels[0]
    assert updatable(stored, row) and not updatable(post.with_extra_users([fold_in(post, [], [])]), row)
    again = update_user(stored, row, np.array([], dtype=int), np.array([]), RATED, y_rated)
    np.testing.assert_allclose(again.rows["gp_input.embedding_0"],
                               stored.term("gp_input").tables["embedding_0"].values[row].numpy(), rtol=1e-12)


def test_update_refusals() -> None:
    _, post, _ = _model(True, False, True, 0)
    rated = RATING_MEAN + np.zeros(len(RATED))
    with pytest.raises(ValueError, match=r"items \[2\] are rated already: a changed rating replaces the old one"):
        update_user(post, USER, np.array([2, 4]), np.array([3.0, 4.0]), RATED, rated)
    with pytest.raises(ValueError, match=r"`user` must be a user index in \[0, 6\), got 6"):
        update_user(post, 6, NEW, np.ones(3), RATED, rated)
    with pytest.raises(ValueError, match="`user` must be a user index"):
        update_user(post, True, NEW, np.ones(3), RATED, rated)
    bare = MWGPPosterior(replace(post.state, terms=[
        replace(t, tables={name: replace(table, laplace_var=None) for name, table in t.tables.items()})
        for t in post.state.terms]))
    assert updatable(post, USER) and not updatable(bare, USER)
    with pytest.raises(ValueError, match="user 5 has no posterior to update"):
        update_user(bare, USER, NEW, np.ones(3), RATED, rated)
    with pytest.raises(ValueError, match=r"rated: `ratings` must be real numbers"):
        update_user(post, USER, NEW, np.ones(3), RATED, np.array(["a"] * len(RATED)))
