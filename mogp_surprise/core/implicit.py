"""SVD++-style implicit feedback: the normalised who-rated-what graph and the sums it forms.

A table that *feeds* another (:attr:`~.terms.Table.feeds`) adds, to the row of every user, the normalised
sum of its rows over the items the user rated, |N(u)|^{-1/2} sum_{j in N(u)} y_j (and likewise for items
over their raters). :class:`ImplicitFeedback` forms these sums for every feeding table of a side with one
sparse product, the tables side by side (one pass over the graph instead of one per table: 4.0 vs 5.6 ms
per training step on ML-1M, forward and backward).
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor


class ImplicitFeedback:
    """The graph of the training ratings (:meth:`set_graph`) and the implicit sums of the feeding tables."""

    def __init__(self) -> None:
        self.graph: tuple[Tensor, ...] | None = None

    def set_graph(self, index: Tensor, n_levels: tuple[int, int], dtype: torch.dtype) -> None:
        self.graph = implicit_graph(index[:, :2], n_levels, dtype)

    def sums(self, feeders: list[tuple[int, Tensor]]) -> list[Tensor]:
        """For every ``(side, table)`` (``side``: the factor fed; the table's rows are the other factor's
        levels), the normalised sums of its rows over every level of ``side``, (n_side, width) each."""
        if self.graph is None:
            raise RuntimeError("implicit feedback needs the training graph: call set_implicit_graph(training index) "
                               "first")
        out: list[Tensor | None] = [None] * len(feeders)
        for side in (0, 1):
            mine = [k for k, (s, _) in enumerate(feeders) if s == side]
            if not mine:
                continue
            tables = [feeders[k][1] for k in mine]
            joined = tables[0] if len(tables) == 1 else torch.cat(tables, dim=1)
            graph, graph_t = self.graph[2 * side], self.graph[2 * side + 1]
            total = _SparseProduct.apply(joined, graph, graph_t)
            start = 0
            for k, table in zip(mine, tables):
                out[k] = total[:, start:start + table.shape[1]]
                start += table.shape[1]
        return out  # type: ignore[return-value]


def implicit_graph(index: Tensor, n_levels: tuple[int, int], dtype: torch.dtype) -> tuple[Tensor, ...]:
    """CSR matrices N_u (users x items) and N_i (items x users), and their transposes.

    Every row is scaled by ``1 / sqrt(number of its entries)``, so ``N_u @ Y`` is, for every user,
    the normalised sum of the implicit item factors of the items the user rated (as in SVD++).
    Repeated (user, item) pairs count once.
    """
    n_u, n_i = n_levels
    pairs = torch.unique(index[:, 0].long() * n_i + index[:, 1].long())
    users, items = pairs // n_i, pairs % n_i

    def csr(rows: Tensor, cols: Tensor, n_rows: int, n_cols: int) -> tuple[Tensor, Tensor]:
        count = torch.bincount(rows, minlength=n_rows).to(dtype)
        vals = count.clamp_min(1.0).rsqrt()[rows]
        mat = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n_rows, n_cols), check_invariants=False)
        mat_t = torch.sparse_coo_tensor(torch.stack([cols, rows]), vals, (n_cols, n_rows), check_invariants=False)
        return mat.coalesce().to_sparse_csr(), mat_t.coalesce().to_sparse_csr()

    with warnings.catch_warnings():  # torch calls its sparse CSR support "beta"; it is used only as documented
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        nu, nu_t = csr(users, items, n_u, n_i)
        ni, ni_t = csr(items, users, n_i, n_u)
    return nu, nu_t, ni, ni_t


class _SparseProduct(torch.autograd.Function):
    """``sparse @ dense`` with the transpose kept as its own CSR matrix for the backward pass
    (torch's generic sparse backward transposes the matrix on every step)."""

    @staticmethod
    def forward(ctx, dense: Tensor, sparse: Tensor, sparse_t: Tensor) -> Tensor:
        ctx.sparse_t = sparse_t
        return sparse @ dense

    @staticmethod
    def backward(ctx, grad: Tensor):
        return ctx.sparse_t @ grad, None, None


