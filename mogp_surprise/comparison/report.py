"""The comparison's report: a paper-style table, files (Markdown, CSV, JSON) and plots, from a :class:`CompareResult`.

Everything is drawn from the result in memory; :func:`load_results` reads a written folder back
into the same object (for ``mogp-surprise qp-plot DIR`` and for re-using slow baselines' folds).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Sequence

import pandas as pd

from ..evaluation import plot_calibration, plot_qp, qp_curves_over_folds, save_figure
from .result import CompareResult

_FILES = ("folds.csv", "curves.csv", "calibration.csv", "results.json")
_PLOTS = ("qp_rmse.png", "qp_mae.png", "calibration.png")


def check_results_folder(out_dir: str | Path, algos: Sequence[str], overwrite: bool = False) -> None:
    """Refuse to write a comparison's results where they would fail or lose earlier ones: ``out_dir`` (or a
    folder above it) is a file, or it holds results of algorithms that ``algos`` lacks (a run of ``mwgp``
    into a folder of ``svd`` and ``svd8`` results would drop them; reuse them, choose another folder, or
    ``overwrite``). Called by :func:`write_results`, and by the command line before any fit."""
    out = Path(out_dir)
    for folder in (out, *out.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ValueError(f"cannot write the comparison's results to {str(out)!r}: {str(folder)!r} is a file, "
                                 "not a folder")
            break
    if overwrite or not out.is_dir() or not any((out / name).exists() for name in _FILES):
        return
    try:
        held = list(dict.fromkeys(pd.read_csv(out / "folds.csv")["algo"]))
    except Exception as exc:  # noqa: BLE001 - whatever makes the folder unreadable, it holds something
        raise ValueError(f"{out} holds comparison results that cannot be read ({type(exc).__name__}: {exc}); "
                         "choose another folder, or overwrite them (--overwrite)") from None
    dropped = [a for a in held if a not in algos]
    if dropped:
        raise ValueError(f"{out} holds the results of {dropped}, which this comparison would drop: reuse them "
                         f"(--reuse {' '.join(dropped)}), choose another folder, or overwrite them (--overwrite)")


def write_results(result: CompareResult, out_dir: str | Path, title: str = "", plots: bool = True,
                  overwrite: bool = False) -> dict[str, Path]:
    """Save table.md/.csv, folds.csv, curves.csv, calibration.csv, results.json and (``plots``) the PNG
    plots of :func:`plot_results`, which need matplotlib. A folder that holds results of algorithms ``result``
    lacks is refused unless ``overwrite`` (:func:`check_results_folder`); plots of earlier results there are
    removed (drawn again when ``plots``)."""
    out = Path(out_dir)
    check_results_folder(out, list(result.curves), overwrite)
    out.mkdir(parents=True, exist_ok=True)
    for name in _PLOTS:  # they showed the results replaced here
        (out / name).unlink(missing_ok=True)
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
    """Read a folder written by :func:`write_results` back into a :class:`CompareResult`; its files are checked
    against each other (every algorithm of ``folds.csv`` with a curve per fold and a calibration curve), so that a
    damaged or half-written folder is refused, not plotted or reused."""
    out = Path(out_dir)
    missing = [n for n in _FILES if not (out / n).exists()]
    if missing:
        raise FileNotFoundError(f"{out} does not hold comparison results: missing {missing} "
                                "(write them with `mogp-surprise compare --out DIR`)")

    def read(name: str, columns: Sequence[str]) -> pd.DataFrame:
        try:
            frame = pd.read_csv(out / name)
        except Exception as exc:  # noqa: BLE001 - pandas' parse errors have many types
            raise ValueError(f"{out / name} is damaged: {type(exc).__name__}: {exc}") from None
        lacking = [c for c in columns if c not in frame.columns]
        if lacking:
            raise ValueError(f"{out / name} is damaged: it lacks the columns {lacking}")
        return frame

    folds, curves = read("folds.csv", ("algo", "fold")), read("curves.csv", ("algo", "fold", "quantile"))
    calib = read("calibration.csv", ("algo",))
    try:
        meta = json.loads((out / "results.json").read_text())
    except ValueError as exc:
        raise ValueError(f"{out / 'results.json'} is damaged: {exc}") from None
    algos = list(dict.fromkeys(folds["algo"]))
    per_fold = {a: [g.drop(columns=["algo", "fold"]).reset_index(drop=True)
                    for _, g in curves[curves["algo"] == a].groupby("fold", sort=True)] for a in algos}
    calibration = {a: calib[calib["algo"] == a].drop(columns=["algo"]).reset_index(drop=True) for a in algos}
    for a in algos:
        n_folds = int((folds["algo"] == a).sum())
        sizes = {len(c) for c in per_fold[a]}
        if len(per_fold[a]) != n_folds or len(sizes) > 1 or calibration[a].empty:
            raise ValueError(f"{out} is damaged: {a!r} has {n_folds} folds in folds.csv but {len(per_fold[a])} "
                             f"curves (of {sorted(sizes)} points) in curves.csv and {len(calibration[a])} "
                             "calibration rows")
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
    algos = reuse_list(algos)
    previous, where = read_earlier(previous, where)
    check_reuse(previous, algos, result.settings, result.folds.groupby("fold")["n_test"].first().to_dict(),
                list(result.curves), where)
    source = {key: previous.settings[key] for key in ("mwgp_params", "reused") if key in previous.settings}
    settings = {**result.settings, "algos": [*result.settings["algos"], *algos],
                "reused": {"from": str(where), "algos": list(algos), **source}}
    merged = pd.concat([result.folds, previous.folds[previous.folds["algo"].isin(algos)]], ignore_index=True)
    return CompareResult(merged, {**result.curves, **{a: previous.curves[a] for a in algos}},
                         {**result.calibration, **{a: previous.calibration[a] for a in algos}}, settings, result.title)


def distinct_names(names: Sequence[str], what: str) -> list[str]:
    """``names`` as a list; ``ValueError`` naming any that ``what`` (e.g. "`algos` names") gives twice."""
    names = list(names)
    twice = sorted({a for a in names if names.count(a) > 1})
    if twice:
        raise ValueError(f"{what} {twice} more than once")
    return names


def reuse_list(algos: Sequence[str]) -> list[str]:
    """The algorithms to reuse as a list (one name is a list of one; a name twice is refused)."""
    return distinct_names([algos] if isinstance(algos, str) else algos, "the algorithms to reuse name")


def read_earlier(previous: CompareResult | str | Path, where: str | None) -> tuple[CompareResult, str]:
    if isinstance(previous, CompareResult):
        return previous, where or "the earlier result"
    return load_results(previous), where or str(previous)


def check_reuse(previous: CompareResult, algos: Sequence[str], settings: dict, fold_sizes: dict[int, int],
                run_now: Sequence[str], where: str) -> None:
    """``ValueError`` unless ``algos`` can be taken from ``previous`` into a comparison with ``settings`` whose
    folds hold ``fold_sizes`` test ratings and which runs ``run_now`` itself: the same folds (number, seed and
    sizes), the same ranking metrics, and every one of ``algos`` there and not run again. :func:`~.run.compare`
    checks it before any fit."""
    old = previous.settings
    for key in ("n_folds", "random_state", "rank_k", "rank_threshold"):
        if key.startswith("rank_") and key not in old:  # written before the ranking metrics: they stay empty
            continue
        if old.get(key) != settings.get(key):
            why = "its ranking metrics mean something else" if key.startswith("rank_") else "the folds would differ"
            raise ValueError(f"cannot reuse {where}: it was run with {key}={old.get(key)!r}, "
                             f"this comparison with {key}={settings[key]!r} ({why})")
    sizes_then = {int(k): int(v) for k, v in previous.folds.groupby("fold")["n_test"].first().to_dict().items()}
    if {int(k): int(v) for k, v in fold_sizes.items()} != sizes_then:
        raise ValueError(f"cannot reuse {where}: its folds hold {sizes_then} test ratings, this "
                         f"comparison's {fold_sizes} (another data set or split)")
    digest = settings.get("data_digest")
    if digest is not None and old.get("data_digest") is None:
        warnings.warn(f"{where} was written before comparisons recorded their data: that it was run on these data "
                      "cannot be checked (only the number of folds, the seed and the folds' sizes were)",
                      UserWarning, stacklevel=3)
    elif digest is not None and old["data_digest"] != digest:
        raise ValueError(f"cannot reuse {where}: it was run on other ratings, or the same ones in another order "
                         f"(data digest {old['data_digest']}, now {digest}), so its folds are not these")
    missing = [a for a in algos if a not in previous.curves]
    if missing:
        raise ValueError(f"cannot reuse {missing} from {where}: it holds {sorted(previous.curves)}")
    clash = [a for a in algos if a in run_now]
    if clash:
        raise ValueError(f"{clash} were both run now and requested from {where}")
