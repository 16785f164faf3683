"""The paper's experiment as a library function: several algorithms on identical CV folds.

``compare`` fits every algorithm on the same seeded Surprise ``KFold`` splits and collects, per
fold, the QP curve (RMSE/MAE on the q most confident predictions), calibration metrics and
timings; ``write_results`` saves a paper-style table (Markdown, CSV, JSON) and QP plots (PNG).
Point-estimate baselines are wrapped in :class:`HomoscedasticBaseline` so that NLL, CRPS and
coverage can be compared; their rows say so.
"""
from __future__ import annotations

import importlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .evaluation import (arrays_from_predictions, plot_calibration, plot_qp, qp_curve, qp_curves_over_folds,
                         save_figure, uncertainty_report)
from .evaluation.metrics import calibration_curve

logger = logging.getLogger(__name__)

QP_QUANTILES = 20
SUMMARY_AT = (1.0, 0.9, 0.8)


@dataclass(frozen=True)
class AlgoSpec:
    label: str
    uncertainty: str  # "predictive" or "homoscedastic"
    make: Callable[[int, dict[str, Any]], Any]
    missing: Callable[[], str] | None = None  # an optional dependency's install hint when it is absent, else ""


def _mwgp(paper_model: bool) -> Callable[[int, dict[str, Any]], Any]:
    """MWGP with the comparison's ``mwgp_params``, and ``PAPER_MODEL`` on top for the paper's model."""
    def make(seed: int, params: dict[str, Any]):
        from .adapters.surprise_algo import MWGP
        from .core.config import PAPER_MODEL
        return MWGP(**{"random_state": seed, **params, **(PAPER_MODEL if paper_model else {})})
    return make


def _homoscedastic(factory: Callable[[int], Any]) -> Callable[[int, dict[str, Any]], Any]:
    def make(seed: int, params: dict[str, Any]):
        from .adapters.homoscedastic import HomoscedasticBaseline
        return HomoscedasticBaseline(factory(seed))
    return make


def _svd(n_factors: int | None) -> Callable[[int], Any]:
    def make(seed: int):
        from surprise import SVD
        return SVD(random_state=seed) if n_factors is None else SVD(n_factors=n_factors, random_state=seed)
    return make


def _svdpp(seed: int):
    from surprise import SVDpp
    return SVDpp(random_state=seed, cache_ratings=True)


def _optional(module: str, available: str) -> Callable[[], str]:
    """The install hint of an optional baseline (``adapters.<module>``) when its package is absent, else ""."""
    def missing() -> str:
        adapter = importlib.import_module(f".adapters.{module}", __package__)
        return "" if getattr(adapter, available)() else adapter.INSTALL_HINT
    return missing


def _myfm(seed: int, params: dict[str, Any]):
    from .adapters.myfm_algo import MyFMBaseline
    return MyFMBaseline(random_state=seed)


def _bgplvm(seed: int, params: dict[str, Any]):
    """The Bayesian GPLVM with MW-GP's latent dimension, as in the paper's comparison."""
    from .adapters.bgplvm_algo import BayesianGPLVMBaseline
    from .core.config import MWGPConfig
    return BayesianGPLVMBaseline(latent_dim=params.get("latent_dim", MWGPConfig.latent_dim), random_state=seed)


ALGORITHMS: dict[str, AlgoSpec] = {
    "mwgp": AlgoSpec("MW-GP (ours)", "predictive", _mwgp(paper_model=False)),
    "mwgp_paper": AlgoSpec("MW-GP, the paper's model", "predictive", _mwgp(paper_model=True)),
    "svd": AlgoSpec("BiasedMF (Surprise SVD)", "homoscedastic", _homoscedastic(_svd(None))),
    "svd8": AlgoSpec("BiasedMF r=8 (SVD n_factors=8)", "homoscedastic", _homoscedastic(_svd(8))),
    "svdpp": AlgoSpec("SVD++ (Surprise SVDpp)", "homoscedastic", _homoscedastic(_svdpp)),
    "myfm": AlgoSpec("Bayesian FM (myFM, rank 8)", "predictive", _myfm, _optional("myfm_algo", "myfm_available")),
    "bgplvm": AlgoSpec("Bayesian GPLVM (GPyTorch)", "predictive", _bgplvm,
                       _optional("bgplvm_algo", "gpytorch_available")),
}


@dataclass
class CompareResult:
    """Per-fold metrics, per-fold QP curves and the settings of one comparison."""

    folds: pd.DataFrame  # one row per (algorithm, fold)
    curves: dict[str, list[pd.DataFrame]]  # algorithm key -> QP curve per fold
    calibration: dict[str, pd.DataFrame]  # algorithm key -> calibration curve pooled over folds
    settings: dict[str, Any]

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


def timed_fit_test(algo: Any, trainset: Any, testset: list) -> tuple[list, float, float]:
    """Fit ``algo`` on ``trainset`` and predict ``testset``; return (predictions, fit seconds, test seconds)."""
    start = time.perf_counter()
    algo.fit(trainset)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predictions = algo.test(testset)
    return predictions, fit_s, time.perf_counter() - start


def compare(dataset, algos: Sequence[str] = ("mwgp", "svd", "svdpp"), n_folds: int = 5, random_state: int = 0,
            mwgp_params: dict[str, Any] | None = None, progress: bool = False,
            extra_algos: dict[str, AlgoSpec] | None = None) -> CompareResult:
    """Run ``algos`` on identical seeded ``KFold`` splits of a Surprise ``dataset``.

    Parameters
    ----------
    dataset : surprise.Dataset
    algos : sequence of str
        Keys of :data:`ALGORITHMS` (``mwgp``, ``mwgp_paper``, ``svd``, ``svd8``, ``svdpp``, ``myfm``, ``bgplvm``) or of ``extra_algos``.
    n_folds : int, default=5
    random_state : int, default=0
        Seeds the folds and every algorithm.
    mwgp_params : dict, optional
        Hyper-parameters passed to :class:`~mogp_surprise.MWGP`.
    progress : bool, default=False
        Show a tqdm bar over (fold, algorithm) fits.
    extra_algos : dict of str -> AlgoSpec, optional
        Further algorithms; any Surprise algorithm whose predictions carry ``details["std"]``
        or ``details["var"]`` (wrap point estimators in ``HomoscedasticBaseline``).
    """
    from surprise.model_selection import KFold

    registry = {**ALGORITHMS, **(extra_algos or {})}
    unknown = [a for a in algos if a not in registry]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; choose from {sorted(registry)}")
    absent = [hint for hint in (registry[a].missing() for a in algos if registry[a].missing) if hint]
    if absent:  # say so before any fit, not after hours of the others
        raise ImportError("; ".join(absent))
    if not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"`n_folds` must be an int >= 2, got {n_folds!r}")
    params = dict(mwgp_params or {})
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[pd.DataFrame]] = {a: [] for a in algos}
    pooled: dict[str, list[np.ndarray]] = {a: [] for a in algos}
    splits = KFold(n_splits=n_folds, random_state=random_state, shuffle=True).split(dataset)
    bar = tqdm(total=n_folds * len(algos), desc="compare", unit="fit", disable=not progress)
    for fold, (trainset, testset) in enumerate(splits):
        for key in algos:
            spec = registry[key]
            bar.set_postfix_str(f"fold {fold + 1}/{n_folds}: {key}")
            predictions, fit_s, test_s = timed_fit_test(spec.make(random_state, params), trainset, testset)
            y, mean, std = arrays_from_predictions(predictions)
            curve = qp_curve(y, mean, std, quantiles=QP_QUANTILES, metrics=("rmse", "mae"))
            curves[key].append(curve)
            pooled[key].append(np.stack([y, mean, std]))
            at = curve.set_index(curve["quantile"].round(6))
            row = {"algo": key, "label": spec.label, "uncertainty": spec.uncertainty, "fold": fold}
            for q in SUMMARY_AT:
                tag = f"q{round(q * 100)}"
                row[f"rmse_{tag}"] = float(at.loc[round(q, 6), "rmse"])
                row[f"mae_{tag}"] = float(at.loc[round(q, 6), "mae"])
            report = uncertainty_report(y, mean, std)
            row.update({k: float(report[k]) for k in ("nll", "crps", "coverage_50", "coverage_80", "coverage_90",
                                                         "coverage_95", "sharpness")})
            row.update(fit_s=fit_s, test_s=test_s, n_test=len(y))
            rows.append(row)
            logger.info("fold %d %s: rmse %.4f (fit %.1f s)", fold + 1, key, row["rmse_q100"], fit_s)
            bar.update(1)
    bar.close()
    calibration = {}
    for key, parts in pooled.items():
        y, mean, std = np.concatenate(parts, axis=1)
        calibration[key] = calibration_curve(y, mean, std)
    settings = {"n_folds": n_folds, "random_state": random_state, "algos": list(algos), "mwgp_params": params,
                "qp_quantiles": QP_QUANTILES}
    return CompareResult(pd.DataFrame(rows), curves, calibration, settings)


def reuse_results(result: CompareResult, previous_dir: str | Path, algos: Sequence[str]) -> CompareResult:
    """Add the per-fold results of ``algos`` from an earlier :func:`write_results` folder to ``result``.

    For adding or re-running one algorithm without re-fitting slow baselines (SVD++ takes minutes
    per ML-1M fold). The earlier run must have used the same folds: the same number of folds and
    seed, and the same number of test ratings in every fold (all checked; a different data set
    almost always differs there).
    """
    curves, _, calib, meta = load_results(previous_dir)
    folds = pd.read_csv(Path(previous_dir) / "folds.csv")
    old = meta.get("settings", {})
    for key in ("n_folds", "random_state"):
        if old.get(key) != result.settings[key]:
            raise ValueError(f"cannot reuse {previous_dir}: it was run with {key}={old.get(key)!r}, "
                             f"this comparison with {key}={result.settings[key]!r} (the folds would differ)")
    sizes_now = result.folds.groupby("fold")["n_test"].first().to_dict()
    sizes_then = folds.groupby("fold")["n_test"].first().to_dict()
    if sizes_now != sizes_then:
        raise ValueError(f"cannot reuse {previous_dir}: its folds hold {sizes_then} test ratings, this "
                         f"comparison's {sizes_now} (another data set or split)")
    missing = [a for a in algos if a not in set(folds["algo"])]
    if missing:
        raise ValueError(f"cannot reuse {missing} from {previous_dir}: it holds {sorted(set(folds['algo']))}")
    clash = [a for a in algos if a in result.curves]
    if clash:
        raise ValueError(f"{clash} were both run now and requested from {previous_dir}")
    new_curves = dict(result.curves)
    new_calib = dict(result.calibration)
    for a in algos:
        per_fold = curves[curves["algo"] == a]
        new_curves[a] = [g.drop(columns=["algo", "fold"]).reset_index(drop=True)
                         for _, g in per_fold.groupby("fold", sort=True)]
        new_calib[a] = calib[calib["algo"] == a].drop(columns=["algo"]).reset_index(drop=True)
    settings = {**result.settings, "algos": [*result.settings["algos"], *algos],
                "reused": {"from": str(previous_dir), "algos": list(algos)}}
    merged = pd.concat([result.folds, folds[folds["algo"].isin(algos)]], ignore_index=True)
    return CompareResult(merged, new_curves, new_calib, settings)


def summary_markdown(summary: pd.DataFrame, settings: dict[str, Any]) -> str:
    """Paper-style table: RMSE and MAE at q = 100/90/80 %, calibration, times (mean ± std over folds)."""
    def pm(row: pd.Series, col: str, digits: int = 4) -> str:
        return f"{row[f'{col}_mean']:.{digits}f} ± {row[f'{col}_std']:.{digits}f}"

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
    lines += ["", f"Mean ± std over {settings['n_folds']} folds (Surprise KFold, shuffle, "
              f"random_state={settings['random_state']}); identical folds for every algorithm. "
              "q = share of test ratings kept, the most confident first (lowest predictive std). "
              "'homoscedastic': a point-estimate algorithm given one residual variance estimated on its "
              "training data: its QP curve carries no information (all stds tie; ties keep test-set order) and its "
              "NLL/CRPS/coverage use that single variance."]
    return "\n".join(lines) + "\n"


def write_results(result: CompareResult, out_dir: str | Path, title: str = "", plots: bool = True) -> dict[str, Path]:
    """Save table.md/.csv, folds.csv, curves.csv, calibration.csv, results.json and (``plots``) the PNG
    plots of :func:`plot_results`, which need matplotlib."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
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
        paths.update(plot_results(out, title=title))
    return paths


def load_results(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Read back (curves, summary, calibration, json) written by :func:`write_results`."""
    out = Path(out_dir)
    missing = [n for n in ("curves.csv", "table.csv", "calibration.csv", "results.json") if not (out / n).exists()]
    if missing:
        raise FileNotFoundError(f"{out} does not hold comparison results: missing {missing} "
                                "(write them with `mogp-surprise compare --out DIR`)")
    return (pd.read_csv(out / "curves.csv"), pd.read_csv(out / "table.csv"), pd.read_csv(out / "calibration.csv"),
            json.loads((out / "results.json").read_text()))


def plot_results(out_dir: str | Path, title: str = "") -> dict[str, Path]:
    """Draw the QP plots (RMSE, MAE) and the calibration plot from saved results."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    curves, summary, calib, meta = load_results(out)
    title = title or meta.get("title", "")
    labels = dict(zip(summary["algo"], summary["label"]))
    kinds = dict(zip(summary["algo"], summary["uncertainty"]))
    colors = {label: f"C{k}" for k, label in enumerate(summary["label"])}  # one colour per model everywhere
    paths = {}
    for metric in ("rmse", "mae"):
        per_algo = {labels[k]: qp_curves_over_folds([g.drop(columns=["algo", "fold"]) for _, g in c.groupby("fold")])
                    for k, c in curves.groupby("algo", sort=False) if kinds.get(k) != "homoscedastic"}
        baselines = {labels[k]: float(summary.loc[summary["algo"] == k, f"{metric}_q100_mean"].iloc[0])
                     for k in summary["algo"] if kinds.get(k) == "homoscedastic"}
        fig, ax = plt.subplots(figsize=(6, 4))
        plot_qp(per_algo, metric=metric, baselines=baselines or None, ax=ax, colors=colors,
                title=f"{title} — {metric.upper()} on the q most confident predictions" if title else None)
        paths[f"qp_{metric}_png"] = save_figure(fig, out / f"qp_{metric}.png")
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    plot_calibration({labels[k]: c.drop(columns=["algo"]) for k, c in calib.groupby("algo", sort=False)}, ax=ax,
                     title=f"{title} — calibration" if title else None, colors=colors)
    paths["calibration_png"] = save_figure(fig, out / "calibration.png")
    plt.close(fig)
    return paths
