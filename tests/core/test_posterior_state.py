"""Saving and loading a posterior (mogp_surprise.core.posterior_state): round trips, states of older
versions, refused incomplete states, and the conversions that go through the state."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mogp_surprise.core.foldin import fold_in
from mogp_surprise.core.posterior import MWGPPosterior
from tests.core.test_posterior import (JITTER, K_MF, N_ITEMS, N_USERS, RATING_STD, _all_pairs, _het_module,
                                       _mf_module, _mixed_index, _post, _random_module)


def test_state_dict_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module(), chunk_size=5)
    state = post.state_dict()
    assert all(isinstance(t, torch.Tensor) for t in state["embeddings"])
    restored = MWGPPosterior.from_state_dict(state)
    assert restored.chunk_size == 5 and restored.rating_std == RATING_STD
    idx = _mixed_index()
    for a, b in zip(post.predict(idx), restored.predict(idx)):
        np.testing.assert_array_equal(a, b)


def test_state_dict_missing_entries_raise() -> None:
    state = _post(_random_module()).state_dict()
    del state["embeddings"]
    with pytest.raises(ValueError, match="embeddings"):
        MWGPPosterior.from_state_dict(state)


def test_pickle_round_trip_gives_identical_predictions() -> None:
    post = _post(_random_module())
    restored = pickle.loads(pickle.dumps(post))
    assert isinstance(restored, MWGPPosterior)
    idx = _mixed_index()
    for a, b in zip(post.predict(idx), restored.predict(idx)):
        np.testing.assert_array_equal(a, b)
    assert restored.noise_var == post.noise_var


def test_heteroscedastic_state_round_trip_and_old_states_load_as_homoscedastic() -> None:
    post = _post(_het_module(seed=3))
    pairs = np.array([[u, i] for u in range(-1, N_USERS) for i in range(-1, N_ITEMS)])
    again = MWGPPosterior.from_state_dict(post.state_dict())
    for a, b in zip(post.predict(pairs), again.predict(pairs)):
        np.testing.assert_array_equal(a, b)
    # a state written before per-level noise existed (no noise_scales / noise_scale_unseen entries)
    homo = _post(_random_module(seed=3))
    old = {k: v for k, v in homo.state_dict().items() if k not in ("noise_scales", "noise_scale_unseen")}
    restored = MWGPPosterior.from_state_dict(old)
    for a, b in zip(homo.predict(pairs), restored.predict(pairs)):
        np.testing.assert_array_equal(a, b)


def test_bilinear_state_round_trip_and_old_states_load_without_the_term() -> None:
    pairs = np.array([[u, i] for u in range(-1, N_USERS) for i in range(-1, N_ITEMS)])
    post = _post(_mf_module())
    assert post.mf_rank == K_MF
    again = MWGPPosterior.from_state_dict(post.state_dict())
    for a, b in zip(post.predict(pairs), again.predict(pairs)):
        np.testing.assert_array_equal(a, b)
    plain = _post(_random_module(seed=3))
    assert plain.mf_rank == 0
    old = {k: v for k, v in plain.state_dict().items()
           if k not in ("mf_mean", "mf_var", "mf_factors", "mf_level_var")}  # written before the term existed
    restored = MWGPPosterior.from_state_dict(old)
    assert restored.mf_rank == 0
    for a, b in zip(plain.predict(pairs), restored.predict(pairs)):
        np.testing.assert_array_equal(a, b)


def test_incomplete_bilinear_states_and_variances_are_refused() -> None:
    from mogp_surprise.core.laplace import level_variances

    mod = _mf_module()
    index = torch.as_tensor(_all_pairs())
    with pytest.raises(ValueError, match="pass `mf_reg`"):
        level_variances(mod, index, JITTER, embedding_reg=1.0, bias_reg=1.0)
    spread = level_variances(mod, index, JITTER, embedding_reg=1.0, bias_reg=1.0, mf_reg=2.0)
    with pytest.raises(ValueError, match="variances of its factors"):
        _post(mod, level_variances=spread[:2])
    state = _post(mod, level_variances=spread).state_dict()
    with pytest.raises(ValueError, match="not its two factor tables"):
        MWGPPosterior.from_state_dict({k: v for k, v in state.items() if k != "mf_factors"})
    with pytest.raises(ValueError, match="not those of its bilinear factors"):
        MWGPPosterior.from_state_dict({k: v for k, v in state.items() if k != "mf_level_var"})


def test_to_keeps_cold_users_folded_in_users_and_what_fold_in_needs() -> None:
    """``to`` rebuilds the posterior from its state: the folded-in users' rows, the boolean cold-user mask and
    the fold-in tensors (converted to the new dtype) survive; a user folded in from 0 ratings stays index -1."""
    post = _post(_het_module(seed=1), embedding_reg=1.0, bias_reg=1.0)
    users = [fold_in(post, [], []), fold_in(post, [0, 2], [1.0, 4.0])]
    extended = post.with_extra_users(users)
    converted = extended.to(dtype=torch.float32)
    assert converted.cold_users.dtype == torch.bool
    assert converted.cold_users.tolist() == [False] * N_USERS + [True, False]
    assert converted.foldin["noise_offset_mean"][0].dtype == torch.float32
    assert converted.foldin["noise_offset_mean"][0].shape == (N_USERS + 2,)
    rows = np.array([[N_USERS, 1], [-1, 1], [N_USERS + 1, 1]])
    mean, var = converted.predict(rows)
    assert mean[0] == mean[1] and var[0] == var[1]  # the 0-rating user is the cold-start user
    np.testing.assert_allclose(mean, extended.predict(rows)[0], rtol=1e-5)
    assert converted.to(dtype=torch.float64).dtype == torch.float64


def test_replaced_user_rows_are_checked() -> None:
    post = _post(_random_module(), embedding_reg=1.0, bias_reg=1.0)
    user = fold_in(post, [1, 3], [2.0, 5.0])
    with pytest.raises(ValueError, match="must not repeat a user"):
        post.with_replaced_users([1, 1], [user, user])
    with pytest.raises(ValueError, match="has 1 entries but 2 users were given"):
        post.with_replaced_users([1], [user, user])
    with pytest.raises(ValueError, match="1-d array of user indices"):
        post.with_replaced_users([[1]], [user])
    replaced = post.with_replaced_users([2], [user])
    assert replaced.n_levels == post.n_levels
    np.testing.assert_array_equal(replaced.embeddings[0][2].numpy(), user.input)
    np.testing.assert_array_equal(replaced.embeddings[0][3].numpy(), post.embeddings[0][3].numpy())
