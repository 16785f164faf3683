"""Where a ``random_state`` becomes random numbers: one convention for every fit, draw and split."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: what a ``random_state`` may be besides None and an int >= 0 (each advanced by one draw per use)
RANDOM_SOURCES = (np.random.Generator, np.random.RandomState)


def seeded_generator(random_state: Any, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on ``device`` seeded from ``random_state``: an int; a numpy ``Generator`` or
    ``RandomState``, advanced by one draw; None: one draw of numpy's global random state, as scikit-learn and
    Surprise take None (so ``np.random.seed(0)`` makes fits repeat, Surprise's FAQ recipe). The one place a
    ``random_state`` becomes torch's random numbers."""
    if isinstance(random_state, np.random.Generator):
        seed = random_state.integers(0, 2 ** 62)
    else:
        source = np.random.mtrand._rand if random_state is None else random_state  # (np.random's own singleton)
        source = source if isinstance(source, np.random.RandomState) else np.random.default_rng(source)
        seed = source.randint(0, 2 ** 62, dtype=np.int64) if isinstance(source, np.random.RandomState) \
            else source.integers(0, 2 ** 62)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    return generator
