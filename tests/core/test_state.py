"""The typed, versioned posterior state (mogp_surprise.core.state): round trips, refused incomplete states,
and the conversions and new user rows that go through it. Older formats: ``test_migrations.py``."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.posterior import MWGPPosterior
from mogp_surprise.core.state import FORMAT_VERSION, FittedTerm, PosteriorState
from tests.core._modules import fitted, random_module
from tests.core.test_posterior import (K_MF, M, N_ITEMS, N_USERS, R, RATING_STD, _het_module, _mf_module, _mixed_index,
                                       _post, _random_module)

ALL_PATTERNS = np.array([[u, i] for u in range(-1, N_USERS) for i in range(-1, N_ITEMS)])


def _same_predictions(a: MWGPPosterior, b: MWGPPosterior, index: np.ndarray = ALL_PATTERNS) -> None:
    for x, y in zip(a.predict(index), b.predict(index)):
        np.testing.assert_array_equal(x, y)


def test_state_dict_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module(), chunk_size=5)
    state = post.state_dict()
    assert state["format_version"] == FORMAT_VERSION == 2
    assert isinstance(post.state, PosteriorState) and all(isinstance(t, FittedTerm) for t in post.state.terms)
    assert [t["name"] for t in state["terms"]] == ["gp_input", "bias"]
    assert all(isinstance(t["values"], torch.Tensor) for term in state["terms"] for t in term["tables"].values())
    restored = MWGPPosterior.from_state_dict(state)
    assert restored.chunk_size == 5 and restored.rating_std == RATING_STD
    _same_predictions(post, restored, _mixed_index())


@pytest.mark.parametrize("cut, needle", [
    (lambda s: s.pop("gp"), "gp"),
    (lambda s: s["gp"].pop("w"), "gp.w"),
    (lambda s: s["terms"][1]["tables"].pop("bias_0"), "lacks its tables"),
    (lambda s: s["terms"].pop(0), "GP-input term"),
    (lambda s: s["terms"][1].update(name="no-such-term"), "no model term named 'no-such-term'"),
    (lambda s: s.update(format_version=99), "format 99 is not supported"),
], ids=["gp", "w", "a-table", "gp-input-term", "unknown-term", "newer-format"])
def test_incomplete_or_foreign_states_are_refused_with_what_is_wrong(cut, needle) -> None:
    state = _post(_random_module()).state_dict()
    cut(state)
    with pytest.raises(ValueError, match=needle):
        MWGPPosterior.from_state_dict(state)


def test_pickle_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module())
    restored = pickle.loads(pickle.dumps(post))
    assert isinstance(restored, MWGPPosterior)
    _same_predictions(post, restored, _mixed_index())
    assert restored.noise_var == post.noise_var


def test_a_pickle_goes_back_to_its_device_where_the_machine_has_it(monkeypatch) -> None:
    """A copy predicts as the original: unpickled onto the device it was pickled on (a GPU model stays on its GPU),
    else onto the CPU (a GPU model read on a machine without one)."""
    post = _post(_random_module())
    state = post.__getstate__()
    assert state["pickled_on"] == "cpu"
    for elsewhere in ("cuda", "cuda:3"):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        copy = MWGPPosterior.__new__(MWGPPosterior)
        copy.__setstate__({**state, "pickled_on": elsewhere})
        assert copy.device == torch.device("cpu")
        _same_predictions(post, copy, _mixed_index())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    moved = []
    monkeypatch.setattr(MWGPPosterior, "to", lambda self, device=None, dtype=None: moved.append(device) or self)
    MWGPPosterior.__new__(MWGPPosterior).__setstate__({**state, "pickled_on": "cuda:1"})
    MWGPPosterior.__new__(MWGPPosterior).__setstate__({**state, "pickled_on": "cuda:3"})  # not on this machine
    assert moved == [torch.device("cuda", 1)]


@pytest.mark.parametrize("make", [_het_module, _mf_module], ids=["per-level-noise", "bilinear"])
def test_every_term_survives_the_round_trip(make) -> None:
    post = _post(make(seed=3))
    again = MWGPPosterior.from_state_dict(post.state_dict())
    assert [t.name for t in again.state.terms] == [t.name for t in post.state.terms]
    if make is _mf_module:
        assert again.term("bilinear").term.options["rank"] == K_MF
    _same_predictions(post, again)


def test_to_keeps_cold_users_folded_in_users_and_what_fold_in_needs() -> None:
    """``to`` converts the whole state: the folded-in users' rows, the boolean cold-user mask and the fold-in
    values (converted to the new dtype) survive; a user folded in from 0 ratings stays index -1."""
    post = _post(_het_module(seed=1))
    users = [fold_in(post, [], []), fold_in(post, [0, 2], [1.0, 4.0])]
    extended = post.with_extra_users(users)
    converted = extended.to(dtype=torch.float32)
    assert converted.cold_users.dtype == torch.bool
    assert converted.cold_users.tolist() == [False] * N_USERS + [True, False]
    offsets = fitted(converted, "noise_offset", "offset_0").values
    assert offsets.dtype == torch.float32 and offsets.shape == (N_USERS + 2, 2)
    assert converted.term("noise_offset").extras["user_population"].dtype == torch.float32
    rows = np.array([[N_USERS, 1], [-1, 1], [N_USERS + 1, 1]])
    mean, var = converted.predict(rows)
    assert mean[0] == mean[1] and var[0] == var[1]  # the 0-rating user is the cold-start user
    np.testing.assert_allclose(mean, extended.predict(rows)[0], rtol=1e-5)
    assert converted.to(dtype=torch.float64).dtype == torch.float64


def test_replaced_user_rows_are_checked() -> None:
    post = _post(_random_module())
    user = fold_in(post, [1, 3], [2.0, 5.0])
    with pytest.raises(ValueError, match="must not repeat a user"):
        post.with_replaced_users([1, 1], [user, user])
    with pytest.raises(ValueError, match="has 1 entries but 2 users were given"):
        post.with_replaced_users([1], [user, user])
    with pytest.raises(ValueError, match="1-d array of user indices"):
        post.with_replaced_users([[1]], [user])
    with pytest.raises(ValueError, match="is not a FoldedUser"):
        post.with_extra_users([object()])
    other = fold_in(_post(random_module((N_USERS, N_ITEMS), R, M, use_biases=False)), [1], [3.0])  # no bias row
    with pytest.raises(ValueError, match="folded in with another model"):
        post.with_extra_users([other])
    replaced = post.with_replaced_users([2], [user])
    assert replaced.n_levels == post.n_levels
    inputs = fitted(replaced, "gp_input", "embedding_0").values
    np.testing.assert_array_equal(inputs[2].numpy(), user.rows["gp_input.embedding_0"])
    np.testing.assert_array_equal(inputs[3].numpy(), fitted(post, "gp_input", "embedding_0").values[3].numpy())
