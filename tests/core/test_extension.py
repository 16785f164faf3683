"""A model term defined outside the package, through the public component interface alone.

``ItemLogScale`` gives every item a log-scale c_i of the latent function, y = mu + exp(c_i) f + noise
(prior N(0, 1 / 10)): items whose ratings follow the users' tastes more or less strongly than the GP says.
No library file knows it: it is registered here and named in ``extra_terms``, and it trains, predicts,
folds in a new user, saves and loads (``docs/architecture.md`` walks through the same example).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mogp_surprise import MWGP, MWGPRegressor
from mogp_surprise.core import MWGPConfig, MWGPPosterior, fit_mwgp
from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.objective import expected_log_lik, expected_log_lik_of_moments
from mogp_surprise.core.rows import Batch
from mogp_surprise.core.terms import RatingParts, Rows, Table, Term, register_term
from mogp_surprise.datasets import make_synthetic_ratings, to_surprise_dataset
from tests.conftest import ON_CPU


@register_term
class ItemLogScale(Term):
    """exp(c_i) scales the latent function of item i's ratings; c_i ~ N(0, 1 / precision)."""

    name = "item_log_scale"

    @classmethod
    def from_config(cls, config, n_levels):
        return cls(n_levels, {"precision": 10.0})

    def tables(self) -> list[Table]:
        return [Table("log_scale_1", factor=1, width=0, prior_precision=self.options["precision"])]

    def combine(self, rows: dict[str, Rows], parts: RatingParts) -> None:
        parts.add_latent_log_scale(rows["log_scale_1"].value)


FAST = {"n_inducing": 16, "latent_dim": 2, "mf_rank": 2, "n_epochs": 4, "random_state": 0, "early_stopping": False}


@pytest.fixture(scope="module")
def data():
    df = make_synthetic_ratings(n_users=60, n_items=40, n_ratings=1500, random_state=1)
    users = df["user"].astype("category").cat.codes.to_numpy()
    items = df["item"].astype("category").cat.codes.to_numpy()
    return df, np.stack([users, items], 1).astype(np.int64), df["rating"].to_numpy(float)


@pytest.fixture(scope="module")
def fitted(data):
    _, index, y = data
    config = MWGPConfig(**FAST, extra_terms=("item_log_scale",))
    return fit_mwgp(index, y, (60, 40), config).posterior


def test_it_trains_with_the_built_in_terms(fitted) -> None:
    assert [t.name for t in fitted.state.terms] == ["gp_input", "bias", "bilinear", "noise_offset", "item_log_scale"]
    scales = fitted.term("item_log_scale").tables["log_scale_1"].values
    assert scales.shape == (40,) and float(scales.std()) > 1e-3  # learned, per item
    assert fitted.term("item_log_scale").tables["log_scale_1"].laplace_var is None  # (it asked for none)


def test_the_one_predictive_scales_the_latent_function(fitted) -> None:
    """mean(a) = mu + a E[f] and latent var(a) = a^2 Var[f] for a = exp(c_i) set to 0, 1 and 2 (a model without
    the estimation-uncertainty terms, so that the latent variance is the GP's alone)."""
    post = fitted.to(dtype=torch.float64)
    state = post.state_dict()
    for term in state["terms"]:
        for entry in term["tables"].values():
            entry.pop("laplace_var", None)
    pairs = np.array([[u, i] for u in (0, 5, 9) for i in (0, 3, 7)])
    got = {}
    for a in (0.0, 1.0, 2.0):
        state["terms"][-1]["tables"]["log_scale_1"]["values"] = torch.full((40,), np.log(a) if a else -np.inf,
                                                                          dtype=torch.float64)
        got[a] = MWGPPosterior.from_state_dict(state).predict(pairs, include_noise=False)
    np.testing.assert_allclose(got[2.0][0] - got[1.0][0], got[1.0][0] - got[0.0][0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[2.0][1], 4.0 * got[1.0][1], rtol=1e-9)
    assert np.abs(got[1.0][0] - got[0.0][0]).max() > 1e-3  # E[f] is not negligible here


def test_the_fused_training_term_equals_the_one_predictive_with_a_latent_scale(data) -> None:
    """Training folds the scale into the fused data term (residual / a, weight lambda a^2): equal to the
    expected log likelihood of the predictive's moments."""
    _, index, y = data
    from mogp_surprise.core.model import MWGPModule

    module = MWGPModule.from_config(MWGPConfig(**FAST, extra_terms=("item_log_scale",)), (60, 40)).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    module.set_implicit_graph(torch.as_tensor(index))
    batch, target = Batch(torch.as_tensor(index[:50])), torch.as_tensor((y[:50] - 3.5) / 1.1)
    terms = module.gp.whitened_terms(1e-6)
    parts = module.rating_parts(batch)
    assert parts.latent_log_scale is not None and float(parts.latent_log_scale.detach().abs().max()) > 0.1
    k = module.gp.kernel()(torch.cat([r.value for r in parts.inputs], dim=-1), module.gp.inducing)
    shared = expected_log_lik_of_moments(parts, target, k @ terms.w,
                                         module.gp.outputscale() + ((k @ terms.M) * k).sum(-1))
    fused = expected_log_lik(module, batch, target, terms)
    assert float(fused.detach()) == pytest.approx(float(shared.detach()), rel=1e-10)


def test_a_new_user_is_folded_in_with_the_items_scales(fitted) -> None:
    user = fold_in(fitted, np.array([0, 3, 7, 11]), np.array([5.0, 4.0, 2.0, 4.0]))
    assert not any(key.startswith("item_log_scale") for key in user.rows)  # an item term: no user row
    extended = fitted.with_extra_users([user])
    row = np.array([[60, i] for i in range(40)])
    mean, var = extended.predict(row)
    assert np.isfinite(mean).all() and (var > 0).all()
    # the folded user's latent part follows the items' scales: zero scales (a = 0) leave the mean function only
    state = extended.state_dict()
    state["terms"][-1]["tables"]["log_scale_1"]["values"] = torch.full((40,), -np.inf)
    flat = MWGPPosterior.from_state_dict(state).predict(row)[0]
    assert np.abs(flat - mean).max() > 1e-3


def test_it_saves_and_loads_with_both_adapters_and_pickles(data, tmp_path) -> None:
    df, _, _ = data
    params = {**FAST, **ON_CPU, "extra_terms": ("item_log_scale",)}  # loaded onto the CPU, compared bit for bit
    est = MWGPRegressor(**params).fit(df[["user", "item"]], df["rating"])
    est.save(tmp_path / "r.pt")
    loaded = MWGPRegressor.load(tmp_path / "r.pt")
    assert loaded.get_params()["extra_terms"] == ("item_log_scale",)
    X = df[["user", "item"]].iloc[:100]
    for a, b in zip(loaded.predict_dist(X), est.predict_dist(X)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(pickle.loads(pickle.dumps(est)).predict_dist(X), est.predict_dist(X)):
        np.testing.assert_array_equal(a, b)
    algo = MWGP(**params).fit(to_surprise_dataset(df).build_full_trainset())
    algo.save(tmp_path / "s.pt")
    again = MWGP.load(tmp_path / "s.pt")
    assert again.predict("u1", "i2").est == algo.predict("u1", "i2").est
    again.fold_in("someone", {"i2": 4.0, "i3": 1.0})
    assert np.isfinite(again.predict_dist("someone", "i5")[0])


def test_a_model_with_an_unregistered_term_says_what_to_import(fitted, monkeypatch) -> None:
    from mogp_surprise.core.terms import base

    state = fitted.state_dict()
    monkeypatch.delitem(base._REGISTRY, "item_log_scale")
    with pytest.raises(ValueError, match="no model term named 'item_log_scale' is registered.*import the module"):
        MWGPPosterior.from_state_dict(state)
    with pytest.raises(ValueError, match="no model term named 'item_log_scale'"):
        fit_mwgp(np.array([[0, 0], [1, 1]]), np.array([1.0, 2.0]), (2, 2), MWGPConfig(n_inducing=2, extra_terms=("item_log_scale",)))


def test_terms_are_checked_when_they_are_registered() -> None:
    with pytest.raises(TypeError, match="a Term subclass with a `name`"):
        register_term(int)

    class Nameless(Term):
        pass

    with pytest.raises(TypeError, match="with a `name`"):
        register_term(Nameless)

    class Clash(ItemLogScale):
        pass

    with pytest.raises(ValueError, match="'item_log_scale' is already registered"):
        register_term(Clash)
