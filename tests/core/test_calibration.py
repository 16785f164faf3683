"""Cold-start calibration (mogp_surprise.core.calibration.cold_start_scales).

The factors are checked against the formula written out with numpy from the posterior's public
``predict`` (rating units: every term of the ratio scales by rating_std^2 alike), their use in the
predictions of every pattern, persistence, and the fit that sets them.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mogp_surprise.core.calibration as calibration
import mogp_surprise.core.validation as validation
from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core.calibration import cold_start_scales
from mogp_surprise.core.rows import distinct_index_rows as _distinct_rows
from mogp_surprise.core.posterior import MWGPPosterior
from tests.core.test_posterior import N_ITEMS, N_USERS, RATING_MEAN, RATING_STD, _het_module, _post


def _training_data(seed: int, noise: float) -> tuple[np.ndarray, np.ndarray, list[torch.Tensor]]:
    """Tuples with repeats (users and items rated several times), ratings, and bias variances per level."""
    rng = np.random.default_rng(seed)
    index = np.stack([rng.integers(0, N_USERS, 60), rng.integers(0, N_ITEMS, 60)], 1)
    ratings = RATING_MEAN + RATING_STD * rng.normal(0.0, noise, 60)
    bias_var = [torch.as_tensor(rng.uniform(0.0, 0.3, n)) for n in (N_USERS, N_ITEMS)]
    return index, ratings, bias_var


def _laplace(bias_var: list[torch.Tensor]) -> dict:
    """The Laplace variances as the fit gives them: only the biases' enter the leverage."""
    return {("bias", f"bias_{f}"): v for f, v in enumerate(bias_var)}


def _reference(post: MWGPPosterior, index: np.ndarray, ratings: np.ndarray, bias_var) -> list[float]:
    """c = (sum (e / (1 - h))^2 - sum noise) / sum Var f per pattern, from ``predict`` alone; below 1 its upper
    bound c + t_95(G - 1) sqrt(G / (G - 1) sum over the G levels of the unseen factor of (sum of their d_n)^2) /
    sum Var f with d_n = (e_n / (1 - h_n))^2 - noise_n - c Var f_n, or the likelihood's optimum where that is larger,
    at most 1 (1 below MIN_LEVELS levels)."""
    known_noise = post.noise_var_at(torch.as_tensor(index)).numpy()  # standardised
    out = [1.0]
    for code in (1, 2, 3):
        pattern = index.copy()
        h = np.zeros(len(index))
        for f in (0, 1):
            if code >> f & 1:
                pattern[:, f] = -1
            else:
                h += bias_var[f].numpy()[index[:, f]] / known_noise
        mean, var_y = post.predict(pattern)
        _, var_f = post.predict(pattern, include_noise=False)
        resid = (ratings - mean) / (1.0 - np.minimum(h, calibration.MAX_LEVERAGE))
        excess = resid ** 2 - (var_y - var_f)
        c = excess.sum() / var_f.sum()
        if c < 1:
            f = [f for f in (0, 1) if code >> f & 1]
            f = min(f, key=lambda f: (N_USERS, N_ITEMS)[f])
            d = excess - c * var_f
            per_level = np.array([d[index[:, f] == level].sum() for level in range((N_USERS, N_ITEMS)[f])])
            g = len(np.unique(index[:, f]))
            bound = c + calibration.t_quantile_95(g - 1) * np.sqrt((per_level ** 2).sum() * g / (g - 1)) / var_f.sum()
            c = 1.0 if g < calibration.MIN_LEVELS else min(1.0, max(bound, _likelihood_optimum(
                resid ** 2, var_y - var_f, var_f)))
        out.append(c)
    return out


def _likelihood_optimum(squared, noise, var) -> float:
    """argmax over c in [1/32, 32] of sum log N(e | 0, noise + c var), by scipy's bounded search on log c."""
    from scipy.optimize import minimize_scalar

    def nll(log_c):
        total = noise + np.exp(log_c) * var
        return float((np.log(total) + squared / total).sum())

    bound = np.log(validation.SCALE_BOUND)
    return float(np.exp(minimize_scalar(nll, bounds=(-bound, bound), method="bounded",
                                        options={"xatol": 1e-12}).x))


@pytest.mark.parametrize("noise", [3.0, 0.05], ids=["widened", "narrowest"])
def test_scales_follow_the_written_out_leave_one_out_ratio(noise, monkeypatch) -> None:
    monkeypatch.setattr(calibration, "MIN_LEVELS", 2)  # (the toy posterior has 6 users and 5 items)
    post = _post(_het_module())
    index, ratings, bias_var = _training_data(0, noise)
    scales = cold_start_scales(post, index, ratings, _laplace(bias_var)).numpy()
    want = _reference(post, index, ratings, bias_var)
    np.testing.assert_allclose(scales, want, rtol=1e-6)  # (scipy's bounded search stops within 1e-7)
    assert scales[0] == 1.0
    if noise > 1:
        assert (scales[1:] > 1.5).all()  # ratings far from every population mean: wider
    else:  # ratings closer to both levels' population than its noise alone allows: the likelihood's smallest factor
        assert scales[3] == pytest.approx(1 / validation.SCALE_BOUND)


NO_BIAS_VAR = [torch.zeros(N_USERS, dtype=torch.float64), torch.zeros(N_ITEMS, dtype=torch.float64)]


def _unseen_items(seed: int):
    """The toy posterior, 600 training tuples, and their means, noise and latent variances with the item unseen."""
    post = _post(_het_module())
    rng = np.random.default_rng(seed)
    index = np.stack([rng.integers(0, N_USERS, 600), rng.integers(0, N_ITEMS, 600)], 1)
    pattern = index.copy()
    pattern[:, 1] = -1
    mean, var_y = post.predict(pattern)
    _, var_f = post.predict(pattern, include_noise=False)
    return post, index, mean, var_y - var_f, var_f, rng


@pytest.mark.parametrize("share", [0.3, 0.6, 0.3], ids=["narrowed", "bound-above-1", "too-few-levels"])
def test_a_factor_below_one_is_its_upper_bound(share, monkeypatch, request) -> None:
    """Ratings of unseen items drawn with share x the pattern's latent variance (plus its noise): the factor is
    the ratio's one-sided upper 95 % bound over the items as clusters, so above the estimate, and 1 at most; with
    fewer items than MIN_LEVELS (the toy posterior's 5 against 10) it stays 1."""
    few = request.node.callspec.id == "too-few-levels"
    if not few:
        monkeypatch.setattr(calibration, "MIN_LEVELS", 2)
    post, index, mean, noise, var_f, rng = _unseen_items(4)
    ratings = mean + rng.normal(size=600) * np.sqrt(noise + share * var_f)
    scales = cold_start_scales(post, index, ratings, _laplace(NO_BIAS_VAR)).numpy()
    np.testing.assert_allclose(scales, _reference(post, index, ratings, NO_BIAS_VAR), rtol=1e-10)
    estimate = ((ratings - mean) ** 2 - noise).sum() / var_f.sum()
    if share < 0.5 and not few:
        assert estimate < scales[2] < 1.0
    else:
        assert estimate < 1.0 and scales[2] == 1.0


def test_ratings_whose_noise_is_overestimated_do_not_narrow_the_others(monkeypatch) -> None:
    """Half the users' ratings err by half their predicted noise (over-estimated), the rest by their noise plus
    0.8 x the latent variance: the moment ratio, every rating weighed alike, comes out below 0, but the factor is
    the likelihood's optimum of noise + c var, which weighs each rating by its precision (one user with two thirds
    of the ratings: his unseen items' intervals covered 0.64 with the moment bound, 0.98 with it)."""
    monkeypatch.setattr(calibration, "MIN_LEVELS", 2)
    post, index, mean, noise, var_f, rng = _unseen_items(4)
    loud = np.isin(index[:, 0], [0, 3, 5])  # the users with the largest noise (17-22 against 7-14)
    ratings = mean + rng.normal(size=600) * np.where(loud, np.sqrt(0.5 * noise), np.sqrt(noise + 0.8 * var_f))
    scales = cold_start_scales(post, index, ratings, _laplace(NO_BIAS_VAR)).numpy()
    np.testing.assert_allclose(scales, _reference(post, index, ratings, NO_BIAS_VAR), rtol=1e-6)
    assert ((ratings - mean) ** 2 - noise).sum() < 0
    assert scales[2] == pytest.approx(_likelihood_optimum((ratings - mean) ** 2, noise, var_f), rel=1e-6)
    assert 0.3 < scales[2] < 1.0


def test_the_t_quantile_matches_scipy_from_nine_degrees_of_freedom() -> None:
    from scipy import stats

    for dof in (9, 10, 30, 100, 10 ** 4):
        assert calibration.t_quantile_95(dof) == pytest.approx(stats.t.ppf(0.95, dof), abs=1e-4)


def test_a_calibrated_posterior_scales_the_latent_variance_of_unseen_patterns_only() -> None:
    post = _post(_het_module())
    index, ratings, bias_var = _training_data(1, 3.0)
    cal = post.with_cold_start_calibration(index, ratings, _laplace(bias_var))
    scales = cal.cold_scale.numpy()
    pairs = np.array([[0, 0], [3, 4], [-1, 2], [-1, 0], [2, -1], [-1, -1]])
    codes = (pairs[:, 0] < 0) * 1 + (pairs[:, 1] < 0) * 2
    m0, f0 = post.predict(pairs, include_noise=False)
    m1, f1 = cal.predict(pairs, include_noise=False)
    np.testing.assert_array_equal(m1, m0)  # means untouched
    np.testing.assert_allclose(f1, f0 * scales[codes], rtol=1e-12)
    _, y0 = post.predict(pairs)
    _, y1 = cal.predict(pairs)
    np.testing.assert_allclose(y1 - f1, y0 - f0, rtol=1e-12)  # the noise part is unchanged
    # a calibration of an already calibrated posterior divides its own factors out
    again = cal.with_cold_start_calibration(index, ratings, _laplace(bias_var))
    np.testing.assert_allclose(again.cold_scale.numpy(), scales, rtol=1e-10)


def test_scales_survive_conversion_saving_and_folded_users() -> None:
    """(A state saved before the calibration existed loads uncalibrated: ``test_migrations.py``.)"""
    post = _post(_het_module())
    index, ratings, bias_var = _training_data(2, 3.0)
    cal = post.with_cold_start_calibration(index, ratings, _laplace(bias_var))
    assert (cal.cold_scale > 1).any()
    from mogp_surprise.core.foldin import fold_in

    folded = cal.with_extra_users([fold_in(cal, [1], [2.0])])
    for other in (MWGPPosterior.from_state_dict(cal.state_dict()), cal.to(dtype=torch.float32), folded):
        np.testing.assert_allclose(other.cold_scale.double().numpy(), cal.cold_scale.numpy(), rtol=1e-6)


def test_many_rows_are_read_evenly_spaced(monkeypatch) -> None:
    post = _post(_het_module())
    index, ratings, bias_var = _training_data(3, 3.0)
    monkeypatch.setattr(calibration, "CALIBRATION_ROWS", 25)
    keep = np.linspace(0, len(index) - 1, 25).astype(np.int64)
    np.testing.assert_allclose(cold_start_scales(post, index, ratings, _laplace(bias_var)).numpy(),
                               _reference(post, index[keep], ratings[keep], bias_var), rtol=1e-10)


def test_distinct_rows_with_and_without_one_integer_key() -> None:
    rng = np.random.default_rng(0)
    index = np.stack([rng.integers(-1, 4, 200), rng.integers(-1, 3, 200), rng.integers(-1, 2, 200)], 1)
    for n_levels in ((4, 3, 2), (2 ** 40, 2 ** 40, 2 ** 40)):  # the second has too many keys for int64
        rows, inverse = _distinct_rows(index, n_levels)
        np.testing.assert_array_equal(rows[inverse], index)
        assert len(rows) == len(np.unique(index, axis=0))


def test_fit_calibrates_held_out_users_intervals() -> None:
    """Users whose biases and tastes spread more than the learned population shows: the 90 % intervals of
    held-out users cover 86 % of their ratings without the calibration and 88 % with it (77 % / 88 % when
    the biases started at zero and were further from their values after 5 epochs)."""
    rng = np.random.default_rng(2)
    n_users, n_items, n = 240, 40, 12000
    users, items = rng.integers(0, n_users, n), rng.integers(0, n_items, n)
    a, b = rng.normal(size=(n_users, 2)), rng.normal(size=(n_items, 2))
    y = (3 + rng.normal(0, 0.8, n_users)[users] + rng.normal(0, 0.3, n_items)[items]
         + 0.4 * (a[users] * b[items]).sum(1) + rng.normal(0, 0.5, n))
    cold = users >= 200  # 40 users never seen in training
    config = MWGPConfig(n_inducing=16, latent_dim=2, n_epochs=5, random_state=0, early_stopping=False,
                        dtype="float64")
    post = fit_mwgp(np.stack([users[~cold], items[~cold]], 1), y[~cold], (200, n_items), config).posterior
    assert post.cold_scale[0] == 1 and (post.cold_scale[1:] > 1).all()
    state = post.state_dict()
    state["cold_scale"] = torch.ones(4, dtype=torch.float64)
    raw = MWGPPosterior.from_state_dict(state)
    index = np.stack([np.full(int(cold.sum()), -1), items[cold]], 1)
    coverage = {}
    for name, p in (("raw", raw), ("calibrated", post)):
        mean, var = p.predict(index)
        coverage[name] = float(np.mean(np.abs(y[cold] - mean) <= 1.6449 * np.sqrt(var)))
    assert coverage["raw"] < coverage["calibrated"] - 0.01 and 0.85 <= coverage["calibrated"] <= 0.95, coverage


def test_unseen_items_of_data_where_every_item_has_one_rating_are_not_too_wide() -> None:
    """Every item rated once, items without an effect: a held-out rating is always of an unseen item. Early
    stopping has no held-out rating of a known item, so the noise stays the fit's (0.78 in rating units; the
    truth about 0.5) instead of its scale's lower bound on the unseen items (0.022), and the population's latent
    variance, far wider than the errors, is narrowed to the factor's floor: the 90 % intervals cover 0.975 of the
    held-out ratings, against 0.995 with the factor at 1 (the code before: noise 0.022, 0.97 with the factor at
    1, 0.92 narrowed)."""
    rng = np.random.default_rng(2)
    n, n_users = 2000, 50
    users = rng.integers(0, n_users, n)
    y = np.clip(np.rint(3 + rng.normal(0, 1, n_users)[users] + rng.normal(0, 0.7, n)), 1, 5)
    train = rng.permutation(n) < 1600  # items 0..n-1, one rating each: the held-out items are unseen
    index = np.stack([users, np.cumsum(train) - 1], 1)
    post = fit_mwgp(index[train], y[train], (n_users, int(train.sum())), MWGPConfig(random_state=0)).posterior
    noise = float(post.state.noise_variance) * post.rating_std ** 2
    assert 0.3 < noise < 1.0 and post.cold_scale[2] < 0.6
    state = post.state_dict()
    state["cold_scale"] = torch.ones(4, dtype=state["cold_scale"].dtype)
    held = np.stack([users[~train], np.full(int((~train).sum()), -1)], 1)
    coverage = {}
    for name, p in (("calibrated", post), ("widening only", MWGPPosterior.from_state_dict(state))):
        mean, var = p.predict(held)
        coverage[name] = float(np.mean(np.abs(y[~train] - mean) <= 1.6449 * np.sqrt(var)))
    assert coverage["calibrated"] <= min(0.98, coverage["widening only"] - 0.01), coverage
