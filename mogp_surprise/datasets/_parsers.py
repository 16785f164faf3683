"""Parsers for the rating file formats, and validation of the parsed frames.

Every parser returns a :class:`pandas.DataFrame` with columns ``user`` and ``item`` (raw ids as
``str``, exactly the strings Surprise's ``Reader`` would produce), ``rating`` (float64) and, when
the file has one, ``timestamp`` (int64). Rows keep the file order, as in Surprise.
"""
from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

Parser = Callable[[Path], pd.DataFrame]

_DTYPES = {"user": str, "item": str, "rating": "float64", "timestamp": "int64"}
# Ids are kept verbatim ("NA" is a valid raw id); only an empty rating field counts as missing.
_NA = {"keep_default_na": False, "na_values": {"rating": [""]}}


def _read(path: Path, source, expected: str, **kwargs) -> pd.DataFrame:
    """Call ``pandas.read_csv``; parse errors name the file and the ``expected`` format."""
    try:
        with warnings.catch_warnings():  # lines with more fields than named: an error, not a quiet shift of columns
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(source, dtype=_DTYPES, **_NA, index_col=False, **kwargs)
    except pd.errors.ParserWarning:
        raise ValueError(f"malformed ratings file {str(path)!r} (expected {expected}): its lines have more fields "
                         "than that") from None
    except ValueError as exc:  # ParserError, EmptyDataError and dtype conversion errors
        raise ValueError(f"malformed ratings file {str(path)!r} (expected {expected}): {exc}") from exc
    logger.debug("parsed %d rows from %s", len(frame), path)
    return frame


def parse_tab(path: Path) -> pd.DataFrame:
    """Parse MovieLens 100K ``u.data``: tab-separated ``user item rating timestamp``, no header."""
    return _read(path, path, "tab-separated 'user item rating timestamp' lines", sep="\t",
                 header=None, names=["user", "item", "rating", "timestamp"])


def parse_double_colon(path: Path) -> pd.DataFrame:
    """Parse MovieLens 1M/10M ``ratings.dat``: ``user::item::rating::timestamp``, no header.

    ``::`` is replaced by a tab in memory so that pandas' fast C parser can read the file; this
    splits lines exactly as Surprise's ``line.split("::")`` does.
    """
    data = path.read_bytes().replace(b"::", b"\t")
    return _read(path, io.BytesIO(data), "'user::item::rating::timestamp' lines", sep="\t",
                 header=None, names=["user", "item", "rating", "timestamp"])


def parse_whitespace(path: Path) -> pd.DataFrame:
    """Parse Jester ``jester_ratings.dat``: whitespace-separated ``user item rating``, no header."""
    return _read(path, path, "whitespace-separated 'user item rating' lines", sep=r"\s+",
                 header=None, names=["user", "item", "rating"])


def parse_csv(path: Path) -> pd.DataFrame:
    """Parse a CSV file (gzip allowed) with a header naming ``user,item,rating[,timestamp]``."""
    frame = _read(path, path, "CSV with header user,item,rating", sep=",", header=0)
    missing = [c for c in ("user", "item", "rating") if c not in frame.columns]
    if missing:
        raise ValueError(f"malformed ratings file {str(path)!r}: the header must name the columns "
                         f"user, item, rating; missing {missing}, found {list(frame.columns)}")
    return frame[[c for c in ("user", "item", "rating", "timestamp") if c in frame.columns]]


def validate_ratings(frame: pd.DataFrame, rating_scale: tuple[float, float], source: str) -> pd.DataFrame:
    """Check a parsed rating frame and return it.

    Parameters
    ----------
    frame : pandas.DataFrame of shape (n_ratings, 3 or 4)
        Columns ``user``, ``item``, ``rating`` and optionally ``timestamp``.
    rating_scale : tuple of float
        ``(low, high)``; every rating must lie in ``[low, high]``.
    source : str
        What the frame is, to start error messages with (``"ratings file '<path>'"``, ``"df"``).

    Returns
    -------
    pandas.DataFrame
        ``frame`` itself.

    Raises
    ------
    TypeError
        If ``frame`` is not a DataFrame.
    ValueError
        If a column is missing or given twice, the frame is empty, an id is empty or missing, a rating is NaN
        or infinite, or a rating lies outside ``rating_scale``. The message names ``source`` and the problem.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{source} must be a pandas DataFrame with the columns user, item and rating; got "
                        f"{type(frame).__name__} (pd.DataFrame(...) builds one from an array or a dict of columns)")
    twice = [c for c in ("user", "item", "rating") if list(frame.columns).count(c) > 1]
    if twice:
        raise ValueError(f"{source} has the column(s) {twice} more than once")
    missing = [c for c in ("user", "item", "rating") if c not in frame.columns]
    if missing:
        raise ValueError(f"{source} lacks the columns {missing}; found {list(frame.columns)}")
    if len(frame) == 0:
        raise ValueError(f"{source} holds no ratings")
    for column in ("user", "item"):
        bad = (frame[column].isna() | (frame[column] == "")).to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{source}: column {column!r} is empty in "
                             f"{int(bad.sum())} row(s), first at data row {row} (0-based)")
    try:
        ratings = frame["rating"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: column 'rating' must be numeric ({exc})") from None
    nan = np.isnan(ratings)
    if nan.any():
        raise ValueError(f"{source}: {int(nan.sum())} NaN rating(s), first at data "
                         f"row {int(np.flatnonzero(nan)[0])} (0-based)")
    infinite = np.isinf(ratings)  # whatever the scale: no rating is infinite
    if infinite.any():
        raise ValueError(f"{source}: {int(infinite.sum())} infinite rating(s), first at data "
                         f"row {int(np.flatnonzero(infinite)[0])} (0-based)")
    low, high = rating_scale
    outside = (ratings < low) | (ratings > high)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise ValueError(f"{source}: {int(outside.sum())} rating(s) outside the rating scale "
                         f"[{low}, {high}], first {float(ratings[row])!r} at data row {row} (0-based)")
    return frame
