"""Rating data for comparisons, benchmarks and examples: MovieLens when it can be found, else labelled synthetic ratings."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..datasets import load_item_titles, load_ratings, make_synthetic_ratings, to_surprise_dataset
from ..datasets.loaders import DATASETS


@dataclass
class LoadedData:
    """A rating data set plus a sentence saying where it came from."""

    name: str
    ratings: pd.DataFrame
    rating_scale: tuple[float, float]
    source: str
    synthetic: bool = False
    reason: str = ""  # for synthetic stand-ins: why the real data could not be loaded (where we looked)
    titles: dict | None = None  # raw item id -> title, where the data set has titles

    def describe(self) -> str:
        """Where the ratings come from; for a synthetic stand-in also why the real data were not loaded."""
        if self.synthetic and self.reason:
            return f"{self.source} (not MovieLens: {self.reason})"
        return self.source

    def surprise_dataset(self):
        return to_surprise_dataset(self.ratings[["user", "item", "rating"]], rating_scale=self.rating_scale)


def synthetic(n_ratings: int = 100_000, random_state: int = 0, reason: str = "") -> LoadedData:
    """Seeded synthetic 1..5 ratings (ML-100K-like shape), labelled as synthetic."""
    n_users = max(20, int(round((n_ratings / 100) ** 0.5 * 30)))
    n_items = max(20, int(round(n_users * 1.7)))
    df = make_synthetic_ratings(n_users=n_users, n_items=n_items, n_ratings=n_ratings, random_state=random_state)
    return LoadedData("synthetic", df, (1, 5), f"SYNTHETIC ratings ({len(df):,})", synthetic=True, reason=reason)


def load_or_synthesize(name: str = "ml-100k", data_dir: str | Path | None = None, download: bool = True,
                       synthetic_size: int = 100_000, random_state: int = 0) -> LoadedData:
    """Load a data set from ``data_dir``/``MOGP_DATA``/Surprise's cache/its downloader.

    When all of these fail (e.g. offline with no data), fall back to seeded synthetic ratings of
    about the same size, marked ``synthetic`` with the loader's message (every place looked at,
    how to get the data) in ``reason``; the caller says so once.
    """
    try:
        df = load_ratings(name, data_dir=data_dir, download=download)
        return LoadedData(name, df, DATASETS[name].rating_scale, f"{name} ({len(df):,} ratings)",
                          titles=load_item_titles(name, data_dir))
    except (FileNotFoundError, OSError) as exc:
        return synthetic(synthetic_size, random_state, reason=str(exc))
