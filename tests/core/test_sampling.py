"""Posterior draws of a user's catalogue (core.sampling, Thompson sampling): their mean and variance are the
predictive's (latent, noise excluded), the draw is joint across items, and it is reproducible for a seed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.recommend import draw_generator, top_n

from tests.core._modules import random_ratings_posterior

N_USERS, N_ITEMS = 30, 25


@pytest.fixture(scope="module")
def posterior():
    return random_ratings_posterior(N_USERS, N_ITEMS, dtype="float64")


@pytest.mark.parametrize("user", [3, -1])
def test_draws_have_the_predictive_mean_and_latent_variance(posterior, user):
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([posterior.catalogue_draw(user, generator) for _ in range(6000)]).cpu().numpy()
    mean, var = (t.cpu().numpy() for t in posterior.catalogue_moments(user, include_noise=False))
    # an unseen user's predictive variance is widened by the cold-start calibration, which draws do not carry
    var = var / (posterior.cold_scale[1].item() if user < 0 else 1.0)
    np.testing.assert_allclose(draws.mean(0), mean, atol=5 * np.sqrt(var.max() / 6000))
    ratio = draws.var(0) / var
    assert 0.9 < np.median(ratio) < 1.1 and 0.8 < ratio.min() and ratio.max() < 1.25


def test_a_tempered_draw_has_the_predictive_mean_and_scale_squared_times_its_variance(posterior):
    """``scale`` s: every drawn deviation times s, so a known user's draws have s^2 times the posterior's
    variance (up to the bilinear term's product of two deviations, s^4), and s = 0 gives the predictive mean;
    an unseen user's drawn GP input enters the kernel nonlinearly: their variance shrinks, by more than s^2."""
    mean, var = (t.cpu().numpy() for t in posterior.catalogue_moments(3, include_noise=False))
    generator = torch.Generator().manual_seed(0)
    np.testing.assert_allclose(posterior.catalogue_draw(3, generator, scale=0.0).cpu().numpy(), mean, rtol=1e-10)
    draws = torch.stack([posterior.catalogue_draw(3, generator, scale=0.5) for _ in range(6000)]).cpu().numpy()
    np.testing.assert_allclose(draws.mean(0), mean, atol=5 * np.sqrt(0.25 * var.max() / 6000))
    ratio = draws.var(0) / (0.25 * var)
    assert 0.85 < np.median(ratio) < 1.1 and ratio.max() < 1.25
    full = torch.stack([posterior.catalogue_draw(-1, generator) for _ in range(3000)]).cpu().numpy().var(0)
    half = torch.stack([posterior.catalogue_draw(-1, generator, scale=0.5) for _ in range(3000)]).cpu().numpy().var(0)
    assert np.all(half < 0.3 * full)


def test_a_draw_is_joint_across_items(posterior):
    """The user's parameters are drawn once per draw: items' draws are correlated through them."""
    generator = torch.Generator().manual_seed(1)
    draws = torch.stack([posterior.catalogue_draw(-1, generator) for _ in range(3000)]).cpu().numpy()
    corr = np.corrcoef(draws.T)[np.triu_indices(N_ITEMS, 1)]
    assert np.median(corr) > 0.2  # an unseen user's bias moves every item (independent draws: 0 +- 0.02)


def test_thompson_top_n_is_reproducible_for_a_seed_and_explores_otherwise(posterior):
    one = top_n(posterior, np.array([2, -1]), n=5, strategy="thompson", random_state=7)
    again = top_n(posterior, np.array([2, -1]), n=5, strategy="thompson", random_state=7)
    np.testing.assert_array_equal(one.items, again.items)
    np.testing.assert_array_equal(one.score, again.score)
    assert (np.diff(one.score, axis=1) <= 0).all()  # ranked by the draw
    lists = {tuple(top_n(posterior, np.array([-1]), n=3, strategy="thompson", random_state=s).items[0])
             for s in range(8)}
    assert len(lists) > 1
    mean_list = top_n(posterior, np.array([2]), n=5)
    np.testing.assert_allclose(one.mean[0][np.argsort(one.items[0])],
                               posterior.predict(np.stack([np.full(5, 2), np.sort(one.items[0])], 1))[0])
    assert mean_list.items.shape == one.items[:1].shape


@pytest.mark.parametrize("bad", [True, "seed", 1.5, -1])
def test_bad_random_state(bad):
    with pytest.raises(ValueError, match="`random_state` must be None, an int >= 0 or a numpy Generator"):
        draw_generator(bad, torch.device("cpu"))
