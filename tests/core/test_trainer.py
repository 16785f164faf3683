"""fit_mwgp on small seeded synthetic data: convergence, determinism, accuracy, noise recovery, input checks."""
from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core.errors import validate_training_data
from mogp_surprise.core.trainer import FitResult, validation_split
from tests.conftest import ON_CPU

N_USERS, N_ITEMS, N_TRAIN, N_TEST = 60, 40, 1500, 300
TRUE_NOISE_SD = 0.5
LEVELS = (N_USERS, N_ITEMS)
# small and fast (~1 s per fit on one core), enough to learn biases and most of the interaction; on the CPU,
# where two fits from one seed are identical bit for bit (the tests of determinism compare them so)
CONFIG = MWGPConfig(n_inducing=16, latent_dim=2, n_epochs=60, batch_size=256, lr=0.05, random_state=0,
                    early_stopping=False, **ON_CPU)  # the tests below choose early stopping where they check it


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/core/conftest.py


@pytest.fixture(scope="module")
def data():
    """Ratings 3 + b_u + b_i + <U_u, V_i> + N(0, 0.5^2) on distinct (user, item) pairs."""
    rng = np.random.default_rng(2024)
    users = 0.3 * rng.normal(size=(N_USERS, 2))
    items = rng.normal(size=(N_ITEMS, 2))
    b_u, b_i = rng.normal(size=N_USERS), rng.normal(size=N_ITEMS)
    cells = rng.choice(N_USERS * N_ITEMS, size=N_TRAIN + N_TEST, replace=False)
    index = np.stack([cells // N_ITEMS, cells % N_ITEMS], axis=1)
    f = 3.0 + b_u[index[:, 0]] + b_i[index[:, 1]] + (users[index[:, 0]] * items[index[:, 1]]).sum(1)
    y = f + TRUE_NOISE_SD * rng.normal(size=len(f))
    return index[:N_TRAIN], y[:N_TRAIN], index[N_TRAIN:], y[N_TRAIN:]


@pytest.fixture(scope="module")
def timed_fit(data) -> tuple[FitResult, float]:
    """The fit and the wall-clock seconds measured around the call."""
    index, y, _, _ = data
    started = time.perf_counter()
    result = fit_mwgp(index, y, LEVELS, CONFIG)
    return result, time.perf_counter() - started


@pytest.fixture(scope="module")
def fitted(timed_fit) -> FitResult:
    return timed_fit[0]


def _rmse(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def test_fit_result_and_loss_decreases(data, fitted: FitResult) -> None:
    _, y, _, _ = data
    post = fitted.posterior  # the model of these ratings with this configuration
    assert post.n_levels == LEVELS and post.n_inducing == CONFIG.n_inducing and post.dtype == torch.float32
    assert post.latent_dim == CONFIG.latent_dim
    assert post.rating_mean == pytest.approx(y.mean(), rel=1e-12)
    assert post.rating_std == pytest.approx(y.std())
    assert fitted.n_data == N_TRAIN
    hist = fitted.loss_history
    # one loss per epoch run (no early stopping here: the whole schedule)
    assert len(hist) == len(fitted.epoch_times) == fitted.n_epochs == CONFIG.n_epochs
    assert np.isfinite(hist).all()
    assert hist[-1] < hist[0] - 0.5  # negative ELBO per rating, standardised units
    assert np.mean(hist[-5:]) < np.mean(hist[:5])


def test_beats_global_mean_on_held_out(data, fitted: FitResult) -> None:
    index, y, test_index, test_y = data
    mean, var = fitted.posterior.predict(test_index)
    assert np.isfinite(mean).all() and (var > 0).all()
    baseline = _rmse(np.full_like(test_y, y.mean()), test_y)
    assert _rmse(mean, test_y) < 0.6 * baseline  # the bias part alone explains well over half


# The learned noise variance is the true 0.25 plus the part of the interaction 60 epochs have not learned
# (held-out RMSE 0.711 against the noise floor 0.5). Measured noise_var / 0.25: 1.378..1.382 over fit seeds
# 0-3 on this data (float32 and float64 alike), 1.33 and 1.45 on two other draws of the data; the window
# (1.05, 1.75) is ~25 % either side of 1.38. It fails if nothing is learned (4.7 with lr=1e-4, 4.9 after
# one epoch; var(y) / 0.25 = 9.2) or the model is under-trained (1.82 after 15 epochs; 1.46 after 30).
NOISE_WINDOW = (1.05, 1.75)


def test_learned_noise_roughly_recovers_true_noise(fitted: FitResult) -> None:
    true_var = TRUE_NOISE_SD ** 2
    low, high = NOISE_WINDOW
    assert low * true_var < fitted.posterior.noise_var < high * true_var, fitted.posterior.noise_var


def test_predictive_variance_is_calibrated_in_scale(data, fitted: FitResult) -> None:
    """Mean squared held-out error and mean predictive variance (noise included) agree within 2x."""
    _, _, test_index, test_y = data
    mean, var = fitted.posterior.predict(test_index)
    ratio = np.mean((mean - test_y) ** 2) / np.mean(var)
    assert 0.5 < ratio < 2.0


def test_same_seed_gives_identical_predictions(data, fitted: FitResult) -> None:
    index, y, test_index, _ = data
    again = fit_mwgp(index, y, LEVELS, CONFIG)
    assert again.loss_history == fitted.loss_history
    for a, b in zip(fitted.posterior.predict(test_index), again.posterior.predict(test_index)):
        np.testing.assert_array_equal(a, b)


def test_different_seed_gives_different_predictions(data, fitted: FitResult) -> None:
    index, y, test_index, _ = data
    other = fit_mwgp(index, y, LEVELS, CONFIG.replace(random_state=1))
    diff = np.abs(other.posterior.predict(test_index)[0] - fitted.posterior.predict(test_index)[0])
    assert diff.max() > 1e-3


def test_generator_random_state_is_reproducible(data) -> None:
    index, y, test_index, _ = data
    cfg = CONFIG.replace(n_epochs=3)
    a = fit_mwgp(index, y, LEVELS, cfg.replace(random_state=np.random.default_rng(5)))
    b = fit_mwgp(index, y, LEVELS, cfg.replace(random_state=np.random.default_rng(5)))
    np.testing.assert_array_equal(a.posterior.predict(test_index)[0], b.posterior.predict(test_index)[0])


def test_float64_fit(data) -> None:
    index, y, test_index, test_y = data
    res = fit_mwgp(index, y, LEVELS, CONFIG.replace(dtype="float64"))
    assert res.posterior.dtype == torch.float64
    mean, _ = res.posterior.predict(test_index)
    assert _rmse(mean, test_y) < 0.6 * _rmse(np.full_like(test_y, y.mean()), test_y)
    low, high = NOISE_WINDOW
    noise_var = res.posterior.noise_var
    assert low * TRUE_NOISE_SD ** 2 < noise_var < high * TRUE_NOISE_SD ** 2, noise_var


@pytest.mark.parametrize("changes", [{"init": "random"}, {"use_biases": False}, {"lr_schedule": "constant"}],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_variants_fit_and_beat_global_mean(data, changes) -> None:
    index, y, test_index, test_y = data
    res = fit_mwgp(index, y, LEVELS, CONFIG.replace(n_epochs=30, **changes))
    assert res.loss_history[-1] < res.loss_history[0]
    mean, var = res.posterior.predict(test_index)
    assert np.isfinite(mean).all() and (var > 0).all()
    assert _rmse(mean, test_y) < 0.7 * _rmse(np.full_like(test_y, y.mean()), test_y)


def test_cold_start_predictions_after_fit(data, fitted: FitResult) -> None:
    index, y, _, _ = data
    mean, var = fitted.posterior.predict(np.array([[-1, 0], [0, -1], [-1, -1]]))
    assert np.isfinite(mean).all() and (var > 0).all()
    assert abs(mean[2] - y.mean()) < 0.1  # the global rating level (measured: 3.235 vs 3.235)
    # an unseen user is predicted by the item's learned effect (and vice versa): their means follow the
    # items' (users') average training ratings (measured correlations 0.997 and 0.992)
    post = fitted.posterior
    items, users = np.arange(N_ITEMS), np.arange(N_USERS)
    by_item = post.predict(np.stack([np.full(N_ITEMS, -1), items], 1))[0]
    by_user = post.predict(np.stack([users, np.full(N_USERS, -1)], 1))[0]
    item_mean = np.array([y[index[:, 1] == i].mean() for i in items])
    user_mean = np.array([y[index[:, 0] == u].mean() for u in users])
    assert np.corrcoef(by_item, item_mean)[0, 1] > 0.95 and np.corrcoef(by_user, user_mean)[0, 1] > 0.95


def test_all_equal_ratings(data) -> None:
    index = data[0][:200]
    res = fit_mwgp(index, np.full(len(index), 4.0), LEVELS, CONFIG.replace(n_epochs=5))
    mean, var = res.posterior.predict(np.array([[0, 0], [5, 7], [-1, 3], [-1, -1]]))
    assert np.isfinite(mean).all() and np.isfinite(var).all() and (var > 0).all()
    np.testing.assert_allclose(mean, 4.0, atol=1e-3)


def test_fewer_ratings_than_inducing_points(data) -> None:
    index, y, _, _ = data
    with pytest.warns(UserWarning, match="exceeds the number of training ratings"):
        res = fit_mwgp(index[:10], y[:10], LEVELS, CONFIG.replace(n_epochs=2))
    assert res.posterior.n_inducing == 10
    assert np.isfinite(res.posterior.predict(index[:5])[0]).all()


def test_cuda_request_without_cuda_fails_before_training(data) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the error raised without CUDA")
    index, y, _, _ = data
    with pytest.raises(ValueError, match="CUDA"):
        fit_mwgp(index, y, LEVELS, CONFIG.replace(device="cuda"))


# -- input validation ----------------------------------------------------------------------------------

_IDX = np.array([[0, 1], [2, 3], [1, 0]])
_Y = np.array([1.0, 2.0, 3.0])

BAD_INPUTS = [
    ("index-1d", np.array([0, 1, 2]), _Y, "index"),
    ("index-3-columns", np.zeros((3, 3), dtype=int), _Y, "index"),
    ("ratings-2d", _IDX, _Y[:, None], "ratings"),
    ("ratings-length", _IDX, _Y[:2], "ratings"),
    ("empty", np.zeros((0, 2), dtype=int), np.zeros(0), "empty"),
    ("float-index", _IDX.astype(float), _Y, "integers"),
    ("nan-rating", _IDX, np.array([1.0, np.nan, 3.0]), "NaN"),
    ("inf-rating", _IDX, np.array([1.0, 2.0, np.inf]), "finite"),
    ("string-ratings", _IDX, np.array(["1", "2", "3"]), "real numbers"),
    ("complex-ratings", _IDX, _Y.astype(complex), "real numbers"),
    ("negative-user", np.array([[0, 1], [-1, 3], [1, 0]]), _Y, "index[:, 0]"),
    ("user-too-large", np.array([[0, 1], [5, 3], [1, 0]]), _Y, "index[:, 0]"),
    ("item-too-large", np.array([[0, 1], [2, 4], [1, 0]]), _Y, "index[:, 1]"),
]


@pytest.mark.parametrize("case, index, ratings, needle", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_validate_training_data_names_the_problem(case, index, ratings, needle) -> None:
    with pytest.raises(ValueError) as info:
        validate_training_data(index, ratings, (5, 4))
    assert needle in str(info.value)
    # fit_mwgp runs the same checks before doing any work
    with pytest.raises(ValueError, match=None):
        fit_mwgp(index, ratings, (5, 4), MWGPConfig(n_inducing=2, latent_dim=1, n_epochs=1))


def test_nan_message_points_at_first_bad_row() -> None:
    with pytest.raises(ValueError, match="row 1"):
        validate_training_data(_IDX, np.array([1.0, np.nan, np.inf]), (5, 4))


def test_valid_training_data_passes() -> None:
    validate_training_data(_IDX, _Y, (5, 4))
    validate_training_data(_IDX.astype(np.int32), _Y.astype(np.int64), (3, 4))


def test_epoch_times_are_reported(timed_fit) -> None:
    fitted, wall = timed_fit
    assert len(fitted.epoch_times) == CONFIG.n_epochs
    assert all(t > 0 for t in fitted.epoch_times)
    # fit_time spans the whole fit: its epochs and more (set-up, Laplace variances), but no more than the
    # wall time around the call, of which it is nearly all (measured: fit_time / wall > 0.999, epochs
    # 0.48-0.98 of it: the first fit in a process pays ~1.3 s outside its epochs)
    assert sum(fitted.epoch_times) <= fitted.fit_time <= wall
    assert fitted.fit_time > 0.5 * wall


def test_heteroscedastic_noise_recovers_who_is_noisy_and_improves_the_likelihood() -> None:
    """Synthetic ratings whose noise std is 0.2..1.5 by a user effect plus an item effect: the learned
    per-pair noise ranks the true noise (Spearman > 0.6) and the held-out NLL beats one scalar noise."""
    from scipy.stats import spearmanr

    from mogp_surprise.datasets import make_synthetic_ratings

    # data seed 0: over data seeds 0-5 the rank correlation is 0.74 / 0.70 / 0.71 / 0.35 / 0.46 / 0.68 and the
    # NLL beats one noise on 4 of 6 (docs/history.md, ninth round: on seeds 3 and 4 this fit does not learn the
    # noise); the test pins the behaviour on a seed where it does
    df = make_synthetic_ratings(n_users=150, n_items=100, n_ratings=9000, noise_std=(0.2, 1.5), integer=False,
                                random_state=0)
    users, items = (df[c].str[1:].astype(int).to_numpy() for c in ("user", "item"))
    index = np.stack([users, items], 1)
    levels = (users.max() + 1, items.max() + 1)
    y, true_sd = df["rating"].to_numpy(), df["noise_std"].to_numpy()
    train, test = slice(0, 7500), slice(7500, None)
    nll, rank = {}, {}
    for noise in ("heteroscedastic", "homoscedastic"):
        # the paper's mean function (no bilinear term): on this small set, near its noise floor, whether the GP's
        # inputs are learned within the chosen epochs is a matter of the seed, with or without the term (RMSE
        # 0.97 or 1.02), which would decide the comparison of the two noise models instead of the noise
        cfg = MWGPConfig(n_inducing=16, latent_dim=2, n_epochs=40, random_state=0, noise=noise, mf_rank=0)
        post = fit_mwgp(index[train], y[train], levels, cfg).posterior
        mean, var = post.predict(index[test])
        _, latent = post.predict(index[test], include_noise=False)
        nll[noise] = float(np.mean(0.5 * np.log(2 * np.pi * var) + (y[test] - mean) ** 2 / (2 * var)))
        rank[noise] = spearmanr(np.sqrt(var - latent), true_sd[test]).statistic if noise == "heteroscedastic" \
            else float(np.ptp(var - latent))
    assert rank["heteroscedastic"] > 0.6, rank
    assert rank["homoscedastic"] < 1e-6  # one noise variance for every pair
    assert nll["heteroscedastic"] < nll["homoscedastic"] - 0.02, nll  # measured: 1.364 vs 1.411


# -- early stopping: the number of epochs chosen on an internal validation split -----------------------
def test_early_stopping_chooses_the_epoch_with_the_best_validation_rmse(data) -> None:
    index, y, _, _ = data
    config = CONFIG.replace(early_stopping=True, n_epochs=40)
    res = fit_mwgp(index, y, LEVELS, config)
    val = res.validation_rmse
    assert val and res.n_epochs == int(np.argmin(val)) + 1
    assert len(res.loss_history) == len(res.epoch_times) == res.n_epochs  # the final run stops there
    assert len(val) == config.n_epochs  # the search runs the whole schedule
    again = fit_mwgp(index, y, LEVELS, config)  # seeded: the same split, the same choice
    assert again.validation_rmse == val
    np.testing.assert_array_equal(again.posterior.predict(index[:50])[0], res.posterior.predict(index[:50])[0])
    off = fit_mwgp(index, y, LEVELS, config.replace(early_stopping=False))
    assert off.validation_rmse == [] and off.n_epochs == len(off.loss_history) == 40


def test_early_stopping_prevents_over_fitting_a_small_noisy_data_set() -> None:
    """~8 ratings per user with MovieLens-like noise. Under a weak bias prior (``bias_reg=1``, the default before
    the prior was estimated) 20 epochs over-fit and early stopping does not (measured: held-out RMSE 1.110 vs
    1.137; the training mean predicts with 1.131). The defaults, whose bias prior is estimated from the data, do
    better than either (1.094; 20 epochs with it: 1.087, nothing left to over-fit in the biases)."""
    import pandas as pd

    from mogp_surprise.datasets import make_synthetic_ratings

    df = make_synthetic_ratings(n_users=300, n_items=400, n_ratings=3000, random_state=0)
    index = np.stack([pd.factorize(df.user)[0], pd.factorize(df.item)[0]], axis=1)
    y = df.rating.to_numpy(float)
    n = 2400

    def held_out(**params) -> float:
        res = fit_mwgp(index[:n], y[:n], tuple(index.max(0) + 1), MWGPConfig(random_state=0, **params))
        return _rmse(res.posterior.predict(index[n:])[0], y[n:])

    weak = {es: held_out(early_stopping=es, bias_reg=1.0) for es in (True, False)}
    assert weak[True] < weak[False] - 0.01, weak
    default = held_out()
    assert default < weak[True] - 0.008, (default, weak)
    assert default < 0.975 * _rmse(np.full(len(y) - n, y[:n].mean()), y[n:]), default


def test_early_stopping_auto_is_on_for_small_data_only() -> None:
    """... but not for so few ratings that the validation split holds under 100 of them."""
    from mogp_surprise.core.config import EARLY_STOPPING_BELOW, EARLY_STOPPING_MIN

    config = MWGPConfig()
    assert EARLY_STOPPING_MIN * config.validation_fraction >= 100
    assert config.uses_early_stopping(EARLY_STOPPING_BELOW - 1) and config.uses_early_stopping(EARLY_STOPPING_MIN)
    assert not config.uses_early_stopping(EARLY_STOPPING_BELOW)
    assert not config.uses_early_stopping(EARLY_STOPPING_MIN - 1)
    assert MWGPConfig(early_stopping=True).uses_early_stopping(EARLY_STOPPING_MIN - 1)
    assert MWGPConfig(early_stopping=True).uses_early_stopping(10 ** 7)
    assert not MWGPConfig(early_stopping=False).uses_early_stopping(100)


def test_on_few_ratings_the_global_mean_is_at_its_optimum_given_the_rest() -> None:
    """Below EARLY_STOPPING_MIN ratings training is some twenty full-batch steps; the global mean then takes its
    closed-form step: the training residuals' noise-weighted mean is 0 (the stationary point of the expected
    log-likelihood in it). One user rating 240 items, as the battery's one-user case: without the step that mean
    is +0.0033 here (on the battery's draw +0.016, and the constant predicted for unseen items 0.03 below the
    ratings' mean)."""
    rng = np.random.default_rng(0)
    y = np.clip(np.rint(3.5 + rng.normal(0, 0.8, 300) + rng.normal(0, 0.5, 300)), 1, 5)[:240]
    index = np.stack([np.zeros(240, int), np.arange(240)], axis=1)
    post = fit_mwgp(index, y, (1, 300), MWGPConfig(random_state=0, **ON_CPU)).posterior
    mean, var = post.predict(index)
    noise = var - post.predict(index, include_noise=False)[1]
    weighted = float(np.sum((y - mean) / noise) / np.sum(1 / noise))
    assert abs(weighted) < 1e-5, weighted


def test_the_search_tries_step_sizes_and_priors_only_where_the_automatic_batch_is_small() -> None:
    """... and from there to a batch of 8192 the square-root rule's step size is used alone."""
    from mogp_surprise.core.config import AUTO_BATCH, SEARCH_BATCH

    config = MWGPConfig()
    batch = config.resolved_batch_size(8_000)  # a 10 % sample of ML-100K: 445
    assert batch <= SEARCH_BATCH
    small = 0.02 * np.sqrt(batch / AUTO_BATCH)
    got = config.search_space(8_000)
    assert [c["lr"] for c in got] == pytest.approx([0.02, small, 0.02, small])
    # below 200,000 ratings (early stopping) the bilinear posterior is variational, its prior 25 (MF_REG)
    assert [c["mf_reg"] for c in got] == [25.0, 25.0, 5.0, 5.0]
    assert [c["mf_reg"] for c in MWGPConfig(mf_reg=50.0).search_space(8_000)] == [50.0, 50.0, 10.0, 10.0]
    assert [c["mf_reg"] for c in MWGPConfig(mf_posterior="laplace").search_space(8_000)] == [50.0, 50.0, 10.0, 10.0]
    own = [{"lr": 0.02, "mf_reg": 25.0}]
    assert config.resolved_batch_size(80_000) == 4_445  # ML-100K
    assert config.search_space(80_000) == [{"lr": pytest.approx(0.02 * np.sqrt(4_445 / AUTO_BATCH)), "mf_reg": 25.0}]
    assert MWGPConfig(lr=0.01).search_space(80_000)[0]["lr"] == pytest.approx(0.01 * np.sqrt(4_445 / AUTO_BATCH))
    assert MWGPConfig(batch_size=4_445).search_space(80_000) == own  # a batch the user chose: lr as given
    assert config.resolved_batch_size(150_000) == AUTO_BATCH and config.search_space(150_000)[0]["lr"] == 0.02
    assert MWGPConfig(batch_size=256).search_space(8_000) == own  # a batch the user chose
    # a split of >= 100 ratings; below it no early stopping, so the Laplace factors' prior
    assert config.search_space(999) == [{"lr": 0.02, "mf_reg": 50.0}] and len(config.search_space(1_000)) == 4
    assert config.search_space(300_000) == [{"lr": 0.02, "mf_reg": 50.0}]  # no early stopping: Laplace
    assert MWGPConfig(lr=0.01).search_space(8_000)[1]["lr"] == pytest.approx(small / 2)
    assert [c["mf_reg"] for c in MWGPConfig(mf_rank=0).search_space(8_000)] == [25.0, 25.0]  # no bilinear term


def test_the_bilinear_posterior_and_prior_follow_early_stopping() -> None:
    """"auto": the variational posterior (prior 25) where early stopping is on, Laplace (50) above and where the
    config was not made concrete for data; given values are kept."""
    config = MWGPConfig()
    small, large = config.for_data(80_000, (943, 1682)), config.for_data(800_000, (6040, 3706))
    assert (small.mf_posterior, small.mf_reg) == ("variational", 25.0)
    assert (large.mf_posterior, large.mf_reg) == ("laplace", 50.0)
    assert config.bilinear() == ("laplace", 50.0)
    assert MWGPConfig(early_stopping=False).for_data(80_000, (943, 1682)).mf_posterior == "laplace"
    assert MWGPConfig(early_stopping=True).for_data(800_000, (6040, 3706)).mf_posterior == "variational"
    assert MWGPConfig(mf_reg=40.0).for_data(80_000, (943, 1682)).mf_reg == 40.0
    assert MWGPConfig(mf_posterior="laplace").for_data(80_000, (943, 1682)).mf_reg == 50.0


def test_early_stopping_chooses_the_setting_with_the_best_validation_rmse() -> None:
    import pandas as pd

    from mogp_surprise.datasets import make_synthetic_ratings

    df = make_synthetic_ratings(n_users=300, n_items=400, n_ratings=3000, random_state=0)
    index = np.stack([pd.factorize(df.user)[0], pd.factorize(df.item)[0]], axis=1)
    y, levels = df.rating.to_numpy(float), tuple(index.max(0) + 1)
    config = MWGPConfig(random_state=0, n_epochs=6, **ON_CPU)
    res = fit_mwgp(index, y, levels, config)
    tried = res.searched
    assert [c for c, _ in tried] == config.search_space(len(y)) and len(tried) == 4
    assert all(len(curve) == config.n_epochs for _, curve in tried)  # each runs the whole schedule
    assert len({tuple(curve) for _, curve in tried}) == 4
    best = min(tried, key=lambda t: min(t[1]))
    assert res.chosen == best[0] and res.validation_rmse == best[1]
    assert res.n_epochs == int(np.argmin(best[1])) + 1 == len(res.loss_history)
    assert res.posterior.state.terms[[t.name for t in res.posterior.state.terms].index("bilinear")].term.options[
        "mf_reg"] == res.chosen["mf_reg"]  # the final model holds the prior it was trained with (fold-in uses it)
    # the first is the plain run, on the same split: the curve of the same batch given explicitly (no search)
    plain = fit_mwgp(index, y, levels, config.replace(batch_size=config.resolved_batch_size(len(y))))
    assert plain.searched == [tried[0]] and plain.chosen == {"lr": 0.02, "mf_reg": 25.0}  # (variational)
    off = fit_mwgp(index, y, levels, config.replace(early_stopping=False))
    assert off.searched == [] and off.chosen == {"lr": 0.02, "mf_reg": 50.0}  # (no early stopping: Laplace)


def test_early_stopping_keeps_a_rating_on_each_side_of_the_split() -> None:
    res = fit_mwgp(np.array([[0, 0], [1, 1]]), np.array([3.0, 4.0]), (2, 2),
                   MWGPConfig(early_stopping=True, validation_fraction=0.9, n_inducing=2, n_epochs=3, random_state=0))
    assert len(res.validation_rmse) >= 1 and 1 <= res.n_epochs <= 3


def test_early_stopping_holds_out_every_rating_of_a_repeated_pair_together() -> None:
    # a repeat of a held-out rating left in training rewards memorising pairs (docs/history.md: 90 % coverage
    # 0.842 on the battery's repeated pairs with rows split, 0.902 with pairs split)
    rng = np.random.default_rng(0)
    base = np.stack([rng.integers(0, 300, 3000), rng.integers(0, 200, 3000)], 1)
    index = torch.as_tensor(np.concatenate([base, base[:900], base[:300]]))  # pairs rated twice and three times
    held, kept = validation_split(index, 400, torch.Generator().manual_seed(0))
    assert sorted(torch.cat([held, kept]).tolist()) == list(range(len(index)))

    def pairs(rows: torch.Tensor) -> set:
        return {tuple(r) for r in index[rows].tolist()}

    assert not pairs(held) & pairs(kept)
    # whole pairs: each of perm's first n_val rows is held out with its pair's other ratings (at most 2 more here)
    assert 400 <= len(held) <= 3 * 400 and len(held) > 400
    again, _ = validation_split(index, 400, torch.Generator().manual_seed(0))
    other, _ = validation_split(index, 400, torch.Generator().manual_seed(1))
    assert torch.equal(held, again) and pairs(other) != pairs(held)


def test_without_repeated_pairs_the_split_is_a_random_permutations_prefix() -> None:
    # data without repeats (MovieLens) are split exactly as before pairs were grouped
    index = torch.as_tensor(np.stack(np.divmod(np.random.default_rng(1).permutation(5000)[:1000], 100), 1))
    held, kept = validation_split(index, 100, torch.Generator().manual_seed(3))
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(3))
    assert torch.equal(held, perm[:100]) and torch.equal(kept, perm[100:])



def test_fit_mwgp_refuses_a_dict_config_and_ratings_a_float32_model_cannot_hold() -> None:
    with pytest.raises(TypeError, match=r"`config` must be an MWGPConfig \(e.g. MWGPConfig\(\*\*params\)\), got dict"):
        fit_mwgp(_IDX, _Y, (5, 4), {"n_epochs": 2})
    with pytest.raises(ValueError, match=r"ratings as large as 3e\+20 overflow a float32 model's variances"):
        fit_mwgp(_IDX, _Y * 1e20, (5, 4), MWGPConfig(n_epochs=1, **ON_CPU))
    big = fit_mwgp(_IDX, _Y * 1e20, (5, 4), MWGPConfig(n_epochs=1, dtype="float64", n_inducing=3, **ON_CPU))
    assert np.isfinite(big.posterior.predict(_IDX)[1]).all()


def test_the_n_inducing_warning_points_at_the_users_call() -> None:
    with pytest.warns(UserWarning, match="n_inducing=50 exceeds the number of training ratings") as record:
        fit_mwgp(_IDX, _Y, (5, 4), MWGPConfig(n_epochs=1, n_inducing=50, **ON_CPU))
    assert [w.filename for w in record if "n_inducing" in str(w.message)] == [__file__]


def test_the_default_n_inducing_is_limited_to_small_data_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = fit_mwgp(_IDX, _Y, (5, 4), MWGPConfig(n_epochs=1, **ON_CPU))
    assert res.posterior.n_inducing == len(_Y)


def test_level_counts_of_numpys_small_ints_fit_as_python_ints() -> None:
    """pandas' category codes are int16 up to 32,767 levels: ``codes.max() + 1`` as ``n_levels`` overflowed
    in products with the number of ratings (ML-1M: an OverflowError before training)."""
    rng = np.random.default_rng(0)
    n = 50_000  # where the neighbourhood term's "auto" multiplies the ratings by the items
    index = np.stack([rng.integers(0, 300, n), rng.integers(0, 200, n)], 1)
    y = rng.normal(3.0, 1.0, n)
    config = MWGPConfig(n_epochs=1, n_inducing=8, early_stopping=False, batch_size=8192, random_state=0, **ON_CPU)
    small = fit_mwgp(index, y, (np.int16(300), np.int16(200)), config).posterior
    plain = fit_mwgp(index, y, (300, 200), config).posterior
    assert small.n_levels == (300, 200) and all(type(n) is int for n in small.n_levels)
    np.testing.assert_array_equal(small.predict(index[:50])[0], plain.predict(index[:50])[0])
    with pytest.raises(ValueError, match="`n_levels` must hold ints"):
        fit_mwgp(index, y, (300.0, 200), config)
