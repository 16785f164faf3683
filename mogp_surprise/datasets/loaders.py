"""Load the public rating data sets (MovieLens, Jester) without network access at import time.

Look-up order of :func:`load_ratings`:

1. the data directory: ``data_dir`` if given, else the ``MOGP_DATA`` environment variable;
   both the original GroupLens/Jester layouts and the ``ratings.csv.gz`` layout are accepted;
2. Surprise's download cache (``SURPRISE_DATA_FOLDER``, default ``~/.surprise_data/``);
3. with ``download=True``, Surprise's non-interactive ``download_builtin_dataset``.

Raw ids are strings, as in ``surprise.Dataset.load_builtin``, so that predictions made on a
data set loaded here use the same ids as one loaded through Surprise.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
import pandas as pd

from ._parsers import Parser, parse_csv, parse_double_colon, parse_tab, parse_whitespace, validate_ratings

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

#: Environment variable naming the folder that holds the rating files.
DATA_ENV = "MOGP_DATA"


@dataclass(frozen=True)
class FileLayout:
    """One place where a data set's ratings file may lie, relative to a data directory."""

    path: str
    parser: Parser


@dataclass(frozen=True)
class DatasetSpec:
    """What :func:`load_ratings` knows about one data set.

    Attributes
    ----------
    name : str
        Registry key, also Surprise's builtin name when ``surprise_layout`` is not None.
    rating_scale : tuple of float
        ``(low, high)`` bounds of the ratings.
    layouts : tuple of FileLayout
        Candidate files under a data directory, in order of preference.
    surprise_layout : FileLayout or None
        The file inside Surprise's download cache; None if Surprise cannot download the set.
    url : str
        Where the original archive can be downloaded by hand.
    """

    name: str
    rating_scale: tuple[float, float]
    layouts: tuple[FileLayout, ...]
    surprise_layout: FileLayout | None
    url: str


_GROUPLENS = "https://files.grouplens.org/datasets/movielens/"

#: Registry of the data sets :func:`load_ratings` can read.
DATASETS: dict[str, DatasetSpec] = {
    "ml-100k": DatasetSpec(
        "ml-100k", (1.0, 5.0),
        (FileLayout("ml-100k/u.data", parse_tab), FileLayout("u.data", parse_tab),
         FileLayout("ml-100k/ml-100k/u.data", parse_tab)),  # data_dir = a Surprise cache
        FileLayout("ml-100k/ml-100k/u.data", parse_tab), _GROUPLENS + "ml-100k.zip"),
    "ml-1m": DatasetSpec(
        "ml-1m", (1.0, 5.0),
        (FileLayout("ml-1m/ratings.dat", parse_double_colon),
         FileLayout("ml-1m/ratings.csv.gz", parse_csv),
         FileLayout("ratings.dat", parse_double_colon), FileLayout("ratings.csv.gz", parse_csv),
         FileLayout("ml-1m/ml-1m/ratings.dat", parse_double_colon)),
        FileLayout("ml-1m/ml-1m/ratings.dat", parse_double_colon), _GROUPLENS + "ml-1m.zip"),
    "ml-10m": DatasetSpec(
        "ml-10m", (0.5, 5.0),
        (FileLayout("ml-10M100K/ratings.dat", parse_double_colon),
         FileLayout("ml-10m/ratings.dat", parse_double_colon),
         FileLayout("ml-10m/ratings.csv.gz", parse_csv),
         FileLayout("ratings.dat", parse_double_colon)),
        None, _GROUPLENS + "ml-10m.zip"),
    "jester": DatasetSpec(
        "jester", (-10.0, 10.0),
        (FileLayout("jester/jester_ratings.dat", parse_whitespace),
         FileLayout("jester_ratings.dat", parse_whitespace)),
        FileLayout("jester/jester_ratings.dat", parse_whitespace),
        "https://eigentaste.berkeley.edu/dataset/archive/jester_dataset_2.zip"),
}


def find_data_dir(data_dir: PathLike | None = None) -> Path | None:
    """Return the data directory to search: ``data_dir`` if given, else ``$MOGP_DATA``, else None.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        Explicit folder; wins over the environment variable.

    Returns
    -------
    pathlib.Path or None
        The folder (``~`` expanded, not checked for existence), or None when neither is set.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV, "").strip()
    return Path(env).expanduser() if env else None


def surprise_cache_dir() -> Path:
    """Return Surprise's download folder without creating it.

    Mirrors ``surprise.builtin_datasets.get_dataset_dir()`` (``$SURPRISE_DATA_FOLDER``, default
    ``~/.surprise_data/``), read at call time, without importing Surprise or creating the folder.
    """
    default = os.path.expanduser("~") + "/.surprise_data/"
    return Path(os.environ.get("SURPRISE_DATA_FOLDER", default))


def _get_spec(name: str) -> DatasetSpec:
    if not isinstance(name, str) or name not in DATASETS:
        raise ValueError(f"name must be one of {sorted(DATASETS)}; got {name!r}")
    return DATASETS[name]


def _candidates(spec: DatasetSpec, data_dir: PathLike | None) -> list[tuple[Path, Parser, str]]:
    """List (file, parser, where) in look-up order."""
    found: list[tuple[Path, Parser, str]] = []
    root = find_data_dir(data_dir)
    if root is not None:
        where = "data_dir argument" if data_dir is not None else f"${DATA_ENV}"
        found += [(root / layout.path, layout.parser, where) for layout in spec.layouts]
    if spec.surprise_layout is not None:
        found.append((surprise_cache_dir() / spec.surprise_layout.path,
                      spec.surprise_layout.parser, "Surprise download cache, $SURPRISE_DATA_FOLDER"))
    return found


def _download(spec: DatasetSpec) -> None:
    """Fetch ``spec`` through Surprise, never prompting; Surprise's prints go to the log."""
    from surprise.builtin_datasets import download_builtin_dataset  # lazy: optional at import

    logger.info("downloading %r through Surprise from %s into %s", spec.name, spec.url, surprise_cache_dir())
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            download_builtin_dataset(spec.name)
    except OSError as exc:
        raise OSError(f"Surprise could not download {spec.name!r} from {spec.url} ({exc})") from exc
    finally:
        for line in captured.getvalue().splitlines():
            logger.info("surprise: %s", line)


def _not_found(spec: DatasetSpec, looked: list[tuple[Path, Parser, str]],
               data_dir: PathLike | None, download: bool, failure: str = "") -> FileNotFoundError:
    lines = [f"  - {path} ({where})" for path, _, where in looked]
    root = find_data_dir(data_dir)
    if root is None:
        lines.insert(0, f"  (no data_dir given and ${DATA_ENV} is not set)")
    elif not root.is_dir():
        lines.insert(0, f"  (data folder {root} does not exist)")
    layouts = ", ".join(layout.path for layout in spec.layouts)
    how = (f"Expected one of these files under the data folder: {layouts}. To get it: set the "
           f"{DATA_ENV} environment variable or pass data_dir= (--data-dir on the command line) to a folder "
           "holding one of them")
    if spec.surprise_layout is None:
        how += (f"; {spec.name!r} is not a Surprise builtin data set, so download=True cannot "
                f"fetch it: download {spec.url} by hand and unzip it into the data folder")
    elif failure:
        how = (f"The download failed: {failure}.\n{how}, or download {spec.url} by hand and unzip it into "
               "that folder")
    else:
        how += ", or pass download=True to fetch it through Surprise (the command line does unless --no-download)"
        if download:
            how += " (a download was attempted but did not produce the file)"
    return FileNotFoundError(
        f"ratings for data set {spec.name!r} not found. Looked at:\n" + "\n".join(lines)
        + f"\n{how}."
    )


def load_ratings(name: str, data_dir: PathLike | None = None, download: bool = False) -> pd.DataFrame:
    """Load a rating data set as a DataFrame with Surprise-compatible raw ids.

    Parameters
    ----------
    name : {'ml-100k', 'ml-1m', 'ml-10m', 'jester'}
        Data set, see :data:`DATASETS`.
    data_dir : str or os.PathLike, optional
        Folder holding the data; defaults to ``$MOGP_DATA``. Accepted layouts, for example:
        ``ml-100k/u.data`` or ``u.data``; ``ml-1m/ratings.dat`` or ``ml-1m/ratings.csv.gz``
        (gzip CSV with header ``user,item,rating``); ``ml-10M100K/ratings.dat``;
        ``jester/jester_ratings.dat``.
    download : bool, default=False
        If the file is found nowhere, download it through Surprise (never prompts). Not
        possible for ``'ml-10m'``.

    Returns
    -------
    pandas.DataFrame of shape (n_ratings, 3 or 4)
        Columns ``user`` and ``item`` (str raw ids), ``rating`` (float64) and, when the file
        has timestamps, ``timestamp`` (int64); rows in file order.

    Raises
    ------
    ValueError
        Unknown ``name``, or a malformed file (the message names the file and the problem).
    FileNotFoundError
        The data was found nowhere; the message lists every path looked at.
    OSError
        ``download=True`` and Surprise's download failed (no network, for example).

    Notes
    -----
    The ``ratings.csv.gz`` copy of ML-1M shipped with this project's test data renumbers the
    item ids (1..3706), so its item ids differ from those of Surprise's ``ml-1m``.
    """
    spec = _get_spec(name)
    if not isinstance(download, (bool, np.bool_)):
        raise ValueError(f"download must be a bool; got {download!r}")
    looked = _candidates(spec, data_dir)
    hit = next(((p, parser) for p, parser, _ in looked if p.is_file()), None)
    layout = spec.surprise_layout
    if hit is None and download and layout is not None:
        try:
            _download(spec)
        except OSError as exc:  # one message: where we looked, why the download failed, what to do
            raise OSError(_not_found(spec, looked, data_dir, download, failure=str(exc)).args[0]) from exc
        path = surprise_cache_dir() / layout.path
        hit = (path, layout.parser) if path.is_file() else None
    if hit is None:
        raise _not_found(spec, looked, data_dir, download)
    path, parser = hit
    logger.info("loading %r ratings from %s", spec.name, path)
    frame = validate_ratings(parser(path), spec.rating_scale, f"ratings file {str(path)!r}")
    return frame.reset_index(drop=True)


def to_surprise_dataset(df: pd.DataFrame, rating_scale: tuple[float, float] | None = None) -> Any:
    """Build a ``surprise.Dataset`` from a DataFrame with columns ``user``, ``item``, ``rating``.

    Parameters
    ----------
    df : pandas.DataFrame of shape (n_ratings, >=3)
        Other columns are ignored; ids are passed to Surprise unchanged.
    rating_scale : tuple of float, optional
        ``(low, high)``; inferred from the minimum and maximum rating when None.

    Returns
    -------
    surprise.Dataset
        Built with ``Dataset.load_from_df(df[["user", "item", "rating"]], Reader(...))``.
    """
    if rating_scale is None:
        validate_ratings(df, (-np.inf, np.inf), "df")
        ratings = df["rating"].to_numpy(dtype=np.float64)  # as numbers: the strings "10" < "9"
        rating_scale = (float(ratings.min()), float(ratings.max()))
    else:
        pair = tuple(rating_scale) if isinstance(rating_scale, (tuple, list, np.ndarray)) else ()
        if len(pair) != 2 or not all(isinstance(v, numbers.Real) and math.isfinite(v) for v in pair) \
                or not pair[0] < pair[1]:
            raise ValueError(f"rating_scale must be a pair of finite numbers (low, high) with low < high; "
                             f"got {rating_scale!r}")
        rating_scale = (float(pair[0]), float(pair[1]))
        validate_ratings(df, rating_scale, "df")
    from surprise import Dataset, Reader  # lazy: only this function needs Surprise

    return Dataset.load_from_df(df[["user", "item", "rating"]], Reader(rating_scale=rating_scale))


def load_dataset(name: str, data_dir: PathLike | None = None, download: bool = False) -> Any:
    """Load a data set (see :func:`load_ratings`) as a ``surprise.Dataset``.

    Parameters
    ----------
    name, data_dir, download
        As in :func:`load_ratings`.

    Returns
    -------
    surprise.Dataset
        With the registry's rating scale and str raw ids, like ``Dataset.load_builtin(name)``.
    """
    return to_surprise_dataset(load_ratings(name, data_dir, download), DATASETS[name].rating_scale)


def describe_ratings(df: pd.DataFrame) -> dict[str, Any]:
    """Summarise a rating frame.

    Parameters
    ----------
    df : pandas.DataFrame of shape (n_ratings, >=3)
        Columns ``user``, ``item`` and ``rating``.

    Returns
    -------
    dict
        ``n_ratings``, ``n_users``, ``n_items``, ``density`` (n_ratings / (n_users * n_items)),
        ``mean`` and ``std`` (population standard deviation) of the ratings, and ``scale``, the
        observed ``(min, max)`` rating.
    """
    validate_ratings(df, (-np.inf, np.inf), "df")
    ratings = df["rating"].to_numpy(dtype=np.float64)
    n_users, n_items = int(df["user"].nunique()), int(df["item"].nunique())
    return {
        "n_ratings": int(len(df)), "n_users": n_users, "n_items": n_items,
        "density": len(df) / (n_users * n_items),
        "mean": float(ratings.mean()), "std": float(ratings.std()),
        "scale": (float(ratings.min()), float(ratings.max())),
    }


#: per data set: the file with item titles, relative to the ratings file's folder, and how to read it
_TITLE_FILES = {"ml-100k": ("u.item", "|", "latin-1"), "ml-1m": ("movies.dat", "::", "latin-1"),
                "ml-10m": ("movies.dat", "::", "utf-8")}


def load_item_titles(name: str, data_dir: PathLike | None = None) -> dict[str, str] | None:
    """Item titles of a MovieLens data set as ``{raw item id: title}``, or None where there are none.

    Looks next to the ratings file that :func:`load_ratings` would read (no download): MovieLens
    100K's ``u.item``, 1M's and 10M's ``movies.dat``. The ``ratings.csv.gz`` copy of ML-1M renumbers
    the items, so its titles are not used (None).
    """
    spec = _get_spec(name)
    if name not in _TITLE_FILES:
        return None
    hit = next((p for p, _, _ in _candidates(spec, data_dir) if p.is_file()), None)
    if hit is None or hit.name.endswith(".csv.gz"):
        return None
    file, sep, encoding = _TITLE_FILES[name]
    path = hit.parent / file
    if not path.is_file():
        return None
    titles = {}
    with open(path, encoding=encoding) as handle:
        for line in handle:
            parts = line.rstrip("\n").split(sep)
            if len(parts) >= 2 and parts[0].strip():
                titles[parts[0].strip()] = parts[1].strip()
    return titles


def read_ratings_file(path: PathLike, sep: str = ",") -> pd.DataFrame:
    """``user, item, rating[, ...]`` rows of a text file (the command line's ``fit --ratings``): ids kept as
    stripped strings (``"NA"`` is an id), ratings as floats. A first row whose rating is not a number is a header:
    skipped, and kept in ``frame.attrs["header"]``. An empty file, an empty id or a rating that is not a number is
    an error naming the file."""
    try:
        df = pd.read_csv(path, sep=sep, header=None, dtype=str, engine="python", skip_blank_lines=True,
                         keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path} is empty: expected rows of user, item, rating") from None
    if df.shape[1] < 3:
        raise ValueError(f"{path}: expected at least 3 columns (user, item, rating) separated by {sep!r}, got "
                         f"{df.shape[1]}; pass --sep")
    df = df.iloc[:, :3].set_axis(["user", "item", "rating"], axis=1)
    ratings = pd.to_numeric(df["rating"], errors="coerce")
    header = None
    if len(df) and np.isnan(ratings.iloc[0]):  # a header row
        header, df, ratings = [str(v) for v in df.iloc[0]], df.iloc[1:], ratings.iloc[1:]
    bad = ratings.isna() | ~np.isfinite(ratings)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{path}: {int(bad.sum())} rating(s) are not numbers (first: {df['rating'].iloc[row]!r})")
    users, items = df["user"].str.strip(), df["item"].str.strip()
    blank = ((users == "") | (items == "")).to_numpy()
    if blank.any():
        row = int(np.flatnonzero(blank)[0])
        raise ValueError(f"{path}: {int(blank.sum())} row(s) have an empty user or item id (first: "
                         f"{sep.join(df.iloc[row].tolist())!r})")
    out = df.assign(user=users, item=items, rating=ratings.astype(float))
    out.attrs["header"] = header
    return out
