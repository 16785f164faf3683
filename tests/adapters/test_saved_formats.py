"""Model files written by earlier releases keep loading and predicting what they predicted.

- ``tests/fixtures/format_v1``: small format-1 files on synthetic ratings, written by mogp_surprise 0.1.0
  (``write_fixtures.py`` says how), with the predictions that release made (``expected.json``);
- the project's shared fixtures (``../shared/fixtures/format-v1``, MovieLens-based, not in the repository;
  ``$MOGP_FIXTURES`` points elsewhere): skipped, saying so, where they are absent.

Models compute in float32: predictions agree to float32 rounding of a different order of operations (5e-4 of
max(1, |value|), as the shared fixtures' README sets; the synthetic ones are checked to 2e-5).
"""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from surprise import dump

from mogp_surprise import MWGP, MWGPRegressor
from tests.fixtures import FORMAT_V1, SHARED, v1_expected


def _close(got, want, tol: float) -> None:
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert np.all(np.abs(got - want) <= tol * np.maximum(1.0, np.abs(want))), np.abs(got - want).max()


@pytest.mark.parametrize("name", ["surprise_default", "surprise_paper"])
def test_format_1_surprise_files_predict_what_they_predicted(name) -> None:
    expected = v1_expected()
    algo = MWGP.load(FORMAT_V1 / f"{name}.pt")
    got = [algo.predict_dist(u, i) for u, i in expected["test_pairs"]]
    _close(got, expected[name], 2e-5)
    assert algo.mf_rank == (4 if name == "surprise_default" else 0) and algo.extra_terms == ()
    assert algo.chosen_params_ == {"n_epochs": len(algo.loss_history_), "lr": algo.lr, "mf_reg": algo.mf_reg}


def test_the_format_1_paper_model_has_no_noise_term_and_serves_a_new_user() -> None:
    """Its file holds the all-ones noise scales of a homoscedastic model; migrated as a noise term whose
    population it never saved, fold-in ended in a KeyError."""
    algo = MWGP.load(FORMAT_V1 / "surprise_paper.pt")
    assert algo.posterior_.term("noise_offset") is None
    assert MWGP.load(FORMAT_V1 / "surprise_default.pt").posterior_.term("noise_offset") is not None
    before = algo.predict_dist("someone-new", "i3")
    answers = {"i1": 5.0, "i2": 5.0, "i4": 5.0}
    assert len(algo.ask("someone-new", n=2, ratings=answers)) == 2
    recommended = algo.recommend("someone-new", n=3, ratings=answers)
    algo.fold_in("someone-new", answers)
    assert algo.recommend("someone-new", n=3)["item"].tolist() == recommended["item"].tolist()
    assert algo.predict_dist("someone-new", "i3")[1] < before[1]


def test_a_format_1_pickle_and_a_folded_user_predict_what_they_predicted() -> None:
    expected = v1_expected()
    with open(FORMAT_V1 / "surprise_default.pkl", "rb") as fh:  # what surprise.dump wrote: a pickled MWGP
        algo = pickle.load(fh)
    _close([algo.predict_dist(u, i) for u, i in expected["test_pairs"]], expected["surprise_default"], 2e-5)
    folded = MWGP.load(FORMAT_V1 / "surprise_folded.pt")
    _close([folded.predict_dist("new-user", f"i{k}") for k in range(10)], expected["surprise_folded"], 2e-5)
    # and it can be folded in again, and saved in the current format
    folded.fold_in("new-user", {"i4": 3.0})
    assert folded.predict_dist("new-user", "i4")[0] != pytest.approx(expected["surprise_folded"][4][0], abs=1e-6)


def test_format_1_scikit_learn_files_with_a_context_column_predict_what_they_predicted(tmp_path) -> None:
    expected = np.asarray(v1_expected()["sklearn_context"])
    # the rows write_fixtures.py predicted: rows 1400-1499 of its data, whose (user, item) pairs are the first
    # 100 test pairs, with the period column (row number % 3)
    pairs = v1_expected()["test_pairs"][:100]
    X = pd.DataFrame({"user": [u for u, _ in pairs], "item": [i for _, i in pairs],
                      "period": np.arange(1400, 1500) % 3})
    for est in (MWGPRegressor.load(FORMAT_V1 / "sklearn_context.pt"),
                pickle.load(open(FORMAT_V1 / "sklearn_context.pkl", "rb"))):
        _close(np.stack(est.predict_dist(X), 1), expected, 2e-5)
        est.save(tmp_path / "again.pt")
        again = MWGPRegressor.load(tmp_path / "again.pt")
        for a, b in zip(again.predict_dist(X), est.predict_dist(X)):
            np.testing.assert_array_equal(a, b)


def test_a_format_1_file_saved_before_the_bilinear_term_loads_as_the_model_it_holds(tmp_path) -> None:
    """A format-1 file without `mf_rank` (saved before the bilinear term existed; its posterior has no factors)
    loads with mf_rank=0, the model it holds, not today's default, and predicts as saved."""
    payload = torch.load(FORMAT_V1 / "surprise_paper.pt", weights_only=True)
    del payload["hyper_params"]["mf_rank"], payload["hyper_params"]["mf_reg"]
    for key in ("mf_mean", "mf_var", "mf_factors", "mf_level_var"):
        payload["posterior"].pop(key, None)
    torch.save(payload, tmp_path / "old.pt")
    old = MWGP.load(tmp_path / "old.pt")
    assert old.mf_rank == 0 and old.posterior_.term("bilinear") is None
    expected = v1_expected()
    _close([old.predict_dist(u, i) for u, i in expected["test_pairs"]], expected["surprise_paper"], 2e-5)


SHARED_V1 = SHARED / "format-v1"
needs_shared = pytest.mark.skipif(not (SHARED_V1 / "expected.csv").exists(),
                                  reason=f"the project's shared fixtures are not at {SHARED_V1} (set MOGP_FIXTURES)")


@needs_shared
@pytest.mark.parametrize("name", ["surprise_default", "surprise_default.dump", "surprise_paper", "surprise_folded",
                                  "sklearn_context", "sklearn_context.pkl"])
def test_the_shared_format_1_files_predict_what_expected_csv_says(name) -> None:
    expected = pd.read_csv(SHARED_V1 / "expected.csv", dtype={"user": str, "item": str})
    model = name.split(".")[0]
    rows = expected[expected["model"] == model]
    assert len(rows) >= 500
    if model.startswith("sklearn"):
        est = (pickle.load(open(SHARED_V1 / name, "rb")) if name.endswith(".pkl")
               else MWGPRegressor.load(SHARED_V1 / f"{name}.pt"))
        X = pd.DataFrame({"user": rows["user"].astype(int), "item": rows["item"].astype(int),
                          "period": rows["period"].astype(int)})
        mean, var = est.predict_dist(X)
    else:
        algo = dump.load(str(SHARED_V1 / name))[1] if name.endswith(".dump") else MWGP.load(SHARED_V1 / f"{name}.pt")
        mean, var = algo.predict_dist(list(zip(rows["user"], rows["item"])))
    _close(mean, rows["mean"], 5e-4)
    _close(var, rows["var"], 5e-4)


@needs_shared
@pytest.mark.parametrize("name", ["surprise_default", "surprise_default.dump", "surprise_paper", "surprise_folded"])
def test_the_shared_format_1_files_fold_in_ask_and_recommend_for_a_new_user(name) -> None:
    """Every Surprise model of the earlier release serves a new user: fold-in (the paper's model had migrated
    with a noise term whose population it never saved: KeyError), ask and recommend with ratings."""
    algo = dump.load(str(SHARED_V1 / name))[1] if name.endswith(".dump") else MWGP.load(SHARED_V1 / f"{name}.pt")
    answers = {"50": 5, "181": 5, "100": 5, "258": 5}
    before = algo.predict_dist("someone-new", "174")
    recommended = algo.recommend("someone-new", n=3, ratings=answers)
    asked = algo.ask("someone-new", n=2, ratings=answers)
    algo.fold_in("someone-new", answers)
    after = algo.predict_dist("someone-new", "174")
    assert len(recommended) == 3 and not set(recommended["item"]) & set(answers) and len(asked) == 2
    assert after[0] > before[0] and 0 < after[1] < before[1]  # four 5s: a higher mean, a narrower interval
    assert algo.recommend("someone-new", n=3)["item"].tolist() == recommended["item"].tolist()
