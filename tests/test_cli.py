"""compare(), its saved results and plots, the CLI and the examples, end to end on tiny data."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.cli import main
from mogp_surprise.comparison import AlgoSpec, compare
from mogp_surprise.datasets import make_synthetic_ratings
from tests.comparison.test_run import _Recorder

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_ml100k(tmp_path_factory):
    """A small file in MovieLens 100K's u.data format."""
    df = make_synthetic_ratings(n_users=60, n_items=50, n_ratings=1200, random_state=1)
    folder = tmp_path_factory.mktemp("data")
    (folder / "ml-100k").mkdir()
    lines = [f"{u[1:]}\t{i[1:]}\t{int(r)}\t{880000000 + k}\n"
             for k, (u, i, r) in enumerate(df[["user", "item", "rating"]].itertuples(index=False))]
    (folder / "ml-100k" / "u.data").write_text("".join(lines))
    return folder


def test_cli_compare_and_qp_plot(tiny_ml100k, tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["compare", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--folds", "2",
               "--algos", "mwgp", "svd", "--params", '{"n_epochs": 1, "n_inducing": 8}', "--out", str(out),
               "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "ml-100k (1,200 ratings)" in printed and "RMSE q=100%" in printed
    assert (out / "table.md").exists() and (out / "qp_mae.png").exists()
    assert main(["qp-plot", str(out)]) == 0
    assert main(["qp-plot", str(tmp_path / "missing")]) == 2
    assert "does not hold comparison results" in capsys.readouterr().err


def test_cli_compare_ranking_options_and_the_flipped_myfm(tiny_ml100k, tmp_path, capsys):
    pytest.importorskip("myfm", reason="myFM is optional (pip install -e '.[myfm]')")
    out = tmp_path / "res"
    rc = main(["compare", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--folds", "2",
               "--algos", "myfm_flipped", "svd", "--rank-k", "5", "--rank-threshold", "3.5", "--out", str(out),
               "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| myFM BFM flipped (rank 32 / 16, implicit) | predictive |" in printed
    assert "| algorithm | precision@5 | recall@5 | top-5 precision | NDCG@5 |" in printed and "relevant = true rating >= 3.5" in printed
    folds = pd.read_csv(out / "folds.csv")
    assert folds[["precision_at_5", "recall_at_5", "top_precision_at_5", "ndcg_at_5"]].notna().all().all()
    assert json.loads((out / "results.json").read_text())["settings"]["rank_threshold"] == 3.5


def test_compare_checks_the_results_to_reuse_and_the_output_folder_before_any_fit(tiny_ml100k, tmp_path, capsys,
                                                                                   monkeypatch):
    """Every check that needs no fit comes before the first: the earlier results to reuse (folder, folds,
    ranking metrics, a clash), the output folder (a file; results this run would drop), the arguments."""
    from surprise.model_selection import KFold

    out = tmp_path / "res"
    data = ["--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--no-progress"]
    assert main(["compare", *data, "--algos", "svd", "svd8", "--folds", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(KFold, "split", lambda *a, **k: pytest.fail("started the folds before the checks"))
    (tmp_path / "afile").write_text("x")
    cases = [
        (["--algos", "mwgp", "--reuse", "svd", "--reuse-from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")],
         "does not hold comparison results"),
        (["--algos", "mwgp", "--reuse", "svd", "svd8", "--folds", "3", "--out", str(out)],
         "it was run with n_folds=2, this comparison with n_folds=3"),
        (["--algos", "mwgp", "--reuse", "svd", "svd8", "--folds", "2", "--rank-k", "5", "--out", str(out)],
         "it was run with rank_k=10, this comparison with rank_k=5"),
        (["--algos", "svd", "--reuse", "svd", "svd8", "--folds", "2", "--out", str(out)],
         r"['svd'] were both run now and requested from"),
        (["--algos", "mwgp", "--reuse", "svd", "--folds", "2", "--out", str(out)],
         f"{out} holds the results of ['svd8'], which this comparison would drop: reuse them (--reuse svd8)"),
        (["--algos", "mwgp", "--out", str(tmp_path / "afile" / "sub")],
         f"cannot write the comparison's results to '{tmp_path / 'afile' / 'sub'}': '{tmp_path / 'afile'}' is a file"),
        (["--algos", "svd", "svd", "--out", str(tmp_path / "o")], "`algos` names ['svd'] more than once"),
        (["--algos", "svd", "--rank-threshold", "nan", "--out", str(tmp_path / "o")],
         "`rank_threshold` must be a finite number, got nan"),
        (["--algos", "svd", "--rank-threshold", "100", "--out", str(tmp_path / "o")],
         "is above the top of the rating scale (1, 5)"),
    ]
    for args, message in cases:
        assert main(["compare", *data, *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err, (args, err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written  # nothing there was touched


def test_compare_reuses_into_its_own_folder_and_overwrites_only_when_asked(tiny_ml100k, tmp_path, capsys):
    out = tmp_path / "res"
    data = ["compare", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--no-progress", "--folds", "2",
            "--out", str(out)]
    assert main([*data, "--algos", "svd", "svd8"]) == 0
    assert main([*data, "--algos", "svd8", "--reuse", "svd"]) == 0  # every earlier algorithm kept
    assert sorted(set(pd.read_csv(out / "folds.csv")["algo"])) == ["svd", "svd8"]
    assert main([*data, "--algos", "svd", "--overwrite"]) == 0
    assert sorted(set(pd.read_csv(out / "folds.csv")["algo"])) == ["svd"]
    capsys.readouterr()


def test_cli_demo_on_data(tiny_ml100k, capsys):
    """(Without data: test_demo_without_data_says_once_where_it_looked.)"""
    assert main(["demo", "--data-dir", str(tiny_ml100k), "--quick", "--no-download"]) == 0
    printed = capsys.readouterr().out
    assert "MW-GP" in printed and "SVD (Surprise)" in printed and "Cold start" in printed


def test_cli_compare_without_data_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MOGP_DATA", raising=False)
    monkeypatch.setenv("SURPRISE_DATA_FOLDER", str(tmp_path / "empty_cache"))
    rc = main(["compare", "--data-dir", str(tmp_path), "--no-download", "--out", str(tmp_path / "o")])
    assert rc == 2 and "--allow-synthetic" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["compare_baselines.py", "surprise_gridsearch.py",
                                    "sklearn_pipeline_gridsearch.py", "qp_plot_any_model.py"])
def test_examples_run_in_smoke_mode(script, tmp_path, monkeypatch):
    monkeypatch.setenv("SURPRISE_DATA_FOLDER", str(tmp_path / "empty_cache"))
    cmd = [sys.executable, str(REPO / "examples" / script), "--smoke"]
    if script in ("compare_baselines.py", "qp_plot_any_model.py"):
        cmd += ["--out", str(tmp_path / ("res" if script.startswith("compare") else "qp.png"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "data: SYNTHETIC ratings" in proc.stdout  # the examples say when they run on synthetic data



def test_demo_without_data_says_once_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MOGP_DATA", raising=False)
    monkeypatch.setenv("SURPRISE_DATA_FOLDER", str(tmp_path / "empty_cache"))
    nothing = tmp_path / "nothing"
    assert main(["demo", "--data-dir", str(nothing), "--quick", "--no-download"]) == 0
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert printed.count("Looked at") == 1 and printed.count("not found") == 1
    assert str(nothing / "ml-100k" / "u.data") in printed and str(tmp_path / "empty_cache") in printed
    assert "MOGP_DATA" in printed and "SYNTHETIC" in printed


def test_compare_without_matplotlib_prints_the_table_and_skips_the_plots(tiny_ml100k, tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    out = tmp_path / "res"
    rc = main(["compare", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--folds", "2",
               "--algos", "svd", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "RMSE q=100%" in printed and printed.count("Plots skipped: matplotlib is not installed") == 1
    assert printed.index("RMSE q=100%") < printed.index("Plots skipped")
    assert (out / "table.md").exists() and not (out / "qp_rmse.png").exists()
    assert main(["qp-plot", str(out)]) == 2
    assert "matplotlib is not installed" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "compare", "qp-plot", "fit", "recommend", "predict"])
def test_every_help_states_the_defaults(command, capsys):
    from mogp_surprise.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    options = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    assert options
    for action in options:
        assert action.help, f"{action.option_strings} has no help"
    assert text.count("(default:") == len(options)


def test_cli_output_folder_is_ignored_by_git():
    ignored = (REPO / ".gitignore").read_text().split()
    assert "/results/" in ignored  # `mogp-surprise compare` writes to results/ by default


# -- serving: fit, recommend, predict ---------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_model(tiny_ml100k, tmp_path_factory):
    """`mogp-surprise fit` on the tiny ML-100K copy, with a u.item file of titles next to u.data."""
    items = sorted({line.split("\t")[1] for line in (tiny_ml100k / "ml-100k" / "u.data").read_text().splitlines()},
                   key=int)
    (tiny_ml100k / "ml-100k" / "u.item").write_text(
        "".join(f"{i}|Movie number {i} (1999)|01-Jan-1999||http://x|0|1\n" for i in items), encoding="latin-1")
    path = tmp_path_factory.mktemp("model") / "model.pt"
    assert main(["fit", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--out", str(path),
                 "--params", '{"n_epochs": 3, "n_inducing": 16}', "--no-progress"]) == 0
    return path


def test_cli_fit_saves_a_model_and_states_rmse_and_time(saved_model, capsys):
    from mogp_surprise import MWGP

    algo = MWGP.load(saved_model)
    assert algo.trainset.n_ratings == 1200 and algo.item_names_["1"] == "Movie number 1 (1999)"


def test_ctrl_c_during_fit_says_what_is_kept_in_one_line(tmp_path, capsys, monkeypatch):
    """Ctrl-C printed an eleven-frame traceback through torch and said nothing of the checkpoint; now exit code
    130 and one line naming the checkpoint and --resume (or that no model was saved)."""
    from mogp_surprise import MWGP

    lines = ["user,item,rating"] + [f"u{k % 30},i{k % 17},{1 + k % 5}" for k in range(600)]
    (tmp_path / "r.csv").write_text("\n".join(lines))
    real_fit = MWGP.fit

    def interrupted(self, *args, **kwargs):  # Ctrl-C in the third epoch, after two checkpoints
        import mogp_surprise.core.checkpoint as checkpoint
        real_save, saves = checkpoint.save, []

        def save(path, state):
            real_save(path, state)
            saves.append(path)
            if len(saves) == 2:
                raise KeyboardInterrupt
        monkeypatch.setattr(checkpoint, "save", save)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(MWGP, "fit", interrupted)
    base = ["fit", "--ratings", str(tmp_path / "r.csv"), "--out", str(tmp_path / "m.pt"), "--params",
            '{"n_epochs": 4, "n_inducing": 8, "early_stopping": false}', "--no-progress"]
    assert main([*base, "--checkpoint", str(tmp_path / "c.ckpt")]) == 130
    err = capsys.readouterr().err
    assert err == (f"error: interrupted; {str(tmp_path / 'c.ckpt')!r} holds the epochs completed so far: run the "
                   "same command with --resume to continue\n")
    monkeypatch.setattr(MWGP, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(base) == 130 and capsys.readouterr().err == "error: interrupted; no model was saved\n"
    monkeypatch.setattr(MWGP, "fit", real_fit)
    assert main([*base, "--checkpoint", str(tmp_path / "c.ckpt"), "--resume"]) == 0
    assert not (tmp_path / "m.pt.partial").exists() and (tmp_path / "m.pt").exists()


def test_cli_fit_reads_a_ratings_file(tmp_path, capsys):
    lines = ["user,item,rating"] + [f"u{k % 30},i{k % 17},{1 + k % 5}" for k in range(600)]
    (tmp_path / "r.csv").write_text("\n".join(lines))
    rc = main(["fit", "--ratings", str(tmp_path / "r.csv"), "--out", str(tmp_path / "m.pt"), "--params",
               '{"n_epochs": 2, "n_inducing": 8}', "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "Trained on 600 ratings in" in out and "training RMSE" in out
    assert "rating scale 1..5" in out
    assert "(the first row is a header, skipped: user, item, rating)" in out
    (tmp_path / "bad.csv").write_text("u1,i1,3\nu2,i2,good\nu3,i1,4\n")
    assert main(["fit", "--ratings", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "b.pt")]) == 2
    assert "not numbers (first: 'good')" in capsys.readouterr().err


@pytest.mark.parametrize("content, args, message", [
    ("u1,i1,4\nu2,i1,4\nu2,i2,4\n", [], "every rating in {f} is 4, so the file does not show the rating scale; "
                                        "give it with --rating-scale LOW HIGH"),
    ("user,item,rating\n", [], "{f} holds no ratings"),
    ("", [], "{f} is empty: expected rows of user, item, rating"),
    ("u1,i1,4\nu2,,3\n", [], "{f}: 1 row(s) have an empty user or item id (first: 'u2,,3')"),
    ("u1,i1,4\nu2,i2,3\n", ["--params", "{n_epochs: 2}"], "--params is not valid JSON"),
    ("u1,i1,4\nu2,i2,3\n", ["--params", "[1, 2]"], "--params must be a JSON object of hyper-parameters"),
    ("u1,i1,4\nu2,i2,3\n", ["--out", "{d}"], "cannot save the model to '{d}': it is a folder"),
    ("u1,i1,4\nu2,i2,3\n", ["--out", "{d}/no/m.pt"], "cannot save the model to '{d}/no/m.pt': the folder"),
])
def test_cli_fit_refuses_what_it_cannot_fit_or_save_before_fitting(tmp_path, capsys, monkeypatch, content, args,
                                                                    message):
    """One line naming the problem and exit code 2, and no fit started (it would be lost at the end)."""
    from mogp_surprise.adapters import surprise_algo

    monkeypatch.setattr(surprise_algo.MWGP, "fit", lambda *a, **k: pytest.fail("fitted"))
    (tmp_path / "r.csv").write_text(content)
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    argv = ["fit", "--ratings", str(tmp_path / "r.csv"), "--out", str(tmp_path / "m.pt"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    expected = message.replace("{f}", str(tmp_path / "r.csv")).replace("{d}", str(tmp_path))
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err


def test_cli_reports_a_diverged_fit_and_verbose_in_params_in_one_line(tmp_path, capsys):
    lines = [f"u{k % 30},i{k % 17},{1 + k % 5}" for k in range(600)]
    (tmp_path / "r.csv").write_text("\n".join(lines))
    fit = ["fit", "--ratings", str(tmp_path / "r.csv"), "--out", str(tmp_path / "m.pt"), "--no-progress", "--params"]
    assert main([*fit, '{"n_epochs": 2, "early_stopping": false, "lr": 1e9}']) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the training loss became") and err.count("\n") == 1
    assert not (tmp_path / "m.pt").exists()
    assert main([*fit, '{"n_epochs": 2, "n_inducing": 8, "verbose": false}']) == 0  # a hyper-parameter like any other


def test_cli_fit_checkpoints_and_resumes(tmp_path, capsys):
    lines = [f"u{k % 30},i{k % 17},{1 + k % 5}" for k in range(600)]
    (tmp_path / "r.csv").write_text("\n".join(lines))
    common = ["fit", "--ratings", str(tmp_path / "r.csv"), "--params", '{"n_epochs": 3, "n_inducing": 8}',
              "--no-progress", "--checkpoint", str(tmp_path / "c.pt")]
    assert main([*common, "--out", str(tmp_path / "a.pt")]) == 0
    first = capsys.readouterr().out
    assert (tmp_path / "c.pt").exists()
    # resuming from the checkpoint of the finished run trains nothing more and saves the same model
    assert main([*common, "--resume", "--out", str(tmp_path / "b.pt")]) == 0
    second = capsys.readouterr().out
    assert first.split("training RMSE")[1].split("Saved")[0] == second.split("training RMSE")[1].split("Saved")[0]
    (tmp_path / "other.csv").write_text("\n".join(lines[:500]))
    assert main(["fit", "--ratings", str(tmp_path / "other.csv"), "--out", str(tmp_path / "c2.pt"),
                 "--params", '{"n_epochs": 3, "n_inducing": 8}', "--checkpoint", str(tmp_path / "c.pt"),
                 "--resume"]) == 2
    assert "cannot resume (n_ratings: 600 in the checkpoint, 500 now" in capsys.readouterr().err
    assert main(["fit", "--ratings", str(tmp_path / "r.csv"), "--out", str(tmp_path / "c3.pt"), "--resume"]) == 2
    assert "--resume needs --checkpoint FILE" in capsys.readouterr().err


def test_cli_recommend_shows_titles_std_and_intervals_and_folds_in(saved_model, capsys):
    assert main(["recommend", "--model", str(saved_model), "--user", "1", "-n", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["rank", "item", "title", "est", "std", "90", "%", "interval"]
    assert len(out) == 2 + 4 and "Movie number" in out[2] and "[" in out[2]
    assert main(["recommend", "--model", str(saved_model), "--user", "stranger", "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert "cold-start ranking" in out  # the header says which rule of strategy auto this user got
    assert "by mean - 1 std (this user has fewer than 20 ratings; strategy auto)" in out
    assert main(["recommend", "--model", str(saved_model), "--user", "stranger", "-n", "3", "--strategy", "lcb",
                 "--rate", "1=5", "2=1", "3=4"]) == 0
    out = capsys.readouterr().out
    assert "3 rating(s) folded in (not in the training data)" in out and "mean - 1 std" in out
    assert not any(line.split()[1] in {"1", "2", "3"} for line in out.splitlines()[2:])  # rated: excluded
    assert main(["recommend", "--model", str(saved_model), "--user", "x", "--rate", "1=9"]) == 2
    assert "rating scale [1, 5]" in capsys.readouterr().err
    assert main(["recommend", "--model", str(saved_model), "--user", "x", "--rate", "nope=3"]) == 2
    assert "not in the training data: ['nope']" in capsys.readouterr().err


def test_a_list_option_given_more_than_once_adds_up(saved_model, capsys):
    """`--rate 1=5 --rate 2=1` folds in both ratings (argparse's default kept only the last); a list option's
    default is replaced, not added to."""
    from mogp_surprise.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["compare"]).algos == ["mwgp", "svd", "svdpp"]
    assert parse(["compare", "--algos", "svd", "--algos", "mwgp", "svdpp"]).algos == ["svd", "mwgp", "svdpp"]
    assert parse(["compare", "--reuse", "svd", "--reuse", "myfm"]).reuse == ["svd", "myfm"]
    assert parse(["ask", "--model", "m", "--user", "u", "--rate", "1=5", "--rate", "2=1"]).rate == ["1=5", "2=1"]
    assert main(["recommend", "--model", str(saved_model), "--user", "stranger", "-n", "3",
                 "--rate", "1=5", "--rate", "2=1", "3=4"]) == 0
    assert "3 rating(s) folded in (not in the training data)" in capsys.readouterr().out
    assert main(["recommend", "--model", str(saved_model), "--user", "x", "--rate", "1=5", "--rate", "1=4"]) == 2
    assert "--rate gives the item '1' more than once" in capsys.readouterr().err


def test_the_parser_does_not_load_the_evaluation_stack():
    """A serving command's parser reads the algorithms' names only (each command imports what it runs)."""
    import subprocess
    import sys

    code = ("import sys; from mogp_surprise.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('scipy', 'torch', 'mogp_surprise.evaluation', 'surprise') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_serving_command_starts_neither_numba_nor_torchs_compiler(saved_model):
    """One request per process: numba's start-up and the import of torch._dynamo (which any torch.optim optimiser
    triggers) took 1 and 1.7 s of a command's 8-13 s on ML-1M; fold-in's optimiser is numpy's, the kernels unused."""
    code = ("import sys; from mogp_surprise.cli import main; from mogp_surprise.core import optim; "
            f"m = {str(saved_model)!r}; "
            "codes = [main(['recommend', '--model', m, '--user', 'new', '--rate', '1=5', '2=3']), "
            "main(['ask', '--model', m, '--user', '1', '--rate', '3=4']), "
            "main(['predict', '--model', m, '--user', '1', '--item', '2'])]; "
            "print(codes, optim._SERVE_COMPILED, sorted(x for x in ('numba', 'torch._dynamo') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[0, 0, 0] True []"  # and the setting restored after each command


def test_cli_ask_lists_questions_with_titles_and_folds_in_answers(saved_model, capsys):
    from mogp_surprise import MWGP

    assert main(["ask", "--model", str(saved_model), "--user", "newcomer", "-n", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "not in the training data; no answers yet" in out[0]
    assert out[2].split() == ["rank", "item", "title", "gain", "chance", "est", "std", "90", "%", "interval"]
    asked = [line.split()[1] for line in out[3:]]
    assert len(asked) == 3 and asked == list(MWGP.load(saved_model).ask("newcomer", n=3)["item"])
    assert main(["ask", "--model", str(saved_model), "--user", "newcomer", "--rate", f"{asked[0]}=5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 answer(s) folded in" in out[0] and asked[0] not in [line.split()[1] for line in out[3:]]
    assert main(["recommend", "--model", str(saved_model), "--user", "1", "-n", "3", "--strategy", "thompson",
                 "--seed", "1"]) == 0
    assert "Thompson sampling" in capsys.readouterr().out


def test_cli_predict_prints_mean_std_and_interval(saved_model, capsys):
    from mogp_surprise import MWGP

    assert main(["predict", "--model", str(saved_model), "--user", "1", "--item", "2"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    mean, var = MWGP.load(saved_model).predict_dist("1", "2")
    assert f"{mean:.2f}" in line and f"{np.sqrt(var):.2f}" in line and "Movie number 2" in line
    assert main(["predict", "--model", str(saved_model), "--user", "nobody", "--item", "2"]) == 0
    assert "user nobody is not in the model (cold start)" in capsys.readouterr().out
    assert main(["predict", "--model", str(saved_model), "--user", " 1 ", "--item", "2 "]) == 0  # as a file's ids
    assert capsys.readouterr().out.splitlines()[-1] == line
    assert main(["predict", "--model", str(saved_model), "--user=--5", "--item", "2"]) == 0  # no int twin
    assert "user --5 is not in the model (cold start)" in capsys.readouterr().out
    for args in (["predict", "--user", "", "--item", "2"], ["recommend", "--user", " "], ["ask", "--user", ""],
                 ["predict", "--user", "1", "--item", ""]):  # a missing argument, not a cold-start answer
        assert main([*args, "--model", str(saved_model)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "an id must not be empty or blank, got '" in err[0]


def test_the_printed_interval_stays_within_the_scale_at_both_ends(capsys):
    """A mean above the scale (a model fitted on ratings beyond its Reader's scale) printed [5.76, 5.00]."""
    from types import SimpleNamespace

    from mogp_surprise.cli.serving import _print_rows

    algo = SimpleNamespace(trainset=SimpleNamespace(rating_scale=(1, 5)), item_names_=None)
    _print_rows(algo, pd.DataFrame({"item": ["a", "b", "c"], "mean": [8.0, -2.0, 3.0], "std": [0.5, 0.3, 1.0]}))
    rows = [line.split(None, 3)[1:] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["5.00", "0.50", "[5.00, 5.00]"], ["1.00", "0.30", "[1.00, 1.00]"], ["3.00", "1.00", "[1.36, 4.64]"]]


def test_cli_predict_on_a_model_with_int_ids(tmp_path, capsys):
    from surprise import Dataset, Reader

    from mogp_surprise import MWGP

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"u": rng.integers(0, 40, 800), "i": rng.integers(0, 30, 800),
                       "r": rng.integers(1, 6, 800).astype(float)})
    algo = MWGP(n_epochs=2, n_inducing=8, random_state=0).fit(
        Dataset.load_from_df(df, Reader(rating_scale=(1, 5))).build_full_trainset())
    algo.item_names_ = {str(i): f"title {i}" for i in range(30)}
    algo.save(tmp_path / "int.pt")
    assert main(["predict", "--model", str(tmp_path / "int.pt"), "--user", "3", "--item", "5"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.split()[:3] == ["5", "title", "5"] and "cold start" not in line


def test_cli_compare_with_the_bayesian_gplvm(tiny_ml100k, tmp_path, capsys):
    pytest.importorskip("gpytorch", reason="the Bayesian GPLVM needs GPyTorch (pip install -e '.[bgplvm]')")
    out = tmp_path / "res"
    rc = main(["compare", "--dataset", "ml-100k", "--data-dir", str(tiny_ml100k), "--folds", "2",
               "--algos", "bgplvm", "svd", "--out", str(out), "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| Bayesian GPLVM (GPyTorch) | predictive |" in printed
    folds = pd.read_csv(out / "folds.csv").set_index("algo")
    ratings = np.loadtxt(tiny_ml100k / "ml-100k" / "u.data", usecols=2)
    # below the global mean (about the ratings' std) on these 600 training ratings, intervals near 90 %
    assert folds.loc["bgplvm", "rmse_q100"].mean() < 0.97 * ratings.std()
    assert folds.loc["bgplvm", "coverage_90"].between(0.8, 0.97).all()
    curves = pd.read_csv(out / "curves.csv")
    assert curves.loc[curves["algo"] == "bgplvm", "rmse"].nunique() > 5  # a real QP curve, not ties


def test_a_missing_optional_dependency_stops_compare_before_any_fit(synthetic_data, monkeypatch, capsys,
                                                                     tiny_ml100k, tmp_path):
    import mogp_surprise.comparison.bgplvm as bgplvm_algo

    _Recorder.seen = []
    monkeypatch.setattr(bgplvm_algo, "gpytorch_available", lambda: False)
    extra = {"rec_a": AlgoSpec("A", "predictive", lambda seed, p: _Recorder())}
    with pytest.raises(ImportError, match=r"pip install -e '\.\[bgplvm\]'"):
        compare(synthetic_data, algos=["rec_a", "bgplvm"], n_folds=2, extra_algos=extra)
    assert _Recorder.seen == []
    rc = main(["compare", "--data-dir", str(tiny_ml100k), "--folds", "2", "--algos", "svd", "bgplvm",
               "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2 and "[bgplvm]" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_cli_errors_under_torchrun_name_the_rank_in_one_write(tmp_path, monkeypatch):
    """torchrun passes every process's stderr through: each error is one write, prefixed by its rank."""
    import io

    writes: list[str] = []

    class Stderr(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr("sys.stderr", Stderr())
    missing = str(tmp_path / "none.pt")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["predict", "--model", missing, "--user", "1", "--item", "2"]) == 2
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main(["predict", "--model", missing, "--user", "1", "--item", "2"]) == 2
    assert len(writes) == 2 and all(w.endswith("\n") and w.count("\n") == 1 for w in writes), writes
    assert writes[0].startswith("error (rank 1): ") and writes[1].startswith("error: ") and missing in writes[1]
