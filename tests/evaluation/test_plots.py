"""QP and calibration plots render to an Axes and a small PNG."""
from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip(
    "matplotlib", reason="matplotlib not installed (pip install -e '.[plot]'): plots untested"
)

from mogp_surprise.evaluation import (  # noqa: E402
    calibration_curve,
    plot_calibration,
    plot_qp,
    qp_curve,
    qp_curves_over_folds,
    save_figure,
)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    mean = rng.uniform(1, 5, 500)
    std = rng.uniform(0.3, 1.5, 500)
    return mean + std * rng.standard_normal(500), mean, std


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_plot_qp_single_and_folds_with_baselines(data, tmp_path):
    from matplotlib.axes import Axes

    y, mean, std = data
    single = qp_curve(y, mean, std, 10)
    folds = qp_curves_over_folds([single, qp_curve(y[::-1], mean, std, 10)])
    ax = plot_qp({"MW-GP": single, "MW-GP (5 folds)": folds}, metric="mae",
                 baselines={"SVD": 0.9, "SVD++": 0.95}, title="QP-plot")
    assert isinstance(ax, Axes)
    assert ax.get_title() == "QP-plot" and ax.get_ylabel() == "MAE"
    assert len(ax.containers) == 1  # the error bars of the fold average
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels) == ["MW-GP", "MW-GP (5 folds)", "SVD", "SVD++"]
    np.testing.assert_allclose(ax.lines[0].get_xdata(), np.arange(10, 101, 10))
    path = save_figure(ax, tmp_path / "sub" / "qp.png")
    assert path.exists() and 0 < path.stat().st_size < 100_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_on_given_axes_and_calibration(data, tmp_path):
    import matplotlib.pyplot as plt

    y, mean, std = data
    fig, (left, right) = plt.subplots(1, 2)
    assert plot_qp({"m": qp_curve(y, mean, std, 5)}, ax=left) is left
    ax = plot_calibration({"calibrated": calibration_curve(y, mean, std),
                           "over-confident": calibration_curve(y, mean, std / 2)}, ax=right)
    assert ax is right and len(ax.lines) == 3  # diagonal + two curves
    assert save_figure(fig, tmp_path / "both.png", dpi=60).stat().st_size < 100_000


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda c: plot_qp({"m": c}, metric="nll"), r"`metric` must be a column.*got 'nll'"),
        (lambda c: plot_qp({}), "`curves` must be a non-empty dict"),
        (lambda c: plot_qp({"m": c}, baselines={"svd": float("nan")}), r"`baselines\['svd'\]`"),
        (lambda c: plot_calibration({"m": c}), r"`curves\['m'\]` must be a calibration_curve"),
        (lambda c: save_figure(c, "x.png"), "`fig` must be a matplotlib Figure or Axes"),
        (lambda c: save_figure(plot_qp({"m": c}), "x.png", dpi=0), "`dpi` must be a positive"),
    ],
)
def test_plot_bad_inputs(data, call, match):
    with pytest.raises(ValueError, match=match):
        call(qp_curve(*data, 4))


def test_plot_qp_of_baselines_alone_and_numpy_numbers():
    """A comparison of point-estimate models only draws their lines over q = 0..100 %; numpy numbers are numbers."""
    ax = plot_qp({}, baselines={"SVD": np.float32(0.9), "SVD8": np.int64(1)})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["SVD", "SVD8"]
    assert ax.get_xlim() == (0.0, 100.0)
    with pytest.raises(ValueError, match=r"`curves` must be a non-empty dict label -> qp_curve DataFrame \(or give"):
        plot_qp({})
    with pytest.raises(ValueError, match=r"`baselines\['b'\]` must be a finite number; got np.True_"):
        plot_qp({}, baselines={"b": np.bool_(True)})
