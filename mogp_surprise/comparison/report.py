"""The comparison's report: a paper-style table, files (Markdown, CSV, JSON) and plots, from a :class:`CompareResult`.

Everything is drawn from the result in memory; :func:`load_results` reads a written folder back
into the same object (for ``mogp-surprise qp-plot DIR`` and for re-using slow baselines' folds).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ..evaluation import plot_calibration, plot_qp, qp_curves_over_folds, save_figure
from .run import CompareResult

_FILES = ("folds.csv", "curves.csv", "calibration.csv", "results.json")


def _ranking_k(summary: pd.DataFrame, settings: dict[str, Any]) -> int | None:
    """The k of the ranking columns (``precision_at_{k}_mean``), None for results written before them."""
    found = [int(m.group(1)) for c in summary.columns if (m := re.fullmatch(r"precision_at_(\d+)_mean", c))]
    k = settings.get("rank_k")
    return k if k in found else (found[0] if found else None)


def summary_markdown(summary: pd.DataFrame, settings: dict[str, Any]) -> str:
    """Paper-style table: RMSE and MAE at q = 100/90/80 %, calibration, ranking metrics, times (mean ± std
    over folds). An algorithm without a column (reused from results written before it existed) shows "—"."""
    def pm(row: pd.Series, col: str, digits: int = 4) -> str:
        mean, std = row.get(f"{col}_mean", math.nan), row.get(f"{col}_std", math.nan)
        return "—" if pd.isna(mean) else f"{mean:.{digits}f} ± {std:.{digits}f}"

    head1 = ("| algorithm | uncertainty | RMSE q=100% | RMSE q=90% | RMSE q=80% | MAE q=100% | MAE q=90% | "
             "MAE q=80% |")
    lines = [head1, "|" + "---|" * 8]
    for _, r in summary.iterrows():
        lines.append(f"| {r['label']} | {r['uncertainty']} | " + " | ".join(
            pm(r, c) for c in ("rmse_q100", "rmse_q90", "rmse_q80", "mae_q100", "mae_q90", "mae_q80")) + " |")
    lines += ["", "| algorithm | NLL | CRPS | coverage 50% | 80% | 90% | 95% | mean std | fit s | test s |",
              "|" + "---|" * 10]
    for _, r in summary.iterrows():
        lines.append(f"| {r['label']} | " + " | ".join(
            [pm(r, "nll"), pm(r, "crps"), pm(r, "coverage_50", 3), pm(r, "coverage_80", 3), pm(r, "coverage_90", 3),
             pm(r, "coverage_95", 3), pm(r, "sharpness", 3), pm(r, "fit_s", 1), pm(r, "test_s", 2)]) + " |")
    k = _ranking_k(summary, settings)
    if k is not None:
        lines += ["", f"| algorithm | precision@{k} | recall@{k} | NDCG@{k} |", "|" + "---|" * 4]
        for _, r in summary.iterrows():
            lines.append(f"| {r['label']} | " + " | ".join(
                pm(r, f"{m}_at_{k}") for m in ("precision", "recall", "ndcg")) + " |")
    lines += ["", f"Mean ± std over {settings['n_folds']} folds (Surprise KFold, shuffle, "
              f"random_state={settings['random_state']}); identical folds for every algorithm. "
              "q = share of test ratings kept, the most confident first (lowest predictive std). "
              "'homoscedastic': a point-estimate algorithm given one residual variance, estimated on 10 % of "
              "its training ratings held out from a second fit: its QP curve carries no information (all stds "
              "tie; ties keep test-set order) and its "
              "NLL/CRPS/coverage use that single variance."]
    if k is not None:
        threshold = settings.get("rank_threshold")
        relevant = f"rating >= {threshold:g}" if threshold is not None else "rating above the threshold"
        lines[-1] += (f" Ranking: each user's test items ranked by the predicted mean; relevant = true {relevant}; "
                      f"precision@{k} and recall@{k} as in Surprise's FAQ (recommended = in the top {k} and "
                      f"predicted >= the threshold; 0 when undefined), NDCG@{k} with binary relevance; "
                      "averaged over the users of each fold.")
    return "\n".join(lines) + "\n"


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
