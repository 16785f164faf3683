"""Reading rows of per-level tables (mogp_surprise.core.rows): the transposed sums of a gather's gradient,
the dense gather and the distinct rows of a minibatch (the row-sparse gather: ``test_optim.py``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.rows import add_rows, distinct_rows, gather_rows, sorted_distinct


@pytest.mark.parametrize("width", [None, 1, 8, 16])
def test_add_rows_is_index_add_bit_for_bit(width) -> None:
    gen = torch.Generator().manual_seed(0)
    index = torch.randint(0, 37, (500,), generator=gen)
    values = torch.randn((500,) if width is None else (500, width), generator=gen)
    reference = values.new_zeros((37, *values.shape[1:])).index_add_(0, index, values)
    assert torch.equal(add_rows(37, index, values), reference)


def test_gather_rows_has_the_gradient_of_index_select() -> None:
    gen = torch.Generator().manual_seed(1)
    index = torch.randint(0, 9, (40,), generator=gen)
    for shape in ((9,), (9, 3)):
        table = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
        weights = torch.randn((40, *shape[1:]), generator=gen, dtype=torch.float64)
        out = gather_rows(table, index)
        assert torch.equal(out, table.detach()[index])
        (grad,) = torch.autograd.grad((out * weights).sum(), table)
        (reference,) = torch.autograd.grad((table.index_select(0, index) * weights).sum(), table)
        assert grad.is_contiguous() and torch.allclose(grad, reference, rtol=0, atol=1e-12)
        assert torch.autograd.gradcheck(lambda t: gather_rows(t, index), (table,))


@pytest.mark.parametrize("n_rows, size, dtype", [(10, 7, torch.int64), (1, 1, torch.int64), (50, 20_000, torch.int64),
                                                  (1_000_000, 8192, torch.int64), (300, 1000, torch.int32),
                                                  (2 ** 61, 100, torch.int64)])  # too large to pack: torch.unique
def test_distinct_rows_is_torch_unique(n_rows, size, dtype) -> None:
    gen = torch.Generator().manual_seed(size)
    for _ in range(3):
        index = torch.randint(0, n_rows, (size,), generator=gen, dtype=torch.int64).to(dtype)
        rows, inverse = distinct_rows(index)
        expected = torch.unique(index, return_inverse=True)
        assert torch.equal(rows, expected[0]) and torch.equal(inverse, expected[1])
        assert rows.dtype == index.dtype and inverse.dtype == index.dtype


def test_sorted_distinct_is_numpys_unique() -> None:
    """The sort-and-mask distinct values equal np.unique's: repeats, negatives, one value, none."""
    gen = np.random.default_rng(4)
    for keys in (gen.integers(-50, 50, 1000), gen.integers(0, 10 ** 12, 5000), np.full(7, 3), np.empty(0, np.int64)):
        got = sorted_distinct(keys)
        np.testing.assert_array_equal(got, np.unique(keys))
        assert got.dtype == keys.dtype
