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


def _data(seed: int = 3):
    rng = np.random.default_rng(seed)
    n, levels = 3000, (60, 40)
    index = np.stack([rng.integers(0, levels[0], n), rng.integers(0, levels[1], n)], 1)
    a, b = rng.normal(size=(levels[0], 3)), rng.normal(size=(levels[1], 3))
    y = 3 + (a[index[:, 0]] * b[index[:, 1]]).sum(1) + rng.normal(0, 0.5, n)
    return index, y, levels


def test_a_variational_fit_scales_its_noise_by_the_chosen_runs_scale(monkeypatch) -> None:
    """With early stopping and the variational factors the final fit's noise is the uncalibrated fit's times
    ``noise_scale`` (the same fit otherwise: calibration switched off gives the unscaled noise), and the scale is
    the one recorded at the chosen epoch; MAP factors keep their noise (scale 1)."""
    index, y, levels = _data()
    cfg = MWGPConfig(n_inducing=16, n_epochs=6, random_state=0, mf_posterior="variational", mf_reg=25.0,
                     early_stopping=True, batch_size=512)  # (a given batch: one setting searched)
    recorded = []
    original = validation.noise_scale
    monkeypatch.setattr(validation, "noise_scale", lambda *a: recorded.append(original(*a)) or recorded[-1])
    calibrated = fit_mwgp(index, y, levels, cfg)
    assert len(recorded) == cfg.n_epochs  # one scale per epoch of the one run searched
    assert calibrated.noise_scale == recorded[calibrated.n_epochs - 1] and calibrated.noise_scale != 1.0
    monkeypatch.setattr("mogp_surprise.core.trainer.calibrates_noise", lambda module: False)
    plain = fit_mwgp(index, y, levels, cfg)
    assert plain.noise_scale == 1.0 and plain.n_epochs == calibrated.n_epochs
    ratio = float(calibrated.posterior.state.noise_variance / plain.posterior.state.noise_variance)
    assert ratio == pytest.approx(calibrated.noise_scale, rel=1e-4)
    laplace = fit_mwgp(index, y, levels, cfg.replace(mf_posterior="laplace", mf_reg=50.0))
    assert laplace.noise_scale == 1.0
