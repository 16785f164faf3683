"""The comparison's report: files written once, read back into the same result, plots from memory."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mogp_surprise.comparison import compare, load_results, plot_results, write_results
from tests.comparison.test_run import TINY_MWGP


def test_write_load_and_replot(synthetic_data, tmp_path):
    result = compare(synthetic_data, algos=["mwgp", "svd"], n_folds=2, mwgp_params=TINY_MWGP)
    paths = write_results(result, tmp_path, title="tiny")
    for p in paths.values():
        assert Path(p).exists() and Path(p).stat().st_size > 0
    text = (tmp_path / "table.md").read_text()
    assert "MW-GP (ours)" in text and "homoscedastic" in text and "RMSE q=90%" in text
    loaded = load_results(tmp_path)
    assert set(loaded.curves) == {"mwgp", "svd"} and loaded.settings["n_folds"] == 2 and loaded.title == "tiny"
    pd.testing.assert_frame_equal(loaded.summary(), result.summary(), check_dtype=False, atol=1e-12)
    for key in ("mwgp", "svd"):
        for before, after in zip(result.curves[key], loaded.curves[key]):
            pd.testing.assert_frame_equal(after, before, check_dtype=False, atol=1e-12)
        pd.testing.assert_frame_equal(loaded.calibration[key], result.calibration[key], check_dtype=False)
    (tmp_path / "qp_rmse.png").unlink()
    plot_results(tmp_path)  # from the folder
    assert (tmp_path / "qp_rmse.png").exists()
    assert set(plot_results(result, tmp_path / "again")) == {"qp_rmse_png", "qp_mae_png", "calibration_png"}
    with pytest.raises(ValueError, match="`out_dir` is needed"):
        plot_results(result)
    with pytest.raises(FileNotFoundError, match="does not hold comparison results"):
        load_results(tmp_path / "empty")



def test_results_written_before_the_ranking_metrics_still_load_and_reuse(synthetic_data, tmp_path):
    """An older results folder (no precision/recall/NDCG columns, no rank settings) loads, prints and can
    be reused: its rows show no ranking metrics ("—"); a folder with other ranking settings is refused."""
    import json

    from mogp_surprise.comparison import AlgoSpec, reuse_results
    from tests.comparison.test_run import _Recorder

    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder()),
             "rec_b": AlgoSpec("B", "predictive", lambda seed, p: _Recorder())}
    write_results(compare(synthetic_data, algos=["rec_a"], n_folds=2, extra_algos=extra), tmp_path / "old",
                  plots=False)
    folds = pd.read_csv(tmp_path / "old" / "folds.csv")
    ranking = ["precision_at_10", "recall_at_10", "top_precision_at_10", "ndcg_at_10"]
    assert set(ranking) <= set(folds.columns)
    write_results(compare(synthetic_data, algos=["rec_a"], n_folds=2, extra_algos=extra), tmp_path / "no_top",
                  plots=False)  # written before top-k precision: that column alone shows "—"
    pd.read_csv(tmp_path / "no_top" / "folds.csv").drop(columns=["top_precision_at_10"]).to_csv(
        tmp_path / "no_top" / "folds.csv", index=False)
    with_top = reuse_results(compare(synthetic_data, algos=["rec_b"], n_folds=2, extra_algos=extra),
                             tmp_path / "no_top", ["rec_a"]).markdown()
    row_a = next(line for line in with_top.split("top-10 precision")[1].splitlines() if line.startswith("| A |"))
    assert row_a.split(" | ")[3] == "—" and "—" not in row_a.split(" | ")[1] + row_a.split(" | ")[4]
    folds.drop(columns=ranking).to_csv(tmp_path / "old" / "folds.csv", index=False)
    meta = json.loads((tmp_path / "old" / "results.json").read_text())
    meta["settings"] = {k: v for k, v in meta["settings"].items() if not k.startswith("rank_")}
    (tmp_path / "old" / "results.json").write_text(json.dumps(meta))
    old = load_results(tmp_path / "old")
    assert "precision@" not in old.markdown() and "RMSE q=100%" in old.markdown()
    now = compare(synthetic_data, algos=["rec_b"], n_folds=2, extra_algos=extra)
    merged = reuse_results(now, tmp_path / "old", ["rec_a"])
    table = merged.markdown()
    assert "| B | 0." in table.split("precision@10")[1] and "| A | — | — | — | — |" in table
    write_results(now, tmp_path / "k5", plots=False)  # k = 10 there
    other_k = compare(synthetic_data, algos=["rec_a"], n_folds=2, extra_algos=extra, rank_k=5)
    with pytest.raises(ValueError, match="rank_k=10.*rank_k=5 .*ranking metrics mean something else"):
        reuse_results(other_k, tmp_path / "k5", ["rec_b"])


def test_a_folder_of_results_is_never_dropped_and_point_estimates_alone_are_plotted(synthetic_data, tmp_path):
    """write_results refuses a folder holding results of algorithms the new result lacks (unless overwrite);
    a comparison of homoscedastic baselines alone draws their lines (it failed in plot_qp before)."""
    from mogp_surprise.comparison import reuse_results

    baselines = compare(synthetic_data, algos=["svd", "svd8"], n_folds=2)
    paths = write_results(baselines, tmp_path)
    assert {"qp_rmse_png", "qp_mae_png", "calibration_png"} <= set(paths)
    one = compare(synthetic_data, algos=["svd"], n_folds=2)
    before = (tmp_path / "folds.csv").read_bytes()
    with pytest.raises(ValueError, match=r"holds the results of \['svd8'\], which this comparison would drop"):
        write_results(one, tmp_path)
    assert (tmp_path / "folds.csv").read_bytes() == before
    write_results(reuse_results(one, tmp_path, ["svd8"]), tmp_path, plots=False)  # keeps every algorithm
    assert not (tmp_path / "qp_rmse.png").exists()  # the plots of the results replaced are gone, not stale
    write_results(one, tmp_path, plots=False, overwrite=True)
    assert set(load_results(tmp_path).curves) == {"svd"}
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        write_results(one, tmp_path / "afile" / "sub")


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "curves.csv").write_text((d / "curves.csv").read_text().splitlines()[0] + "\n"),
     r"'svd' has 2 folds in folds.csv but 0 curves"),
    (lambda d: (d / "results.json").write_text("{"), r"results.json is damaged: Expecting property name"),
    (lambda d: (d / "folds.csv").write_text(""), r"folds.csv is damaged: EmptyDataError"),
    (lambda d: (d / "calibration.csv").write_text("x\n1\n"), r"calibration.csv is damaged: it lacks the columns"),
])
def test_a_damaged_results_folder_is_refused_naming_the_file(synthetic_data, tmp_path, damage, message):
    write_results(compare(synthetic_data, algos=["svd"], n_folds=2), tmp_path, plots=False)
    damage(tmp_path)
    with pytest.raises(ValueError, match=message):
        load_results(tmp_path)
