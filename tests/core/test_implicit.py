"""The normalised who-rated-what graph of implicit feedback (mogp_surprise.core.implicit); the sums it forms
and their gradient are checked through the module in ``test_model.py``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core.implicit import implicit_graph


def test_implicit_graph_counts_repeated_pairs_once() -> None:
    index = torch.tensor([[0, 1], [0, 1], [0, 2], [1, 2]])
    nu, _, ni, _ = implicit_graph(index, (2, 3), torch.float64)
    np.testing.assert_allclose(nu.to_dense().numpy(), [[0, 2 ** -0.5, 2 ** -0.5], [0, 0, 1]])
    np.testing.assert_allclose(ni.to_dense().numpy(), [[0, 0], [1, 0], [2 ** -0.5, 2 ** -0.5]])


@pytest.mark.parametrize("kernels", [True, False])
def test_the_row_sparse_path_reads_exact_sums_and_flushes_the_mean_gradient_of_its_steps(kernels,
                                                                                       monkeypatch) -> None:
    """Between two updates of the implicit tables, a row-sparse step's loss is the dense step's (the refreshed
    sums are exact), and the gradient flushed at the update is the mean of the dense steps' gradients; with
    numba's kernels and with torch's operations."""
    import mogp_surprise.core.optim as optim

    if kernels and optim.row_kernel() is None:
        pytest.skip("numba is not installed: the kernels are not used")
    if not kernels:
        for name in ("csr_product_kernels", "add_rows_kernel"):
            monkeypatch.setattr(optim, name, lambda: None)
    from mogp_surprise.core.objective import elbo
    from mogp_surprise.core.rows import Batch
    from tests.core._modules import random_module

    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, 7, (60,), generator=gen), torch.randint(0, 5, (60,), generator=gen)], 1)
    y = torch.randn(60, generator=gen, dtype=torch.float64)
    mod = random_module((7, 5), 2, 4, seed=1, scale=0.5, heteroscedastic=True, implicit=True, mf_rank=2)
    mod.set_implicit_graph(index)
    feeders = [t for _, spec, t in mod.tables() if spec.feeds is not None]
    assert len(feeders) == 4  # the GP inputs' and the bilinear factors' implicit tables, both sides
    batches = [index[k * 20:(k + 1) * 20] for k in range(3)]
    dense = []
    for rows, part in zip(batches, y.split(20)):
        loss = -elbo(mod, Batch(rows), part, 60, 1e-8)
        dense.append((float(loss), torch.autograd.grad(loss, feeders)))
    mod.implicit.start_accumulating()
    mod.refresh_implicit()
    for (rows, part), (value, _) in zip(zip(batches, y.split(20)), dense):
        loss = -elbo(mod, Batch(rows, sparse=True), part, 60, 1e-8)
        assert float(loss) == pytest.approx(value, rel=1e-12)
        loss.backward()
        assert all(t.grad is None for t in feeders)  # nothing reaches the tables per step
        mod.implicit.step_done()
    assert mod.flush_implicit()
    for k, table in enumerate(feeders):
        want = sum(grads[k] for _, grads in dense) / 3
        np.testing.assert_allclose(table.grad.numpy(), want.numpy(), rtol=1e-10, atol=1e-13)
    assert not mod.flush_implicit()  # nothing accumulated since


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernels", [True, False])
def test_graph_products_by_rows_by_columns_and_by_torch_agree(dtype, kernels, monkeypatch) -> None:
    """The row-sparse path's whole-graph products (numba by output rows, numba through the transpose when the
    table read is larger than the output, torch without numba) equal the dense product; ``out`` is reused."""
    import mogp_surprise.core.optim as optim
    from mogp_surprise.core.implicit import graph_product

    if kernels and optim.csr_product_kernels() is None:
        pytest.skip("numba is not installed: the kernels are not used")
    if not kernels:
        monkeypatch.setattr(optim, "csr_product_kernels", lambda: None)
    gen = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randint(0, 300, (2000,), generator=gen), torch.randint(0, 40, (2000,), generator=gen)], 1)
    nu, nu_t, ni, ni_t = implicit_graph(index, (300, 40), dtype)
    for matrix, transposed, rows in ((nu, nu_t, 40), (ni, ni_t, 300), (nu_t, nu, 300), (ni_t, ni, 40)):
        dense = torch.randn(rows, 5, generator=gen, dtype=dtype)
        want = matrix.to_dense() @ dense
        out = torch.full((matrix.shape[0], 5), float("nan"), dtype=dtype)
        got = graph_product(matrix, transposed, dense, out)
        assert got.data_ptr() == out.data_ptr()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(graph_product(matrix, transposed, dense), want)




@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_kernels_scale_their_product(threads) -> None:
    """numba's kernels by output rows and through the transpose give ``scale * matrix @ dense`` (the flush's mean
    over its steps), with the per-thread copies of the output kept from one product to the next."""
    from mogp_surprise.core import optim

    if optim.csr_product_kernels() is None:
        pytest.skip("numba is not installed: the kernels are not used")
    by_rows, by_columns = optim.csr_product_kernels()
    gen = torch.Generator().manual_seed(3)
    index = torch.stack([torch.randint(0, 300, (2000,), generator=gen), torch.randint(0, 40, (2000,), generator=gen)], 1)
    nu, nu_t, ni, ni_t = implicit_graph(index, (300, 40), torch.float64)
    for scale in (0.25, 1.0):
        for matrix, transposed in ((nu, nu_t), (ni, ni_t), (nu_t, nu), (ni_t, ni)):
            table = torch.randn(matrix.shape[1], 5, generator=gen, dtype=torch.float64)
            out = torch.full((matrix.shape[0], 5), float("nan"), dtype=torch.float64)
            kernel, source = (by_rows, matrix) if matrix.shape[1] <= matrix.shape[0] else (by_columns, transposed)
            kernel(source.crow_indices().numpy(), source.col_indices().numpy(), source.values().numpy(),
                   table.numpy(), out.numpy(), threads, scale)
            torch.testing.assert_close(out, scale * (matrix.to_dense() @ table))


def test_a_refresh_of_the_levels_read_forms_their_sums_and_leaves_the_rest() -> None:
    """``rows``: the output rows the next steps read are formed exactly (by numba's kernel where it is used, whole
    by torch otherwise); the others keep what they held, or zero in a new output."""
    from mogp_surprise.core.implicit import graph_product

    gen = torch.Generator().manual_seed(4)
    index = torch.stack([torch.randint(0, 300, (2000,), generator=gen), torch.randint(0, 40, (2000,), generator=gen)], 1)
    nu, nu_t, _, _ = implicit_graph(index, (300, 40), torch.float64)
    table = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    want = nu.to_dense() @ table
    rows = torch.tensor([3, 17, 150, 299])
    out = torch.full((300, 5), 7.0, dtype=torch.float64)
    got = graph_product(nu, nu_t, table, out, rows=rows)
    torch.testing.assert_close(got[rows], want[rows])
    fresh = graph_product(nu, nu_t, table, rows=rows)
    torch.testing.assert_close(fresh[rows], want[rows])
    others = torch.ones(300, dtype=torch.bool)
    others[rows] = False
    assert torch.all((got[others] == 7.0) | (got[others] == want[others]))
    assert torch.all((fresh[others] == 0.0) | (fresh[others] == want[others]))
