"""Reading states of older formats (mogp_surprise.core.migrations): the format-1 posteriors written by
mogp_surprise 0.1.0, and format-1 states written before a feature existed (they lack its entries).

The fixtures are small format-1 files on synthetic ratings written by 0.1.0 (``tests/fixtures/format_v1``);
``tests/adapters/test_saved_formats.py`` loads them, and the project's MovieLens fixtures, through the
adapters.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.posterior import MWGPPosterior
from tests.fixtures import v1_payload

PAIRS = np.array([[u, i] for u in (-1, 0, 3, 17) for i in (-1, 0, 5, 9)])


def _v1(name: str) -> dict:
    return v1_payload(name)["posterior"]


def _same(a: MWGPPosterior, b: MWGPPosterior) -> None:
    for x, y in zip(a.predict(PAIRS), b.predict(PAIRS)):
        np.testing.assert_array_equal(x, y)


def test_a_format_1_state_becomes_every_term_of_its_model() -> None:
    old = _v1("surprise_default")
    assert "format_version" not in old and "foldin" in old
    post = MWGPPosterior.from_state_dict(old)
    assert [t.name for t in post.state.terms] == ["gp_input", "bias", "bilinear", "noise_offset"]
    assert post.state_dict()["format_version"] == 2
    assert post.term("bilinear").term.options["rank"] == 4 and post.latent_dim == 3
    inputs = post.term("gp_input")
    assert inputs.term.options == {"latent_dim": 3, "embedding_reg": 10.0, "implicit": True}
    torch.testing.assert_close(inputs.tables["embedding_0"].values, old["embeddings"][0])
    torch.testing.assert_close(inputs.tables["implicit_0"].values, old["foldin"]["item_implicit"])
    noise = post.term("noise_offset").tables["offset_1"].values
    torch.testing.assert_close(noise[:, 0], old["foldin"]["noise_offset_mean"][1])
    torch.testing.assert_close(noise[:, 1], old["foldin"]["noise_offset_logvar"][1])
    # once migrated, a round trip through the new format changes nothing
    _same(post, MWGPPosterior.from_state_dict(post.state_dict()))


def test_a_format_1_state_predicts_what_it_predicted() -> None:
    """The migrated posterior against the format-1 posterior's own formulas: noise sigma^2 prod_f scale_f and
    the stored kernel expectations (recomputed now) give the same predictions to float32 rounding."""
    old = _v1("surprise_default")
    post = MWGPPosterior.from_state_dict(old)
    mean, var = post.predict(PAIRS)
    _, latent = post.predict(PAIRS, include_noise=False)
    scales = [old["noise_scales"][f] for f in (0, 1)]
    unseen = old["noise_scale_unseen"]
    want = [float(old["noise"]) * float(scales[0][u] if u >= 0 else unseen[0]) *
            float(scales[1][i] if i >= 0 else unseen[1]) for u, i in PAIRS]
    np.testing.assert_allclose((var - latent) / post.rating_std ** 2, want, rtol=1e-5)
    for f in (0, 1):  # the recomputed psi statistics of the unseen levels
        np.testing.assert_allclose(post.psi[f][0].numpy(), old["psi1"][f].numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(post.psi[f][1].numpy(), old["psi2"][f].numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("drop, check", [
    (("noise_scales", "noise_scale_unseen"), "no noise term"),
    (("mf_mean", "mf_var", "mf_factors", "mf_level_var"), "no bilinear term"),
    (("cold_scale",), "uncalibrated"),
    (("foldin",), "no fold-in"),
    (("input_var", "level_bias_var", "mf_level_var"), "no laplace"),
], ids=["before-per-level-noise", "before-the-bilinear-term", "before-the-calibration", "before-fold-in",
        "before-embedding-uncertainty"])
def test_states_written_before_a_feature_existed_load_as_the_model_they_hold(drop, check) -> None:
    """A paper-model state (one noise variance, no bilinear term) lacking the entries of a later feature predicts
    as it did; a default-model state without them loads as the model without the feature."""
    name = "surprise_paper" if check in ("no noise term", "no bilinear term") else "surprise_default"
    full = _v1(name)
    old = {k: v for k, v in full.items() if k not in drop}
    post = MWGPPosterior.from_state_dict(old)
    if check == "no noise term":
        assert post.term("noise_offset") is None
        _same(post, MWGPPosterior.from_state_dict(full))
        # a heteroscedastic state keeps its term; without its scales it loads as the model without the term
        with_noise = _v1("surprise_default")
        assert MWGPPosterior.from_state_dict(with_noise).term("noise_offset") is not None
        assert MWGPPosterior.from_state_dict({k: v for k, v in with_noise.items() if k not in drop}).term(
            "noise_offset") is None
    elif check == "no bilinear term":
        assert post.term("bilinear") is None
        _same(post, MWGPPosterior.from_state_dict(full))
    elif check == "uncalibrated":
        assert post.cold_scale.tolist() == [1.0] * 4
        scales = torch.tensor([1.0, 1.5, 2.0, 3.0])
        calibrated = MWGPPosterior.from_state_dict({**full, "cold_scale": scales})
        pattern = (PAIRS[:, 0] < 0) * 1 + (PAIRS[:, 1] < 0) * 2
        np.testing.assert_array_equal(post.predict(PAIRS)[0], calibrated.predict(PAIRS)[0])
        np.testing.assert_allclose(calibrated.predict(PAIRS, include_noise=False)[1],
                                   post.predict(PAIRS, include_noise=False)[1] * scales.numpy()[pattern], rtol=1e-6)
    elif check == "no fold-in":
        from mogp_surprise.core.foldin import fold_in

        with pytest.raises(ValueError, match="saved before fold-in existed"):
            fold_in(post, [0, 1], [3.0, 4.0])
    else:
        assert all(t.laplace_var is None for term in post.state.terms for t in term.tables.values())


def test_incomplete_format_1_states_are_refused() -> None:
    full = _v1("surprise_default")
    for key, needle in (("mf_factors", "not its two factor tables"), ("mf_level_var", "not those of its bilinear"),
                        ("embeddings", "missing the entries")):
        with pytest.raises(ValueError, match=needle):
            MWGPPosterior.from_state_dict({k: v for k, v in full.items() if k != key})
