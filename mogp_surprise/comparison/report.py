"""The comparison's report: a paper-style table, files (Markdown, CSV, JSON) and plots, from a :class:`CompareResult`.

Everything is drawn from the result in memory; :func:`load_results` reads a written folder back
into the same object (for ``mogp-surprise qp-plot DIR`` and for re-using slow baselines' folds).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from ..evaluation import plot_calibration, plot_qp, qp_curves_over_folds, save_figure
from .result import CompareResult

_FILES = ("folds.csv", "curves.csv", "calibration.csv", "results.json")


def write_results(result: CompareResult, out_dir: str | Path, title: str = "", plots: bool = True) -> dict[str, Path]:
    """Save table.md/.csv, folds.csv, curves.csv, calibration.csv, results.json and (``plots``) the PNG
    plots of :func:`plot_results`, which need matplotlib."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = title or result.title
    paths = {"table_md": out / "table.md", "table_csv": out / "table.csv", "folds_csv": out / "folds.csv",
             "curves_csv": out / "curves.csv", "calibration_csv": out / "calibration.csv", "json": out / "results.json"}
    summary = result.summary()
    paths["table_md"].write_text((f"# {title}\n\n" if title else "") + result.markdown())
    summary.to_csv(paths["table_csv"], index=False)
    result.folds.to_csv(paths["folds_csv"], index=False)
    curves = pd.concat([c.assign(algo=k, fold=f) for k, cs in result.curves.items() for f, c in enumerate(cs)])
    curves.to_csv(paths["curves_csv"], index=False)
    calib = pd.concat([c.assign(algo=k) for k, c in result.calibration.items()])
    calib.to_csv(paths["calibration_csv"], index=False)
    paths["json"].write_text(json.dumps({"title": title, "settings": result.settings,
                                         "summary": summary.to_dict(orient="records")}, indent=2, default=str))
    if plots:
        paths.update(plot_results(result, out, title=title))
    return paths


def check_reusable(previous: CompareResult, algos: Sequence[str], where: str) -> None:
    """``ValueError`` unless ``previous`` holds results of every one of ``algos`` (checked by the command line
    before any fit, and by :func:`reuse_results`)."""
    missing = [a for a in algos if a not in previous.curves]
    if missing:
        raise ValueError(f"cannot reuse {missing} from {where}: it holds {sorted(previous.curves)}")


def load_results(out_dir: str | Path) -> CompareResult:
    """Read a folder written by :func:`write_results` back into a :class:`CompareResult`."""
    out = Path(out_dir)
    missing = [n for n in _FILES if not (out / n).exists()]
    if missing:
        raise FileNotFoundError(f"{out} does not hold comparison results: missing {missing} "
                                "(write them with `mogp-surprise compare --out DIR`)")
    folds = pd.read_csv(out / "folds.csv")
    curves, calib = pd.read_csv(out / "curves.csv"), pd.read_csv(out / "calibration.csv")
    meta = json.loads((out / "results.json").read_text())
    algos = list(dict.fromkeys(folds["algo"]))
    per_fold = {a: [g.drop(columns=["algo", "fold"]).reset_index(drop=True)
                    for _, g in curves[curves["algo"] == a].groupby("fold", sort=True)] for a in algos}
    calibration = {a: calib[calib["algo"] == a].drop(columns=["algo"]).reset_index(drop=True) for a in algos}
    return CompareResult(folds, per_fold, calibration, meta.get("settings", {}), title=meta.get("title", ""))


def plot_results(results: CompareResult | str | Path, out_dir: str | Path | None = None,
                 title: str = "") -> dict[str, Path]:
    """Draw the QP plots (RMSE, MAE) and the calibration plot as PNGs in ``out_dir``.

    ``results``: a :class:`CompareResult`, or a folder written by :func:`write_results` (then
    ``out_dir`` defaults to that folder).
    """
    import matplotlib.pyplot as plt

    if not isinstance(results, CompareResult):
        out_dir = results if out_dir is None else out_dir
        results = load_results(results)
    if out_dir is None:
        raise ValueError("`out_dir` is needed to plot a CompareResult (where to write the PNGs)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = title or results.title
    summary = results.summary()
    labels = dict(zip(summary["algo"], summary["label"]))
    kinds = dict(zip(summary["algo"], summary["uncertainty"]))
    colors = {label: f"C{k}" for k, label in enumerate(summary["label"])}  # one colour per model everywhere
    paths = {}
    for metric in ("rmse", "mae"):
        per_algo = {labels[k]: qp_curves_over_folds(c) for k, c in results.curves.items()
                    if kinds.get(k) != "homoscedastic"}
        baselines = {labels[k]: float(summary.loc[summary["algo"] == k, f"{metric}_q100_mean"].iloc[0])
                     for k in summary["algo"] if kinds.get(k) == "homoscedastic"}
        fig, ax = plt.subplots(figsize=(6, 4))
        plot_qp(per_algo, metric=metric, baselines=baselines or None, ax=ax, colors=colors,
                title=f"{title} — {metric.upper()} on the q most confident predictions" if title else None)
        paths[f"qp_{metric}_png"] = save_figure(fig, out / f"qp_{metric}.png")
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    plot_calibration({labels[k]: c for k, c in results.calibration.items()}, ax=ax,
                     title=f"{title} — calibration" if title else None, colors=colors)
    paths["calibration_png"] = save_figure(fig, out / "calibration.png")
    plt.close(fig)
    return paths


def reuse_results(result: CompareResult, previous: CompareResult | str | Path, algos: Sequence[str],
                  where: str | None = None) -> CompareResult:
    """Add the per-fold results of ``algos`` from an earlier comparison (or its :func:`write_results`
    folder) to ``result``.

    For adding or re-running one algorithm without re-fitting slow baselines (SVD++ takes minutes
    per ML-1M fold). The earlier run must have used the same folds: the same number of folds and
    seed, and the same number of test ratings in every fold (all checked; a different data set
    almost always differs there), and the same ``rank_k`` and ``rank_threshold`` when it has ranking
    metrics (results written before them had none: their rows show no ranking metrics). ``where``: how errors
    name ``previous`` (default: its folder, or "the earlier result").
    """
    if not isinstance(previous, CompareResult):
        where, previous = where or previous, load_results(previous)
    else:
        where = where or "the earlier result"
    old = previous.settings
    for key in ("n_folds", "random_state", "rank_k", "rank_threshold"):
        if key.startswith("rank_") and key not in old:  # written before the ranking metrics: they stay empty
            continue
        if old.get(key) != result.settings.get(key):
            why = "its ranking metrics mean something else" if key.startswith("rank_") else "the folds would differ"
            raise ValueError(f"cannot reuse {where}: it was run with {key}={old.get(key)!r}, "
                             f"this comparison with {key}={result.settings[key]!r} ({why})")
    sizes_now = result.folds.groupby("fold")["n_test"].first().to_dict()
    sizes_then = previous.folds.groupby("fold")["n_test"].first().to_dict()
    if sizes_now != sizes_then:
        raise ValueError(f"cannot reuse {where}: its folds hold {sizes_then} test ratings, this "
                         f"comparison's {sizes_now} (another data set or split)")
    check_reusable(previous, algos, where)
    clash = [a for a in algos if a in result.curves]
    if clash:
        raise ValueError(f"{clash} were both run now and requested from {where}")
    settings = {**result.settings, "algos": [*result.settings["algos"], *algos],
                "reused": {"from": str(where), "algos": list(algos)}}
    merged = pd.concat([result.folds, previous.folds[previous.folds["algo"].isin(algos)]], ignore_index=True)
    return CompareResult(merged, {**result.curves, **{a: previous.curves[a] for a in algos}},
                         {**result.calibration, **{a: previous.calibration[a] for a in algos}}, settings, result.title)
