"""The benchmark scripts run end to end in their quick mode (their real runs live outside the suite)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["epoch_time", "inference", "scaling", "accuracy", "cold_start", "topn", "context", "surprise_test_1m", "small_data", "foldin", "distributed", "serving", "regimes", "new_users"])
def test_benchmark_quick_mode(name, tmp_path, capsys):
    out = tmp_path / f"{name}.json"
    _load(name).main(["--quick", "--out", str(out)])
    payload = json.loads(out.read_text())
    assert payload["benchmark"].startswith(name) and payload["machine"]["torch"]
    assert "wrote" in capsys.readouterr().out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message without CUDA")
def test_the_cuda_check_says_when_there_is_no_gpu(tmp_path, capsys):
    """benchmarks/cuda_check.py runs only on a GPU; without one it says so and exits with status 2."""
    assert _load("cuda_check").main(["--quick", "--out", str(tmp_path / "c.json")]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_results_go_into_a_folder_given_as_out(tmp_path):
    """`--out DIR` (an existing folder) failed with IsADirectoryError after every fit of the run."""
    common = _load("_common")
    path = common.write_json("context", {"rows": []}, str(tmp_path))
    assert path == tmp_path / "context.json" and json.loads(path.read_text())["benchmark"] == "context"
    assert common.write_json("x", {}, str(tmp_path / "y.json")) == tmp_path / "y.json"
