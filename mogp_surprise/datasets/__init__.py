"""Rating data: loaders for MovieLens / Jester and a seeded synthetic generator.

Only numpy and pandas are imported here; Surprise is imported lazily by the functions that build
a ``surprise.Dataset`` or download through Surprise.
"""
from __future__ import annotations

from .loaders import (DATA_ENV, DATASETS, DatasetSpec, FileLayout, describe_ratings,
                      find_data_dir, load_dataset, load_item_titles, load_ratings, read_ratings_file,
                      surprise_cache_dir, to_surprise_dataset)
from .synthetic import make_synthetic_ratings

__all__ = ["DATA_ENV", "DATASETS", "DatasetSpec", "FileLayout", "describe_ratings", "find_data_dir",
           "load_dataset", "load_item_titles", "load_ratings", "make_synthetic_ratings", "read_ratings_file",
           "surprise_cache_dir", "to_surprise_dataset"]
