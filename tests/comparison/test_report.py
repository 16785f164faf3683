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

