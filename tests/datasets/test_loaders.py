"""Tests for mogp_surprise.datasets.loaders on small files written in each supported layout."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mogp_surprise.datasets import (DATASETS, describe_ratings, find_data_dir, load_dataset,
                                    load_ratings, surprise_cache_dir, to_surprise_dataset)


def _assert_frame(df: pd.DataFrame, rows, timestamps: bool) -> None:
    expected = ["user", "item", "rating"] + (["timestamp"] if timestamps else [])
    assert list(df.columns) == expected
    assert df["user"].tolist() == [r[0] for r in rows]
    assert df["item"].tolist() == [r[1] for r in rows]
    assert all(isinstance(v, str) for v in df["user"]) and all(isinstance(v, str) for v in df["item"])
    assert df["rating"].dtype == np.float64
    np.testing.assert_array_equal(df["rating"], [r[2] for r in rows])
    if timestamps:
        assert df["timestamp"].dtype == np.int64
        assert df["timestamp"].tolist() == [r[3] for r in rows]


# --- layouts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("relative", ["ml-100k/u.data", "u.data", "ml-100k/ml-100k/u.data"])
def test_ml100k_layouts(tmp_path, files, relative):
    files.u_data(tmp_path / relative)
    _assert_frame(load_ratings("ml-100k", tmp_path), files.rows, timestamps=True)


@pytest.mark.parametrize("relative", ["ml-1m/ratings.dat", "ratings.dat"])
def test_ml1m_double_colon_layouts(tmp_path, files, relative):
    files.ratings_dat(tmp_path / relative)
    _assert_frame(load_ratings("ml-1m", tmp_path), files.rows, timestamps=True)


@pytest.mark.parametrize("relative", ["ml-1m/ratings.csv.gz", "ratings.csv.gz"])
def test_ml1m_shared_csv_gz_layout(tmp_path, files, relative):
    files.csv_gz(tmp_path / relative)
    _assert_frame(load_ratings("ml-1m", tmp_path), files.rows, timestamps=False)


def test_original_layout_preferred_over_csv(tmp_path, files):
    files.ratings_dat(tmp_path / "ml-1m" / "ratings.dat")
    files.csv_gz(tmp_path / "ml-1m" / "ratings.csv.gz", rows=files.rows[:1])
    assert len(load_ratings("ml-1m", tmp_path)) == len(files.rows)


@pytest.mark.parametrize("relative", ["ml-10M100K/ratings.dat", "ml-10m/ratings.dat"])
def test_ml10m_layouts_half_stars(tmp_path, files, relative):
    rows = [("1", "122", 0.5, 838985046), ("1", "185", 4.5, 838983525)]
    files.ratings_dat(tmp_path / relative, rows=rows)
    _assert_frame(load_ratings("ml-10m", tmp_path), rows, timestamps=True)


@pytest.mark.parametrize("relative", ["jester/jester_ratings.dat", "jester_ratings.dat"])
def test_jester_whitespace_layout(tmp_path, files, relative):
    files.jester(tmp_path / relative)
    _assert_frame(load_ratings("jester", tmp_path), files.jester_rows, timestamps=False)


@pytest.mark.parametrize("name, writer, relative", [
    ("ml-100k", "u_data", "ml-100k/u.data"),
    ("ml-1m", "ratings_dat", "ml-1m/ratings.dat"),
    ("jester", "jester", "jester/jester_ratings.dat"),
])
def test_raw_ids_match_surprise_reader(tmp_path, files, name, writer, relative):
    from surprise import Dataset, Reader
    from surprise.builtin_datasets import BUILTIN_DATASETS

    path = getattr(files, writer)(tmp_path / relative)
    reference = Dataset.load_from_file(str(path), Reader(**BUILTIN_DATASETS[name].reader_params))
    ours = load_dataset(name, tmp_path)
    assert [r[:3] for r in ours.raw_ratings] == [r[:3] for r in reference.raw_ratings]
    assert ours.reader.rating_scale == DATASETS[name].rating_scale


# --- where to look -------------------------------------------------------------------------------

def test_find_data_dir_precedence(tmp_path, monkeypatch):
    assert find_data_dir() is None
    monkeypatch.setenv("MOGP_DATA", "  ")
    assert find_data_dir() is None
    monkeypatch.setenv("MOGP_DATA", str(tmp_path / "env"))
    assert find_data_dir() == tmp_path / "env"
    assert find_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert find_data_dir(str(tmp_path)) == tmp_path


def test_mogp_data_env_honoured(tmp_path, files, monkeypatch):
    files.u_data(tmp_path / "ml-100k" / "u.data")
    monkeypatch.setenv("MOGP_DATA", str(tmp_path))
    assert len(load_ratings("ml-100k")) == len(files.rows)


def test_explicit_data_dir_wins_over_env(tmp_path, files, monkeypatch):
    files.u_data(tmp_path / "env" / "u.data", rows=[("1", "1", 1.0, 1)])
    files.u_data(tmp_path / "arg" / "u.data", rows=[("2", "2", 5.0, 2)])
    monkeypatch.setenv("MOGP_DATA", str(tmp_path / "env"))
    assert load_ratings("ml-100k", tmp_path / "arg")["rating"].tolist() == [5.0]


@pytest.mark.parametrize("name, writer, relative", [
    ("ml-100k", "u_data", "ml-100k/ml-100k/u.data"),
    ("ml-1m", "ratings_dat", "ml-1m/ml-1m/ratings.dat"),
    ("jester", "jester", "jester/jester_ratings.dat"),
])
def test_surprise_cache_found(isolated_env, files, name, writer, relative):
    getattr(files, writer)(isolated_env / relative)
    assert len(load_ratings(name)) == 4


def test_data_dir_wins_over_surprise_cache(tmp_path, isolated_env, files):
    files.u_data(isolated_env / "ml-100k" / "ml-100k" / "u.data", rows=[("1", "1", 1.0, 1)])
    files.u_data(tmp_path / "u.data", rows=[("2", "2", 5.0, 2)])
    assert load_ratings("ml-100k", tmp_path)["user"].tolist() == ["2"]


def test_surprise_cache_dir_mirrors_surprise(isolated_env):
    from surprise.builtin_datasets import get_dataset_dir

    assert surprise_cache_dir() == isolated_env
    assert surprise_cache_dir() == type(isolated_env)(get_dataset_dir())


# --- download through Surprise -------------------------------------------------------------------

@pytest.fixture
def fake_download(monkeypatch, isolated_env, files):
    """Replace Surprise's downloader; it writes the file where Surprise would and prints."""
    import builtins

    import surprise.builtin_datasets as builtin

    calls = []

    def download(name, *args, **kwargs):
        calls.append((name, args, kwargs))
        print("Trying to download dataset from somewhere...")
        if name == "ml-100k":
            files.u_data(isolated_env / "ml-100k" / "ml-100k" / "u.data")

    def no_prompt(*args):
        raise AssertionError("load_ratings must never prompt")

    monkeypatch.setattr(builtin, "download_builtin_dataset", download)
    monkeypatch.setattr(builtins, "input", no_prompt)
    return calls


def test_download_true_calls_surprise_non_interactively(fake_download, files, capsys, caplog):
    caplog.set_level("INFO", logger="mogp_surprise")
    df = load_ratings("ml-100k", download=True)
    assert fake_download == [("ml-100k", (), {})]
    assert len(df) == len(files.rows)
    assert capsys.readouterr().out == ""  # Surprise's prints go to the log
    assert "Trying to download" in caplog.text


def test_download_false_never_downloads(fake_download):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_ratings("ml-100k")
    assert fake_download == []


def test_download_skipped_when_file_present(fake_download, tmp_path, files):
    files.u_data(tmp_path / "u.data")
    load_ratings("ml-100k", tmp_path, download=True)
    assert fake_download == []


def test_download_without_file_reports_attempt(fake_download):
    with pytest.raises(FileNotFoundError, match="download was attempted"):
        load_ratings("ml-1m", download=True)
    assert [c[0] for c in fake_download] == ["ml-1m"]


def test_ml10m_cannot_be_downloaded(fake_download):
    with pytest.raises(FileNotFoundError, match="not a Surprise builtin") as info:
        load_ratings("ml-10m", download=True)
    assert "ml-10m.zip" in str(info.value)
    assert fake_download == []


def test_download_network_error_gives_advice(monkeypatch):
    import surprise.builtin_datasets as builtin

    def offline(name):
        raise OSError("no network")

    monkeypatch.setattr(builtin, "download_builtin_dataset", offline)
    with pytest.raises(OSError, match="(?s)not found. Looked at:.*The download failed: .*no network.*MOGP_DATA"):
        load_ratings("jester", download=True)


# --- errors --------------------------------------------------------------------------------------

def test_missing_data_lists_every_place(tmp_path, isolated_env):
    with pytest.raises(FileNotFoundError) as info:
        load_ratings("ml-1m", tmp_path)
    message = str(info.value)
    for layout in DATASETS["ml-1m"].layouts:
        assert str(tmp_path / layout.path) in message
    assert str(isolated_env / "ml-1m" / "ml-1m" / "ratings.dat") in message
    assert "MOGP_DATA" in message and "data_dir" in message and "download=True" in message


def test_missing_data_without_dir_says_so():
    with pytest.raises(FileNotFoundError, match=r"no data_dir given and \$MOGP_DATA is not set"):
        load_ratings("ml-100k")


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_ratings("ml-100k", tmp_path / "nope")


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="ml-20m"), r"name must be one of .*got 'ml-20m'"),
    (dict(name="ml-100k", download="yes"), r"download must be a bool; got 'yes'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_ratings(**kwargs)


# --- Surprise datasets and summaries -------------------------------------------------------------

def test_to_surprise_dataset_infers_scale_and_keeps_ids():
    df = pd.DataFrame({"user": ["a", "b", "a"], "item": [1, 2, 2], "rating": [-2.0, 0.5, 3.0],
                       "extra": [0, 0, 0]})
    data = to_surprise_dataset(df)
    assert data.reader.rating_scale == (-2.0, 3.0)
    assert [r[:3] for r in data.raw_ratings] == [("a", 1, -2.0), ("b", 2, 0.5), ("a", 2, 3.0)]
    assert data.build_full_trainset().n_ratings == 3


@pytest.mark.parametrize("df, scale, match", [
    (pd.DataFrame({"user": ["a"], "rating": [1.0]}), None, r"lacks the columns \['item'\]"),
    (pd.DataFrame({"user": ["a"], "item": ["b"], "rating": [np.nan]}), None, "NaN rating"),
    (pd.DataFrame({"user": ["a"], "item": ["b"], "rating": [6.0]}), (1, 5), "outside"),
    (pd.DataFrame({"user": ["a"], "item": ["b"], "rating": [3.0]}), (5, 1), "rating_scale must"),
])
def test_to_surprise_dataset_rejects_bad_input(df, scale, match):
    with pytest.raises(ValueError, match=match):
        to_surprise_dataset(df, scale)


def test_describe_ratings():
    df = pd.DataFrame({"user": ["a", "a", "b"], "item": ["x", "y", "x"], "rating": [1.0, 2.0, 3.0]})
    summary = describe_ratings(df)
    assert summary == {"n_ratings": 3, "n_users": 2, "n_items": 2, "density": 0.75, "mean": 2.0,
                       "std": pytest.approx(np.std([1.0, 2.0, 3.0])), "scale": (1.0, 3.0)}


def test_registry_scales():
    scales = {name: spec.rating_scale for name, spec in DATASETS.items()}
    assert scales == {"ml-100k": (1, 5), "ml-1m": (1, 5), "ml-10m": (0.5, 5), "jester": (-10, 10)}
    assert DATASETS["ml-10m"].surprise_layout is None


@pytest.mark.parametrize("ratings, scale, match", [
    ([1.0, np.inf], None, r"df: 1 infinite rating\(s\), first at data row 1"),
    ([1.0, 4.0], 5, r"rating_scale must be a pair of finite numbers \(low, high\) with low < high; got 5"),
    ([1.0, 4.0], "15", r"rating_scale must be a pair of finite numbers .* got '15'"),
    ([1.0, 4.0], (1, np.inf), r"rating_scale must be a pair of finite numbers"),
])
def test_to_surprise_dataset_checks_the_ratings_and_the_scale(ratings, scale, match):
    df = pd.DataFrame({"user": ["a", "b"], "item": ["x", "y"], "rating": ratings})
    with pytest.raises(ValueError, match=match):
        to_surprise_dataset(df, scale)


@pytest.mark.parametrize("value, match", [(np.inf, r"df: 1 infinite rating\(s\), first at data row 2"),
                                          (np.nan, r"df: 1 NaN rating\(s\), first at data row 2")])
def test_describe_ratings_refuses_a_rating_that_is_no_number(value, match):
    from mogp_surprise.datasets import describe_ratings

    df = pd.DataFrame({"user": [1, 2, 3], "item": [1, 1, 2], "rating": [1.0, 2.0, value]})
    with pytest.raises(ValueError, match=match):
        describe_ratings(df)
    assert describe_ratings(df.iloc[:2])["scale"] == (1.0, 2.0)


def test_the_inferred_scale_of_ratings_given_as_strings_is_numeric():
    """max() of the strings "1".."10" is "9": the scale came out (1, 9) and every 10 was clipped to 9."""
    df = pd.DataFrame({"user": list("abcd"), "item": list("wxyz"), "rating": ["1", "10", "9", "2"]})
    assert to_surprise_dataset(df).reader.rating_scale == (1.0, 10.0)


@pytest.mark.parametrize("frame, error, match", [
    (np.array([["a", "b", 1.0]], dtype=object), TypeError, "df must be a pandas DataFrame with the columns user"),
    ({"user": ["a"], "item": ["b"], "rating": [1.0]}, TypeError, "got dict"),
    (pd.concat([pd.DataFrame({"user": ["a"], "item": ["b"], "rating": [1.0]}), pd.DataFrame({"rating": [2.0]})],
               axis=1), ValueError, r"df has the column\(s\) \['rating'\] more than once"),
])
def test_a_frame_that_is_no_rating_frame_is_named(frame, error, match):
    with pytest.raises(error, match=match):
        to_surprise_dataset(frame)
    with pytest.raises(error, match=match):
        from mogp_surprise.datasets import describe_ratings
        describe_ratings(frame)


def test_categorical_ratings_infer_their_numeric_scale():
    df = pd.DataFrame({"user": list("abc"), "item": list("xyz"), "rating": pd.Categorical([1.0, 5.0, 3.0])})
    assert to_surprise_dataset(df).reader.rating_scale == (1.0, 5.0)
