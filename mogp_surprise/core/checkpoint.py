"""Training checkpoints: everything needed to continue a fit exactly where it stopped.

A checkpoint is a ``torch.save`` dict of tensors and plain values (it loads with
``torch.load(weights_only=True)``), written atomically (a temporary file renamed over the old one)
by the process that writes (rank 0 in data-parallel training) every ``every`` epochs::

    {"format": "mogp_surprise-checkpoint", "format_version": 2, "fingerprint": {...},
     "phase": "choose" | "final", "epoch": completed epochs of that phase, "stop_after": ...,
     "validation": [...], "chosen": the final run's {"lr", "mf_reg"}, "tried": [[setting, validation curve], ...],
     "module": state_dict, "optimizer": Adam's (and SparseAdam's) state and the schedule,
     "generator": RNG state, "order": the current order of the training ratings,
     "history": [...], "epoch_times": [...], "checksum": SHA-256 of the rest (:func:`checksum`)}

``phase`` is "choose" while early stopping trains on its internal split to choose the number of
epochs (and settings: "tried" holds those finished before the running one), "final"
during the training run on every rating. Resuming restores the parameters, Adam's moments, the
learning-rate schedule, the random generator and the order of the ratings, so a resumed fit gives
the same model as one that was never interrupted. The fingerprint (the hyper-parameters that shape
training and a summary of the data) must match, or resuming is refused; so must the checksum (a checkpoint
damaged on disk resumed from wrong parameters without a word; one written before the checksum resumes unchecked).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .config import MWGPConfig
from .errors import check_bool
from .seeding import RANDOM_SOURCES

FORMAT, FORMAT_VERSION = "mogp_surprise-checkpoint", 2
#: hyper-parameters that do not change the trained model and may differ on resume
_FREE = ("verbose", "chunk_size", "device")
#: fingerprint entries added since format 2 began: a checkpoint written before them resumes on the others
_ADDED = ("data_digest",)


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
            raise ValueError(f"the epochs between checkpoints (`checkpoint_every`) must be an int >= 1, got "
                             f"{self.every!r}")
        check_bool("resume", self.resume)
        check_file_path(self.path, "the checkpoint")

    @classmethod
    def of(cls, path: str | os.PathLike | None, every: int = 1, resume: bool = False) -> "Checkpointing | None":
        """The adapters' ``fit(..., checkpoint=path, checkpoint_every=every, resume=resume)``: None without a path,
        which ``resume=True`` needs."""
        if check_bool("resume", resume) and path is None:
            raise ValueError("resume=True needs the checkpoint file to resume from: pass checkpoint=PATH")
        return None if path is None else cls(path, every, resume)

    def due(self, epoch: int, last: int) -> bool:
        """Whether to save after ``epoch`` completed epochs of a phase that ends at ``last``."""
        return epoch % self.every == 0 or epoch == last


def check_file_path(path: str | os.PathLike, what: str) -> str:
    """``path`` as a string once it can name a file to write ``what`` to (e.g. "the model"): ``ValueError`` for
    a folder, ``FileNotFoundError`` for a folder that does not exist, ``PermissionError`` for a folder where no
    file can be created (read-only, not ours) or a file there that may not be written; checked before a fit, so
    that a long fit is not lost at its end."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must go to a file path (a str or path-like), got {path!r}")
    target = os.fspath(path)
    if os.path.isdir(target):
        raise ValueError(f"cannot save {what} to {target!r}: it is a folder; give a file name in it")
    folder = os.path.dirname(os.path.abspath(os.path.realpath(target)))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot save {what} to {target!r}: the folder {folder!r} does not exist")
    try:  # what the write will do: a new file in the folder (permission bits and read-only mounts alike)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mogp-write-check-"):
            pass
    except OSError as exc:
        raise PermissionError(f"cannot save {what} to {target!r}: no file can be written in the folder {folder!r} "
                              f"({exc.strerror or exc})") from None
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise PermissionError(f"cannot save {what} to {target!r}: the file there is read-only (make it writable "
                              f"or give another path)")
    return target


def read_archive(path: str, not_readable: str) -> Any:
    """``torch.load`` (weights only) of a model file or checkpoint, both the zip archives ``torch.save`` writes;
    ``ValueError(f"{not_readable} (why)")`` in one line for any other file. The first bytes are read before torch,
    which for a pickle warns and then fails with many lines advising ``weights_only=False`` (that runs any code a
    pickle holds); ``FileNotFoundError`` for a missing file."""
    if os.path.isdir(path):
        raise ValueError(f"{not_readable} (it is a folder; give the file in it)")
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:1] == b"\x80":
        raise ValueError(f"{not_readable} (it is a pickle, as pickle.dump, surprise.dump.dump, joblib.dump or an old "
                         "torch.save write: read it with the tool that wrote it, and only if you trust where it came "
                         "from)")
    if head != b"PK\x03\x04":
        raise ValueError(f"{not_readable} (not a zip archive, as `save` and checkpoints write)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated archive, or one of other objects: say which, never a stack trace
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        why = ("a torch file holding objects other than tensors and plain values"
               if "weights only load failed" in first.lower()
               else f"a damaged or truncated archive: {type(exc).__name__}: {first.split('. ')[0]}")
        raise ValueError(f"{not_readable} ({why})") from None


def fingerprint(config: MWGPConfig, index: np.ndarray, ratings: np.ndarray, n_levels: tuple[int, ...]) -> dict:
    """What must agree between a checkpoint and the fit that resumes from it: the hyper-parameters that shape
    training (a numpy Generator as such: the checkpoint holds the state the fit continues from) and the data, by
    size, sums and a digest of every (index, rating) in order (the sums alone let two ratings swap places)."""
    params = {name: value if isinstance(value, (int, float, str, bool, type(None)))
              else f"a numpy {type(value).__name__}" if isinstance(value, RANDOM_SOURCES) else repr(value)
              for name, value in config.__dict__.items() if name not in _FREE}
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(index, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(ratings, dtype=np.float64).tobytes())
    return {"config": params, "n_ratings": int(index.shape[0]), "n_levels": [int(n) for n in n_levels],
            "ratings_sum": float(np.sum(ratings, dtype=np.float64)),
            "index_sum": [int(c) for c in np.sum(index, axis=0, dtype=np.int64)], "data_digest": digest.hexdigest()}


def save(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (never a half-written checkpoint), with its :func:`checksum`."""
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, **state}
    payload["checksum"] = checksum(payload)
    write_atomically(payload, path, "the checkpoint")


def checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of a payload's contents (every key but ``checksum``; tensors by dtype, shape and bytes), saved with
    a model file or checkpoint so that one damaged on disk or in transit is refused on load, not used: a flipped
    byte in a table loads as a NaN or a wrong number that nothing else would catch (files written before it have
    none and load unchecked)."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous()
            digest.update(f"T{data.dtype}{tuple(data.shape)}".encode())
            digest.update(data.reshape(-1).view(torch.uint8).numpy())  # the buffer itself, not a copy of it
        elif isinstance(value, dict):
            keys = sorted((key for key in value if key != "checksum"), key=repr)
            digest.update(f"D{len(keys)}".encode())
            for key in keys:
                feed(key)
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"L{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            digest.update(f"V{type(value).__name__}:{value!r};".encode())

    feed(payload)
    return digest.hexdigest()


def write_atomically(obj: Any, path: str | os.PathLike, what: str) -> None:
    """``torch.save`` ``obj`` (``what``: e.g. "the model") to ``path`` through a temporary file beside it, renamed
    over it once whole: a write that fails part way (a full disk, an interrupt) keeps the file that was there, and
    leaves no temporary file; its error is an ``OSError`` naming the path. A link is followed (its target is
    replaced, the link stays) and a file replaced keeps its permissions."""
    target = os.path.realpath(check_file_path(path, what))
    partial = f"{target}.partial-{os.getpid()}"
    try:
        torch.save(obj, partial)
        if os.path.exists(target):
            os.chmod(partial, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(partial, target)
    except BaseException as exc:  # torch reports a failed write as a RuntimeError; Ctrl-C must not leave the file
        with contextlib.suppress(OSError):
            os.remove(partial)
        if isinstance(exc, (OSError, RuntimeError)):
            raise OSError(f"could not write {what} to {os.fspath(path)!r}: {exc}") from None
        raise


def load(path: str | os.PathLike, expected: dict) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (None if there is none); ``ValueError`` if it is not one or was written
    for other data or hyper-parameters than ``expected`` (a :func:`fingerprint`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    state = read_archive(path, f"{path} is not a readable mogp_surprise checkpoint")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a mogp_surprise checkpoint")
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format version {state.get('format_version')} is not supported "
                         f"(this version reads {FORMAT_VERSION})")
    if "checksum" in state and state["checksum"] != checksum(state):
        raise ValueError(f"{path} is damaged: its contents do not match the checksum saved with them (the file "
                         "changed after it was written); remove it to start the fit afresh")
    saved = state["fingerprint"]
    diffs = [f"{k}: {saved['config'].get(k)!r} in the checkpoint, {v!r} now"
             for k, v in expected["config"].items() if saved["config"].get(k) != v]
    diffs += [f"{k}: {saved.get(k)!r} in the checkpoint, {expected[k]!r} now" for k in expected
              if k != "config" and (k in saved or k not in _ADDED) and saved.get(k) != expected[k]]
    if diffs:
        raise ValueError(f"{path} was written for other training data or hyper-parameters; cannot resume "
                         f"({'; '.join(diffs)}). Remove it or pass another checkpoint path")
    return state
