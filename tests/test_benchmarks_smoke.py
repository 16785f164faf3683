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
