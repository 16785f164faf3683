"""The result of a comparison (:class:`CompareResult`) and its paper-style table (:func:`summary_markdown`)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass
class CompareResult:
    """Per-fold metrics, per-fold QP curves and the settings of one comparison."""

    folds: pd.DataFrame  # one row per (algorithm, fold)
    curves: dict[str, list[pd.DataFrame]]  # algorithm key -> QP curve per fold
    calibration: dict[str, pd.DataFrame]  # algorithm key -> calibration curve pooled over folds
    settings: dict[str, Any]
    title: str = ""

    def summary(self) -> pd.DataFrame:
        """Mean and std over folds for every metric, one row per algorithm."""
        metrics = [c for c in self.folds.columns if c not in ("algo", "label", "uncertainty", "fold")]
        grouped = self.folds.groupby("algo", sort=False)
        out = grouped[["label", "uncertainty"]].first()
        for col in metrics:
            out[f"{col}_mean"] = grouped[col].mean()
            out[f"{col}_std"] = grouped[col].std(ddof=0)
        return out.reset_index()

    def markdown(self) -> str:
        return summary_markdown(self.summary(), self.settings)


def _ranking_k(summary: pd.DataFrame, settings: dict[str, Any]) -> int | None:
    """The k of the ranking columns (``precision_at_{k}_mean``), None for results written before them."""
    found = [int(m.group(1)) for c in summary.columns if (m := re.fullmatch(r"precision_at_(\d+)_mean", c))]
    k = settings.get("rank_k")
    return k if k in found else (found[0] if found else None)


def _reused_note(reused: dict[str, Any] | None) -> str:
    """Which rows were reused from earlier runs (keeping those runs' fit times), with MW-GP's parameters there, and
    where those runs had taken them from in turn."""
    links, among = [], None
    while reused:
        algos = [a for a in reused.get("algos", []) if among is None or a in among]
        if not algos:
            break
        params = reused.get("mwgp_params")
        there = f" (MW-GP's parameters there: {params})" if params and {"mwgp", "mwgp_paper"} & set(algos) else ""
        links.append(f"{', '.join(algos)} from {reused['from']}{there}")
        reused, among = reused.get("reused"), set(algos)
    return f" Reused from earlier runs, with their fit and test times: {'; '.join(links)}." if links else ""


def summary_markdown(summary: pd.DataFrame, settings: dict[str, Any]) -> str:
    """Paper-style table: RMSE and MAE at q = 100/90/80 %, calibration, ranking metrics, times (mean ± std
    over folds). An algorithm without a column (reused from results written before it existed) shows "—"."""
    def pm(row: pd.Series, col: str, digits: int = 4) -> str:
        mean, std = row.get(f"{col}_mean", math.nan), row.get(f"{col}_std", math.nan)
        return "—" if pd.isna(mean) else f"{mean:.{digits}f} ± {std:.{digits}f}"

    head1 = ("| algorithm | uncertainty | RMSE q=100% | RMSE q=90% | RMSE q=80% | MAE q=100% | MAE q=90% | "
             "MAE q=80% |")
    lines = [head1, "|" + "---|" * 8]
    for _, r in summary.iterrows():  # one variance for all: its q < 100 % rows are test-order subsets, no measure
        tied = r["uncertainty"] == "homoscedastic"
        lines.append(f"| {r['label']} | {r['uncertainty']} | " + " | ".join(
            "—" if tied and not c.endswith("q100") else pm(r, c)
            for c in ("rmse_q100", "rmse_q90", "rmse_q80", "mae_q100", "mae_q90", "mae_q80")) + " |")
    lines += ["", "| algorithm | NLL | CRPS | coverage 50% | 80% | 90% | 95% | mean std | fit s | test s |",
              "|" + "---|" * 10]
    for _, r in summary.iterrows():
        lines.append(f"| {r['label']} | " + " | ".join(
            [pm(r, "nll"), pm(r, "crps"), pm(r, "coverage_50", 3), pm(r, "coverage_80", 3), pm(r, "coverage_90", 3),
             pm(r, "coverage_95", 3), pm(r, "sharpness", 3), pm(r, "fit_s", 1), pm(r, "test_s", 2)]) + " |")
    k = _ranking_k(summary, settings)
    if k is not None:
        lines += ["", f"| algorithm | precision@{k} | recall@{k} | top-{k} precision | NDCG@{k} |",
                  "|" + "---|" * 5]
        for _, r in summary.iterrows():
            lines.append(f"| {r['label']} | " + " | ".join(
                pm(r, f"{m}_at_{k}") for m in ("precision", "recall", "top_precision", "ndcg")) + " |")
    lines += ["", f"Mean ± std over {settings['n_folds']} folds (the folds' population std, ddof=0, as Surprise's "
              f"cross_validate reports it; Surprise KFold, shuffle, "
              f"random_state={settings['random_state']}); identical folds for every algorithm. "
              "q = share of test ratings kept, the most confident first (lowest predictive std). "
              "'homoscedastic': a point-estimate algorithm given one residual variance, estimated on 10 % of "
              "its training ratings held out from a second fit: its QP curve carries no information (all stds "
              "tie), so its q < 100 % cells are empty, and its "
              "NLL/CRPS/coverage use that single variance." + _reused_note(settings.get("reused"))]
    if k is not None:
        threshold = settings.get("rank_threshold")
        relevant = f"rating >= {threshold:g}" if threshold is not None else "rating above the threshold"
        lines[-1] += (f" Ranking: each user's test items ranked by the predicted mean; relevant = true {relevant}; "
                      f"precision@{k} and recall@{k} as in Surprise's FAQ (recommended = in the top {k} and "
                      f"predicted >= the threshold; 0 when undefined), top-{k} precision the same with every "
                      f"top-{k} item recommended whatever its predicted rating (the ranking alone), NDCG@{k} "
                      "with binary relevance; "
                      "averaged over the users of each fold.")
    return "\n".join(lines) + "\n"
