"""Data for comparisons and benchmarks: MovieLens when it is found, else synthetic ratings that say so."""
from __future__ import annotations

import pytest

from mogp_surprise.comparison.data import load_or_synthesize, synthetic
from tests.conftest import DATA_DIR, _skip_reason


def test_without_data_the_stand_in_is_labelled_with_where_the_loader_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("MOGP_DATA", raising=False)
    monkeypatch.setenv("SURPRISE_DATA_FOLDER", str(tmp_path / "cache"))
    data = load_or_synthesize("ml-100k", data_dir=tmp_path / "nothing", download=False, synthetic_size=2_000)
    assert data.synthetic and data.name == "synthetic" and len(data.ratings) == 2_000
    assert str(tmp_path / "nothing") in data.reason and data.describe().startswith("SYNTHETIC ratings (2,000)")
    assert "not MovieLens" in data.describe()
    trainset = data.surprise_dataset().build_full_trainset()
    assert trainset.n_ratings == 2_000 and trainset.rating_scale == (1, 5)


def test_synthetic_is_seeded_and_scales_users_and_items_with_size():
    a, b = synthetic(5_000, random_state=3), synthetic(5_000, random_state=3)
    assert a.ratings.equals(b.ratings) and not a.ratings.equals(synthetic(5_000, random_state=4).ratings)
    small, large = synthetic(2_000), synthetic(20_000)
    assert large.ratings["user"].nunique() > 2 * small.ratings["user"].nunique()


@pytest.mark.skipif(not (DATA_DIR / "ml-100k" / "u.data").exists(), reason=_skip_reason("ml-100k"))
def test_movielens_is_loaded_with_its_scale_and_titles():
    data = load_or_synthesize("ml-100k", data_dir=DATA_DIR, download=False)
    assert not data.synthetic and len(data.ratings) == 100_000 and data.rating_scale == (1, 5)
    assert data.titles and data.describe() == "ml-100k (100,000 ratings)"
