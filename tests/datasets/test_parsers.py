"""The file parsers (datasets/_parsers.py): every layout's malformed file is named with its problem."""
from __future__ import annotations

import gzip

import pytest

from mogp_surprise.datasets import load_ratings
from mogp_surprise.datasets._parsers import parse_csv, parse_double_colon, parse_tab, parse_whitespace


def test_each_parser_reads_its_layout_as_string_ids_and_float_ratings(tmp_path):
    (tmp_path / "t").write_text("1\t20\t3\t881250949\n")
    (tmp_path / "d").write_text("1::20::3::978300760\n")
    (tmp_path / "w").write_text("1 20 -9.5\n")
    with gzip.open(tmp_path / "c.csv.gz", "wt") as handle:
        handle.write("user,item,rating\n1,20,3.5\n")
    for parse, path, rating in [(parse_tab, "t", 3.0), (parse_double_colon, "d", 3.0),
                                (parse_whitespace, "w", -9.5), (parse_csv, "c.csv.gz", 3.5)]:
        df = parse(tmp_path / path)
        assert df[["user", "item"]].iloc[0].tolist() == ["1", "20"] and df["rating"].iloc[0] == rating


@pytest.mark.parametrize("name, relative, text, problem", [
    ("ml-100k", "u.data", "1\t2\t3\t4\n1\t2\t3\t4\t5\t6\n", "Expected 4 fields"),
    ("ml-100k", "u.data", "1\t2\tgood\t4\n", "could not convert"),
    ("ml-100k", "u.data", "1\t2\t3\n", r"expected tab-separated 'user item rating timestamp'"),
    ("ml-100k", "u.data", "1\t2\t\t4\n", "NaN rating"),
    ("ml-100k", "u.data", "1\t2\t6\t4\n", r"outside the rating scale \[1.0, 5.0\], first 6.0"),
    ("ml-100k", "u.data", "\t2\t3\t4\n", "'user' is empty"),
    ("ml-100k", "u.data", "", "holds no ratings"),
    ("ml-1m", "ratings.dat", "1:2:3:4\n", "expected 'user::item::rating::timestamp'"),
    ("ml-10m", "ratings.dat", "1::2::0.25::4\n", "outside the rating scale"),
    ("jester", "jester_ratings.dat", "1 2 10.5\n", "outside the rating scale"),
])
def test_malformed_file_names_file_and_problem(tmp_path, name, relative, text, problem):
    (tmp_path / relative).write_text(text)
    with pytest.raises(ValueError, match=problem) as info:
        load_ratings(name, tmp_path)
    assert str(tmp_path / relative) in str(info.value)


def test_csv_without_required_header(tmp_path):
    with gzip.open(tmp_path / "ratings.csv.gz", "wt") as handle:
        handle.write("userId,movieId,rating\n1,2,3\n")
    with pytest.raises(ValueError, match=r"missing \['user', 'item'\]") as info:
        load_ratings("ml-1m", tmp_path)
    assert "ratings.csv.gz" in str(info.value)


def test_lines_with_more_fields_than_the_layout_are_refused_not_shifted(tmp_path):
    """pandas took the first of five fields as the row index: user 2, item 3, rating 4 from '1 2 3 4 5'."""
    (tmp_path / "u.data").write_text("1\t2\t3\t4\t5\n5\t6\t4\t7\t8\n")
    with pytest.raises(ValueError, match=r"malformed ratings file .*u\.data.* its lines have more fields than that"):
        parse_tab(tmp_path / "u.data")
