"""compare: every algorithm on identical seeded folds, metrics from predictive arrays; reuse of earlier folds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from surprise import AlgoBase

from mogp_surprise.comparison import AlgoSpec, compare, write_results
from mogp_surprise.datasets import make_synthetic_ratings

TINY_MWGP = {"n_epochs": 2, "n_inducing": 8, "batch_size": 256}


class _Recorder(AlgoBase):
    """Predicts the global mean with unit variance and records the test pairs it saw."""

    seen: list[list[tuple]] = []

    def fit(self, trainset):
        AlgoBase.fit(self, trainset)
        return self

    def estimate(self, u, i):
        return self.trainset.global_mean, {"var": 1.0, "std": 1.0}

    def test(self, testset, verbose=False):
        type(self).seen.append([(u, i) for u, i, _ in testset])
        return AlgoBase.test(self, testset)


def test_compare_uses_identical_folds_and_collects_metrics(synthetic_data):
    _Recorder.seen = []
    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder()),
             "rec_b": AlgoSpec("B", "predictive", lambda seed, p: _Recorder())}
    result = compare(synthetic_data, algos=["rec_a", "mwgp", "rec_b"], n_folds=3, mwgp_params=TINY_MWGP,
                     extra_algos=extra)
    seen = _Recorder.seen
    assert len(seen) == 6
    for fold in range(3):
        assert seen[2 * fold] == seen[2 * fold + 1]  # A and B saw the same test pairs in each fold
    assert seen[0] != seen[2]
    folds = result.folds
    assert set(folds["algo"]) == {"rec_a", "mwgp", "rec_b"} and len(folds) == 9
    assert (folds.groupby("fold")["n_test"].nunique() == 1).all()
    assert folds["n_test"].sum() == 3 * len(synthetic_data.raw_ratings)
    summary = result.summary().set_index("algo")
    mwgp, const = summary.loc["mwgp"], summary.loc["rec_a"]
    assert mwgp["rmse_q100_mean"] < const["rmse_q100_mean"]
    assert const["sharpness_mean"] == pytest.approx(1.0)
    # predictions of A and B are identical, so their metrics (not their timings) are too
    metrics = [c for c in summary.columns if c.endswith(("_mean", "_std")) and not c.startswith(("fit_s", "test_s"))]
    pd.testing.assert_series_equal(summary.loc["rec_a", metrics], summary.loc["rec_b", metrics], check_names=False,
                                   atol=1e-12)


def test_compare_rejects_bad_arguments(synthetic_data):
    with pytest.raises(ValueError, match="unknown algorithm"):
        compare(synthetic_data, algos=["mwgp", "nope"])
    with pytest.raises(ValueError, match="n_folds"):
        compare(synthetic_data, algos=["svd"], n_folds=1)
    with pytest.raises(ValueError, match="`algos` must be a non-empty list of algorithm names, got 'svd'"):
        compare(synthetic_data, algos="svd")  # was read as the algorithms 's', 'v', 'd'
    with pytest.raises(ValueError, match="`algos` must be a non-empty list"):
        compare(synthetic_data, algos=[])
    with pytest.raises(TypeError, match="`extra_algos` maps names to AlgoSpec"):
        compare(synthetic_data, algos=["knn"], extra_algos={"knn": AlgoBase()})
    with pytest.raises(TypeError, match="compare takes a surprise Dataset .* got Trainset"):
        compare(synthetic_data.build_full_trainset(), algos=["svd"])
    with pytest.raises(ValueError, match=r"`algos` names \['svd'\] more than once"):
        compare(synthetic_data, algos=["svd", "svd"])
    with pytest.raises(ValueError, match="`random_state` must be an int >= 0: the folds are seeded"):
        compare(synthetic_data, algos=["svd"], random_state=None)
    n = len(synthetic_data.raw_ratings)
    with pytest.raises(ValueError, match=f"`n_folds`={n + 1} is more than the data set's {n} ratings"):
        compare(synthetic_data, algos=["svd"], n_folds=n + 1)
    for bad, message in (("4", "must be a finite number, got '4'"), (np.nan, "must be a finite number"),
                         (5.5, r"above the top of the rating scale \(1, 5\)")):
        with pytest.raises(ValueError, match=f"`rank_threshold`.*{message}"):
            compare(synthetic_data, algos=["svd"], rank_threshold=bad)
    with pytest.raises(ValueError, match="`reuse` needs `reuse_from`"):
        compare(synthetic_data, algos=["svd"], reuse=["svd8"])


class _BadVariance(AlgoBase):
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def fit(self, trainset):
        AlgoBase.fit(self, trainset)
        return self

    def estimate(self, u, i):
        return self.trainset.global_mean

    def predict_dist(self, testset):
        var = np.ones(len(testset))
        var[3] = self.value
        return np.full(len(testset), self.trainset.global_mean), var


@pytest.mark.parametrize("value", [-1.0, 0.0, np.nan])
def test_a_variance_that_is_not_positive_is_named_with_its_algorithm_and_fold(synthetic_data, value):
    extra = {"bad": AlgoSpec("Bad", "predictive", lambda seed, p: _BadVariance(value))}
    with pytest.raises(ValueError, match=r"bad, fold 1: predict_dist gave 1 variance\(s\) that are not > 0 "
                                         rf"\(first {value!r} at position 3\)"):
        compare(synthetic_data, algos=["bad"], n_folds=2, extra_algos=extra)


class _ZeroStdPredictions(AlgoBase):
    """Variances in its Predictions' details (no predict_dist), one of them 0."""

    def fit(self, trainset):
        AlgoBase.fit(self, trainset)
        return self

    def estimate(self, u, i):
        return self.trainset.global_mean, {"var": 0.0 if i == 0 else 1.0}


def test_a_zero_std_in_predictions_is_named_with_its_algorithm_and_fold(synthetic_data):
    """Read from the Predictions, it failed in the metrics without naming the algorithm or the fold."""
    extra = {"zv": AlgoSpec("Zero", "predictive", lambda seed, p: _ZeroStdPredictions())}
    with pytest.raises(ValueError, match=r"^zv, fold 1: `std` must be > 0 everywhere; got 0.0 at position \d+$"):
        compare(synthetic_data, algos=["zv"], n_folds=2, extra_algos=extra)


def test_numpy_arguments_are_saved_as_numbers_and_reused(synthetic_data, tmp_path):
    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder())}
    first = compare(synthetic_data, algos=["rec_a"], n_folds=np.int64(2), random_state=np.int64(0),
                    rank_k=np.int32(10), rank_threshold=np.float32(4), extra_algos=extra)
    write_results(first, tmp_path / "np", plots=False)
    import json
    settings = json.loads((tmp_path / "np" / "results.json").read_text())["settings"]
    assert (settings["n_folds"], settings["random_state"], settings["rank_k"], settings["rank_threshold"]) == (
        2, 0, 10, 4.0)
    second = compare(synthetic_data, algos=["svd"], n_folds=2, rank_threshold=4, reuse=["rec_a"],
                     reuse_from=tmp_path / "np")
    assert list(second.summary()["algo"]) == ["svd", "rec_a"]



def test_reuse_takes_earlier_per_fold_results_on_the_same_folds(synthetic_data, tmp_path):
    """--reuse: an algorithm's per-fold rows, curves and calibration come back unchanged from an
    earlier run; a run on other folds (another seed) is refused."""
    from mogp_surprise.comparison import reuse_results

    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder())}
    with pytest.warns(UserWarning, match=r"mwgp_paper keeps the paper's n_epochs=30 \(not 2\); mwgp_params apply"):
        first = compare(synthetic_data, algos=["rec_a", "mwgp_paper"], n_folds=2, mwgp_params=TINY_MWGP,
                        extra_algos=extra)
    write_results(first, tmp_path / "first")
    second = compare(synthetic_data, algos=["mwgp"], n_folds=2, mwgp_params=TINY_MWGP)
    merged = reuse_results(second, tmp_path / "first", ["rec_a", "mwgp_paper"])
    assert list(merged.summary()["algo"]) == ["mwgp", "rec_a", "mwgp_paper"]
    old = first.folds.set_index(["algo", "fold"])
    new = merged.folds.set_index(["algo", "fold"])
    for algo in ("rec_a", "mwgp_paper"):
        np.testing.assert_allclose(new.loc[algo, "rmse_q100"].to_numpy(), old.loc[algo, "rmse_q100"].to_numpy())
        assert len(merged.curves[algo]) == 2
        np.testing.assert_allclose(merged.curves[algo][1]["rmse"].to_numpy(), first.curves[algo][1]["rmse"].to_numpy())
    # the paper's model is not the default model: the two differ on the same folds
    assert new.loc["mwgp", "rmse_q100"].to_numpy().tolist() != old.loc["mwgp_paper", "rmse_q100"].to_numpy().tolist()
    paths = write_results(merged, tmp_path / "merged")
    assert paths["qp_rmse_png"].exists()
    other_seed = compare(synthetic_data, algos=["rec_a"], n_folds=2, random_state=1, extra_algos=extra)
    with pytest.raises(ValueError, match="random_state"):
        reuse_results(other_seed, tmp_path / "first", ["mwgp_paper"])
    with pytest.raises(ValueError, match="holds"):
        reuse_results(second, tmp_path / "first", ["svdpp"])


def test_reuse_refuses_results_of_another_data_set(synthetic_data, tmp_path):
    from mogp_surprise.comparison import reuse_results
    from mogp_surprise.datasets import to_surprise_dataset

    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder())}
    write_results(compare(synthetic_data, algos=["rec_a"], n_folds=2, extra_algos=extra), tmp_path / "first")
    smaller = make_synthetic_ratings(n_users=60, n_items=40, n_ratings=800, random_state=1)
    other = to_surprise_dataset(smaller[["user", "item", "rating"]], rating_scale=(1, 5))
    with pytest.raises(ValueError, match="test ratings"):
        reuse_results(compare(other, algos=["rec_a"], n_folds=2, extra_algos=extra), tmp_path / "first", ["rec_a"])



def test_reuse_refuses_the_same_number_of_other_ratings_and_notes_what_it_took(synthetic_data, tmp_path):
    """Found by a user: results of another data set with as many ratings (or the same ratings in another order,
    hence other folds) were merged without a word. The data's digest is compared before any fit; a folder written
    before digests existed is taken with a warning; the table says which rows came from where, with MW-GP's
    parameters there."""
    import json

    from mogp_surprise.datasets import to_surprise_dataset

    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder())}
    first = compare(synthetic_data, algos=["rec_a", "mwgp"], n_folds=2, mwgp_params=TINY_MWGP, extra_algos=extra)
    write_results(first, tmp_path / "first", plots=False)
    shuffled = to_surprise_dataset(pd.DataFrame(synthetic_data.raw_ratings[::-1], columns=["user", "item", "rating",
                                                                                         "t"]).drop(columns="t"),
                                   rating_scale=synthetic_data.reader.rating_scale)
    fitted = []
    never = {"rec_b": AlgoSpec("B", "predictive", lambda seed, p: fitted.append(1) or _Recorder())}
    with pytest.raises(ValueError, match=r"cannot reuse .*first: it was run on other ratings, or the same ones in "
                                         r"another order \(data digest \w+, now \w+\), so its folds are not these"):
        compare(shuffled, algos=["rec_b"], n_folds=2, extra_algos=never, reuse=["mwgp"], reuse_from=tmp_path / "first")
    assert not fitted  # refused before any fit
    merged = compare(synthetic_data, algos=["svd"], n_folds=2, reuse=["mwgp"], reuse_from=tmp_path / "first")
    write_results(merged, tmp_path / "merged", plots=False)
    assert f"mwgp from {tmp_path / 'first'} (MW-GP's parameters there: {TINY_MWGP})" in merged.markdown()
    again = compare(synthetic_data, algos=["svd8"], n_folds=2, reuse=["mwgp", "svd"], reuse_from=tmp_path / "merged")
    note = again.markdown()
    assert f"mwgp, svd from {tmp_path / 'merged'}; mwgp from {tmp_path / 'first'} (MW-GP's parameters" in note
    import re  # one variance for every rating: no q < 100 % cells
    assert re.search(r"\| BiasedMF \(Surprise SVD\) \| homoscedastic \| [\d.]+ ± [\d.]+ \| — \| — \| [\d.]+ ± [\d.]+ \| — \| — \|",
                     note)
    meta = json.loads((tmp_path / "first" / "results.json").read_text())
    del meta["settings"]["data_digest"]  # as written before digests existed
    (tmp_path / "first" / "results.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="written before comparisons recorded their data: that it was run on these"):
        compare(synthetic_data, algos=["svd8"], n_folds=2, reuse=["mwgp"], reuse_from=tmp_path / "first")


def test_arguments_that_would_fail_a_later_fit_are_refused_before_the_first(synthetic_data):
    """mwgp_params were checked when MW-GP was built, after the algorithms listed before it had run (minutes of
    SVD++ on ML-100K); ratings outside the Reader's scale and a relevance threshold at its bottom (every ranking
    metric 1) went through."""
    from mogp_surprise.datasets import to_surprise_dataset

    fitted = []
    first = {"rec": AlgoSpec("R", "predictive", lambda seed, p: fitted.append(1) or _Recorder())}
    with pytest.raises(ValueError, match="n_inducing"):
        compare(synthetic_data, algos=["rec", "mwgp"], n_folds=2, mwgp_params={"n_inducing": -1}, extra_algos=first)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['n_inducng'\]"):
        compare(synthetic_data, algos=["rec", "mwgp_paper"], n_folds=2, mwgp_params={"n_inducng": 64},
                extra_algos=first)
    doubled = pd.DataFrame(synthetic_data.raw_ratings, columns=["user", "item", "rating", "t"]).drop(columns="t")
    data = to_surprise_dataset(doubled.assign(rating=2 * doubled.rating), rating_scale=(2, 10))
    data.reader.rating_scale = (1, 5)  # a Reader that says otherwise
    with pytest.raises(ValueError, match=r"ratings range over \[2, 10\], outside its rating scale \(1, 5\)"):
        compare(data, algos=["rec"], n_folds=2, extra_algos=first)
    with pytest.raises(ValueError, match=r"`rank_threshold`=1 is at or below the bottom of the rating scale"):
        compare(synthetic_data, algos=["rec"], n_folds=2, rank_threshold=1, extra_algos=first)
    assert not fitted
    with pytest.warns(UserWarning, match=r"mwgp_params \{'n_epochs': 2\} apply to no algorithm this comparison"):
        result = compare(synthetic_data, algos=["rec"], n_folds=2, mwgp_params={"n_epochs": 2}, extra_algos=first)
    assert result.settings["mwgp_params"] == {}


class _Scored(AlgoBase):
    """A deterministic, distinct score per (user, item) (ranking differs from the ratings' order), unit variance."""

    def fit(self, trainset):
        AlgoBase.fit(self, trainset)
        return self

    def estimate(self, u, i):
        user = u[5:] if isinstance(u, str) else self.trainset.to_raw_uid(u)  # "UKN__<raw id>": not in training
        item = i[5:] if isinstance(i, str) else self.trainset.to_raw_iid(i)
        return _score(user, item), {"var": 1.0}


def _score(user, item) -> float:
    return 1.0 + (int(user[1:]) * 7 + int(item[1:]) * 13) % 41 / 10.0  # 1.0 ... 5.0


def test_compare_reports_ranking_metrics_of_every_users_test_items(synthetic_data):
    """precision@k / recall@k / NDCG@k per fold are those of evaluation.ranking_report on the fold's test
    ratings, the users' ids and the clipped predicted mean; the threshold defaults to 4 on a 1-5 scale."""
    from surprise.model_selection import KFold

    from mogp_surprise.evaluation import ranking_report

    extra = {"scored": AlgoSpec("S", "predictive", lambda seed, p: _Scored())}
    default = compare(synthetic_data, algos=["scored"], n_folds=2, extra_algos=extra)
    custom = compare(synthetic_data, algos=["scored"], n_folds=2, extra_algos=extra, rank_k=5, rank_threshold=3.5)
    assert default.settings["rank_k"] == 10 and default.settings["rank_threshold"] == 4.0
    assert custom.settings["rank_threshold"] == 3.5
    splits = KFold(n_splits=2, random_state=0, shuffle=True).split(synthetic_data)
    for fold, (_, testset) in enumerate(splits):
        users = [u for u, _, _ in testset]
        y = [r for _, _, r in testset]
        score = [_score(u, i) for u, i, _ in testset]
        for result, k, threshold in ((default, 10, 4.0), (custom, 5, 3.5)):
            row = result.folds.iloc[fold]
            expected = ranking_report(users, y, score, k=k, threshold=threshold)
            for name in (f"precision_at_{k}", f"recall_at_{k}", f"top_precision_at_{k}", f"ndcg_at_{k}"):
                assert row[name] == pytest.approx(expected[name]), (name, fold)
            assert 0.0 < row[f"precision_at_{k}"] < 1.0 and 0.0 < row[f"ndcg_at_{k}"] < 1.0
    assert "precision_at_10" not in custom.folds
    assert "| algorithm | precision@5 | recall@5 | top-5 precision | NDCG@5 |" in custom.markdown()
    with pytest.raises(ValueError, match="rank_k"):
        compare(synthetic_data, algos=["scored"], n_folds=2, extra_algos=extra, rank_k=0)
