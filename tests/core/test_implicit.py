"""The normalised who-rated-what graph of implicit feedback (mogp_surprise.core.implicit); the sums it forms
and their gradient are checked through the module in ``test_model.py``."""
from __future__ import annotations

import numpy as np
import torch

from mogp_surprise.core.implicit import implicit_graph


def test_implicit_graph_counts_repeated_pairs_once() -> None:
    index = torch.tensor([[0, 1], [0, 1], [0, 2], [1, 2]])
    nu, _, ni, _ = implicit_graph(index, (2, 3), torch.float64)
    np.testing.assert_allclose(nu.to_dense().numpy(), [[0, 2 ** -0.5, 2 ** -0.5], [0, 0, 1]])
    np.testing.assert_allclose(ni.to_dense().numpy(), [[0, 0], [1, 0], [2 ** -0.5, 2 ** -0.5]])
