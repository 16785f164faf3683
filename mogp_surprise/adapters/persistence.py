"""Explicit, versioned save/load for fitted MWGP and MWGPRegressor models.

A file is a ``torch.save`` dict of tensors and plain Python values only, so it loads with
``torch.load(weights_only=True)`` (no arbitrary code runs) and on a CPU-only machine whatever
device the model was trained on:

    {"format": "mogp_surprise", "format_version": 2, "package_version": "...",
     "estimator": "MWGP" | "MWGPRegressor", "hyper_params": {...}, "posterior": {...},
     "state": {...estimator specific: id maps, rating scale, training pairs for Surprise...},
     "checksum": "<SHA-256 of the rest, checked on load>"}

Older formats are read through explicit migrations (:data:`MIGRATIONS`, one per version step): format 1
(mogp_surprise 0.1) stored the posterior as a flat dict (migrated by
:meth:`~mogp_surprise.core.state.PosteriorState.from_dict`), and its files may lack hyper-parameters
added later, which describe a model without the feature (not today's default).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from .._version import __version__
from ..core.checkpoint import checksum, read_archive, write_atomically
from ..core.config import resolve_device
from ..core.posterior import MWGPPosterior
from ..core.seeding import RANDOM_SOURCES
from ._common import ADDED_HYPER_PARAMS, plain_id

FORMAT = "mogp_surprise"
FORMAT_VERSION = 2


def _plain_hyper_params(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in params.items():
        if isinstance(value, RANDOM_SOURCES):
            value = None  # a generator's state is not a hyper-parameter value; refits draw from numpy's global one
        elif isinstance(value, torch.device):
            value = str(value)
        elif isinstance(value, np.generic):
            value = value.item()
        out[name] = value
    return out


#: the plain values ``torch.load(weights_only=True)`` reads back, and so the ids a model file can hold
_LOADABLE = (str, int, float, bool, bytes, complex, type(None))


def loadable_id(value: Any) -> bool:
    """Whether a file holds ``value`` (a plain id, :func:`plain_id`) as it is: its exact type (an ``IntEnum`` is an
    int subclass the loader refuses), or a tuple of such."""
    return type(value) in _LOADABLE or (type(value) is tuple and all(map(loadable_id, value)))


def check_loadable_ids(what: str, ids: Any) -> None:
    """Refuse, before anything is written, an id that ``load`` could not read back (a ``pd.Timestamp``, a
    ``datetime.date``, a ``Decimal``, a ``frozenset``: fit takes any hashable id, a tensors-only file does not):
    the file would be written, replace the one there, and never load."""
    for value in ids:
        if not loadable_id(value):
            raise TypeError(f"cannot save a model whose {what} ids include {value!r} ({type(value).__name__}): a "
                            f"model file holds ids that are str, int, float, bool or tuples of them; convert the "
                            f"ids (e.g. str(), or a time column's .dt.strftime('%Y-%m')) and refit. Nothing was "
                            f"written")


def save_model(estimator: Any, path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``estimator`` (fitted) with its estimator-specific ``state`` to ``path``."""
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        "estimator": type(estimator).__name__,
        "hyper_params": _plain_hyper_params(estimator._hyper_params()),
        "posterior": estimator.posterior_.state_dict(),
        "training": {"loss_history": [float(x) for x in estimator.loss_history_],
                     "fit_time": float(estimator.fit_time_), "chosen_params": dict(estimator.chosen_params_)},
        "state": state,
    }
    names = getattr(estimator, "item_names_", None)
    if names is not None:  # optional display names of the items, e.g. movie titles
        # keys as the item ids are (int ids stay ints), str where a file could not hold them
        payload["item_names"] = {(k if loadable_id(k) else str(k)): str(v)
                                 for k, v in ((plain_id(k), v) for k, v in dict(names).items())}
    payload["checksum"] = checksum(payload)
    write_atomically(payload, path, "the model")


def load_payload(path: str | os.PathLike, expected: str) -> dict[str, Any]:
    """Read and check a saved model file; raise ``ValueError`` on a foreign or incompatible file."""
    payload = read_archive(os.fspath(path), f"{os.fspath(path)!r} is not a mogp_surprise model file")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not a mogp_surprise model file (no 'format': {FORMAT!r} entry)")
    version = payload.get("format_version")
    if not isinstance(version, int):
        raise ValueError(f"{os.fspath(path)!r} has no valid 'format_version' (got {version!r})")
    if version > FORMAT_VERSION:
        raise ValueError(f"{os.fspath(path)!r} was saved by mogp_surprise {payload.get('package_version')} in file "
                         f"format {version}; this version ({__version__}) reads format <= {FORMAT_VERSION}. "
                         "Upgrade mogp_surprise to load it.")
    if version < 1:
        raise ValueError(f"{os.fspath(path)!r} uses file format {version}, which this version cannot migrate "
                         f"(supported: 1 to {FORMAT_VERSION})")
    if "checksum" in payload and payload["checksum"] != checksum(payload):
        raise ValueError(f"{os.fspath(path)!r} is damaged: its contents do not match the checksum saved with them "
                         "(the file changed after it was written); save the model again from its source")
    while version < FORMAT_VERSION:
        payload = MIGRATIONS[version](payload)
        version = payload["format_version"]
    if payload.get("estimator") != expected:
        raise ValueError(f"{os.fspath(path)!r} holds a {payload.get('estimator')} model; load it with "
                         f"{payload.get('estimator')}.load, not {expected}.load")
    return payload


#: hyper-parameters added during format 1: a format-1 file without one was saved by a model that did not
#: have the feature, so it loads with the value that describes that model (not today's default)
_BEFORE_THEY_EXISTED = {"noise": "homoscedastic", "implicit": False, "embedding_uncertainty": False,
                        "early_stopping": False, "mf_rank": 0}


def _from_format_1(payload: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: hyper-parameters that did not exist yet get the value of the model the file holds, and a
    regressor's training ratings saved before fold-in existed (no values) are marked as such. The posterior
    (a flat format-1 dict) is migrated where it is read (:meth:`~mogp_surprise.core.state.PosteriorState.from_dict`)."""
    payload = dict(payload)
    payload["hyper_params"] = {**_BEFORE_THEY_EXISTED, **payload["hyper_params"]}
    state = dict(payload["state"])
    if state.get("rated") is not None and len(state["rated"]) == 2:
        state["rated"] = [*state["rated"], None]
    payload["state"], payload["format_version"] = state, 2
    return payload


#: how a file of each older format becomes one of the next
MIGRATIONS = {1: _from_format_1}


def load_model(cls: type, path: str | os.PathLike, device: Any = None) -> tuple[Any, dict[str, Any]]:
    """A ``cls`` instance with the saved hyper-parameters and posterior, plus its adapter-specific state."""
    payload = load_payload(path, expected=cls.__name__)
    # a hyper-parameter added after the file was written: the value that describes the model it holds
    estimator = cls(**{**ADDED_HYPER_PARAMS, **payload["hyper_params"]})
    post = MWGPPosterior.from_state_dict(payload["posterior"])
    estimator.posterior_ = post if device is None else post.to(device=resolve_device(device))
    estimator.loss_history_ = list(payload["training"]["loss_history"])
    estimator.fit_time_ = float(payload["training"]["fit_time"])
    estimator.chosen_params_ = dict(payload["training"].get("chosen_params") or estimator._as_trained())
    if payload.get("item_names") is not None:
        estimator.item_names_ = dict(payload["item_names"])
    return estimator, payload["state"]
