"""Training checkpoints: everything needed to continue a fit exactly where it stopped.

A checkpoint is a ``torch.save`` dict of tensors and plain values (it loads with
``torch.load(weights_only=True)``), written atomically (a temporary file renamed over the old one)
by the process that writes (rank 0 in data-parallel training) every ``every`` epochs::

    {"format": "mogp_surprise-checkpoint", "format_version": 2, "fingerprint": {...},
     "phase": "choose" | "final", "epoch": completed epochs of that phase, "stop_after": ...,
     "validation": [...], "chosen": the final run's {"lr", "mf_reg"}, "tried": [[setting, validation curve], ...],
     "module": state_dict, "optimizer": Adam's (and SparseAdam's) state and the schedule,
     "generator": RNG state, "order": the current order of the training ratings,
     "history": [...], "epoch_times": [...]}

``phase`` is "choose" while early stopping trains on its internal split to choose the number of
epochs (and settings: "tried" holds those finished before the running one), "final"
during the training run on every rating. Resuming restores the parameters, Adam's moments, the
learning-rate schedule, the random generator and the order of the ratings, so a resumed fit gives
the same model as one that was never interrupted. The fingerprint (the hyper-parameters that shape
training and a summary of the data) must match, or resuming is refused.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .config import MWGPConfig

FORMAT, FORMAT_VERSION = "mogp_surprise-checkpoint", 2
#: hyper-parameters that do not change the trained model and may differ on resume
_FREE = ("verbose", "chunk_size", "device")


@dataclass(frozen=True)
class Checkpointing:
    """Where and how often :func:`~.trainer.fit_mwgp` saves its training state.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file (overwritten every ``every`` epochs; its folder must exist).
    every : int, default=1
        Save after every ``every``-th epoch (and after the last).
    resume : bool, default=False
        Continue from ``path`` if it exists (a fresh start otherwise).
    """

    path: str | os.PathLike
    every: int = 1
    resume: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, (int, np.integer)) or self.every < 1:
            raise ValueError(f"`every` (epochs between checkpoints) must be an int >= 1, got {self.every!r}")

    def due(self, epoch: int, last: int) -> bool:
        """Whether to save after ``epoch`` completed epochs of a phase that ends at ``last``."""
        return epoch % self.every == 0 or epoch == last


def fingerprint(config: MWGPConfig, index: np.ndarray, ratings: np.ndarray, n_levels: tuple[int, ...]) -> dict:
    """What must agree between a checkpoint and the fit that resumes from it."""
    params = {name: value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)
              for name, value in config.__dict__.items() if name not in _FREE}
    return {"config": params, "n_ratings": int(index.shape[0]), "n_levels": [int(n) for n in n_levels],
            "ratings_sum": float(np.sum(ratings, dtype=np.float64)),
            "index_sum": [int(c) for c in np.sum(index, axis=0, dtype=np.int64)]}


def save(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (never a half-written checkpoint)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **state}, tmp)
    os.replace(tmp, path)


def load(path: str | os.PathLike, expected: dict) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (None if there is none); ``ValueError`` if it is not one or was written
    for other data or hyper-parameters than ``expected`` (a :func:`fingerprint`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which, never a stack trace
        raise ValueError(f"{path} is not a readable mogp_surprise checkpoint ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a mogp_surprise checkpoint")
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format version {state.get('format_version')} is not supported "
                         f"(this version reads {FORMAT_VERSION})")
    saved = state["fingerprint"]
    diffs = [f"{k}: {saved['config'].get(k)!r} in the checkpoint, {v!r} now"
             for k, v in expected["config"].items() if saved["config"].get(k) != v]
    diffs += [f"{k}: {saved[k]!r} in the checkpoint, {expected[k]!r} now"
              for k in expected if k != "config" and saved.get(k) != expected[k]]
    if diffs:
        raise ValueError(f"{path} was written for other training data or hyper-parameters; cannot resume "
                         f"({'; '.join(diffs)}). Remove it or pass another checkpoint path")
    return state
