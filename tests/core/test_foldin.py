"""Fold-in of new users: the objective against autograd of the training ELBO, the Laplace variances against
``laplace.laplace_variances``, recovery of trained users, cold start, learning from more ratings, persistence
and input checks."""
from __future__ import annotations

import copy
import io
from dataclasses import replace

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, MWGPPosterior, fit_mwgp
from mogp_surprise.core.foldin import FoldedUser, fold_in, fold_in_many, fold_in_objective
from mogp_surprise.core.laplace import laplace_variances
from mogp_surprise.core.objective import elbo
from mogp_surprise.core.recommend import top_n
from mogp_surprise.core.rows import Batch
from mogp_surprise.core.user_objective import FoldInContext
from tests.core._modules import fitted, population, random_module

JITTER = 1e-8
EMB_REG, BIAS_REG, MF_REG = 3.0, 2.0, 5.0
RATING_MEAN, RATING_STD = 3.2, 1.3
LEVELS, R, M = (6, 9), 2, 5
USER, ITEMS = 5, np.array([0, 2, 3, 7, 8])  # the user the exact tests fold in, and their items
INPUT, BIAS, FACTOR, OFFSET = "gp_input.embedding_0", "bias.bias_0", "bilinear.factor_0", "noise_offset.offset_0"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/core/conftest.py


# -- exact checks on a random float64 module --------------------------------------------------------------
def _random_model(heteroscedastic: bool, implicit: bool, use_biases: bool = True, mf_rank: int = 0):
    """A random module whose training index gives USER exactly the items ITEMS, and its posterior."""
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, LEVELS[0] - 1, (40,), generator=gen),
                         torch.randint(0, LEVELS[1], (40,), generator=gen)], 1)
    index = torch.cat([index, torch.stack([torch.full((len(ITEMS),), USER), torch.as_tensor(ITEMS)], 1)])
    mod = random_module(LEVELS, R, M, seed=3, scale=0.6, q_diag=1.0, heteroscedastic=heteroscedastic,
                        implicit=implicit, use_biases=use_biases, mf_rank=mf_rank, embedding_reg=EMB_REG,
                        bias_reg=BIAS_REG, mf_reg=MF_REG)
    mod.set_implicit_graph(index)
    return mod, MWGPPosterior.from_module(mod, RATING_MEAN, RATING_STD, JITTER)


def _user_tables(mod) -> dict[str, torch.nn.Parameter]:
    """The user tables of every term, keyed like a FoldedUser's rows."""
    return {f"{term.name}.{spec.name}": term.table(spec.name) for term in mod.terms for spec in term.user_tables}


def _set_user(mod, rows: dict) -> None:
    with torch.no_grad():
        for key, table in _user_tables(mod).items():
            table[USER] = torch.as_tensor(rows[key], dtype=table.dtype)


def _user_elbo(mod, y: torch.Tensor) -> torch.Tensor:
    """The training ELBO, full batch over exactly USER's ratings (scale N / B = 1), with the priors."""
    index = torch.stack([torch.full((len(ITEMS),), USER), torch.as_tensor(ITEMS)], 1)
    return elbo(mod, Batch(index), y, n_data=len(ITEMS), jitter=JITTER, priors=True)


def _implicit(post, term: str, items) -> np.ndarray:
    """The implicit part |J|^(-1/2) sum_j y_j of a user's row of a term's table (zeros without it)."""
    fitted_term = post.term(term)
    if "implicit_0" not in fitted_term.tables:
        return np.zeros(fitted_term.term.user_tables[0].width)
    rated = np.unique(items)
    return (fitted_term.tables["implicit_0"].values[rated].sum(0) / np.sqrt(len(rated))).numpy()


# (heteroscedastic, implicit, use_biases, mf_rank)
VARIANTS = [(True, True, True, 2), (True, False, True, 0), (False, True, True, 3), (False, False, False, 2)]


@pytest.mark.parametrize("heteroscedastic,implicit,use_biases,mf_rank", VARIANTS)
def test_objective_gradient_and_differences_match_the_training_elbo(heteroscedastic, implicit, use_biases,
                                                                    mf_rank) -> None:
    """At random user rows the gradient of the fold-in objective w.r.t. every user row (a_u, b_u, [mu, log v],
    p_u) is that of objective.elbo w.r.t. the user's rows (autograd), and differences of the two agree (the rest
    of the ELBO is constant in the user's parameters)."""
    mod, post = _random_model(heteroscedastic, implicit, use_biases, mf_rank)
    tables = _user_tables(mod)
    assert set(tables) == {INPUT, *([BIAS] if use_biases else []), *([OFFSET] if heteroscedastic else []),
                           *([FACTOR] if mf_rank else [])}
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(len(ITEMS), generator=gen, dtype=torch.float64)
    ratings = (RATING_MEAN + RATING_STD * y).numpy()
    values = []
    for trial in range(2):
        rows = {key: (torch.randn(t.shape[1:], generator=gen, dtype=torch.float64) * 0.8).requires_grad_(True)
                for key, t in tables.items()}
        obj = fold_in_objective(post, ITEMS, ratings, rows, prior="model", expected_residuals=False)
        ours = torch.autograd.grad(obj, list(rows.values()))
        _set_user(mod, {k: v.detach() for k, v in rows.items()})
        value = _user_elbo(mod, y)
        theirs = [g[USER] for g in torch.autograd.grad(value, list(tables.values()))]
        for key, mine, want in zip(rows, ours, theirs):
            np.testing.assert_allclose(mine.numpy(), want.numpy(), rtol=1e-9, atol=1e-12, err_msg=key)
        if mf_rank:
            assert float(ours[list(rows).index(FACTOR)].abs().max()) > 1e-3  # the factor does enter the objective
        values.append((float(obj.detach()), float(value.detach())))
    assert values[0][0] - values[1][0] == pytest.approx(values[0][1] - values[1][1], rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("heteroscedastic,implicit,use_biases,mf_rank", VARIANTS)
def test_fold_in_reaches_a_stationary_point_with_the_laplace_variances_of_trained_users(
        heteroscedastic, implicit, use_biases, mf_rank) -> None:
    """fold_in maximises the objective (with the plug-in residuals, the ELBO's gradient w.r.t. the user's rows
    vanishes at its result), and its variances equal laplace_variances of a module holding the result as the
    user's parameters."""
    mod, post = _random_model(heteroscedastic, implicit, use_biases, mf_rank)
    y = torch.randn(len(ITEMS), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    user = fold_in(post, ITEMS, (RATING_MEAN + RATING_STD * y).numpy(), tol=1e-10, prior="model",
                   expected_residuals=False)
    assert isinstance(user, FoldedUser) and user.n_ratings == len(ITEMS) and not user.cold
    _set_user(mod, user.raw)
    for key, term in ((INPUT, "gp_input"), (FACTOR, "bilinear")):
        if key in user.rows:  # the effective row is the raw row plus the implicit sum over the rated items
            np.testing.assert_allclose(user.rows[key], user.raw[key] + _implicit(post, term, ITEMS), rtol=1e-12)
    effective = mod.effective_tables()
    np.testing.assert_allclose(effective[("gp_input", "embedding_0")][USER].detach().numpy(), user.rows[INPUT],
                               rtol=1e-12, atol=1e-14)
    grads = torch.autograd.grad(_user_elbo(mod, y), list(_user_tables(mod).values()))
    assert max(float(g[USER].abs().max()) for g in grads) < 1e-6
    start = fold_in_objective(post, ITEMS, (RATING_MEAN + RATING_STD * y).numpy(), {INPUT: torch.zeros(R)},
                              prior="model", expected_residuals=False)
    assert user.objective >= float(start)  # better than the start
    index = torch.stack([torch.full((len(ITEMS),), USER), torch.as_tensor(ITEMS)], 1)
    variances = laplace_variances(mod, index, JITTER)
    assert set(user.variances) == {k for k in (INPUT, BIAS, FACTOR) if k in user.rows}
    for key, value in user.variances.items():
        term, table = key.split(".")
        np.testing.assert_allclose(value, variances[(term, table)][USER].numpy(), rtol=1e-10, err_msg=key)
    # the full Gauss-Newton covariance of those entries: its diagonal is no larger than the diagonal approximation's
    width = sum(w for _, w in user.layout)
    assert user.covariance.shape == (width, width) and [k for k, _ in user.layout] == list(user.variances)
    diagonal = np.concatenate([np.atleast_1d(user.variances[k]) for k, _ in user.layout])
    assert (np.diag(user.covariance) >= diagonal * (1 - 1e-9)).all()
    np.testing.assert_allclose(user.covariance, user.covariance.T, rtol=1e-10, atol=1e-14)
    if heteroscedastic:
        assert user.rows[OFFSET].shape == (2,) and np.array_equal(user.rows[OFFSET], user.raw[OFFSET])
    else:
        assert OFFSET not in user.rows
    if not use_biases:
        assert BIAS not in user.rows


def test_predictions_of_a_folded_user_use_the_posterior_formulas() -> None:
    """An appended user predicts exactly as a trained user with the same rows would, with the Laplace variances
    widened by the calibration factor of an unseen user (checked by writing them into a copy's existing row)."""
    mod, post = _random_model(True, True, mf_rank=2)
    every_pair = torch.stack([torch.arange(6).repeat(9), torch.arange(9).repeat_interleave(6)], 1)
    post = MWGPPosterior.from_module(mod, RATING_MEAN, RATING_STD, JITTER,
                                     laplace=laplace_variances(mod, every_pair, JITTER))
    widen = 1.37  # a calibration factor of unseen users (pattern 1); the others must not enter
    post = MWGPPosterior(replace(post.state, cold_scale=torch.tensor([1.0, widen, 1.9, 2.3], dtype=torch.float64)))
    user = fold_in(post, ITEMS[:3], [1.0, 4.0, 5.0])
    extended = post.with_extra_users([user])
    assert extended.n_levels == (LEVELS[0] + 1, LEVELS[1])
    same = MWGPPosterior.from_state_dict(copy.deepcopy(post.state_dict()))  # (tables share storage)
    for key, row in user.rows.items():
        table = fitted(same, *key.split("."))
        table.values[0] = torch.as_tensor(row)
        if key in user.variances:
            table.laplace_var[0] = torch.as_tensor(user.variances[key]) * widen
    items = np.arange(LEVELS[1])
    for include_noise in (True, False):
        got = extended.predict(np.stack([np.full(9, LEVELS[0]), items], 1), include_noise)
        want = same.predict(np.stack([np.zeros(9, dtype=int), items], 1), include_noise)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # the trained users' predictions are untouched
    old = np.stack([np.repeat(np.arange(6), 9), np.tile(items, 6)], 1)
    np.testing.assert_array_equal(extended.predict(old)[1], post.predict(old)[1])
    # the unseen levels' kernel expectations are shared with the posterior it extends: the same as computed anew
    for (a1, a2), (b1, b2) in zip(extended.psi, MWGPPosterior(extended.state).psi):
        assert torch.equal(a1, b1) and torch.equal(a2, b2)


def _lambda(post, offset_row: np.ndarray, items) -> np.ndarray:
    """E_q[1 / sigma_j^2] of a user with q(s_u) = N(offset_row[0], exp(offset_row[1])) for ``items``."""
    item = fitted(post, "noise_offset", "offset_1").values[items].double().numpy()
    log_noise = np.log(float(post.state.noise_variance)) + offset_row[0] + item[:, 0]
    return np.exp(0.5 * (np.exp(offset_row[1]) + np.exp(item[:, 1])) - log_noise)


def test_expected_residuals_add_the_variance_of_each_ratings_mean_under_the_start_posterior() -> None:
    """The expected residuals' variances J_j Sigma J_j^T equal those from an independent reference: J by central
    differences of the appended user's predictive mean (the posterior's predict, not fold-in's autograd), Sigma the
    Gauss-Newton covariance (population prior precisions + J^T diag(lambda) J) at the start; fold-in with them
    reaches a stationary point of fold_in_objective, which differs from the plug-in objective by exactly
    -1/2 sum_j lambda_j J_j Sigma J_j^T; the user's noise comes out larger than with the plug-in residuals."""
    mod, post = _random_model(True, True, True, 2)
    y = torch.randn(len(ITEMS), generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    ratings = (RATING_MEAN + RATING_STD * y).numpy()
    ctx = FoldInContext(post)
    data = ctx.user_data(ITEMS, y.numpy())
    start = ctx.start(data, None)
    got = ctx.residual_variance(data, start).numpy()
    # the reference: a FoldedUser at the start's rows, perturbed one Laplace entry at a time
    rows = {b.key: (b.of(start) + data.implicit[b.key]).numpy().reshape(-1) for b in ctx.blocks}
    layout = [(b.key, b.width) for b in ctx.laplace_blocks]
    assert [k for k, _ in layout] == [INPUT, BIAS, FACTOR]

    def mean(rows):
        user = FoldedUser(rows={k: (v if v.size > 1 else v.reshape(())) for k, v in rows.items()},
                          raw=rows, variances={k: np.zeros(w) if w > 1 else np.zeros(()) for k, w in layout},
                          n_ratings=len(ITEMS), objective=0.0, n_iter=0)
        return post.with_extra_users([user]).predict(np.stack([np.full(len(ITEMS), LEVELS[0]), ITEMS], 1))[0]

    h, columns, precision = 1e-5, [], []
    for key, width in layout:
        term, table = key.split(".")
        precision.append(1.0 / population(post, term, table)[1].double().numpy().reshape(-1))
        for e in range(width):
            up, down = {k: v.copy() for k, v in rows.items()}, {k: v.copy() for k, v in rows.items()}
            up[key][e] += h
            down[key][e] -= h
            columns.append((mean(up) - mean(down)) / (2 * h) / RATING_STD)
    jac = np.stack(columns, 1)
    lam = _lambda(post, rows[OFFSET], ITEMS)
    sigma = np.linalg.inv(np.diag(np.concatenate(precision)) + (jac * lam[:, None]).T @ jac)
    want = ((jac @ sigma) * jac).sum(1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert want.min() > 1e-3  # (a real correction: each rating's mean is uncertain)
    # fold-in maximises the objective with them, and the objectives differ by exactly their term
    user = fold_in(post, ITEMS, ratings, tol=1e-10)
    raw = {k: torch.as_tensor(v, dtype=torch.float64).requires_grad_(True) for k, v in user.raw.items()}
    value = fold_in_objective(post, ITEMS, ratings, raw)
    grads = torch.autograd.grad(value, list(raw.values()))
    assert max(float(g.abs().max()) for g in grads) < 1e-6
    plug_in = fold_in_objective(post, ITEMS, ratings, raw, expected_residuals=False)
    lam = _lambda(post, user.raw[OFFSET], ITEMS)
    assert float((value - plug_in).detach()) == pytest.approx(-0.5 * float((lam * want).sum()), rel=1e-6)
    plain = fold_in(post, ITEMS, ratings, tol=1e-10, expected_residuals=False)
    assert user.raw[OFFSET][0] > plain.raw[OFFSET][0]


# -- a small fitted model on synthetic low-rank data ------------------------------------------------------
N_TRAIN_USERS, N_NEW_USERS, N_ITEMS = 80, 24, 60


@pytest.fixture(scope="module")
def synthetic():
    """Ratings 3 + b_u + b_i + <U_u, V_i> + N(0, 0.4^2) on half of all (user, item) cells; the last
    N_NEW_USERS users are left out of training."""
    rng = np.random.default_rng(7)
    n_users = N_TRAIN_USERS + N_NEW_USERS
    U, V = rng.normal(size=(n_users, 2)), rng.normal(size=(N_ITEMS, 2))
    b_u, b_i = 0.5 * rng.normal(size=n_users), 0.5 * rng.normal(size=N_ITEMS)
    users, items = np.nonzero(rng.random((n_users, N_ITEMS)) < 0.5)
    order = rng.permutation(len(users))  # each user's ratings in random order
    users, items = users[order], items[order]
    y = 3 + b_u[users] + b_i[items] + (U[users] * V[items]).sum(1) + 0.4 * rng.normal(size=len(users))
    train = users < N_TRAIN_USERS
    # the bilinear term at the data's rank: with ~30 ratings per user, 8 + 2 free dimensions per user leave the
    # re-folded users' optimum looser than the bounds below (RMS difference 0.14 at mf_rank=8)
    config = MWGPConfig(n_inducing=32, latent_dim=2, n_epochs=40, batch_size=256, lr=0.05, random_state=0,
                        device="cpu", dtype="float64", mf_rank=2)
    fit = fit_mwgp(np.stack([users[train], items[train]], 1), y[train], (N_TRAIN_USERS, N_ITEMS), config)
    per_user = [(items[users == u], y[users == u]) for u in range(n_users)]
    return fit.posterior, per_user


def _user_rows(user: int, n_items: int = N_ITEMS) -> np.ndarray:
    return np.stack([np.full(n_items, user), np.arange(n_items)], 1)


@pytest.mark.parametrize("heteroscedastic", [True, False])
def test_whitening_makes_the_start_curvature_the_identity_block_by_block(heteroscedastic, monkeypatch) -> None:
    """Fold-in's whitening P: on the Laplace entries P^T (Gauss-Newton precision) P = I, that precision formed
    independently (the population's prior precisions + J^T diag(lambda) J with J by autograd of the predictive
    mean); on the other entries (the noise offset) P^T H P = I with H the Hessian of the objective by autograd;
    no coupling between the two. Whitened, the curvature of the whole objective is far better conditioned than
    unwhitened, and fold-in with and without whitening reaches the same optimum."""
    from torch.autograd.functional import hessian

    from mogp_surprise.core import foldin
    from mogp_surprise.core.foldin import WHITEN_MAX_RATINGS, _whitening

    mod, post = _random_model(heteroscedastic, True, True, 2)
    y = torch.randn(len(ITEMS), generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ctx = FoldInContext(post)
    data = ctx.user_data(ITEMS, y.numpy())
    start = ctx.start(data, None)
    at_start = ctx.laplace(data, start, with_jacobian=True)
    data = ctx.with_expected_residuals(data, start, at_start)
    whiten = _whitening(ctx, data, start, at_start[1])
    laplace = torch.cat([torch.arange(b.start, b.start + b.width) for b in ctx.laplace_blocks])
    rest = torch.tensor([i for i in range(ctx.dim) if i not in set(laplace.tolist())], dtype=torch.long)
    assert rest.numel() == (2 if heteroscedastic else 0)
    # the Gauss-Newton precision, from the mean's Jacobian by autograd
    prior = torch.cat([1.0 / population(post, *b.key.split("."))[1].double().reshape(-1) for b in ctx.laplace_blocks])
    jac, lam = ctx.mean_jacobian(data, start)
    gn = torch.diag(prior) + (jac * lam[:, None]).T @ jac
    pl = whiten[laplace][:, laplace]
    torch.testing.assert_close(pl.T @ gn @ pl, torch.eye(laplace.numel(), dtype=torch.float64), rtol=0, atol=1e-9)
    full = hessian(lambda theta: -ctx.objective(data, theta), start)
    if rest.numel():
        pr = whiten[rest][:, rest]
        torch.testing.assert_close(pr.T @ full[rest][:, rest] @ pr, torch.eye(2, dtype=torch.float64), rtol=0,
                                   atol=1e-9)
        assert not whiten[laplace][:, rest].any() and not whiten[rest][:, laplace].any()
    assert torch.linalg.cond(whiten.T @ full @ whiten) < torch.linalg.cond(full) / 3
    ratings = (RATING_MEAN + RATING_STD * y).numpy()
    whitened = fold_in(post, ITEMS, ratings, tol=1e-9)
    assert len(ITEMS) <= WHITEN_MAX_RATINGS
    monkeypatch.setattr(foldin, "WHITEN_MAX_RATINGS", 0)  # (no whitening)
    plain = fold_in(post, ITEMS, ratings, tol=1e-9)
    for key in whitened.raw:
        np.testing.assert_allclose(whitened.raw[key], plain.raw[key], rtol=1e-5, atol=1e-7, err_msg=key)
    assert whitened.objective == pytest.approx(plain.objective, rel=1e-10)


@pytest.mark.parametrize("prior", ["population", "model"])
def test_the_noise_rows_closed_form_hessian_is_the_objectives(prior) -> None:
    """The noise offset's Hessian that fold-in's whitening takes in closed form (``log_noise_curvature`` through
    ``user_noise_hessian``) equals the Hessian of -L in that row by autograd, at the start and away from it, with
    and without the expected residuals' variances, under either prior."""
    from torch.autograd.functional import hessian

    _, post = _random_model(True, True, True, 2)
    ctx = FoldInContext(post, prior)
    (block,) = [b for b in ctx.blocks if ctx.state.terms[b.term].term.user_noise]
    fitted = ctx.state.terms[block.term]
    where = torch.arange(block.start, block.start + block.width)
    gen = torch.Generator().manual_seed(11)
    y = torch.randn(len(ITEMS), generator=gen, dtype=torch.float64)
    plain = ctx.user_data(ITEMS, y.numpy())
    start = ctx.start(plain, None)
    expected = ctx.with_expected_residuals(plain, start)
    assert expected.extra_variance is not None and (expected.extra_variance > 0).all()
    for data in (plain, expected):
        for theta in (start, start + 0.5 * torch.randn(ctx.dim, generator=gen, dtype=torch.float64)):
            closed = fitted.term.user_noise_hessian(block.spec, block.of(theta), ctx.log_noise_curvature(data, theta),
                                                    prior, fitted)
            by_autograd = hessian(lambda v: -ctx.objective(data, theta.index_put((where,), v)), theta[where])
            assert by_autograd.abs().max() > 1.0
            torch.testing.assert_close(closed, by_autograd, rtol=1e-10, atol=1e-10)


def test_refolding_trained_users_recovers_their_predictions(synthetic) -> None:
    """Folding in a trained user's own training ratings from the population prior's mean gives predictions
    close to the trained model's for that user (RMS difference over all items < 20% of the cold-start
    predictor's, and < 0.15 rating units on average; measured 0.13 and 16%), and a predictive std within
    10%. Not closer: a few Adam epochs leave the trained users' parameters short of the optimum of their
    part of the ELBO (fold-in's gradient equals the full-batch ELBO's there, and is not small), and fold-in
    goes the rest of the way, e.g. to lower noise offsets; with the bilinear term a user's GP input and
    bilinear factor can trade off, which leaves more room. Fold-in itself finds one optimum: started from
    the trained values (``init_user``) it reaches the same predictions, and only improves the objective."""
    post, per_user = synthetic
    users = range(N_TRAIN_USERS)
    folded = fold_in_many(post, [per_user[u] for u in users])
    extended = post.with_extra_users(folded)
    warm_all = post.with_extra_users(fold_in_many(post, [per_user[u] for u in users], init_users=list(users)))
    starts = [np.sqrt(np.mean((warm_all.predict(_user_rows(N_TRAIN_USERS + u))[0]
                               - extended.predict(_user_rows(N_TRAIN_USERS + u))[0]) ** 2)) for u in users]
    assert np.mean(starts) < 0.005, np.mean(starts)
    cold_mean = post.predict(_user_rows(-1))[0]
    diff, cold, std_ratio = [], [], []
    for u in users:
        mean, var = post.predict(_user_rows(u))
        mean_f, var_f = extended.predict(_user_rows(N_TRAIN_USERS + u))
        diff.append(np.sqrt(np.mean((mean_f - mean) ** 2)))
        cold.append(np.sqrt(np.mean((cold_mean - mean) ** 2)))
        std_ratio.append(np.mean(np.sqrt(var_f / var)))
    assert np.mean(diff) < 0.2 * np.mean(cold)
    assert np.mean(diff) < 0.15
    assert abs(np.mean(std_ratio) - 1) < 0.1
    # from the trained values: the objective can only go up
    ctx = FoldInContext(post)
    for u in range(3):
        items, ratings = per_user[u]
        data = ctx.user_data(items, (ratings - post.rating_mean) / post.rating_std)
        trained = ctx.start(data, u)  # the trained user's raw rows
        for block in ctx.blocks:  # (checked against the posterior's own tables and implicit factors)
            term, table = block.key.split(".")
            implicit = _implicit(post, term, items) if term in ("gp_input", "bilinear") else 0.0
            np.testing.assert_allclose(block.of(trained).numpy(),
                                       fitted(post, term, table).values[u].double().numpy() - implicit, rtol=1e-12)
        # (the objective fold_in maximises: the expected residuals' variances taken at its start)
        start = ctx.objective(ctx.with_expected_residuals(data, trained), trained)
        warm = fold_in(post, items, ratings, init_user=u)
        assert warm.objective >= float(start) - 1e-9
        np.testing.assert_allclose(fold_in(post, items, ratings, init_user=u, max_iter=1).rows[INPUT],
                                   fold_in(post, items, ratings, init_user=u, max_iter=1).rows[INPUT])
    # a known user re-folded in place keeps their index; the other users are untouched
    replaced = post.with_replaced_users([4], [folded[4]])
    np.testing.assert_allclose(replaced.predict(_user_rows(4))[0], extended.predict(_user_rows(N_TRAIN_USERS + 4))[0],
                               rtol=1e-12)
    np.testing.assert_array_equal(replaced.predict(_user_rows(5))[0], post.predict(_user_rows(5))[0])


def test_zero_ratings_give_exactly_the_cold_start_user(synthetic) -> None:
    post, per_user = synthetic
    empty = fold_in(post, np.array([], dtype=int), np.array([]))
    assert empty.cold and empty.n_ratings == 0 and empty.n_iter == 0
    # the population prior's mean and variance, for the GP input and the bilinear factor alike
    np.testing.assert_allclose(empty.rows[INPUT], population(post, "gp_input", "embedding_0")[0].numpy())
    np.testing.assert_allclose(empty.rows[FACTOR], population(post, "bilinear", "factor_0")[0].numpy())
    np.testing.assert_allclose(empty.variances[FACTOR], population(post, "bilinear", "factor_0")[1].numpy())
    some = fold_in(post, *per_user[N_TRAIN_USERS])
    extended = post.with_extra_users([empty, some, empty])
    for include_noise in (True, False):
        want = post.predict(_user_rows(-1), include_noise)
        for row in (N_TRAIN_USERS, N_TRAIN_USERS + 2):
            got = extended.predict(_user_rows(row), include_noise)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        assert not np.array_equal(extended.predict(_user_rows(N_TRAIN_USERS + 1), include_noise)[0], want[0])
    ranked = top_n(extended, np.array([N_TRAIN_USERS, -1, N_TRAIN_USERS + 1]), n=5)
    np.testing.assert_array_equal(ranked.items[0], ranked.items[1])
    np.testing.assert_array_equal(ranked.std[0], ranked.std[1])
    # an extended posterior keeps the cold rows when converted, saved, and extended again
    np.testing.assert_array_equal(extended.to(dtype=torch.float32).predict(_user_rows(N_TRAIN_USERS))[1],
                                  post.to(dtype=torch.float32).predict(_user_rows(-1))[1])
    with torch.no_grad():  # fold-in works under no_grad too
        assert fold_in(post, *per_user[N_TRAIN_USERS]).objective == some.objective
    again = MWGPPosterior.from_state_dict(extended.state_dict()).with_extra_users([some])
    np.testing.assert_array_equal(again.predict(_user_rows(N_TRAIN_USERS))[1], post.predict(_user_rows(-1))[1])


def test_more_ratings_shrink_the_std_and_beat_cold_start_on_new_users(synthetic) -> None:
    """New users (not in training) folded in from their first k ratings, scored on their ratings after the
    15th: the std of the latent rating (noise left out) falls with k (on average over users at every step,
    and for almost every user), the predictive std falls from 1 to 15 ratings, and the RMSE with k = 15 is
    well below cold start's. (The noise part can rise with k: a user's ratings may show them to be noisier
    than the population prior says; measured here, mean std 0.95, 0.79, 0.79, 0.79 for k = 1, 3, 8, 15 while
    the latent std goes 0.65, 0.44, 0.33, 0.28.)"""
    post, per_user = synthetic
    new = [per_user[N_TRAIN_USERS + h] for h in range(N_NEW_USERS)]
    assert min(len(items) for items, _ in new) >= 18
    held_out = [(items[15:], ratings[15:]) for items, ratings in new]
    stds, latent_stds, rmses = [], [], []
    for k in (0, 1, 3, 8, 15):
        folded = fold_in_many(post, [(items[:k], ratings[:k]) for items, ratings in new])
        extended = post.with_extra_users(folded)
        errs, std, latent = [], [], []
        for h, (items, ratings) in enumerate(held_out):
            index = np.stack([np.full(len(items), N_TRAIN_USERS + h), items], 1)
            mean, var = extended.predict(index)
            errs.append((mean - ratings) ** 2)
            std.append(np.sqrt(var).mean())
            latent.append(np.sqrt(extended.predict(index, include_noise=False)[1]).mean())
        stds.append(np.array(std))
        latent_stds.append(np.array(latent))
        rmses.append(float(np.sqrt(np.mean(np.concatenate(errs)))))
    mean_latent = [s.mean() for s in latent_stds]
    assert all(later < earlier for earlier, later in zip(mean_latent, mean_latent[1:])), mean_latent
    assert stds[-1].mean() < 0.9 * stds[1].mean(), [s.mean() for s in stds]
    assert np.mean(latent_stds[-1] < latent_stds[1]) > 0.9  # almost every user individually
    assert np.mean(latent_stds[-1] < latent_stds[2]) > 0.9
    assert rmses[-1] < 0.8 * rmses[0], rmses  # cold start = k = 0
    assert rmses[-1] < rmses[2] < rmses[0], rmses
    # ranking works on the extended posterior, excluding what the user rated
    ranked = top_n(extended, np.arange(N_TRAIN_USERS, N_TRAIN_USERS + 3), n=4,
                   exclude=[items[:15] for items, _ in new[:3]])
    assert not any(set(ranked.items[h]) & set(new[h][0][:15].tolist()) for h in range(3))


# -- persistence -------------------------------------------------------------------------------------------
def test_state_round_trip_keeps_what_fold_in_needs_and_old_states_still_load(synthetic) -> None:
    post, per_user = synthetic
    items, ratings = per_user[N_TRAIN_USERS + 1]
    want = fold_in(post, items, ratings)
    buffer = io.BytesIO()  # as the adapters save: torch.save of the state, loaded with weights_only=True
    torch.save(post.state_dict(), buffer)
    buffer.seek(0)
    loaded = MWGPPosterior.from_state_dict(torch.load(buffer, weights_only=True))
    got = fold_in(loaded, items, ratings)
    for key in want.rows:
        np.testing.assert_array_equal(got.rows[key], want.rows[key])
    for key in want.variances:
        np.testing.assert_array_equal(got.variances[key], want.variances[key])
    assert got.objective == want.objective
    # float32 and back: fold-in still runs (in float64) and agrees to float32 round-off
    single = fold_in(post.to(dtype=torch.float32), items, ratings)
    np.testing.assert_allclose(single.rows[INPUT], want.rows[INPUT], rtol=1e-4, atol=1e-5)
    # (states of older formats, and those written before fold-in existed: test_migrations.py)


def test_population_prior_is_on_the_effective_bilinear_factor() -> None:
    """With the population prior, the objective differs from the model-prior objective (the training ELBO) by
    exactly the two sets of priors: N(emb_mean, emb_var) on x_u = a_u + implicit, N(bias_mean, bias_var) on b_u
    and N(mf_mean, mf_var) on p~_u = p_u + implicit (population) against N(0, 1/reg) on a_u, b_u, p_u (model);
    the likelihood cancels in the difference of two parameter points. Homoscedastic, so no q(s) terms."""
    mod, post = _random_model(False, True, True, mf_rank=2)
    y = torch.randn(len(ITEMS), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    ratings = (RATING_MEAN + RATING_STD * y).numpy()
    implicit = torch.as_tensor(_implicit(post, "gp_input", ITEMS))
    implicit_mf = torch.as_tensor(_implicit(post, "bilinear", ITEMS))
    (x_mean, x_var), (b_mean, b_var), (p_mean, p_var) = (
        population(post, term, name) for term, name in (("gp_input", "embedding_0"), ("bias", "bias_0"),
                                                        ("bilinear", "factor_0")))
    gen = torch.Generator().manual_seed(5)

    def priors(a, b, p):
        x, pt = a + implicit, p + implicit_mf
        pop = -0.5 * (((x - x_mean) ** 2 / x_var).sum() + (b - b_mean) ** 2 / b_var + ((pt - p_mean) ** 2 / p_var).sum())
        model = -0.5 * (EMB_REG * (a * a).sum() + BIAS_REG * b * b + MF_REG * (p * p).sum())
        return float(pop - model)

    points = [(torch.randn(R, generator=gen, dtype=torch.float64), torch.randn((), generator=gen, dtype=torch.float64),
               torch.randn(2, generator=gen, dtype=torch.float64)) for _ in range(2)]
    obj = {prior: [float(fold_in_objective(post, ITEMS, ratings, {INPUT: a, BIAS: b, FACTOR: p}, prior=prior))
                   for a, b, p in points] for prior in ("population", "model")}
    got = (obj["population"][0] - obj["model"][0]) - (obj["population"][1] - obj["model"][1])
    assert got == pytest.approx(priors(*points[0]) - priors(*points[1]), rel=1e-9)


# -- bad input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("items,ratings,needle", [
    ([0, 9], [1.0, 2.0], r"item indices must lie in \[0, 9\)"),
    ([-1, 2], [1.0, 2.0], r"item indices must lie in \[0, 9\)"),
    ([1, 2, 1], [1.0, 2.0, 3.0], r"repeats item\(s\) \[1\]"),
    ([1, 2], [1.0, np.nan], "ratings must be finite; 1 are NaN/inf"),
    ([1, 2], [np.inf, 1.0], "ratings must be finite"),
    ([1, 2, 3], [1.0, 2.0], "same length, got 3 and 2"),
    ([[1, 2]], [[1.0, 2.0]], "1-d array of item indices"),
    ([1.0, 2.0], [1.0, 2.0], "integer item indices"),
    ([1, 2], ["a", "b"], "real numbers"),
])
def test_bad_ratings_are_refused_with_a_clear_message(items, ratings, needle) -> None:
    _, post = _random_model(True, True)
    with pytest.raises(ValueError, match=needle):
        fold_in(post, np.asarray(items), np.asarray(ratings))


def test_bad_arguments_are_refused_with_a_clear_message() -> None:
    _, post = _random_model(True, True)
    with pytest.raises(ValueError, match=r"`init_user` must be None or a user index in \[0, 6\)"):
        fold_in(post, ITEMS, np.ones(len(ITEMS)), init_user=6)
    with pytest.raises(ValueError, match="`init_user`"):
        fold_in(post, ITEMS, np.ones(len(ITEMS)), init_user=True)
    with pytest.raises(ValueError, match="`max_iter` must be an int >= 1"):
        fold_in(post, ITEMS, np.ones(len(ITEMS)), max_iter=0)
    with pytest.raises(ValueError, match="`tol` must be a finite number > 0"):
        fold_in(post, ITEMS, np.ones(len(ITEMS)), tol=-1.0)
    with pytest.raises(ValueError, match=r"user 1: .*repeats item"):
        fold_in_many(post, [(ITEMS, np.ones(5)), ([1, 1], [2.0, 3.0])])
    with pytest.raises(ValueError, match="one entry per user"):
        fold_in_many(post, [(ITEMS, np.ones(5))], init_users=[0, 1])
    with pytest.raises(ValueError, match="an \\(items, ratings\\) pair"):
        fold_in_many(post, [ITEMS])
    with pytest.raises(ValueError, match="must be an MWGPPosterior"):
        fold_in(post.state_dict(), ITEMS, np.ones(5))
    with pytest.raises(ValueError, match="not a FoldedUser"):
        post.with_extra_users([{"input": np.zeros(R)}])
    with pytest.raises(ValueError, match=r"`rows` must lie in \[0, 6\)"):
        post.with_replaced_users([6], [fold_in(post, ITEMS, np.ones(5))])
    user = fold_in(post, ITEMS, np.ones(5))
    with pytest.raises(ValueError, match=r"no row of shape \(2,\) for 'gp_input.embedding_0'"):
        post.with_extra_users([FoldedUser(**{**user.__dict__, "rows": {**user.rows, INPUT: np.zeros(3)}})])
    with pytest.raises(ValueError, match="names .'no.such'., which this model does not have"):
        fold_in_objective(post, ITEMS, np.ones(5), {"no.such": 0.0})
    with pytest.raises(ValueError, match="must have 2 entries, got 3"):
        fold_in_objective(post, ITEMS, np.ones(5), {INPUT: np.zeros(3)})


def test_models_with_context_factors_are_refused() -> None:
    mod = random_module((4, 5, 3), R, M, seed=0, heteroscedastic=True)
    post = MWGPPosterior.from_module(mod, 0.0, 1.0, JITTER)
    with pytest.raises(ValueError, match="has 3 factors \\(context factors are not supported\\)"):
        fold_in(post, [0, 1], [1.0, 2.0])


def test_a_user_folded_in_with_another_model_is_refused() -> None:
    """Rows of the same shapes from another fit (another seed) predicted without a word; a copy of the same model
    in another dtype takes the user."""
    rng = np.random.default_rng(0)
    index = np.stack([rng.integers(0, 30, 600), rng.integers(0, 25, 600)], 1)
    ratings = rng.integers(1, 6, 600).astype(float)
    one, other = (fit_mwgp(index, ratings, (30, 25), MWGPConfig(n_epochs=2, n_inducing=16, random_state=seed,
                                                                device="cpu")).posterior for seed in (0, 1))
    user = fold_in(one, np.array([0, 1, 2]), np.array([5.0, 4.0, 1.0]))
    with pytest.raises(ValueError, match=r"`users\[0\]` was folded in with another model \(its GP differs\)"):
        other.with_extra_users([user])
    with pytest.raises(ValueError, match="was folded in with another model"):
        other.with_replaced_users([3], [user])
    for same in (one, one.to(dtype="float64")):
        assert same.with_extra_users([user]).n_levels[0] == 31
