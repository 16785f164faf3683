"""The datasets layer imports only numpy and pandas (conventions: layers)."""
from __future__ import annotations

import subprocess
import sys

import mogp_surprise.datasets as datasets


def test_import_does_not_pull_surprise_or_torch():
    code = ("import sys, mogp_surprise.datasets; "
            "bad = [m for m in ('surprise', 'torch', 'sklearn', 'matplotlib') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api():
    assert set(datasets.__all__) >= {"DATASETS", "find_data_dir", "load_ratings", "load_dataset",
                                     "to_surprise_dataset", "describe_ratings",
                                     "make_synthetic_ratings"}
    for name in datasets.__all__:
        assert getattr(datasets, name) is not None
