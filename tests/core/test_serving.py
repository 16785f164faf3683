"""One prediction at a time (mogp_surprise.core.serving): the numpy path equals the batched torch path.

Every pattern of known and unseen levels, two and three factors, with and without the Laplace variances,
heteroscedastic noise, the bilinear term, the cold-start calibration, folded-in users (with and without
ratings), float32, and terms defined outside the package (one numpy can run, one it cannot: served by the
batched path).
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, MWGPPosterior, fit_mwgp
from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.laplace import laplace_variances
from mogp_surprise.core.terms import RatingParts, Rows, Table, Term, register_term
from tests.core._modules import random_module

FAST = {"n_inducing": 12, "latent_dim": 2, "mf_rank": 2, "n_epochs": 3, "random_state": 0,
        "early_stopping": False}


def _data(levels: tuple[int, ...], n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    index = np.stack([rng.integers(0, k, n) for k in levels], 1)
    index[:min(n, levels[0]), 0] = np.arange(min(n, levels[0]))  # every user rated
    y = rng.integers(1, 6, n).astype(float)
    return index, y


def _every_index(levels: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every pattern of known and unseen levels, with a few levels each."""
    choices = [[-1, 0, k - 1, k // 2] for k in levels]
    return list(itertools.product(*choices))


def _assert_pairs_equal(post: MWGPPosterior, rtol: float) -> None:
    index = _every_index(post.n_levels)
    for noise in (True, False):
        mean, var = post.predict(np.array(index), include_noise=noise)
        got = np.array([post.predict_pair(ix, include_noise=noise) for ix in index])
        np.testing.assert_allclose(got[:, 0], mean, rtol=rtol, atol=0)
        np.testing.assert_allclose(got[:, 1], var, rtol=rtol, atol=0)


@pytest.fixture(scope="module")
def default_fit():
    levels = (30, 20)
    index, y = _data(levels)
    return fit_mwgp(index, y, levels, MWGPConfig(**FAST)), index, y


@pytest.mark.parametrize("compiled", [True, False])
def test_default_model_every_pattern_matches_the_batched_path(default_fit, compiled, monkeypatch) -> None:
    """With numba's kernels for the GP's moments and the bilinear term's, and with numpy alone."""
    from mogp_surprise.core import serving

    if compiled and serving.serving_kernel("pair_gp_moments") is None:
        pytest.skip("numba is not installed: the kernel is not used")
    if not compiled:
        monkeypatch.setattr(serving, "serving_kernel", lambda name: None)
        monkeypatch.setattr("mogp_surprise.core.terms.bilinear.serving_kernel", lambda name: None)
    post = default_fit[0].posterior.to(dtype=torch.float64)
    assert post.term("noise_offset") is not None and post.term("bilinear") is not None
    assert not bool((post.cold_scale == 1).all())  # the cold-start calibration is in
    _assert_pairs_equal(post, 1e-12)
    assert post._pair_predictor is not None  # served by numpy, not by the fallback
    assert (post._pair_predictor._kernel is not None) is compiled


def test_known_levels_take_every_terms_pair_combine_and_no_combine(default_fit, monkeypatch) -> None:
    """A pair of known levels is served in floats (``Term.pair_combine``, no ``combine`` on (1, k) rows: 53 -> 28
    us per call on ML-100K's default model); a pair with an unseen level by the terms' ``combine``. Both equal the
    batched path (above)."""
    post = default_fit[0].posterior.to(dtype=torch.float64)
    combined, pair_combined = [], []
    for term in post.state.terms:
        cls = type(term.term)
        monkeypatch.setattr(cls, "combine", _counting(cls.combine, combined))
        monkeypatch.setattr(cls, "pair_combine", _counting(cls.pair_combine, pair_combined))
    post.predict_pair((0, 0))  # builds the predictor: its probes go through both paths
    combined.clear(), pair_combined.clear()
    post.predict_pair((3, 4))
    assert combined == [] and len(pair_combined) == len(post.state.terms) and all(pair_combined)
    post.predict_pair((-1, 4))
    assert len(combined) == len(post.state.terms) and len(pair_combined) == len(post.state.terms)
    # numpy integers and a list take the same path to the same values as Python ints
    assert post.predict_pair([np.int64(3), np.int32(4)]) == post.predict_pair((3, 4))
    assert post.predict_pair((np.int64(-1), 4)) == post.predict_pair((-1, 4))


def _counting(method: Any, calls: list) -> Any:
    def counted(self, *args):
        out = method(self, *args)
        calls.append(out if out is not None else True)
        return out
    return counted


def test_a_float32_posterior_is_served_in_float64(default_fit) -> None:
    """The default model trains in float32; one pair is predicted in float64, as the float64 posterior does."""
    post = default_fit[0].posterior
    assert post.dtype == torch.float32
    exact = post.to(dtype=torch.float64)
    index = _every_index(post.n_levels)
    for noise in (True, False):
        mean, var = exact.predict(np.array(index), include_noise=noise)
        got = np.array([post.predict_pair(ix, include_noise=noise) for ix in index])
        np.testing.assert_allclose(got, np.stack([mean, var], 1), rtol=1e-12, atol=0)
    assert post._pair_predictor.dtype == np.float64


def test_folded_in_users_with_and_without_ratings(default_fit) -> None:
    post = default_fit[0].posterior.to(dtype=torch.float64)
    users = [fold_in(post, np.array([0, 3, 5]), np.array([5.0, 1.0, 4.0])), fold_in(post, np.array([], int),
                                                                                      np.array([]))]
    extended = post.with_extra_users(users)
    assert extended.cold_users is not None
    _assert_pairs_equal(extended, 1e-12)
    # the user without ratings is predicted exactly as an unseen one, on this path too
    n = post.n_levels[0]
    assert extended.predict_pair((n + 1, 4)) == extended.predict_pair((-1, 4))


def test_a_float32_posterior_with_folded_in_users_converts_only_what_changed(default_fit, monkeypatch) -> None:
    """After a fold-in, the float64 copy behind the pair path reuses the unchanged tensors of the copy of the
    posterior it came from, and its kernel expectations and check of the terms (neither depends on the users: 11 of
    the first ``predict``'s 15 ms after a fold-in on ML-1M), and serves every pair exactly as a copy converted whole."""
    post = default_fit[0].posterior
    post.predict_pair((0, 0))  # the float64 copy is made
    user = fold_in(post, np.array([0, 3, 5]), np.array([5.0, 1.0, 4.0]))
    old_users = post.state.term("gp_input").tables["embedding_0"].values
    once = post.with_extra_users([user])
    for derived in (once, post.with_replaced_users([2], [user]), once.with_extra_users([user])):
        # what it may reuse: the tensors it shares (the replaced user tables' entries dropped, not kept alive)
        assert id(old_users) in post._float64 and id(old_users) not in derived._float64_of
        assert len(derived._float64_of) > 0
        index = _every_index(derived.n_levels) + [(derived.n_levels[0] - 1, 4)]
        with monkeypatch.context() as patch:  # the terms are not checked again
            patch.setattr(MWGPPosterior, "_standardised_one", lambda *a: pytest.fail("checked again"))
            got = [[derived.predict_pair(ix, noise) for ix in index] for noise in (True, False)]
        assert derived._pair_basis[0] is post._pair_basis[0]  # the float64 psi of its source, not formed again
        fresh = MWGPPosterior(derived.state)  # the same posterior, its copy made whole
        assert got == [[fresh.predict_pair(ix, noise) for ix in index] for noise in (True, False)]
        reused = {id(t) for t, _ in post._float64.values()} & {id(t) for t, _ in derived._float64.values()}
        items = derived.state.term("gp_input").tables["embedding_1"].values
        assert id(items) in reused and post._float64[id(items)][1] is derived._float64[id(items)][1]
        users = derived.state.term("gp_input").tables["embedding_0"].values
        assert id(users) not in reused and "_float64_of" not in derived.__dict__


@pytest.mark.parametrize("options", [
    {"levels": (7, 6), "use_biases": True},  # the paper's model
    {"levels": (7, 6, 4), "use_biases": True, "heteroscedastic": True, "mf_rank": 2},  # three factors
    {"levels": (7, 6), "heteroscedastic": True, "mf_rank": 3, "implicit": True},
])
def test_random_modules_with_laplace_variances(options: dict) -> None:
    options = dict(options)
    levels = options.pop("levels")
    mod = random_module(levels, 2, 9, seed=3, **options)
    index, _ = _data(levels, n=80, seed=1)
    mod.set_implicit_graph(torch.as_tensor(index))
    laplace = laplace_variances(mod, torch.as_tensor(index), 1e-6)
    for uncertainty in (True, False):
        post = MWGPPosterior.from_module(mod, 3.0, 1.2, 1e-6, laplace=laplace, embedding_uncertainty=uncertainty)
        _assert_pairs_equal(post, 1e-12)
        assert post._pair_predictor is not None


@register_term
class _Tilt(Term):
    """A log-scale of f per item (numpy-compatible combine)."""
    name, order = "test_serving_tilt", 60

    @classmethod
    def from_config(cls, config: Any, n_levels: tuple[int, ...]) -> "_Tilt":
        return cls(n_levels)

    def tables(self) -> list[Table]:
        return [Table("tilt_1", 1, 0, prior_precision=4.0)]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        parts.add_latent_log_scale(parts.xp.tanh(rows["tilt_1"].value))


@register_term
class _TorchOnly(_Tilt):
    """The same term written with a torch function: numpy cannot run it, the batched path serves it."""
    name = "test_serving_torch_only"

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        parts.add_latent_log_scale(torch.tanh(rows["tilt_1"].value))


@pytest.mark.parametrize("term, numpy_path", [("test_serving_tilt", True), ("test_serving_torch_only", False)])
def test_terms_defined_outside_the_package(term: str, numpy_path: bool) -> None:
    levels = (25, 15)
    index, y = _data(levels, n=400)
    fit = fit_mwgp(index, y, levels, MWGPConfig(**{**FAST, "n_epochs": 2}, extra_terms=(term,)))
    post = fit.posterior.to(dtype=torch.float64)
    _assert_pairs_equal(post, 1e-12)
    assert (post._pair_predictor is not None) is numpy_path
    # a posterior with folded-in users takes its source's verdict (the same terms), and serves the same pairs
    derived = post.with_extra_users([fold_in(post, np.array([0, 3]), np.array([5.0, 1.0]))])
    _assert_pairs_equal(derived, 1e-12)
    assert (derived._pair_predictor is not None) is numpy_path


@pytest.mark.parametrize("bad, message", [((0,), "must hold 2 inner indices"), ((0, 20), r"index\[1\]"),
                                          ((-2, 0), r"index\[0\]"), ((0.0, 1), r"index\[0\]"),
                                          (("0", 1), r"index\[0\]")])
def test_bad_index_is_named(default_fit, bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        default_fit[0].posterior.predict_pair(bad)
