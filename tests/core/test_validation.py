"""Early stopping's held-out ratings: the noise scale of the variational bilinear posterior (core/validation.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core import validation
from mogp_surprise.core.validation import SCALE_BOUND, noise_scale

pytestmark = pytest.mark.usefixtures("one_thread")


def _nll(c: float, squared, latent, noise) -> float:
    total = c * noise + latent
    return float((np.log(total) + squared / total).sum())


def test_the_noise_scale_is_the_held_out_likelihoods_optimum() -> None:
    """Without latent variance the optimum has a closed form, c = mean(e^2 / noise); with it, the search agrees
    with a fine grid; the scale stays inside its bounds when the errors are all 0 or huge."""
    rng = np.random.default_rng(0)
    noise = rng.uniform(0.2, 2.0, 500)
    squared = noise * 0.37 * rng.chisquare(1, 500)
    as_t = [torch.as_tensor(a) for a in (squared, np.zeros(500), noise)]
    assert noise_scale(*as_t) == pytest.approx(float(np.mean(squared / noise)), rel=1e-6)
    latent = rng.uniform(0.0, 0.5, 500)
    found = noise_scale(*(torch.as_tensor(a) for a in (squared, latent, noise)))
    grid = np.exp(np.linspace(np.log(1 / SCALE_BOUND), np.log(SCALE_BOUND), 20001))
    best = grid[np.argmin([_nll(c, squared, latent, noise) for c in grid])]
    assert found == pytest.approx(best, rel=1e-3)
    assert _nll(found, squared, latent, noise) <= _nll(1.0, squared, latent, noise)
    assert noise_scale(torch.zeros(10), torch.zeros(10), torch.ones(10)) == pytest.approx(1 / SCALE_BOUND)
    assert noise_scale(torch.full((10,), 1e6), torch.zeros(10), torch.ones(10)) == pytest.approx(SCALE_BOUND)
    assert noise_scale(torch.zeros(0), torch.zeros(0), torch.zeros(0)) == 1.0
    # a latent variance a hair below 0 (rounding) counts as 0: it does not push the scale up to where c * noise
    # outweighs it (a log of a negative variance is NaN, and the search moved away from every NaN)
    below = latent.copy()
    below[0] = -0.3
    at_zero = below.clip(0.0)
    assert noise_scale(*(torch.as_tensor(a) for a in (squared, below, noise))) == \
        noise_scale(*(torch.as_tensor(a) for a in (squared, at_zero, noise)))


def test_the_noise_calibration_recovers_the_scale_and_the_offsets_shrinkage() -> None:
    """Errors drawn with variance c0 sigma^2 exp(lambda0 s + lambda0^2 v / 2) + latent: the search finds (c0,
    lambda0) to within sampling error, no worse in likelihood than a brute-force grid over both; without log-noise
    offsets lambda is 1 and c the one-dimensional noise scale."""
    rng = np.random.default_rng(1)
    n, c0, lam0, base = 20000, 2.0, 0.4, 0.5
    offset, offset_var = rng.normal(0.0, 1.0, n), np.full(n, 0.05)
    latent = rng.uniform(0.0, 0.3, n)
    noise0 = c0 * base * np.exp(lam0 * offset + 0.5 * lam0 ** 2 * offset_var)
    squared = (noise0 + latent) * rng.chisquare(1, n)
    args = [torch.as_tensor(a) for a in (squared, latent, base, offset, offset_var)]
    c, lam = validation.noise_calibration(*args)
    assert lam == pytest.approx(lam0, abs=0.051) and c == pytest.approx(c0, rel=0.05)

    def nll(c, lam):
        return _nll(c, squared, latent, base * np.exp(lam * offset + 0.5 * lam ** 2 * offset_var))
    grid = min(nll(cc, ll) for cc in np.exp(np.linspace(-1.0, 2.0, 151)) for ll in validation.SHRINKS.numpy())
    assert nll(c, lam) <= grid + 1e-6 * abs(grid)
    assert nll(c, lam) < nll(validation.noise_calibration(*args[:3], None, None)[0], 1.0) - 100
    plain = validation.noise_calibration(*args[:3], None, None)
    assert plain[1] == 1.0
    alone = noise_scale(args[0], args[1], torch.full((n,), base, dtype=torch.float64))
    assert plain[0] == pytest.approx(alone, rel=1e-6)


def _data(seed: int = 3):
    rng = np.random.default_rng(seed)
    n, levels = 3000, (60, 40)
    index = np.stack([rng.integers(0, levels[0], n), rng.integers(0, levels[1], n)], 1)
    a, b = rng.normal(size=(levels[0], 3)), rng.normal(size=(levels[1], 3))
    y = 3 + (a[index[:, 0]] * b[index[:, 1]]).sum(1) + rng.normal(0, 0.5, n)
    return index, y, levels


def test_a_variational_fit_calibrates_its_noise_on_the_chosen_runs_best_epoch(monkeypatch) -> None:
    """With early stopping and the variational factors the final fit's sigma^2 is the uncalibrated fit's times c
    and its log-noise offsets the uncalibrated ones times lambda (the same fit otherwise: calibration switched off
    gives the plain noise), (c, lambda) searched once per run on the held-out rows of its first best epoch, beside
    the latent variance the posterior adds; MAP factors keep their noise (1, 1)."""
    index, y, levels = _data()
    cfg = MWGPConfig(n_inducing=16, n_epochs=6, random_state=0, mf_posterior="variational", mf_reg=25.0,
                     early_stopping=True, batch_size=512)  # (a given batch: one setting searched)
    epochs, searched = [], []
    scores, calibration = validation.validation_scores, validation.noise_calibration
    monkeypatch.setattr("mogp_surprise.core.trainer.validation_scores",
                        lambda *a, **k: epochs.append(scores(*a, **k)) or epochs[-1])
    monkeypatch.setattr("mogp_surprise.core.trainer.noise_calibration",
                        lambda *a: searched.append((a, calibration(*a))) or searched[-1][1])
    calibrated = fit_mwgp(index, y, levels, cfg)
    assert len(epochs) == cfg.n_epochs and len(searched) == 1  # one search, for the one run
    rmse = [e[0] for e in epochs]
    best = epochs[rmse.index(min(rmse))][1]
    assert calibrated.n_epochs == rmse.index(min(rmse)) + 1
    # the best epoch's rows, the latent variance with the posterior's Laplace parts added (with_posterior_variances)
    got = validation.HeldOutNoise(*searched[0][0])
    assert all(getattr(got, name) is getattr(best, name) for name in ("squared", "base", "offset", "offset_var"))
    assert bool((got.latent >= best.latent).all()) and float((got.latent - best.latent).min()) > 0
    assert (calibrated.noise_scale, calibrated.noise_shrink) == searched[0][1]
    assert calibrated.noise_scale != 1.0 and calibrated.noise_shrink != 1.0
    monkeypatch.setattr("mogp_surprise.core.trainer.calibrates_noise", lambda module: False)
    plain = fit_mwgp(index, y, levels, cfg)
    assert (plain.noise_scale, plain.noise_shrink) == (1.0, 1.0) and plain.n_epochs == calibrated.n_epochs
    ratio = float(calibrated.posterior.state.noise_variance / plain.posterior.state.noise_variance)
    assert ratio == pytest.approx(calibrated.noise_scale, rel=1e-4)
    for name in ("offset_0", "offset_1"):
        got, want = (fit.posterior.state.term("noise_offset").tables[name].values for fit in (calibrated, plain))
        lam = calibrated.noise_shrink
        torch.testing.assert_close(got[:, 0], lam * want[:, 0], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(got[:, 1], want[:, 1] + 2 * np.log(lam), rtol=1e-5, atol=1e-5)
    laplace = fit_mwgp(index, y, levels, cfg.replace(mf_posterior="laplace", mf_reg=50.0))
    assert (laplace.noise_scale, laplace.noise_shrink) == (1.0, 1.0)


def test_the_held_out_latent_variance_is_formed_in_float64() -> None:
    """Validation forms the GP's variance s + k^T M k as the fitted posterior does, in float64: with inducing
    points at the inputs, long lengthscales and a narrow q(v), the float32 product cancels to below 0 (here
    -0.002 for a variance of 5e-4), and the noise scale searched on it was the smallest that made it positive."""
    from mogp_surprise.core.terms import Rows
    from tests.core._modules import gp_moments, module

    torch.manual_seed(0)
    mod = module((30, 20), 2, 32)
    with torch.no_grad():
        for name in ("embedding_0", "embedding_1"):
            mod.term("gp_input").table(name).copy_(torch.randn(mod.term("gp_input").table(name).shape) * 0.5)
        index = torch.stack([torch.randint(0, 30, (400,)), torch.randint(0, 20, (400,))], 1)
        x = mod.gp_inputs(index)
        mod.gp.inducing.copy_(x[:32])
        mod.gp.raw_lengthscale.fill_(2.0)
        mod.gp.q_sqrt.copy_(0.01 * torch.eye(32))
        in_float32 = gp_moments(mod, x, mod.gp.whitened_terms(1e-5))[1]
    assert float(in_float32.min()) < 0  # what the float32 product gives
    r = mod.gp.input_width
    want = mod.gp.fitted(1e-5).moments([Rows(x[:, :r].double()), Rows(x[:, r:].double())], [])[1]
    assert float(want.min()) > 0
    y = torch.randn(400) * 0.1
    rows = validation.validation_scores(mod, index, y, 1e-5, 128, with_scale=True)[1]
    torch.testing.assert_close(rows.latent, want, rtol=1e-6, atol=1e-12)


def test_known_rows_are_those_whose_every_level_has_training_ratings() -> None:
    kept = torch.tensor([[0, 0], [1, 2], [3, 1]])
    held = torch.tensor([[0, 2], [2, 0], [1, 4], [3, 0], [5, 5]])
    assert validation.known_rows(held, kept).tolist() == [True, False, False, True, False]


@pytest.mark.parametrize("n_known", [60, 20], ids=["from-known-rows", "too-few-known-none"])
def test_the_noise_scale_is_read_from_held_out_ratings_of_known_levels(n_known) -> None:
    """Held-out ratings of unseen levels carry the population's wide latent variance, which the cold-start
    calibration sets later: the scale comes from the other rows, and is 1 with fewer than SCALE_MIN_KNOWN."""
    from tests.core._modules import module

    torch.manual_seed(0)
    mod = module((30, 20), 2, 16)
    index = torch.stack([torch.randint(0, 30, (200,)), torch.randint(0, 20, (200,))], 1)
    y = torch.randn(200)
    known = torch.zeros(200, dtype=torch.bool)
    known[torch.randperm(200)[:n_known]] = True
    _, everything = validation.validation_scores(mod, index, y, 1e-5, 64, with_scale=True)
    _, chosen = validation.validation_scores(mod, index, y, 1e-5, 64, with_scale=True, known=known)
    assert everything.squared.shape == (200,)
    if n_known < validation.SCALE_MIN_KNOWN:
        assert chosen is None  # the fit keeps its noise
        return
    for got, want in zip(chosen, everything):
        if want is None:  # (no log-noise offsets in this module)
            assert got is None
            continue
        torch.testing.assert_close(got, want if want.dim() == 0 else want[known])


def test_calibrations_recorded_by_earlier_releases_are_read() -> None:
    """A search run's entry [setting, curve, calibration] in a checkpoint: this release's {c, shrink}; the last
    release's c after every epoch (its best epoch's, lambda 1); one before the noise scale none (1, 1)."""
    curve = [0.9, 0.8, 0.85]
    assert validation.run_calibration([{}, curve, {"c": 0.7, "shrink": 0.4}]) == (0.7, 0.4)
    assert validation.run_calibration([{}, curve, [1.5, 1.2, 0.6]]) == (1.2, 1.0)
    assert validation.run_calibration([{}, curve]) == (1.0, 1.0)
    assert validation.recorded_calibration(1.3) == (1.3, 1.0)
    assert validation.recorded_calibration([1.3, 0.5]) == (1.3, 0.5)



def test_the_noise_of_sparse_levels_is_calibrated_beside_their_laplace_variances() -> None:
    """A bias-only world of 1,500 users x 5 ratings over 3,000 items (2.5 ratings an item), noise 0.25: the item
    biases' Laplace variances are a large part of a known pair's predictive variance. Calibrated without them, the
    noise absorbed them and the posterior added them again: noise 1.69 times the true one, 90 % intervals covering
    0.951 of the known test pairs (seeds 1, 2: 1.43 / 1.81 times, 0.937 / 0.961); beside them 1.03 times and 0.898
    (0.91 / 1.15, 0.882 / 0.919)."""
    from mogp_surprise.core.predictive import noise_variances

    rng = np.random.default_rng(0)
    n_users, n_items, noise = 1500, 3000, 0.25
    users, items = np.repeat(np.arange(n_users), 5), rng.integers(0, n_items, 5 * n_users)
    y = 3 + rng.normal(0, .4, n_users)[users] + rng.normal(0, .7, n_items)[items] + rng.normal(0, .5, len(users))
    index, test = np.stack([users, items], 1), rng.random(len(users)) < 0.2
    cfg = MWGPConfig(n_inducing=16, n_epochs=6, random_state=0, early_stopping=True, batch_size=512)
    post = fit_mwgp(index[~test], y[~test], (n_users, n_items), cfg).posterior
    known = test & np.isin(items, items[~test])
    mean, var = post.predict(index[known])
    learned = noise_variances(post.state, torch.as_tensor(index[known])).numpy() * post.rating_std ** 2
    assert 0.8 < learned.mean() / noise < 1.25
    assert 0.87 <= np.mean(np.abs(mean - y[known]) <= 1.645 * np.sqrt(var)) <= 0.93


def test_leave_one_out_errors_are_a_refit_without_the_rating_in_a_gaussian_linear_model() -> None:
    """Biases alone (ridge): e_n / (1 - h_n) with h_n = latent_n / noise_n is the error of a refit without rating
    n, whose variance is noise_n / (1 - h_n) = noise_n + latent_n / (1 - h_n); the scale is the one those refits'
    errors call for, the data's noise over the model's."""
    rng = np.random.default_rng(0)
    levels, sigma2, tau = rng.integers(0, 30, 200), 0.8, 2.0
    y = rng.normal(0, 0.7, 30)[levels] + rng.normal(0, 1.1, 200)

    def fit(keep):
        sums, counts = np.bincount(levels[keep], y[keep], 30), np.bincount(levels[keep], minlength=30)
        return sums / (counts + tau * sigma2), sigma2 / (counts + tau * sigma2)

    mean, var = fit(np.ones(200, dtype=bool))
    refits = np.array([y[n] - fit(np.arange(200) != n)[0][levels[n]] for n in range(200)])

    class Posterior:
        def standardised_moments(self, index):
            lv = index[:, 0].numpy()
            return (torch.as_tensor(mean[lv]), torch.as_tensor(var[lv]), torch.full((len(lv),), sigma2,
                                                                                   dtype=torch.float64))

    index = torch.as_tensor(np.stack([levels, np.zeros(200, dtype=int)], 1))
    found = validation.leave_one_out_noise_scale(Posterior(), index, torch.as_tensor(y), torch.Generator())
    leverage = var[levels] / sigma2
    expected = noise_scale(torch.as_tensor(refits ** 2), torch.as_tensor(var[levels] / (1 - leverage)),
                           torch.full((200,), sigma2))
    assert found == pytest.approx(expected, rel=1e-6)
    assert 1.2 < found < 1.9  # the noise the data have over the model's: 1.1^2 / 0.8 = 1.51


def test_a_map_fit_takes_its_noise_from_its_leave_one_out_errors(monkeypatch) -> None:
    """Laplace factors without early stopping: the learned noise is what the training residuals leave; scaled by
    the leave-one-out c it comes closer to the truth (noise 1 around biases: 0.963 -> 0.973)."""
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 300, 12_000), rng.integers(0, 100, 12_000)
    y = 3.0 + rng.normal(0, 0.5, 300)[users] + rng.normal(0, 0.5, 100)[items] + rng.normal(0, 1.0, 12_000)
    index = np.stack([users, items], 1)
    config = MWGPConfig(n_epochs=8, n_inducing=16, mf_posterior="laplace", early_stopping=False, random_state=0,
                        device="cpu")

    def noise(res):
        mean, var = res.posterior.predict(index[:500])
        return float(np.mean(var - res.posterior.predict(index[:500], include_noise=False)[1]))

    scaled = fit_mwgp(index, y, (300, 100), config)
    monkeypatch.setattr("mogp_surprise.core.trainer.leave_one_out_noise_scale", lambda *args: 1.0)
    plain = fit_mwgp(index, y, (300, 100), config)
    assert plain.noise_scale == 1.0 and scaled.noise_scale > 1.0
    assert noise(scaled) == pytest.approx(scaled.noise_scale * noise(plain), rel=1e-4)
    assert abs(noise(scaled) - 1.0) < abs(noise(plain) - 1.0)
