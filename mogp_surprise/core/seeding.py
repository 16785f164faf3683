"""Where a ``random_state`` becomes random numbers: one convention for every fit, draw and split."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

#: what a ``random_state`` may be besides None and an int >= 0 (each advanced by one draw per use)
RANDOM_SOURCES = (np.random.Generator, np.random.RandomState)


def valid_random_state(value: Any) -> bool:
    """Whether ``value`` is a ``random_state`` :func:`seeded_generator` takes: None, an int >= 0 (not a bool) or
    one of :data:`RANDOM_SOURCES` (each caller words its own error)."""
    return value is None or isinstance(value, RANDOM_SOURCES) or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0)


def seeded_generator(random_state: Any, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on ``device`` seeded from ``random_state``: an int; a numpy ``Generator`` or
    ``RandomState``, advanced by one draw; None: one draw of numpy's global random state, as scikit-learn and
    Surprise take None (so ``np.random.seed(0)`` makes fits repeat, Surprise's FAQ recipe). The one place a
    ``random_state`` becomes torch's random numbers."""
    if random_state is None:
        random_state = np.random.mtrand._rand  # np.random's own singleton
    if isinstance(random_state, np.random.RandomState):
        seed = random_state.randint(0, 2 ** 62, dtype=np.int64)
    else:
        rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
        seed = rng.integers(0, 2 ** 62)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    return generator
